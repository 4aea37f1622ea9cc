"""Memory reuse: one arena per call for the local arrays of a function, shared by liveness.

    placed = place_in_arena(function)   # codegen's layout: allocs become views into one arena alloc
    plan = plan_memory(module["diffe_heat"], sizes={"u": (1000,), "steps": 50})
    validate_plan(plan)                 # that layout at these sizes: no two buffers live at once share a byte
    print(plan.format())                # requested, used, saved, the best-fit figure; one row per buffer

`place_in_arena` is the transform both backends run on every function right before codegen
(`runtime/llvm_backend.py`, `runtime/opencl_backend.py`), after every optimization: no pass may run after
it, since the views of one arena are not distinct arrays to alias analysis (`memory_effects.py` gives a
view an unknown root). `plan_memory` is the analysis that reports the same layout evaluated at given
argument values, and `iz.show_memory` prints it. Requires verified SSA.

Buffers. Every reachable `alloc` of the function is a buffer. It is *placed* when its extents are known
when the function starts: each is computable from the arguments alone (constants, arguments, `dim` of an
argument or of such a buffer, and pure ops of those, wherever they are defined: a pure op's value does not
depend on where it runs, and it cannot trap, so computing it early changes nothing). Not placed: `growable`
allocs (`grow` moves them), allocs whose extents depend on memory, control flow or a trapping op
(`dynamic`), `multi-instance` ones (below), and `per-work-item` ones: an alloc in a loop whose header has a
phi flagged `parallel` (a `prange` loop: OpenCL gives each work item its own scratch copy,
`codegen/parallel_loops.py`), or an array flagged `private` (a shadow that the same file copies per work
item). In a plan, a placed buffer's size is a number when `sizes` gives the arguments it depends on, else
it is `symbolic` (a formula) and counts in no total.

Lifetimes, what is assumed. Without placement the llvm backend (`codegen/llvm.py`) makes a `malloc` per
execution of an `alloc`, freed at return, so an alloc in a loop costs a block per iteration. A view instead
gives an alloc the same bytes at every execution (cleared again when `zeroed`), so an alloc counts once,
and those bytes serve other buffers once its array is dead. That is sound when the arrays of two
executions are never live together, which holds unless a phi carrying one of them is live when the alloc
runs again: such an alloc is `multi-instance` and keeps its own alloc. With placement, the llvm backend
makes one `malloc` per call for the placed buffers (the arena), and OpenCL's entry function one host
buffer (`codegen/opencl_program.py`).

Liveness. Arrays flow only through phis (and, conservatively, calls returning an array), so a buffer is
live where one of its aliases (the alloc, and the phis and call results it reaches) is live. Liveness is
the classic backward dataflow over the CFG (a phi operand is used at the end of its incoming block), so a
buffer used in a loop but allocated before it is live around the whole loop (the back edge makes it live
again). The instructions are numbered in a linear order of the blocks, and a buffer's live interval is the
hull of the positions where it is live: an over-approximation, so buffers live at one point of some
execution always have overlapping intervals, and only buffers whose intervals are disjoint share bytes.

Layout: slots by greedy interval colouring. Buffers are taken by increasing interval start; each goes into
a free slot (one whose buffers' intervals all end before it starts), preferring one that holds a buffer of
the same extent formula (same element size and extents), else into a new slot. Two buffers of a slot are
never live together, so they may share its bytes. Sizes are symbolic, so the arena is laid out when the
function starts: the extents' computations are repeated at the start of the entry block (the same values:
arguments do not change during a call, nor do array arguments' shapes, and the ops are pure), each slot's
size is the largest of its buffers' sizes rounded up to `ARENA_ALIGNMENT`, the offsets are prefix sums,
and one `alloc i64[total_words]` holds them all; each placed `alloc` becomes a `view` of the same type,
extents and flags at its slot's offset. Extents that are negative count as 0 in the sizes, and a buffer of
more than `LARGEST_BUFFER` bytes (or whose size overflows) as 0 words; the view raises for them where the
alloc would have (the backends report it as the alloc's failure, with its shape). An alloc that nothing
uses is not a buffer: it only checks its shape (`dead_code_elimination.py`).

Why the placed program computes what the unplaced one does. Every buffer lies inside its slot (a slot is
as large as its largest buffer at this call's sizes) and slots do not overlap, so two buffers share bytes
only when they share a slot, hence only when their live intervals are disjoint: one is dead, or not yet
touched (an `iz.empty` array before its first use holds nothing it must keep), wherever the other is used.
A view of a plain alloc holds what its bytes hold, which the unplaced program never reads before writing
(it would read undefined memory); a zeroed view is cleared at every execution, as the alloc's fresh zeros
are. After placement no SSA pass runs; codegen's own rewrites of parallel loops (`parallel_loops.py`)
treat views of one arena as possibly overlapping.

Reported figures (`MemoryPlan`): `requested`, every sized buffer its own aligned block, an alloc in a loop
counted once (per alloc, not per execution: the naive lowering's cost per iteration is not counted);
`used`, the slot layout codegen makes; `saved`, the fraction of `requested` that sharing saves; and
`best_fit`, what best-fit packing by decreasing size (offsets chosen knowing every size) would use, for
comparison: the slot layout cannot know the sizes, so it may use more.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import combinations

import numpy as np

from isozyme.optimize.value_ranges import value_range
from isozyme.ssa.builder import Builder
from isozyme.ssa.cfg import post_order, predecessors, reverse_post_order
from isozyme.ssa.def_use import operands_first
from isozyme.ssa.flags import is_growable_alloc
from isozyme.ssa.interpreter import RUNTIME_ERRORS
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Module, Phi, Value
from isozyme.ssa.loops import LoopNest
from isozyme.ssa.ops import OP_INFO, Op
from isozyme.ssa.printer import Namer
from isozyme.ssa.semantics import SEMANTICS, evaluate
from isozyme.ssa.types import F64, I64

ARENA_ALIGNMENT = 64
"""Bytes: every offset is a multiple of it (a cache line, and enough for any vector load)."""

WORD = 8
"""Bytes of one arena word (the arena is an `i64` array; view offsets count words)."""

LARGEST_BUFFER = 2**52
"""Bytes (4 PiB, beyond any memory): a buffer larger than this takes no room in the arena, and its view
fails as its alloc would (out of memory, or a size that overflows). So the arena's size cannot wrap
(below 2**11 slots)."""

ZEROED = "zeroed"
"""The flag of an `alloc` that fills its array with zeros (`iz.zeros`); a plain one leaves it undefined."""

PRIVATE = "private"
"""The flag of a shadow array that OpenCL copies per work item of a parallel loop (`enzyme_ad/reverse.py`)."""

ArgumentValue = int | float | bool | tuple[int, ...] | np.ndarray
"""What `sizes` gives per argument: a scalar's value, an array's shape (an int for a 1-D array) or the array."""


class BufferStatus(Enum):
    """Whether codegen places a buffer in the arena and the plan sizes it, and why not."""

    PLANNED = "planned"
    """Placed, and its size is known for the given arguments."""
    SYMBOLIC = "symbolic"
    """Placed, but its size depends on argument values that were not given."""
    INVALID = "invalid"
    """Placed, but its size cannot be evaluated for the given arguments (a negative extent)."""
    DYNAMIC = "dynamic"
    """Not placed: its size is not known when the function starts (memory, control flow, a trapping op)."""
    GROWABLE = "growable"
    """Not placed: `grow` may enlarge it."""
    MULTI_INSTANCE = "multi-instance"
    """Not placed: arrays of two executions of the alloc may be live at once (a phi keeps the old one)."""
    PER_WORK_ITEM = "per-work-item"
    """Not placed: allocated in a parallel loop, or flagged `private`: OpenCL copies it per work item."""


PLACED = frozenset({BufferStatus.PLANNED, BufferStatus.SYMBOLIC, BufferStatus.INVALID})
"""The statuses of the buffers `place_in_arena` turns into views."""


@dataclass(eq=False)
class Buffer:
    """One local array of the plan."""

    name: str
    """The alloc's printed name, `%prev`."""
    size: int | None
    """Bytes, None unless the size is known."""
    live: tuple[int, int]
    """First and last instruction positions (in `linear_order`) where it is live, inclusive."""
    status: BufferStatus = BufferStatus.PLANNED
    offset: int | None = None
    """Byte offset in the arena: its slot's, once laid out."""
    slot: int | None = None
    """Its slot in the layout codegen makes (None when it is not placed)."""
    formula: Hashable = None
    """Equal for buffers of the same element size and extents (the slot preference); the size when None."""
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
    """The slot layout of a function's placed buffers evaluated at given sizes, and what it saves."""

    function_name: str
    buffers: list[Buffer] = field(default_factory=list)
    """Every buffer, placed or not, in the order of their allocs."""
    used: int = 0
    """Arena size in bytes: the slot layout, slots whose buffers are all unsized left out."""
    slots: int = 0
    """How many slots the layout has."""
    best_fit: int = 0
    """Arena size in bytes that best-fit packing of the sized buffers reaches (for comparison)."""
    alignment: int = ARENA_ALIGNMENT

    @property
    def planned(self) -> list[Buffer]:
        return [buffer for buffer in self.buffers if buffer.status is BufferStatus.PLANNED]

    @property
    def requested(self) -> int:
        """Bytes without reuse: the planned buffers' aligned sizes end to end (an alloc in a loop once)."""
        return sum(buffer.aligned_size for buffer in self.planned)

    @property
    def saved(self) -> float:
        """The fraction of `requested` that the slot layout saves."""
        return 1.0 - self.used / self.requested if self.requested else 0.0

    def format(self) -> str:
        """The plan as a table, a header line per total."""
        counts = ", ".join(f"{sum(b.status is status for b in self.buffers)} {status.value}"
                           for status in BufferStatus if any(b.status is status for b in self.buffers))
        lines = [f"; memory plan of @{self.function_name}: {len(self.buffers)} buffer(s)"
                 + (f" ({counts})" if counts else ""),
                 f"; requested {self.requested} B, used {self.used} B in {self.slots} slot(s), saved "
                 f"{100 * self.saved:.1f}%; best fit would use {self.best_fit} B (offsets aligned to "
                 f"{self.alignment} B)"]
        rows = [("buffer", "array", "bytes", "slot", "offset", "live", "status")]
        rows += [(b.name, b.type_text, str(b.size) if b.size is not None else b.size_text or "?",
                  str(b.slot) if b.slot is not None else "-", str(b.offset) if b.offset is not None else "-",
                  f"[{b.live[0]}, {b.live[1]}]", b.status.value)
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


def _computed_at_start(value: Value) -> bool:
    """Is `value` one of the pure computations on the arguments that `_EntryClones` repeats at the start?"""
    return (isinstance(value, Instruction) and not isinstance(value, Phi) and value.op in SEMANTICS
            and OP_INFO[value.op].pure)


def _dim_source(dim: Instruction) -> Value | None:
    """What a `dim` known at the start reads: the argument, or the alloc's extent; None for other arrays."""
    array, axis = dim.operands[0], dim.attrs["axis"]
    if isinstance(array, Argument):
        return array
    if isinstance(array, Instruction) and array.op is Op.ALLOC and not is_growable_alloc(array):
        return array.operands[axis]  # type: ignore[index]
    return None


def _start_inputs(value: Value) -> tuple[Value, ...]:
    """What a value known at the start is computed from: a pure op's operands, a `dim`'s source."""
    if isinstance(value, Instruction) and value.op is Op.DIM:
        source = _dim_source(value)
        return () if source is None else (source,)
    return value.operands if _computed_at_start(value) else ()  # type: ignore[attr-defined]


class _ExtentEvaluator:
    """Values computable from the arguments alone (module docstring), evaluated for given arguments."""

    def __init__(self, arguments: dict[Argument, ArgumentValue]) -> None:
        self.arguments = arguments
        self.memo: dict[Value, object] = {}
        """The value, or the `_Unevaluated` that says why there is none."""

    def value(self, value: Value) -> int | float | bool:
        for pending in operands_first(value, _start_inputs, self.memo):  # a chain of ops may be long
            try:
                self.memo[pending] = self._evaluate(pending)
            except _Unevaluated as missing:
                self.memo[pending] = missing
        result = self.memo[value]
        if isinstance(result, _Unevaluated):
            raise result
        return result  # type: ignore[return-value]

    def _known(self, values: Sequence[Value]) -> list[int | float | bool]:
        """The evaluated `values`; raises for the first without a value that is not known at the start at
        all (such a value makes the extent dynamic, whatever the others lack), else for the first."""
        results = [self.memo[value] for value in values]
        missing = [result for result in results if isinstance(result, _Unevaluated)]
        if missing:
            raise next((m for m in missing if m.status is BufferStatus.DYNAMIC), missing[0])
        return results  # type: ignore[return-value]

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
        if _computed_at_start(value):
            operands = self._known(value.operands)  # type: ignore[union-attr]
            try:
                with np.errstate(all="ignore"):
                    return evaluate(value.op, value.type, operands)  # type: ignore[union-attr]
            except RUNTIME_ERRORS as error:
                raise _Unevaluated(BufferStatus.INVALID, f"{value.op} fails: {error}") from None  # type: ignore[union-attr]
        raise _Unevaluated(BufferStatus.DYNAMIC, f"{value.op if isinstance(value, Instruction) else value} "
                                                 f"is not known when the function starts")

    def _dim(self, dim: Instruction) -> int:
        source = _dim_source(dim)
        if source is None:
            raise _Unevaluated(BufferStatus.DYNAMIC, "dim of an array not known when the function starts")
        (known,) = self._known([source])  # raises when not given
        if isinstance(source, Argument) and source.type.is_array:
            return _shape(source, self.arguments[source])[dim.attrs["axis"]]  # type: ignore[index]
        return int(known)


def _size_formula(alloc: Instruction, namer: Namer) -> str:
    element = alloc.type.element.numpy_dtype.itemsize  # type: ignore[attr-defined]
    return "*".join([str(element), *(namer.value(extent) for extent in alloc.operands)])


def _formula_key(root: Value) -> Hashable:
    """Equal for values computed alike from the same arguments and constants (two `dim %x, 0` match)."""
    keys: dict[Value, Hashable] = {}
    for value in operands_first(root, _start_inputs):  # a chain of ops may be long
        if isinstance(value, Constant):
            keys[value] = ("const", str(value.type), value.value)
        elif isinstance(value, Instruction) and value.op is Op.DIM and _dim_source(value) is not None:
            source = _dim_source(value)
            if isinstance(source, Argument) and source.type.is_array:
                keys[value] = ("dim", id(source), value.attrs["axis"])
            else:
                keys[value] = keys[source]  # type: ignore[index]
        elif _computed_at_start(value):
            keys[value] = (value.op, str(value.type), *(keys[operand] for operand in value.operands))  # type: ignore[union-attr]
        else:
            keys[value] = ("value", id(value))
    return keys[root]


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


# --- layouts -----------------------------------------------------------------------------------------------


def intervals_meet(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def assign_slots(buffers: Sequence[Buffer]) -> int:
    """Give each buffer a slot by greedy interval colouring (module docstring); the number of slots."""
    slot_ends: list[int] = []
    slot_formulas: list[set[Hashable]] = []
    for buffer in sorted(buffers, key=lambda b: b.live):
        formula = buffer.size if buffer.formula is None else buffer.formula
        free = [slot for slot, end in enumerate(slot_ends) if end < buffer.live[0]]
        alike = [slot for slot in free if formula in slot_formulas[slot]]
        if alike or free:
            buffer.slot = (alike or free)[0]
        else:
            buffer.slot = len(slot_ends)
            slot_ends.append(-1)
            slot_formulas.append(set())
        slot_ends[buffer.slot] = max(slot_ends[buffer.slot], buffer.live[1])
        slot_formulas[buffer.slot].add(formula)
    return len(slot_ends)


def lay_out_slots(buffers: Sequence[Buffer], slots: int, alignment: int = ARENA_ALIGNMENT) -> int:
    """Offsets of the sized buffers at their slots, as codegen computes them at the start: a slot is as large
    as its largest buffer (aligned), the slots end to end in slot order. The arena's size in bytes."""
    sizes = [0] * slots
    for buffer in buffers:
        if buffer.size is not None:
            sizes[buffer.slot] = max(sizes[buffer.slot], align_up(buffer.size, alignment))  # type: ignore[index]
    starts = [sum(sizes[:slot]) for slot in range(slots)]
    for buffer in buffers:
        if buffer.size is not None:
            buffer.offset = starts[buffer.slot]  # type: ignore[index]
    return sum(sizes)


def _best_fit(busy: list[tuple[int, int]], need: int) -> int:
    """The start of the smallest free gap of at least `need` bytes between the `busy` ranges, else the top."""
    gaps, cursor = [], 0
    for start, end in sorted(busy):
        if start - cursor >= need and start > cursor:
            gaps.append((start - cursor, cursor))
        cursor = max(cursor, end)
    return min(gaps)[1] if gaps else cursor


def pack(buffers: Sequence[Buffer], alignment: int = ARENA_ALIGNMENT) -> dict[Buffer, int]:
    """Best-fit offsets by decreasing size, knowing every size: the comparison figure of the slot layout."""
    offsets: dict[Buffer, int] = {}
    for buffer in sorted(buffers, key=lambda b: (-(b.size or 0), b.live)):
        need = align_up(buffer.size or 0, alignment)
        busy = [(offset, offset + align_up(other.size or 0, alignment)) for other, offset in offsets.items()
                if other.size and intervals_meet(other.live, buffer.live)]
        offsets[buffer] = _best_fit(busy, need) if need else 0
    return offsets


def plan_buffers(function_name: str, buffers: list[Buffer], alignment: int = ARENA_ALIGNMENT) -> MemoryPlan:
    """Slots for the placed ones of `buffers`, offsets for the sized ones, and the best-fit figure."""
    plan = MemoryPlan(function_name, buffers, alignment=alignment)
    placed = [buffer for buffer in buffers if buffer.status in PLACED]
    plan.slots = assign_slots(placed)
    plan.used = lay_out_slots(plan.planned, plan.slots, alignment)
    offsets = pack(plan.planned, alignment)
    plan.best_fit = max((offset + align_up(b.size or 0, alignment) for b, offset in offsets.items()), default=0)
    return plan


def validate_plan(plan: MemoryPlan) -> None:
    """Raise MemoryPlanError unless every planned buffer lies aligned inside the arena and no two buffers
    with meeting live intervals share a byte. A brute-force pairwise check, independent of the layout."""
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


def _in_parallel_loop(alloc: Instruction, nest: LoopNest) -> bool:
    loop = nest.loop_of(alloc.block)  # type: ignore[arg-type]
    while loop is not None:
        if any("parallel" in phi.flags for phi in loop.header.phis):
            return True
        loop = loop.parent
    return False


def _buffer(alloc: Instruction, liveness: Liveness, nest: LoopNest, extents: _ExtentEvaluator,
            namer: Namer) -> Buffer:
    alias_set = liveness.buffers[alloc]
    buffer = Buffer(namer.value(alloc), None, liveness.interval(alloc), alloc=alloc,
                    formula=(alloc.type.element.numpy_dtype.itemsize, *map(_formula_key, alloc.operands)),  # type: ignore[attr-defined]
                    type_text=f"{alloc.type.element}[{', '.join(map(namer.value, alloc.operands))}]",  # type: ignore[attr-defined]
                    size_text=_size_formula(alloc, namer))
    if is_growable_alloc(alloc):
        buffer.status = BufferStatus.GROWABLE
    elif PRIVATE in alloc.flags or _in_parallel_loop(alloc, nest):
        buffer.status = BufferStatus.PER_WORK_ITEM
    elif any(liveness.live_at(alias, alloc) for alias in alias_set if alias is not alloc):
        buffer.status = BufferStatus.MULTI_INSTANCE
    else:
        try:
            buffer.size = _byte_size(alloc, extents)
        except _Unevaluated as missing:
            buffer.status = missing.status
    return buffer


def _buffers(function: Function, sizes: Mapping[str, ArgumentValue] | Sequence[ArgumentValue] | None
             ) -> list[Buffer]:
    allocs = [inst for block in reverse_post_order(function) for inst in block.instructions
              if inst.op is Op.ALLOC and inst.uses]  # an unused alloc only checks its shape (dce)
    if not allocs:
        return []  # no liveness to compute
    liveness = Liveness(function, {alloc: aliases(alloc) for alloc in allocs})
    nest, namer = LoopNest(function), Namer(function)
    extents = _ExtentEvaluator(_argument_values(function, sizes))
    return [_buffer(alloc, liveness, nest, extents, namer) for alloc in allocs]


def plan_memory(function: Function, sizes: Mapping[str, ArgumentValue] | Sequence[ArgumentValue] | None = None,
                alignment: int = ARENA_ALIGNMENT) -> MemoryPlan:
    """The arena layout of `function`'s local arrays that `place_in_arena` makes, evaluated for `sizes`
    (module docstring): a mapping from argument name to a scalar's value or an array's shape (a tuple, an
    int for 1-D, or the array itself), or the arguments themselves in order. Without it only constant-sized
    buffers are sized; the others are listed as symbolic. Run it on the function before placement."""
    return plan_buffers(function.name, _buffers(function, sizes), alignment)


# --- the transform -----------------------------------------------------------------------------------------


class _EntryClones:
    """Computations at the start of the entry block: extents repeated there, the arena's size and offsets.
    Operations on constants are folded, so an arena of constant-sized buffers has a constant size."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        self.clones: dict[Value, Value] = {}
        self.sizes: dict[Hashable, Value] = {}
        """Words per extent formula (`Buffer.formula`): buffers of one formula share the computation."""

    def value(self, value: Value) -> Value:
        """`value` (known at the start, `_ExtentEvaluator`'s rules) computed at the start."""
        if isinstance(value, (Constant, Argument)):
            return value
        for pending in operands_first(value, _start_inputs, self.clones):  # a chain of ops may be long
            if not isinstance(pending, (Constant, Argument)):
                self.clones[pending] = self._clone(pending)  # type: ignore[arg-type]
        return self.clones[value]

    def _cloned(self, value: Value) -> Value:
        return value if isinstance(value, (Constant, Argument)) else self.clones[value]

    def _clone(self, inst: Instruction) -> Value:
        """`inst` at the start, its inputs cloned already."""
        if inst.op is Op.DIM:
            source = _dim_source(inst)
            if isinstance(source, Argument) and source.type.is_array:
                return self.builder.dim(source, inst.attrs["axis"])  # type: ignore[arg-type]
            return self._cloned(source)  # type: ignore[arg-type]
        assert _computed_at_start(inst), f"{inst.op} is not known when the function starts"
        operands = [self._cloned(operand) for operand in inst.operands]
        if all(isinstance(operand, Constant) for operand in operands):
            return Constant(inst.type, evaluate(inst.op, inst.type, [o.value for o in operands]))  # type: ignore
        return self.builder.emit(inst.op, *operands, type=inst.type, attrs=dict(inst.attrs))

    def integer(self, op: Op, a: Value | int, b: Value | int) -> Value:
        """`op` on two i64 values, folded when both are constants."""
        a, b = (Constant(I64, x) if isinstance(x, int) else x for x in (a, b))
        if isinstance(a, Constant) and isinstance(b, Constant):
            return Constant(I64, evaluate(op, I64, [a.value, b.value]))
        return self.builder.emit(op, a, b)

    def words(self, buffer: Buffer) -> Value:
        """The buffer's bytes (negative extents as 0) rounded up to `ARENA_ALIGNMENT`, in words; 0 when
        they exceed `LARGEST_BUFFER` (the view then fails as its alloc would, and no sum can wrap)."""
        if buffer.formula not in self.sizes:
            alloc: Instruction = buffer.alloc  # type: ignore[assignment]
            itemsize: int = alloc.type.element.numpy_dtype.itemsize  # type: ignore[attr-defined]
            extents = [self.integer(Op.IMAX, self.value(extent), 0) for extent in alloc.operands]
            size: Value | int = itemsize
            for extent in extents:
                size = self.integer(Op.IMUL, size, extent)
            chunks = self.integer(Op.IFLOORDIV, self.integer(Op.IADD, size, ARENA_ALIGNMENT - 1), ARENA_ALIGNMENT)
            words = self.integer(Op.IMUL, chunks, ARENA_ALIGNMENT // WORD)
            self.sizes[buffer.formula] = self._unless_too_large(words, itemsize, extents)
        return self.sizes[buffer.formula]

    def _unless_too_large(self, words: Value, itemsize: int, extents: list[Value]) -> Value:
        """`words`, or 0 when `itemsize` times the extents exceeds `LARGEST_BUFFER`: decided here when
        the extents' ranges decide it (`value_ranges.py`), else by a product computed at run time in f64
        (it cannot wrap; its rounding does not matter that far from any real memory)."""
        ranges = [value_range(extent) for extent in extents]
        if all(r is not None for r in ranges):  # bounds of every run: decided here
            low, high = (itemsize * math.prod(r[k] for r in ranges) for k in (0, 1))  # type: ignore[index]
            if high <= LARGEST_BUFFER or low > LARGEST_BUFFER:
                return words if high <= LARGEST_BUFFER else Constant(I64, 0)
        b = self.builder
        size: Value = Constant(F64, float(itemsize))
        for extent in extents:
            size = b.emit(Op.FMUL, size, b.emit(Op.SITOFP, extent, type=F64))
        too_large = b.emit(Op.FCMP_OGT, size, Constant(F64, float(LARGEST_BUFFER)))
        return b.emit(Op.SELECT, too_large, Constant(I64, 0), words)


def place_in_arena(function: Function) -> bool:
    """Turn the placeable allocs of `function` into views of one arena allocated at its start (module
    docstring); did it change anything? Run it last, after every optimization, right before codegen. A
    function that has views already is left as it is."""
    if any(inst.op is Op.VIEW for inst in function.instructions()):
        return False
    placed = [buffer for buffer in _buffers(function, None) if buffer.status in PLACED]
    if not placed:
        return False
    slots = assign_slots(placed)
    entry = _EntryClones(Builder().before(function.entry.instructions[0]))
    slot_words: list[Value | None] = [None] * slots
    for buffer in sorted(placed, key=lambda b: b.slot):  # type: ignore[arg-type, return-value]
        words, largest = entry.words(buffer), slot_words[buffer.slot]  # type: ignore[index]
        slot_words[buffer.slot] = words if largest in (None, words) else entry.integer(Op.IMAX, largest, words)  # type: ignore
    offsets: list[Value] = [Constant(I64, 0)]
    for words in slot_words:
        at_zero = isinstance(offsets[-1], Constant) and offsets[-1].value == 0  # type: ignore[attr-defined]
        offsets.append(words if at_zero else entry.integer(Op.IADD, offsets[-1], words))  # type: ignore[arg-type]
    entry.builder.loc = placed[0].alloc.loc  # type: ignore[union-attr]  # a failing arena alloc names a placed one
    arena = entry.builder.alloc(I64, offsets[-1], name="arena")
    for buffer in placed:
        _replace_by_view(buffer.alloc, arena, offsets[buffer.slot])  # type: ignore[arg-type, index]
    return True


def _replace_by_view(alloc: Instruction, arena: Instruction, offset: Value) -> None:
    """The alloc's array becomes the arena's words from `offset` on: same type, extents and flags."""
    builder = Builder(loc=alloc.loc).before(alloc)
    view = builder.view(alloc.type.element, alloc.operands, arena, offset, name=alloc.name)  # type: ignore[attr-defined]
    view.flags.update(alloc.flags)
    alloc.replace_all_uses_with(view)
    alloc.erase()


def place_module_in_arena(module: Module) -> bool:
    """`place_in_arena` on every function of `module`: what the backends run right before codegen."""
    return any([place_in_arena(function) for function in module])
