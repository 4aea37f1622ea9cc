"""Which index values differ between the work items of a parallel loop (`parallel_loops.py`): a local array
that every access indexes by such a value at one position is split between the work items, and an adjoint
added there is a plain add.

Injective in the work item: the loop's induction variables with a nonzero constant step, and negations,
sums and differences with loop invariants and nonzero multiples of those (`trip + (-k) - 1`, the index of
a reverse loop). A *split* of an injective t by a loop-invariant b, q = t // b and r = t - q * b, is
injective as a pair: t = q * b + r, so two work items with the same (q, r) have the same t. That is how a
collapsed pair of `prange` loops (`frontend/lowering.py`) computes its two loop variables, so an array
indexed [.., q', .., r', ..] (q' and r' injective images of q and r, at two positions) is split too.
"""

from __future__ import annotations

from dataclasses import dataclass

from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.ir import Constant, Instruction, Value
from isozyme.ssa.loops import Loop
from isozyme.ssa.ops import Op
from isozyme.ssa.trip_count import InductionVariable, induction_variable, is_loop_invariant

ACCESSES = (Op.LOAD, Op.STORE, Op.ATOMIC_ADD)


def array_operand(inst: Instruction) -> Value:
    return inst.operands[0] if inst.op is Op.LOAD else inst.operands[1]


def access_indices(inst: Instruction) -> tuple[Value, ...]:
    return inst.operands[1:] if inst.op is Op.LOAD else inst.operands[2:]


@dataclass
class WorkItemIndices:
    """The index values of a loop that tell its work items apart (module docstring)."""

    values: set[Value]
    """Each injective in the work item."""
    splits: list[tuple[set[Value], set[Value]]]
    """Each split of one of `values` into a quotient and a remainder, as (the injective images of the
    quotient, those of the remainder): injective as a pair."""


def work_item_indices(loop: Loop, inductions: list[InductionVariable] | None = None) -> WorkItemIndices:
    """The injective index values of `loop` (its induction variables unless `inductions` are given)."""
    if inductions is None:
        inductions = [iv for phi in loop.header.phis if (iv := induction_variable(loop, phi)) is not None]
    values = _closure(loop, {iv.phi for iv in inductions if iv.constant_step not in (None, 0)})
    return WorkItemIndices(values, _splits(loop, values))


def _closure(loop: Loop, seeds: set[Value]) -> set[Value]:
    """`seeds` and the values of the loop that are injective functions of them: negations, sums and
    differences with invariants (`trip + (-k) - 1`, the index of a reverse loop once canonicalized), and
    nonzero constant (or asserted nonzero) multiples."""
    values = set(seeds)
    nonzero = _asserted_nonzero(loop)

    def multiplier(value: Value) -> bool:
        return (isinstance(value, Constant) and value.value != 0) or value in nonzero
    changed = True
    while changed:
        changed = False
        for block in loop.blocks:
            for inst in block.instructions:
                if inst in values or inst.op not in (Op.IADD, Op.ISUB, Op.IMUL, Op.INEG):
                    continue
                if inst.op is Op.INEG:
                    ok = inst.operands[0] in values
                elif inst.op is Op.IMUL:
                    a, b = inst.operands
                    ok = (a in values and multiplier(b)) or (b in values and multiplier(a))
                else:
                    a, b = inst.operands
                    ok = (a in values and is_loop_invariant(b, loop)) or \
                         (b in values and is_loop_invariant(a, loop))  # c - x is injective as x is
                if ok:
                    values.add(inst)
                    changed = True
    return values


def _splits(loop: Loop, injective: set[Value]) -> list[tuple[set[Value], set[Value]]]:
    """The quotients (`t // b`, or `t >> c` for b = 2**c) and remainders (`t % b`, `t & (b - 1)`, or
    `t - (t // b) * b` written out) of the loop's injective values t by loop invariants b, paired by (t, b)."""
    quotients: dict[tuple[int, object], set[Value]] = {}
    remainders: dict[tuple[int, object], set[Value]] = {}
    for block in loop.blocks:
        for inst in block.instructions:
            if len(inst.operands) != 2 or inst.operands[0] not in injective:
                continue
            t, b = inst.operands
            if inst.op is Op.IFLOORDIV and is_loop_invariant(b, loop):
                quotients.setdefault((id(t), _divisor(b)), set()).add(inst)
            elif inst.op is Op.ASHR and isinstance(b, Constant) and 0 <= b.value < 63:  # type: ignore[operator]
                quotients.setdefault((id(t), 1 << b.value), set()).add(inst)  # type: ignore[operator]
            elif inst.op is Op.IFLOORMOD and is_loop_invariant(b, loop):
                remainders.setdefault((id(t), _divisor(b)), set()).add(inst)
            elif inst.op is Op.AND and isinstance(b, Constant) and b.value > 0 and not b.value & (b.value + 1):  # type: ignore[operator]
                remainders.setdefault((id(t), b.value + 1), set()).add(inst)  # type: ignore[operator]
    for block in loop.blocks:  # t - (t // b) * b, the remainder written out
        for inst in block.instructions:
            if inst.op is not Op.ISUB or not isinstance(product := inst.operands[1], Instruction) or \
                    product.op is not Op.IMUL:
                continue
            t = inst.operands[0]
            for q, b in (product.operands, reversed(product.operands)):
                key = (id(t), _divisor(b))
                if isinstance(q, Instruction) and q.op is Op.IFLOORDIV and q.operands[0] is t and \
                        _divisor(q.operands[1]) == key[1] and q in quotients.get(key, ()):
                    remainders.setdefault(key, set()).add(inst)
    return [(_closure(loop, quotients[key]), _closure(loop, remainders[key])) for key in quotients if key in remainders]


def _divisor(value: Value) -> object:
    """What identifies a divisor: a constant's value, another value itself."""
    return value.value if isinstance(value, Constant) else id(value)


def _asserted_nonzero(loop: Loop) -> set[Value]:
    """Values that an `assert %v != 0` in a block dominating the loop checked (a `range` step known only at
    run time): never 0 inside the loop."""
    function = loop.header.function
    assert function is not None
    tree = DominatorTree(function)
    found: set[Value] = set()
    for block in function.blocks:
        if not tree.is_reachable(block) or not tree.dominates(block, loop.header):
            continue
        for inst in block.instructions:
            condition = inst.operands[0] if inst.op is Op.ASSERT else None
            if isinstance(condition, Instruction) and condition.op is Op.ICMP_NE:
                a, b = condition.operands
                if isinstance(b, Constant) and b.value == 0:
                    found.add(a)
                elif isinstance(a, Constant) and a.value == 0:
                    found.add(b)
    return found


def owner_position(array: Value, loop: Loop, indices: WorkItemIndices | None) -> int | None:
    """An index position at which every access to `array` in the loop uses one value injective in gid, or
    the first of two positions holding one quotient and one remainder of a split (the same two values in
    every access)."""
    if indices is None:
        indices = work_item_indices(loop)
    uses = [u for u in array.users if u.block is not None and u.block in loop and u.op is not Op.DIM]
    if not uses or any(u.op not in ACCESSES or array_operand(u) is not array for u in uses):
        return None
    rank = array.type.rank  # type: ignore[attr-defined]
    first = access_indices(uses[0])
    same = [position for position in range(rank) if all(access_indices(u)[position] is first[position] for u in uses)]
    for position in same:
        if first[position] in indices.values:
            return position
    for quotients, remainders in indices.splits:
        for position in same:
            if first[position] in quotients and any(first[other] in remainders for other in same if other != position):
                return position
    return None
