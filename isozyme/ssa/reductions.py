"""Reductions: the header phis of a loop that the loop only adds to, so that its iterations may run in any
order, or at once, each from zero, their sums added in any order (the result differs only in rounding).

    is_reduction(phi, loop)

A header phi is a reduction when the body only adds to it: a chain of `fadd`/`fsub` (or `iadd`/`isub`, not
both kinds) through phis of branches, in which the reduced value is operand 0 of a subtraction, whose
values the loop reads nowhere else (not in its header, not after it but through the phi itself), and which
reaches the phi again on every back edge. OpenCL's and the thread pool's parallel loops combine such phis
(`codegen/parallel_loops.py`), and loop fusion may run a parallel loop of them in the other order
(`optimize/loop_fusion_legality.py`).
"""

from __future__ import annotations

from isozyme.ssa.ir import Instruction, Phi, Value
from isozyme.ssa.loops import Loop
from isozyme.ssa.ops import Op

ADDITIVE = {Op.FADD: "float", Op.FSUB: "float", Op.IADD: "int", Op.ISUB: "int"}
"""Ops a reduction chain may consist of (the reduced value is operand 0 of a subtraction)."""


def is_reduction(phi: Phi, loop: Loop) -> bool:
    """Does the loop only add to `phi` (module docstring)? The chain is what the loop computes from it."""
    chain: dict[Value, None] = {phi: None}
    work: list[Value] = [phi]
    while work:
        for user in work.pop().users:
            if user.block is None or user.block not in loop or user in chain:
                continue
            if user.block is loop.header or not (isinstance(user, Phi) or user.op in ADDITIVE):
                return False
            chain[user] = None
            work.append(user)
    kinds = set()
    for value in chain:
        if value is phi:
            continue
        assert isinstance(value, Instruction)
        if isinstance(value, Phi):
            if not all(v in chain for v in value.operands):
                return False
            continue
        kinds.add(ADDITIVE[value.op])
        a, b = value.operands
        if (a in chain) == (b in chain) or (value.op in (Op.FSUB, Op.ISUB) and a not in chain):
            return False
        if any(u.block is not None and u.block not in loop for u in value.users):
            return False
    return len(kinds) <= 1 and all(phi.incoming_value(latch) in chain for latch in loop.latches)
