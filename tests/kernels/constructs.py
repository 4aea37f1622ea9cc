"""Small kernels, one construct of the kernel language each (DESIGN 1.2), and makers of their arguments.

`CONSTRUCTS` lists every kernel with `make_args(rng) -> tuple` (random arguments from a numpy Generator)
and the relative tolerance of the comparison with plain Python (1e-5 where the kernel computes in f32 and
Python in f64). Every kernel is valid Python, and on the arguments its maker draws it avoids the documented
divergences from Python (int wrap-around, division by zero, math domain errors, negative indices), so the
compiled kernel must compute exactly what its `py_func` computes (`test_frontend_differential.py`).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import isozyme as iz
from isozyme import Array, boolean, f32, f64, i32, i64

SCALE = 1.5
OFFSET = 7
STEPS = 4

Args = Callable[[np.random.Generator], tuple]


def _vector(rng: np.random.Generator, n: int, low: float = -3.0, high: float = 3.0) -> np.ndarray:
    return np.round(rng.uniform(low, high, n), 3)


def _length(rng: np.random.Generator, low: int = 1, high: int = 7) -> int:
    return int(rng.integers(low, high + 1))


def _x_n(rng: np.random.Generator) -> tuple:
    n = _length(rng)
    return _vector(rng, n), n


def _out_x_n(rng: np.random.Generator) -> tuple:
    n = _length(rng)
    return np.zeros(n), _vector(rng, n), n


def _float(rng: np.random.Generator, low: float = -4.0, high: float = 4.0) -> float:
    return round(float(rng.uniform(low, high)), 3)


def _special(rng: np.random.Generator) -> float:
    return float(rng.choice([math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, -2.0]))


def _int(rng: np.random.Generator, low: int = -20, high: int = 20) -> int:
    return int(rng.integers(low, high + 1))


def _nonzero_int(rng: np.random.Generator, bound: int = 9) -> int:
    return int(rng.choice([k for k in range(-bound, bound + 1) if k != 0]))


# --- comparisons and boolean logic ------------------------------------------------------------------


@iz.kernel
def chained_comparison(a: f64, b: f64, c: f64) -> boolean:
    return a < b <= c


@iz.kernel
def chained_comparison_mixed(i: i64, x: f64, n: i64) -> i64:
    if 0 <= i < n != 3:
        return 1
    if x > i >= -n:
        return 2
    if i == n == 0 or x != x:
        return 3
    return 4


@iz.kernel
def short_circuit_and_guards_division(a: i64, d: i64) -> boolean:
    return d != 0 and a // d > 1


@iz.kernel
def short_circuit_or_guards_modulo(a: i64, d: i64) -> i64:
    if d == 0 or a % d == 0:
        return 1
    return 0


@iz.kernel
def short_circuit_guards_index(x: Array[f64], j: i64, n: i64) -> boolean:
    return (0 <= j < n and x[j] > 0.0) or j == -1


@iz.kernel
def not_operator(a: i64, flag: boolean) -> boolean:
    return not (a > 0 and not flag) or not a < -5


@iz.kernel
def boolean_parameter_and_return(flag: boolean, a: f64) -> boolean:
    return (not flag and a > 0.0) or (flag and a <= 0.0)


@iz.kernel
def boolean_local_variable(x: Array[f64], n: i64) -> boolean:
    found = False
    for i in range(n):
        if x[i] > 2.0:
            found = True
    return found


@iz.kernel
def mixed_int_float_comparisons(k: i64, a: f64) -> i64:
    count = 0
    if k < a:
        count += 1
    if k == a:
        count += 10
    if a >= k - 1:
        count += 100
    return count


@iz.kernel
def comparisons_with_nan_and_infinities(a: f64, b: f64) -> i64:
    flags = 0
    if a != a:
        flags += 1
    if not a < b:
        flags += 2
    if a >= b:
        flags += 4
    if a == a and b == b:
        flags += 8
    if a < b or a > b or a == b:
        flags += 16
    if a <= b <= a:
        flags += 32
    return flags


@iz.kernel
def min_max_abs_with_nan_and_infinities(a: f64, b: f64) -> f64:
    return min(a, b) + 2.0 * max(a, b) + 4.0 * min(b, a) + 8.0 * max(b, a) + abs(a) * 0.5


# --- loops ------------------------------------------------------------------------------------------


@iz.kernel
def range_with_one_two_three_arguments(n: i64) -> i64:
    s = 0
    for i in range(n):
        s += i
    for i in range(2, n):
        s += 10 * i
    for i in range(1, n, 2):
        s += 100 * i
    return s


@iz.kernel
def negative_range_step(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n - 1, -1, -2):
        s = s * 0.5 + x[i]
    return s


@iz.kernel
def runtime_step_sign(lo: i64, hi: i64, step: i64) -> i64:
    total = 0
    count = 0
    for i in range(lo, hi, step):
        total += i
        count += 1
    return total * 100 + count


@iz.kernel
def zero_trip_loop(n: i64) -> i64:
    s = 5
    for i in range(n, 0):
        s += i
    for i in range(0, n, -1):
        s -= i
    return s


@iz.kernel
def nested_break_and_continue(x: Array[f64], n: i64) -> i64:
    count = 0
    for i in range(n):
        if x[i] < -2.0:
            continue
        for j in range(n):
            if j > i:
                break
            if x[j] > 0.0:
                continue
            count += 1
        if count > 12:
            break
    return count


@iz.kernel
def while_loop(start: i64) -> i64:
    m = start
    steps = 0
    while m != 1 and steps < 200:
        if m % 2 == 0:
            m = m // 2
        else:
            m = 3 * m + 1
        steps += 1
    return steps


@iz.kernel
def while_condition_with_branches(x: Array[f64], n: i64, a: f64) -> f64:
    # The condition's conditional expression and chained comparison make blocks inside the loop header;
    # a value untouched by the loop (a) is read after it through trivial phis that vanish in a cascade.
    w = 0
    while w < (n if x[0] > 0.0 else 1):
        w += 1
    return a


@iz.kernel
def while_true_with_break(a: f64) -> f64:
    value = abs(a) + 100.0
    while True:
        value = value * 0.5
        if value < 1.0:
            break
    return value


@iz.kernel
def nested_while_and_for(n: i64) -> i64:
    total = 0
    k = 0
    while k < n:
        for j in range(k):
            total += j * k
        k += 1
    return total


@iz.kernel
def prange_loop(out: Array[f64], x: Array[f64], n: i64):
    for i in iz.prange(n):
        out[i] = 2.0 * x[i] + 1.0


@iz.kernel
def loop_bound_from_module_constant(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(STEPS):
        s += x[i % len(x)] * i
    return s


# --- control flow -----------------------------------------------------------------------------------


@iz.kernel
def elif_chain(a: i64) -> i64:
    if a < -10:
        r = 1
    elif a < 0:
        r = 2
    elif a == 0:
        r = 3
    elif a < 10:
        r = 4
    else:
        r = 5
    return r


@iz.kernel
def several_returns(a: f64) -> i64:
    if a < -1.0:
        return -1
    elif a < 1.0:
        return 0
    for i in range(3):
        if a < 2.0 + i:
            return 10 + i
    return 100


@iz.kernel
def return_from_nested_loops(x: Array[f64], n: i64) -> i64:
    for i in range(n):
        for j in range(i):
            if x[i] + x[j] > 3.0:
                return i * 10 + j
    return -1


@iz.kernel
def return_without_value(out: Array[f64], x: Array[f64], n: i64):
    for i in range(n):
        if x[i] > 2.5:
            return
        out[i] = x[i] * x[i]


@iz.kernel
def pass_statement(a: i64) -> i64:
    if a > 0:
        pass
    else:
        a = -a
    for _ in range(3):
        pass
    return a


@iz.kernel
def assert_that_passes(x: Array[f64], n: i64) -> f64:
    assert n >= 1
    assert len(x) == n, "n is the length of x"
    s = 0.0
    for i in range(n):
        assert 0 <= i < n
        s += x[i]
    return s


@iz.kernel
def conditional_expression(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] if x[i] > 0.0 else -2.0 * x[i]
        s += 1.0 if i % 3 == 0 else (0.5 if i % 3 == 1 else 0.25)
    return s


@iz.kernel
def variable_defined_in_both_branches(a: f64) -> f64:
    if a > 0.0:
        s = 1.0
        t = a
    else:
        s = -1.0
        t = -a
    return s * 2.0 + t


# --- arithmetic -------------------------------------------------------------------------------------


@iz.kernel
def int_float_promotion(k: i64, a: f64) -> f64:
    return k * a + k / 3 + (k + 1) * 0.5 - a / 4


@iz.kernel
def int_true_division(a: i64, b: i64) -> f64:
    return a / b


@iz.kernel
def loop_variable_widens_int_to_float(x: Array[f64], n: i64) -> f64:
    s = 0
    for i in range(n):
        s += x[i]
    return s


@iz.kernel
def int_float_join_after_branch(a: f64, k: i64) -> f64:
    s = k
    if a > 0.0:
        s = a
    return s * 2


@iz.kernel
def int_floordiv_and_mod_negative(a: i64, b: i64) -> i64:
    return (a // b) * 1000 + a % b


@iz.kernel
def float_floordiv_and_mod_negative(a: f64, b: f64) -> f64:
    return (a // b) * 100.0 + a % b


@iz.kernel
def float_power(x: f64, y: f64) -> f64:
    return abs(x) ** 0.5 + x**2.0 + abs(x) ** y + (-x) ** 3


@iz.kernel
def int_power(k: i64) -> i64:
    return k**2 + k**3 - 2**10 + k**0


@iz.kernel
def bit_operations(a: i64, b: i64) -> i64:
    return ((a << 3) ^ (b >> 2)) | (a & b) + (a ^ -1)


@iz.kernel
def runtime_shift_counts(a: i64, s: i64) -> i64:
    return (a << s) + (a >> s) * 3


@iz.kernel
def min_max_three_arguments(a: f64, b: f64, c: f64) -> f64:
    return min(a, b, c) * 10.0 + max(a, b, c) + min(a, b) - max(c, a)


@iz.kernel
def min_max_ints(i: i64, j: i64, k: i64) -> i64:
    return min(i, j, k) * 100 + max(i, j, k)


@iz.kernel
def min_max_mixed_types(k: i64, a: f64) -> f64:
    return max(k, a, 0) + min(k, 2.5)


@iz.kernel
def abs_of_int(k: i64) -> i64:
    return abs(k) + abs(k - 3)


@iz.kernel
def abs_of_float(a: f64) -> f64:
    return abs(a) + abs(a - 3.5)


@iz.kernel
def float_and_int_conversions(a: f64, k: i64) -> i64:
    return int(a) * 10 + int(-a) + int(float(k) * 1.5)


@iz.kernel
def unary_minus(a: f64, k: i64) -> f64:
    return -a * 2.0 + -k - -(a + k)


# --- math functions ---------------------------------------------------------------------------------


@iz.kernel
def math_module_functions(a: f64) -> f64:
    s = math.sqrt(abs(a)) + math.exp(min(a, 30.0)) + math.log(1.0 + abs(a)) + math.log1p(abs(a))
    s += math.expm1(a) + math.sin(a) + math.cos(a) + math.tan(a) + math.tanh(a)
    s += math.sinh(a) + math.cosh(a) + math.asin(a / (1.0 + abs(a))) + math.acos(a / (2.0 + abs(a)))
    s += math.atan(a) + math.atan2(a, 2.0) + math.pow(abs(a), 1.5) + math.fabs(a) + math.erf(a)
    return s


@iz.kernel
def iz_functions(a: f64) -> f64:
    s = iz.sqrt(abs(a)) + iz.exp(min(a, 30.0)) + iz.log(1.0 + abs(a)) + iz.log1p(abs(a))
    s += iz.expm1(a) + iz.sin(a) + iz.cos(a) + iz.tan(a) + iz.tanh(a)
    s += iz.sinh(a) + iz.cosh(a) + iz.asin(a / (1.0 + abs(a))) + iz.acos(a / (2.0 + abs(a)))
    s += iz.atan(a) + iz.atan2(a, 2.0) + iz.pow(abs(a), 1.5) + iz.fabs(a) + iz.erf(a)
    s += iz.floor(a) * 3.0 + iz.ceil(a)
    return s


@iz.kernel
def math_floor_and_ceil_give_ints(a: f64) -> i64:
    return math.floor(a) * 3 + math.ceil(a)


# --- arrays -----------------------------------------------------------------------------------------


@iz.kernel
def len_and_shape(x: Array[f64], grid: Array[f64, 2]) -> i64:
    return len(x) * 100 + grid.shape[0] * 10 + grid.shape[1] + x.shape[0] * 1000


@iz.kernel
def two_dimensional_indexing(out: Array[f64, 2], grid: Array[f64, 2]):
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            out[i, j] = grid[i, j] * 2.0 + grid[grid.shape[0] - 1 - i, j]


@iz.kernel
def local_arrays_one_dimensional(x: Array[f64], n: i64) -> f64:
    prefix = iz.zeros(n, f64)
    doubled = iz.empty(n, f64)
    running = 0.0
    for i in range(n):
        running += x[i]
        prefix[i] = running
        doubled[i] = 2.0 * x[i]
    s = 0.0
    for i in range(n):
        s += prefix[i] * doubled[n - 1 - i]
    return s


@iz.kernel
def local_arrays_two_dimensional(x: Array[f64], n: i64) -> f64:
    table = iz.zeros((n, 3), f64)
    other = iz.empty((3, n), f64)
    for i in range(n):
        for j in range(3):
            table[i, j] = x[i] * j
            other[j, i] = x[i] + j
    s = 0.0
    for i in range(n):
        for j in range(3):
            s += table[i, j] * other[j, i]
    return s


@iz.kernel
def local_int_array(idx: Array[i64], n: i64) -> i64:
    counts = iz.zeros(n, i64)
    for i in range(n):
        counts[idx[i]] += 1
    best = 0
    for i in range(n):
        best = max(best, counts[i] * 10 + i)
    return best


@iz.kernel
def gather_and_scatter_with_index_array(out: Array[f64], x: Array[f64], idx: Array[i64], n: i64):
    for i in range(n):
        out[idx[i]] += x[i]
        out[i] += x[idx[n - 1 - i]] * 0.5


@iz.kernel
def augmented_assignment_to_array_elements(out: Array[f64], x: Array[f64], n: i64):
    for i in range(n):
        out[i] += x[i]
        out[i] *= 3.0
        out[i] -= 1.0
        out[i] /= 4.0
        out[i] **= 2
        out[i] //= 0.75
        out[i] %= 5.0


@iz.kernel
def int_array_augmented_assignment(idx: Array[i64], n: i64):
    for i in range(n):
        idx[i] *= 3
        idx[i] += 1
        idx[i] <<= 2
        idx[i] %= 7
        idx[i] ^= 5
        idx[i] -= i


@iz.kernel
def int_stored_into_float_array(out: Array[f64], n: i64):
    for i in range(n):
        out[i] = i * 3 - 4


@iz.kernel
def f32_array_sum(x: Array[f32], n: i64) -> f32:
    s = f32(0.0)
    for i in range(n):
        s += x[i] * x[i]
    return s


# --- scalars: assignment forms and types ------------------------------------------------------------


@iz.kernel
def tuple_assignment_swap(a: f64, b: f64) -> f64:
    a, b = b, a
    return a - 2.0 * b


@iz.kernel
def tuple_assignment_fibonacci(n: i64) -> i64:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


@iz.kernel
def augmented_assignment_int_scalars(a: i64, b: i64) -> i64:
    r = a
    r += b
    r -= 3
    r *= 2
    r //= 3
    r %= 1000
    r **= 2
    r <<= 2
    r >>= 1
    r &= 0xFFFF
    r |= 8
    r ^= b
    return r


@iz.kernel
def augmented_assignment_float_scalars(a: f64, b: f64) -> f64:
    r = a
    r += b
    r -= 0.5
    r *= 1.5
    r /= 1.0 + abs(b)
    r //= 0.25
    r %= 3.0
    r **= 1.5
    return r


@iz.kernel
def f32_parameters(a: f32, b: f32) -> f32:
    return a * b + a / (1.0 + abs(b))


@iz.kernel
def i32_parameters(a: i32, b: i32) -> i32:
    return a * 3 - b // 2 + a % 7


@iz.kernel
def module_constants(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * SCALE + OFFSET
    return s + OFFSET // 2


def make_scaler(factor: float) -> Any:
    """A kernel defined inside a function: `factor` is a closed-over constant."""

    @iz.kernel
    def scale_by_closed_over_factor(out: Array[f64], x: Array[f64], n: i64):
        for i in range(n):
            out[i] = factor * x[i] + factor

    return scale_by_closed_over_factor


scale_by_closed_over_factor = make_scaler(2.5)


# --- calls ------------------------------------------------------------------------------------------


@iz.kernel
def square(a: f64) -> f64:
    return a * a


@iz.kernel
def dot(x: Array[f64], y: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * y[i]
    return s


@iz.kernel
def scale_into(dst: Array[f64], src: Array[f64], n: i64, factor: f64):
    for i in range(n):
        dst[i] = factor * src[i]


@iz.kernel
def call_scalar_returning_kernels(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += square(x[i])
    return s + dot(x, x, n)


@iz.kernel
def call_array_writing_kernel(out: Array[f64], x: Array[f64], n: i64):
    scale_into(out, x, n, 3.0)
    out[0] += 1.0


@iz.kernel
def call_with_keyword_arguments(out: Array[f64], x: Array[f64], n: i64) -> f64:
    scale_into(out, x, factor=-0.5, n=n)
    return dot(y=out, x=x, n=n)


@iz.kernel
def innermost(a: f64) -> f64:
    return a + 1.0


@iz.kernel
def middle(a: f64) -> f64:
    return innermost(a) * innermost(-a)


@iz.kernel
def nested_kernel_calls(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += middle(x[i])
    return s


@iz.kernel
def call_with_int_argument_to_float_parameter(k: i64) -> f64:
    return square(k) + innermost(3)


# --- the table --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Construct:
    """A kernel, a maker of its arguments, and the tolerance of its comparison with Python."""

    kernel: Any
    make_args: Args
    rtol: float = 1e-12

    @property
    def name(self) -> str:
        return self.kernel.py_func.__name__


def _grid_pair(rng: np.random.Generator) -> tuple:
    shape = (_length(rng, 1, 4), _length(rng, 1, 5))
    return np.zeros(shape), np.round(rng.uniform(-2.0, 2.0, shape), 3)


def _index_table(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, n, n, dtype=np.int64)


def _guard_index_args(rng: np.random.Generator) -> tuple:
    x, n = _x_n(rng)
    return x, _int(rng, -3, n + 2), n


def _index_args(rng: np.random.Generator) -> tuple:
    n = _length(rng)
    return _index_table(rng, n), n


def _gather_args(rng: np.random.Generator) -> tuple:
    n = _length(rng)
    return np.zeros(n), _vector(rng, n), _index_table(rng, n), n


CONSTRUCTS: list[Construct] = [
    Construct(chained_comparison, lambda r: (_float(r), _float(r), _float(r))),
    Construct(chained_comparison_mixed, lambda r: (_int(r, -5, 5), _float(r, -5, 5), _length(r, 0, 4))),
    Construct(short_circuit_and_guards_division, lambda r: (_int(r), _int(r, -2, 2))),
    Construct(short_circuit_or_guards_modulo, lambda r: (_int(r), _int(r, -2, 2))),
    Construct(short_circuit_guards_index, _guard_index_args),
    Construct(not_operator, lambda r: (_int(r, -8, 8), bool(r.integers(2)))),
    Construct(boolean_parameter_and_return, lambda r: (bool(r.integers(2)), _float(r))),
    Construct(boolean_local_variable, _x_n),
    Construct(comparisons_with_nan_and_infinities, lambda r: (_special(r), _special(r))),
    Construct(min_max_abs_with_nan_and_infinities, lambda r: (_special(r), _special(r))),
    Construct(mixed_int_float_comparisons, lambda r: (_int(r, -3, 3), float(r.choice([-1.0, 0.0, 0.5, 2.0, 3.0])))),
    Construct(range_with_one_two_three_arguments, lambda r: (_length(r, 0, 9),)),
    Construct(negative_range_step, _x_n),
    Construct(runtime_step_sign, lambda r: (_int(r, -8, 8), _int(r, -8, 8), _nonzero_int(r, 3))),
    Construct(zero_trip_loop, lambda r: (_length(r, 0, 5),)),
    Construct(nested_break_and_continue, _x_n),
    Construct(while_loop, lambda r: (_int(r, 1, 40),)),
    Construct(while_condition_with_branches, lambda r: (*_x_n(r), _float(r))),
    Construct(while_true_with_break, lambda r: (_float(r),)),
    Construct(nested_while_and_for, lambda r: (_length(r, 0, 6),)),
    Construct(prange_loop, _out_x_n),
    Construct(loop_bound_from_module_constant, lambda r: (_vector(r, _length(r)),)),
    Construct(elif_chain, lambda r: (int(r.choice([-20, -10, -3, 0, 4, 10, 15])),)),
    Construct(several_returns, lambda r: (_float(r, -3.0, 6.0),)),
    Construct(return_from_nested_loops, _x_n),
    Construct(return_without_value, _out_x_n),
    Construct(pass_statement, lambda r: (_int(r),)),
    Construct(assert_that_passes, _x_n),
    Construct(conditional_expression, _x_n),
    Construct(variable_defined_in_both_branches, lambda r: (_float(r),)),
    Construct(int_float_promotion, lambda r: (_int(r), _float(r))),
    Construct(int_true_division, lambda r: (_int(r, -100, 100), _nonzero_int(r))),
    Construct(loop_variable_widens_int_to_float, lambda r: _x_n(r) if r.random() < 0.8 else (np.zeros(0), 0)),
    Construct(int_float_join_after_branch, lambda r: (_float(r), _int(r))),
    Construct(int_floordiv_and_mod_negative, lambda r: (_int(r, -50, 50), _nonzero_int(r, 7))),
    Construct(float_floordiv_and_mod_negative,
              lambda r: (_float(r, -10.0, 10.0), float(r.choice([-2.5, -1.0, -0.3, 0.7, 2.0, 3.0])))),
    Construct(float_power, lambda r: (_float(r, -3.0, 3.0), _float(r, 0.0, 3.0))),
    Construct(int_power, lambda r: (_int(r, -30, 30),)),
    Construct(bit_operations, lambda r: (_int(r, -1000, 1000), _int(r, -1000, 1000))),
    Construct(runtime_shift_counts, lambda r: (_int(r, -1000, 1000), _int(r, 0, 20))),
    Construct(min_max_three_arguments, lambda r: (_float(r), _float(r), _float(r))),
    Construct(min_max_ints, lambda r: (_int(r), _int(r), _int(r))),
    Construct(min_max_mixed_types, lambda r: (_int(r, -3, 3), _float(r))),
    Construct(abs_of_int, lambda r: (_int(r),)),
    Construct(abs_of_float, lambda r: (_float(r),)),
    Construct(float_and_int_conversions, lambda r: (_float(r, -9.0, 9.0), _int(r))),
    Construct(unary_minus, lambda r: (_float(r), _int(r))),
    Construct(math_module_functions, lambda r: (_float(r, -5.0, 5.0),)),
    Construct(iz_functions, lambda r: (_float(r, -5.0, 5.0),)),
    Construct(math_floor_and_ceil_give_ints, lambda r: (_float(r, -9.0, 9.0),)),
    Construct(len_and_shape, lambda r: (_vector(r, _length(r)), _grid_pair(r)[1])),
    Construct(two_dimensional_indexing, _grid_pair),
    Construct(local_arrays_one_dimensional, _x_n),
    Construct(local_arrays_two_dimensional, _x_n),
    Construct(local_int_array, _index_args),
    Construct(gather_and_scatter_with_index_array, _gather_args),
    Construct(augmented_assignment_to_array_elements, lambda r: (_vector(r, 5), _vector(r, 5), 5)),
    Construct(int_array_augmented_assignment, _index_args),
    Construct(int_stored_into_float_array, lambda r: (np.zeros(4), 4)),
    Construct(f32_array_sum, lambda r: (_vector(r, 6, 0.5, 2.0).astype(np.float32), 6), rtol=1e-5),
    Construct(tuple_assignment_swap, lambda r: (_float(r), _float(r))),
    Construct(tuple_assignment_fibonacci, lambda r: (_length(r, 0, 40),)),
    Construct(augmented_assignment_int_scalars, lambda r: (_int(r, -50, 50), _int(r, -50, 50))),
    Construct(augmented_assignment_float_scalars, lambda r: (_float(r), _float(r))),
    Construct(f32_parameters, lambda r: (_float(r, 0.5, 2.0), _float(r, 0.5, 2.0)), rtol=1e-5),
    Construct(i32_parameters, lambda r: (_int(r, -1000, 1000), _int(r, -1000, 1000))),
    Construct(module_constants, _x_n),
    Construct(scale_by_closed_over_factor, _out_x_n),
    Construct(call_scalar_returning_kernels, _x_n),
    Construct(call_array_writing_kernel, _out_x_n),
    Construct(call_with_keyword_arguments, _out_x_n),
    Construct(nested_kernel_calls, _x_n),
    Construct(call_with_int_argument_to_float_parameter, lambda r: (_int(r),)),
]
"""Every construct kernel with its argument maker (the kernels they call are covered through them)."""

