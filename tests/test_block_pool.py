"""The pool of large blocks (`codegen/llvm_block_pool.py`): local arrays of 64 KiB or more that the arena does
not hold (a `prange` body's, a task's copies of the arrays its iterations add into, growable tapes) are taken
from the module's pool and given back to it, so a block comes back dirty: every call must still see a
zeroed array zero and a grown tape whole. Results against numpy, one thread and finite differences; the
blocks kept between calls against glibc's count of the bytes in use."""

from __future__ import annotations

import ctypes
import platform

import numpy as np
import pytest
from test_threads import fresh_arrays

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.codegen import llvm_block_pool
from isozyme.runtime import thread_pool

wide_rows = fresh_arrays
"""Each task's `zeroed` and `scratch` arrays of `width` doubles: `scratch` dirties the blocks it is given, and
the next call may get one as `zeroed`."""

WIDE = 3 * llvm_block_pool.SMALLEST // 16  # doubles: an array of 1.5 times the smallest pooled block


@pytest.fixture(autouse=True)
def restore_thread_count():
    before = iz.get_num_threads()
    thread_pool.set_task_work(1)  # every loop split into as many tasks as there are threads
    yield
    thread_pool.set_task_work(None)
    iz.set_num_threads(before)


def wide_rows_numpy(x: np.ndarray, width: int) -> np.ndarray:
    """`wide_rows` in numpy."""
    zeroed = np.outer(x, np.arange(width))
    return (zeroed * (zeroed + 1.0)).sum(axis=1)


def test_a_zeroed_array_from_the_pool_is_zero_in_every_call():
    kernel = iz.kernel(wide_rows)
    x = np.random.default_rng(1).random(12)
    for count, width in ((3, WIDE), (2, WIDE + 1000), (3, WIDE), (1, WIDE - 2000), (3, 2 * WIDE), (3, WIDE)):
        iz.set_num_threads(count)
        out = np.zeros_like(x)
        kernel(out, x, width)
        np.testing.assert_allclose(out, wide_rows_numpy(x, width), rtol=1e-12, err_msg=f"{count} threads, {width}")


def shared_columns(w: Array[f64, 2], x: Array[f64, 2]) -> f64:
    """The reverse loop adds into d_w[j % K, j] from every row: each task but the first adds into a zeroed
    copy of d_w (WIDE columns: a pooled block)."""
    total = 0.0
    for i in iz.prange(x.shape[0]):
        acc = 0.0
        for j in range(x.shape[1]):
            acc += iz.sin(w[j % w.shape[0], j] * x[i, j])
        total += acc * acc
    return total


def test_the_copies_of_a_shared_adjoint_start_from_zero_in_every_call():
    kernel = iz.kernel(shared_columns)
    rng = np.random.default_rng(2)
    w, x = rng.standard_normal((2, WIDE)) * 0.1, rng.standard_normal((6, WIDE))
    iz.set_num_threads(1)
    serial = iz.grad(kernel)(w, x)
    iz.set_num_threads(3)
    for _ in range(4):  # a copy that kept the last call's sums would add them again
        np.testing.assert_allclose(iz.grad(kernel)(w, x), serial, rtol=1e-11, atol=1e-12)
    s = np.sin(w[np.arange(WIDE) % 2, np.arange(WIDE)] * x)  # the same by hand: d/dw of (sum_j sin)^2 per row
    c = np.cos(w[np.arange(WIDE) % 2, np.arange(WIDE)] * x)
    by_column = (2.0 * s.sum(axis=1, keepdims=True) * c * x).sum(axis=0)
    expected = np.zeros_like(w)
    expected[np.arange(WIDE) % 2, np.arange(WIDE)] = by_column
    np.testing.assert_allclose(serial, expected, rtol=1e-10, atol=1e-10)


def chain(x: Array[f64], n: i64) -> f64:
    s = 0.0
    k = 0
    while k < n:  # a trip count the reverse pass records: its tape grows (a realloc) past the smallest pooled size
        s = iz.sin(s + x[k % len(x)])
        k += 1
    return s


def test_a_tape_that_grew_is_given_back_whole():
    kernel = iz.kernel(chain)
    x = np.array([0.3, -0.7, 1.1])
    grad = iz.grad(kernel, argnums=0)
    for n in (WIDE, 3 * WIDE, WIDE, 2 * WIDE + 17):  # pooled blocks of other sizes come back in other calls
        got = grad(x, n)
        h = 1e-6
        for index in range(len(x)):
            plus, minus = x.copy(), x.copy()
            plus[index] += h
            minus[index] -= h
            estimate = (kernel(plus, n) - kernel(minus, n)) / (2 * h)
            assert got[index] == pytest.approx(estimate, rel=1e-5, abs=1e-8), (n, index)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _bytes_in_use() -> int:
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="counts the bytes in use through glibc's mallinfo2")
def test_the_pool_keeps_the_blocks_of_a_call_for_the_next_and_no_more():
    kernel = iz.kernel(wide_rows, boundscheck=True)  # a module of its own: its pool is empty
    iz.set_num_threads(2)
    x = np.random.default_rng(3).random(8)
    out = np.zeros_like(x)
    kernel(out, x, 10)  # compiled, small blocks only
    before = _bytes_in_use()
    kernel(out, x, WIDE)
    block = 8 * WIDE + llvm_block_pool.HEADER
    assert _bytes_in_use() - before >= 2 * block  # a task's two arrays, kept (the tasks may take turns)
    for _ in range(50):
        kernel(out, x, WIDE)
        assert _bytes_in_use() - before <= 4 * block + (256 << 10)  # both tasks' arrays at most (and Python's)
    np.testing.assert_allclose(out, wide_rows_numpy(x, WIDE), rtol=1e-12)
