"""The peak of a function's local memory with its calls' (`iz.show_memory` prints it below the plan).

    frame = memory_frame(function, sizes)   # sizes as `plan_memory` takes them
    frame.peak(threads), frame.exact, frame.lines(threads)

What a function holds while it runs: its arena (the slot layout of `memory_reuse.plan_memory`), a copy of
its per-work-item arrays for each thread (arrays allocated in a `prange` loop), and its growable arrays
(split mode's tapes, stacks of loops of unknown trip count) at the size they reach by the end of its run.
A call adds the callee's peak while it runs, so the peak is the function's own memory plus the largest
peak among its calls (a split-mode gradient calls `augmented_<g>` in the forward pass, which runs g with g's
local arrays, and `reverse_<g>` in the reverse, which holds the restored copies and runs `diffe_<g>`).

Sizes flow into a callee from the call: the shape of an array argument (a given argument's, or a local
array's extents), the value of a scalar argument when it is known at the start (`memory_extents.py`). A
growable array's final size is known when each `grow` of it asks for a size known at the start, or for
`(r + 1) * n` elements with n known at the start (one slice per run, as split mode grows its tapes) and
every loop around the grow counted with a trip count known at the start: n times those trip counts. What
is not known is left out and makes the peak a lower bound (`exact` is False, and the lines say so).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from isozyme.optimize.memory_extents import ArgumentValue, ExtentEvaluator, Unevaluated, argument_values
from isozyme.optimize.memory_layout import BufferStatus, MemoryPlan
from isozyme.optimize.memory_reuse import plan_memory
from isozyme.ssa.flags import is_growable_alloc
from isozyme.ssa.ir import Argument, Constant, Function, Instruction, Value
from isozyme.ssa.loops import LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.trip_count import TripCount, analyze_trip_count

MAX_DEPTH = 16
"""Calls deeper than this (recursion) are not followed: the peak is then a lower bound."""


@dataclass(eq=False)
class Frame:
    """A function's memory at given sizes, and its calls' (module docstring)."""

    function: Function
    plan: MemoryPlan
    growable: dict[str, int | None] = field(default_factory=dict)
    """Each growable array's bytes at the end of the run (None: not known)."""
    calls: list[tuple[Instruction, Frame | None]] = field(default_factory=list)
    """Each call of a function that holds memory, and its frame (None: not followed)."""

    def own(self, threads: int) -> int:
        """The arena, a copy per thread of the per-work-item arrays, and the known growable arrays."""
        return self.plan.used + threads * self.plan.per_work_item + sum(b or 0 for b in self.growable.values())

    def peak(self, threads: int) -> int:
        return self.own(threads) + max((frame.peak(threads) for _, frame in self.calls if frame), default=0)

    @property
    def exact(self) -> bool:
        """Is every buffer of this frame and of its calls sized?"""
        sized = all(buffer.size is not None for buffer in self.plan.buffers
                    if buffer.status is not BufferStatus.GROWABLE)
        return sized and None not in self.growable.values() and all(f is not None and f.exact for _, f in self.calls)

    def lines(self, threads: int, indent: str = "") -> list[str]:
        """The frame as comment lines: its own memory, its growable arrays, and each call's frame."""
        lines = [f"{indent}@{self.function.name}: own {self.own(threads)} B (arena {self.plan.used} B, "
                 f"per work item {self.plan.per_work_item} B x {threads} thread(s), growable "
                 f"{sum(b or 0 for b in self.growable.values())} B), peak {self.peak(threads)} B"]
        for name, size in self.growable.items():
            lines.append(f"{indent}  growable {name}: {'?' if size is None else size} B at the end of the run")
        for call, frame in self.calls:
            line = f" (line {call.loc.line})" if call.loc is not None else ""
            if frame is None:
                lines.append(f"{indent}  call of @{call.callee.name}{line}: not followed")  # type: ignore[union-attr]
            else:
                lines += frame.lines(threads, indent + "  ")
        return lines


def memory_frame(function: Function, sizes: Mapping[str, ArgumentValue] | Sequence[ArgumentValue] | None,
                 depth: int = 0) -> Frame:
    """`function`'s frame at `sizes` (module docstring)."""
    plan = plan_memory(function, sizes)
    evaluator = ExtentEvaluator(argument_values(function, sizes))
    frame = Frame(function, plan)
    nest = LoopNest(function)
    for buffer in plan.buffers:
        if buffer.status is BufferStatus.GROWABLE and buffer.alloc is not None:
            frame.growable[buffer.name] = _final_bytes(buffer.alloc, evaluator, nest)
    for inst in function.instructions():
        if inst.op is not Op.CALL or not _holds_memory(inst.callee, set()):  # type: ignore[arg-type]
            continue
        callee: Function = inst.callee  # type: ignore[assignment]
        if depth >= MAX_DEPTH:
            frame.calls.append((inst, None))
            continue
        frame.calls.append((inst, memory_frame(callee, _call_sizes(inst, evaluator), depth + 1)))
    return frame


def _holds_memory(function: Function, seen: set[Function]) -> bool:
    """Does `function`, or a function it calls, allocate?"""
    if function in seen:
        return False
    seen.add(function)
    for inst in function.instructions():
        if inst.op is Op.ALLOC or (inst.op is Op.CALL and _holds_memory(inst.callee, seen)):  # type: ignore[arg-type]
            return True
    return False


def _call_sizes(call: Instruction, evaluator: ExtentEvaluator) -> list[ArgumentValue | None]:
    """The callee's argument sizes from the call: shapes of arrays, values of scalars (None: unknown)."""
    sizes: list[ArgumentValue | None] = []
    for operand in call.operands:
        sizes.append(_shape(operand, evaluator) if operand.type.is_array else _value(operand, evaluator))
    return sizes


def _shape(array: Value, evaluator: ExtentEvaluator) -> tuple[int, ...] | None:
    if isinstance(array, Argument):
        given = evaluator.arguments.get(array)
        if given is None:
            return None
        return tuple(given.shape) if hasattr(given, "shape") else ((given,) if isinstance(given, int) else given)  # type: ignore[return-value]
    if isinstance(array, Instruction) and array.op is Op.ALLOC and not is_growable_alloc(array):
        extents = [_value(extent, evaluator) for extent in array.operands]
        return None if None in extents else tuple(int(e) for e in extents)  # type: ignore[arg-type]
    return None


def _value(value: Value, evaluator: ExtentEvaluator) -> int | float | bool | None:
    try:
        return evaluator.value(value)
    except Unevaluated:
        return None


def _final_bytes(alloc: Instruction, evaluator: ExtentEvaluator, nest: LoopNest) -> int | None:
    """A growable array's bytes at the end of the run (module docstring), or None."""
    grows = [user for user in alloc.users if user.op is Op.GROW and user.operands[0] is alloc]
    if not grows:
        return None
    itemsize = alloc.type.element.numpy_dtype.itemsize  # type: ignore[attr-defined]
    largest = 0
    for grow in grows:
        total = _value(grow.operands[1], evaluator)  # a size known at the start (a tape of nothing: 0)
        if total is not None:
            largest = max(largest, int(total) * itemsize)
            continue
        per_run = _per_run(grow.operands[1])
        count = None if per_run is None else _value(per_run, evaluator)
        if count is None:
            return None
        runs = 1
        loop = nest.loop_of(grow.block)  # type: ignore[arg-type]
        while loop is not None:
            trip = analyze_trip_count(loop)
            if not isinstance(trip, TripCount):
                return None
            with contextlib.suppress(Unevaluated):
                runs *= trip.evaluate(lambda v: int(evaluator.value(v)))
                loop = loop.parent
                continue
            return None
        largest = max(largest, int(count) * runs * itemsize)
    return largest


def _per_run(count: Value) -> Value | None:
    """n in `grow %a, (r + 1) * n` (either operand order), or None."""
    if not isinstance(count, Instruction) or count.op is not Op.IMUL:
        return None
    for runs, per_run in (count.operands, reversed(count.operands)):
        if isinstance(runs, Instruction) and runs.op is Op.IADD and any(
                isinstance(o, Constant) and o.value == 1 for o in runs.operands):
            return per_run
    return None
