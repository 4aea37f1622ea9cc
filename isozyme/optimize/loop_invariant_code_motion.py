"""licm: hoist loop-invariant instructions into the loop's preheader.

After licm, no instruction left in a loop has all its operands defined outside that loop unless one of
these rules keeps it there:

  - scalar ops without memory effects that cannot trap (`fadd`, `sqrt` of anything, compares, casts but
    `fptosi`, `dim`, and divisions or shifts by a constant that cannot trap) always move;
  - `load %a[...]` moves when no instruction of the loop may write an array aliasing %a (a store or
    `atomic_add` to it, an `argmemonly` call given it, any other call that may write: memory_effects.py);
  - `call` moves when its callee is `readnone`, or `readonly` and the loop writes none of the arrays
    passed to it;
  - what may trap (integer division and shifts, `fptosi`, loads, calls) moves only where the program
    would have run it anyway: from the header, which runs whenever the preheader does, or from a block
    that dominates every latch and every exiting block but the header, in a loop known to run at least
    once (`trip_count.loop_runs_at_least_once`: a constant test, or a guard such as loop-canon's). licm
    never speculates a trap into a path that did not run it, so it hoists nothing that may trap out of a
    loop that may run zero times;
  - stores, `atomic_add`, `alloc` (every iteration needs a new array), `grow`, `assert`, phis and
    terminators never move. A `grow` in the loop counts as a write of its array (memory_effects.py), so
    loads of a growable array stay in a loop that grows it.

Loops are visited inner first, so what leaves an inner loop may leave the outer one in the same sweep;
sweeps repeat until nothing moves. A loop without a preheader gets one (loop-canon's step 1) when something
is to be hoisted, the only change licm makes to the CFG: an empty one would be undone by simplify-cfg, and
the two passes would never reach a fixed point together.

A hoisted instruction that traps in the first iteration now traps before that iteration's earlier
instructions ran: the kernel still fails, but memory written before the failure, and which error is
reported where two instructions would fail, may differ. A first iteration that never reaches the
instruction because an inner loop does not terminate is not considered. Requires verified SSA; keeps it.
"""

from __future__ import annotations

from isozyme.optimize.loop_canonicalization import make_preheader
from isozyme.optimize.memory_effects import MemoryWrites, array_operands, call_effects, memory_writes
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.ir import Block, Function, Instruction
from isozyme.ssa.loops import Loop, LoopNest
from isozyme.ssa.ops import OP_INFO, Op
from isozyme.ssa.semantics import may_trap
from isozyme.ssa.trip_count import is_loop_invariant, loop_runs_at_least_once

NEVER_HOISTED = frozenset({Op.STORE, Op.ATOMIC_ADD, Op.ALLOC, Op.GROW, Op.ASSERT, Op.PHI})
"""Ops whose effect or identity belongs to the iteration that runs them."""

class LoopFacts:
    """What the hoisting rules ask about one loop, computed once per visit."""

    def __init__(self, loop: Loop, tree: DominatorTree) -> None:
        self.loop = loop
        self.tree = tree
        self.writes: MemoryWrites = memory_writes(inst for block in loop.blocks for inst in block.instructions)
        """The arrays the loop may write; hoisting never moves a write, so this stays right."""
        # Asked now, while the loop's entering blocks are still those the header's phis name: making a
        # preheader later renames them.
        self.runs_at_least_once = loop_runs_at_least_once(loop, tree)
        """Does the header's exit test let control into the loop on entry?"""

    def runs_whenever_the_preheader_does(self, inst: Instruction) -> bool:
        """Would `inst` run in the loop's first iteration, every time the loop is reached?"""
        block, loop = inst.block, self.loop
        if block is loop.header:
            return True
        ends = [*loop.latches, *(b for b in loop.exiting_blocks if b is not loop.header)]
        return self.runs_at_least_once and all(self.tree.dominates(block, end) for end in ends)  # type: ignore[arg-type]


def _memory_allows(inst: Instruction, writes: MemoryWrites) -> bool:
    """Is what `inst` reads unchanged by the loop, and does it write nothing?"""
    if inst.op is Op.LOAD:
        return not writes.may_write(inst.operands[0])
    if inst.op is Op.CALL:
        effects = call_effects(inst)
        reads_written = effects.reads and any(writes.may_write(array) for array in array_operands(inst))
        return not effects.writes and not reads_written
    info = OP_INFO[inst.op]
    return not (info.reads_memory or info.writes_memory)


def is_hoistable(inst: Instruction, facts: LoopFacts) -> bool:
    """May `inst` move from its loop to the preheader (module docstring)?"""
    if inst.op in NEVER_HOISTED or inst.is_terminator:
        return False
    if not all(is_loop_invariant(operand, facts.loop) for operand in inst.operands):
        return False
    if not _memory_allows(inst, facts.writes):
        return False
    return not may_trap(inst) or facts.runs_whenever_the_preheader_does(inst)


def _hoist_from(loop: Loop, tree: DominatorTree, rpo_index: dict[Block, int]) -> tuple[int, bool]:
    """Move the hoistable instructions of `loop` to its preheader, made first if missing (only then: an empty
    preheader is what simplify-cfg removes). How many moved, and whether a preheader was made."""
    facts = LoopFacts(loop, tree)
    # Reverse post-order puts definitions before uses, so a chain of invariant instructions moves at once.
    blocks = sorted(loop.blocks, key=rpo_index.__getitem__)  # each block's index in `tree.rpo`
    if not any(is_hoistable(inst, facts) for block in blocks for inst in block.instructions):
        return 0, False
    preheader = loop.preheader
    made_preheader = preheader is None
    if preheader is None:
        preheader = make_preheader(loop)
    moved = 0
    for block in blocks:
        for inst in list(block.instructions):
            if is_hoistable(inst, facts):
                inst.move_before(preheader.terminator)  # type: ignore[arg-type]
                moved += 1
    return moved, made_preheader


def loop_invariant_code_motion(function: Function) -> bool:
    """Hoist the invariant instructions of every loop of `function`; True if anything changed."""
    changed = False
    while True:
        nest = LoopNest(function)
        rpo_index = {block: index for index, block in enumerate(nest.tree.rpo)}
        progress = False
        # nest.loops lists a loop before the loops nested in it: reversed, inner loops come first.
        for loop in reversed(nest.loops):
            moved, made_preheader = _hoist_from(loop, nest.tree, rpo_index)
            progress |= bool(moved)
            if made_preheader:
                break  # the nest no longer knows the new block: start a sweep on a fresh one
        if not progress:
            return changed
        changed = True
