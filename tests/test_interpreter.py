"""The reference interpreter and the scalar semantics table, on IR built with the builder.

Expected values come from Python (`//`, `%`, `math`, `min`), numpy float32 arithmetic or hand-derived
constants, never from the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from isozyme.ssa.builder import Builder, make_function
from isozyme.ssa.interpreter import InterpreterError, StepLimitExceeded, run_function
from isozyme.ssa.ir import Function, Module, SourceLoc
from isozyme.ssa.ops import OP_INFO, Op, Syntax, result_type
from isozyme.ssa.semantics import SEMANTICS, MissingSemanticsError, evaluate
from isozyme.ssa.types import F32, F64, I1, I32, I64, ArrayType, ScalarType, Type

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
LOC = SourceLoc("kernel.py", 7, 4)
LOC_TEXT = "kernel.py:7:5"


# --- helpers ----------------------------------------------------------------------------------------


def wrap(value: int, bits: int) -> int:
    """Two's-complement wrap, written independently of canonical_scalar."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def f32(value: float) -> float:
    return float(np.float32(value))


def same_float(a: float, b: float) -> bool:
    """Equal including the sign of zero, or both nan."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def op_function(op: Op, operand_types: list[Type], to: ScalarType | None = None,
                loc: SourceLoc | None = None) -> Function:
    """`fn(a0, a1, ...) = op(a0, a1, ...)`, with `to` as the cast target for casts."""
    ret = to if OP_INFO[op].syntax is Syntax.CAST else result_type(op, operand_types)
    fn = make_function(str(op).replace(".", "_"), [(f"a{k}", t) for k, t in enumerate(operand_types)], ret)
    b = Builder(fn.add_block("entry"), loc=loc)
    if OP_INFO[op].syntax is Syntax.CAST:
        result = b.cast(op, fn.args[0], to)
    else:
        result = b.emit(op, *fn.args)
    b.ret(result)
    return fn


def run_op(op: Op, operand_types: list[Type], *values: object, to: ScalarType | None = None) -> object:
    return run_function(op_function(op, operand_types, to, LOC), *values)


def counted_loop(name: str, params: list[tuple[str, Type]], ret: Type) -> tuple[Function, Builder, dict]:
    """A `for i in range(n)` skeleton (the last parameter is n): entry -> header -> body -> header, exit.

    Returns the function, a builder and the blocks and induction variable; the caller adds its own phis
    to the header, fills the body (whose latch branch is already there) and the exit.
    """
    fn = make_function(name, params, ret)
    entry, header, body, exit_ = (fn.add_block(label) for label in ("entry", "header", "body", "exit"))
    b = Builder(entry, loc=LOC)
    b.br(header)
    b.at_end(header)
    i = b.phi(I64, [(entry, 0)], name="i")
    b.cbr(b.icmp_slt(i, fn.args[-1]), body, exit_)
    b.at_end(body)
    i_next = b.iadd(i, 1, name="i.next")
    latch = b.br(header)
    i.add_incoming(body, i_next)
    b.before(latch)
    return fn, b, {"entry": entry, "header": header, "body": body, "exit": exit_, "i": i}


def build_mag() -> Function:
    """DESIGN section 3's `mag`: sqrt of the sum of squares."""
    fn, b, parts = counted_loop("mag", [("x", ArrayType(F64, 1)), ("n", I64)], F64)
    header, body = parts["header"], parts["body"]
    s = Builder(header).phi(F64, [(parts["entry"], 0.0)], name="s")
    xi = b.load(fn.args[0], parts["i"])
    s_next = b.fadd(s, b.fmul(xi, xi), name="s.next")
    s.add_incoming(body, s_next)
    b.at_end(parts["exit"]).ret(b.sqrt(s))
    return fn


# --- the semantics table ----------------------------------------------------------------------------


def test_table_covers_every_scalar_op():
    scalar_ops = {op for op, info in OP_INFO.items() if info.syntax in (Syntax.OPERANDS, Syntax.CAST)}
    assert scalar_ops - set(SEMANTICS) == set()
    assert Op.FADD in scalar_ops and Op.SITOFP in scalar_ops


def test_missing_entry_raises_error_naming_the_op(monkeypatch):
    monkeypatch.delitem(SEMANTICS, Op.FMUL)
    with pytest.raises(MissingSemanticsError, match="fmul"):
        evaluate(Op.FMUL, F64, [1.0, 2.0])


def test_evaluate_rejects_non_scalar_ops_by_name():
    with pytest.raises(MissingSemanticsError, match="load"):
        evaluate(Op.LOAD, F64, [])


def test_evaluate_checks_arity():
    with pytest.raises(TypeError, match="2 operand"):
        evaluate(Op.IADD, I64, [1])


def test_evaluate_returns_canonical_python_scalars():
    assert type(evaluate(Op.ICMP_SLT, I1, [1, 2])) is bool
    assert type(evaluate(Op.IADD, I64, [1, 2])) is int
    assert type(evaluate(Op.FADD, F32, [1.0, 2.0])) is float
    assert evaluate(Op.IADD, I64, [INT64_MAX, 1]) == INT64_MIN


# --- f32 rounding -----------------------------------------------------------------------------------


def test_f32_add_rounds_to_f32():
    a, b = f32(0.1), f32(0.2)
    expected = float(np.float32(0.1) + np.float32(0.2))
    assert evaluate(Op.FADD, F32, [a, b]) == expected
    assert run_op(Op.FADD, [F32, F32], 0.1, 0.2) == expected
    assert expected != a + b  # the f64 sum of the same operands differs: the test can tell them apart
    assert run_op(Op.FADD, [F64, F64], 0.1, 0.2) == 0.1 + 0.2


def test_f32_rounds_after_every_operation():
    # (a * b) / c with a rounding after the product, as float32 arithmetic does it.
    a, b, c = f32(1.1), f32(3.3), f32(0.7)
    product = evaluate(Op.FMUL, F32, [a, b])
    quotient = evaluate(Op.FDIV, F32, [product, c])
    assert quotient == float((np.float32(a) * np.float32(b)) / np.float32(c))
    assert product == float(np.float32(a) * np.float32(b)) != a * b


def test_f32_sum_loop_matches_numpy_float32_accumulation():
    fn, b, parts = counted_loop("sum32", [("x", ArrayType(F32, 1)), ("n", I64)], F32)
    s = Builder(parts["header"]).phi(F32, [(parts["entry"], 0.0)], name="s")
    s.add_incoming(parts["body"], b.fadd(s, b.load(fn.args[0], parts["i"])))
    b.at_end(parts["exit"]).ret(s)
    x = np.random.default_rng(0).random(1000, dtype=np.float32)
    acc = np.float32(0)
    for v in x:
        acc = np.float32(acc + v)
    result = run_function(fn, x, len(x))
    assert result == float(acc)
    assert result != math.fsum(float(v) for v in x)  # an f64 accumulation would be detected


# --- integers ---------------------------------------------------------------------------------------

SIGN_CASES = [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-6, 3), (6, -3), (0, -5), (1, 7), (-1, 7)]


@pytest.mark.parametrize(("a", "b"), SIGN_CASES)
@pytest.mark.parametrize("ty", [I64, I32])
def test_int_floordiv_and_floormod_follow_python(a, b, ty):
    assert run_op(Op.IFLOORDIV, [ty, ty], a, b) == a // b
    assert run_op(Op.IFLOORMOD, [ty, ty], a, b) == a % b


@given(st.integers(INT64_MIN, INT64_MAX), st.integers(INT64_MIN, INT64_MAX).filter(bool))
def test_int_floordiv_and_floormod_match_python_on_all_i64(a, b):
    assert evaluate(Op.IFLOORDIV, I64, [a, b]) == wrap(a // b, 64)
    assert evaluate(Op.IFLOORMOD, I64, [a, b]) == a % b


@given(st.integers(INT64_MIN, INT64_MAX), st.integers(INT64_MIN, INT64_MAX))
def test_i64_add_sub_mul_wrap(a, b):
    assert evaluate(Op.IADD, I64, [a, b]) == wrap(a + b, 64)
    assert evaluate(Op.ISUB, I64, [a, b]) == wrap(a - b, 64)
    assert evaluate(Op.IMUL, I64, [a, b]) == wrap(a * b, 64)


def test_i64_wraparound_edge_cases():
    assert run_op(Op.IADD, [I64, I64], INT64_MAX, 1) == INT64_MIN
    assert run_op(Op.IMUL, [I64, I64], 2**62, 4) == 0
    assert run_op(Op.IMUL, [I64, I64], 2**32 + 1, 2**32 + 1) == 2**33 + 1  # 2**64 wraps away
    assert run_op(Op.IFLOORDIV, [I64, I64], INT64_MIN, -1) == INT64_MIN
    assert run_op(Op.IFLOORMOD, [I64, I64], INT64_MIN, -1) == 0
    assert run_op(Op.INEG, [I64], INT64_MIN) == INT64_MIN
    assert run_op(Op.IABS, [I64], INT64_MIN) == INT64_MIN
    assert run_op(Op.ISUB, [I64, I64], INT64_MIN, 1) == INT64_MAX


def test_i32_wraparound():
    assert run_op(Op.IADD, [I32, I32], INT32_MAX, 1) == INT32_MIN
    assert run_op(Op.IMUL, [I32, I32], 65536, 65536) == 0
    assert run_op(Op.IMUL, [I32, I32], 3, 1_000_000_000) == 3_000_000_000 - 2**32
    assert run_op(Op.IFLOORDIV, [I32, I32], INT32_MIN, -1) == INT32_MIN
    assert run_op(Op.IABS, [I32], INT32_MIN) == INT32_MIN


@pytest.mark.parametrize("op", [Op.IFLOORDIV, Op.IFLOORMOD])
def test_integer_division_by_zero_raises_with_location(op):
    with pytest.raises(ZeroDivisionError) as info:
        run_op(op, [I64, I64], 5, 0)
    assert LOC_TEXT in str(info.value)
    with pytest.raises(ZeroDivisionError):
        evaluate(op, I32, [0, 0])


def test_shifts():
    assert run_op(Op.SHL, [I64, I64], 1, 63) == INT64_MIN
    assert run_op(Op.SHL, [I32, I32], 3, 31) == INT32_MIN  # the high bit of 3 << 31 is shifted out
    assert run_op(Op.ASHR, [I64, I64], -8, 1) == -4
    assert run_op(Op.ASHR, [I64, I64], -1, 63) == -1
    assert run_op(Op.ASHR, [I32, I32], 2**30, 30) == 1


@pytest.mark.parametrize(("ty", "amount"), [(I64, 64), (I64, -1), (I32, 32), (I32, 100)])
@pytest.mark.parametrize("op", [Op.SHL, Op.ASHR])
def test_shift_amount_out_of_range_raises(op, ty, amount):
    with pytest.raises(ValueError, match=LOC_TEXT):
        run_op(op, [ty, ty], 1, amount)


def test_bitwise_ops_on_ints_and_bools():
    assert run_op(Op.AND, [I64, I64], -1, 0b1010) == 0b1010
    assert run_op(Op.XOR, [I32, I32], -1, 0) == -1
    assert run_op(Op.OR, [I1, I1], False, True) is True
    assert run_op(Op.AND, [I1, I1], True, False) is False
    assert run_op(Op.XOR, [I1, I1], True, True) is False


def test_int_comparisons_and_min_max():
    assert run_op(Op.ICMP_SLT, [I64, I64], -1, 0) is True
    assert run_op(Op.ICMP_SGE, [I64, I64], -1, 0) is False
    assert run_op(Op.ICMP_SLT, [I1, I1], False, True) is True  # Python's order on bools
    assert run_op(Op.IMIN, [I64, I64], 3, -4) == -4
    assert run_op(Op.IMAX, [I32, I32], 3, -4) == 3


# --- floats -----------------------------------------------------------------------------------------

FLOAT_SIGN_CASES = [(7.5, 2.0), (-7.5, 2.0), (7.5, -2.0), (-7.5, -2.0), (6.0, 3.0), (-6.0, 3.0), (6.0, -3.0),
                    (0.0, 3.0), (-0.0, 3.0), (0.0, -3.0), (-0.0, -3.0), (1e-300, -1e300), (5.0, math.inf),
                    (-5.0, math.inf), (5.0, -math.inf), (math.inf, 2.0)]


@pytest.mark.parametrize(("a", "b"), FLOAT_SIGN_CASES)
def test_float_floordiv_and_floormod_follow_python(a, b):
    assert same_float(run_op(Op.FFLOORDIV, [F64, F64], a, b), a // b)
    assert same_float(run_op(Op.FFLOORMOD, [F64, F64], a, b), a % b)


finite_or_inf = st.floats(allow_nan=False)


@given(finite_or_inf, finite_or_inf.filter(lambda b: b != 0))
def test_f64_floordiv_and_floormod_match_python(a, b):
    assert same_float(evaluate(Op.FFLOORDIV, F64, [a, b]), a // b)
    assert same_float(evaluate(Op.FFLOORMOD, F64, [a, b]), a % b)


f32_values = st.floats(width=32, allow_nan=False, allow_infinity=False)


@given(f32_values, f32_values.filter(lambda b: b != 0))
def test_f32_floordiv_and_floormod_match_numpy_float32(a, b):
    with np.errstate(all="ignore"):
        expected_div = float(np.floor_divide(np.float32(a), np.float32(b)))
        expected_mod = float(np.remainder(np.float32(a), np.float32(b)))
    assert same_float(evaluate(Op.FFLOORDIV, F32, [a, b]), expected_div)
    assert same_float(evaluate(Op.FFLOORMOD, F32, [a, b]), expected_mod)


@pytest.mark.parametrize("a", [1.0, -1.0, 0.0, math.inf])
def test_float_floordiv_and_floormod_by_zero_give_nan(a):
    for zero in (0.0, -0.0):
        assert math.isnan(run_op(Op.FFLOORDIV, [F64, F64], a, zero))
        assert math.isnan(run_op(Op.FFLOORMOD, [F32, F32], a, zero))


IEEE_SPECIALS = [
    (Op.FDIV, [1.0, 0.0], math.inf), (Op.FDIV, [-1.0, 0.0], -math.inf), (Op.FDIV, [1.0, -0.0], -math.inf),
    (Op.FDIV, [0.0, 0.0], math.nan), (Op.SQRT, [-1.0], math.nan), (Op.LOG, [0.0], -math.inf),
    (Op.LOG, [-1.0], math.nan), (Op.LOG1P, [-1.0], -math.inf), (Op.EXP, [1000.0], math.inf),
    (Op.EXPM1, [1000.0], math.inf), (Op.COSH, [1000.0], math.inf), (Op.SINH, [-1000.0], -math.inf),
    (Op.POW, [0.0, -1.0], math.inf), (Op.POW, [-8.0, 1 / 3], math.nan), (Op.POW, [10.0, 400.0], math.inf),
    (Op.POW, [-10.0, 309.0], -math.inf), (Op.ASIN, [2.0], math.nan), (Op.ACOS, [-2.0], math.nan),
    (Op.SIN, [math.inf], math.nan), (Op.TAN, [-math.inf], math.nan), (Op.FMUL, [1e200, 1e200], math.inf),
]


@pytest.mark.parametrize(("op", "args", "expected"), IEEE_SPECIALS)
@pytest.mark.parametrize("ty", [F64, F32])
def test_floats_follow_ieee_instead_of_raising(op, args, expected, ty):
    if ty == F32 and op is Op.FMUL:
        args = [1e30, 1e30]  # 1e200 is not an f32 value; 1e60 overflows f32 all the same
    assert same_float(run_op(op, [ty] * len(args), *args), expected)


UNARY_MATH = [(Op.SQRT, math.sqrt), (Op.EXP, math.exp), (Op.LOG, math.log), (Op.LOG1P, math.log1p),
              (Op.EXPM1, math.expm1), (Op.SIN, math.sin), (Op.COS, math.cos), (Op.TAN, math.tan),
              (Op.TANH, math.tanh), (Op.SINH, math.sinh), (Op.COSH, math.cosh), (Op.ASIN, math.asin),
              (Op.ACOS, math.acos), (Op.ATAN, math.atan), (Op.FABS, math.fabs), (Op.ERF, math.erf),
              (Op.FLOOR, lambda x: float(math.floor(x))), (Op.CEIL, lambda x: float(math.ceil(x)))]


@pytest.mark.parametrize(("op", "python_fn"), UNARY_MATH)
@pytest.mark.parametrize("x", [0.3, -0.7, 0.9999])
def test_math_functions_match_python_math(op, python_fn, x):
    if op in (Op.SQRT, Op.LOG) and x < 0:
        x = -x
    assert run_op(op, [F64], x) == python_fn(x)
    x32 = f32(x)
    assert run_op(op, [F32], x32) == f32(python_fn(x32))  # evaluated in f64, rounded once to f32


def test_binary_math_functions_match_python_math():
    assert run_op(Op.POW, [F64, F64], 1.7, 2.3) == math.pow(1.7, 2.3)
    assert run_op(Op.POW, [F64, F64], -2.0, 3.0) == -8.0
    assert run_op(Op.ATAN2, [F64, F64], -1.0, -2.0) == math.atan2(-1.0, -2.0)
    assert run_op(Op.ATAN2, [F32, F32], 1.0, 3.0) == f32(math.atan2(1.0, 3.0))


def test_f32_sqrt_is_correctly_rounded():
    for x in (2.0, 3.0, 0.1, 1e-30, 12345.678):
        assert run_op(Op.SQRT, [F32], x) == float(np.sqrt(np.float32(x)))


def test_fneg_and_fabs_of_zeros():
    assert same_float(run_op(Op.FNEG, [F64], 0.0), -0.0)
    assert same_float(run_op(Op.FABS, [F32], -0.0), 0.0)
    assert same_float(run_op(Op.FLOOR, [F64], -0.5), -1.0)
    assert same_float(run_op(Op.CEIL, [F64], -0.5), -0.0)


FMIN_FMAX_CASES = [(math.nan, 1.0), (1.0, math.nan), (0.0, -0.0), (-0.0, 0.0), (2.0, -3.0), (-3.0, 2.0),
                   (math.nan, math.nan), (-math.inf, math.nan)]


@pytest.mark.parametrize(("a", "b"), FMIN_FMAX_CASES)
@pytest.mark.parametrize("ty", [F64, F32])
def test_fmin_fmax_are_pythons_min_max_with_argument_order(a, b, ty):
    assert same_float(run_op(Op.FMIN, [ty, ty], a, b), min(a, b))
    assert same_float(run_op(Op.FMAX, [ty, ty], a, b), max(a, b))


def test_fmin_fmax_nan_depends_on_order():
    assert math.isnan(evaluate(Op.FMIN, F64, [math.nan, 1.0]))
    assert evaluate(Op.FMIN, F64, [1.0, math.nan]) == 1.0
    assert math.isnan(evaluate(Op.FMAX, F64, [math.nan, 1.0]))
    assert evaluate(Op.FMAX, F64, [1.0, math.nan]) == 1.0
    assert math.copysign(1.0, evaluate(Op.FMIN, F64, [-0.0, 0.0])) == -1.0


FCMP_OPS = [(Op.FCMP_OEQ, lambda a, b: a == b), (Op.FCMP_UNE, lambda a, b: a != b),
            (Op.FCMP_OLT, lambda a, b: a < b), (Op.FCMP_OLE, lambda a, b: a <= b),
            (Op.FCMP_OGT, lambda a, b: a > b), (Op.FCMP_OGE, lambda a, b: a >= b)]


@pytest.mark.parametrize(("op", "python_cmp"), FCMP_OPS)
@pytest.mark.parametrize(("a", "b"), [(1.0, 2.0), (2.0, 2.0), (math.nan, 1.0), (math.nan, math.nan),
                                      (0.0, -0.0), (math.inf, 1.0)])
def test_float_comparisons_are_pythons(op, python_cmp, a, b):
    assert run_op(op, [F64, F64], a, b) is python_cmp(a, b)


def test_fcmp_une_is_true_for_nan_and_ordered_ones_false():
    assert run_op(Op.FCMP_UNE, [F64, F64], math.nan, math.nan) is True
    assert run_op(Op.FCMP_OEQ, [F64, F64], math.nan, math.nan) is False
    assert run_op(Op.FCMP_OGE, [F32, F32], math.nan, 1.0) is False


def test_select():
    assert run_op(Op.SELECT, [I1, F64, F64], True, 1.5, 2.5) == 1.5
    assert run_op(Op.SELECT, [I1, I64, I64], False, 1, 2) == 2


# --- conversions ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("x", "expected"), [(2.7, 2), (-2.7, -2), (-0.5, 0), (1e18, 10**18),
                                             (-(2.0**63), INT64_MIN)])
def test_fptosi_truncates_toward_zero(x, expected):
    assert run_op(Op.FPTOSI, [F64], x, to=I64) == expected


@pytest.mark.parametrize(("x", "to", "error"), [
    (math.nan, I64, ValueError), (math.inf, I64, OverflowError), (-math.inf, I32, OverflowError),
    (2.0**63, I64, OverflowError), (3e9, I32, OverflowError), (-2147483649.0, I32, OverflowError)])
def test_fptosi_invalid_conversions_raise_with_location(x, to, error):
    with pytest.raises(error, match=LOC_TEXT):
        run_op(Op.FPTOSI, [F64], x, to=to)


def test_fptosi_range_limits_of_i32():
    assert run_op(Op.FPTOSI, [F64], 2147483647.9, to=I32) == INT32_MAX
    assert run_op(Op.FPTOSI, [F32], -2147483648.0, to=I32) == INT32_MIN


def test_sitofp_rounds_once_to_the_target():
    # 2**60 + 2**36 + 1 is above the halfway point 2**60 + 2**36 between the f32 neighbours 2**60 and
    # 2**60 + 2**37, so it rounds up; through f64 it would first lose the +1 and then tie to even (2**60).
    assert run_op(Op.SITOFP, [I64], 2**60 + 2**36 + 1, to=F32) == float(2**60 + 2**37)
    assert run_op(Op.SITOFP, [I64], 2**53 + 1, to=F64) == float(2**53)
    assert run_op(Op.SITOFP, [I32], 16777217, to=F32) == 16777216.0
    assert run_op(Op.SITOFP, [I64], -3, to=F64) == -3.0


def test_float_casts():
    assert run_op(Op.FPTRUNC, [F64], 0.1, to=F32) == f32(0.1) != 0.1
    assert run_op(Op.FPTRUNC, [F64], 1e300, to=F32) == math.inf
    assert run_op(Op.FPEXT, [F32], 0.1, to=F64) == f32(0.1)


def test_integer_casts():
    assert run_op(Op.TRUNC, [I64], 2**32 + 5, to=I32) == 5
    assert run_op(Op.TRUNC, [I64], 2**31, to=I32) == INT32_MIN
    assert run_op(Op.TRUNC, [I64], -1, to=I32) == -1
    assert run_op(Op.SEXT, [I32], INT32_MIN, to=I64) == INT32_MIN
    assert run_op(Op.ZEXT, [I1], True, to=I64) == 1
    assert run_op(Op.ZEXT, [I1], False, to=I32) == 0


# --- control flow -----------------------------------------------------------------------------------


def test_mag_loop_with_phis():
    x = np.random.default_rng(1).random(257)
    assert run_function(build_mag(), x, len(x)) == math.sqrt(sum(v * v for v in x))
    assert run_function(build_mag(), x, 0) == 0.0


def test_phi_swap_is_a_parallel_assignment():
    fn, b, parts = counted_loop("swap", [("n", I64)], I64)
    header = Builder(parts["header"])
    a = header.phi(I64, [(parts["entry"], 1)], name="a")
    c = header.phi(I64, [(parts["entry"], 2)], name="c")
    a.add_incoming(parts["body"], c)
    c.add_incoming(parts["body"], a)
    b.at_end(parts["exit"]).ret(b.iadd(b.imul(a, 10), c))
    for n in range(5):
        x, y = 1, 2
        for _ in range(n):
            x, y = y, x
        assert run_function(fn, n) == 10 * x + y
    assert run_function(fn, 1) == 21  # a sequential assignment would give 22


def test_conditional_branch_and_early_return():
    fn = make_function("sign", [("x", F64)], I64)
    entry, negative, rest = fn.add_block("entry"), fn.add_block("neg"), fn.add_block("rest")
    b = Builder(entry)
    b.cbr(b.fcmp_olt(fn.args[0], 0.0), negative, rest)
    b.at_end(negative).ret(-1)
    b.at_end(rest).ret(b.select(b.fcmp_ogt(fn.args[0], 0.0), 1, 0))
    assert [run_function(fn, v) for v in (-2.0, 0.0, 3.0, math.nan)] == [-1, 0, 1, 0]


# --- calls and memory -------------------------------------------------------------------------------


def test_calls_pass_arrays_by_reference():
    module = Module()
    scale = make_function("scale", [("x", ArrayType(F64, 1)), ("i", I64), ("k", F64)], F64, module)
    b = Builder(scale.add_block("entry"))
    old = b.load(scale.args[0], scale.args[1])
    b.store(b.fmul(old, scale.args[2]), scale.args[0], scale.args[1])
    b.ret(old)
    main = make_function("main", [("x", ArrayType(F64, 1))], F64, module)
    b = Builder(main.add_block("entry"))
    first = b.call(scale, main.args[0], 0, 3.0)
    second = b.call(scale, main.args[0], 0, 2.0)
    b.ret(b.fadd(first, second))
    x = np.array([1.5, 4.0])
    assert run_function(module["main"], x) == 1.5 + 4.5  # the second call sees the first call's store
    assert x.tolist() == [9.0, 4.0]


def test_recursive_call():
    fn = make_function("fact", [("n", I64)], I64)
    entry, base, step = fn.add_block("entry"), fn.add_block("base"), fn.add_block("step")
    b = Builder(entry)
    b.cbr(b.icmp_sle(fn.args[0], 1), base, step)
    b.at_end(base).ret(1)
    b.at_end(step).ret(b.imul(fn.args[0], b.call(fn, b.isub(fn.args[0], 1))))
    assert run_function(fn, 10) == math.factorial(10)
    assert run_function(fn, 25) == wrap(math.factorial(25), 64)


def test_void_function_returns_none_and_its_stores_are_visible():
    fn = make_function("fill", [("out", ArrayType(I32, 2)), ("v", I32)])
    b = Builder(fn.add_block("entry"))
    b.store(fn.args[1], fn.args[0], 1, 2)
    b.ret()
    out = np.zeros((2, 3), dtype=np.int32)
    assert run_function(fn, out, -7) is None
    assert out.tolist() == [[0, 0, 0], [0, 0, -7]]


def load_function(rank: int) -> Function:
    fn = make_function("get", [("x", ArrayType(F64, rank))] + [(f"i{k}", I64) for k in range(rank)], F64)
    b = Builder(fn.add_block("entry"), loc=LOC)
    b.ret(b.load(fn.args[0], *fn.args[1:]))
    return fn


def store_function(rank: int) -> Function:
    fn = make_function("put", [("x", ArrayType(F64, rank))] + [(f"i{k}", I64) for k in range(rank)])
    b = Builder(fn.add_block("entry"), loc=LOC)
    b.store(1.0, fn.args[0], *fn.args[1:])
    b.ret()
    return fn


@pytest.mark.parametrize(("index", "text"), [(3, "(3,)"), (-1, "(-1,)"), (100, "(100,)")])
def test_load_out_of_bounds_names_index_shape_and_location(index, text):
    x = np.arange(3.0)
    with pytest.raises(IndexError) as info:
        run_function(load_function(1), x, index)
    message = str(info.value)
    assert text in message and "(3,)" in message and LOC_TEXT in message


def test_load_in_bounds_reads_the_element():
    x = np.arange(12.0).reshape(3, 4)
    assert run_function(load_function(2), x, 2, 1) == 9.0


@pytest.mark.parametrize(("i", "j"), [(1, 3), (2, 0), (-1, 0), (0, -3)])
def test_store_out_of_bounds_2d_raises_and_writes_nothing(i, j):
    x = np.zeros((2, 3))
    with pytest.raises(IndexError) as info:
        run_function(store_function(2), x, i, j)
    message = str(info.value)
    assert f"({i}, {j})" in message and "(2, 3)" in message and LOC_TEXT in message
    assert not x.any()


def test_atomic_add_accumulates_and_checks_bounds():
    fn = make_function("acc", [("x", ArrayType(I64, 1)), ("i", I64), ("v", I64)])
    b = Builder(fn.add_block("entry"), loc=LOC)
    b.atomic_add(fn.args[2], fn.args[0], fn.args[1])
    b.ret()
    x = np.array([INT64_MAX, 5])
    run_function(fn, x, 1, 10)
    run_function(fn, x, 0, 1)  # wraps like iadd
    assert x.tolist() == [INT64_MIN, 15]
    with pytest.raises(IndexError, match=r"\(2,\)"):
        run_function(fn, x, 2, 1)


def test_atomic_add_on_f32_rounds():
    fn = make_function("acc32", [("x", ArrayType(F32, 1)), ("v", F32)])
    b = Builder(fn.add_block("entry"))
    b.atomic_add(fn.args[1], fn.args[0], 0)
    b.ret()
    x = np.array([0.1], dtype=np.float32)
    run_function(fn, x, 0.2)
    assert x[0] == np.float32(0.1) + np.float32(0.2)


def alloc_function(element: ScalarType, zeroed: bool) -> Function:
    """Allocates an (n, 2) array and returns the element [n - 1, 1]."""
    fn = make_function("local", [("n", I64)], element)
    b = Builder(fn.add_block("entry"), loc=LOC)
    array = b.alloc(element, fn.args[0], 2, zeroed=zeroed)
    b.ret(b.load(array, b.isub(fn.args[0], 1), 1))
    return fn


def test_alloc_uninitialised_memory_is_visible():
    assert math.isnan(run_function(alloc_function(F64, False), 3))
    assert math.isnan(run_function(alloc_function(F32, False), 3))
    assert run_function(alloc_function(I64, False), 3) == INT64_MIN
    assert run_function(alloc_function(I32, False), 3) == INT32_MIN


def test_alloc_zeroed():
    assert run_function(alloc_function(F64, True), 4) == 0.0
    assert run_function(alloc_function(I32, True), 1) == 0


def test_alloc_negative_extent_raises():
    with pytest.raises(ValueError, match=LOC_TEXT):
        run_function(alloc_function(F64, True), -2)


def test_dim_reads_the_extent_of_an_axis():
    fn = make_function("cols", [("x", ArrayType(F64, 2))], I64)
    b = Builder(fn.add_block("entry"))
    b.ret(b.iadd(b.imul(b.dim(fn.args[0], 0), 100), b.dim(fn.args[0], 1)))
    assert run_function(fn, np.zeros((3, 7))) == 307


# --- asserts, arguments, step limit -----------------------------------------------------------------


def test_assert_failure_raises_with_message_and_location():
    fn = make_function("checked", [("n", I64)], I64)
    b = Builder(fn.add_block("entry"), loc=LOC)
    b.assert_(b.icmp_sgt(fn.args[0], 0), "n must be positive")
    b.ret(fn.args[0])
    assert run_function(fn, 3) == 3
    with pytest.raises(AssertionError) as info:
        run_function(fn, 0)
    assert "n must be positive" in str(info.value) and LOC_TEXT in str(info.value)


def test_arguments_are_checked():
    fn = build_mag()
    with pytest.raises(TypeError, match="dtype"):
        run_function(fn, np.zeros(3, dtype=np.float32), 3)
    with pytest.raises(TypeError, match="2-D"):
        run_function(fn, np.zeros((3, 1)), 3)
    with pytest.raises(TypeError, match="%x"):
        run_function(fn, [1.0, 2.0], 2)
    with pytest.raises(TypeError, match="%n"):
        run_function(fn, np.zeros(3), 3.0)
    with pytest.raises(TypeError, match="2 argument"):
        run_function(fn, np.zeros(3))
    with pytest.raises(OverflowError, match="%n"):
        run_function(fn, np.zeros(3), 2**63)


def test_scalar_arguments_are_made_canonical():
    fn = op_function(Op.FADD, [F32, F32])
    assert run_function(fn, np.float64(0.1), 0) == f32(0.1)
    assert run_function(op_function(Op.IADD, [I32, I32]), np.int64(-5), True) == -4


def build_spin() -> Function:
    fn = make_function("spin", [], I64)
    entry, loop = fn.add_block("entry"), fn.add_block("loop")
    Builder(entry).br(loop)
    Builder(loop).br(loop)
    return fn


def test_step_limit_stops_an_infinite_loop():
    with pytest.raises(StepLimitExceeded) as info:
        run_function(build_spin(), step_limit=1000)
    assert "@spin" in str(info.value) and "loop" in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_step_limit_counts_instructions_across_calls():
    callee = make_function("g", [("a", I64)], I64)
    b = Builder(callee.add_block("entry"))
    b.ret(b.iadd(callee.args[0], 1))  # 2 instructions
    caller = make_function("f", [("a", I64)], I64)
    b = Builder(caller.add_block("entry"))
    b.ret(b.call(callee, caller.args[0]))  # 2 instructions, 4 with the callee's
    assert run_function(caller, 1, step_limit=4) == 2
    with pytest.raises(StepLimitExceeded, match="@f"):
        run_function(caller, 1, step_limit=3)
    with pytest.raises(StepLimitExceeded, match="@g"):
        run_function(caller, 1, step_limit=2)


def test_step_limit_counts_phis():
    # mag with n = 1: entry br (1); header 2 phis + icmp + cbr (4); body load, fmul, fadd, iadd, br (5);
    # header again (4); exit sqrt + ret (2): 16 in all.
    x = np.ones(1)
    assert run_function(build_mag(), x, 1, step_limit=16) == 1.0
    with pytest.raises(StepLimitExceeded, match="exit"):
        run_function(build_mag(), x, 1, step_limit=15)
    with pytest.raises(StepLimitExceeded, match="header"):  # the phis on re-entry are steps 11 and 12
        run_function(build_mag(), x, 1, step_limit=10)


def test_block_without_terminator_is_an_interpreter_error():
    fn = make_function("broken", [], I64)
    b = Builder(fn.add_block("entry"))
    b.iadd(1, 2)
    with pytest.raises(InterpreterError, match="terminator"):
        run_function(fn)

