"""loop-fusion: two adjacent loops over the same iteration space become one (DESIGN 4 and 6).

Fewer loops are fewer passes over memory on the CPU and fewer kernel launches on OpenCL, where a fused pair
of `prange` loops is one NDRange kernel. The pass runs after AD (`enzyme_ad/gradient.py`), where the
forward and reverse sweeps of a derivative put many loops side by side.

Two loops L1 and L2 fuse when all of this holds (anything it cannot prove, it leaves alone):

  - shape: each is counted with a canonical induction variable (`ssa/trip_count.py`: `k = 0, 1, ...`,
    `icmp.slt k, trip`) and the same trip-count value; L2 is a header holding only its exit test plus one
    body block that is its latch; L1 leaves only from its header, to a block E1 that holds nothing but
    `cbr g, H2, E2` (g the same guard that decides whether L1 is entered) or `br H2`, and that nothing
    else reaches (only L1's header, and the guard's other edge);
  - values: L2 uses nothing that L1 computes, and neither loop has a call;
  - memory: for every array both loops touch, with at least one write among the two accesses, iteration j
    of L1 and iteration i of L2 touch the same element only when j <= i (a dependence test on affine
    indices `a*k + s + c`, with a and c constants and s one loop-invariant value: equal coefficients give
    j - i = (c2 - c1) / a; anything else is not proven and is not fused). So no iteration of L2 reads
    what a later iteration of L1 writes, or writes what a later one reads.

The fused loop runs L1's body, then L2's, per iteration: L2's header phis move to L1's header, its induction
variable becomes L1's, its body moves to a new block on L1's back edge (L1's latch may belong to an inner
loop too), and L1's exit goes to L2's exit; simplify-cfg merges the blocks that can be merged. A loop is
`parallel` afterwards only if both were. One difference from running them apart: when an iteration of
L2 raises an error, L1's later iterations have not run, so what the error leaves in memory differs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from isozyme.ssa.builder import Builder
from isozyme.ssa.cfg import predecessors
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.loops import Loop, LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.trip_count import TripCount, analyze_trip_count, is_loop_invariant

ACCESSES = (Op.LOAD, Op.STORE, Op.ATOMIC_ADD)
WRITES = (Op.STORE, Op.ATOMIC_ADD)


def fusion_enabled() -> bool:
    """Does loop fusion run after AD? Yes unless `ISOZYME_LOOP_FUSION` is 0, off, false or no (benchmarks
    turn it off to measure launches and bytes without it; the setting is part of every cache key)."""
    return os.environ.get("ISOZYME_LOOP_FUSION", "1").lower() not in ("0", "off", "false", "no")


def loop_fusion(function: Function) -> bool:
    """Fuse adjacent loops until no pair fuses (module docstring)."""
    changed = False
    while _fuse_one_pair(function):
        changed = True
    return changed


def _fuse_one_pair(function: Function) -> bool:
    nest = LoopNest(function)
    for first in nest:
        pair = _adjacent(first, nest)
        if pair is not None and _fusible(*pair):
            _fuse(*pair)
            return True
    return False


@dataclass(eq=False)
class Candidate:
    loop: Loop
    trip: TripCount
    exit: Block
    """The block the loop leaves to."""


def _counted(loop: Loop) -> Candidate | None:
    trip = analyze_trip_count(loop)
    if not isinstance(trip, TripCount) or not trip.is_canonical or trip.predicate is not Op.ICMP_SLT:
        return None
    exits = loop.exit_blocks
    return Candidate(loop, trip, exits[0]) if len(exits) == 1 else None


def _adjacent(first: Loop, nest: LoopNest) -> tuple[Candidate, Candidate] | None:
    """`first` and the loop its exit block leads to, when the shape is the one the docstring describes."""
    one = _counted(first)
    if one is None or one.exit.phis or len(one.exit.instructions) != 1:
        return None
    entering = first.entering_blocks[0]
    guard = entering.terminator
    end = one.exit.terminator
    assert guard is not None and end is not None
    arrivals = set(predecessors(first.header.function)[one.exit])  # type: ignore[arg-type]
    if end.op is Op.BR and arrivals == {first.header}:
        header = end.successors[0]
    elif end.op is Op.CBR and guard.op is Op.CBR and end.operands[0] is guard.operands[0] \
            and guard.successors == (first.header, one.exit) and arrivals == {first.header, entering}:
        header = end.successors[0]
    else:
        return None  # E1 is also reached some other way, on which L2 runs without L1
    second = next((loop for loop in nest if loop.header is header), None)
    if second is None or second.parent is not first.parent or second.entering_blocks != [one.exit]:
        return None
    two = _counted(second)
    if two is None or len(second.blocks) != 2 or second.latches[0] is second.header:
        return None
    if end.op is Op.CBR and end.successors[1] is not two.exit:
        return None
    if two.trip.bound is not one.trip.bound and not _same_constant(two.trip.bound, one.trip.bound):
        return None
    return one, two


def _same_constant(a: Value, b: Value) -> bool:
    return isinstance(a, Constant) and isinstance(b, Constant) and a.value == b.value


def _fusible(one: Candidate, two: Candidate) -> bool:
    header_two = two.loop.header
    condition = header_two.terminator.operands[0]  # type: ignore[union-attr]
    if [i for i in header_two.instructions[len(header_two.phis):-1]] != [condition]:
        return False
    body_one = [i for b in one.loop.blocks for i in b.instructions]
    body_two = [i for b in two.loop.blocks for i in b.instructions]
    if any(i.op is Op.CALL for i in body_one + body_two):
        return False
    inside_one = set(body_one)
    if any(operand in inside_one for inst in body_two for operand in inst.operands):
        return False
    return _independent(one, two, body_one, body_two)


def _independent(one: Candidate, two: Candidate, body_one: list[Instruction], body_two: list[Instruction]) -> bool:
    """The memory test of the module docstring, for every pair of accesses to one array."""
    accesses_one = [i for i in body_one if i.op in ACCESSES]
    accesses_two = [i for i in body_two if i.op in ACCESSES]
    if any(not _is_distinct_array(_array(i)) for i in accesses_one + accesses_two):
        return False  # an array phi may be any array: no two accesses could be told apart
    for second in accesses_two:
        for first in accesses_one:
            if _array(first) is not _array(second) or (first.op not in WRITES and second.op not in WRITES):
                continue
            if not _in_order(_indices(first), one, _indices(second), two):
                return False
    return True


def _is_distinct_array(array: Value) -> bool:
    """An argument or a local array: distinct arrays of these kinds never share memory (DESIGN 1.1)."""
    return isinstance(array, Argument) or (isinstance(array, Instruction) and array.op is Op.ALLOC)


def _array(inst: Instruction) -> Value:
    return inst.operands[0] if inst.op is Op.LOAD else inst.operands[1]


def _indices(inst: Instruction) -> tuple[Value, ...]:
    return inst.operands[1:] if inst.op is Op.LOAD else inst.operands[2:]


Affine = tuple[int, Value | None, int]
"""`a*k + s + c`: the coefficient of the induction variable k, one invariant value s (or none), a constant c."""


def _affine(value: Value, candidate: Candidate) -> Affine | None:
    iv = candidate.trip.iv.phi
    if value is iv:
        return 1, None, 0
    if isinstance(value, Constant):
        return (0, None, int(value.value)) if value.type.is_int else None  # type: ignore[union-attr]
    if is_loop_invariant(value, candidate.loop):
        return 0, value, 0
    if not isinstance(value, Instruction) or value.op not in (Op.IADD, Op.ISUB, Op.IMUL):
        return None
    parts = [_affine(operand, candidate) for operand in value.operands]
    if parts[0] is None or parts[1] is None:
        return None
    (a1, s1, c1), (a2, s2, c2) = parts[0], parts[1]
    if value.op is Op.IMUL:
        if a1 == 0 and s1 is None:  # constant * (a k + s + c)
            scale, (a, s, c) = c1, (a2, s2, c2)
        elif a2 == 0 and s2 is None:
            scale, (a, s, c) = c2, (a1, s1, c1)
        else:
            return None
        return (a * scale, s, c * scale) if s is None or scale == 1 else None
    if value.op is Op.ISUB:
        return (a1 - a2, s1, c1 - c2) if s2 is None else None
    if s1 is not None and s2 is not None:
        return None
    return a1 + a2, s1 if s1 is not None else s2, c1 + c2


def _in_order(first: tuple[Value, ...], one: Candidate, second: tuple[Value, ...], two: Candidate) -> bool:
    """Do iteration j of L1 and iteration i of L2 reach the same element only when j <= i?"""
    offsets: set[int] = set()
    every_pair = True
    for x, y in zip(first, second, strict=True):
        fx, fy = _affine(x, one), _affine(y, two)
        if fx is None or fy is None:
            return False
        (a1, s1, c1), (a2, s2, c2) = fx, fy
        if s1 is not s2:
            return False
        if a1 == a2 == 0:
            if c1 != c2:
                return True  # this index never agrees: never the same element
            continue
        if a1 != a2:
            return False
        if (c2 - c1) % a1:
            return True
        offsets.add((c2 - c1) // a1)  # j - i
        every_pair = False
    if every_pair:
        return False  # the same element in every pair of iterations
    if len(offsets) > 1:
        return True  # the indices agree for different offsets: never at once
    return offsets.pop() <= 0


def _fuse(one: Candidate, two: Candidate) -> None:
    loop_one, loop_two = one.loop, two.loop
    header_one, header_two = loop_one.header, loop_two.header
    latch_one, body_two = loop_one.latches[0], loop_two.latches[0]
    entering_one = loop_one.entering_blocks[0]
    iv_one, iv_two = one.trip.iv.phi, two.trip.iv.phi
    if "parallel" not in iv_two.flags:
        for phi in header_one.phis:
            phi.flags.discard("parallel")
    iv_two.replace_all_uses_with(iv_one)
    function = header_one.function
    assert function is not None
    # L2's body goes on L1's back edge, in a block of its own: L1's latch may also be an inner loop's block
    back = function.add_block(f"{header_one.name or 'loop'}.fused", after=latch_one)
    latch_one.terminator.replace_successor(header_one, back)  # type: ignore[union-attr]
    for phi in header_one.phis:
        phi.replace_incoming_block(latch_one, back)
    Builder(back).br(header_one)
    latch_one = back
    for phi in header_two.phis:
        if phi is iv_two:
            continue
        start, next_value = phi.incoming_value(one.exit), phi.incoming_value(body_two)
        moved = Phi(phi.type, name=phi.name, loc=phi.loc)
        header_one.insert(header_one.first_non_phi_index(), moved)
        moved.add_incoming(entering_one, start)
        moved.add_incoming(latch_one, next_value)
        phi.replace_all_uses_with(moved)
    anchor = latch_one.terminator
    assert anchor is not None
    for inst in list(body_two.instructions[:-1]):
        inst.move_before(anchor)
    for phi in two.exit.phis:
        phi.replace_incoming_block(header_two, header_one)
    header_one.terminator.replace_successor(one.exit, two.exit)  # type: ignore[union-attr]
    exit_end = one.exit.terminator
    assert exit_end is not None
    guarded = exit_end.op is Op.CBR  # then the guard's other edge still reaches one.exit
    exit_end.erase()
    dead = [header_two, body_two]
    if guarded:
        Builder(one.exit).br(two.exit)
    else:
        dead.append(one.exit)
    for block in dead:
        for inst in list(block.instructions)[::-1]:
            inst.drop_operands()
        function.remove_block(block)
