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
from isozyme.enzyme_ad.prepare import prepare_for_differentiation
from isozyme.enzyme_ad.reverse import reverse_mode
from isozyme.optimize.pass_manager import PassOptions, run_passes
from isozyme.ssa.ir import Function, Module
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
    if opt == "post":
        run_passes(module, ["O2"], pass_options)
    return_block = prepare_for_differentiation(module, function, optimized=opt == "post")
    activity = analyze_activity(function, activities)
    result = reverse_mode(function, activity, return_block)
    module.functions.clear()  # the callees are inlined
    module.add(result.function)
    verify(module)
    if on_stage is not None:
        on_stage("grad", module)
    if opt != "none":
        run_passes(module, ["O2"], pass_options)
    return Gradient(module, result.function, activity, result.tapes)
