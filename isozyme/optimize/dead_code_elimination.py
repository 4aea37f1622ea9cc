"""dce: delete instructions whose results no live instruction uses.

After dce every instruction either has an effect (writes memory, may trap, is a terminator, is an
`assert`, is a call not marked `readnone`/`readonly`) or is used, transitively, by one that has. Liveness
is marked from those roots through operands and the rest is swept, so dead cycles (a loop counter whose
only use is its own increment) go too. Unused loads are deleted although a load may trap out of bounds:
as in LLVM and Numba, an out-of-bounds read whose value is never used is not reported. Requires verified
SSA; keeps it valid.
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
    live = _live_instructions(function)
    dead = [inst for inst in function.instructions() if inst not in live]
    for inst in dead:
        inst.drop_operands()
    for inst in dead:
        inst.remove_from_block()
    return bool(dead)
