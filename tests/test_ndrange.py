"""`for i, j in iz.ndrange(n, m)`: one parallel loop over the pairs (`frontend/lowering.py`), each pair a
work item (an NDRange over n * m on OpenCL, tasks over n * m on the CPU), a local array indexed [i, j]
split between the work items (`codegen/injective_indices.py`). Results are compared with the undecorated
Python function (where `iz.ndrange` is `itertools.product` of ranges), gradients with finite differences.
Nested `prange` loops stay nested (outer parallel)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, Duplicated, f64, i64
from isozyme.runtime.opencl_backend import SerialLoopWarning


def affine(y: Array[f64, 2], x: Array[f64, 2], a: i64):
    for i, j in iz.ndrange(x.shape[0], x.shape[1]):
        y[i, j] = x[i, j] * 2.0 + i - 3 * j + a


def skipping(y: Array[f64, 2], x: Array[f64, 2]):
    for i, j in iz.ndrange(x.shape[0], x.shape[1] - 1):
        if x[i, j] > 0.5:
            continue
        y[i, j + 1] = x[i, j] + 1.0


def smooth(y: Array[f64, 2], x: Array[f64, 2]) -> f64:
    n, m = x.shape[0], x.shape[1]
    t = iz.empty((n, m), f64)  # written at [i, j] by work item (i, j): split between the work items
    for i, j in iz.ndrange(n, m):
        t[i, j] = iz.sin(x[i, j]) * x[i, j]
    s = 0.0
    for i, j in iz.ndrange(n, m):
        y[i, j] = t[i, j] * t[i, (j + 1) % m]
        s += t[i, j]
    return s


def nested(y: Array[f64, 2], x: Array[f64, 2]):
    for i in iz.prange(x.shape[0]):
        for j in iz.prange(x.shape[1]):  # stays nested: the outer loop parallel
            y[i, j] = x[i, j] * 3.0


def parallel_phis(kernel: iz.Kernel) -> int:
    return iz.show_ir(kernel, stage="ssa").count(" parallel")


@pytest.mark.parametrize("backend", ["interp", "llvm", "opencl"])
@pytest.mark.parametrize("shape", [(5, 7), (1, 9), (6, 1), (0, 4), (4, 0), (13, 11)])
def test_collapsed_loops_compute_what_python_computes(backend: str, shape: tuple[int, int]) -> None:
    if backend == "opencl":
        pytest.importorskip("pyopencl")
    x = np.random.default_rng(shape[0] * 31 + shape[1]).random(shape)
    for function, extra in ((affine, (4,)), (skipping, ()), (smooth, ()), (nested, ())):
        kernel = iz.kernel(function, backend=backend)
        expected, got = np.zeros_like(x), np.zeros_like(x)
        want = function(expected, x, *extra)
        with warnings.catch_warnings():
            warnings.simplefilter("error", SerialLoopWarning)
            returned = kernel(got, x, *extra)
        np.testing.assert_allclose(got, expected, rtol=1e-14, err_msg=f"{function.__name__} on {backend}")
        if want is not None:
            assert returned == pytest.approx(want, rel=1e-12)


def test_the_pairs_are_one_parallel_loop_and_nested_pranges_stay_nested() -> None:
    assert parallel_phis(iz.kernel(affine)) == 1
    assert parallel_phis(iz.kernel(skipping)) == 1
    assert parallel_phis(iz.kernel(smooth)) == 2
    assert parallel_phis(iz.kernel(nested)) == 2  # two loops, one in the other


def wrong_rank(y: Array[f64, 2], x: Array[f64, 2]):
    for i, j, k in iz.ndrange(x.shape[0], x.shape[1], 2):
        y[i, j] = x[i, j] + k


def not_a_pair(y: Array[f64, 2], x: Array[f64, 2]):
    for i in iz.ndrange(x.shape[0], x.shape[1]):  # noqa: B007  (one name: a CompileError)
        y[0, 0] = x[0, 0]


def float_extent(y: Array[f64, 2], x: Array[f64, 2]):
    for i, j in iz.ndrange(x.shape[0], 2.5):
        y[i, j] = x[i, j]


@pytest.mark.parametrize(("function", "message"), [(wrong_rank, "iz.ndrange takes two extents"),
                                                   (not_a_pair, "two plain names"),
                                                   (float_extent, "iz.ndrange")])
def test_a_misused_ndrange_is_a_compile_error_at_its_line(function: object, message: str) -> None:
    with pytest.raises(iz.CompileError, match=message) as error:
        iz.show_ir(iz.kernel(function), stage="ssa")
    assert "test_ndrange.py" in str(error.value) and "^" in str(error.value)


def test_a_local_array_indexed_by_the_pair_is_split_and_its_adjoint_is_a_plain_add() -> None:
    """On OpenCL, `t[i, j] = ...` in the collapsed loop runs in parallel (the tests above turn a
    SerialLoopWarning into an error), and the reverse of that loop, a kernel of its own, consumes d_t[i, j]
    and adds into d_x[i, j] with plain adds: no atomic add (the pair (i, j) tells its work items apart)."""
    pytest.importorskip("pyopencl")
    source = iz.show_ir(iz.kernel(smooth), stage="opencl", activity=("dup", "dup"))
    bodies = [part.split("__kernel void iz_par")[0] for part in source.split("void iz_body")[1:]]
    plain = re.compile(r"(\w+)\[([^\]]+)\] = \(\1\[\2\] \+ ")
    reverse_of_first = [body for body in bodies if "sin" not in body and plain.search(body)
                        and "] = (double)((double)0x0.0p+0);" in body]
    assert len(reverse_of_first) == 1 and "iz_atomic_add" not in reverse_of_first[0]


@pytest.mark.parametrize("backend", ["llvm", "opencl"])
def test_gradients_through_collapsed_loops_match_finite_differences(backend: str) -> None:
    if backend == "opencl":
        pytest.importorskip("pyopencl")
    rng = np.random.default_rng(7)
    x, dy = rng.random((6, 5)), rng.random((6, 5))
    kernel = iz.kernel(smooth, backend=backend)
    d_x = np.zeros_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SerialLoopWarning)
        iz.autodiff(kernel, Duplicated(np.zeros_like(x), dy.copy()), Duplicated(x, d_x), backend=backend)

    def loss(x: np.ndarray) -> float:
        y = np.zeros_like(x)
        s = smooth(y, x)
        return float(np.sum(y * dy) + s)
    h = 1e-6
    numeric = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[index] += h
        down[index] -= h
        numeric[index] = (loss(up) - loss(down)) / (2 * h)
    np.testing.assert_allclose(d_x, numeric, rtol=1e-6, atol=1e-8)


def test_threads_split_the_pairs_and_agree_with_one_thread() -> None:
    x = np.random.default_rng(3).random((3, 40_000))
    expected = np.zeros_like(x)
    affine(expected, x, 1)
    before = iz.get_num_threads()
    for threads in (1, 2, 5):
        iz.set_num_threads(threads)
        try:
            y = np.zeros_like(x)
            iz.kernel(affine, backend="llvm")(y, x, 1)
        finally:
            iz.set_num_threads(before)
        np.testing.assert_array_equal(y, expected, err_msg=f"{threads} threads")


def two_divisors(y: Array[f64], x: Array[f64], m: i64):
    u = iz.zeros((len(x), len(x) + 1), f64)
    for k in iz.prange(len(x)):
        u[k // m, k % (m + 1)] = x[k]  # not a split: two iterations can write one element
    for k in iz.prange(len(x)):
        y[k] = u[k // m, k % (m + 1)]


def two_quotients(y: Array[f64], x: Array[f64], m: i64):
    u = iz.zeros((len(x), len(x)), f64)
    for k in iz.prange(len(x)):
        u[k // m, k // m] = x[k]  # m iterations write each element
    for k in iz.prange(len(x)):
        y[k] = u[k // m, k // m]


def other_divisor(y: Array[f64], x: Array[f64], m: i64):
    u = iz.zeros((len(x), len(x) + 1), f64)
    for k in iz.prange(len(x)):
        u[k // (m + 1), k - (k // m) * m] = x[k]  # the remainder written out, of another quotient than the one
    for k in iz.prange(len(x)):  # that indexes: iterations 0 and m + 1 write one element
        y[k] = u[k // (m + 1), k - (k // m) * m]


@pytest.mark.parametrize("function", [two_divisors, two_quotients, other_divisor])
def test_indices_that_do_not_split_the_counter_keep_the_loop_serial(function: object) -> None:
    """A quotient and a remainder by different divisors, or two quotients, do not tell the work items apart:
    the loop that writes the local array runs serially (a SerialLoopWarning), and the result is Python's."""
    pytest.importorskip("pyopencl")
    x = np.random.default_rng(2).random(40)
    expected, got = np.zeros_like(x), np.zeros_like(x)
    function(expected, x, 3)  # type: ignore[operator]
    with pytest.warns(SerialLoopWarning, match="every iteration writes the local array"):
        iz.kernel(function, backend="opencl")(got, x, 3)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, expected)


def written_out(y: Array[f64], x: Array[f64], m: i64) -> f64:
    u = iz.zeros((len(x) // m + 1, m), f64)
    for k in iz.prange(len(x)):
        q = k // m
        u[q, k - q * m] = iz.sin(x[k])  # the remainder as GPU code often writes it: a split all the same
    s = 0.0
    for k in iz.prange(len(x)):
        q = k // m
        y[k] = u[q, k - q * m] * x[k]
        s += u[q, k - q * m]
    return s


@pytest.mark.parametrize("m", [1, 3, 8])
def test_a_remainder_written_out_splits_the_counter(m: int) -> None:
    """`k - (k // m) * m` is the remainder of `k // m`: a local array indexed by the two runs in parallel on
    OpenCL (no SerialLoopWarning), with the result and the gradient of the llvm backend."""
    pytest.importorskip("pyopencl")
    rng = np.random.default_rng(m)
    x, dy = rng.random(29), rng.random(29)
    results = {}
    for backend in ("llvm", "opencl"):
        kernel = iz.kernel(written_out, backend=backend)
        y, d_x = np.zeros_like(x), np.zeros_like(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", SerialLoopWarning)
            value = kernel(y, x, m)
            iz.autodiff(kernel, Duplicated(np.zeros_like(x), dy.copy()), Duplicated(x, d_x), m, backend=backend)
        results[backend] = (value, y, d_x)
    expected_y = np.zeros_like(x)
    np.testing.assert_allclose(results["opencl"][1], expected_y + np.sin(x) * x, rtol=1e-15)
    assert results["opencl"][0] == pytest.approx(np.sin(x).sum(), rel=1e-13)
    np.testing.assert_allclose(results["opencl"][2], results["llvm"][2], rtol=1e-13)
    np.testing.assert_allclose(results["llvm"][2], dy * (np.cos(x) * x + np.sin(x)) + np.cos(x), rtol=1e-13)
