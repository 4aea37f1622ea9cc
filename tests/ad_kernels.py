"""The corpus of the reverse-mode tests: small differentiable f64 kernels, each with the activity of its
arguments and a maker of seeded random arguments, plus every differentiable kernel of examples/.

`CASES` lists them as `Case(name, kernel, activity, make_args)`: `activity` has one word per parameter,
`const`, `dup` (Duplicated: the array gets a shadow) or `active` (Active: a float scalar whose adjoint
`iz.autodiff` returns). `make_args(rng)` draws the arguments from a numpy Generator; the values stay away
from the kinks of the kernel (branch thresholds, integers under `floor`, `//` and `%`, ties of min/max,
zeros of abs, the branch cut of atan2) by more than the finite-difference steps of the tests, so central
differences of the undecorated function are accurate there. One kernel may appear with several argument
makers (one per branch that the arguments select).

Loops of unknown trip count (`while`, `break`, `return` inside a loop) and active local arrays allocated in
loops and branches have their own section; their argument makers keep every data-dependent test (loop
conditions, break conditions) a margin away from flipping. Left out: active local arrays whose size the
data decides (a DifferentiationError naming the line, tested in test_autodiff_api.py); examples/dot.py's
`idot` computes on integers only.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from example_modules import load_example

import isozyme as iz
from isozyme import Array, f64, i64

SCALE = 0.75
"""A module-level constant, frozen into the kernels that read it."""

MakeArgs = Callable[[np.random.Generator], tuple]


@dataclass(frozen=True)
class Case:
    """One kernel with one way of drawing its arguments (module docstring)."""

    name: str
    kernel: iz.Kernel
    activity: tuple[str, ...]
    """`const`, `dup` or `active`, one per parameter."""
    make_args: MakeArgs

    def args(self) -> tuple:
        """The arguments, drawn from a generator seeded by the case's name (the same on every run)."""
        return self.make_args(np.random.default_rng(zlib.crc32(self.name.encode())))

    def __repr__(self) -> str:
        return self.name


CASES: list[Case] = []


def add_case(name: str, kernel: iz.Kernel, activity: str, make_args: MakeArgs) -> None:
    words = tuple(activity.split())
    assert all(word in ("const", "dup", "active") for word in words), activity
    assert name not in {case.name for case in CASES}, name
    CASES.append(Case(name, kernel, words, make_args))


def case(activity: str, make_args: MakeArgs) -> Callable[[iz.Kernel], iz.Kernel]:
    """Register the decorated kernel under its own name (put it above `@iz.kernel`)."""

    def register(kernel: iz.Kernel) -> iz.Kernel:
        add_case(kernel.__name__, kernel, activity, make_args)
        return kernel
    return register


# --- argument makers ----------------------------------------------------------------------------------------


def uniform(rng: np.random.Generator, low: float, high: float, shape: int | tuple[int, ...] = 7) -> np.ndarray:
    return rng.uniform(low, high, shape)


def away_from(rng: np.random.Generator, low: float, high: float, n: int, kinks: Callable[[np.ndarray], list],
              margin: float = 0.02) -> np.ndarray:
    """n uniform values in [low, high) such that every `kinks(x)` array (values that must not come close to
    an integer) stays `margin` away from the integers: redrawn one value at a time until it does."""
    out = np.empty(n)
    for i in range(n):
        while True:
            v = rng.uniform(low, high, 1)
            if all(abs(k - np.round(k)).min() > margin for k in kinks(v)):
                out[i] = v[0]
                break
    return out


def distinct(rng: np.random.Generator, low: float, high: float, n: int, gap: float = 0.05) -> np.ndarray:
    """n values in [low, high), no two closer than `gap` (no ties for min/max), in random order."""
    while True:
        x = rng.uniform(low, high, n)
        if n < 2 or np.diff(np.sort(x)).min() > gap:
            return x


def signed(rng: np.random.Generator, low: float, high: float, n: int) -> np.ndarray:
    """Magnitudes in [low, high) with random signs (away from 0 by `low`)."""
    return rng.uniform(low, high, n) * rng.choice([-1.0, 1.0], n)


def scalar(rng: np.random.Generator, low: float, high: float) -> float:
    return float(rng.uniform(low, high))


def output(rng: np.random.Generator, shape: int | tuple[int, ...]) -> np.ndarray:
    """An array the kernel overwrites: random content (finite, so that finite differences along every input,
    this content too, stay finite: its derivative must come out 0)."""
    return rng.standard_normal(shape)


# --- scalar arithmetic ---------------------------------------------------------------------------------------


@case("active", lambda rng: (scalar(rng, 0.5, 1.5),))
@iz.kernel
def polynomial(x: f64) -> f64:
    return 3.0 * x**3 - 2.0 * x * x + x / 7.0 - 5.0 + 0.25 * x**4


@case("active active", lambda rng: (scalar(rng, 0.5, 1.5), scalar(rng, -1.5, -0.5)))
@iz.kernel
def rational(x: f64, y: f64) -> f64:
    return (x * y - 1.0) / (x * x + y * y + 1.0) - -x / (2.0 + y)


@case("const active", lambda rng: (uniform(rng, -1.0, 1.0, 6), scalar(rng, 0.5, 1.2)))
@iz.kernel
def horner(c: Array[f64], x: f64) -> f64:
    # coefficients from the highest degree down: a negative step over a Const array
    p = 0.0
    for i in range(len(c) - 1, -1, -1):
        p = p * x + c[i]
    return p


@case("active active active const", lambda rng: (scalar(rng, 0.3, 0.7), scalar(rng, 0.5, 1.5),
                                                 scalar(rng, -1.0, 1.0), 6))
@iz.kernel
def scalar_recurrence(a: f64, b: f64, c: f64, k: i64) -> f64:
    s = 0.1
    for _ in range(k):
        s = s * a + b * iz.cos(c * s)
    return s


# --- math functions (DESIGN 1.2) -----------------------------------------------------------------------------


@case("dup", lambda rng: (uniform(rng, 0.5, 2.0),))
@iz.kernel
def sqrt_exp_log(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += iz.sqrt(x[i]) * iz.exp(-x[i]) + iz.log(x[i]) * x[i]
    return s


@case("dup dup", lambda rng: (output(rng, 7), uniform(rng, -0.9, 0.9)))
@iz.kernel
def log1p_expm1(out: Array[f64], x: Array[f64]):
    for i in range(len(x)):
        out[i] = iz.log1p(x[i] * x[i]) - iz.expm1(0.5 * x[i]) * x[i]


@case("dup dup", lambda rng: (output(rng, 7), uniform(rng, -1.2, 1.2)))
@iz.kernel
def trigonometric(out: Array[f64], x: Array[f64]):
    for i in range(len(x)):
        out[i] = math.sin(x[i]) * math.cos(2.0 * x[i]) + math.tan(0.5 * x[i])


@case("dup", lambda rng: (uniform(rng, -1.5, 1.5),))
@iz.kernel
def hyperbolic(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += iz.tanh(x[i]) * iz.sinh(x[i]) + iz.cosh(0.5 * x[i])
    return s


@case("dup dup", lambda rng: (output(rng, 7), uniform(rng, -0.8, 0.8)))
@iz.kernel
def inverse_trigonometric(out: Array[f64], x: Array[f64]):
    for i in range(len(x)):
        out[i] = iz.asin(x[i]) + 2.0 * iz.acos(0.5 * x[i]) * iz.atan(3.0 * x[i])


@case("dup dup dup", lambda rng: (output(rng, 8), signed(rng, 0.2, 1.5, 8), signed(rng, 0.2, 1.5, 8)))
@iz.kernel
def atan2_elementwise(out: Array[f64], y: Array[f64], x: Array[f64]):
    # |y| >= 0.2 keeps every point off atan2's branch cut (y = 0, x < 0) and away from the origin
    for i in range(len(x)):
        out[i] = iz.atan2(y[i], x[i]) * x[i]


@case("dup dup", lambda rng: (uniform(rng, 0.5, 2.0), uniform(rng, -1.0, 2.0)))
@iz.kernel
def powers(x: Array[f64], y: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += iz.pow(x[i], y[i]) + x[i] ** 2.5 + math.pow(x[i], 3.0) + 0.5 * x[i] ** y[i] + x[i] ** -2
    return s


@case("dup dup", lambda rng: (output(rng, 8), np.concatenate([uniform(rng, -1.0, -0.05, 3),
                                                                      uniform(rng, 0.05, 0.25, 2),
                                                                      uniform(rng, 0.35, 1.0, 3)])))
@iz.kernel
def absolute_values(out: Array[f64], x: Array[f64]):
    for i in range(len(x)):
        out[i] = abs(x[i]) * x[i] + iz.fabs(x[i] - 0.3) + math.fabs(2.0 * x[i])


@case("dup", lambda rng: (away_from(rng, -1.5, 1.5, 7, lambda x: [x, 3.0 * x, x * x]),))
@iz.kernel
def floor_ceil(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += x[i] * iz.floor(3.0 * x[i]) + iz.ceil(x[i]) * x[i] ** 2 - iz.floor(x[i] * x[i])
    return s


@case("dup", lambda rng: (uniform(rng, -2.0, 2.0),))
@iz.kernel
def erf_weighted(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += iz.erf(x[i]) * x[i] + iz.erf(0.5 * s)
    return s


def _min_max_2_args(rng: np.random.Generator) -> tuple:
    while True:
        a, b = uniform(rng, -1.0, 1.0), uniform(rng, -2.0, 2.0)
        if min(np.abs(a - b).min(), np.abs(a - 0.5 * b).min()) > 0.05:
            return output(rng, a.shape), a, b


@case("dup dup dup", _min_max_2_args)
@iz.kernel
def min_max_2(out: Array[f64], a: Array[f64], b: Array[f64]):
    for i in range(len(a)):
        out[i] = min(a[i], b[i]) * max(a[i], 0.5 * b[i])


def _min_max_3_args(rng: np.random.Generator) -> tuple:
    xyz = distinct(rng, -1.0, 1.0, 18, gap=0.03)
    return xyz[:6].copy(), xyz[6:12].copy(), xyz[12:].copy()


@case("dup dup dup", _min_max_3_args)
@iz.kernel
def min_max_3(x: Array[f64], y: Array[f64], z: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += max(x[i], y[i], z[i]) * 1.5 - 2.0 * min(x[i], y[i], z[i]) ** 2
    return s


@case("dup dup", lambda rng: (output(rng, 8), np.concatenate([uniform(rng, -1.0, 0.15, 4),
                                                                      uniform(rng, 0.25, 1.0, 4)])))
@iz.kernel
def conditional_expression(out: Array[f64], x: Array[f64]):
    for i in range(len(x)):
        out[i] = x[i] * x[i] if x[i] > 0.2 else iz.sin(x[i]) - 1.0


def _floordiv_mod_args(rng: np.random.Generator) -> tuple:
    b = np.concatenate([uniform(rng, 0.4, 1.1, 4), uniform(rng, -1.1, -0.4, 3)])
    a = np.empty(7)
    for i in range(7):
        a[i] = away_from(rng, -3.0, 3.0, 1, lambda v, bi=b[i]: [v / bi, v / 0.7])[0]
    return output(rng, a.shape), a, b


@case("dup dup dup", _floordiv_mod_args)
@iz.kernel
def float_floordiv_mod(out: Array[f64], a: Array[f64], b: Array[f64]):
    # `//` and `%` on floats, the divisor of either sign (Python's: the result has the divisor's sign)
    for i in range(len(a)):
        out[i] = (a[i] // b[i]) * a[i] + (a[i] % b[i]) * b[i] + a[i] % 0.7


# --- branches --------------------------------------------------------------------------------------------


@case("dup dup", lambda rng: (output(rng, 9), np.concatenate([uniform(rng, -1.5, -0.55, 3),
                                                                      uniform(rng, -0.45, 0.45, 3),
                                                                      uniform(rng, 0.55, 1.5, 3)])))
@iz.kernel
def piecewise(out: Array[f64], x: Array[f64]):
    for i in range(len(x)):
        v = x[i]
        if v < -0.5:
            out[i] = v * v
        elif v < 0.5:
            out[i] = iz.sin(v)
        else:
            out[i] = 2.0 - iz.exp(-v)


@iz.kernel
def select_by_mode(x: Array[f64], a: f64, mode: i64) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += x[i] * x[i]
    if mode == 0:
        r = a * s
    elif mode == 1:
        r = iz.sqrt(s) - a * a
    else:
        r = iz.exp(-a * s)
    return r


for _mode in range(3):
    add_case(f"select_by_mode_{_mode}", select_by_mode, "dup active const",
             lambda rng, mode=_mode: (uniform(rng, -1.0, 1.0, 6), scalar(rng, 0.2, 0.8), mode))


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, 9),))
@iz.kernel
def branch_on_index(x: Array[f64]) -> f64:
    s = 0.5
    for i in range(len(x)):
        if i % 2 == 0:
            s += x[i] ** 2
        elif i % 3 == 0:
            s -= iz.sin(x[i])
        else:
            s = s * x[i] + 1.0
    return s


@iz.kernel
def branch_after_loop(x: Array[f64], a: f64) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += iz.exp(x[i])
    if s > a:
        t = s * a
    else:
        t = s - a * a
    return t * x[0]


add_case("branch_after_loop_taken", branch_after_loop, "dup active",
         lambda rng: (uniform(rng, -1.0, 1.0, 5), scalar(rng, 0.5, 1.0)))
add_case("branch_after_loop_not_taken", branch_after_loop, "dup active",
         lambda rng: (uniform(rng, -1.0, 1.0, 5), scalar(rng, 30.0, 40.0)))


def _and_or_args(rng: np.random.Generator) -> tuple:
    x = np.concatenate([uniform(rng, 0.1, 0.9, 3), uniform(rng, -1.5, -0.6, 3), uniform(rng, 1.1, 1.5, 3)])
    return output(rng, x.shape), rng.permutation(x)


@case("dup dup", _and_or_args)
@iz.kernel
def and_or_not(out: Array[f64], x: Array[f64]):
    for i in range(len(x)):
        if (x[i] > 0.0 and x[i] < 1.0) or i == 2:
            out[i] = x[i] * x[i]
        elif not (x[i] > -0.5) and -2.0 < x[i] <= -0.1:
            out[i] = -iz.exp(x[i])
        else:
            out[i] = 3.0 * x[i] + x[i] ** 3


@case("dup", lambda rng: (np.concatenate([uniform(rng, -1.0, -0.1, 4), uniform(rng, 0.1, 1.0, 4)]),))
@iz.kernel
def continue_negative(x: Array[f64]) -> f64:
    s = 0.25
    for i in range(len(x)):
        if x[i] < 0.0:
            continue
        s += iz.sqrt(x[i]) * s
    return s


def branch_inputs(rng: np.random.Generator, n: int) -> np.ndarray:
    """Inputs of `branch_on_active_state` that keep s 0.05 away from its threshold at every step and take
    each side at least 3 times."""
    while True:
        x = uniform(rng, 0.4, 1.2, n)
        s, sides = 0.3, []
        for xi in x:
            sides.append(s > 0.5)
            s = s * xi if s > 0.5 else math.sqrt(0.5 - s) + xi * xi
            if abs(s - 0.5) < 0.05:
                break
        else:
            if 3 <= sum(sides) <= n - 3:
                return x


@case("dup", lambda rng: (branch_inputs(rng, 10),))
@iz.kernel
def branch_on_active_state(x: Array[f64]) -> f64:
    s = 0.3
    for i in range(len(x)):
        if s > 0.5:
            s = s * x[i]
        else:
            s = iz.sqrt(0.5 - s) + x[i] * x[i]  # nan on the side not taken
    return s


def _early_return_args(a_low: float, a_high: float, x_low: float, x_high: float) -> MakeArgs:
    return lambda rng: (uniform(rng, x_low, x_high, 5), scalar(rng, a_low, a_high))


@iz.kernel
def early_returns(x: Array[f64], a: f64) -> f64:
    if a > 1.0:
        return a * x[0] * x[1]
    s = 0.0
    for i in range(len(x)):
        s += x[i] * a
    if s < 0.0:
        return -s * iz.exp(a)
    return iz.sin(s) * a


add_case("early_returns_first", early_returns, "dup active", _early_return_args(1.5, 2.0, -1.0, 1.0))
add_case("early_returns_second", early_returns, "dup active", _early_return_args(0.2, 0.8, -1.0, -0.2))
add_case("early_returns_last", early_returns, "dup active", _early_return_args(0.2, 0.8, 0.2, 1.0))


@iz.kernel
def constant_on_one_branch(x: Array[f64]) -> f64:
    if x[0] > 0.0:
        return 1.0  # not active: no gradient on this path
    return x[1] * iz.exp(x[0])


add_case("constant_on_one_branch_constant", constant_on_one_branch, "dup",
         lambda rng: (uniform(rng, 0.2, 1.0, 2),))
add_case("constant_on_one_branch_active", constant_on_one_branch, "dup",
         lambda rng: (uniform(rng, -1.0, -0.2, 2),))


# --- loops -----------------------------------------------------------------------------------------------


@case("dup", lambda rng: (uniform(rng, 0.2, 1.0, 9),))
@iz.kernel
def strided_ranges(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(1, len(x), 2):
        s = s * x[i] + x[i - 1]
    for i in range(len(x) - 1, -1, -3):
        s += iz.cos(x[i] * s)
    return s


@case("dup dup", lambda rng: (output(rng, 7), uniform(rng, -1.0, 1.0, 7)))
@iz.kernel
def reversed_writes(out: Array[f64], x: Array[f64]):
    for i in range(len(x) - 1, 0, -1):
        out[i] = x[i] * x[i - 1]
    out[0] = iz.exp(x[0])


@case("dup dup", lambda rng: (uniform(rng, -1.0, 1.0, 5), uniform(rng, -1.0, 1.0, 4)))
@iz.kernel
def nested_rectangular(x: Array[f64], y: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        for j in range(len(y)):
            s += iz.sin(x[i] * y[j] + 0.1 * s)
    return s


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, 7),))
@iz.kernel
def nested_triangular(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        for j in range(i):
            s += x[i] * iz.exp(-x[j] * x[i])
    return s


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, 7),))
@iz.kernel
def nested_negative_step(x: Array[f64]) -> f64:
    s = 0.0
    n = len(x)
    for i in range(n - 1, -1, -1):
        for j in range(i, n, 2):
            s = s * 0.5 + iz.sin(x[i] * x[j] + s)
    return s


def _lower_triangular_args(rng: np.random.Generator) -> tuple:
    n = 6
    L = np.tril(uniform(rng, -0.5, 0.5, (n, n))) + np.diag(uniform(rng, 1.0, 2.0, n))
    return output(rng, n), L, uniform(rng, -1.0, 1.0, n)


@case("dup dup dup", _lower_triangular_args)
@iz.kernel
def forward_substitution(out: Array[f64], L: Array[f64, 2], b: Array[f64]):
    # solves L out = b: reads out[j] after writing it
    for i in range(len(b)):
        s = b[i]
        for j in range(i):
            s -= L[i, j] * out[j]
        out[i] = s / L[i, i]


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, 7),))
@iz.kernel
def two_term_recurrence(x: Array[f64]) -> f64:
    a, b = 1.0, 0.5
    for i in range(len(x)):
        a, b = b, a * x[i] + iz.sin(b)
    return a + 2.0 * b


@case("dup active", lambda rng: (uniform(rng, -1.0, 1.0, 6), scalar(rng, 0.5, 1.5)))
@iz.kernel
def rotation(angles: Array[f64], r: f64) -> f64:
    c, s, t = 1.0, 0.0, 0.0
    for i in range(len(angles)):
        t = angles[i] * r
        c, s = c * iz.cos(t) - s * iz.sin(t), c * iz.sin(t) + s * iz.cos(t)
    return c + 3.0 * s + t


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, 8),))
@iz.kernel
def tanh_recurrence(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s = iz.tanh(s + x[i])
    return s


@case("active const", lambda rng: (scalar(rng, 0.6, 1.2), 7))
@iz.kernel
def geometric_series(a: f64, n: i64) -> f64:
    s = 0.0
    p = 1.0
    for _ in range(n):
        p *= a
        s += p
    return s


# --- reductions ------------------------------------------------------------------------------------------


@case("dup", lambda rng: (distinct(rng, -1.0, 1.0, 8),))
@iz.kernel
def max_reduction(x: Array[f64]) -> f64:
    m = x[0]
    for i in range(1, len(x)):
        m = max(m, x[i])
    return m * x[0]


@case("dup", lambda rng: (uniform(rng, -1.0, 2.0, 8),))
@iz.kernel
def variance(x: Array[f64]) -> f64:
    mean = 0.0
    for i in range(len(x)):
        mean += x[i]
    mean /= len(x)
    v = 0.0
    for i in range(len(x)):
        v += (x[i] - mean) ** 2
    return v / (len(x) - 1)


# --- 2-D arrays ------------------------------------------------------------------------------------------


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, (3, 4)),))
@iz.kernel
def frobenius(A: Array[f64, 2]) -> f64:
    s = 0.0
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            s += A[i, j] * A[i, j]
    return iz.sqrt(s)


@case("dup dup dup", lambda rng: (output(rng, (3, 2)), uniform(rng, -1.0, 1.0, (3, 4)),
                                  uniform(rng, -1.0, 1.0, (4, 2))))
@iz.kernel
def matmul(C: Array[f64, 2], A: Array[f64, 2], B: Array[f64, 2]):
    for i in range(len(A)):
        for j in range(B.shape[1]):
            s = 0.0
            for k in range(B.shape[0]):
                s += A[i, k] * B[k, j]
            C[i, j] = s


@case("dup dup", lambda rng: (output(rng, (3, 4)), uniform(rng, -2.0, 2.0, (3, 4))))
@iz.kernel
def row_softmax(P: Array[f64, 2], Z: Array[f64, 2]):
    for i in range(Z.shape[0]):
        total = 0.0
        for j in range(Z.shape[1]):
            P[i, j] = iz.exp(Z[i, j])
            total += P[i, j]
        for j in range(Z.shape[1]):
            P[i, j] /= total


@case("dup dup active", lambda rng: (output(rng, (4, 3)), uniform(rng, -1.0, 1.0, (3, 4)),
                                     scalar(rng, 0.5, 2.0)))
@iz.kernel
def transpose_scale(B: Array[f64, 2], A: Array[f64, 2], a: f64):
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            B[j, i] = a * A[i, j] + iz.sin(A[i, j] * a)


# --- active scalars and Const arrays ----------------------------------------------------------------------


@case("dup active active active", lambda rng: (uniform(rng, -1.0, 1.0, 6), scalar(rng, 0.5, 1.5),
                                               scalar(rng, -1.0, 1.0), scalar(rng, 0.5, 1.5)))
@iz.kernel
def several_scalars(x: Array[f64], a: f64, b: f64, c: f64) -> f64:
    s = b
    for i in range(len(x)):
        s += iz.exp(a * x[i]) * c - b * x[i] * x[i]
    return s * a / c


def _masked_args(rng: np.random.Generator) -> tuple:
    n = 8
    return (output(rng, n), uniform(rng, -1.0, 1.0, n), uniform(rng, 0.5, 1.5, n),
            rng.integers(0, 2, n).astype(np.int64))


@case("dup dup const const", _masked_args)
@iz.kernel
def masked_weights(out: Array[f64], x: Array[f64], w: Array[f64], mask: Array[i64]):
    for i in range(len(x)):
        if mask[i] != 0:
            out[i] = w[i] * iz.tanh(x[i])
        else:
            out[i] = w[i]


def _scatter_args(rng: np.random.Generator) -> tuple:
    return uniform(rng, -1.0, 1.0, 4), uniform(rng, -1.0, 1.0, 9), rng.integers(0, 4, 9).astype(np.int64)


@case("dup dup const", _scatter_args)
@iz.kernel
def gather_scatter(acc: Array[f64], x: Array[f64], idx: Array[i64]):
    # repeated indices: several iterations read and update the same element of acc
    for i in range(len(x)):
        acc[idx[i]] += x[i] * acc[idx[i]] + x[i] * x[i]


@case("dup const", lambda rng: (uniform(rng, -1.0, 1.0, 6), output(rng, 6)))
@iz.kernel
def const_array_written(x: Array[f64], work: Array[f64]) -> f64:
    # a Const array the kernel writes with values that do not depend on x
    s = 0.0
    for i in range(len(x)):
        work[i] = float(i) * 2.0 - 3.0
        s += x[i] * work[i] * x[i]
    return s


@iz.kernel
def reassigned_scalar(x: Array[f64], t: f64) -> f64:
    if t > 0.5:
        t = t * t
    s = 0.0
    for i in range(len(x)):
        s += x[i] * t
        t = t * 0.9 + iz.sin(x[i])
    return s + t


add_case("reassigned_scalar_branch_taken", reassigned_scalar, "dup active",
         lambda rng: (uniform(rng, -1.0, 1.0, 6), scalar(rng, 0.6, 1.0)))
add_case("reassigned_scalar_branch_not_taken", reassigned_scalar, "dup active",
         lambda rng: (uniform(rng, -1.0, 1.0, 6), scalar(rng, 0.0, 0.4)))


@case("dup dup active active", lambda rng: (uniform(rng, -1.0, 1.0, 3), uniform(rng, -1.0, 1.0, 3),
                                           scalar(rng, 0.5, 1.5), scalar(rng, 0.5, 1.5)))
@iz.kernel
def unused_arguments(x: Array[f64], y: Array[f64], a: f64, b: f64) -> f64:
    # y and b are Duplicated/Active but never read: zero gradients
    return x[0] * a


# --- calls to other kernels ------------------------------------------------------------------------------


@iz.kernel
def soft_clip(v: f64, c: f64) -> f64:
    return c * iz.tanh(v / c)


@iz.kernel
def sum_of_squares(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += x[i] * x[i]
    return s


@iz.kernel
def scale_into(out: Array[f64], x: Array[f64], a: f64):
    for i in range(len(x)):
        out[i] = a * iz.sin(x[i])


@iz.kernel
def clipped_energy(x: Array[f64], c: f64) -> f64:
    return soft_clip(sum_of_squares(x), c)


@case("dup dup active", lambda rng: (output(rng, 7), uniform(rng, -3.0, 3.0, 7), scalar(rng, 1.0, 2.0)))
@iz.kernel
def call_in_loop(out: Array[f64], x: Array[f64], c: f64):
    for i in range(len(x)):
        out[i] = soft_clip(x[i], c) * x[i]


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, 6),))
@iz.kernel
def call_outside_loop(x: Array[f64]) -> f64:
    n2 = sum_of_squares(x)
    return iz.log(n2) + soft_clip(n2, 2.0)


@case("dup dup active", lambda rng: (output(rng, 6), uniform(rng, -1.0, 1.0, 6), scalar(rng, 0.5, 1.5)))
@iz.kernel
def call_writing_helper(out: Array[f64], x: Array[f64], a: f64) -> f64:
    scale_into(out, x, a)
    return sum_of_squares(out) * a


@case("dup active", lambda rng: (uniform(rng, -1.0, 1.0, 5), scalar(rng, 1.0, 2.0)))
@iz.kernel
def calls_in_nested_calls(x: Array[f64], c: f64) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += soft_clip(x[i] * clipped_energy(x, c), c)
    return s + clipped_energy(x, 2.0 * c)


# --- in-place updates and arrays read after being overwritten --------------------------------------------


@case("dup active", lambda rng: (uniform(rng, -1.0, 1.0, 7), scalar(rng, 0.5, 1.5)))
@iz.kernel
def inplace_update(x: Array[f64], a: f64):
    for i in range(len(x)):
        x[i] = x[i] * a + iz.sin(x[i])


@case("dup dup", lambda rng: (uniform(rng, -1.0, 1.0, 7), uniform(rng, -1.0, 1.0, 7)))
@iz.kernel
def inplace_multiply(a: Array[f64], b: Array[f64]):
    for i in range(len(a)):
        a[i] *= b[i]


@case("dup dup", lambda rng: (uniform(rng, -1.0, 1.0, 7), rng.standard_normal(7)))
@iz.kernel
def read_then_overwrite(a: Array[f64], b: Array[f64]):
    for i in range(len(a)):
        b[i] = a[i] * a[i]
        a[i] = iz.cos(b[i])
    for i in range(1, len(a)):
        b[i] += a[i - 1] * b[i]  # reads a's new contents


@case("dup active const", lambda rng: (uniform(rng, -1.0, 1.0, 7), scalar(rng, 0.3, 0.7), 3))
@iz.kernel
def relaxation_sweeps(x: Array[f64], w: f64, sweeps: i64):
    # Gauss-Seidel: each update reads a neighbour this sweep already overwrote
    for _ in range(sweeps):
        for i in range(1, len(x) - 1):
            x[i] = (1.0 - w) * x[i] + w * 0.5 * (x[i - 1] + x[i + 1]) + 0.1 * iz.sin(x[i])


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, 6),))
@iz.kernel
def overwrite_then_read(x: Array[f64]) -> f64:
    n = len(x)
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    for i in range(n):
        x[i] = iz.exp(0.3 * x[i]) * s
    for i in range(n):
        s += x[i] * x[n - 1 - i]
    return s


@case("dup dup", lambda rng: (uniform(rng, -1.0, 1.0, 6), uniform(rng, -1.0, 1.0, 6)))
@iz.kernel
def swap_halves(x: Array[f64], y: Array[f64]) -> f64:
    # x is overwritten element by element with values that read its old content through a temporary
    n = len(x)
    for i in range(n // 2):
        t = x[i]
        x[i] = x[n - 1 - i] * y[i]
        x[n - 1 - i] = t * t
    s = 0.0
    for i in range(n):
        s += x[i] * y[i]
    return s


@case("dup dup", lambda rng: (output(rng, 8), uniform(rng, -1.0, 1.0, 8)))
@iz.kernel
def partial_write(out: Array[f64], x: Array[f64]):
    # writes the even elements of out from the odd ones, which it only reads: their shadows accumulate,
    # the even ones are consumed
    for i in range(0, len(x), 2):
        out[i] = x[i] * out[i + 1] + iz.sin(x[i + 1])


def _gather_after_store_args(rng: np.random.Generator) -> tuple:
    return uniform(rng, -1.0, 1.0, 6), rng.permutation(np.array([3, 0, 5, 3, 1, 2], dtype=np.int64))


@case("dup const", _gather_after_store_args)
@iz.kernel
def gather_after_store(a: Array[f64], idx: Array[i64]) -> f64:
    # indirect reads of elements that earlier iterations may have overwritten
    s = 0.0
    for i in range(len(idx)):
        v = a[idx[i]]
        a[i] = v * v + 0.5
        s += a[idx[len(idx) - 1 - i]] * v
    return s


# --- local arrays ----------------------------------------------------------------------------------------


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, 6),))
@iz.kernel
def local_scratch(x: Array[f64]) -> f64:
    n = len(x)
    t = iz.zeros(n, f64)
    for i in range(n):
        t[i] = x[i] * x[i] + 0.5 * x[n - 1 - i]
    s = 0.0
    for i in range(n):
        s += iz.sin(t[i]) * t[n - 1 - i]
    return s


@case("dup dup", lambda rng: (output(rng, 3), uniform(rng, -1.0, 1.0, (3, 4))))
@iz.kernel
def local_2d_scratch(out: Array[f64], A: Array[f64, 2]):
    m, n = A.shape[0], A.shape[1]
    squares = iz.empty((m, n), f64)
    for i in range(m):
        for j in range(n):
            squares[i, j] = iz.exp(A[i, j])
    for i in range(m):
        s = 0.0
        for j in range(n):
            s += squares[i, j] * A[i, (j + 1) % n]
        out[i] = s


@case("dup active const", lambda rng: (uniform(rng, -1.0, 1.0, 6), scalar(rng, 0.5, 1.5), 2))
@iz.kernel
def local_passed_to_helper(x: Array[f64], a: f64, rounds: i64) -> f64:
    # a local array written by a helper kernel, then read, reused every round (overwritten each time)
    t = iz.empty(len(x), f64)
    s = 0.0
    for _ in range(rounds):
        scale_into(t, x, a)
        for i in range(len(x)):
            x[i] = x[i] + 0.5 * t[i] * t[i]
        s += sum_of_squares(t)
    return s


@case("dup dup", lambda rng: (uniform(rng, -1.0, 1.0, (3, 4)), uniform(rng, -1.0, 1.0, 4)))
@iz.kernel
def centred_scratch(x: Array[f64, 2], m: Array[f64]) -> f64:
    # GMM's centred point: a scratch row rewritten for every i, read by two later loops of the same trip
    # count; the reverse recomputes x[i, j] - m[j] for both reads instead of taping them (cache.py, way 3)
    n, d = x.shape[0], x.shape[1]
    xc = iz.empty(d, f64)
    s = 0.0
    for i in range(n):
        for j in range(d):
            xc[j] = x[i, j] - m[j]
        for j in range(d):
            s += xc[j] * xc[j] * xc[j]
        for col in range(d):
            for row in range(col + 1, d):
                s += iz.sin(xc[col]) * x[i, row]
    return s


@case("dup dup const", lambda rng: (uniform(rng, -1.0, 1.0, 15), uniform(rng, -1.0, 1.0, 5), 2))
@iz.kernel
def packed_triangles(icf: Array[f64], x: Array[f64], reps: i64) -> f64:
    # packed triangles walked by running indices: those of range(col + 1, d) and range(col, d) are recomputed
    # from the column counter (triangular_index.py); that of range(col + 2, d), whose row count clips at
    # zero in the last column, is taped once per column
    d = len(x)
    s = 0.0
    for _ in range(reps):
        idx = 0
        for col in range(d):
            for row in range(col + 1, d):
                s += icf[idx] * x[col] * x[row]
                idx += 1
        jdx = 0
        for col in range(d):
            for row in range(col, d):
                s += icf[jdx] * x[row] * x[row] * x[col]
                jdx += 1
        kdx = 1
        for col in range(d):
            for row in range(col + 2, d):
                s += icf[kdx] * iz.sin(x[col] * x[row])
                kdx += 2
    return s


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, (3, 4)),))
@iz.kernel
def exp_scratch_read_twice(x: Array[f64, 2]) -> f64:
    # the stored value is expensive: one tape of exp(x[i, j]) serves both reads of e
    n, d = x.shape[0], x.shape[1]
    e = iz.empty(d, f64)
    s = 0.0
    for i in range(n):
        for j in range(d):
            e[j] = iz.exp(x[i, j])
        for j in range(d):
            s += e[j] * e[j]
        for j in range(d):
            s += iz.sin(e[j])
    return s


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, (3, 4)),))
@iz.kernel
def scratch_in_a_while_loop(x: Array[f64, 2]) -> f64:
    # the loop around the filling loop has no trip count when the kernel starts: exp(x[i, j]) would need a
    # stack tape, whose top is the last j's, so the reads of e keep tapes of their own
    n, d = x.shape[0], x.shape[1]
    e = iz.empty(d, f64)
    s = 0.0
    i = 0
    while i < n and s < 100.0:  # s stays below 40 (n rows), but the count is unknown when it starts
        for j in range(d):
            e[j] = iz.exp(x[i, j])
        for j in range(d):
            s += iz.sin(e[j]) * e[j]
        i += 1
    return s


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, (3, 4)),))
@iz.kernel
def scratch_written_twice(x: Array[f64, 2]) -> f64:
    # a second write to the scratch row between the loop that fills it and the reads: its reads are taped
    n, d = x.shape[0], x.shape[1]
    t = iz.empty(d, f64)
    s = 0.0
    for i in range(n):
        for j in range(d):
            t[j] = x[i, j] * x[i, j]
        t[d - 1] = 2.0 * x[i, 0]
        for j in range(d):
            s += t[j] * t[j] * x[i, j]
    return s


@case("dup const", lambda rng: (uniform(rng, -1.0, 1.0, (3, 4)), 0.25))
@iz.kernel
def scratch_filled_until_break(x: Array[f64, 2], stop: f64) -> f64:
    # the loop that fills the scratch row may leave early: its reads are taped
    n, d = x.shape[0], x.shape[1]
    t = iz.zeros(d, f64)
    s = 0.0
    for i in range(n):
        for j in range(d):
            t[j] = x[i, j] * x[i, j]
            if j == 2 and stop > 1.0:
                break
        for j in range(d):
            s += t[j] * t[j] * x[i, j]
    return s


# --- loops of unknown trip count, local arrays in loops and branches ----------------------------------------


def _with_margin(rng: np.random.Generator, draw: Callable[[np.random.Generator], tuple],
                 tests: Callable[..., list[float]], margin: float = 0.02) -> tuple:
    """Arguments from `draw` whose data-dependent tests (`tests(*args)`: the values compared with 0 at every
    evaluation) all stay `margin` away from 0, so that a finite-difference step flips none of them."""
    while True:
        args = draw(rng)
        if all(abs(t) > margin for t in tests(*args)):
            return args


def _while_product_tests(x: np.ndarray) -> list[float]:
    p, tests = 1.0, []
    for xi in x:
        tests.append(p - 4.0)
        if p >= 4.0:
            break
        p *= xi
    return tests


@case("dup", lambda rng: _with_margin(rng, lambda r: (uniform(r, 1.05, 1.5, 10),), _while_product_tests))
@iz.kernel
def while_product(x: Array[f64]) -> f64:
    p = 1.0
    i = 0
    while i < len(x) and p < 4.0:
        p *= x[i]
        i += 1
    return p


@case("active", lambda rng: (scalar(rng, 0.5, 20.0),))
@iz.kernel
def newton_sqrt(a: f64) -> f64:
    x = a
    while abs(x * x - a) > 1e-8 * a:  # the data decides when to stop
        x = 0.5 * (x + a / x)
    return 0.5 * (x + a / x)  # one more step: converged to rounding, so the stopping test adds no jump


def _break_tests(x: np.ndarray) -> list[float]:
    return [float(v) - 0.9 for v in x]


@case("dup", lambda rng: _with_margin(rng, lambda r: (uniform(r, 0.0, 1.0, 9),), _break_tests))
@iz.kernel
def break_at_threshold(x: Array[f64]) -> f64:
    s = 0.5
    for i in range(len(x)):
        if x[i] > 0.9:
            break
        s = s * iz.sin(x[i]) + x[i] * x[i]
    return s


def _return_tests(x: np.ndarray, a: float) -> list[float]:
    s, tests = 1.0, []
    for xi in x:
        s = s * math.cos(xi) + a
        tests.append(s - 0.3)
        if s < 0.3:
            break
    return tests


@case("dup active", lambda rng: _with_margin(rng, lambda r: (uniform(r, 0.5, 1.6, 8), scalar(r, -0.1, 0.15)),
                                             _return_tests))
@iz.kernel
def return_in_loop(x: Array[f64], a: f64) -> f64:
    s = 1.0
    for i in range(len(x)):
        s = s * iz.cos(x[i]) + a
        if s < 0.3:
            return 2.0 * s
    return s


def _nested_while_tests(x: np.ndarray) -> list[float]:
    tests = []
    for i in range(len(x)):
        t, j = x[i], 0
        while j < i:
            tests.append(t - 3.0)
            if t >= 3.0:
                break
            t = t * (1.0 + x[j])
            j += 1
    return tests


@case("dup", lambda rng: _with_margin(rng, lambda r: (uniform(r, 0.2, 1.0, 8),), _nested_while_tests))
@iz.kernel
def while_in_for(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        t = x[i]
        j = 0
        while j < i and t < 3.0:
            t = t * (1.0 + x[j])
            j += 1
        s += t * iz.tanh(t)
    return s


def _while_while_tests(x: np.ndarray, limit: float) -> list[float]:
    tests, acc, k = [], 0.0, 0
    while k < len(x):
        tests.append(acc - limit)
        if acc >= limit:
            break
        t, m = x[k], 0
        while m < 3:
            tests.append(t - 2.0)
            if t >= 2.0:
                break
            t = t * 1.5 + x[m]
            m += 1
        acc += t
        k += 1
    return tests


@case("dup active", lambda rng: _with_margin(rng, lambda r: (uniform(r, 0.1, 0.9, 9), scalar(r, 4.0, 9.0)),
                                             _while_while_tests))
@iz.kernel
def while_in_while(x: Array[f64], limit: f64) -> f64:
    acc = 0.0
    k = 0
    while k < len(x) and acc < limit:
        t = x[k]
        m = 0
        while m < 3 and t < 2.0:
            t = t * 1.5 + x[m]
            m += 1
        acc += t * t / limit
        k += 1
    return acc


def _signs_away_from_zero(rng: np.random.Generator, n: int) -> np.ndarray:
    """Values at least 0.2 away from 0 with mixed signs, the first two positive: a loop that stops at the
    first x[i] <= 0 runs a few iterations, and no finite-difference step moves its exit."""
    x = rng.uniform(0.2, 1.0, n) * rng.choice([-1.0, 1.0], n)
    x[:2] = np.abs(x[:2])
    return x


# A local array written before a loop whose exit the data decides, read inside it: the reverse of that loop
# is entered at one block per exit (an irreducible cycle), and sink-allocs once moved the zeroed shadow of
# the array into it, where it was zeroed again on every reverse iteration: a zero gradient at opt post/pre.


@case("dup", lambda rng: (_signs_away_from_zero(rng, 7),))
@iz.kernel
def while_reads_local_array(x: Array[f64]) -> f64:
    n = len(x)
    v = iz.zeros(n, f64)
    for j in range(n):
        v[j] = x[j] * x[j]
    s = 0.0
    i = 0
    while i < n and x[i] > 0.0:
        s += v[i]
        i += 1
    return s


@case("dup", lambda rng: (_signs_away_from_zero(rng, 7),))
@iz.kernel
def break_reads_local_array(x: Array[f64]) -> f64:
    n = len(x)
    v = iz.zeros(n, f64)
    for j in range(n):
        v[j] = iz.sin(x[j]) * x[j]
    s = 0.0
    for i in range(n):
        if x[i] < 0.0:
            break
        s += v[i] * x[i]
    return s


@case("dup", lambda rng: (_signs_away_from_zero(rng, 6),))
@iz.kernel
def nested_while_reads_local_array(x: Array[f64]) -> f64:
    n = len(x)
    v = iz.zeros(n, f64)
    for j in range(n):
        v[j] = x[j] * x[j] + 0.5 * x[j]
    s = 0.0
    for k in range(n):
        i = k
        while i < n and x[i] > 0.0:
            s += v[i] * v[k]
            i += 1
    return s


def _nested_return_tests(x: np.ndarray) -> list[float]:
    s, tests = 1.0, []
    for xi in x:
        for xj in x:
            s = s * math.cos(0.5 * xi * xj) + 0.05
            tests.append(s - 0.2)
            if s < 0.2:
                return tests
    return tests


@case("dup", lambda rng: _with_margin(rng, lambda r: (uniform(r, 0.8, 1.6, 6),), _nested_return_tests))
@iz.kernel
def return_from_nested_loops(x: Array[f64]) -> f64:
    s = 1.0
    for i in range(len(x)):
        for j in range(len(x)):
            s = s * iz.cos(0.5 * x[i] * x[j]) + 0.05
            if s < 0.2:
                return s * x[j]  # leaves both loops
    return s


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, 6),))
@iz.kernel
def scratch_per_iteration(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        t = iz.zeros(3, f64)  # a fresh array every iteration; t[2] is read before it is written
        t[0] = x[i] * x[i]
        t[1] = iz.sin(t[0]) + t[2]
        t[2] = t[1] * x[i]
        s += t[2] + t[0] * s
    return s


@case("dup", lambda rng: (uniform(rng, 0.6, 1.0, 7),))
@iz.kernel
def scratch_in_branch(x: Array[f64]) -> f64:
    s = 0.0
    n = len(x)
    if x[0] > 0.5:
        t = iz.zeros(n, f64)
        for i in range(n):
            t[i] = x[i] * 2.0
        for i in range(n):
            s += t[i] * t[n - 1 - i]
    return s


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, 6),))
@iz.kernel
def triangular_scratch(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        t = iz.empty((i + 1, 2), f64)  # its size grows with i: the shadow is as large as the last one
        for j in range(i + 1):
            t[j, 0] = x[j] * x[i]
            t[j, 1] = t[j, 0] + 1.0
        for j in range(i + 1):
            s += t[j, 1] * iz.sin(t[j, 0])
    return s


# --- other constructs ------------------------------------------------------------------------------------


@case("dup", lambda rng: (uniform(rng, -1.0, 1.0, 6),))
@iz.kernel
def int_float_conversions(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += float(i) * x[i] + x[i] * int(2.5 * i) + SCALE * x[i] ** 2
    return s


@case("dup const", lambda rng: (uniform(rng, 0.5, 1.5, 8), 5))
@iz.kernel
def dynamic_trip_product(x: Array[f64], n: i64) -> f64:
    # the trip count is a runtime argument (shorter than the array)
    p = 1.0
    for i in range(n):
        p *= x[i]
    return p


@case("dup dup", lambda rng: (output(rng, 7), uniform(rng, -1.0, 1.0, 7)))
@iz.kernel
def output_and_return(out: Array[f64], x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        out[i] = iz.sin(x[i]) * x[i]
        s += out[i] * out[i]
    return iz.sqrt(s)


# --- the examples ----------------------------------------------------------------------------------------


dot = load_example("dot")
norm = load_example("norm")
relu3 = load_example("relu3")
matvec = load_example("matvec")
euler = load_example("euler")
gmm = load_example("gmm")
heat = load_example("heat")


def _relu3_input(rng: np.random.Generator) -> np.ndarray:
    return signed(rng, 0.05, 1.0, 8)


def _qtimesx_args(rng: np.random.Generator) -> tuple:
    data = gmm.gmm_data(3, 2, 1, seed=int(rng.integers(1000)))
    return output(rng, 3), np.exp(data.icf[:, :3]), data.icf, 1, data.x[0].copy()


def _wishart_args(rng: np.random.Generator) -> tuple:
    data = gmm.gmm_data(3, 2, 1, seed=int(rng.integers(1000)), gamma=1.3, m=2)
    qdiag = np.exp(data.icf[:, :3])
    return qdiag, data.icf[:, :3].sum(axis=1), data.icf, data.gamma, data.m, gmm.log_gamma_distrib(3.0, 3)


def _gmm_args(rng: np.random.Generator) -> tuple:
    data = gmm.gmm_data(2, 2, 3, seed=int(rng.integers(1000)), gamma=1.2, m=1)
    return (*data, gmm.log_gamma_distrib(0.5 * (2 + 1 + 1), 2))


def _euler_state(rng: np.random.Generator) -> np.ndarray:
    return uniform(rng, -0.5, 0.5, 6)


add_case("example_heat", heat.heat, "dup active const", lambda rng: (uniform(rng, -1.0, 1.0, 6),
                                                                       scalar(rng, 0.2, 0.45), 3))
add_case("example_euler", euler.euler, "dup active const active active",
         lambda rng: (_euler_state(rng), scalar(rng, 0.01, 0.05), 3, scalar(rng, 0.5, 1.5), scalar(rng, 0.05, 0.2)))
add_case("example_gmm_objective", gmm.gmm_objective, "dup dup dup const active const active", _gmm_args)
add_case("example_gmm_by_component", gmm.gmm_objective_by_component, "dup dup dup const active const active",
         _gmm_args)
add_case("example_dot", dot.dot, "dup dup", lambda rng: (uniform(rng, -1.0, 1.0, 7), uniform(rng, -1.0, 1.0, 7)))
add_case("example_mag", norm.mag, "dup const", lambda rng: (uniform(rng, 0.1, 1.0, 7), 7))
add_case("example_norm", norm.norm, "dup dup const",
         lambda rng: (output(rng, 7), uniform(rng, 0.1, 1.0, 7), 7))
add_case("example_relu3", relu3.relu3, "dup dup", lambda rng: (output(rng, 8), _relu3_input(rng)))
add_case("example_relu3_sum", relu3.relu3_sum, "dup", lambda rng: (_relu3_input(rng),))
add_case("example_matvec", matvec.matvec, "dup dup dup",
         lambda rng: (output(rng, 4), uniform(rng, -1.0, 1.0, (4, 3)), uniform(rng, -1.0, 1.0, 3)))
add_case("example_spring_force", euler.spring_force, "active active",
         lambda rng: (scalar(rng, -0.8, 0.8), scalar(rng, 0.5, 1.5)))
add_case("example_fput_rhs", euler.fput_rhs, "dup dup const active active",
         lambda rng: (output(rng, 6), _euler_state(rng), 3, scalar(rng, 0.5, 1.5), scalar(rng, 0.05, 0.2)))
add_case("example_chain_energy", euler.chain_energy, "dup const active",
         lambda rng: (_euler_state(rng), 3, scalar(rng, 0.5, 1.5)))
add_case("example_logsumexp", gmm.logsumexp, "dup", lambda rng: (distinct(rng, -2.0, 2.0, 6),))
add_case("example_sqnorm", gmm.sqnorm, "dup", lambda rng: (uniform(rng, -1.0, 1.0, 6),))
add_case("example_qtimesx", gmm.qtimesx, "dup dup dup const dup", _qtimesx_args)
add_case("example_log_wishart_prior", gmm.log_wishart_prior, "dup dup dup active const active", _wishart_args)


# --- sigmoid and stored values ---------------------------------------------------------------------------
# `iz.sigmoid` and the textbook formula instcombine turns into it (post) or not (pre, none); a value stored
# where nothing overwrites it is reloaded from the array instead of taped (cache.py), and the two ways that
# rule must refuse: the array is written again later, and the store rewrites one element in every
# iteration of an inner loop.


@case("dup const", lambda rng: (uniform(rng, -4.0, 4.0, 7), uniform(rng, -1.0, 1.0, 7)))
@iz.kernel
def sigmoid_intrinsic(x: Array[f64], w: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += w[i] * iz.sigmoid(x[i])
    return s


@case("dup const", lambda rng: (uniform(rng, -4.0, 4.0, 7), uniform(rng, -1.0, 1.0, 7)))
@iz.kernel
def sigmoid_textbook(x: Array[f64], w: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += w[i] * (1.0 / (1.0 + iz.exp(-x[i])))
    return s


@case("dup dup", lambda rng: (output(rng, (3, 4)), uniform(rng, -3.0, 3.0, (3, 4))))
@iz.kernel
def stored_sigmoid(h: Array[f64, 2], z: Array[f64, 2]) -> f64:
    s = 0.0
    for j in range(z.shape[0]):
        for b in range(z.shape[1]):
            y = iz.sigmoid(z[j, b])
            h[j, b] = y
            s += y * y
    return s


@case("dup dup", lambda rng: (output(rng, (3, 4)), uniform(rng, -3.0, 3.0, (3, 4))))
@iz.kernel
def stored_sigmoid_overwritten(h: Array[f64, 2], z: Array[f64, 2]) -> f64:
    s = 0.0
    for j in range(z.shape[0]):
        for b in range(z.shape[1]):
            y = iz.sigmoid(z[j, b])
            h[j, b] = y
            s += y * y
    for j in range(z.shape[0]):
        for b in range(z.shape[1]):
            h[j, b] = 0.5 * z[j, b]
    return s


@case("dup dup", lambda rng: (output(rng, 3), uniform(rng, -3.0, 3.0, (3, 4))))
@iz.kernel
def stored_sigmoid_same_element(h: Array[f64], z: Array[f64, 2]) -> f64:
    s = 0.0
    for j in range(z.shape[0]):
        for b in range(z.shape[1]):
            y = iz.sigmoid(z[j, b])
            h[j] = y
            s += y * y
    return s
