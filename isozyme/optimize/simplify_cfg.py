"""simplify-cfg: fold constant branches, drop unreachable and forwarding blocks, merge straight-line code.

After simplify-cfg every block is reachable from the entry; no `cbr` has a constant condition; no phi has
a single incoming value or only one distinct incoming value (itself aside), and no cycle of phis merges a
single value from outside the cycle; no block other than the entry holds nothing but a `br`, unless
removing it would give a phi two different values for one predecessor (or it branches to itself); no
block ends in a `br` to a successor whose only predecessor it is. A `cbr`
whose two edges come to lead to one block (through a removed forwarding block) becomes a `br`. The entry
block stays first. Requires verified SSA and keeps it valid: every phi's incoming blocks stay exactly its
block's predecessors.

The rewrites run to a fixed point because each one exposes others: folding a branch makes blocks
unreachable, removing them leaves phis with one input, collapsing those leaves empty blocks to forward.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

from isozyme.ssa.builder import Builder
from isozyme.ssa.cfg import predecessors, reachable_blocks
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.ops import Op


def _replace_terminator_with_br(block: Block, target: Block) -> None:
    """End `block` with `br target` instead of its current terminator (whose phi entries the caller fixes)."""
    terminator = block.terminator
    assert terminator is not None
    terminator.drop_operands()
    terminator.remove_from_block()
    Builder(block, loc=terminator.loc).br(target)


def remove_unreachable_blocks(function: Function) -> bool:
    """Delete the blocks that cannot be reached from the entry, and their entries in reachable phis."""
    reachable = reachable_blocks(function)
    dead = [block for block in function.blocks if block not in reachable]
    for block in dead:
        for succ in dict.fromkeys(block.successors):
            if succ in reachable:
                for phi in succ.phis:
                    phi.remove_incoming(block)
    # Dead blocks may use each other's values: cut every use first so each removal sees no outside user.
    for block in dead:
        for inst in block.instructions:
            inst.drop_operands()
    for block in dead:
        function.remove_block(block)
    return bool(dead)


def fold_constant_branches(function: Function) -> bool:
    """Replace `cbr true/false, T, F` by a `br` to the taken target; the other loses this predecessor."""
    changed = False
    for block in function.blocks:
        terminator = block.terminator
        if terminator is None or terminator.op is not Op.CBR or not isinstance(terminator.operands[0], Constant):
            continue
        if_true, if_false = terminator.successors
        taken, dropped = (if_true, if_false) if terminator.operands[0].value else (if_false, if_true)
        for phi in dropped.phis:
            phi.remove_incoming(block)
        _replace_terminator_with_br(block, taken)
        changed = True
    return changed


def same_value(a: Value, b: Value) -> bool:
    """Are `a` and `b` one value: the same object, or two constants of one type with the same bits?

    Any nan equals any nan: no op can tell their payloads apart."""
    if a is b:
        return True
    if not (isinstance(a, Constant) and isinstance(b, Constant)) or a.type != b.type:
        return False
    if a.type.is_float:
        both_nan = math.isnan(a.value) and math.isnan(b.value)
        return both_nan or struct.pack("<d", a.value) == struct.pack("<d", b.value)
    return a.value == b.value


def trivial_phi_value(phi: Phi) -> Value | None:
    """The one value `phi` can take when all its inputs are that value or the phi itself, else None.

    Braun et al.'s trivial phi (Algorithm 3, tryRemoveTrivialPhi): in valid SSA that value dominates the
    phi's block, so it may replace the phi everywhere."""
    inputs = [value for value in phi.operands if value is not phi]
    if not inputs or not all(same_value(value, inputs[0]) for value in inputs):
        return None
    return inputs[0]


def collapse_trivial_phis(function: Function) -> bool:
    """Replace every trivial phi (single input, or all inputs equal) by its value."""
    changed = False
    for block in function.blocks:
        for phi in block.phis:
            value = trivial_phi_value(phi)
            if value is not None:
                phi.replace_all_uses_with(value)
                phi.erase()
                changed = True
    return changed


def _phi_cycles(phis: list[Phi]) -> list[list[Phi]]:
    """The strongly connected components of the graph from each phi of `phis` to its operands among them,
    each component after every component its phis take values from (Tarjan's algorithm, iteratively)."""
    among = set(phis)
    index: dict[Phi, int] = {}
    low: dict[Phi, int] = {}
    stack: list[Phi] = []
    on_stack: set[Phi] = set()
    components: list[list[Phi]] = []
    for root in phis:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(root.operands))]
        while work:
            phi, operands = work[-1]
            for operand in operands:
                if operand not in among:
                    continue
                if operand not in index:
                    index[operand] = low[operand] = len(index)  # type: ignore[index]
                    stack.append(operand)  # type: ignore[arg-type]
                    on_stack.add(operand)  # type: ignore[arg-type]
                    work.append((operand, iter(operand.operands)))  # type: ignore[union-attr]
                    break
                if operand in on_stack:
                    low[phi] = min(low[phi], index[operand])  # type: ignore[index]
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[phi])
                if low[phi] == index[phi]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member is phi:
                            break
                    components.append(component)
    return components


def _collapse_cycles(phis: list[Phi]) -> bool:
    """Replace each cycle of `phis` that takes a single value from outside itself by that value; then the
    same for the phis of each other cycle that take no value from outside it (a worklist of such sets:
    they nest as deep as the loops)."""
    changed = False
    work = [phis]
    while work:
        for component in _phi_cycles(work.pop()):
            members = set(component)
            outside: list[Value] = []
            inner = []
            for phi in component:
                enters = [value for value in phi.operands if value not in members]
                outside += [value for value in enters if not any(same_value(value, seen) for seen in outside)]
                if not enters:
                    inner.append(phi)
            if len(outside) == 1:
                for phi in component:
                    phi.replace_all_uses_with(outside[0])
                for phi in component:
                    phi.erase()
                changed = True
            elif len(outside) > 1 and 0 < len(inner) < len(component):
                work.append(inner)
    return changed


def collapse_phi_cycles(function: Function) -> bool:
    """Replace every cycle of phis that merges one value from outside the cycle by that value.

    Braun et al.'s redundant phi SCCs (Algorithm 5): phis that only pass one value `v` around among
    themselves, as reverse-mode AD leaves for an adjoint reset to 0.0 in every iteration of nested loops.
    On every path from the entry, the first of the cycle's blocks is entered along an edge bringing `v`
    (a member would have to dominate that edge), so `v` dominates them all. When several values enter, the
    phis that take values only from the cycle may still form a smaller redundant cycle among themselves."""
    phis = [phi for block in function.blocks for phi in block.phis]
    return _collapse_cycles(phis)


def _is_forwarding_block(block: Block, function: Function) -> bool:
    """A non-entry block holding only `br` to another block."""
    return (block is not function.entry and len(block.instructions) == 1 and block.instructions[0].op is Op.BR
            and block.successors[0] is not block)


def _can_forward(block: Block, target: Block, preds: dict[Block, list[Block]]) -> bool:
    """May every predecessor of `block` jump to `target` directly?

    A predecessor that already jumps to `target` would then reach it by one edge standing for two paths;
    the phis of `target` hold one value per predecessor, so both paths must bring the same value."""
    for pred in preds[block]:
        if pred in preds[target] and not all(same_value(phi.incoming_value(pred), phi.incoming_value(block))
                                             for phi in target.phis):
            return False
    return bool(preds[block])


def _forward(block: Block, target: Block, preds: list[Block]) -> None:
    """Send the predecessors of the forwarding `block` straight to `target`, then delete `block`."""
    for pred in preds:
        already_a_pred = target in pred.successors
        terminator = pred.terminator
        assert terminator is not None
        terminator.replace_successor(block, target)
        if already_a_pred:
            # Both edges of a cbr now go to `target`, carrying equal phi values (_can_forward checked).
            _replace_terminator_with_br(pred, target)
        else:
            for phi in target.phis:
                phi.add_incoming(pred, phi.incoming_value(block))
    for phi in target.phis:
        phi.remove_incoming(block)
    block.function.remove_block(block)  # type: ignore[union-attr]


def remove_forwarding_blocks(function: Function) -> bool:
    """Delete empty blocks that only branch on, where no phi conflict arises (see `_can_forward`)."""
    changed = False
    preds = predecessors(function)
    for block in list(function.blocks):
        if not _is_forwarding_block(block, function):
            continue
        target = block.successors[0]
        if _can_forward(block, target, preds):
            _forward(block, target, preds[block])
            # Only the target's predecessors changed: it lost `block` and gained those of `block`.
            moved = [pred for pred in preds.pop(block) if pred not in preds[target]]
            preds[target] = [pred for pred in preds[target] if pred is not block] + moved
            changed = True
    return changed


def _merge_into_predecessor(block: Block, succ: Block) -> None:
    """Append `succ`, whose only predecessor is `block`, to `block`, and delete it."""
    for phi in succ.phis:
        phi.replace_all_uses_with(phi.incoming_value(block))
        phi.erase()
    branch = block.terminator
    assert branch is not None
    branch.erase()
    for inst in list(succ.instructions):
        inst.remove_from_block()
        block.append(inst)
    for after in dict.fromkeys(block.successors):
        for phi in after.phis:
            phi.replace_incoming_block(succ, block)
    block.function.remove_block(succ)  # type: ignore[union-attr]


def merge_straight_line_blocks(function: Function) -> bool:
    """Merge each block ending in `br S` with S when it is S's only predecessor."""
    changed = False
    preds = predecessors(function)
    for block in list(function.blocks):
        if block.function is None:  # merged away earlier in this sweep
            continue
        while True:
            terminator: Instruction | None = block.terminator
            if terminator is None or terminator.op is not Op.BR:
                break
            succ = terminator.successors[0]
            if succ is block or preds[succ] != [block]:
                break
            _merge_into_predecessor(block, succ)
            # The successors of `succ` now have `block` where they had `succ` as a predecessor.
            for after in dict.fromkeys(block.successors):
                preds[after] = [block if pred is succ else pred for pred in preds[after]]
            del preds[succ]
            changed = True
    return changed


STEPS: tuple[Callable[[Function], bool], ...] = (
    remove_unreachable_blocks,
    fold_constant_branches,
    collapse_trivial_phis,
    collapse_phi_cycles,
    remove_forwarding_blocks,
    merge_straight_line_blocks,
)
"""The rewrites, in the order one sweep applies them."""


def simplify_cfg(function: Function) -> bool:
    """Apply the rewrites of `STEPS` until none changes `function`; True if any did."""
    changed = False
    while True:
        swept = [step(function) for step in STEPS]  # a list, so every step runs in every sweep
        if not any(swept):
            return changed
        changed = True
