"""Small copies back through pinned memory (`opencl_launches.HostStage`): a call's numpy arguments of up to
`STAGED_BYTES` come back through the runner's pinned stage, larger ones straight into the array, and what
does not fit in the stage after the first ones goes the plain way. Every result is compared with numpy's:
a staged copy that landed in the wrong array, at the wrong offset or not at all fails."""

from __future__ import annotations

import numpy as np
import pytest

import isozyme as iz
from isozyme import Active, Array, Duplicated, f64, i32, i64

pytest.importorskip("pyopencl")

from isozyme.runtime.opencl_launches import STAGED_BYTES  # noqa: E402


def scatter(a: Array[f64], b: Array[i32], c: Array[f64], x: Array[f64], k: i64):
    # every output depends on its index and on x, so a swapped or shifted copy shows
    for i in iz.prange(len(a)):
        a[i] = x[i % len(x)] * 2.0 + float(i)
    for i in iz.prange(len(b)):
        b[i] = i * 3 + k
    for i in iz.prange(len(c)):
        c[i] = x[(i + 1) % len(x)] - float(i)


def scale(y: Array[f64], x: Array[f64], a: f64) -> f64:
    s = 0.0
    for i in iz.prange(len(x)):
        y[i] = a * x[i] * x[i]
        s += y[i]
    return s


@pytest.mark.parametrize("sizes", [(3, 5, 7), (STAGED_BYTES // 8 - 3, 9, 11), (STAGED_BYTES // 8 + 1, 2, 3),
                                   (STAGED_BYTES // 16, STAGED_BYTES // 8, STAGED_BYTES // 16)])
def test_small_and_large_copies_back_reach_their_arrays(sizes: tuple[int, int, int]) -> None:
    """Three outputs of three sizes and two dtypes, the stage holding all, some (the i32 array at an odd
    offset after the first) or none of them; called twice, so the second call replays."""
    kernel = iz.kernel(scatter, backend="opencl")
    x = np.random.default_rng(0).random(13)
    for k in (4, -2):
        a, b, c = np.zeros(sizes[0]), np.zeros(sizes[1], dtype=np.int32), np.zeros(sizes[2])
        kernel(a, b, c, x, k)
        np.testing.assert_array_equal(a, x[np.arange(sizes[0]) % 13] * 2.0 + np.arange(sizes[0]))
        np.testing.assert_array_equal(b, np.arange(sizes[1], dtype=np.int32) * 3 + k)
        np.testing.assert_array_equal(c, x[(np.arange(sizes[2]) + 1) % 13] - np.arange(sizes[2]))


def test_an_active_scalar_s_adjoint_comes_back_in_every_call() -> None:
    """`iz.autodiff` passes an Active parameter's adjoint as a one-element array: staged, every call."""
    kernel = iz.kernel(scale, backend="opencl")
    rng = np.random.default_rng(1)
    for a in (1.5, -0.25, 3.0):
        x = rng.random(300)
        y, d_y, d_x = np.zeros(300), np.ones(300), np.zeros(300)
        value, (d_a,) = iz.autodiff(kernel, Duplicated(y, d_y), Duplicated(x, d_x), Active(a), backend="opencl")
        np.testing.assert_allclose(value, np.sum(a * x * x), rtol=1e-12)
        np.testing.assert_allclose(d_a, np.sum(x * x) * 2.0, rtol=1e-12)  # d_y is 1 and y is read back too
        np.testing.assert_allclose(d_x, 4.0 * a * x, rtol=1e-12)
