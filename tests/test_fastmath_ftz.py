"""`fastmath=("ftz",)`: the call runs with subnormals flushed to zero (x86-64 MXCSR FTZ and DAZ), on the
calling thread and on the thread pool's threads, and the caller's mode comes back after the call, also after
one that raised. Without the flag, and on `interp`, subnormals are kept (IEEE, as Python computes them).
"""

from __future__ import annotations

import platform

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.codegen.abi import fastmath_flags
from isozyme.runtime import thread_pool
from tests.example_modules import load_example

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="ftz sets the x86-64 MXCSR; elsewhere it changes nothing")

TINY = 1e-300 * 1e-10  # 1e-310: a subnormal double, as Python computes it
assert 0.0 < TINY < np.finfo(np.float64).tiny


def scale_all(out: Array[f64], x: Array[f64], y: f64) -> f64:
    for i in iz.prange(out.shape[0]):
        out[i] = x[i] * y
    return x[0] * y


def times(x: f64, y: f64) -> f64:
    return x * y


def at(x: Array[f64], i: i64) -> f64:
    return x[i] * 1e-10


ftz_scale, ieee_scale = iz.kernel(fastmath=("ftz",))(scale_all), iz.kernel(scale_all)
ftz_times, ieee_times = iz.kernel(fastmath=("ftz",))(times), iz.kernel(times)


@pytest.fixture
def threads():
    """Eight threads, every loop split into one task per thread."""
    before = iz.get_num_threads()
    iz.set_num_threads(8)
    thread_pool.set_task_work(1)
    yield
    thread_pool.set_task_work(None)
    iz.set_num_threads(before)


def python_keeps_subnormals() -> bool:
    return np.float64(1e-300) * 1e-10 != 0.0 and 1e-300 * float(np.float64(1e-10)) != 0.0


def test_ftz_is_a_flag_of_its_own() -> None:
    assert fastmath_flags(("reassoc", "ftz")) == ("ftz", "reassoc")
    code = iz.show_ir(ftz_times, stage="llvm")
    assert "llvm.x86.sse.ldmxcsr" in code and "fmul double" in code and "ftz double" not in code
    assert "mxcsr" not in iz.show_ir(ieee_times, stage="llvm")


def test_subnormal_results_and_operands_become_zero() -> None:
    assert ieee_times(1e-300, 1e-10) == times(1e-300, 1e-10) == TINY
    assert ftz_times(1e-300, 1e-10) == 0.0          # FTZ: a subnormal result
    assert ieee_times(TINY, 1e300) == pytest.approx(1e-10)
    assert ftz_times(TINY, 1e300) == 0.0            # DAZ: a subnormal operand
    assert ftz_times(1e-200, 1e-100) == 1e-200 * 1e-100  # normal numbers: unchanged
    assert python_keeps_subnormals()


def test_interp_keeps_subnormals() -> None:
    assert iz.kernel(backend="interp", fastmath=("ftz",))(times)(1e-300, 1e-10) == TINY


def test_the_pool_threads_compute_in_the_callers_mode(threads) -> None:
    x, out = np.full(400_000, 1e-300), np.ones(400_000)
    for _ in range(3):
        assert ftz_scale(out, x, 1e-10) == 0.0
        assert np.count_nonzero(out) == 0, "a thread of the pool kept subnormals"
        assert ieee_scale(out, x, 1e-10) == TINY
        assert np.all(out == TINY), "a thread of the pool flushed subnormals in a strict call"
        assert python_keeps_subnormals()


def test_the_callers_mode_comes_back_after_an_error() -> None:
    checked = iz.kernel(fastmath=("ftz",), boundscheck=True)(at)
    assert checked(np.full(3, 1e-300), 2) == 0.0
    with pytest.raises(IndexError):
        checked(np.full(3, 1e-300), 3)
    assert python_keeps_subnormals()


def test_gmm_gradient_with_ftz_matches_the_strict_one(threads) -> None:
    """At d=20 some components' weights underflow below 2.2e-308, which ftz makes zero: a change far below
    the gradient's rounding."""
    gmm = load_example("gmm")
    data = gmm.gmm_data(20, 10, 200, seed=1)
    args = (*data, gmm.log_gamma_distrib(0.5 * (20 + data.m + 1), 20))
    flushed = iz.kernel(fastmath=("ftz",))(gmm.gmm_objective_by_component.py_func)
    ours = iz.grad(flushed, argnums=(0, 1, 2))(*args)
    theirs = iz.grad(gmm.gmm_objective_by_component, argnums=(0, 1, 2))(*args)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-300)
