"""The gradient pipeline: from a kernel's lowered module to an optimized `diffe_<f>` (DESIGN 1.3 and 5).

    opt="post"  O2 on the module, prepare (inline, clean up, loop-canon), AD, O2 on diffe_f   (Enzyme)
    opt="pre"   prepare (inline, loop-canon), AD, O2 on diffe_f       (the baseline of Enzyme's 4.2x)
    opt="none"  prepare (inline, loop-canon), AD                       (adjoints stay in memory slots)

The same O2 pipeline runs before and after AD, so `post` and `pre` differ only in whether the primal was
optimized before it was differentiated: for `norm`, post differentiates the program in which LICM hoisted
`mag(x, n)` out of the loop (O(n)), pre the one that calls it in every iteration (O(n^2)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from isozyme.enzyme_ad.activity import Activity, ArgActivity, analyze_activity
from isozyme.enzyme_ad.cache import Tape
from isozyme.enzyme_ad.custom import (
    SPLIT_RULE,
    clone_function,
    custom_forward_rule,
    custom_rule,
    differentiated_activities,
    wrap_for_custom_rule,
)
from isozyme.enzyme_ad.forward import check_forward_activities, forward_mode, forward_parameters
from isozyme.enzyme_ad.prepare import prepare_for_differentiation
from isozyme.enzyme_ad.reverse import GradientParameter, gradient_parameters, reverse_mode
from isozyme.optimize.call_graph import bottom_up_components, call_sites
from isozyme.optimize.loop_fusion import fusion_enabled
from isozyme.optimize.pass_manager import PassOptions, run_passes
from isozyme.ssa.flags import CUSTOM_VJP_FLAG, NOINLINE
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.types import Type
from isozyme.ssa.verifier import verify

OPT_MODES = ("post", "pre", "none")
"""Where optimization happens relative to differentiation (DESIGN 1.3)."""


@dataclass(eq=False)
class Gradient:
    """A differentiated kernel."""

    module: Module
    """The module given, now holding `function` alone."""
    function: Function
    """`diffe_<f>`."""
    activity: Activity
    """The activity analysis the derivative was built from (on the prepared primal)."""
    tapes: list[Tape] = field(default_factory=list)
    """What the reverse pass caches."""
    stages: dict[str, str] = field(default_factory=dict)
    """IR text captured along the way when asked for: "grad" (right after AD)."""


def check_opt(opt: str) -> str:
    if opt not in OPT_MODES:
        raise ValueError(f"opt must be one of {', '.join(map(repr, OPT_MODES))}, not {opt!r}")
    return opt


def reverse_gradient(module: Module, function: Function, activities: Sequence[ArgActivity | str], opt: str = "post",
                     pass_options: PassOptions | None = None,
                     on_stage: Callable[[str, Module], None] | None = None) -> Gradient:
    """Differentiate `function` of the lowered `module` in reverse mode (module docstring). The module is
    rewritten to hold `diffe_<f>` alone. `on_stage("grad", module)` is called right after AD, before the
    optimization that follows."""
    check_opt(opt)
    if custom_rule(function) is not None:
        function = wrap_for_custom_rule(module, function)
    # func-attrs is an analysis: the calls kept for custom rules need their callees' memory flags
    run_passes(module, ["O2" if opt == "post" else "func-attrs"], pass_options)
    split_mode_rules(module, optimized=opt == "post")
    return_block = prepare_for_differentiation(module, function, optimized=opt == "post", keep_custom=True)
    activity = analyze_activity(function, activities)
    result = reverse_mode(function, activity, return_block)
    finish_derivative(module, result.function, "grad", opt, pass_options, on_stage)
    return Gradient(module, result.function, activity, result.tapes)


FUSION_ROUNDS = 6
"""Rounds of jump threading, loop fusion and O2 after AD, at most (one is enough unless O2 opens more
fusions: inner loops fuse once the loops around them have)."""


def finish_derivative(module: Module, derivative: Function, stage: str, opt: str,
                      pass_options: PassOptions | None, on_stage: Callable[[str, Module], None] | None) -> None:
    """After AD: keep `derivative` and what it calls, recompute memory flags (a derivative writes its
    shadows), verify, report `stage`, and optimize unless opt="none": O2, then loop fusion (the same for
    "post" and "pre": it is not what they compare; `ISOZYME_LOOP_FUSION=0` leaves it out) and O2 again,
    in rounds while loops fuse; then the temporaries fusion made private to one iteration become values,
    and the arrays of which each iteration of a `prange` loop uses a slice of its own are allocated in it
    (`optimize/array_privatization.py`; off with fusion). Last, allocs move down to their uses (memory
    reuse then lets a shadow share the bytes of arrays that died in the forward sweep), and the module is
    verified again."""
    keep_only_callees_of(module, derivative)
    run_passes(module, ["func-attrs"], pass_options)
    verify(module)
    if on_stage is not None:
        on_stage(stage, module)
    if opt != "none":
        run_passes(module, ["O2"], pass_options)
        if fusion_enabled():
            fuse_loops(module, pass_options)
            run_passes(module, ["privatize-arrays"], pass_options)  # an iteration's slices, its own arrays
        run_passes(module, ["sink-allocs"], pass_options)  # shadows start where the reverse sweep does
        verify(module)  # what every backend runs: invalid SSA the interpreter could run is refused there too


def fuse_loops(module: Module, pass_options: PassOptions | None) -> None:
    """Jump threading, loop fusion and O2 in rounds, then scalarize-temporaries (and O2) when anything
    fused. Jump threading folds the guards that AD repeats (`optimize/jump_threading.py`), which would
    otherwise stand between the loops to fuse."""
    fused = False
    for _ in range(FUSION_ROUNDS):  # O2 cleans up the fused bodies, which may let more loops fuse
        run_passes(module, ["jump-threading", "simplify-cfg"], pass_options)  # AD's repeated guards
        if not run_passes(module, ["loop-fusion"], pass_options):
            break
        run_passes(module, ["O2"], pass_options)  # merges the fused bodies' blocks, forwards stores
        fused = True
    if fused and run_passes(module, ["scalarize-temporaries"], pass_options):
        run_passes(module, ["O2"], pass_options)


def split_mode_rules(module: Module, optimized: bool) -> None:
    """Give every kernel that must not be inlined (`inline=False`) and has no custom rule a generated one:
    `diffe_<g>` with every float parameter differentiated, which recomputes g's forward pass from its
    arguments and then reverses it (custom.py, split mode). Callees first, so that a kernel's rule calls
    the rules of the kernels it calls."""
    for component in bottom_up_components(module):
        for callee in component:
            if NOINLINE not in callee.flags or custom_rule(callee) is not None or SPLIT_RULE in callee.flags:
                continue
            clone = clone_function(module, callee, f"diffe_{callee.name}")
            return_block = prepare_for_differentiation(module, clone, optimized, keep_custom=True)
            activity = analyze_activity(clone, differentiated_activities([arg.type for arg in clone.args]))
            name = clone.name
            rule = reverse_mode(clone, activity, return_block).function
            del module.functions[name]
            rule.name = name
            rule.flags |= {SPLIT_RULE, NOINLINE}  # kept a call: its local arrays are freed when it returns
            module.add(rule)
            callee.flags.add(f"{CUSTOM_VJP_FLAG}{name}")


def keep_only_callees_of(module: Module, function: Function) -> None:
    """Leave in `module` the function `function` (renamed by AD) and the functions it still calls, at any
    depth (kernels with custom rules and their rules); the others were inlined."""
    kept, work = {}, [function]
    while work:
        current = work.pop()
        if current.name not in kept:
            kept[current.name] = current
            work.extend(call.callee for call in call_sites(current))  # type: ignore[misc]
    module.functions.clear()
    for name in [function.name, *sorted(set(kept) - {function.name})]:
        module.add(kept[name])


# --- forward mode and forward-over-reverse ---------------------------------------------------------------------
#
#   forward_derivative, opt="post"  O2, prepare (inline, clean up, loop-canon), forward mode, O2
#                       opt="pre"   prepare (inline, loop-canon), forward mode, O2
#                       opt="none"  prepare (inline, loop-canon), forward mode
#   hessian_vector_product: reverse mode as above ("post": O2, prepare, AD, O2; "pre" and "none": prepare,
#                       AD), prepare again (inlining the reverse rules diffe_<f> calls), forward mode over
#                       diffe_<f>, then O2 unless opt="none".


@dataclass(eq=False)
class ForwardDerivative:
    """A kernel differentiated in forward mode: `fwddiffe_<f>`, or `fwddiffe_diffe_<f>` for an HVP."""

    module: Module
    """The module given, now holding `function` alone."""
    function: Function
    """The forward-mode derivative."""
    activity: Activity
    """The activity analysis of the function forward mode rewrote."""


def forward_derivative(module: Module, function: Function, activities: Sequence[ArgActivity | str],
                       opt: str = "post", pass_options: PassOptions | None = None,
                       on_stage: Callable[[str, Module], None] | None = None) -> ForwardDerivative:
    """`fwddiffe_<f>` of `function` of the lowered `module` (forward.py; the pipeline in the comment above).
    The module is rewritten to hold it alone. `on_stage("fwd", module)` is called right after AD."""
    check_opt(opt)
    check_forward_activities(function, activities)
    if custom_forward_rule(function) is not None:
        function = wrap_for_custom_rule(module, function)
    if opt == "post":
        run_passes(module, ["O2"], pass_options)
    prepare_for_differentiation(module, function, optimized=opt == "post", keep_forward_rules=True)
    activity = analyze_activity(function, activities)
    return _forward_then_optimize(module, function, activity, opt, pass_options, on_stage)


def _forward_then_optimize(module: Module, function: Function, activity: Activity, opt: str,
                           pass_options: PassOptions | None,
                           on_stage: Callable[[str, Module], None] | None) -> ForwardDerivative:
    forward_mode(function, activity)
    finish_derivative(module, function, "fwd", opt, pass_options, on_stage)
    return ForwardDerivative(module, function, activity)


@dataclass(frozen=True)
class HvpParameter:
    """One parameter of `fwddiffe_diffe_<f>`, the Hessian-vector product of a float-returning kernel."""

    name: str
    type: Type
    role: str
    """"primal" (the kernel's argument), "direction" (its part of v), "gradient" (reverse mode's output for
    it: the shadow `d_x` of an array, the one-element `d_a` of a float scalar), "hvp" (the tangent of that
    output: its part of H v) or "seed" (`%differet`, 1)."""
    position: int
    """The kernel parameter it belongs to (-1 for the seed)."""


def hvp_reverse_activities(params: Sequence[tuple[str, Type]], positions: Sequence[int]) -> tuple[ArgActivity, ...]:
    """Reverse mode's activities for an HVP: Duplicated for the arrays of `positions`, Active for their
    float scalars, Const for the rest."""
    def kind(position: int, ty: Type) -> ArgActivity:
        if position not in positions:
            return ArgActivity.CONST
        return ArgActivity.DUP if ty.is_array else ArgActivity.ACTIVE
    return tuple(kind(position, ty) for position, (_, ty) in enumerate(params))


def _hvp_forward_activities(params: Sequence[tuple[str, Type]], return_type: Type, positions: Sequence[int]
                            ) -> list[tuple[GradientParameter, str, int, ArgActivity]]:
    """Per parameter of `diffe_<f>`: the parameter, its `HvpParameter` role before forward mode adds the
    tangents ("primal", "gradient" or "seed"), its kernel position, and its activity in forward mode."""
    result = []
    position = -1
    for param in gradient_parameters(params, hvp_reverse_activities(params, positions), return_type):
        if param.role == "primal":
            position += 1
        role = {"primal": "primal", "shadow": "gradient", "adjoint": "gradient"}.get(param.role, "seed")
        differentiated = role == "gradient" or (role == "primal" and position in positions)
        result.append((param, role, -1 if role == "seed" else position,
                       ArgActivity.DUP if differentiated else ArgActivity.CONST))
    return result


def hvp_parameters(params: Sequence[tuple[str, Type]], return_type: Type,
                   positions: Sequence[int]) -> list[HvpParameter]:
    """The parameters of `fwddiffe_diffe_<f>`: forward mode over `diffe_<f>` with the kernel's arguments of
    `positions` Duplicated (tangent: the direction v), their gradient outputs Duplicated (tangent: H v, from
    0 on entry), everything else Const and the return value inactive."""
    gradient = _hvp_forward_activities(params, return_type, positions)
    forward = forward_parameters([(p.name, p.type) for p, _, _, _ in gradient], [a for *_, a in gradient],
                                 return_type, returns_active=False)
    result: list[HvpParameter] = []
    index = -1
    for param in forward:
        if param.role == "primal":
            index += 1
            role = gradient[index][1]
        else:
            role = "direction" if gradient[index][1] == "primal" else "hvp"
        result.append(HvpParameter(param.name, param.type, role, gradient[index][2]))
    return result


def hessian_vector_product(module: Module, function: Function, positions: Sequence[int], opt: str = "post",
                           pass_options: PassOptions | None = None,
                           on_stage: Callable[[str, Module], None] | None = None) -> ForwardDerivative:
    """`fwddiffe_diffe_<f>` (`hvp_parameters`): forward mode over the reverse-mode gradient of the
    float-returning `function` with respect to its parameters at `positions` (the pipeline in the comment
    above). `on_stage` sees "grad" and then "fwd"."""
    check_opt(opt)
    if not function.return_type.is_float:
        raise TypeError(f"@{function.name} returns {function.return_type}: a Hessian needs a float return value")
    params = [(arg.name or f"arg{arg.index}", arg.type) for arg in function.args]
    activities = [a for *_, a in _hvp_forward_activities(params, function.return_type, positions)]
    reverse_opt = "post" if opt == "post" else "none"  # "pre": the optimization comes after both
    gradient = reverse_gradient(module, function, hvp_reverse_activities(params, positions), reverse_opt,
                                pass_options, on_stage)
    # diffe_<f> may call reverse rules (custom ones, split mode's): forward mode differentiates their bodies
    prepare_for_differentiation(module, gradient.function, optimized=opt == "post")
    activity = analyze_activity(gradient.function, activities, returns_active=False)
    return _forward_then_optimize(module, gradient.function, activity, opt, pass_options, on_stage)
