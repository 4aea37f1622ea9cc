"""What a repeated OpenCL call does without the host (`opencl_serial.SerialRenderer.request_alloc`, CLEAR).

A local array whose buffer is already large enough is reused without a request, a zeroed one is zero at
the start of every call (cleared by the serial kernel when small, by a host fill when larger than
`SERIAL_CLEAR_LIMIT`), and the runner sets only the kernel arguments that changed: calls on other arrays
of the same shape, and on device arrays, must see their own arguments. Results are compared with numpy and
with the `llvm` backend; round trips are counted by the profiler."""

from __future__ import annotations

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, Duplicated, f64, i64
from isozyme.codegen.opencl_serial import SERIAL_CLEAR_LIMIT
from isozyme.runtime.opencl_device import chained, device

pytest.importorskip("pyopencl")


def histogram(out: Array[f64], x: Array[f64], m: i64):
    counts = iz.zeros(m, f64)  # atomic adds from every work item: wrong in a second call unless cleared
    for i in iz.prange(len(x)):
        counts[int(x[i] * m)] += 1.0
    for j in iz.prange(m):
        out[j] = counts[j] * float(j + 1)


def smooth(y: Array[f64], x: Array[f64]) -> f64:
    n = len(x)
    t = iz.zeros(n, f64)
    for i in iz.prange(n):
        t[i] = iz.sin(x[i]) * x[i]
    s = 0.0
    for i in iz.prange(n):
        y[i] = t[i] * t[(i + 1) % n]
        s += t[i]
    return s


@pytest.mark.parametrize("m", [100, SERIAL_CLEAR_LIMIT + 904])  # cleared by the serial kernel, by the host
def test_a_zeroed_local_array_is_zero_in_every_call(m):
    kernel = iz.kernel(histogram, backend="opencl")
    rng = np.random.default_rng(m)
    for call in range(3):
        x = rng.random(20_000)
        out = np.zeros(m)
        kernel(out, x, m)
        expected = np.bincount((x * m).astype(int), minlength=m) * np.arange(1, m + 1)
        np.testing.assert_array_equal(out, expected, err_msg=f"call {call}")


@pytest.mark.parametrize("n, clears", [(SERIAL_CLEAR_LIMIT - 96, 0), (SERIAL_CLEAR_LIMIT + 904, 1)])
def test_a_repeated_call_asks_the_host_only_to_launch_and_clear(n, clears):
    kernel = iz.kernel(smooth, backend="opencl")
    x = np.linspace(0.0, 3.0, n)
    y = np.zeros_like(x)
    with iz.profile() as prof:
        first = kernel(y, x)
        second = kernel(y, x)
    loops = [sum(launch.kind == "loop" for launch in call.launches) for call in prof.calls]
    assert loops == [2, 2]
    assert prof.calls[0].round_trips > loops[0] + 1 + clears  # the first call allocates through the host
    # the second reuses its buffers and replays the first one's launches and clear of `t` (no host fill):
    # a serial run per launch and clear and one (none per launch where launches are chained: the loop kernel's
    # last work group runs the serial kernel on), and one wait for the header
    launches = 0 if chained(device()) else loops[1]
    assert prof.calls[1].serial_runs == launches + 1 + clears and prof.calls[1].round_trips == 1
    assert sum(launch.kind == "fill" for launch in prof.calls[1].launches) == clears
    t = np.sin(x) * x
    np.testing.assert_allclose(y, t * np.roll(t, -1), rtol=1e-14)
    assert first == pytest.approx(t.sum(), rel=1e-12) and second == first


def test_calls_on_other_arrays_see_their_own_arguments():
    """The runner keeps the arguments it set; every call on new arrays (numpy or device) must reset them."""
    kernel = iz.kernel(smooth, backend="opencl")
    rng = np.random.default_rng(3)
    for trial in range(4):
        x = rng.random(3000 + 500 * (trial % 2))  # two shapes, alternating
        y = np.zeros_like(x)
        arguments = (iz.to_device(y), iz.to_device(x)) if trial >= 2 else (y, x)
        total = kernel(*arguments)
        if trial >= 2:
            y = arguments[0].get()
        t = np.sin(x) * x
        np.testing.assert_allclose(y, t * np.roll(t, -1), rtol=1e-14, err_msg=f"trial {trial}")
        assert total == pytest.approx(t.sum(), rel=1e-12)


def test_repeated_gradients_with_large_zeroed_shadows_match_llvm():
    """The gradient's shadow of `t` is a zeroed array of n > SERIAL_CLEAR_LIMIT elements, in buffers the
    calls after the first reuse: every call's gradient equals `llvm`'s. (The reverse pass leaves that
    shadow zero, so this does not isolate the clearing: the histogram tests above do.)"""
    n = 3 * SERIAL_CLEAR_LIMIT
    x = np.random.default_rng(4).random(n)
    on_cpu = iz.kernel(smooth, backend="llvm")
    on_opencl = iz.kernel(smooth, backend="opencl")
    dy = np.random.default_rng(5).random(n)
    expected = np.zeros(n)
    iz.autodiff(on_cpu, Duplicated(np.zeros(n), dy.copy()), Duplicated(x, expected))
    for call in range(3):
        dx = np.zeros(n)
        iz.autodiff(on_opencl, Duplicated(np.zeros(n), dy.copy()), Duplicated(x, dx))
        np.testing.assert_allclose(dx, expected, rtol=1e-12, atol=1e-14, err_msg=f"call {call}")


def reciprocal(y: Array[f64], x: Array[f64]):
    for i in iz.prange(len(x)):
        y[i] = 1.0 / x[i]


def test_a_small_numpy_argument_of_zeros_is_filled_on_the_device_and_keeps_its_signs():
    """A numpy argument of at most `ZEROS_FILLED` bytes, all zero, is a fill on the device instead of a copy
    (`Runner._upload`): after a call that left other values in its buffer, it is zero again; -0.0 is not
    zero bytes and is copied (1 / -0.0 is -inf)."""
    from isozyme.runtime.opencl_launches import ZEROS_FILLED

    kernel = iz.kernel(reciprocal, backend="opencl")
    n = ZEROS_FILLED // 8
    for x in (np.linspace(1.0, 2.0, n), np.zeros(n), np.where(np.arange(n) % 2 == 0, -0.0, 0.0),
              np.arange(1.0, n + 1.0), np.zeros(n), np.zeros(n + 1)):
        y = np.zeros_like(x)
        with iz.profile() as prof, np.errstate(divide="ignore"):
            kernel(y, x)
            expected = 1.0 / x
        np.testing.assert_array_equal(y, expected)
        kinds = [launch.kind for launch in prof.calls[0].launches if launch.name.startswith("arg 1")]
        assert kinds == (["fill"] if x.size <= n and not np.signbit(x).any() and not x.any() else ["copy-in"])
