"""jump-threading: branches whose outcome an earlier branch already decided.

Reverse-mode AD mirrors every guard of the forward sweep: the reverse of a region that ran only when a
loop had iterations (`%t > 0`) is guarded again, once per loop of the region, and the empty-loop tests
(`%t == 0`) that loop canonicalization put before each loop come back with it. Inside the reverse of an
iteration the same condition is then tested three or four times over, and the blocks between two loops
are joins of "it ran" and "it did not". Loop fusion (`loop_fusion.py`) needs the loops of one region to
follow each other without such joins. Two rewrites, to a fixed point:

  - implied branches: a `cbr %c` in a block that only the true (or only the false) edge of an earlier
    `cbr %d` reaches, where the outcome of `%d` decides that of `%c`, becomes a `br`. "Reaches only by
    that edge": the edge's target has that block as its only predecessor and dominates the `cbr`. What
    `%d` decides: `%c` is `%d`, or both compare the same two integers (in either order), and the relations
    (less, equal, greater) that `%d`'s outcome leaves possible all make `%c` true, or all false; a
    comparison of a value known not to be negative (`ssa/trip_count.is_known_nonnegative`) with 0 leaves
    out "less".
  - threading: a block of a loop that ends in a `cbr %c` and has no phis is skipped by each predecessor
    in that loop that knows `%c`: by the edge it takes (its own `cbr` decides `%c`) or by the branches
    above it, when the block `%c` chooses is in that loop too. What the block computes before its branch
    must be pure values (a loop's `%i.next`) that can move to the end of its immediate dominator, and
    they go there first. The predecessor then jumps straight to the block `%c` chooses, whose phis take
    the value they took from the skipped block; a predecessor that already jumps there (by its other
    edge) keeps its branch unless both would bring the same phi values. Blocks outside every loop are
    left alone: the guards between the function's loops are the shape loop fusion matches.

Nothing is copied, so the code does not grow; simplify-cfg then deletes the blocks nobody reaches.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Hashable

from isozyme.optimize.simplify_cfg import same_value
from isozyme.ssa.builder import Builder
from isozyme.ssa.cfg import predecessors
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.loops import LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.trip_count import is_known_nonnegative

LESS, EQUAL, GREATER = "<", "=", ">"
HOLDS = {Op.ICMP_EQ: {EQUAL}, Op.ICMP_NE: {LESS, GREATER}, Op.ICMP_SLT: {LESS},
         Op.ICMP_SLE: {LESS, EQUAL}, Op.ICMP_SGT: {GREATER}, Op.ICMP_SGE: {GREATER, EQUAL}}
"""The relations between the two operands of each integer comparison under which it is true."""
MIRRORED = {LESS: GREATER, EQUAL: EQUAL, GREATER: LESS}

Fact = tuple[Value, bool]
"""A condition and its known outcome."""


def jump_threading(function: Function) -> bool:
    """Fold implied branches and thread empty branch blocks until neither changes `function`."""
    changed = False
    while _fold_implied_branches(function) | _thread_branch_blocks(function):
        changed = True
    return changed


def _outcome(condition: Value, fact: Fact) -> bool | None:
    """The outcome of `condition` when `fact` holds, if the fact decides it."""
    known, value = fact
    if condition is known:
        return value
    if not (isinstance(condition, Instruction) and isinstance(known, Instruction)
            and condition.op in HOLDS and known.op in HOLDS):
        return None
    left, right = known.operands
    possible = HOLDS[known.op] if value else {LESS, EQUAL, GREATER} - HOLDS[known.op]
    if isinstance(right, Constant) and right.value == 0 and is_known_nonnegative(left):
        possible = possible - {LESS}
    first, second = condition.operands
    if same_value(first, left) and same_value(second, right):
        relations = possible
    elif same_value(first, right) and same_value(second, left):
        relations = {MIRRORED[relation] for relation in possible}
    else:
        return None
    if relations <= HOLDS[condition.op]:
        return True
    if not relations & HOLDS[condition.op]:
        return False
    return None


def _edge_fact(block: Block, successor: Block) -> Fact | None:
    """What taking the edge `block -> successor` says: `block`'s `cbr` condition and its outcome."""
    end = block.terminator
    if end is None or end.op is not Op.CBR or end.successors[0] is end.successors[1]:
        return None
    return end.operands[0], end.successors[0] is successor


def _facts_above(block: Block, tree: DominatorTree, preds: dict[Block, list[Block]]) -> list[Fact]:
    """The outcomes known in `block` from the branches above it: for each block D on its dominator path
    that is reached only from the block above it by one edge of a `cbr`, that edge's fact."""
    facts = []
    current: Block | None = block
    while current is not None:
        parent = tree.idom.get(current)
        if parent is not None and preds[current] == [parent]:
            fact = _edge_fact(parent, current)
            if fact is not None:
                facts.append(fact)
        current = parent
    return facts


def _decided(condition: Value, facts: list[Fact]) -> bool | None:
    for fact in facts:
        outcome = _outcome(condition, fact)
        if outcome is not None:
            return outcome
    return None


def _fold_implied_branches(function: Function) -> bool:
    changed = False
    tree = DominatorTree(function)
    preds = predecessors(function)
    facts = _KnownFacts()
    # (block, None) to fold its branch; (block, mark) to leave its subtree, dropping the facts found in it
    stack: list[tuple[Block, int | None]] = [(tree.rpo[0], None)] if tree.rpo else []
    while stack:
        block, mark = stack.pop()
        if mark is not None:
            facts.undo(mark)
            continue
        stack.append((block, facts.mark()))
        stack.extend((child, None) for child in reversed(tree.children[block]))
        parent = tree.idom.get(block)
        fact = _edge_fact(parent, block) if parent is not None and preds[block] == [parent] else None
        if fact is not None:
            facts.add(fact)
        end = block.terminator
        if end is None or end.op is not Op.CBR or isinstance(end.operands[0], Constant):
            continue
        outcome = facts.decided(end.operands[0])
        if outcome is None:
            continue
        taken, dropped = end.successors if outcome else end.successors[::-1]
        if dropped is not taken:
            for phi in dropped.phis:
                phi.remove_incoming(block)
        end.drop_operands()
        end.remove_from_block()
        Builder(block, loc=end.loc).br(taken)
        changed = True
    return changed


class _KnownFacts:
    """The facts of the branches above the block that a walk of the dominator tree is at (`_facts_above`
    of that block), indexed by condition and by the values a comparison compares, so that a block looks
    only at the facts about its own condition; the walk drops each fact when it leaves the subtree where
    the fact holds. (Collecting them per block up its dominator path cost the depth of the tree:
    thousands of blocks after thousands of `if`s.)"""

    def __init__(self) -> None:
        self.index: dict[Hashable, list[tuple[int, Fact]]] = {}
        self.log: list[list[Hashable]] = []
        """The index keys of each fact added, in order."""

    def add(self, fact: Fact) -> None:
        keys = _fact_keys(fact[0])
        for key in keys:
            self.index.setdefault(key, []).append((len(self.log), fact))
        self.log.append(keys)

    def mark(self) -> int:
        return len(self.log)

    def undo(self, mark: int) -> None:
        """Drop the facts added since `mark`."""
        while len(self.log) > mark:
            for key in self.log.pop():
                self.index[key].pop()

    def decided(self, condition: Value) -> bool | None:
        """The outcome of `condition` that the nearest fact deciding it gives (as `_decided`)."""
        candidates = [entry for key in _fact_keys(condition) for entry in self.index.get(key, ())]
        return _decided(condition, [fact for _, fact in sorted(candidates, key=lambda entry: -entry[0])])


def _fact_keys(condition: Value) -> list[Hashable]:
    """Keys under which facts that may decide `condition` (`_outcome`) are found: the condition itself, and
    for an integer comparison the values it compares (in either order)."""
    keys: list[Hashable] = [("is", id(condition))]
    if isinstance(condition, Instruction) and condition.op in HOLDS:
        keys.append(("compares", frozenset(_value_key(operand) for operand in condition.operands)))
    return keys


def _value_key(value: Value) -> Hashable:
    """Equal for values `same_value` calls one."""
    if not isinstance(value, Constant):
        return ("value", id(value))
    if value.type.is_float:
        return ("const", value.type, "nan" if math.isnan(value.value) else struct.pack("<d", value.value))
    return ("const", value.type, value.value)


def _thread_branch_blocks(function: Function) -> bool:
    """Thread one edge (the dominator tree changes with each), True if one was threaded."""
    tree = DominatorTree(function)
    preds = predecessors(function)
    nest = LoopNest(function)
    for block in list(function.blocks):
        end = block.terminator
        if block is function.entry or block.phis or end is None or end.op is not Op.CBR \
                or end.successors[0] is end.successors[1]:
            continue
        loop = nest.loop_of(block)
        if loop is None:
            continue  # between the loops of the function: their guards are what loop fusion matches
        for pred in preds[block]:
            fact = _edge_fact(pred, block)
            outcome = _outcome(end.operands[0], fact) if fact is not None else None
            if outcome is None:
                outcome = _decided(end.operands[0], _facts_above(pred, tree, preds))
            target = None if outcome is None else end.successors[0] if outcome else end.successors[1]
            if target is None or target is block or nest.loop_of(pred) is not loop or nest.loop_of(target) is not loop:
                continue
            if not _can_redirect(pred, block, target):
                continue
            if len(block.instructions) > 1 and not _hoist_to_dominator(block, tree, nest):
                break
            _redirect(pred, block, target)
            return True
    return False


def _hoist_to_dominator(block: Block, tree: DominatorTree, nest: LoopNest) -> bool:
    """Move what `block` computes before its branch (pure values, such as a loop's `%i.next`) to the end
    of its immediate dominator in the same loop, so that the block is a bare branch; False (nothing
    moved) when one of them cannot move there."""
    parent = tree.idom.get(block)
    moving = block.instructions[:-1]
    if parent is None or nest.loop_of(parent) is not nest.loop_of(block):
        return False
    for inst in moving:
        if not inst.info.pure or isinstance(inst, Phi) or inst.info.terminator:
            return False
        for operand in inst.operands:
            if isinstance(operand, Instruction) and operand not in moving \
                    and not tree.dominates(operand.block, parent):  # type: ignore[arg-type]
                return False
    anchor = parent.terminator
    assert anchor is not None
    for inst in list(moving):
        inst.move_before(anchor)
    return True


def _can_redirect(pred: Block, block: Block, target: Block) -> bool:
    """Can `pred`'s edge to `block` go straight to `target`? Not when `pred` already jumps to `target`
    (by its other edge) and the phis there would need two values for it."""
    branch = pred.terminator
    assert branch is not None
    return target not in branch.successors \
        or all(same_value(phi.incoming_value(pred), phi.incoming_value(block)) for phi in target.phis)


def _redirect(pred: Block, block: Block, target: Block) -> None:
    """Send `pred`'s edge to `block` straight to `target` (`_can_redirect` said it may)."""
    branch = pred.terminator
    assert branch is not None
    if target in branch.successors:
        branch.drop_operands()
        branch.remove_from_block()
        Builder(pred, loc=branch.loc).br(target)
        return
    branch.replace_successor(block, target)
    for phi in target.phis:
        phi.add_incoming(pred, phi.incoming_value(block))
