"""The cache planner: how the reverse pass gets the primal values it needs (DESIGN 5).

The reverse blocks run after the whole forward pass, so a primal value `v` that a rule needs is reachable
from a reverse block in one of four ways, tried in this order by `PrimalValues.lookup`:

1. **Directly**: a constant, an argument, or an instruction outside every loop whose block dominates the
   return block (the return block dominates every reverse block, so `v` dominates the use).
2. **A loop counter** (`LoopFrame.counter`): inside the reverse of its loop it is that loop's reverse
   counter; after the loop (a finished loop) it is the loop's trip count. Any other integer induction
   variable of a header (`idx += 1`, `i = a + k*s`) is `start + counter * step`, from its start and step;
   a start that is not at hand (`idx` carried from one run of an inner loop to the next, as in GMM's
   triangular matrix) is looked up in its turn, so it is taped once per run of the loop, not once per
   iteration.
3. **Recomputed** at the use, when it is cheap and all its operands are available without a tape
   (recursively, a few levels deep): integer and comparison ops, casts, `select`, `fadd fsub fmul fneg fabs
   fmin fmax floor ceil`, `pow` by 2.0 or 3.0 (products), `dim`, and a `load` from an array that nothing
   writes after it (no store, atomic add or writing call to its root in a block reachable from the load,
   nor later in its block: `qdiag`, filled before the loops that read it), so memory still holds what the
   forward pass read when the reverse pass runs. Such a load is reloaded even when an index is an
   induction variable whose start must be taped (`icf[k, idx]`): one index tape per run of the loop
   instead of a value tape per iteration.
   A value (not a load) that the forward pass stores with `store v, A[i1, ..., ik]` later in its own block
   is reloaded from `A[i1, ..., ik]` when that element still holds it when the reverse pass runs: no other
   write to A's root can run after the store, and the store writes a different element in every
   iteration of every loop around it (each loop has an index position of its own holding its induction
   variable, or that plus or minus a loop-invariant value): `h1[j, b] = sigmoid(..)` in the MLP, whose
   derivative `y * (1 - y)` then costs no tape.
   A cheap op whose operands are not all available is still recomputed when they come, through cheap ops,
   from at most MAX_TAPED_LEAVES loads, phis and expensive values: those get taped instead (several needed values often
   share them: `right - q` and `q - left` in a stencil), a simple stand-in for Enzyme's min-cut.
4. **Taped**: everything else (phis, expensive math, loads of memory that is written, values whose operands
   are not available). A tape is a local array allocated in the entry block (not in the loop's preheader,
   which a loop guard may skip: the entry dominates every reverse block). There are two kinds:
   - **indexed**, when the trip counts of the loops around `v` are known when the kernel starts: one
     element per run of `v`'s block, the product over the loops around `v`, outermost first, of their
     trip counts (plus one for the innermost loop when `v` is in its header, which runs once more than
     the body). A load that reads the same element, unchanged, in every iteration of one of those loops
     (array and indices do not change in it, nothing in it writes the array: `h[j]` read in `for o: for
     j:` after the loop that wrote `h`) gets no index for that loop: its iterations store the same value
     into one element (not for `prange` loops, whose iterations would write it at once). The forward
     pass stores `v` right after its definition at the index linearized from the loop counters; the
     reverse pass loads it at the index of the reverse counters. A value outside every
     loop that does not dominate the return block (it is inside a branch) gets a tape of one element.
   - **stack**, otherwise (a loop of unknown trip count around `v`, or one whose trip count the kernel
     computes): a `growable` array (capacity STACK_CAPACITY, doubled by `grow` when full) and a slot
     counting the runs of `v`'s block (`%<block>.runs`, one per block, incremented at the block's end).
     The forward pass pushes `v` at the current count; a reverse block reads the top (count - 1); the
     reverse of `v`'s block pops (decrements the count) when it ends. This is exact for any control
     flow: the reverse pass runs the reverse of every block run in the opposite order, so when the
     reverse of a block C that used `v` runs, the runs of `v`'s block popped so far are exactly those
     made after the run of C, and the top is the run whose `v` C saw (the last one before it).
   `i1` values are taped as `i32`.

Indexed tape extents are computed in the entry block (from arguments, constants and `dim`s, re-emitting
the integer ops of the trip count there when it was computed later). A loop nested in loops whose counters
its trip count depends on (`for j in range(i + 1, n)`) gets the largest trip count over the enclosing
iteration space as its extent, when the trip count is a monotone function of each counter (then the
maximum is at a corner: each counter at 0 or at its last value). Anything else takes a stack tape.
Accumulators whose adjoint does not need their value (`s += x[i]`) never reach the planner, so they get
no tape. A loop of unknown trip count records it: its exit counts (`prepare.LoopFrame`) are phis the
reverse pass looks up, so they are taped (once per run of the loop) like any other value.

The questions of ways 1 to 3 (is a value at hand, recomputable, reloadable; which loops a tape needs a
dimension for) are answered by `primal_availability.py`; this module builds the code and the tapes.
"""

from __future__ import annotations

from dataclasses import dataclass

from isozyme.enzyme_ad.errors import DifferentiationError
from isozyme.enzyme_ad.prepare import LoopFrame
from isozyme.enzyme_ad.primal_availability import PrimalAvailability, ReverseContext, loops_around
from isozyme.enzyme_ad.triangular_index import TriangularIndex
from isozyme.ssa.builder import Builder
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Phi, SourceLoc, Value
from isozyme.ssa.loops import Loop, LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.types import I1, I32, I64, ScalarType

ENTRY_OPS: frozenset[Op] = frozenset({Op.IADD, Op.ISUB, Op.IMUL, Op.INEG, Op.IMIN, Op.IMAX, Op.IABS, Op.DIM,
                                      Op.IFLOORDIV, Op.IFLOORMOD, Op.UDIV, Op.SHL, Op.ASHR, Op.AND, Op.OR,
                                      Op.XOR, Op.SELECT, Op.ICMP_EQ, Op.ICMP_NE, Op.ICMP_SLT, Op.ICMP_SLE,
                                      Op.ICMP_SGT, Op.ICMP_SGE})
"""Integer ops re-emitted in the entry block to size tapes; `//`, `%`, `udiv` and shifts only by a constant
that cannot trap (the trip count of `range(a, b, 2)`), so that nothing traps there before its turn. The
bitwise ops are what instcombine makes of `%` by a power of two (`n % 4` is `and n, 3`: `range(n % 4)` is
the remainder loop after blocks of four); `select` and the comparisons, of the trip count of a range whose
span may not fit in i64 (`ssa/range_length.py`)."""

STACK_CAPACITY = 16
"""The initial number of elements of a stack tape; it doubles when full."""


@dataclass(eq=False)
class Tape:
    """One taped value (what `iz.show_cache` lists)."""

    value: Value
    """The primal value stored in the forward pass."""
    array: Instruction
    """The `alloc` holding it, in the entry block."""
    loops: list[Loop]
    """The loops around the value, outermost first: one tape dimension each."""
    extents: list[Value]
    """The extent of each dimension, available in the entry block."""
    size_text: str
    """The number of elements as an expression of the kernel's arguments (`(n + 1) * m`)."""
    stack_pointer: Instruction | None = None
    """For a stack tape: the slot counting the runs of the value's block (module docstring); None for an
    indexed tape."""
    loc: SourceLoc | None = None
    """Where the taping happens, when not at the value's definition (a split-mode call tapes an argument)."""

    @property
    def element(self) -> ScalarType:
        return self.array.type.element  # type: ignore[attr-defined]


class PrimalValues(PrimalAvailability):
    """Gives reverse code the primal values it needs (module docstring), creating tapes on demand."""

    def __init__(self, function: Function, tree: DominatorTree, nest: LoopNest, frames: dict[Loop, LoopFrame],
                 return_block: Block) -> None:
        super().__init__(function, tree, nest, frames, return_block)
        self.tapes: dict[Value, Tape] = {}
        """Every tape made, by the value it holds, in creation order."""
        self.stack_pointers: dict[Block, Instruction] = {}
        """The stack pointer slot of each block with stack tapes; the reverse pass pops (`pop`) at the
        end of the block's reverse."""
        self._entry_copies: dict[Value, Value] = {}
        self._memo: dict[tuple[Block | None, Value], Value] = {}

    # --- the four ways -------------------------------------------------------------------------------------

    def lookup(self, value: Value, context: ReverseContext, builder: Builder) -> Value:
        """`value` as the iteration of `context` saw it, usable at `builder`'s insertion point."""
        if isinstance(value, Constant):
            return Constant(value.type, value.value, name=value.name)
        if isinstance(value, Argument) or self.is_direct(value):
            return value
        key = (builder.block, value)
        if key not in self._memo:
            self._memo[key] = self._lookup(value, context, builder)
        return self._memo[key]

    def _lookup(self, value: Value, context: ReverseContext, builder: Builder) -> Value:
        assert isinstance(value, Instruction)
        frame = self.counters.get(value)
        if frame is not None and (frame.loop in context.counters or frame.trip is not None):
            if frame.loop in context.counters:
                return context.counters[frame.loop]
            return self.lookup(frame.trip, context, builder)  # type: ignore[arg-type]
        triangular = self.triangular(value)
        if triangular is not None and self._counted_here(triangular.loop, context):
            return self._triangular_index(triangular, context, builder, value.name)
        induction = self._induction(value)
        if induction is not None and self._counted_here(induction[0], context):
            # start + counter * step; a start that is not at hand is looked up (taped, if it must be, once
            # per run of the loop rather than once per iteration)
            loop, start, step = induction
            iteration = context.counters.get(loop) or self.lookup(self.frames[loop].trip, context, builder)  # type: ignore[arg-type]
            offset = builder.imul(iteration, self.lookup(step, context, builder))
            return builder.iadd(self.lookup(start, context, builder), offset, name=value.name)
        if self.is_available(value, context):
            return self._recompute(value, context, builder)
        store = self._kept_store(value, context)
        if store is not None:  # reload what the forward pass stored and nothing overwrote (way 3)
            indices = [self.lookup(index, context, builder) for index in store.operands[2:]]
            return builder.load(store.operands[1], *indices, name=value.name)
        if self._cheaper_from_leaves(value, context) or self._reloadable(value, context):
            return self._recompute(value, context, builder)
        forwarding = self.forwarding_store(value)
        if forwarding is not None:  # the stored value, in the iteration the load read (way 3)
            return self._stored_value(value, *forwarding, context, builder)
        return self._load_from_tape(value, context, builder)

    def _triangular_index(self, index: TriangularIndex, context: ReverseContext, builder: Builder,
                          name: str | None) -> Value:
        """start + step * (col * (D - a) - col * (col - 1) / 2) in the iteration col of the column loop (its
        trip count after it): the packed triangle's index, recomputed (`triangular_index.py`), as
        col * (2 (D - a) + 1 - col) / 2, whose product is even (one of col and 2 (D - a) + 1 - col is) and
        whose first factor is loop-invariant (hoisted): four ops per column."""
        col = context.counters.get(index.loop) or self.lookup(self.frames[index.loop].trip, context, builder)  # type: ignore[arg-type]
        odd = builder.iadd(builder.imul(self.lookup(index.bound, context, builder), 2), 1 - 2 * index.offset)
        added = builder.ashr(builder.imul(col, builder.isub(odd, col)), 1)
        if not (isinstance(index.step, Constant) and index.step.value == 1):
            added = builder.imul(added, index.step)
        return builder.iadd(self.lookup(index.start, context, builder), added, name=name)

    def _stored_value(self, load: Instruction, store: Instruction, loop: Loop, context: ReverseContext,
                      builder: Builder) -> Value:
        """The value `store` wrote in the iteration of `loop` given by `load`'s index, which is what `load`
        read (`forwarding_store`): looked up in a context where `loop`'s counter is that index and the
        loops around it have their counters of `context` (the load is in them), so it is recomputed, or
        taped once per iteration of `loop` for every load that reads it."""
        outer = loops_around(self.nest, loop.header)[:-1]
        # a value of `loop`'s body that must be taped needs an indexed tape (a stack's top would be the
        # last iteration's, not the load's): every loop around it counted when the kernel starts, and none
        # inside `loop` whose header values it might read
        if loop.children or any(around not in context.counters for around in outer) \
                or any(self.frames[around].trip is None or self.in_entry(self.frames[around].trip, around) is None  # type: ignore[arg-type]
                       for around in [*outer, loop]):
            return self._load_from_tape(load, context, builder)
        index = self.lookup(load.operands[1], context, builder)
        stored_context = ReverseContext(store.block, {**{around: context.counters[around] for around in outer},  # type: ignore[arg-type]
                                                      loop: index})
        memo, self._memo = self._memo, {}  # what was looked up at this block is for `context`'s iteration
        try:
            return self.lookup(store.operands[0], stored_context, builder)
        finally:
            self._memo = memo

    def _recompute(self, value: Instruction, context: ReverseContext, builder: Builder) -> Value:
        operands = tuple(operand if operand.type.is_array else self.lookup(operand, context, builder)
                         for operand in value.operands)
        clone = Instruction(value.type, op=value.op, operands=operands, attrs=dict(value.attrs),
                            flags=set(value.flags), name=value.name, loc=value.loc)
        return builder.insert(clone)

    # --- tapes -------------------------------------------------------------------------------------------

    def _load_from_tape(self, value: Instruction, context: ReverseContext, builder: Builder) -> Value:
        tape = self.tape_of(value)
        if tape.stack_pointer is not None:  # the top of the stack: the block's run being reversed
            top = builder.isub(builder.load(tape.stack_pointer, 0), 1)
            loaded = builder.load(tape.array, top, name=value.name)
            return builder.icmp_ne(loaded, 0) if value.type == I1 else loaded
        indices = []
        for loop in tape.loops:
            if loop in context.counters:
                indices.append(context.counters[loop])
            elif loop is tape.loops[-1] and loop.header is value.block:
                # a finished loop: the header's last run, when the counter equals the trip count
                indices.append(self.lookup(self.frames[loop].trip, context, builder))
            else:  # SSA dominance rules this out; never guess an iteration
                raise DifferentiationError(f"internal error: {value.op} is needed outside its loop", value.loc)
        loaded = builder.load(tape.array, _linear_index(builder, indices, tape.extents), name=value.name)
        return builder.icmp_ne(loaded, 0) if value.type == I1 else loaded

    def tape_of(self, value: Instruction) -> Tape:
        """The tape of `value`, made (allocated, and stored to in the forward pass) on first use."""
        if value not in self.tapes:
            self.tapes[value] = self._make_tape(value)
        return self.tapes[value]

    def _make_tape(self, value: Instruction) -> Tape:
        block = value.block
        assert block is not None
        loops = loops_around(self.nest, block)
        if any(self.frames[loop].trip is None or self.in_entry(self.frames[loop].trip, loop) is None  # type: ignore[arg-type]
               for loop in loops):
            return self._make_stack_tape(value, loops)
        loops = [loop for loop in loops if not self._same_in_every_iteration(value, loop)]
        extents, texts = [], []
        for loop in loops:
            extent = self.in_entry(self.frames[loop].trip, loop)  # type: ignore[arg-type]
            assert extent is not None
            text = describe(self.frames[loop].trip)  # type: ignore[arg-type]
            if extent is not self._entry_copies.get(self.frames[loop].trip, extent) or \
                    self._entry_copy(self.frames[loop].trip, {}) is None:
                text = f"upper_bound({text})"  # over the iterations of the enclosing loops
            if loop is loops[-1] and loop.header is block:
                extent = self.entry_builder().iadd(extent, 1)
                text = f"({text} + 1)" if " " in text else f"{text} + 1"
            extents.append(extent)
            texts.append(text)
        size = _product(self.entry_builder(), extents)
        element = I32 if value.type == I1 else value.type
        array = self.entry_builder().alloc(element, size, name=f"tape.{value.name or 'v'}")  # type: ignore[arg-type]
        array.flags.add("tape")  # distinct iterations write distinct elements (codegen/parallel_loops.py)
        self._store_in_forward(value, array, [self.frames[loop].counter for loop in loops], extents)
        size_text = " * ".join(texts) if texts else "1"
        return Tape(value, array, loops, extents, size_text)

    def _make_stack_tape(self, value: Instruction, loops: list[Loop]) -> Tape:
        """A growable tape pushed to on every run of the value's block (module docstring)."""
        block = value.block
        assert block is not None
        pointer = self.stack_pointer(block)
        element = I32 if value.type == I1 else value.type
        array = self.entry_start_builder().alloc(element, STACK_CAPACITY, growable=True,  # type: ignore[arg-type]
                                                 name=f"tape.{value.name or 'v'}")
        builder = _after(value)
        position = builder.load(pointer, 0)
        builder.grow(array, builder.iadd(position, 1))
        builder.store(builder.cast(Op.ZEXT, value, I32) if value.type == I1 else value, array, position)
        return Tape(value, array, loops, [], f"runs of {block.name or 'its block'} (grows)", pointer)

    def stack_pointer(self, block: Block) -> Instruction:
        """The slot counting the runs of `block`, incremented at its end (made on first use)."""
        if block not in self.stack_pointers:
            entry = self.entry_start_builder()
            slot = entry.alloc(I64, 1, name=f"{block.name or 'bb'}.runs")
            entry.store(0, slot, 0)
            terminator = block.terminator
            assert terminator is not None
            builder = Builder(loc=terminator.loc).before(terminator)
            builder.store(builder.iadd(builder.load(slot, 0), 1), slot, 0)
            self.stack_pointers[block] = slot
        return self.stack_pointers[block]

    def pop(self, block: Block, builder: Builder) -> None:
        """At the end of the reverse of `block`: its stack tapes' tops are done with."""
        slot = self.stack_pointers[block]
        builder.store(builder.isub(builder.load(slot, 0), 1), slot, 0)

    def _store_in_forward(self, value: Instruction, array: Value, counters: list[Value],
                          extents: list[Value]) -> None:
        builder = _after(value)
        stored = builder.cast(Op.ZEXT, value, I32) if value.type == I1 else value
        builder.store(stored, array, _linear_index(builder, counters, extents))

    def entry_start_builder(self) -> Builder:
        """A builder inserting at the start of the entry block: for what needs no value of the kernel (a
        stack tape, a slot) and may be used by the entry block itself."""
        entry = self.function.entry
        return Builder().before(entry.instructions[entry.first_non_phi_index()])

    def entry_builder(self) -> Builder:
        """A builder inserting at the end of the entry block, before its terminator."""
        terminator = self.function.entry.terminator
        assert terminator is not None
        return Builder().before(terminator)

    def in_entry(self, value: Value, loop: Loop) -> Value | None:
        """`value`, the trip count of `loop`, computed in the entry block (re-emitted there if needed); for
        a loop nested in loops whose counters it depends on (`range(i + 1, n)`), an upper bound instead;
        None when neither is known when the kernel starts (it depends on values the kernel computes)."""
        copy = self._entry_copy(value, {})
        if copy is None:
            copy = self._entry_bound(value, loops_around(self.nest, loop.header)[:-1])
        return copy

    def bound_in_entry(self, value: Value, block: Block) -> Value | None:
        """`value`, an integer computed in `block`, or an upper bound of it over all iterations of the loops
        around `block`, computed in the entry block (as `in_entry`); None when not known there."""
        copy = self._entry_copy(value, {})
        if copy is None:
            copy = self._entry_bound(value, loops_around(self.nest, block))
        return copy

    def _entry_copy(self, value: Value, substitute: dict[Value, Value], depth: int = 0) -> Value | None:
        """`value` re-emitted in the entry block, with `substitute`'s values for some loop counters."""
        if value in substitute:
            return substitute[value]
        if isinstance(value, Constant):
            return Constant(value.type, value.value)
        if isinstance(value, Argument) or (isinstance(value, Instruction) and value.block is self.function.entry):
            return value
        if not substitute and value in self._entry_copies:
            return self._entry_copies[value]
        if not isinstance(value, Instruction) or value.op not in ENTRY_OPS or depth > 8:
            return None
        if value.op in (Op.IFLOORDIV, Op.IFLOORMOD, Op.UDIV, Op.SHL, Op.ASHR) and not _safe_divisor_or_shift(value):
            return None
        array = value.operands[0]
        if value.op is Op.DIM and isinstance(array, Instruction) and array.op is Op.ALLOC:
            return self._entry_copy(array.operands[value.attrs["axis"]], substitute, depth + 1)  # type: ignore[index]
        operands = []
        for operand in value.operands:
            copy = operand if operand.type.is_array and isinstance(operand, Argument) else \
                self._entry_copy(operand, substitute, depth + 1)
            if copy is None:
                return None
            operands.append(copy)
        clone = Instruction(value.type, op=value.op, operands=tuple(operands), attrs=dict(value.attrs),
                            name=value.name, loc=value.loc)
        self.entry_builder().insert(clone)
        if not substitute:
            self._entry_copies[value] = clone
        return clone

    def _entry_bound(self, value: Value, outer: list[Loop]) -> Value | None:
        """An upper bound of `value` over all iterations of the `outer` loops, when `value` is a monotone
        function of their counters (then its maximum is at a corner of the iteration box: each counter at
        0 or at its trip count - 1). None otherwise."""
        counters = [self.frames[o].counter for o in outer]
        if not outer or any(self.frames[o].trip is None for o in outer) \
                or any(_direction(value, c, set(counters)) is None for c in counters):
            return None
        corners: list[dict[Value, Value]] = [{}]
        for other, counter in zip(outer, counters):
            last = self._entry_copy(self.frames[other].trip, {})  # type: ignore[arg-type]
            if last is None:
                return None
            last = self.entry_builder().isub(last, 1)
            corners = [{**corner, counter: at} for corner in corners for at in (Constant(I64, 0), last)]
        bound: Value | None = None
        for corner in corners:
            at_corner = self._entry_copy(value, corner)
            if at_corner is None:
                return None
            bound = at_corner if bound is None else self.entry_builder().imax(bound, at_corner)
        return self.entry_builder().imax(bound, 0)


_MONOTONE_OPS = {Op.IADD: (1, 1), Op.ISUB: (1, -1), Op.IMAX: (1, 1), Op.IMIN: (1, 1)}
"""How each operand's direction carries to the result (+1 same, -1 reversed)."""


def _direction(value: Value, counter: Value, counters: set[Value], depth: int = 0) -> int | None:
    """+1 if `value` never decreases when `counter` grows (the other `counters` fixed), -1 if it never
    increases, 0 if it does not depend on it, None when unknown (another phi, an unknown op)."""
    if value is counter:
        return 1
    if value in counters or not isinstance(value, Instruction):
        return 0
    if isinstance(value, Phi) or depth > 8:
        return None
    operands = value.operands
    if value.op in _MONOTONE_OPS:
        signs = _MONOTONE_OPS[value.op]
        return _combine([_scaled(_direction(o, counter, counters, depth + 1), sign)
                         for o, sign in zip(operands, signs)])
    if value.op is Op.INEG:
        return _scaled(_direction(operands[0], counter, counters, depth + 1), -1)
    if value.op in (Op.IMUL, Op.IFLOORDIV, Op.ASHR, Op.SHL) and isinstance(operands[1], Constant):
        factor = operands[1].value
        sign = 1 if value.op in (Op.ASHR, Op.SHL) or factor > 0 else (-1 if factor < 0 else 0)  # type: ignore[operator]
        return _scaled(_direction(operands[0], counter, counters, depth + 1), sign)
    if value.op is Op.DIM:
        return 0
    if all(_direction(o, counter, counters, depth + 1) == 0 for o in operands if not o.type.is_array):
        return 0
    return None


def _scaled(direction: int | None, sign: int) -> int | None:
    return None if direction is None else direction * sign


def _combine(directions: list[int | None]) -> int | None:
    nonzero = {d for d in directions if d != 0}
    if None in nonzero or len(nonzero) > 1:
        return None
    return nonzero.pop() if nonzero else 0


def _safe_divisor_or_shift(inst: Instruction) -> bool:
    """Is the second operand of a trapping integer op a constant with which it cannot trap?"""
    amount = inst.operands[1]
    if not isinstance(amount, Constant):
        return False
    if inst.op in (Op.SHL, Op.ASHR):
        return 0 <= amount.value < amount.type.bits  # type: ignore[operator, attr-defined]
    return amount.value != 0


def _after(value: Instruction) -> Builder:
    """A builder inserting right after `value` (after all phis, for a phi)."""
    block = value.block
    assert block is not None
    if isinstance(value, Phi):
        return Builder(loc=value.loc).before(block.instructions[block.first_non_phi_index()])
    return Builder(loc=value.loc).before(block.instructions[block.position(value) + 1])


def _linear_index(builder: Builder, indices: list[Value], extents: list[Value]) -> Value:
    """The row-major position of `indices` in an array of `extents` (0 for no dimension)."""
    if not indices:
        return Constant(I64, 0)
    position = indices[0]
    for index, extent in zip(indices[1:], extents[1:]):
        position = builder.iadd(builder.imul(position, extent), index)
    return position


def _product(builder: Builder, extents: list[Value]) -> Value:
    if not extents:
        return Constant(I64, 1)
    size = extents[0]
    for extent in extents[1:]:
        size = builder.imul(size, extent)
    return size


_INFIX = {Op.IADD: "+", Op.ISUB: "-", Op.IMUL: "*", Op.IFLOORDIV: "//", Op.IFLOORMOD: "%"}
_CALLS = {Op.IMAX: "max", Op.IMIN: "min", Op.IABS: "abs"}


def _operand_text(value: Value, depth: int) -> str:
    text = describe(value, depth)
    return f"({text})" if isinstance(value, Instruction) and value.op in _INFIX else text


def describe(value: Value, depth: int = 0) -> str:
    """An integer value as a short source-like expression (`max(n, 0)`, `x.shape[0]`), for reports."""
    if isinstance(value, Constant):
        return str(value.value)
    if isinstance(value, Argument):
        return value.name or f"arg{value.index}"
    if isinstance(value, Instruction) and depth < 4:
        operands = value.operands
        if value.op in _INFIX:
            left, right = (_operand_text(o, depth + 1) for o in operands)
            return f"{left} {_INFIX[value.op]} {right}"
        if value.op in _CALLS:
            return f"{_CALLS[value.op]}({', '.join(describe(o, depth + 1) for o in operands)})"
        if value.op is Op.DIM:
            return f"{describe(operands[0], depth + 1)}.shape[{value.attrs['axis']}]"
    return f"%{value.name}" if value.name else "?"
