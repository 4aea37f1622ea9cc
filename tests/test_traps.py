"""Operations that fail keep failing after optimization (docs/bad_input.md, "What traps").

An allocation with a negative extent or a size that overflows, an index out of bounds in checked mode and
an integer division by zero raise at every opt level and on every backend, with the kernel's line; the
optimizer deletes or moves them only where it proves they cannot fail. Each expected error is the one the
unoptimized program raises on the reference interpreter (`O0`, interp), and the messages name the real
shape."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64, i64

BACKENDS = ["interp", "llvm", "opencl"]
OPT_LEVELS = ["O0", "O2"]


@iz.kernel
def first_of_fresh(n: i64) -> f64:
    a = iz.zeros(n, f64)
    a[0] = 1.0
    return a[0]


@iz.kernel
def column_sum(n: i64, m: i64) -> f64:
    a = iz.zeros((n, m), f64)
    a[0, 0] = 1.0
    s = 0.0
    for i in range(n):
        s += a[i, 0]
    return s


@iz.kernel
def unused_quotient(n: i64, d: i64) -> f64:
    q = n // d
    return 1.0


@iz.kernel(boundscheck=True)
def peek(x: Array[f64], i: i64) -> f64:
    v = x[i]
    return 1.0


@iz.kernel(boundscheck=True)
def checked_get(x: Array[f64], i: i64) -> f64:
    return x[i]


@iz.kernel
def calls_checked_get(x: Array[f64], i: i64) -> f64:
    return 2.0 * checked_get(x, i)


@iz.kernel
def scaled_scratch(x: Array[f64], n: i64) -> f64:
    t = iz.zeros(n, f64)
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


@iz.kernel
def squares_after_a_quotient(x: Array[f64], d: i64) -> f64:
    q = x.shape[0] // d
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


@iz.kernel(boundscheck=True)
def square_after_a_peek(x: Array[f64], i: i64) -> f64:
    v = x[i]
    return x[0] * x[0]


def run(kernel: iz.Kernel, backend: str, opt: str, *args: object) -> object:
    return kernel.compile(backend, opt)(*args)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_a_negative_extent_raises_at_every_opt_level(backend: str, opt: str) -> None:
    assert run(first_of_fresh, backend, opt, 3) == 1.0
    with pytest.raises(ValueError, match=r"test_traps.py:\d+:\d+: alloc: negative extent in shape \(-5,\)"):
        run(first_of_fresh, backend, opt, -5)


HUGE_SHAPES = [(2**60,), (2**61,), (2**63 - 1,), (2**60, 1), (2**61, 1), (2**32, 2**32), (2**62, 3), (3, 2**62)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opt", OPT_LEVELS)
@pytest.mark.parametrize("shape", HUGE_SHAPES, ids=str)
def test_a_size_that_overflows_names_the_shape(backend: str, opt: str, shape: tuple[int, ...]) -> None:
    """Sizes of 2**63 bytes and more: MemoryError with the shape as written, its exact size in bytes and
    the overflow, never a wrong sign, a lost axis, a crash or a value. The 1-D array is unused after O2
    (only its check is left), the 2-D one is placed in the arena."""
    kernel = first_of_fresh if len(shape) == 1 else column_sum
    size = 8 * int(np.prod(shape, dtype=object))
    expected = (rf"test_traps.py:\d+:\d+: alloc: cannot allocate a local array of shape "
                rf"\({', '.join(map(str, shape))},?\) of f64: {size} bytes, more than a 64-bit size can hold")
    with pytest.raises(MemoryError, match=expected):
        run(kernel, backend, opt, *shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_an_unused_division_by_zero_raises(backend: str, opt: str) -> None:
    assert run(unused_quotient, backend, opt, 7, 2) == 1.0
    with pytest.raises(ZeroDivisionError, match=r"test_traps.py:\d+:\d+: ifloordiv"):
        run(unused_quotient, backend, opt, 7, 0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_an_unused_checked_load_still_checks(backend: str, opt: str) -> None:
    x = np.ones(4)
    assert run(peek, backend, opt, x, 3) == 1.0
    with pytest.raises(IndexError, match=r"test_traps.py:\d+:\d+: load: index \(4,\) is out of bounds"):
        run(peek, backend, opt, x, 4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_a_checked_callee_checks_when_inlined_into_an_unchecked_caller(backend: str, opt: str) -> None:
    x = np.arange(4.0)
    assert run(calls_checked_get, backend, opt, x, 3) == 6.0
    lines, first = inspect.getsourcelines(checked_get.py_func)
    line = first + next(k for k, text in enumerate(lines) if "return x[i]" in text)
    with pytest.raises(IndexError, match=rf"test_traps.py:{line}:\d+: load: index \(7,\) is out of bounds"):
        run(calls_checked_get, backend, opt, x, 7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_gradient_keeps_the_allocations_check(backend: str) -> None:
    """The reverse pass allocates nothing for the unused scratch array, yet its bad extent still fails."""
    x = np.arange(3.0)
    gradient = iz.grad(scaled_scratch, backend=backend)
    assert np.allclose(gradient(x, 2), 2 * x)
    with pytest.raises(ValueError, match=r"test_traps.py:\d+:\d+: alloc: negative extent in shape \(-1,\)"):
        gradient(x, -1)


@pytest.mark.parametrize("backend", ["opencl"])
def test_more_than_the_devices_largest_buffer_names_the_limit(backend: str) -> None:
    """A size that fits 64 bits but not one buffer of the device: MemoryError naming the alloc's line and
    CL_DEVICE_MAX_MEM_ALLOC_SIZE, raised before anything is allocated."""
    from isozyme.runtime.opencl_device import device

    rows = device().largest_buffer // 8 + 1
    with pytest.raises(MemoryError, match=r"test_traps.py:\d+:\d+: alloc: cannot allocate \d+ bytes of local "
                                          r"arrays on .*CL_DEVICE_MAX_MEM_ALLOC_SIZE"):
        run(column_sum, backend, "O2", rows, 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opt", ["none", "pre", "post"])
def test_gradients_keep_the_traps_of_the_primal(backend: str, opt: str) -> None:
    """An unused division and an unused checked load take no part in the derivative, yet the gradient
    fails where the kernel does."""
    x = np.arange(3.0)
    assert np.allclose(iz.grad(squares_after_a_quotient, backend=backend, opt=opt)(x, 2), 2 * x)
    with pytest.raises(ZeroDivisionError, match=r"test_traps.py:\d+:\d+: ifloordiv"):
        iz.grad(squares_after_a_quotient, backend=backend, opt=opt)(x, 0)
    with pytest.raises(IndexError, match=r"test_traps.py:\d+:\d+: load: index \(9,\) is out of bounds"):
        iz.grad(square_after_a_peek, backend=backend, opt=opt)(x, 9)
