"""Enzyme-style automatic differentiation (DESIGN section 5): reverse mode (`diffe_<f>`), forward mode
(`fwddiffe_<f>`), custom rules and split mode (`augmented_<f>`/`reverse_<f>`), and the gradient pipelines.

May import: `isozyme.ssa`, `isozyme.optimize` (and no other isozyme package).

Modules in layer order, highest first: a `- ` line starts a layer, the lines under it are the other modules of
that layer, which import each other not at all; each module imports only modules of lower layers
(`lint-imports` checks it against the contracts in `pyproject.toml`).
- `gradient`: the pipelines (`opt="post" | "pre" | "none"`): prepare, differentiate, optimize
- `forward`: forward mode, `fwddiffe_<f>`, from the tangent rules
  `reverse`: reverse mode, `diffe_<f>`: the forward pass, adjoint blocks and the reverse sweep
- `cache`: the cache (tape) planner's rewrite: primal lookups, indexed and stack tapes
- `primal_availability`: which primal values the reverse pass has without a tape; a tape's dimensions
- `triangular_index`: a packed triangle's running index as a closed form of its column counter
- `prepare`: the primal in the shape AD needs (inlining, one return, loop counters `LoopFrame`)
- `custom`: custom derivative rules and split mode (`augmented_<f>`/`reverse_<f>`)
- `activity`: activity analysis: which values and which arrays' memory carry derivatives
  `errors`: `DifferentiationError`: the construct AD cannot differentiate, and its source line
  `rules`: the derivative rule tables keyed by op (reverse rules, tangent rules)
"""
