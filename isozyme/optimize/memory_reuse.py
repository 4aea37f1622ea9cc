"""Memory reuse, the planning half: an offset in one arena for each local array, by liveness.

    plan = plan_memory(module["diffe_heat"], sizes={"u": (1000,), "steps": 50})
    validate_plan(plan)            # no two buffers live at once share a byte
    print(plan.format())           # requested, used, saved; one row per buffer

An analysis: it changes nothing in the IR. Codegen is meant to place each planned `alloc` at its offset in
one arena allocated when the function starts (`MemoryPlan.used` bytes), instead of a block per alloc.
Requires verified SSA.

Buffers. Every reachable `alloc` of the function is a buffer; it is *planned* when its byte size is known
when the function starts: each extent is computable from the arguments alone (constants, arguments, `dim`
of an argument or of such a buffer, and pure scalar ops of those, wherever they are defined: a pure op's
value does not depend on where it runs). Sizes are numbers: with `sizes` (argument values or shapes, see
`plan_memory`) the extents are evaluated; without them a buffer whose size depends on an argument is
listed as `symbolic` (its size as a formula) and left out of the packing. Also left out: `growable`
allocs (`grow` moves them), allocs whose extents depend on memory or control flow (`dynamic`), and
`multi-instance` ones (below).

Lifetimes, what is assumed. The llvm backend (`codegen/llvm.py`) lowers each execution of an `alloc` to a
fresh `malloc` chained for the frees at return, so every array lives until the kernel returns and an alloc
in a loop costs a block per iteration. The plan assumes the arena lowering instead gives an alloc the same
slot at every execution (re-zeroing it when `zeroed`), so an alloc counts once, and that its storage may be
reused once its array is dead. That is sound when the arrays of two executions are never live together,
which holds unless a phi carrying one of them is live when the alloc runs again: such an alloc is
`multi-instance` and is not planned.

Liveness. Arrays flow only through phis (and, conservatively, calls returning an array), so a buffer is
live where one of its aliases (the alloc, and the phis and call results it reaches) is live. Liveness is
the classic backward dataflow over the CFG (a phi operand is used at the end of its incoming block), so a
buffer used in a loop but allocated before it is live around the whole loop (the back edge makes it live
again). The instructions are numbered in reverse post-order of the blocks, and a buffer's live interval
is the hull of the positions where it is live: an over-approximation, so buffers live at one point of
some execution always have overlapping intervals, and only buffers whose intervals are disjoint share bytes.

Packing: best fit by decreasing size. Each buffer, largest first, goes into the smallest gap (at an
aligned offset) left by the already placed buffers whose intervals meet its own, else on top of them.
Offsets are multiples of `ARENA_ALIGNMENT` and every buffer takes its size rounded up to it, so
`requested` is the arena without reuse (the aligned sizes end to end) and `used` never exceeds it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import combinations

import numpy as np

from isozyme.ssa.cfg import post_order, predecessors, reverse_post_order
from isozyme.ssa.interpreter import RUNTIME_ERRORS
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Phi, Value, is_growable_alloc
from isozyme.ssa.loops import LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.printer import Namer
from isozyme.ssa.semantics import SEMANTICS, evaluate

ARENA_ALIGNMENT = 64
"""Bytes: every offset is a multiple of it (a cache line, and enough for any vector load)."""

ZEROED = "zeroed"
"""The flag of an `alloc` that fills its array with zeros (`iz.zeros`); a plain one leaves it undefined."""

ArgumentValue = int | float | bool | tuple[int, ...] | np.ndarray
"""What `sizes` gives per argument: a scalar's value, an array's shape (an int for a 1-D array) or the array."""


class BufferStatus(Enum):
    """Whether a buffer has an offset, and why not."""

    PLANNED = "planned"
    SYMBOLIC = "symbolic"
    """Its size depends on argument values that were not given."""
    DYNAMIC = "dynamic"
    """Its size is not known when the function starts (it depends on memory or control flow)."""
    GROWABLE = "growable"
    """`grow` may enlarge it."""
    MULTI_INSTANCE = "multi-instance"
    """Arrays of two executions of the alloc may be live at once (a phi keeps the old one)."""
    INVALID = "invalid"
    """Its size cannot be evaluated (a negative extent, a trapping op)."""


@dataclass(eq=False)
class Buffer:
    """One local array of the plan."""

    name: str
    """The alloc's printed name, `%prev`."""
    size: int | None
    """Bytes, None unless the size is known."""
    live: tuple[int, int]
    """First and last instruction positions (reverse post-order numbering) where it is live, inclusive."""
    status: BufferStatus = BufferStatus.PLANNED
    offset: int | None = None
    """Byte offset in the arena once packed."""
    type_text: str = ""
    """The alloc's array, `f64[%n]`."""
    size_text: str = ""
    """The size as a formula of the IR's values when it is symbolic, `8*%n`."""
    alloc: Instruction | None = None
    """The `alloc` instruction (None for buffers made up by tests)."""

    @property
    def aligned_size(self) -> int:
        return align_up(self.size or 0)


@dataclass(eq=False)
class MemoryPlan:
    """Offsets in one arena for the planned buffers of a function, and what it saves."""

    function_name: str
    buffers: list[Buffer] = field(default_factory=list)
    """Every buffer, planned or not, in the order of their allocs."""
    used: int = 0
    """Arena size in bytes."""
    alignment: int = ARENA_ALIGNMENT

    @property
    def planned(self) -> list[Buffer]:
        return [buffer for buffer in self.buffers if buffer.status is BufferStatus.PLANNED]

    @property
    def requested(self) -> int:
        """Bytes without reuse: the planned buffers' aligned sizes end to end."""
        return sum(buffer.aligned_size for buffer in self.planned)

    @property
    def saved(self) -> float:
        """The fraction of `requested` that sharing saves."""
        return 1.0 - self.used / self.requested if self.requested else 0.0

    def format(self) -> str:
        """The plan as a table, a header line per total."""
        counts = ", ".join(f"{sum(b.status is status for b in self.buffers)} {status.value}"
                           for status in BufferStatus if any(b.status is status for b in self.buffers))
        lines = [f"; memory plan of @{self.function_name}: {len(self.buffers)} buffer(s)"
                 + (f" ({counts})" if counts else ""),
                 f"; requested {self.requested} B, used {self.used} B, saved {100 * self.saved:.1f}%"
                 f" (offsets aligned to {self.alignment} B)"]
        rows = [("buffer", "array", "bytes", "offset", "live", "status")]
        rows += [(b.name, b.type_text, str(b.size) if b.size is not None else b.size_text or "?",
                  str(b.offset) if b.offset is not None else "-", f"[{b.live[0]}, {b.live[1]}]", b.status.value)
                 for b in self.buffers]
        widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
        return "\n".join(lines)


class MemoryPlanError(Exception):
    """A plan that lets two buffers live at the same time overlap, or places one badly."""


def align_up(size: int, alignment: int = ARENA_ALIGNMENT) -> int:
    return -(-size // alignment) * alignment


# --- sizes -------------------------------------------------------------------------------------------------


class _Unevaluated(Exception):
    """An extent without a value: `status` says whether arguments are missing or it is not computable."""

    def __init__(self, status: BufferStatus, why: str = "") -> None:
        super().__init__(why)
        self.status = status


def _argument_values(function: Function, sizes: Mapping[str, ArgumentValue] | Sequence[ArgumentValue] | None
                     ) -> dict[Argument, ArgumentValue]:
    """`sizes` keyed by argument: a mapping by name, or values in parameter order."""
    if sizes is None:
        return {}
    if isinstance(sizes, Mapping):
        return {arg: sizes[arg.name] for arg in function.args if arg.name in sizes}
    return dict(zip(function.args, sizes))


def _shape(arg: Argument, given: ArgumentValue) -> tuple[int, ...]:
    shape = tuple(given.shape) if isinstance(given, np.ndarray) else given
    shape = (shape,) if isinstance(shape, int) else tuple(int(extent) for extent in shape)  # type: ignore[union-attr]
    if len(shape) != arg.type.rank:  # type: ignore[attr-defined]
        raise ValueError(f"argument %{arg.name} is {arg.type}, but its given shape is {shape}")
    return shape


class _ExtentEvaluator:
    """Values computable from the arguments alone (module docstring), evaluated for given arguments."""

    def __init__(self, arguments: dict[Argument, ArgumentValue]) -> None:
        self.arguments = arguments
        self.memo: dict[Value, object] = {}

    def value(self, value: Value) -> int | float | bool:
        if value not in self.memo:
            try:
                self.memo[value] = self._evaluate(value)
            except _Unevaluated as missing:
                self.memo[value] = missing
        result = self.memo[value]
        if isinstance(result, _Unevaluated):
            raise result
        return result  # type: ignore[return-value]

    def _evaluate(self, value: Value) -> int | float | bool:
        if isinstance(value, Constant):
            return value.value
        if isinstance(value, Argument):
            if value not in self.arguments:
                raise _Unevaluated(BufferStatus.SYMBOLIC, f"%{value.name} not given")
            given = self.arguments[value]
            return given.item() if isinstance(given, np.generic) else given  # type: ignore[return-value]
        if isinstance(value, Instruction) and value.op is Op.DIM:
            return self._dim(value)
        if isinstance(value, Instruction) and value.op in SEMANTICS and not isinstance(value, Phi):
            operands = [self.value(operand) for operand in value.operands]
            try:
                with np.errstate(all="ignore"):
                    return evaluate(value.op, value.type, operands)
            except RUNTIME_ERRORS as error:
                raise _Unevaluated(BufferStatus.INVALID, f"{value.op} traps: {error}") from None
        raise _Unevaluated(BufferStatus.DYNAMIC, f"{value.op if isinstance(value, Instruction) else value} "
                                                 f"is not known when the function starts")

    def _dim(self, dim: Instruction) -> int:
        array, axis = dim.operands[0], dim.attrs["axis"]
        if isinstance(array, Argument):
            self.value(array)  # raises when not given
            return _shape(array, self.arguments[array])[axis]  # type: ignore[index]
        if isinstance(array, Instruction) and array.op is Op.ALLOC and not is_growable_alloc(array):
            return int(self.value(array.operands[axis]))  # type: ignore[index]
        raise _Unevaluated(BufferStatus.DYNAMIC, "dim of an array not known when the function starts")


def _size_formula(alloc: Instruction, namer: Namer) -> str:
    element = alloc.type.element.numpy_dtype.itemsize  # type: ignore[attr-defined]
    return "*".join([str(element), *(namer.value(extent) for extent in alloc.operands)])


def _byte_size(alloc: Instruction, extents: _ExtentEvaluator) -> int:
    """The alloc's bytes; raises `_Unevaluated` when they are not known."""
    shape = [extents.value(extent) for extent in alloc.operands]
    if any(extent < 0 for extent in shape):  # type: ignore[operator]
        raise _Unevaluated(BufferStatus.INVALID, f"negative extent in {shape}")
    element = alloc.type.element.numpy_dtype.itemsize  # type: ignore[attr-defined]
    return element * math.prod(shape)  # type: ignore[arg-type]


# --- liveness ----------------------------------------------------------------------------------------------


def aliases(alloc: Instruction) -> set[Value]:
    """The alloc and every value that may hold its array: the phis (and calls returning an array) it reaches."""
    found: set[Value] = {alloc}
    work: list[Value] = [alloc]
    while work:
        for user in work.pop().users:
            if (isinstance(user, Phi) or user.type.is_array) and user not in found:
                found.add(user)
                work.append(user)
    return found


def linear_order(function: Function) -> list[Block]:
    """The reachable blocks in reverse post-order, but each loop's blocks together, right after its header
    (RPO alone may put a loop's body after the code that follows the loop, stretching every interval
    across the loop). Sorting by the RPO numbers of the enclosing headers keeps every edge that is not a
    back edge pointing forward."""
    rpo = reverse_post_order(function)
    index = {block: number for number, block in enumerate(rpo)}
    nest = LoopNest(function)

    def key(block: Block) -> tuple[int, ...]:
        headers, loop = [], nest.loop_of(block)
        while loop is not None:
            headers.append(index[loop.header])
            loop = loop.parent
        return (*reversed(headers), index[block])
    return sorted(rpo, key=key)


class Liveness:
    """Where each buffer's contents matter, on the instructions numbered in `linear_order`.

    A buffer is live at an instruction when one of its aliases is (SSA liveness, the backward dataflow;
    a phi operand is used at the end of its incoming block) and the buffer may already have been touched
    there (a forward dataflow: a `zeroed` alloc touches its array, a use of an alias touches it, a plain
    alloc starts a fresh untouched one). An `iz.empty` array holds nothing worth keeping until it is used,
    so its storage may still serve a buffer that dies before its first use."""

    def __init__(self, function: Function, buffers: dict[Instruction, set[Value]]) -> None:
        self.order = linear_order(function)
        self.position: dict[Instruction, int] = {}
        """Each reachable instruction's number."""
        self.span: dict[Block, tuple[int, int]] = {}
        """First and last position of each reachable block."""
        for block in self.order:
            first = len(self.position)
            for inst in block.instructions:
                self.position[inst] = len(self.position)
            self.span[block] = (first, len(self.position) - 1)
        self.buffers = buffers
        self.values: set[Value] = set().union(*buffers.values()) if buffers else set()
        self.live_in: dict[Block, set[Value]] = {block: set() for block in self.order}
        self.live_out: dict[Block, set[Value]] = {block: set() for block in self.order}
        self._solve_ssa_liveness(post_order(function))
        self.owners: dict[Value, list[Instruction]] = {}
        """The buffers each alias may hold."""
        for alloc, alias_set in buffers.items():
            for alias in alias_set:
                self.owners.setdefault(alias, []).append(alloc)
        self.touched: dict[Instruction, set[Instruction]] = {}
        """The buffers possibly touched once each instruction has run."""
        self._solve_touched()

    def _solve_ssa_liveness(self, order: list[Block]) -> None:
        defined = {block: set(block.instructions) for block in order}
        exposed = {block: {operand for inst in block.instructions if not isinstance(inst, Phi)
                           for operand in inst.operands if operand in self.values} - defined[block]
                   for block in order}
        changed = True
        while changed:
            changed = False
            for block in order:
                out: set[Value] = set()
                for succ in block.successors:
                    phis = succ.phis
                    out |= self.live_in[succ].difference(phis)
                    out |= {phi.incoming_value(block) for phi in phis} & self.values
                live_in = exposed[block] | (out - defined[block])
                if out != self.live_out[block] or live_in != self.live_in[block]:
                    self.live_out[block], self.live_in[block] = out, live_in
                    changed = True

    def _touch(self, inst: Instruction, state: set[Instruction]) -> set[Instruction]:
        if inst in self.buffers:
            state = state | {inst} if ZEROED in inst.flags else state - {inst}
        if not isinstance(inst, Phi):
            state = state.union(*(self.owners.get(operand, ()) for operand in inst.operands))
        return state

    def _solve_touched(self) -> None:
        touched_out: dict[Block, set[Instruction]] = {block: set() for block in self.order}
        preds = predecessors(self.order[0].function) if self.order else {}  # type: ignore[arg-type]
        changed = True
        while changed:
            changed = False
            for block in self.order:
                state = set().union(*(touched_out[p] for p in preds[block] if p in touched_out))
                for inst in block.instructions:
                    state = self.touched[inst] = self._touch(inst, state)
                if state != touched_out[block]:
                    touched_out[block], changed = state, True

    def ranges(self, value: Value) -> list[tuple[int, int]]:
        """Per block where the SSA value is live, the first and last position where it is, in block order."""
        result = []
        for block, (first, last) in self.span.items():
            defined_here = isinstance(value, Instruction) and value.block is block
            if not defined_here and value not in self.live_in[block]:
                continue
            start = first if value in self.live_in[block] else self.position[value]  # type: ignore[index]
            uses = [self.position[use.user] for use in value.uses
                    if use.user.block is block and not isinstance(use.user, Phi)]
            end = last if value in self.live_out[block] else max(uses, default=start)
            result.append((start, max(start, end)))
        return result

    def live_at(self, value: Value, inst: Instruction) -> bool:
        """Is the SSA value live when `inst` is about to run?"""
        here = self.position[inst]
        first, last = self.span[inst.block]  # type: ignore[index]
        return any(start <= here <= end for start, end in self.ranges(value) if first <= start <= last)

    def interval(self, alloc: Instruction) -> tuple[int, int]:
        """The hull of the positions where the buffer is live; just its alloc's when it never is."""
        instructions = list(self.position)
        live = [position for alias in self.buffers[alloc] for start, end in self.ranges(alias)
                for position in range(start, end + 1) if alloc in self.touched[instructions[position]]]
        if not live:
            return self.position[alloc], self.position[alloc]
        return min(live), max(live)


# --- packing -----------------------------------------------------------------------------------------------


def intervals_meet(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _best_fit(busy: list[tuple[int, int]], need: int) -> int:
    """The start of the smallest free gap of at least `need` bytes between the `busy` ranges, else the top."""
    gaps, cursor = [], 0
    for start, end in sorted(busy):
        if start - cursor >= need and start > cursor:
            gaps.append((start - cursor, cursor))
        cursor = max(cursor, end)
    return min(gaps)[1] if gaps else cursor


def pack(buffers: Sequence[Buffer], alignment: int = ARENA_ALIGNMENT) -> int:
    """Give each buffer an aligned offset, best fit by decreasing size; the arena's size in bytes."""
    placed: list[Buffer] = []
    for buffer in sorted(buffers, key=lambda b: (-(b.size or 0), b.live)):
        need = align_up(buffer.size or 0, alignment)
        busy = [(other.offset, other.offset + align_up(other.size or 0, alignment)) for other in placed
                if other.size and intervals_meet(other.live, buffer.live)]
        buffer.offset = _best_fit(busy, need) if need else 0  # type: ignore[arg-type]
        placed.append(buffer)
    return max((buffer.offset + align_up(buffer.size or 0, alignment) for buffer in placed), default=0)  # type: ignore[operator]


def plan_buffers(function_name: str, buffers: list[Buffer], alignment: int = ARENA_ALIGNMENT) -> MemoryPlan:
    """Pack the planned ones of `buffers` into a plan."""
    plan = MemoryPlan(function_name, buffers, alignment=alignment)
    plan.used = pack(plan.planned, alignment)
    return plan


def validate_plan(plan: MemoryPlan) -> None:
    """Raise MemoryPlanError unless every planned buffer lies aligned inside the arena and no two buffers
    with meeting live intervals share a byte. A brute-force pairwise check, independent of `pack`."""
    problems = []
    for buffer in plan.planned:
        if buffer.offset is None or buffer.size is None:
            problems.append(f"{buffer.name} is planned but has no offset or size")
        elif buffer.offset < 0 or buffer.offset % plan.alignment or buffer.offset + buffer.size > plan.used:
            problems.append(f"{buffer.name} at [{buffer.offset}, {buffer.offset + buffer.size}) is misaligned "
                            f"or outside the arena of {plan.used} B")
    if problems:
        raise MemoryPlanError("\n".join(problems))
    for a, b in combinations(plan.planned, 2):
        shares_bytes = a.size and b.size and a.offset < b.offset + b.size and b.offset < a.offset + a.size  # type: ignore[operator]
        if shares_bytes and a.live[0] <= b.live[1] and b.live[0] <= a.live[1]:
            problems.append(f"{a.name} {a.live} and {b.name} {b.live} are live together but share bytes: "
                            f"[{a.offset}, {a.offset + a.size}) and [{b.offset}, {b.offset + b.size})")  # type: ignore[operator]
    if problems:
        raise MemoryPlanError("\n".join(problems))


# --- the plan ----------------------------------------------------------------------------------------------


def _buffer(alloc: Instruction, liveness: Liveness, extents: _ExtentEvaluator, namer: Namer) -> Buffer:
    alias_set = liveness.buffers[alloc]
    buffer = Buffer(namer.value(alloc), None, liveness.interval(alloc), alloc=alloc,
                    type_text=f"{alloc.type.element}[{', '.join(map(namer.value, alloc.operands))}]",  # type: ignore[attr-defined]
                    size_text=_size_formula(alloc, namer))
    if is_growable_alloc(alloc):
        buffer.status = BufferStatus.GROWABLE
    elif any(liveness.live_at(alias, alloc) for alias in alias_set if alias is not alloc):
        buffer.status = BufferStatus.MULTI_INSTANCE
    else:
        try:
            buffer.size = _byte_size(alloc, extents)
        except _Unevaluated as missing:
            buffer.status = missing.status
    return buffer


def plan_memory(function: Function, sizes: Mapping[str, ArgumentValue] | Sequence[ArgumentValue] | None = None,
                alignment: int = ARENA_ALIGNMENT) -> MemoryPlan:
    """The arena plan of `function`'s local arrays (module docstring). `sizes` gives argument values: a
    mapping from argument name to a scalar's value or an array's shape (a tuple, an int for 1-D, or the
    array itself), or the arguments themselves in order. Without it only constant-sized buffers are packed;
    the others are listed as symbolic."""
    allocs = [inst for block in reverse_post_order(function) for inst in block.instructions if inst.op is Op.ALLOC]
    liveness = Liveness(function, {alloc: aliases(alloc) for alloc in allocs})
    extents = _ExtentEvaluator(_argument_values(function, sizes))
    namer = Namer(function)
    return plan_buffers(function.name, [_buffer(alloc, liveness, extents, namer) for alloc in allocs], alignment)

