"""dce: delete instructions whose results no live instruction uses.

After dce every instruction either has an effect (writes memory that may be read, may trap, is a terminator, is an
`assert`, is a call not marked `readnone`/`readonly`) or is used, transitively, by one that has. Liveness
is marked from those roots through operands and the rest is swept, so dead cycles (a loop counter whose
only use is its own increment) go too. Unused loads are deleted although a load may trap out of bounds:
as in LLVM and Numba, an out-of-bounds read whose value is never used is not reported.

Before marking, stores into local memory that nothing reads are deleted: when every use of an `alloc` is a
`store` or `atomic_add` into it, a `grow` of it, or a `dim` of it (no load, no call or phi taking the
array, no `ret` of it), its stores, atomic adds and grows go, each `dim` becomes the alloc's extent operand,
and the sweep then takes the alloc and the values only those stores used. Like unused loads, an
out-of-bounds store into such an array is not reported, nor a grow that would run out of memory. A grow
of an array that is read is an effect and stays. Requires verified SSA; keeps it valid.
"""

from __future__ import annotations

from isozyme.ssa.ir import Function, Instruction
from isozyme.ssa.ops import OP_INFO, Op

REMOVABLE_WHEN_UNUSED = frozenset({Op.LOAD, Op.DIM, Op.ALLOC})
"""Impure ops that have no effect beyond their result."""


def is_removable(inst: Instruction) -> bool:
    """May `inst` be deleted when its result is unused?"""
    if OP_INFO[inst.op].pure or inst.op in REMOVABLE_WHEN_UNUSED:
        return True
    return inst.op is Op.CALL and bool(inst.callee.flags & {"readnone", "readonly"})


WRITTEN_ARRAY_OPERAND: dict[Op, int] = {Op.STORE: 1, Op.ATOMIC_ADD: 1, Op.GROW: 0}
"""Ops that only write an array (their result observes nothing), and the position of that array."""


def is_never_read(alloc: Instruction) -> bool:
    """Is every use of `alloc` a write into it or a `dim` of it?"""
    return all(use.user.op is Op.DIM or WRITTEN_ARRAY_OPERAND.get(use.user.op) == use.index for use in alloc.uses)


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
    worklist = [inst for inst in function.instructions() if not is_removable(inst)]
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
