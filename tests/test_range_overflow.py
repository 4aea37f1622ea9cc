"""Loops over any i64 span (issue 62): `range(a, b, s)` runs `len(range(a, b, s))` times however far apart a
and b are, or raises an OverflowError naming the line when that count does not fit in i64 (more than
2**63 - 1 iterations); `prange` and `iz.ndrange` too, and gradients through such loops. The references are
Python's `range` and the undecorated functions (their finite differences for gradients), on every backend
and opt level."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

import numpy as np
import pytest
from ad_oracle import ALL_BACKENDS, OPTS, central_difference

import isozyme as iz
from isozyme import Array, f64, i64

IMIN, IMAX = -2**63, 2**63 - 1
PIPELINES = ("O0", "O2")
"""The primal's pipelines (`opt` of the gradient tests: `OPTS`)."""

FEW = [
    (0, IMAX, 2**62),  # the loop: 2 iterations, the span 2**63 - 1 + 2**62 - 1 overflowed
    (IMIN, IMAX, 2**62),  # span 2**64 - 1: 4 iterations
    (IMAX, IMIN, -2**62),
    (IMIN, IMAX, IMAX),  # 3
    (-1, IMAX, IMAX),  # span 2**63: 2
    (IMAX, IMIN, IMIN),  # step -2**63: 2
    (0, IMIN, IMIN),  # 1
    (IMAX, IMIN, 1),  # empty: b - a wrapped to 1
    (1, IMIN, 1),  # empty: b - a wrapped to 2**63 - 1
    (IMIN, IMAX, -1),  # empty
    (IMAX - 2, IMAX, 1),  # the last values of i64: the IV must not wrap past the end
    (IMIN + 2, IMIN, -1),
    (5, 17, 4),  # ordinary loops still count
    (17, 5, -4),
    (3, 3, 1),
]
"""(start, stop, step) with at most a few iterations."""

TOO_MANY = [(IMIN, IMAX, 1), (IMAX, IMIN, -1), (IMIN, IMAX, 2), (-1, IMAX, 1), (IMAX, -2, -1)]
"""(start, stop, step) of more than 2**63 - 1 iterations."""


def walk(out: Array[i64], a: i64, b: i64, s: i64) -> None:
    c = 0
    for i in range(a, b, s):
        if c == 0:
            out[1] = i
        out[2] = i
        c += 1
    out[0] = c


walk_kernel = iz.kernel(walk)


def expected_walk(a: int, b: int, s: int) -> list[int]:
    values = range(a, b, s)
    return [len(values), values[0], values[-1]] if values else [0, -7, -7]


def constant_walk(a: int, b: int, s: int) -> iz.Kernel:
    """`walk` with the bounds frozen into the kernel as constants (the frontend folds what it can)."""
    start, stop, step = a, b, s

    @iz.kernel
    def walk_constants(out: Array[i64]) -> None:
        c = 0
        for i in range(start, stop, step):
            if c == 0:
                out[1] = i
            out[2] = i
            c += 1
        out[0] = c
    return walk_constants


def run_walk(kernel: iz.Kernel, backend: str, opt: str, *bounds: int) -> list[int]:
    out = np.full(3, -7, dtype=np.int64)
    kernel.compile(backend=backend, opt=opt)(out, *bounds)
    return out.tolist()


@pytest.mark.parametrize("opt", PIPELINES)
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_a_loop_over_any_span_runs_as_often_as_pythons_range(backend: str, opt: str) -> None:
    for a, b, s in FEW:
        assert run_walk(walk_kernel, backend, opt, a, b, s) == expected_walk(a, b, s), (a, b, s)


@pytest.mark.parametrize("opt", PIPELINES)
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_constant_bounds_over_any_span(backend: str, opt: str) -> None:
    for a, b, s in FEW[:9]:
        assert run_walk(constant_walk(a, b, s), backend, opt) == expected_walk(a, b, s), (a, b, s)


def _line(function: Callable, text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(k for k, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("opt", PIPELINES)
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_more_iterations_than_i64_holds_is_an_overflow_error_naming_the_line(backend: str, opt: str) -> None:
    line = _line(walk, "for i in range")
    for a, b, s in TOO_MANY:
        with pytest.raises(OverflowError, match=rf"test_range_overflow.py:{line}:.*2\*\*63 - 1 iterations"):
            run_walk(walk_kernel, backend, opt, a, b, s)
    a, b, s = TOO_MANY[0]
    with pytest.raises(OverflowError, match=rf"test_range_overflow.py:{_line(constant_walk, 'for i in range')}:"):
        run_walk(constant_walk(a, b, s), backend, opt)


def spread(out: Array[i64], a: i64, b: i64, s: i64) -> None:
    for i in iz.prange(a, b, s):
        out[i // s - a // s] = i  # the iteration's number, for a and s with s dividing a


spread_kernel = iz.kernel(spread)


@pytest.mark.parametrize("opt", PIPELINES)
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_a_prange_over_any_span_runs_every_iteration(backend: str, opt: str) -> None:
    for a, b, s in [(0, IMAX, 2**62), (IMIN, IMAX, 2**62), (IMIN, IMAX, -2**62), (-2**62, IMAX, 2**61),
                    (0, 10, 3)]:
        expected = np.full(8, -7, dtype=np.int64)
        spread(expected, a, b, s)
        out = np.full(8, -7, dtype=np.int64)
        spread_kernel.compile(backend=backend, opt=opt)(out, a, b, s)
        assert out.tolist() == expected.tolist(), (a, b, s)
    with pytest.raises(OverflowError, match="2\\*\\*63 - 1 iterations"):
        spread_kernel.compile(backend=backend, opt=opt)(np.zeros(8, dtype=np.int64), IMIN, IMAX, 1)


def pairs(out: Array[i64], n: i64, m: i64) -> None:
    for i, j in iz.ndrange(n, m):
        if i < 2 and j < 2:
            out[2 * i + j] += 1


pairs_kernel = iz.kernel(pairs)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_ndrange_of_more_pairs_than_i64_holds_is_an_overflow_error(backend: str) -> None:
    out = np.zeros(4, dtype=np.int64)
    pairs_kernel.compile(backend=backend)(out, 2, 2)
    assert out.tolist() == [1, 1, 1, 1]
    line = _line(pairs, "iz.ndrange")
    for n, m in ((2**32, 2**32), (IMAX, 2), (3, 2**62)):  # n * m wrapped: to 0, -2, -2**62 (no pair ran)
        with pytest.raises(OverflowError, match=rf"test_range_overflow.py:{line}:.*pairs"):
            pairs_kernel.compile(backend=backend)(out, n, m)
    pairs_kernel.compile(backend=backend)(out, 0, 2**62)  # none: the product is 0, not an overflow
    pairs_kernel.compile(backend=backend)(out, -5, IMAX)
    assert out.tolist() == [1, 1, 1, 1]


@iz.kernel
def strided_energy(x: Array[f64], a: i64, b: i64, s: i64) -> f64:
    e = 0.0
    for i in range(a, b, s):
        k = i // s - a // s
        e += iz.sin(x[k]) * x[k] * (k + 1)
    return e


@iz.kernel
def strided_map(y: Array[f64], x: Array[f64], a: i64, b: i64, s: i64) -> None:
    for i in iz.prange(a, b, s):
        k = i // s - a // s
        y[k] = x[k] * x[k] * (k + 2)


GRADIENT_BOUNDS = [(0, IMAX, 2**62), (IMIN, IMAX, 2**62), (0, 4, 1)]


@pytest.mark.filterwarnings("ignore::isozyme.runtime.opencl_backend.SerialLoopWarning")  # d_y[k]: k unproven
@pytest.mark.parametrize("opt", OPTS)
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_gradients_through_loops_over_any_span(backend: str, opt: str) -> None:
    rng = np.random.default_rng(62)
    for a, b, s in GRADIENT_BOUNDS:
        count = len(range(a, b, s))
        x = rng.uniform(-1, 1, 4)
        g = iz.grad(strided_energy, argnums=0, opt=opt, backend=backend)(x, a, b, s)
        def energy(v: np.ndarray, a: int = a, b: int = b, s: int = s) -> float:
            return strided_energy.py_func(v, a, b, s)
        reference = [central_difference(energy, x, np.eye(4)[k], 1e-4) for k in range(4)]
        assert np.allclose(g, reference, rtol=1e-7, atol=1e-12), (a, b, s)
        assert np.count_nonzero(g) == count
        y, dy, dx = np.zeros(4), np.ones(4), np.zeros(4)
        iz.autodiff(strided_map, iz.Duplicated(y, dy), iz.Duplicated(x, dx), a, b, s, opt=opt, backend=backend)
        expected = np.zeros(4)
        expected[:count] = 2 * x[:count] * (np.arange(count) + 2)
        assert np.allclose(dx, expected, rtol=1e-14), (a, b, s)


def test_the_overflow_check_folds_away_for_ordinary_loops() -> None:
    """Loops whose bounds cannot overflow (an extent, a counter of an enclosing loop, constants) keep the
    trip count `max(stop - start, 0)`: no `assert`, no `select`, no unsigned division."""

    @iz.kernel
    def ordinary(x: Array[f64], n: i64) -> f64:
        s = 0.0
        for i in range(len(x)):
            for j in range(i + 1, len(x)):
                s += x[i] * x[j]
        for i in range(1, n):
            s += x[i]
        for i in range(0, len(x), 2):
            s += x[i]
        for i in range(len(x) - 1, -1, -1):
            s = s * 0.5 + x[i]
        return s

    text = iz.show_ir(ordinary, stage="opt")
    assert not re.search(r"\b(assert|select|udiv)\b", text), text
