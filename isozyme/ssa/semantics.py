"""What every pure scalar op computes: the table `SEMANTICS` and `evaluate(op, result_type, operands)`.

This is the single definition of the scalar ops of `ops.py` (every op of `Syntax.OPERANDS` or `Syntax.CAST`).
The interpreter runs it, constant folding calls `evaluate`, and the backends are tested against it.

Values are the canonical Python scalars of `Constant.value` (`canonical_scalar` in `ir.py`): `bool` for i1,
`int` wrapped to the width for i32/i64, `float` for f64 and for f32 (holding an exact f32 value). A rule
computes the exact integer result, or the float result in the operands' precision; `evaluate` then makes
it canonical for the result type (ints wrap, f32 values round once).

Integers (i32, i64: two's complement; every result wraps to the width):
  - `iadd isub imul ineg` wrap; `iabs` and `ineg` of INT_MIN give INT_MIN; `imin imax` as Python.
  - `ifloordiv ifloormod` are Python's `//` and `%` (floor; the remainder has the sign of the divisor);
    a zero divisor raises ZeroDivisionError; INT_MIN // -1 wraps to INT_MIN (and INT_MIN % -1 is 0).
  - `udiv` is LLVM's: both operands read as unsigned (modulo 2^bits), the quotient's bits as the signed
    result; a zero divisor raises ZeroDivisionError. Not in the kernel language: the frontend computes
    trip counts of spans wider than i64 with it (`range_length.py`).
  - `shl ashr`: a shift amount outside [0, bits) raises ValueError; `ashr` is arithmetic (Python's `>>`).
  - `and or xor` are bitwise on ints and logical on i1.
  - `icmp.*` compare as Python does; on i1, False < True (unlike LLVM's signed i1, where true is -1:
    a backend must lower i1 orderings as unsigned).

Floats (IEEE 754 binary32/binary64, round to nearest even, no exceptions):
  - Unlike Python, nothing raises: 1.0/0.0 = inf, 0.0/0.0 = nan, sqrt(-1) = nan, log(0) = -inf,
    exp(1000) = inf (as in numpy, C, JAX, Numba's error_model='numpy'). f32 arithmetic rounds every
    result to f32 (it is computed with numpy.float32), never in f64 with a late rounding.
  - `ffloordiv ffloormod` are Python's float `//` and `%` (CPython's float_floor_div / float_rem,
    computed in the operands' precision, signed zeros included) for nonzero divisors; a zero divisor
    gives nan for both.
  - `fmin fmax` are Python's `min(a, b)` / `max(a, b)`: `b if b < a else a` / `b if b > a else a`. So
    fmin(nan, 1) = nan but fmin(1, nan) = 1, and fmin(0.0, -0.0) = 0.0 but fmin(-0.0, 0.0) = -0.0.
  - `fcmp.*` are Python's comparisons: `fcmp.une` (!=) is true when an operand is nan, the ordered
    ones (`oeq olt ole ogt oge`) are false.
  - `sqrt exp log ... erf pow atan2` give the value of Python's `math` function (the C library's, so
    `pow` is C's pow, except that `pow(x, 2.0)` is `x*x` and `pow(x, 3.0)` is `(x*x)*x`, rounded in the
    type's precision after each product, as compilers emit them); where `math` raises (domain or range
    error) they give C99 Annex F's IEEE value (nan or ±inf, taken from numpy). On f32 they are evaluated
    in f64 and rounded once to f32: correctly rounded for sqrt, within an ulp for the others, and the
    same on every machine (a backend's own f32 libm may differ by a few ulps: compare those with a
    tolerance). `fneg fabs floor ceil` are exact.
  - `sigmoid x` is `1.0 / (1.0 + exp(-x))` computed as those four ops (fneg, exp, fadd, fdiv), each
    rounded in the type's precision: the backends lower it to exactly that sequence, so it is bit-for-bit
    the textbook formula (0.0 for x = -1000 where exp overflows to inf, nan for nan).

Conversions (`%y = op %x to T`):
  - `sitofp` rounds the integer to T (nearest even, in one rounding even for i64 -> f32).
  - `fptosi` truncates toward zero like Python's `int()`; nan raises ValueError, ±inf or a value out of
    T's range raises OverflowError.
  - `fpext` is exact; `fptrunc` rounds to f32; `sext` keeps the value; `trunc` wraps to the narrower
    width; `zext` maps i1 to 0 or 1.
  - `select %c, %a, %b` is `a if c else b`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence

import numpy as np

from isozyme.ssa.ir import Constant, Instruction, canonical_scalar
from isozyme.ssa.ops import OP_INFO, Op, Syntax
from isozyme.ssa.types import F32, ScalarType, Type

Scalar = bool | int | float
Rule = Callable[..., Scalar]
"""`rule(result_type, *operands)`: the raw result, which `evaluate` makes canonical for `result_type`."""


class MissingSemanticsError(LookupError):
    """An op has no entry in `SEMANTICS` (a memory, call or control-flow op, or a forgotten rule)."""


_NUMPY_FLOAT = {32: np.float32, 64: np.float64}


def _float_type(ty: ScalarType) -> type[np.floating]:
    """The numpy scalar type in which `ty`'s arithmetic is carried out."""
    return _NUMPY_FLOAT[ty.bits]


# --- integers ---------------------------------------------------------------------------------------


def _int_binary(fn: Callable[[int, int], int]) -> Rule:
    """An integer rule computed exactly on Python ints (evaluate wraps the result)."""
    return lambda ty, a, b: fn(a, b)


def _check_divisor(b: int) -> None:
    if b == 0:
        raise ZeroDivisionError("integer division or modulo by zero")


def _ifloordiv(ty: ScalarType, a: int, b: int) -> int:
    _check_divisor(b)
    return a // b


def _ifloormod(ty: ScalarType, a: int, b: int) -> int:
    _check_divisor(b)
    return a % b


def _udiv(ty: ScalarType, a: int, b: int) -> int:
    _check_divisor(b)
    modulus = 1 << ty.bits
    return (a % modulus) // (b % modulus)


def _check_shift(ty: ScalarType, amount: int) -> None:
    if not 0 <= amount < ty.bits:
        raise ValueError(f"shift amount {amount} is outside [0, {ty.bits}) for {ty}")


def _shl(ty: ScalarType, a: int, b: int) -> int:
    _check_shift(ty, b)
    return a << b


def _ashr(ty: ScalarType, a: int, b: int) -> int:
    _check_shift(ty, b)
    return a >> b


# --- floats -----------------------------------------------------------------------------------------


def _float_binary(fn: Callable[[np.floating, np.floating], np.floating]) -> Rule:
    """A float rule computed in the result type's precision (numpy.float32 for f32)."""
    def rule(ty: ScalarType, a: float, b: float) -> float:
        t = _float_type(ty)
        return float(fn(t(a), t(b)))
    return rule


def _float_unary(fn: Callable[[np.floating], np.floating]) -> Rule:
    def rule(ty: ScalarType, a: float) -> float:
        return float(fn(_float_type(ty)(a)))
    return rule


def _float_divmod(ty: ScalarType, a: float, b: float) -> tuple[float, float]:
    """(a // b, a % b) as CPython's float_floor_div and float_rem compute them, in `ty`'s precision."""
    t = _float_type(ty)
    x, y = t(a), t(b)
    if y == 0:
        return math.nan, math.nan
    mod = np.fmod(x, y)
    div = (x - mod) / y  # very nearly an integer: x - mod is an exact multiple of y in exact arithmetic
    if mod:
        if (y < 0) != (mod < 0):  # the remainder takes the sign of the divisor
            mod += y
            div -= t(1)
    else:
        mod = np.copysign(t(0), y)
    if div:
        floordiv = np.floor(div)
        if div - floordiv > t(0.5):  # snap the quotient to the nearest integral value
            floordiv += t(1)
    else:
        floordiv = np.copysign(t(0), x / y)  # a zero with the sign of the true quotient
    return float(floordiv), float(mod)


def _ffloordiv(ty: ScalarType, a: float, b: float) -> float:
    return _float_divmod(ty, a, b)[0]


def _ffloormod(ty: ScalarType, a: float, b: float) -> float:
    return _float_divmod(ty, a, b)[1]


def _fmin(ty: ScalarType, a: float, b: float) -> float:
    return b if b < a else a  # exactly Python's min(a, b)


def _fmax(ty: ScalarType, a: float, b: float) -> float:
    return b if b > a else a  # exactly Python's max(a, b)


def _libm(python_fn: Callable[..., float], ieee_fn: Callable[..., np.floating]) -> Rule:
    """A math function: Python's `math` value, or the IEEE value (numpy's) where `math` raises.

    The result is computed in f64; `evaluate` rounds it to f32 for f32 operands.
    """
    def rule(ty: ScalarType, *args: float) -> float:
        try:
            return python_fn(*args)
        except (ValueError, OverflowError):
            return float(ieee_fn(*(np.float64(a) for a in args)))
    return rule


# --- conversions ------------------------------------------------------------------------------------


def _sitofp(ty: ScalarType, a: int) -> float:
    if ty == F32:
        # One rounding from the integer; numpy.float32(python_int) would round through f64 first.
        return float(np.float32(np.int64(a)))
    return float(a)  # Python rounds int -> float correctly


def _fptosi(ty: ScalarType, a: float) -> int:
    if math.isnan(a):
        raise ValueError(f"cannot convert nan to {ty}")
    if math.isinf(a):
        raise OverflowError(f"cannot convert {a} to {ty}")
    value = int(a)  # truncates toward zero
    half = 1 << (ty.bits - 1)
    if not -half <= value < half:
        raise OverflowError(f"{a!r} is out of the range of {ty}")
    return value


def _identity(ty: ScalarType, a: Scalar) -> Scalar:
    return a


def _compare(fn: Callable[[Scalar, Scalar], bool]) -> Rule:
    return lambda ty, a, b: fn(a, b)


def _small_power(ty: ScalarType, x: float, y: float, general: Rule) -> float:
    """pow with exponent 2.0 or 3.0 is the product `x*x` or `(x*x)*x` in the type's precision: what
    compilers emit for these powers, so instcombine's `pow(x, 2) -> x*x` and `pow(x, 3) -> x*x*x` are
    exact by definition (the C library's pow may differ from the product by an ulp)."""
    t = _float_type(ty)
    if y == 2.0:
        return float(t(x) * t(x))
    if y == 3.0:
        return float(t(x) * t(x) * t(x))
    return general(ty, x, y)


def _sigmoid(ty: ScalarType, x: float) -> float:
    """`1.0 / (1.0 + exp(-x))`, step by step with each step's own rule and rounding (module docstring)."""
    def step(op: Op, *args: float) -> float:
        return canonical_scalar(ty, SEMANTICS[op](ty, *args))  # type: ignore[return-value]
    e = step(Op.EXP, step(Op.FNEG, x))
    return step(Op.FDIV, 1.0, step(Op.FADD, 1.0, e))


_MATH_FUNCTIONS: dict[Op, tuple[Callable[..., float], Callable[..., np.floating]]] = {
    Op.SQRT: (math.sqrt, np.sqrt),
    Op.EXP: (math.exp, np.exp),
    Op.LOG: (math.log, np.log),
    Op.LOG1P: (math.log1p, np.log1p),
    Op.EXPM1: (math.expm1, np.expm1),
    Op.SIN: (math.sin, np.sin),
    Op.COS: (math.cos, np.cos),
    Op.TAN: (math.tan, np.tan),
    Op.TANH: (math.tanh, np.tanh),
    Op.SINH: (math.sinh, np.sinh),
    Op.COSH: (math.cosh, np.cosh),
    Op.ASIN: (math.asin, np.arcsin),
    Op.ACOS: (math.acos, np.arccos),
    Op.ATAN: (math.atan, np.arctan),
    Op.ATAN2: (math.atan2, np.arctan2),
    Op.POW: (math.pow, np.power),
    Op.ERF: (math.erf, math.erf),  # math.erf never raises
}

SEMANTICS: dict[Op, Rule] = {
    Op.IADD: _int_binary(operator.add),
    Op.ISUB: _int_binary(operator.sub),
    Op.IMUL: _int_binary(operator.mul),
    Op.IFLOORDIV: _ifloordiv,
    Op.IFLOORMOD: _ifloormod,
    Op.UDIV: _udiv,
    Op.INEG: lambda ty, a: -a,
    Op.IABS: lambda ty, a: abs(a),
    Op.IMIN: _int_binary(min),
    Op.IMAX: _int_binary(max),
    Op.SHL: _shl,
    Op.ASHR: _ashr,
    Op.AND: _int_binary(operator.and_),
    Op.OR: _int_binary(operator.or_),
    Op.XOR: _int_binary(operator.xor),
    Op.FADD: _float_binary(operator.add),
    Op.FSUB: _float_binary(operator.sub),
    Op.FMUL: _float_binary(operator.mul),
    Op.FDIV: _float_binary(operator.truediv),
    Op.FFLOORDIV: _ffloordiv,
    Op.FFLOORMOD: _ffloormod,
    Op.FNEG: _float_unary(operator.neg),
    Op.FABS: _float_unary(np.fabs),
    Op.FLOOR: _float_unary(np.floor),
    Op.CEIL: _float_unary(np.ceil),
    Op.FMIN: _fmin,
    Op.FMAX: _fmax,
    **{op: _libm(python_fn, ieee_fn) for op, (python_fn, ieee_fn) in _MATH_FUNCTIONS.items()},
    Op.SIGMOID: _sigmoid,
    Op.POW: lambda ty, x, y: _small_power(ty, x, y, _libm(math.pow, np.power)),
    Op.ICMP_EQ: _compare(operator.eq),
    Op.ICMP_NE: _compare(operator.ne),
    Op.ICMP_SLT: _compare(operator.lt),
    Op.ICMP_SLE: _compare(operator.le),
    Op.ICMP_SGT: _compare(operator.gt),
    Op.ICMP_SGE: _compare(operator.ge),
    Op.FCMP_OEQ: _compare(operator.eq),
    Op.FCMP_UNE: _compare(operator.ne),
    Op.FCMP_OLT: _compare(operator.lt),
    Op.FCMP_OLE: _compare(operator.le),
    Op.FCMP_OGT: _compare(operator.gt),
    Op.FCMP_OGE: _compare(operator.ge),
    Op.SELECT: lambda ty, c, a, b: a if c else b,
    Op.SITOFP: _sitofp,
    Op.FPTOSI: _fptosi,
    Op.FPEXT: _identity,
    Op.FPTRUNC: _identity,  # evaluate rounds to f32
    Op.SEXT: _identity,
    Op.TRUNC: _identity,  # evaluate wraps to the narrower width
    Op.ZEXT: lambda ty, a: int(a),
}
"""The semantics of every pure scalar op, as `rule(result_type, *operands)` (module docstring)."""

SCALAR_SYNTAXES = (Syntax.OPERANDS, Syntax.CAST)
"""The syntaxes of the ops that `SEMANTICS` must cover."""

_uncovered = sorted(str(op) for op, info in OP_INFO.items() if info.syntax in SCALAR_SYNTAXES and op not in SEMANTICS)
assert not _uncovered, f"scalar ops without semantics: {_uncovered}"


def rule_for(op: Op) -> Rule:
    """The semantic rule of `op`; MissingSemanticsError naming the op when there is none."""
    try:
        return SEMANTICS[op]
    except KeyError:
        raise MissingSemanticsError(f"no scalar semantics for op '{op}': only ops of the operand and cast "
                                    f"syntaxes are pure scalar ops") from None


def arity(op: Op) -> int:
    """How many operands a scalar op takes (one letter per operand in its pattern; casts take one)."""
    info = OP_INFO[op]
    return 1 if info.syntax is Syntax.CAST else len(info.operands)


def apply_rule(rule: Rule, result_type: ScalarType, operands: Sequence[Scalar]) -> Scalar:
    """Run `rule` and make its result canonical; the caller must hold `np.errstate(all="ignore")`."""
    return canonical_scalar(result_type, rule(result_type, *operands))


def evaluate(op: Op, result_type: Type, operands: Sequence[Scalar]) -> Scalar:
    """The value of the pure scalar `op` on canonical `operands`, canonical for `result_type`.

    Raises MissingSemanticsError for ops that are not pure scalar ops, and the run-time errors of the
    module docstring (ZeroDivisionError, ValueError, OverflowError) where the op traps.
    """
    rule = rule_for(op)
    if not isinstance(result_type, ScalarType):
        raise TypeError(f"{op} produces a scalar, not {result_type}")
    if len(operands) != arity(op):
        raise TypeError(f"{op} takes {arity(op)} operand(s), got {len(operands)}")
    with np.errstate(all="ignore"):
        return apply_rule(rule, result_type, operands)


SAFE_CONSTANT_OPERAND: dict[Op, Callable[[Type, int], bool]] = {
    Op.IFLOORDIV: lambda ty, divisor: divisor != 0,
    Op.IFLOORMOD: lambda ty, divisor: divisor != 0,
    Op.UDIV: lambda ty, divisor: divisor != 0,
    Op.SHL: lambda ty, amount: 0 <= amount < ty.bits,  # type: ignore[attr-defined]
    Op.ASHR: lambda ty, amount: 0 <= amount < ty.bits,  # type: ignore[attr-defined]
}
"""Trapping ops that cannot trap when their last operand is a constant passing this test (above: only a
zero divisor traps, INT_MIN // -1 wraps; a shift by a negative amount or by the width or more raises)."""


def may_trap(inst: Instruction) -> bool:
    """May `inst` raise at run time (what licm and loop fusion ask before moving it where it might run when
    it would not have)?"""
    if not OP_INFO[inst.op].may_trap:
        return False
    safe = SAFE_CONSTANT_OPERAND.get(inst.op)
    last = inst.operands[-1] if inst.operands else None
    return not (safe is not None and isinstance(last, Constant) and safe(inst.type, last.value))  # type: ignore[arg-type]
