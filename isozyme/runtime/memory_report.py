"""`iz.show_memory`: the arena layout of a kernel's local arrays and tapes (`optimize/memory_reuse.py`).

    print(iz.show_memory(heat, activity=("dup", "active", "const"), u=np.zeros(1000), steps=50))

The plan is made for the entry function: the kernel optimized (`activity=None`), or its gradient
`diffe_<f>` for `activity`, the same function `iz.show_ir(kernel, stage="grad-opt", activity=...)` prints.
Keyword arguments give the kernel's arguments by parameter name (numpy arrays, shapes as tuples, an int
for a 1-D array's length, scalars' values); a gradient's shadow `d_<x>` takes the shape of `<x>`. Buffers
whose sizes depend on arguments not given are listed as symbolic and left out of the totals.

The layout is the one codegen makes (`place_in_arena`, on both backends): its slots, the bytes it uses at
these sizes, the bytes requested without reuse (every buffer its own block, an alloc in a loop once), the
fraction saved, and the best-fit packing's figure for comparison. Arrays allocated in a `prange` loop are
not in the arena: each work item has its own copy (a CPU task one at a time, OpenCL one per iteration), and
a line gives the bytes of one copy of them all. For a gradient, a line gives the naive allocation: the bytes
requested by the gradient as AD emitted it, before the optimizations after AD (fusion, scalarized and
privatized arrays, sunk allocs), every buffer its own block.
"""

from __future__ import annotations

from collections.abc import Sequence

from isozyme.enzyme_ad.activity import ArgActivity
from isozyme.enzyme_ad.custom import clone_function
from isozyme.enzyme_ad.gradient import OPT_MODES
from isozyme.optimize.memory_extents import ArgumentValue
from isozyme.optimize.memory_peak import memory_frame
from isozyme.optimize.memory_reuse import plan_memory
from isozyme.runtime.compiled_derivatives import differentiate, parse_activity
from isozyme.runtime.kernel import DEFAULT_PIPELINE, Kernel
from isozyme.runtime.thread_pool import get_num_threads
from isozyme.ssa.ir import Function, Module

PRIMAL_PIPELINES = {"post": DEFAULT_PIPELINE, "pre": DEFAULT_PIPELINE, "none": "O0"}
"""The pipeline a primal kernel runs for each `opt` mode: "pre" and "post" differ only for derivatives."""


def _entry_function(kernel: Kernel, activity: Sequence[str | ArgActivity] | None, opt: str
                    ) -> tuple[Function, Function | None]:
    """The function the plan is made for, and for a gradient a copy of it as AD emitted it."""
    if activity is None:
        return kernel.optimized(PRIMAL_PIPELINES.get(opt, opt))[1], None
    if opt not in OPT_MODES:
        raise ValueError(f"opt must be one of {', '.join(map(repr, OPT_MODES))}, not {opt!r}")
    emitted: list[Function] = []

    def keep_emitted(stage: str, module: Module) -> None:
        name = f"diffe_{kernel.definition.name}"
        if stage == "grad" and name in module.functions:  # a copy, out of the module: the passes after AD
            emitted.append(clone_function(module, module[name], f"{name}.emitted"))  # leave it as it is
            del module.functions[f"{name}.emitted"]
    function = differentiate(kernel, parse_activity(kernel, activity), opt, keep_emitted).function
    return function, (emitted[0] if emitted else None)


def _entry_sizes(function: Function, given: dict[str, ArgumentValue]) -> dict[str, ArgumentValue]:
    """`given` keyed by the entry's argument names, shadows `d_<x>` sized like `<x>`."""
    sizes = {}
    for arg in function.args:
        if arg.name in given:
            sizes[arg.name] = given[arg.name]
        elif arg.name and arg.name.startswith("d_") and arg.type.is_array and arg.name[2:] in given:
            sizes[arg.name] = given[arg.name[2:]]
    return sizes


def show_memory(kernel: Kernel, activity: Sequence[str | ArgActivity] | None = None, opt: str = "post",
                **sizes_or_args: ArgumentValue) -> str:
    """The memory plan of `kernel` (or of its gradient for `activity`) as a table (module docstring)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"show_memory needs an @iz.kernel, got {type(kernel).__name__}")
    function, emitted = _entry_function(kernel, activity, opt)
    sizes = _entry_sizes(function, sizes_or_args) if sizes_or_args else None
    frame = memory_frame(function, sizes)
    header, rest = frame.plan.format().split("\n", 1)
    lines = [header]
    if emitted is not None:
        naive = plan_memory(emitted, _entry_sizes(emitted, sizes_or_args) if sizes_or_args else None)
        lines.append(f"; as AD emitted it (before the optimizations after AD): {len(naive.buffers)} buffer(s), "
                     f"requested {naive.requested} B")
    threads = get_num_threads()
    lines.append(f"; peak with {threads} thread(s): {frame.peak(threads)} B"
                 + ("" if frame.exact else " at least (some sizes are not known)")
                 + ": the arena, a copy of the per-work-item arrays per thread, growable arrays at their final "
                 "size, and the largest peak of a call")
    if frame.calls or frame.growable:
        lines += [f";   {line}" for line in frame.lines(threads)]
    return "\n".join([*lines, rest])
