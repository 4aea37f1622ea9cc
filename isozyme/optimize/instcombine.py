"""instcombine: algebraic identities, as a table of rewrite rules keyed by op.

After instcombine no instruction matches a rule of `RULES` (nor of `FASTMATH_RULES` in a function with the
`fastmath` flag): commutative ops and orderings have a constant operand on the right only; `x + 0`,
`x * 1`, `x * 2^k`, `x // 2^k`, `x % 2^k`, `x - x`, `x & x`, `fneg (fneg x)`, `x * 1.0`, `pow(x, 1.0)`,
`dim` of an `alloc`, `1.0 / (1.0 + exp(-x))` (to `sigmoid x`), ... are rewritten (the tables list them
all). Requires verified SSA; keeps it valid.
Best after const-fold, which folds what has only constant operands; instcombine leaves that to it.

Every rule gives the value the interpreter computes (`semantics.py`), bit for bit (nan payloads aside,
which no op can observe), with one documented exception. Integers wrap, so `x * 2^k` is `shl x, k`, and
Python's floor division and modulo by a positive `2^k` are `ashr x, k` and `and x, 2^k - 1` even for
negative x. Floats keep signed zeros, infinities and nans: `x - 0.0`, `x + -0.0`, `x * 1.0`, `x / 1.0` are
`x`, but `x + 0.0` is not (-0.0 + 0.0 is 0.0), nor is `x * 0.0` 0.0 (x may be -1, inf or nan), nor `x - x`
0.0 (x may be inf or nan), nor `pow(x, 0.5)` `sqrt x` (they differ at -0.0 and -inf). `pow(x, 2.0)` and
`pow(x, 3.0)` stay powers: the IR defines them as the products `x * x` and `(x * x) * x` (`semantics.py`;
the C library's pow differs from them by an ulp for some inputs, glibc: 0.06% of f64 inputs for the square,
17% for the cube, so Python's own `x ** 3` may differ from a kernel by an ulp), and both code generators
emit those products, so expanding them here gains nothing and costs the derivative: reverse mode
differentiates `pow(x, 3.0)` as `3 x^2` (three products) but `(x * x) * x` by the product rule (four
products and two sums), which made the gradient of the optimized program slower than that of the
program as written (the relu3 row of the benchmark suite).

`FASTMATH_RULES` hold the rewrites that are not exact: `x * 0.0 -> 0.0`, `x + 0.0 -> x`, `x - x -> 0.0`.
They apply only to functions carrying the `fastmath` flag.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from isozyme.ssa.builder import Builder
from isozyme.ssa.flags import is_growable_alloc
from isozyme.ssa.ir import Constant, Function, Instruction, Value, canonical_scalar
from isozyme.ssa.ops import Op
from isozyme.ssa.semantics import evaluate
from isozyme.ssa.types import ScalarType

Rule = Callable[[Instruction, Builder], Value | None]
"""A rewrite: the value replacing the instruction (possibly built with the builder, which inserts before
it), the instruction itself when it was changed in place, or None when the rule does not apply."""

FASTMATH_FLAG = "fastmath"
"""The function flag that allows `FASTMATH_RULES`."""


# --- matching ---------------------------------------------------------------------------------------


def is_constant(value: Value, expected: int | float) -> bool:
    """Is `value` the constant `expected`? Floats compare with their sign, so 0.0 is not -0.0."""
    if not isinstance(value, Constant):
        return False
    if isinstance(expected, float):
        return value.value == expected and math.copysign(1.0, value.value) == math.copysign(1.0, expected)
    return value.value == expected  # i1 constants are bools: False == 0 and True is the all-ones value


def all_ones(ty: ScalarType) -> int | bool:
    """The value with every bit set: -1, or true for i1."""
    return True if ty.is_bool else -1


def power_of_two_exponent(value: Value) -> int | None:
    """k when `value` is the integer constant 2**k with k >= 1, else None."""
    if not isinstance(value, Constant) or not value.type.is_int:
        return None
    c = value.value
    if c < 2 or c & (c - 1):
        return None
    return c.bit_length() - 1


def exact_reciprocal(value: Value) -> float | None:
    """1/c when `value` is a float constant ±2**k whose reciprocal is exact in its type, else None."""
    if not isinstance(value, Constant) or not value.type.is_float or not math.isfinite(value.value):
        return None
    mantissa, _ = math.frexp(value.value)
    if abs(mantissa) != 0.5:
        return None
    reciprocal = 1.0 / value.value
    exact = canonical_scalar(value.type, reciprocal) == reciprocal and reciprocal != 0.0
    return reciprocal if exact and math.isfinite(reciprocal) else None


def _lhs_if_rhs(constant: int | float) -> Rule:
    """`x op c -> x`."""
    return lambda inst, b: inst.operands[0] if is_constant(inst.operands[1], constant) else None


def _rhs_if_rhs(constant: int | float) -> Rule:
    """`x op c -> c` (the absorbing element)."""
    return lambda inst, b: inst.operands[1] if is_constant(inst.operands[1], constant) else None


def _negate_if_rhs(constant: int | float, negate: Op) -> Rule:
    """`x op c -> neg x`."""
    return lambda inst, b: (b.emit(negate, inst.operands[0], name=inst.name)
                            if is_constant(inst.operands[1], constant) else None)


def _negate_if_lhs(constant: int | float, negate: Op) -> Rule:
    """`c - x -> neg x`: `0 - x` for integers; `-0.0 - x` for floats (`0.0 - x` is not `fneg x`: 0.0 - 0.0
    is 0.0)."""
    return lambda inst, b: (b.emit(negate, inst.operands[1], name=inst.name)
                            if is_constant(inst.operands[0], constant) else None)


def _same_operands(result: Callable[[Instruction], Value]) -> Rule:
    """`x op x -> result`."""
    return lambda inst, b: result(inst) if inst.operands[0] is inst.operands[1] else None


def _zero(inst: Instruction) -> Value:
    return Constant(inst.type, 0, loc=inst.loc)


def _first(inst: Instruction) -> Value:
    return inst.operands[0]


def _involution(inst: Instruction, b: Builder) -> Value | None:
    """`neg (neg x) -> x`, for ineg and fneg."""
    inner = inst.operands[0]
    return inner.operands[0] if isinstance(inner, Instruction) and inner.op is inst.op else None


# --- canonical forms --------------------------------------------------------------------------------

SWAPPED_ORDERING = {Op.ICMP_SLT: Op.ICMP_SGT, Op.ICMP_SGT: Op.ICMP_SLT, Op.ICMP_SLE: Op.ICMP_SGE,
                    Op.ICMP_SGE: Op.ICMP_SLE, Op.FCMP_OLT: Op.FCMP_OGT, Op.FCMP_OGT: Op.FCMP_OLT,
                    Op.FCMP_OLE: Op.FCMP_OGE, Op.FCMP_OGE: Op.FCMP_OLE}
"""`c < x` is `x > c` (Python's comparisons, nan included)."""

def _constant_left(inst: Instruction) -> bool:
    return isinstance(inst.operands[0], Constant) and not isinstance(inst.operands[1], Constant)


def constant_to_right(inst: Instruction, b: Builder) -> Value | None:
    """`c op x -> x op c` for commutative ops (`OpInfo.commutative`), changing the instruction in place.

    For fadd and fmul this may change which of two nan operands propagates, which no op can observe."""
    if not _constant_left(inst):
        return None
    left, right = inst.operands
    inst.set_operand(0, right)
    inst.set_operand(1, left)
    return inst


def swap_ordering(inst: Instruction, b: Builder) -> Value | None:
    """`icmp.slt c, x -> icmp.sgt x, c`, and the other orderings alike."""
    if not _constant_left(inst):
        return None
    return b.emit(SWAPPED_ORDERING[inst.op], inst.operands[1], inst.operands[0], name=inst.name)


def reassociate_constants(inst: Instruction, b: Builder) -> Value | None:
    """`(x op c1) op c2 -> x op (c1 op c2)`, the constant computed by the interpreter's semantics.

    Only for integer ops that stay associative when they wrap (iadd imul and or xor imin imax)."""
    inner, outer_constant = inst.operands
    if not (isinstance(outer_constant, Constant) and isinstance(inner, Instruction) and inner.op is inst.op
            and isinstance(inner.operands[1], Constant)):
        return None
    combined = evaluate(inst.op, inst.type, [inner.operands[1].value, outer_constant.value])
    return b.emit(inst.op, inner.operands[0], Constant(inst.type, combined, loc=inst.loc), name=inst.name)


def subtract_from_added_constant(inst: Instruction, b: Builder) -> Value | None:
    """`(x + c1) - c2 -> x + (c1 - c2)`, and `x` when they cancel (wrapping, so exact): the counter of a
    reverse loop fused with its forward loop reads `(i + 1) - 1` (`loop_fusion.py`)."""
    inner, subtrahend = inst.operands
    if not (isinstance(subtrahend, Constant) and isinstance(inner, Instruction) and inner.op is Op.IADD
            and isinstance(inner.operands[1], Constant)):
        return None
    combined = evaluate(Op.ISUB, inst.type, [inner.operands[1].value, subtrahend.value])
    if combined == 0:
        return inner.operands[0]
    return b.emit(Op.IADD, inner.operands[0], Constant(inst.type, combined, loc=inst.loc), name=inst.name)


# --- integer rules ----------------------------------------------------------------------------------


def _shift_if_power_of_two(shift: Op) -> Rule:
    """`x * 2^k -> shl x, k` and `x // 2^k -> ashr x, k` (floor division is the arithmetic shift)."""
    def rule(inst: Instruction, b: Builder) -> Value | None:
        k = power_of_two_exponent(inst.operands[1])
        return None if k is None else b.emit(shift, inst.operands[0], k, name=inst.name)
    return rule


def zero_if_unit_divisor(inst: Instruction, b: Builder) -> Value | None:
    """`x % 1 -> 0` and `x % -1 -> 0`."""
    divisor = inst.operands[1]
    return _zero(inst) if is_constant(divisor, 1) or is_constant(divisor, -1) else None


def mask_if_power_of_two(inst: Instruction, b: Builder) -> Value | None:
    """`x % 2^k -> and x, 2^k - 1`: Python's modulo by a positive divisor is never negative."""
    k = power_of_two_exponent(inst.operands[1])
    return None if k is None else b.and_(inst.operands[0], (1 << k) - 1, name=inst.name)


def _bitwise_with_all_ones(keep_operand: bool) -> Rule:
    """`and x, -1 -> x` (keep_operand) and `or x, -1 -> -1`."""
    def rule(inst: Instruction, b: Builder) -> Value | None:
        if not is_constant(inst.operands[1], all_ones(inst.type)):  # type: ignore[arg-type]
            return None
        return inst.operands[0] if keep_operand else inst.operands[1]
    return rule


SELF_COMPARISON = {Op.ICMP_EQ: True, Op.ICMP_NE: False, Op.ICMP_SLT: False, Op.ICMP_SLE: True,
                   Op.ICMP_SGT: False, Op.ICMP_SGE: True}
"""`icmp x, x` for integers and booleans (never for floats: nan is not equal to itself)."""


def compare_with_itself(inst: Instruction, b: Builder) -> Value | None:
    if inst.operands[0] is not inst.operands[1]:
        return None
    return Constant(inst.type, SELF_COMPARISON[inst.op], loc=inst.loc)


def select_identities(inst: Instruction, b: Builder) -> Value | None:
    """`select c, x, x -> x`; `select c, true, false -> c`; `select c, false, true -> xor c, true`."""
    condition, if_true, if_false = inst.operands
    if if_true is if_false:
        return if_true
    if is_constant(if_true, True) and is_constant(if_false, False) and inst.type.is_bool:
        return condition
    if is_constant(if_true, False) and is_constant(if_false, True) and inst.type.is_bool:
        return b.xor(condition, True, name=inst.name)
    return None


# --- float rules --------------------------------------------------------------------------------------


def _fold_negated_operand(replacement: Op) -> Rule:
    """`x - (fneg y) -> x + y` and `x + (fneg y) -> x - y`: IEEE defines subtraction as that addition."""
    def rule(inst: Instruction, b: Builder) -> Value | None:
        right = inst.operands[1]
        if not (isinstance(right, Instruction) and right.op is Op.FNEG):
            return None
        return b.emit(replacement, inst.operands[0], right.operands[0], name=inst.name)
    return rule


def double_if_times_two(inst: Instruction, b: Builder) -> Value | None:
    """`x * 2.0 -> x + x`: both round the same exact value 2x."""
    return b.fadd(inst.operands[0], inst.operands[0], name=inst.name) if is_constant(inst.operands[1], 2.0) else None


def multiply_by_reciprocal(inst: Instruction, b: Builder) -> Value | None:
    """`x / 2^k -> x * 2^-k` when 2^-k is exact in the type: both round the same exact quotient."""
    reciprocal = exact_reciprocal(inst.operands[1])
    return None if reciprocal is None else b.fmul(inst.operands[0], reciprocal, name=inst.name)


def _power(exponent: float, expand: Callable[[Instruction, Builder], Value]) -> Rule:
    def rule(inst: Instruction, b: Builder) -> Value | None:
        return expand(inst, b) if is_constant(inst.operands[1], exponent) else None
    return rule


def _sole_use(value: Value, *ops: Op) -> Instruction | None:
    """`value` when it is an instruction of one of `ops` with exactly one use, else None."""
    if isinstance(value, Instruction) and value.op in ops and len(value.uses) == 1:
        return value
    return None


def _negated(value: Value) -> Value | None:
    """x when `value` is `fneg x` or `fsub -0.0, x` (the same value) used only once, else None."""
    negation = _sole_use(value, Op.FNEG, Op.FSUB)
    if negation is None or (negation.op is Op.FSUB and not is_constant(negation.operands[0], -0.0)):
        return None
    return negation.operands[-1]


def sigmoid_of_textbook_formula(inst: Instruction, b: Builder) -> Value | None:
    """`fdiv 1.0, (fadd (exp (fneg x)), 1.0) -> sigmoid x` (the fadd's operands in either order), when the
    fneg, exp and fadd have no other use. `sigmoid` is defined as exactly this sequence (`semantics.py`),
    so the rewrite is exact; its derivative needs only its result, so AD keeps no tape of the exp."""
    denominator = _sole_use(inst.operands[1], Op.FADD)
    if not is_constant(inst.operands[0], 1.0) or denominator is None:
        return None
    for exponential, one in (denominator.operands, denominator.operands[::-1]):
        exp = _sole_use(exponential, Op.EXP)
        x = None if exp is None or not is_constant(one, 1.0) else _negated(exp.operands[0])
        if x is not None:
            return b.sigmoid(x, name=inst.name)
    return None


def _one(inst: Instruction, b: Builder) -> Value:
    return Constant(inst.type, 1.0, loc=inst.loc)  # C99 F.9.4.4: pow(x, ±0) is 1 for every x, nan too


# --- the tables ---------------------------------------------------------------------------------------

def dim_of_alloc(inst: Instruction, b: Builder) -> Value | None:
    """`dim (alloc T[e0, e1, ...]), k` is e_k (the alloc ran, so e_k was not negative); not for a growable
    alloc, which `grow` enlarges. So the loops of helper kernels over `h.shape[0]` of an array the caller
    allocated get the same trip count value as the caller's loops (loop fusion needs that)."""
    array = inst.operands[0]
    if isinstance(array, Instruction) and array.op is Op.ALLOC and not is_growable_alloc(array):
        return array.operands[inst.attrs["axis"]]
    return None


RULES: dict[Op, tuple[Rule, ...]] = {
    Op.DIM: (dim_of_alloc,),
    Op.IADD: (constant_to_right, _lhs_if_rhs(0), reassociate_constants),
    Op.ISUB: (_lhs_if_rhs(0), _negate_if_lhs(0, Op.INEG), _same_operands(_zero), subtract_from_added_constant),
    Op.IMUL: (constant_to_right, _lhs_if_rhs(1), _rhs_if_rhs(0), _negate_if_rhs(-1, Op.INEG),
              reassociate_constants, _shift_if_power_of_two(Op.SHL)),
    Op.IFLOORDIV: (_lhs_if_rhs(1), _negate_if_rhs(-1, Op.INEG), _shift_if_power_of_two(Op.ASHR)),
    Op.IFLOORMOD: (zero_if_unit_divisor, mask_if_power_of_two),
    Op.UDIV: (_lhs_if_rhs(1),),
    Op.INEG: (_involution,),
    Op.SHL: (_lhs_if_rhs(0),),
    Op.ASHR: (_lhs_if_rhs(0),),
    Op.AND: (constant_to_right, _same_operands(_first), _rhs_if_rhs(0), _bitwise_with_all_ones(True),
             reassociate_constants),
    Op.OR: (constant_to_right, _same_operands(_first), _lhs_if_rhs(0), _bitwise_with_all_ones(False),
            reassociate_constants),
    Op.XOR: (constant_to_right, _same_operands(_zero), _lhs_if_rhs(0), reassociate_constants),
    Op.IMIN: (constant_to_right, _same_operands(_first), reassociate_constants),
    Op.IMAX: (constant_to_right, _same_operands(_first), reassociate_constants),
    **{op: (constant_to_right, compare_with_itself) for op in (Op.ICMP_EQ, Op.ICMP_NE)},
    **{op: (swap_ordering, compare_with_itself) for op in (Op.ICMP_SLT, Op.ICMP_SLE, Op.ICMP_SGT, Op.ICMP_SGE)},
    **{op: (swap_ordering,) for op in (Op.FCMP_OLT, Op.FCMP_OLE, Op.FCMP_OGT, Op.FCMP_OGE)},
    Op.FCMP_OEQ: (constant_to_right,),
    Op.FCMP_UNE: (constant_to_right,),
    Op.SELECT: (select_identities,),
    Op.FADD: (constant_to_right, _lhs_if_rhs(-0.0), _fold_negated_operand(Op.FSUB)),
    Op.FSUB: (_lhs_if_rhs(0.0), _negate_if_lhs(-0.0, Op.FNEG), _fold_negated_operand(Op.FADD)),
    Op.FMUL: (constant_to_right, _lhs_if_rhs(1.0), _negate_if_rhs(-1.0, Op.FNEG), double_if_times_two),
    Op.FDIV: (_lhs_if_rhs(1.0), _negate_if_rhs(-1.0, Op.FNEG), multiply_by_reciprocal, sigmoid_of_textbook_formula),
    Op.FNEG: (_involution,),
    Op.POW: (_lhs_if_rhs(1.0), _power(0.0, _one), _power(-0.0, _one)),
}
"""Exact rewrites, tried in order; the first that applies wins. Ops not listed have no identity here."""

FASTMATH_RULES: dict[Op, tuple[Rule, ...]] = {
    Op.FADD: (_lhs_if_rhs(0.0),),
    Op.FSUB: (_lhs_if_rhs(-0.0), _same_operands(lambda inst: Constant(inst.type, 0.0, loc=inst.loc))),
    Op.FMUL: (_rhs_if_rhs(0.0), _rhs_if_rhs(-0.0)),
}
"""Rewrites that ignore signed zeros, nans, infinities and rounding; only under the `fastmath` flag."""

NO_RULES: tuple[Rule, ...] = ()


def rules_for(op: Op, fastmath: bool) -> tuple[Rule, ...]:
    """The rules of `op`, none for ops without identities (loads, calls, math functions but pow...)."""
    rules = RULES.get(op, NO_RULES)
    return rules + FASTMATH_RULES.get(op, NO_RULES) if fastmath else rules


def combine(inst: Instruction, fastmath: bool) -> Value | None:
    """Apply the first matching rule of `inst`'s op: its replacement, `inst` if changed in place, or None."""
    builder = Builder(loc=inst.loc).before(inst)
    for rule in rules_for(inst.op, fastmath):
        result = rule(inst, builder)
        if result is not None:
            return result
    return None


def erase_if_dead(value: Value) -> None:
    """Erase `value` if it is a pure instruction without uses, and so on up its operands.

    A rewrite often leaves the instruction it looked through unused (`fneg` under `fneg`); deleting it
    here keeps the output readable without a dce run, as LLVM's instcombine does."""
    worklist = [value]
    while worklist:
        dead = worklist.pop()
        if isinstance(dead, Instruction) and dead.block is not None and not dead.uses and dead.info.pure:
            operands = dead.operands
            dead.erase()
            worklist.extend(operands)


def instcombine(function: Function) -> bool:
    """Rewrite `function` with the rules until none applies; True if any did."""
    fastmath = FASTMATH_FLAG in function.flags
    worklist = deque(function.instructions())
    changed = False
    while worklist:
        inst = worklist.popleft()
        if inst.block is None:  # erased as a rule's victim meanwhile
            continue
        result = combine(inst, fastmath)
        if result is None:
            continue
        changed = True
        if result is inst:  # changed in place: other rules may apply to it and its users now
            worklist.append(inst)
            worklist.extend(inst.users)
            continue
        worklist.extend(inst.users)
        if isinstance(result, Instruction):
            worklist.append(result)
        operands = inst.operands
        inst.replace_all_uses_with(result)
        inst.erase()
        for operand in operands:
            erase_if_dead(operand)
    return changed
