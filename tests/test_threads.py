"""`prange` loops on the thread pool (llvm): the results of many threads against one thread, the serial
Python function and the interpreter; errors inside a parallel loop; concurrency, nesting and fork."""

from __future__ import annotations

import multiprocessing
import os
import re
import sys
import threading

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.runtime import thread_pool

COUNTS = (1, 2, 3, 7, 300)  # 300: more than MAX_TASKS, so clamped


@pytest.fixture(autouse=True)
def restore_thread_count():
    """Every loop here split into as many tasks as there are threads (small loops stay on the caller by
    default); the thread count restored afterwards."""
    before = iz.get_num_threads()
    thread_pool.set_task_work(1)
    yield
    thread_pool.set_task_work(None)
    iz.set_num_threads(before)


def with_threads(count, call):
    iz.set_num_threads(count)
    return call()


def scale_and_sum(out: Array[i64], x: Array[i64]) -> i64:
    total = 0
    for i in iz.prange(len(x)):
        out[i] = 2 * x[i] + i
        total += x[i]
    return total


def oscillations(out: Array[f64], x: Array[f64], terms: i64) -> f64:
    total = 0.0
    for i in iz.prange(len(x)):
        v = 0.0
        for k in range(terms):
            v += iz.sin(x[i] * k) / (k + 1.0)
        out[i] = v
        total += v
    return total


def layer_energy(w: Array[f64, 2], b: Array[f64], x: Array[f64, 2], y: Array[f64]) -> f64:
    """Every mode of an accumulation in the reverse loop: d_x[i, j] one per iteration, d_b[0] at an invariant
    index (every iteration), d_w[j % K, j] at indices every iteration shares."""
    total = 0.0
    for i in iz.prange(x.shape[0]):
        h = iz.empty(x.shape[1], f64)
        for j in range(x.shape[1]):
            h[j] = iz.tanh(w[j % w.shape[0], j] * x[i, j] + b[0])
        acc = 0.0
        for j in range(x.shape[1]):
            acc += h[j] * h[j] * (1.0 + 0.1 * j)
        y[i] = acc
        total += acc * acc
    return total


def test_exact_sums_equal_the_serial_function_for_every_thread_count():
    kernel = iz.kernel(scale_and_sum)
    x = np.random.default_rng(0).integers(-1000, 1000, 10_007)
    expected_out = np.zeros_like(x)
    expected = scale_and_sum(expected_out, x)
    for count in COUNTS:
        out = np.zeros_like(x)
        assert with_threads(count, lambda out=out: kernel(out, x)) == expected, count
        np.testing.assert_array_equal(out, expected_out)


def continued_sum(x: Array[f64], start: f64) -> f64:
    total = start * start  # the loop starts from a value of its own
    for i in iz.prange(len(x)):
        total += x[i] * x[i]
    return total


def test_one_thread_is_the_serial_loop_bit_for_bit():
    kernel = iz.kernel(continued_sum)
    x = np.random.default_rng(9).standard_normal(5000) * 1e3
    expected = continued_sum(x, 0.3)
    assert with_threads(1, lambda: kernel(x, 0.3)) == expected
    d_x, d_start = iz.grad(iz.kernel(continued_sum, backend="interp"), argnums=(0, 1))(x, 0.3)
    got_x, got_start = with_threads(1, lambda: iz.grad(kernel, argnums=(0, 1))(x, 0.3))
    np.testing.assert_array_equal(got_x, d_x)
    assert got_start == d_start


def test_float_sums_match_one_thread_and_python():
    kernel = iz.kernel(oscillations)
    x = np.random.default_rng(1).random(3001)
    expected_out = np.zeros_like(x)
    expected = oscillations(expected_out, x, 40)
    serial_out = np.zeros_like(x)
    serial = with_threads(1, lambda: kernel(serial_out, x, 40))
    assert serial == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(serial_out, expected_out, rtol=1e-12, atol=1e-14)
    for count in COUNTS:
        out = np.zeros_like(x)
        assert with_threads(count, lambda out=out: kernel(out, x, 40)) == pytest.approx(serial, rel=1e-12), count
        np.testing.assert_array_equal(out, serial_out)  # no sum across iterations: the same bits


def order_sensitive_sum(x: Array[f64]) -> f64:
    total = 0.0
    for i in iz.prange(len(x)):
        total += x[i]
    return total


def test_a_small_loop_stays_on_the_caller_by_default():
    kernel = iz.kernel(order_sensitive_sum)
    x = np.tile([1e16, 1.0, -1e16, 1.0], 250)  # each grouping of the sum rounds differently
    serial = with_threads(1, lambda: kernel(x))
    iz.set_num_threads(4)
    assert kernel(x) != serial  # 4 tasks: another grouping
    thread_pool.set_task_work(None)  # the default: 1,000 additions are not worth a second thread
    assert kernel(x) == serial


def test_a_result_does_not_depend_on_timing():
    kernel = iz.kernel(oscillations)
    x = np.random.default_rng(2).random(2000)
    out = np.zeros_like(x)
    iz.set_num_threads(4)
    first = kernel(out, x, 30)
    assert all(kernel(out, x, 30) == first for _ in range(30))


@pytest.mark.parametrize("count", [1, 2, 5])
def test_gradient_of_shared_parameters_matches_the_interpreter(count):
    compiled, reference = iz.kernel(layer_energy), iz.kernel(layer_energy, backend="interp")
    rng = np.random.default_rng(3)
    w, b, x = rng.standard_normal((3, 7)) * 0.5, rng.standard_normal(1), rng.standard_normal((61, 7))
    y = np.zeros(61)
    expected = iz.grad(reference, argnums=(0, 1, 2))(w, b, x, y)
    iz.set_num_threads(count)
    got = iz.grad(compiled, argnums=(0, 1, 2))(w, b, x, y)
    for name, want, have in zip(("w", "b", "x"), expected, got):
        if count == 1:  # one task is the serial loop, bit for bit
            np.testing.assert_array_equal(have, want, err_msg=name)
        np.testing.assert_allclose(have, want, rtol=1e-12, atol=1e-13, err_msg=name)


def test_gradient_matches_finite_differences_with_threads():
    kernel = iz.kernel(layer_energy)
    rng = np.random.default_rng(4)
    w, b, x = rng.standard_normal((2, 5)) * 0.5, rng.standard_normal(1), rng.standard_normal((17, 5))
    y = np.zeros(17)
    iz.set_num_threads(3)
    d_w = iz.grad(kernel, argnums=0)(w, b, x, y)
    h = 1e-6
    for index in np.ndindex(w.shape):
        plus, minus = w.copy(), w.copy()
        plus[index] += h
        minus[index] -= h
        estimate = (kernel(plus, b, x, y) - kernel(minus, b, x, y)) / (2 * h)
        assert d_w[index] == pytest.approx(estimate, rel=1e-6, abs=1e-7), index


def gather_sum(x: Array[f64], indices: Array[i64]) -> f64:
    total = 0.0
    for i in iz.prange(len(indices)):
        total += x[indices[i]]
    return total


def test_an_error_in_a_parallel_loop_is_the_serial_error():
    kernel = iz.kernel(gather_sum, boundscheck=True)
    x = np.ones(1000)
    indices = np.arange(1000)
    indices[700], indices[900] = 10**6, 10**6 + 1
    messages = []
    for count in (1, 2, 4):
        iz.set_num_threads(count)
        with pytest.raises(IndexError) as raised:
            kernel(x, indices)
        messages.append(str(raised.value))
    assert "1000000" in messages[0] and "1000001" not in messages[0]
    assert messages[1:] == messages[:1] * 2
    assert kernel(x, np.arange(1000)) == 1000.0  # the pool still works


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc (Linux)")
def test_the_pool_starts_its_threads_once():
    kernel = iz.kernel(gather_sum, boundscheck=True)
    x, good = np.ones(100), np.arange(100)
    bad = good.copy()
    bad[50] = 10**6
    iz.set_num_threads(4)
    kernel(x, good)
    threads = len(os.listdir("/proc/self/task"))
    assert threads >= 4  # this thread and three of the pool's, at least
    for _ in range(20):
        with pytest.raises(IndexError):
            kernel(x, bad)
        kernel(x, good)
    assert len(os.listdir("/proc/self/task")) == threads


def test_calls_from_several_python_threads_at_once():
    kernel = iz.kernel(oscillations)
    x = np.random.default_rng(5).random(4000)
    iz.set_num_threads(3)
    serial = with_threads(3, lambda: kernel(np.zeros_like(x), x, 20))
    results: list[float] = []

    def call():
        for _ in range(10):
            results.append(kernel(np.zeros_like(x), x, 20))
    workers = [threading.Thread(target=call) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert results == [serial] * 40  # one job at a time; the others run their tasks themselves, in order


@iz.kernel(inline=False)
def row_sum(x: Array[f64, 2], i: i64) -> f64:
    total = 0.0
    for j in iz.prange(x.shape[1]):
        total += x[i, j] * x[i, j]
    return total


def sum_of_row_sums(x: Array[f64, 2]) -> f64:
    total = 0.0
    for i in iz.prange(x.shape[0]):
        total += row_sum(x, i)
    return total


def test_a_parallel_loop_in_a_function_called_from_one():
    kernel = iz.kernel(sum_of_row_sums)
    x = np.random.default_rng(6).random((50, 300))
    for count in (1, 4):
        assert with_threads(count, lambda: kernel(x)) == pytest.approx(float(np.sum(x * x)), rel=1e-12)


def _call_in_child(queue):
    kernel = iz.kernel(oscillations)
    x = np.linspace(0.0, 1.0, 500)
    queue.put(kernel(np.zeros_like(x), x, 10))


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # threads of peers (JAX) the suite imported
def test_a_forked_child_gets_a_pool_of_its_own():
    kernel = iz.kernel(oscillations)
    x = np.linspace(0.0, 1.0, 500)
    iz.set_num_threads(3)
    expected = kernel(np.zeros_like(x), x, 10)  # the parent's pool has threads now
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_call_in_child, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == expected


def test_the_thread_count_setting(monkeypatch):
    monkeypatch.setenv("ISOZYME_NUM_THREADS", "5")
    assert thread_pool.default_threads() == 5
    monkeypatch.setenv("ISOZYME_NUM_THREADS", "zero")
    with pytest.raises(ValueError, match="ISOZYME_NUM_THREADS"):
        thread_pool.default_threads()
    monkeypatch.delenv("ISOZYME_NUM_THREADS")
    assert thread_pool.default_threads() == len(os.sched_getaffinity(0))
    for wrong in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="thread count"):
            iz.set_num_threads(wrong)
    iz.set_num_threads(6)
    assert iz.get_num_threads() == 6


@pytest.mark.parametrize(("fusion", "count"), [("0", 2), ("1", 1)])
def test_threaded_loops_are_tasks_in_the_llvm_ir(fusion: str, count: int, monkeypatch: pytest.MonkeyPatch):
    """The forward loop and the reverse loop are tasks; fused (the reverse loop beside the forward one), one."""
    monkeypatch.setenv("ISOZYME_LOOP_FUSION", fusion)
    text = iz.show_ir(iz.kernel(layer_energy), stage="llvm", activity=("dup", "dup", "dup", "dup"))
    tasks = re.findall(r'define internal void @"?[\w.]+\.loop\d+\.task"?\(', text)
    assert len(tasks) == count, tasks


def fresh_arrays(out: Array[f64], x: Array[f64], width: i64):
    for i in iz.prange(len(x)):
        zeroed = iz.zeros(width, f64)  # allocated once per task, zeroed again in every iteration
        scratch = iz.empty(width, f64)
        for k in range(width):
            zeroed[k] += x[i] * k
            scratch[k] = zeroed[k] + 1.0
        total = 0.0
        for k in range(width):
            total += zeroed[k] * scratch[k]
        out[i] = total


def test_local_arrays_of_a_parallel_loop_are_fresh_in_every_iteration():
    kernel = iz.kernel(fresh_arrays)
    x = np.random.default_rng(7).random(500)
    expected = np.zeros_like(x)
    fresh_arrays(expected, x, 9)
    for count in (1, 3):
        out = np.zeros_like(x)
        with_threads(count, lambda out=out: kernel(out, x, 9))
        np.testing.assert_allclose(out, expected, rtol=1e-14)


def sometimes_allocates(out: Array[f64], x: Array[f64], width: i64):
    for i in iz.prange(len(x)):
        if x[i] > 2.0:  # never: the array, of a negative width, is never allocated
            scratch = iz.empty(width, f64)
            scratch[0] = x[i]
            out[i] = scratch[0]
        else:
            out[i] = -x[i]


def test_an_array_no_iteration_allocates_is_not_checked():
    kernel = iz.kernel(sometimes_allocates)
    x = np.random.default_rng(8).random(300)
    for count in (1, 4):
        out = np.zeros_like(x)
        with_threads(count, lambda out=out: kernel(out, x, -3))
        np.testing.assert_array_equal(out, -x)
    x[200] = 5.0
    with pytest.raises(ValueError, match="negative"):
        with_threads(4, lambda: kernel(np.zeros_like(x), x, -3))
