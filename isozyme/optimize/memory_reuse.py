"""Memory reuse: one arena per call for the local arrays of a function, shared by liveness.

    placed = place_in_arena(function)   # codegen's layout: allocs become views into one arena alloc
    plan = plan_memory(module["diffe_heat"], sizes={"u": (1000,), "steps": 50})
    validate_plan(plan)                 # that layout at these sizes: no two buffers live at once share a byte
    print(plan.format())                # requested, used, saved, the best-fit figure; one row per buffer

`place_in_arena` is the transform both backends run on every function right before codegen
(`runtime/llvm_backend.py`, `runtime/opencl_backend.py`), after every optimization: no pass may run after
it, since the views of one arena are not distinct arrays to alias analysis (`memory_effects.py` gives a
view an unknown root). `plan_memory` is the analysis that reports the same layout evaluated at given
argument values, and `iz.show_memory` prints it. Requires verified SSA. The analyses they share live
beside this file: buffer extents (`memory_extents.py`), liveness (`memory_liveness.py`), and the slot
layout with the plan's figures (`memory_layout.py`).

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

import contextlib
import math
from collections.abc import Hashable, Mapping, Sequence

from isozyme.optimize.memory_extents import (
    ArgumentValue,
    ExtentEvaluator,
    Unevaluated,
    argument_values,
    byte_size,
    computed_at_start,
    dim_source,
    formula_key,
    size_formula,
    start_inputs,
)
from isozyme.optimize.memory_layout import (
    ARENA_ALIGNMENT,
    PLACED,
    Buffer,
    BufferStatus,
    MemoryPlan,
    assign_slots,
    plan_buffers,
)
from isozyme.optimize.memory_liveness import Liveness, aliases
from isozyme.optimize.value_ranges import value_range
from isozyme.ssa.builder import Builder
from isozyme.ssa.cfg import reverse_post_order
from isozyme.ssa.def_use import operands_first
from isozyme.ssa.flags import is_growable_alloc
from isozyme.ssa.ir import Argument, Constant, Function, Instruction, Module, Value
from isozyme.ssa.loops import LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.printer import Namer
from isozyme.ssa.semantics import evaluate
from isozyme.ssa.types import F64, I64

WORD = 8
"""Bytes of one arena word (the arena is an `i64` array; view offsets count words)."""

LARGEST_BUFFER = 2**52
"""Bytes (4 PiB, beyond any memory): a buffer larger than this takes no room in the arena, and its view
fails as its alloc would (out of memory, or a size that overflows). So the arena's size cannot wrap
(below 2**11 slots)."""

PRIVATE = "private"
"""The flag of a shadow array that OpenCL copies per work item of a parallel loop (`enzyme_ad/reverse.py`)."""


# --- the plan ----------------------------------------------------------------------------------------------


def _in_parallel_loop(alloc: Instruction, nest: LoopNest) -> bool:
    loop = nest.loop_of(alloc.block)  # type: ignore[arg-type]
    while loop is not None:
        if any("parallel" in phi.flags for phi in loop.header.phis):
            return True
        loop = loop.parent
    return False


def _buffer(alloc: Instruction, liveness: Liveness, nest: LoopNest, extents: ExtentEvaluator,
            namer: Namer) -> Buffer:
    alias_set = liveness.buffers[alloc]
    buffer = Buffer(namer.value(alloc), None, liveness.interval(alloc), alloc=alloc,
                    formula=(alloc.type.element.numpy_dtype.itemsize, *map(formula_key, alloc.operands)),  # type: ignore[attr-defined]
                    type_text=f"{alloc.type.element}[{', '.join(map(namer.value, alloc.operands))}]",  # type: ignore[attr-defined]
                    size_text=size_formula(alloc, namer))
    if is_growable_alloc(alloc):
        buffer.status = BufferStatus.GROWABLE
    elif PRIVATE in alloc.flags or _in_parallel_loop(alloc, nest):
        buffer.status = BufferStatus.PER_WORK_ITEM
        if PRIVATE not in alloc.flags:  # a flagged array's copies are shaped like it: sized below, once
            with contextlib.suppress(Unevaluated):
                buffer.size = byte_size(alloc, extents)  # one copy
    elif any(liveness.live_at(alias, alloc) for alias in alias_set if alias is not alloc):
        buffer.status = BufferStatus.MULTI_INSTANCE
    else:
        try:
            buffer.size = byte_size(alloc, extents)
        except Unevaluated as missing:
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
    extents = ExtentEvaluator(argument_values(function, sizes))
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
        """`value` (known at the start, `ExtentEvaluator`'s rules) computed at the start."""
        if isinstance(value, (Constant, Argument)):
            return value
        for pending in operands_first(value, start_inputs, self.clones):  # a chain of ops may be long
            if not isinstance(pending, (Constant, Argument)):
                self.clones[pending] = self._clone(pending)  # type: ignore[arg-type]
        return self.clones[value]

    def _cloned(self, value: Value) -> Value:
        return value if isinstance(value, (Constant, Argument)) else self.clones[value]

    def _clone(self, inst: Instruction) -> Value:
        """`inst` at the start, its inputs cloned already."""
        if inst.op is Op.DIM:
            source = dim_source(inst)
            if isinstance(source, Argument) and source.type.is_array:
                return self.builder.dim(source, inst.attrs["axis"])  # type: ignore[arg-type]
            return self._cloned(source)  # type: ignore[arg-type]
        assert computed_at_start(inst), f"{inst.op} is not known when the function starts"
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
