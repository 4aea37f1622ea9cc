"""Memory layout: the buffers of a memory plan, their slots by greedy interval colouring, the arena offsets,
the best-fit comparison figure, and a brute-force check of a plan (`memory_reuse.py`'s docstring: "Layout"
and "Reported figures").

It knows buffers only by their sizes (or extent formulas) and live intervals, not by the IR. Invariant:
`assign_slots` never gives two buffers whose live intervals meet the same slot, and `lay_out_slots` makes
every slot as large as its largest buffer, aligned, with the slots end to end; so buffers share bytes only
when they are never live together, which `validate_plan` checks pairwise, independently of the layout.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import combinations

from isozyme.ssa.ir import Instruction

ARENA_ALIGNMENT = 64
"""Bytes: every offset is a multiple of it (a cache line, and enough for any vector load)."""


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
    def per_work_item(self) -> int:
        """Bytes of one copy of each sized per-work-item buffer (allocated in a parallel loop), end to end:
        a CPU task holds one copy at a time, OpenCL one per iteration (not counted in `requested`)."""
        return sum(buffer.aligned_size for buffer in self.buffers
                   if buffer.status is BufferStatus.PER_WORK_ITEM and buffer.size is not None)

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
        if self.per_work_item:
            lines.append(f"; per work item: {self.per_work_item} B a copy (a CPU task holds one copy at a time, "
                         "OpenCL one per iteration)")
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
