"""Fusion legality: which two adjacent loops `loop_fusion.py` may fuse, and the shape it then rewrites.

This module only answers; it changes no IR. `adjacent_pair` finds the shape below around a loop, and
`fusible` says whether the pair may fuse; anything either cannot prove, it rejects. Two loops L1 and L2 fuse
when all of this holds:

  - iterations: each is counted (`ssa/trip_count.py`) with a constant step, leaves only from its header
    and has one latch, and the two induction variables run through the same values (same start, step,
    exit test and bound): `0, 1, ... < t` loops, and the `t, t-1, ... != 0` loops of the reverse sweep.
    Both are `prange` loops or neither is (fused, a parallel loop would run serially). Two parallel loops
    may also run through the same values in opposite directions (*mirrored*): L1 `0, 1, ... < t` and L2
    `t, t-1, ... != 0` (a `prange` loop of the forward sweep and the reverse of one), t known not
    negative. The iterations of a parallel loop may run in any order when every header phi but its
    counter is a reduction (`ssa/reductions.py`) and the counter is not used after it, so L2 then runs
    counting up: its iteration with counter v + 1 beside L1's with counter v, which is the same element
    index for the reverse of `x[i]` (`x[v - 1]`, v = i + 1).
  - shape: L1's exit block E1 holds a branch and perhaps allocs and pure values (the arrays of the next
    stage: they move before L1, to the first block of the chain that leads to it), and perhaps L1's exit
    phis with an epilogue using them (loads, stores and pure values: a bias gradient `d_b[j] += s` after
    the loop over the batch), which stays in E1 and so runs after L2 once the loops are fused: L2 and the
    blocks before it must not use its values, write what it reads or touch what it writes. From E1 a
    chain of blocks, each reached only from the one before, leads to L2's header; the branches on the
    way either go on or skip L2 to its exit E2. What decides whether L1 runs (the `cbr`s of the
    single-predecessor chain before it that skip to E1) and what decides whether L2 runs (those after E1)
    must be the same conditions, not counting guards that skip a loop only when it would run zero times
    (`t > 0`, `t == 0` for the loop's extent t; AD's reverse loops carry two). A `cbr` of the chain
    before L1 may also skip both loops, straight to E2. Nothing else reaches E1 or E2. The instructions
    on the way to L2 (its invariants, hoisted by licm) move before L1, so they must be pure (or loads of
    arrays L1 does not write, when L1 has a preheader), and E2's phis must take one value on every edge
    that skips L2. L2's header holds phis, pure per-iteration values (a counting-down loop's index) used
    only in L2, and its exit test; the block it enters is reached only from it. L2 may hold inner loops.
  - values: L2 uses nothing that L1 computes, and neither loop has a call.
  - memory: for every array both loops touch, with at least one write among the two accesses, iteration j
    of L1 and iteration i of L2 touch the same element only when j <= i, and only when j == i for `prange`
    loops, whose iterations run on different work items. The dependence test reads each index as affine
    in the induction variable, `a*v + s + c` (a and c constants, s one loop-invariant value): one index
    with equal coefficients pins j - i to (c2 - c1) / a, whatever the other indices are (an inner loop's
    index, say), and one that never agrees rules the pair out. No index that pins them: not proven. For
    mirrored loops L2's counter is L1's plus one, so L2's indices are read as `a*(k + 1) + s + c`. An
    index may also be a row-major position over the counters of inner loops whose leading digit is
    affine (AD's tapes of inner loops' values): `fusion_dependence.py` has the test.
"""

from __future__ import annotations

from dataclasses import dataclass

from isozyme.optimize.fusion_dependence import Affine, in_order
from isozyme.optimize.fusion_dependence import affine_form as dependence_form
from isozyme.optimize.instcombine import is_constant
from isozyme.ssa.cfg import predecessors
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.flags import PARALLEL, is_growable_alloc
from isozyme.ssa.ir import Argument, Block, Constant, Instruction, Phi, Value
from isozyme.ssa.loops import Loop, LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.reductions import is_reduction
from isozyme.ssa.semantics import may_trap
from isozyme.ssa.trip_count import TripCount, analyze_trip_count, is_known_nonnegative

ACCESSES = (Op.LOAD, Op.STORE, Op.ATOMIC_ADD)
WRITES = (Op.STORE, Op.ATOMIC_ADD)


@dataclass(eq=False)
class Candidate:
    loop: Loop
    trip: TripCount
    entering: Block
    """The loop's only entering block (where L2's hoisted invariants go, for L1)."""
    exit: Block
    """The block the loop leaves to."""

    @property
    def parallel(self) -> bool:
        return any(PARALLEL in phi.flags for phi in self.loop.header.phis)


@dataclass(eq=False)
class Pair:
    """Two adjacent loops, and the guards between them (module docstring, "shape")."""

    one: Candidate
    two: Candidate
    skips_one: list[Block]
    """The blocks whose `cbr` skips L1, going straight to E1."""
    chain_two: list[Block]
    """The blocks after E1 that lead to L2's header, in order (L2's entering block last)."""
    skips_two: list[Block]
    """The blocks (E1 and those of `chain_two`) whose `cbr` skips L2, going straight to E2."""
    skips_both: list[Block]
    """The blocks before L1 whose `cbr` skips both loops, going straight to E2."""
    hoisted: list[Instruction]
    """What E1 holds that moves before L1 (allocs of the next stage's arrays, pure values)."""
    sunk: list[Instruction]
    """What E1 holds that stays after L1, and so runs after L2 once fused (L1's exit phis, and an
    epilogue using them: a bias gradient `d_b[j] += ...` after the loop over the batch)."""
    tree: DominatorTree
    """The dominator tree of the loop nest the pair was found in (the function as it is until it fuses):
    `fusible` reads dominance and predecessors there instead of computing them again."""
    mirrored: bool = False
    """L1 counts up and L2 down through the same values, both parallel: L2's counter becomes L1's plus one
    (module docstring, "iterations")."""


def counted_loop(loop: Loop) -> Candidate | None:
    trip = analyze_trip_count(loop)
    if not isinstance(trip, TripCount) or not isinstance(trip.iv.step, Constant) or not trip.iv.step.value:
        return None
    exits = loop.exit_blocks
    if len(exits) != 1 or loop.exiting_blocks != [loop.header] or len(loop.entering_blocks) != 1:
        return None  # a `break` leaves from elsewhere
    return Candidate(loop, trip, loop.entering_blocks[0], exits[0])


Guard = tuple[Value, bool]
"""A condition that decides whether a loop runs, and the value for which it does."""


def _skips_before(one: Candidate, two_exit: Block, preds: dict[Block, list[Block]]
                  ) -> tuple[list[Block], list[Guard], list[Block]]:
    """Walking back from L1's header: the blocks of the single-predecessor chain whose `cbr` goes either
    further towards L1 or to E1, and their conditions; and those whose `cbr` goes to E2 instead,
    skipping both loops."""
    skips: list[Block] = []
    guards: list[Guard] = []
    both: list[Block] = []
    child, block = one.loop.header, one.entering
    while True:
        end = block.terminator
        assert end is not None
        if end.op is Op.CBR and set(end.successors) == {child, one.exit} and child is not one.exit:
            skips.append(block)
            guards.append((end.operands[0], end.successors[0] is child))
        elif end.op is Op.CBR and set(end.successors) == {child, two_exit} and child is not two_exit:
            both.append(block)
        elif end.op is not Op.BR:
            break
        if len(preds[block]) != 1:
            break
        child, block = block, preds[block][0]
    return skips, guards, both


def _chain_after(one: Candidate, two_exit: Block, header_two: Block, preds: dict[Block, list[Block]]
                 ) -> tuple[list[Block], list[Block], list[Guard]] | None:
    """From E1 to L2's header: the blocks after E1 (each reached only from the one before), the blocks
    whose `cbr` skips to E2, and their conditions; None if the path has any other shape."""
    chain: list[Block] = []
    skips: list[Block] = []
    guards: list[Guard] = []
    block = one.exit
    while block is not header_two:
        end = block.terminator
        assert end is not None
        if end.op is Op.BR:
            following = end.successors[0]
        elif end.op is Op.CBR and two_exit in end.successors and len(set(end.successors)) == 2:
            following = end.successors[1] if end.successors[0] is two_exit else end.successors[0]
            skips.append(block)
            guards.append((end.operands[0], end.successors[0] is following))
        else:
            return None
        if following is not header_two:
            if preds[following] != [block] or following in chain or following is one.exit:
                return None
            chain.append(following)
        block = following
    return chain, skips, guards


def adjacent_pair(first: Loop, nest: LoopNest) -> Pair | None:
    """`first` and the loop after it, when the shape is the one the docstring describes. `nest` is fresh:
    its dominator tree's predecessors are the function's."""
    one = counted_loop(first)
    if one is None:
        return None
    preds = nest.tree.preds
    for second in nest:
        if second.parent is first.parent and second is not first \
                and _behind(second.entering_blocks[0], one.exit, preds):
            two = counted_loop(second)
            if two is None:
                continue
            found = _chain_after(one, two.exit, second.header, preds)
            if found is not None:
                break
    else:
        return None
    skips_one, guards_one, skips_both = _skips_before(one, two.exit, preds)
    if set(preds[one.exit]) != {first.header, *skips_one}:
        return None  # E1 is also reached some other way, on which L2 runs without L1
    exit_parts = _split_exit(one, skips_one, nest.tree)
    if exit_parts is None:
        return None
    chain_two, skips_two, guards_two = found
    if set(preds[two.exit]) != {second.header, *skips_two, *skips_both}:
        return None
    mirrored = False
    if not _same_iterations(one.trip, two.trip):
        if not _mirrored(one, two):
            return None
        mirrored = True
    if one.parallel != two.parallel:
        return None  # fused, a parallel loop would run serially
    deciding_one = {guard for guard in guards_one if not _only_when_empty(guard, one.trip)}
    deciding_two = {guard for guard in guards_two if not _only_when_empty(guard, two.trip)}
    if deciding_one != deciding_two:
        return None  # one loop may run where the other does not
    return Pair(one, two, skips_one, chain_two, skips_two, skips_both, *exit_parts, mirrored=mirrored, tree=nest.tree)


def _same_iterations(one: TripCount, two: TripCount) -> bool:
    """Do the two induction variables take the same values, in the same order (same start, constant step,
    exit test and bound)? Then iteration k of one loop is iteration k of the other."""
    return one.iv.step.value == two.iv.step.value and one.predicate is two.predicate \
        and _same(one.iv.start, two.iv.start) and _same(one.bound, two.bound)  # type: ignore[attr-defined]


def _mirrored(one: Candidate, two: Candidate) -> bool:
    """Do two parallel loops run through the same values in opposite directions, L1 `0, 1, ... < t` and L2
    `t, t-1, ... != 0` with t not negative, and may L2 run counting up (module docstring, "iterations")?"""
    up, down = one.trip, two.trip
    if not (one.parallel and two.parallel) or up.iv.step.value != 1 or down.iv.step.value != -1:  # type: ignore[attr-defined]
        return False
    extent = _extent(up)
    if extent is None or extent is not _extent(down) or not is_known_nonnegative(extent):
        return False
    counter = down.iv.phi
    if any(use.user.block not in two.loop for use in counter.uses):
        return False  # its value after the loop (0) is not L1's counter's plus one
    return all(phi is counter or is_reduction(phi, two.loop) for phi in two.loop.header.phis)


def _same(a: Value, b: Value) -> bool:
    return a is b or isinstance(a, Constant) and isinstance(b, Constant) and a.value == b.value


def _extent(trip: TripCount) -> Value | None:
    """The value t for which t <= 0 means the loop runs zero times: the bound of `0, 1, ... < t` (or
    `!= t`), the start of `t, t-1, ... != 0`; None for other loops."""
    step = trip.iv.step.value  # type: ignore[attr-defined]
    if step == 1 and _zero(trip.iv.start) and trip.predicate in (Op.ICMP_SLT, Op.ICMP_NE):
        return trip.bound
    if step == -1 and _zero(trip.bound) and trip.predicate in (Op.ICMP_SGT, Op.ICMP_NE):
        return trip.iv.start
    return None


def _behind(block: Block, start: Block, preds: dict[Block, list[Block]]) -> bool:
    """Is `block` at the end of a chain of single-predecessor blocks that begins at `start`?"""
    seen = set()
    while block is not start:
        if len(preds[block]) != 1 or block in seen:
            return False
        seen.add(block)
        block = preds[block][0]
    return True


def chain_top(one: Candidate, skips_one: list[Block]) -> Block:
    """The first block of the chain that leads to L1: it runs on every path to E1."""
    return skips_one[-1] if skips_one else one.entering


def _split_exit(one: Candidate, skips_one: list[Block], tree: DominatorTree
                ) -> tuple[list[Instruction], list[Instruction]] | None:
    """What E1 holds besides its branch, in two parts: allocs (of the arrays the next stage writes) and
    pure values that can run before L1, at the end of the chain's first block, which every path to E1
    runs through; and L1's exit phis, with what uses them or memory, which stay after L1 (loads, stores
    and pure values: no calls or checks). None if something fits neither."""
    top = chain_top(one, skips_one)
    hoisted: list[Instruction] = []
    sunk: list[Instruction] = []
    for inst in one.exit.instructions[:-1]:
        if isinstance(inst, Phi) or any(operand in sunk for operand in inst.operands):
            sunk.append(inst)
        elif inst.op is Op.ALLOC and not is_growable_alloc(inst) or inst.info.pure:
            if not all(not isinstance(operand, Instruction) or operand in hoisted
                       or tree.dominates(operand.block, top) for operand in inst.operands):  # type: ignore[arg-type]
                return None
            hoisted.append(inst)
        elif inst.op in (Op.LOAD, Op.STORE, Op.ATOMIC_ADD):
            sunk.append(inst)
        else:
            return None
    return hoisted, sunk


def _zero(value: Value) -> bool:
    return value.type.is_int and is_constant(value, 0)


def _only_when_empty(guard: Guard, trip: TripCount) -> bool:
    """Does the guard skip the loop only when it would run zero times (so skipping is running it zero
    times)? `t > 0` entering, `t <= 0` skipping, and `t == 0` / `t != 0` for a `t` known not negative,
    where t is the loop's extent or the `x` of an extent `imax x, 0`. (A `!=` loop with a negative extent
    would not stop, so its guards must not be taken for harmless unless t is known not negative.)"""
    condition, enter_when = guard
    bound = _extent(trip)
    if bound is None or not isinstance(condition, Instruction) or len(condition.operands) != 2:
        return False
    clamped = isinstance(bound, Instruction) and bound.op is Op.IMAX and _zero(bound.operands[1])
    names = {bound} | ({bound.operands[0]} if clamped else set())  # type: ignore[union-attr]
    left, right = condition.operands
    op = condition.op
    if _zero(left) and right in names:  # 0 < t, 0 >= t
        op, left, right = {Op.ICMP_SLT: Op.ICMP_SGT, Op.ICMP_SGE: Op.ICMP_SLE}.get(op), right, left
    if left not in names or not _zero(right):
        return False
    not_negative = is_known_nonnegative(left)
    if op is Op.ICMP_SGT or op is Op.ICMP_NE and not_negative:
        return enter_when  # true exactly when t > 0: entering then is harmless
    if op is Op.ICMP_SLE or op is Op.ICMP_EQ and not_negative:
        return not enter_when
    return False


def body_entry(candidate: Candidate) -> Block | None:
    """The header's successor inside the loop, when the header is its only predecessor and it has no phis."""
    header = candidate.loop.header
    inside = [block for block in header.successors if block in candidate.loop]
    if len(inside) != 1 or inside[0].phis or inside[0] is header:
        return None
    preds = predecessors(header.function)[inside[0]]  # type: ignore[arg-type]
    return inside[0] if preds == [header] else None


def fusible(pair: Pair) -> bool:
    one, two = pair.one, pair.two
    for inst in header_computations(two):  # they move to L2's body
        if not inst.info.pure or any(use.user.block not in two.loop for use in inst.uses):
            return False
    if len(one.loop.latches) != 1 or len(two.loop.latches) != 1 or body_entry(two) is None:
        return False
    body_one = [i for b in one.loop.blocks for i in b.instructions]
    body_two = [i for b in two.loop.blocks for i in b.instructions]
    if any(i.op is Op.CALL for i in body_one + body_two):
        return False
    inside_one = set(body_one)
    if any(operand in inside_one for inst in body_two for operand in inst.operands):
        return False
    if not _sinkable_past(pair, body_two):
        return False
    if not _hoistable(pair, body_one, pair.tree) or not _skipped_values_agree(pair, pair.tree):
        return False
    return _independent(one, two, body_one, body_two, shift=1 if pair.mirrored else 0)


def _sinkable_past(pair: Pair, body_two: list[Instruction]) -> bool:
    """Can what stays in E1 run after L2 (and after the chain's instructions, which move before L1)? L2 and
    the chain must not use its values, write an array it reads, or touch an array it writes."""
    if not pair.sunk:
        return True
    sunk = set(pair.sunk)
    between = [inst for block in pair.chain_two for inst in block.instructions] + body_two
    if any(operand in sunk for inst in between for operand in inst.operands):
        return False
    accesses = [inst for inst in pair.sunk if inst.op in ACCESSES]
    if any(not _is_distinct_array(array_of(inst)) for inst in accesses):
        return False
    written = {array_of(inst) for inst in accesses if inst.op in WRITES}
    read = {array_of(inst) for inst in accesses}
    for inst in between:
        if inst.op in ACCESSES and (array_of(inst) in written or inst.op in WRITES and array_of(inst) in read):
            return False
        if inst.op is Op.CALL:
            return False
    return True


def header_computations(candidate: Candidate) -> list[Instruction]:
    """The header's instructions other than its phis and its branch (the exit test, and for a loop
    counting down the index of the iteration)."""
    header = candidate.loop.header
    return header.instructions[header.first_non_phi_index():-1]


def _hoistable(pair: Pair, body_one: list[Instruction], tree: DominatorTree) -> bool:
    """Can the instructions between E1 and L2's header run before L1, in L1's entering block? Pure ones
    can, and loads of arrays L1 does not write, when their operands are defined before L1 (or on the way)."""
    one = pair.one
    written = {array_of(i) for i in body_one if i.op in WRITES}
    guarded = one.entering.terminator.op is Op.BR  # type: ignore[union-attr]  # else a load could run for no trip
    moving = {inst for block in pair.chain_two for inst in block.instructions}
    for inst in moving:
        if inst.info.terminator:
            continue
        loads_safely = inst.op is Op.LOAD and guarded and array_of(inst) not in written
        cannot_trap = inst.op in (Op.SHL, Op.ASHR) and not may_trap(inst)  # x * 2 became `shl x, 1`
        if isinstance(inst, Phi) or not (inst.info.pure or loads_safely or cannot_trap):
            return False
        for operand in inst.operands:
            if isinstance(operand, Instruction) and operand not in moving \
                    and not tree.dominates(operand.block, one.entering):  # type: ignore[arg-type]
                return False
    return True


def _skipped_values_agree(pair: Pair, tree: DominatorTree) -> bool:
    """The phis of E2 take one value on all the edges that skip L2 (fused, only E1's edge skips both
    loops, when L1 can be skipped at all), and that value is there at E1; when only L1 is guarded, no
    value of L2 is used after it (AD's counters of a loop's iterations and branches are); and when L1 is
    guarded, no value of the blocks before L2 is used after L2 (with opt="pre", `n - 1` in L2's
    preheader and in the reverse pass after it)."""
    if pair.skips_one and not pair.skips_two and (pair.two.exit.phis or _used_after(pair.two.loop)):
        return False  # what L2's values are when it runs zero times would have to be worked out
    if pair.skips_one and _hoisted_used_after(pair):
        return False  # hoisted into L1's entering block, which the edge that skips L1 skips
    for phi in pair.two.exit.phis:
        values = {phi.incoming_value(block) for block in pair.skips_two}
        if len(values) > 1:
            return False
        value = next(iter(values), None)
        if pair.skips_one and isinstance(value, Instruction) \
                and not tree.strictly_dominates(value.block, pair.one.exit):  # type: ignore[arg-type]
            return False
    return True


def _hoisted_used_after(pair: Pair) -> bool:
    """Is a value of the blocks between E1 and L2's header (which fusion hoists into L1's entering block)
    used outside them and L2 (where, L1 guarded, the fused entering block would not dominate the use)?"""
    region = {*pair.chain_two, *pair.two.loop.blocks}
    return any(use.user.block not in region for block in pair.chain_two for inst in block.instructions
               for use in inst.uses)


def _used_after(loop: Loop) -> bool:
    """Is a phi of the loop's header used outside the loop (where, L2 not guarded, its header dominated the
    use; fused, the edge that skips L1 skips the fused header too)?"""
    return any(use.user.block not in loop for phi in loop.header.phis for use in phi.uses)


def _independent(one: Candidate, two: Candidate, body_one: list[Instruction], body_two: list[Instruction],
                 shift: int) -> bool:
    """The memory test of the module docstring, for every pair of accesses to one array; L2's counter is
    L1's plus `shift`."""
    accesses_one = [i for i in body_one if i.op in ACCESSES]
    accesses_two = [i for i in body_two if i.op in ACCESSES]
    if any(not _is_distinct_array(array_of(i)) for i in accesses_one + accesses_two):
        return False  # an array phi may be any array: no two accesses could be told apart
    for second in accesses_two:
        for first in accesses_one:
            if array_of(first) is not array_of(second) or (first.op not in WRITES and second.op not in WRITES):
                continue
            if not in_order(first, (one.loop, one.trip.iv.phi), second, (two.loop, two.trip.iv.phi), one.parallel,
                            one.trip.iv.step.value, shift):  # type: ignore[attr-defined]
                return False
    return True


def _is_distinct_array(array: Value) -> bool:
    """An argument or a local array: distinct arrays of these kinds never share memory (DESIGN 1.1)."""
    return isinstance(array, Argument) or (isinstance(array, Instruction) and array.op is Op.ALLOC)


def array_of(inst: Instruction) -> Value:
    return inst.operands[0] if inst.op is Op.LOAD else inst.operands[1]


def affine_form(root: Value, candidate: Candidate) -> Affine | None:
    """`root` as `a*k + s + c` for the candidate's induction variable k (`fusion_dependence.affine_form`)."""
    return dependence_form(root, candidate.loop, candidate.trip.iv.phi)
