"""sink-allocs: move each local array's `alloc` down to where its uses begin (after AD, before memory reuse).

AD allocates the shadow of a local array in the entry block (`d_prev = alloc f64[n] zeroed`), but the
forward sweep never touches it: its uses all lie in the reverse sweep. Where an `alloc` sits is where its
array's live range starts (`memory_reuse.py`), so a shadow allocated at the entry overlaps every array of
the forward sweep and can share bytes with none. Moved to the nearest common dominator of its uses, it
starts where the reverse sweep starts, and the arena can give it the bytes of arrays that died in the
forward sweep (heat's `prev` and `d_prev`, an MLP's forward temporaries and the adjoints of the reverse).

An alloc moves when it has uses, none of them a phi (an array flowing through a phi is used at the end of
the incoming block: left where it is), to the nearest common dominator of the blocks of its uses or, when
that block can run again without the alloc's block running in between, to its nearest dominator that
cannot (never into a cycle the alloc was not in, where it would run, and zero its array, once per trip:
the reverse sweep's loops start with the block before them). Cycles are the CFG's, not only natural loops:
the reverse of a loop with several exits is entered at several blocks (irreducible), and a `zeroed`
shadow sunk into it lost the adjoints of every earlier iteration. It goes
before its first use in that block, or before the block's branch. Its extents are defined before
its old place, which dominates the new one. A `zeroed` alloc zeroes its array where it now stands, which
is before every use. Growable allocs stay (their tapes are pushed from the start). The alloc's check of
its extents runs later, or not at all on paths that do not use the array, as dce's deletion of unused
allocs already allows. Requires verified SSA; keeps it valid.
"""

from __future__ import annotations

import functools

from isozyme.ssa.cfg import reachable_from
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.flags import is_growable_alloc
from isozyme.ssa.ir import Block, Function, Phi
from isozyme.ssa.ops import Op


def sink_allocs(function: Function) -> bool:
    """Move allocs down to their uses (module docstring); True if any moved."""
    tree = DominatorTree(function)
    changed = False
    for alloc in [inst for inst in function.instructions() if inst.op is Op.ALLOC]:
        users = [use.user for use in alloc.uses]
        if not users or is_growable_alloc(alloc) or any(isinstance(user, Phi) for user in users):
            continue
        target = functools.reduce(tree.nearest_common_dominator, [user.block for user in users])  # type: ignore[arg-type]
        home: Block = alloc.block  # type: ignore[assignment]
        while target is not home and target in reachable_from(target, avoiding=home):
            target = tree.idom[target]  # type: ignore[assignment]  # not into a cycle: up to before it
        if target is alloc.block:
            continue
        anchor = next((inst for inst in target.instructions if inst in users), target.terminator)
        assert anchor is not None
        alloc.move_before(anchor)
        changed = True
    return changed

