"""Enzyme-style automatic differentiation (DESIGN section 5): reverse mode (`diffe_<f>`), forward mode
(`fwddiffe_<f>`), custom rules and split mode (`augmented_<f>`/`reverse_<f>`), and the gradient pipelines.

May import: `isozyme.ssa`, `isozyme.optimize` (and no other isozyme package). Its modules in layer order,
highest first: a module imports only from the layers below its own, never from its own layer, so there are
no import cycles (`lint-imports` checks it with a `layers` contract):

    gradient:             the pipelines (`opt="post" | "pre" | "none"`): prepare, differentiate, optimize
  one layer, independent of each other:
    forward:              forward mode, `fwddiffe_<f>`, from the tangent rules
    reverse:              reverse mode, `diffe_<f>`: the forward pass, adjoint blocks and the reverse sweep
  one layer each:
    cache:                the cache (tape) planner's rewrite: primal lookups, indexed and stack tapes
    primal_availability:  which primal values the reverse pass has without a tape; a tape's dimensions
    prepare:              the primal in the shape AD needs (inlining, one return, loop counters `LoopFrame`)
    custom:               custom derivative rules and split mode (`augmented_<f>`/`reverse_<f>`)
  the lowest layer, independent of each other:
    activity:             activity analysis: which values and which arrays' memory carry derivatives
    errors:               `DifferentiationError`: the construct AD cannot differentiate, and its source line
    rules:                the derivative rule tables keyed by op (reverse rules, tangent rules)
"""
