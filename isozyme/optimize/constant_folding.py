"""const-fold: evaluate scalar instructions whose operands are all constants, and selects on a constant.

After const-fold no scalar op (an op of `semantics.SEMANTICS`) has only constant operands, unless
evaluating it raises (a zero divisor, a shift out of range, `fptosi` of nan or of a value out of range):
such an instruction is kept, so the program still fails where and how it did. No `select` has a constant
condition. Requires verified SSA; keeps it valid.

Values come from `semantics.evaluate`, the interpreter's own definition of every op (STYLE item 7), so
folding is exact by construction: IEEE results in the operands' precision, signed zeros and infinities
kept, integers wrapped. `x * 0.0` is folded only when `x` is itself a constant. Ops without an entry in
`SEMANTICS` (memory, calls, phis, control flow) have no scalar value to compute and are never folded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from isozyme.ssa.interpreter import RUNTIME_ERRORS
from isozyme.ssa.ir import Constant, Function, Instruction, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.semantics import SEMANTICS, evaluate

Fold = Callable[[Instruction], Value | None]
"""A folding rule: the value that may replace the instruction, or None to keep it."""


def fold_constant_operands(inst: Instruction) -> Constant | None:
    """The constant `inst` computes when all its operands are constants and evaluating it does not raise."""
    if inst.op not in SEMANTICS:  # memory, calls, phis, control flow: not a scalar op
        return None
    if not all(isinstance(operand, Constant) for operand in inst.operands):
        return None
    try:
        value = evaluate(inst.op, inst.type, [operand.value for operand in inst.operands])  # type: ignore[attr-defined]
    except RUNTIME_ERRORS:
        return None  # it traps at run time: keep the trap
    return Constant(inst.type, value, loc=inst.loc)


def fold_select(inst: Instruction) -> Value | None:
    """`select true, a, b` is `a` and `select false, a, b` is `b`, whatever `a` and `b` are."""
    condition, if_true, if_false = inst.operands
    if not isinstance(condition, Constant):
        return None
    return if_true if condition.value else if_false


FOLDS: dict[Op, tuple[Fold, ...]] = {
    Op.SELECT: (fold_select, fold_constant_operands),
}
"""Ops with more folding rules than evaluating constant operands; every other op tries only that."""

DEFAULT_FOLDS: tuple[Fold, ...] = (fold_constant_operands,)


def fold(inst: Instruction) -> Value | None:
    """The value that may replace `inst`, by the first rule of its op that applies; None if none does."""
    for rule in FOLDS.get(inst.op, DEFAULT_FOLDS):
        value = rule(inst)
        if value is not None:
            return value
    return None


def constant_folding(function: Function) -> bool:
    """Fold every instruction of `function` that `fold` can, and what that makes foldable; True if any."""
    worklist = deque(function.instructions())
    changed = False
    while worklist:
        inst = worklist.popleft()
        if inst.block is None or inst.type.is_void:  # erased meanwhile, or no value to replace
            continue
        value = fold(inst)
        if value is None:
            continue
        worklist.extend(inst.users)  # their operands just became constants
        inst.replace_all_uses_with(value)
        inst.erase()
        changed = True
    return changed
