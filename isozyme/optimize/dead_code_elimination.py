"""dce: delete instructions whose results no live instruction uses.

After dce every instruction either has an effect (writes memory that may be read, may trap, is a terminator, is an
`assert`, is a call not marked `readnone`/`readonly`) or is used, transitively, by one that has. Liveness
is marked from those roots through operands and the rest is swept, so dead cycles (a loop counter whose
only use is its own increment) go too.

What may fail is not deleted unless it cannot fail (`docs/bad_input.md`):
  - An unused `load` goes: outside checked mode an out-of-bounds read is undefined, as in LLVM and Numba.
    A load flagged `checked` (a kernel compiled with `boundscheck=True`) stays, and so does a checked
    store or atomic add into an array that nothing reads.
  - An unused `alloc` goes only when its shape cannot fail (`alloc_cannot_fail`): extents that are not
    negative and whose size in bytes fits 64 bits, proven from constants and array extents, or the same
    extents as an alloc that dominates it with elements at least as large (which failed first). Any other
    unused alloc stays; the backends then only check its shape and allocate nothing.

Before marking, stores into local memory that nothing reads are deleted: when every use of an `alloc` is a
`store` or `atomic_add` into it, a `grow` of it, or a `dim` of it (no load, no call or phi taking the
array, no `ret` of it), and none of those writes is `checked`, its stores, atomic adds and grows go, each
`dim` becomes the alloc's extent operand, and the sweep then takes the values only those stores used (and
the alloc, by the rule above). An out-of-bounds store into such an array is not reported, nor a grow that
would run out of memory. A grow of an array that is read is an effect and stays. Requires verified SSA;
keeps it valid.
"""

from __future__ import annotations

import math

from isozyme.optimize.value_ranges import value_range
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.flags import CHECKED
from isozyme.ssa.ir import Function, Instruction
from isozyme.ssa.ops import OP_INFO, Op
from isozyme.ssa.types import LARGEST_SIZE

REMOVABLE_WHEN_UNUSED = frozenset({Op.LOAD, Op.DIM})
"""Impure ops that have no effect beyond their result (unless `checked`)."""


def is_removable(inst: Instruction, dominators: DominatorTree | None = None) -> bool:
    """May `inst` be deleted when its result is unused? An alloc needs `dominators` to be proven."""
    if OP_INFO[inst.op].pure or (inst.op in REMOVABLE_WHEN_UNUSED and CHECKED not in inst.flags):
        return True
    if inst.op is Op.ALLOC:
        return alloc_cannot_fail(inst, dominators)
    return inst.op is Op.CALL and bool(inst.callee.flags & {"readnone", "readonly"})


def alloc_cannot_fail(alloc: Instruction, dominators: DominatorTree | None = None) -> bool:
    """Is `alloc`'s shape known to be valid: every extent not negative and the size in bytes at most
    `LARGEST_SIZE` (module docstring)? Proven from value ranges, or from an alloc dominating it."""
    itemsize = _itemsize(alloc)
    ranges = [value_range(extent) for extent in alloc.operands]
    if all(r is not None and r[0] >= 0 for r in ranges):
        return itemsize * math.prod(r[1] for r in ranges) <= LARGEST_SIZE  # type: ignore[index]
    if dominators is None:
        return False
    return any(other is not alloc and other.op is Op.ALLOC and other.operands == alloc.operands
               and _itemsize(other) >= itemsize and dominators.instruction_dominates(other, alloc)
               for other in alloc.operands[0].users)


def _itemsize(alloc: Instruction) -> int:
    return alloc.type.element.numpy_dtype.itemsize  # type: ignore[attr-defined, no-any-return]


WRITTEN_ARRAY_OPERAND: dict[Op, int] = {Op.STORE: 1, Op.ATOMIC_ADD: 1, Op.GROW: 0}
"""Ops that only write an array (their result observes nothing), and the position of that array."""


def is_never_read(alloc: Instruction) -> bool:
    """Is every use of `alloc` an unchecked write into it or a `dim` of it?"""
    return all(use.user.op is Op.DIM or (WRITTEN_ARRAY_OPERAND.get(use.user.op) == use.index
                                         and CHECKED not in use.user.flags) for use in alloc.uses)


def delete_unread_stores(function: Function) -> bool:
    """Delete the writes into local arrays that are never read (module docstring); True if any went."""
    unread = [inst for inst in function.instructions() if inst.op is Op.ALLOC and inst.uses and is_never_read(inst)]
    for alloc in unread:
        for user in alloc.users:
            if user.op is Op.DIM:
                user.replace_all_uses_with(alloc.operands[user.attrs["axis"]])  # type: ignore[index]
            user.erase()
    return bool(unread)


def _live_instructions(function: Function) -> set[Instruction]:
    allocs = any(inst.op is Op.ALLOC for inst in function.instructions())
    dominators = DominatorTree(function) if allocs else None
    worklist = [inst for inst in function.instructions() if not is_removable(inst, dominators)]
    live = set(worklist)
    while worklist:
        for operand in worklist.pop().operands:
            if isinstance(operand, Instruction) and operand not in live:
                live.add(operand)
                worklist.append(operand)
    return live


def dead_code_elimination(function: Function) -> bool:
    """Delete every dead instruction of `function`; True if any was deleted."""
    changed = delete_unread_stores(function)
    live = _live_instructions(function)
    dead = [inst for inst in function.instructions() if inst not in live]
    for inst in dead:
        inst.drop_operands()
    for inst in dead:
        inst.remove_from_block()
    return changed or bool(dead)
