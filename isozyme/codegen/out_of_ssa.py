"""Out-of-SSA for the C-style renderers: phis become copies into one variable per phi.

    plan = out_of_ssa(function)        # mutates `function`: critical edges into phi blocks are split
    plan.copies[block]                 # the copies to run at the end of `block`, before its `br`

After `out_of_ssa`, every edge into a block with phis leaves a block that has exactly one successor (a
`br`), so the copies of an edge can run at the end of its source block without affecting other paths.
Splitting only such edges (not every critical edge) is enough for that and keeps the CFG small; it also
avoids the "lost copy" problem: a phi's variable is overwritten only on the way into its block.

The IR itself stays in SSA (split blocks are ordinary blocks ending in `br`, phis are kept and
re-keyed), so the verifier still holds. The side structure `OutOfSSA.copies` says, per predecessor, the
sequential copies that implement the parallel assignment of the successor's phis (the interpreter's
semantics: every incoming value is read before any phi is written). A phi reading another phi of the same
block must see the old value, so such sources are first saved into temporaries (`Temporary`), then all
phis are assigned. A renderer declares one variable per phi and one per temporary.

Requires verified SSA. Unreachable predecessors are ignored (their copies are not produced).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from isozyme.ssa.cfg import predecessors, reachable_blocks
from isozyme.ssa.ir import Block, Function, Instruction, Phi, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import VOID, Type


@dataclass(eq=False)
class Temporary:
    """A variable that holds a phi's old value during a parallel copy."""

    type: Type
    """The type of the saved phi."""
    index: int
    """Number of the temporary within its function (for a unique C name)."""


@dataclass(frozen=True)
class Copy:
    """`destination = source`, run at the end of a predecessor block."""

    destination: Phi | Temporary
    source: Value | Temporary


@dataclass
class OutOfSSA:
    """The copies that replace a function's phis."""

    copies: dict[Block, list[Copy]] = field(default_factory=dict)
    """Per predecessor block, the copies to run before its terminator (absent: none)."""
    temporaries: list[Temporary] = field(default_factory=list)
    """Every temporary the copies use."""


def split_edges_into_phi_blocks(function: Function) -> bool:
    """Put a new block on every edge from a block with several successors into a block with phis."""
    changed = False
    for block in list(function.blocks):
        terminator = block.terminator
        if terminator is None or len(terminator.successors) < 2:
            continue
        for succ in dict.fromkeys(terminator.successors):
            if succ.phis:
                _split_edge(function, block, succ)
                changed = True
    return changed


def _split_edge(function: Function, pred: Block, succ: Block) -> Block:
    middle = function.add_block(f"{pred.name or 'bb'}.to.{succ.name or 'bb'}", after=pred)
    middle.append(Instruction(VOID, op=Op.BR, successors=(succ,)))
    pred.terminator.replace_successor(succ, middle)  # type: ignore[union-attr]
    for phi in succ.phis:
        phi.replace_incoming_block(pred, middle)
    return middle


def sequentialize(phis: list[Phi], pred: Block, plan: OutOfSSA) -> list[Copy]:
    """The parallel assignment of `phis` for the edge from `pred` as sequential copies (module doc).

    A copy is emitted once no pending copy still reads its destination; when only cycles remain (a swap),
    one destination is saved into a temporary and its readers read the temporary instead."""
    pending = [Copy(phi, phi.incoming_value(pred)) for phi in phis if phi.incoming_value(pred) is not phi]
    copies: list[Copy] = []
    while pending:
        ready = next((c for c in pending if not any(o.source is c.destination for o in pending)), None)
        if ready is not None:
            copies.append(ready)
            pending.remove(ready)
            continue
        saved = pending[0].destination
        temporary = Temporary(saved.type, len(plan.temporaries))
        plan.temporaries.append(temporary)
        copies.append(Copy(temporary, saved))
        pending = [Copy(c.destination, temporary if c.source is saved else c.source) for c in pending]
    return copies


def out_of_ssa(function: Function) -> OutOfSSA:
    """Split the edges into phi blocks and compute the copies that replace the phis (module doc)."""
    split_edges_into_phi_blocks(function)
    plan = OutOfSSA()
    reachable = reachable_blocks(function)
    preds = predecessors(function)
    for block in function.blocks:
        phis = block.phis
        if not phis or block not in reachable:
            continue
        for pred in preds[block]:
            if pred in reachable:
                plan.copies.setdefault(pred, []).extend(sequentialize(phis, pred, plan))
    return plan
