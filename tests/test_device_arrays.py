"""Device arrays (`iz.to_device`, `iz.DeviceArray`) and how argument checking and `_check_shadow` treat them.

Skipped, with the reason, where pyopencl or an OpenCL device is missing (PoCL gives a CPU device). Round
trips compare with the numpy arrays the tests build; the argument checks run `check_arguments` directly,
with and without `device_arrays`.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

import isozyme as iz
from isozyme.runtime.arguments import Parameter, check_arguments
from isozyme.runtime.autodiff import Duplicated, _check_shadow
from isozyme.ssa.types import F32, F64, I32, ArrayType

pytest.importorskip("pyopencl", reason="device arrays need pyopencl")
from isozyme.runtime.opencl_device import OpenCLUnavailable, device  # noqa: E402

try:
    device()
except OpenCLUnavailable as error:  # pragma: no cover - depends on the machine
    pytest.skip(f"no OpenCL device: {error}", allow_module_level=True)

ROUND_TRIPS = {
    "bool": np.array([True, False, False, True, True]),
    "int32": np.array([-2147483648, -1, 0, 7, 2147483647], dtype=np.int32),
    "int64": np.array([-(2**63), -1, 0, 2**40 + 3, 2**63 - 1], dtype=np.int64),
    "float32": np.array([-1.5, 0.0, 3.25e-30, np.inf, 1e30], dtype=np.float32),
    "float64": np.array([-0.0, 1e-300, np.pi, -np.inf, 1.0e300], dtype=np.float64),
}
"""One array per supported dtype, with the extremes of its range."""


@pytest.mark.parametrize("dtype", ROUND_TRIPS)
def test_round_trip_of_every_dtype(dtype: str) -> None:
    host = ROUND_TRIPS[dtype]
    on_device = iz.to_device(host)
    assert isinstance(on_device, iz.DeviceArray)
    assert on_device.dtype == np.dtype(dtype) and on_device.shape == (5,)
    back = on_device.get()
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, host)
    assert back is not host


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 5), (2, 1, 3, 4)])
def test_round_trip_of_ranks_one_to_four(shape: tuple[int, ...]) -> None:
    host = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) * 0.5 - 3.0
    on_device = iz.to_device(host)
    assert (on_device.shape, on_device.ndim, on_device.size) == (shape, len(shape), host.size)
    assert on_device.nbytes == host.size * 8 and len(on_device) == shape[0]
    np.testing.assert_array_equal(on_device.get(), host)


def test_a_non_contiguous_array_arrives_in_c_order() -> None:
    host = np.arange(12, dtype=np.int32).reshape(3, 4)
    on_device = iz.to_device(host.T)
    assert on_device.shape == (4, 3)
    np.testing.assert_array_equal(on_device.get(), np.array([[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]]))


def test_to_device_copies_before_it_returns() -> None:
    # The device array holds the values of the call: writing the host array afterwards, or dropping the
    # C-ordered temporary made for a transposed one, changes nothing in it.
    host = np.arange(1 << 16, dtype=np.float64)
    on_device = iz.to_device(host)
    transposed = iz.to_device(host.reshape(256, 256).T)
    host[:] = -1.0
    expected = np.arange(1 << 16, dtype=np.float64)
    np.testing.assert_array_equal(on_device.get(), expected)
    np.testing.assert_array_equal(transposed.get(), expected.reshape(256, 256).T)


def test_a_zero_length_array() -> None:
    on_device = iz.to_device(np.zeros((0,), dtype=np.int64))
    assert (on_device.shape, on_device.size, on_device.nbytes, len(on_device)) == ((0,), 0, 0, 0)
    back = on_device.get()
    assert back.shape == (0,) and back.dtype == np.int64
    on_device.set(np.zeros((0,), dtype=np.int64))
    assert on_device.copy().get().shape == (0,)


def test_a_list_takes_numpys_default_dtype() -> None:
    on_device = iz.to_device([[1.0, 2.0], [3.0, 4.0]])
    assert on_device.dtype == np.float64 and on_device.shape == (2, 2)
    np.testing.assert_array_equal(on_device.get(), np.array([[1.0, 2.0], [3.0, 4.0]]))


def test_a_device_array_is_returned_unchanged() -> None:
    on_device = iz.to_device(np.ones(3))
    assert iz.to_device(on_device) is on_device


def test_a_zero_dimensional_array_has_no_len() -> None:
    on_device = iz.to_device(np.float32(2.5))
    assert on_device.shape == () and on_device.size == 1
    assert on_device.get()[()] == np.float32(2.5)
    with pytest.raises(TypeError, match="0-d"):
        len(on_device)


@pytest.mark.parametrize("value, name", [(np.zeros(3, dtype=np.float16), "float16"),
                                         (np.zeros(3, dtype=np.uint8), "uint8"),
                                         (np.zeros(3, dtype=np.complex128), "complex128"),
                                         (np.zeros(3, dtype=">f8"), "float64 in big-endian byte order (>f8)"),
                                         (["a", "b"], "str")])
def test_an_unsupported_dtype_is_a_type_error_naming_it(value: object, name: str) -> None:
    with pytest.raises(TypeError, match=re.escape(f"dtype bool, int32, int64, float32 or float64, not {name}")):
        iz.to_device(value)


def test_set_copies_in() -> None:
    on_device = iz.to_device(np.zeros((2, 3), dtype=np.int32))
    on_device.set(np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32))
    np.testing.assert_array_equal(on_device.get(), np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32))
    on_device.set(np.array([[1, 4], [2, 5], [3, 6]], dtype=np.int32).T)  # not C-contiguous
    np.testing.assert_array_equal(on_device.get(), np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32))


def test_set_refuses_another_shape_dtype_or_kind() -> None:
    on_device = iz.to_device(np.zeros((2, 3), dtype=np.int32))
    with pytest.raises(ValueError, match=r"shape \(2, 3\), got \(3, 2\)"):
        on_device.set(np.zeros((3, 2), dtype=np.int32))
    with pytest.raises(TypeError, match="dtype int32, got int64"):
        on_device.set(np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(TypeError, match="numpy array, not list"):
        on_device.set([[0, 0, 0], [0, 0, 0]])  # type: ignore[arg-type]


def test_copy_is_independent() -> None:
    original = iz.to_device(np.array([1.0, 2.0, 3.0]))
    duplicate = original.copy()
    assert duplicate.data is not original.data and not duplicate.shares_buffer(original)
    original.set(np.array([9.0, 9.0, 9.0]))
    np.testing.assert_array_equal(duplicate.get(), np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(original.get(), np.array([9.0, 9.0, 9.0]))
    assert (duplicate.shape, duplicate.dtype, duplicate.where) == ((3,), np.float64, original.where)


def test_repr_names_shape_dtype_and_device() -> None:
    on_device = iz.to_device(np.zeros((2, 5), dtype=np.float32))
    assert repr(on_device) == f"DeviceArray(shape=(2, 5), dtype=float32, device={device().name!r})"


PARAMS = [Parameter("out", ArrayType(F64, 1)), Parameter("x", ArrayType(F64, 2)), Parameter("n", I32)]
"""A kernel `k(out: Array[f64], x: Array[f64, 2], n: i32)` as check_arguments sees it."""


def test_device_arrays_pass_unconverted_where_allowed() -> None:
    out, x = iz.to_device(np.zeros(4)), iz.to_device(np.ones((2, 2)))
    checked = check_arguments("k", PARAMS, (out, x, 3), device_arrays=True)
    assert checked[0] is out and checked[1] is x and checked[2] == 3


def test_device_and_numpy_arrays_mix() -> None:
    out, x = np.zeros(4), iz.to_device(np.ones((2, 2)))
    checked = check_arguments("k", PARAMS, (), {"out": out, "x": x, "n": 3}, device_arrays=True)
    assert checked[0] is out and checked[1] is x


def test_a_device_array_of_the_wrong_dtype() -> None:
    with pytest.raises(TypeError, match="parameter 'out' of kernel 'k' must have dtype float64, got float32"):
        check_arguments("k", PARAMS, (iz.to_device(np.zeros(4, dtype=np.float32)), np.ones((2, 2)), 3),
                        device_arrays=True)


def test_a_device_array_of_the_wrong_rank() -> None:
    with pytest.raises(TypeError, match="parameter 'x' of kernel 'k' must be a 2-D array, got 1-D"):
        check_arguments("k", PARAMS, (np.zeros(4), iz.to_device(np.ones(4)), 3), device_arrays=True)


def test_the_same_device_array_twice() -> None:
    same = iz.to_device(np.zeros(4))
    params = [Parameter("y", ArrayType(F64, 1)), Parameter("x", ArrayType(F64, 1))]
    with pytest.raises(ValueError, match="parameters 'y' and 'x' of kernel 'k' share memory"):
        check_arguments("k", params, (same, same), device_arrays=True)
    alias = iz.DeviceArray(same.data, same.shape, same.dtype, same.where)
    with pytest.raises(ValueError, match="parameters 'y' and 'x' of kernel 'k' share memory"):
        check_arguments("k", params, (same, alias), device_arrays=True)
    assert len(check_arguments("k", params, (same, same.copy()), device_arrays=True)) == 2


def test_a_device_array_where_numpy_arrays_are_needed() -> None:
    x = iz.to_device(np.ones((2, 2)))
    message = r"""parameter 'x' of kernel 'k' got an iz.DeviceArray: device arrays run on backend="opencl"; """ \
              r"x\.get\(\) gives a numpy array"
    with pytest.raises(TypeError, match=message):
        check_arguments("k", PARAMS, (np.zeros(4), x, 3))


def test_numpy_arrays_keep_their_checks_with_device_arrays_allowed() -> None:
    with pytest.raises(ValueError, match="must be C-contiguous"):
        check_arguments("k", PARAMS, (np.zeros(8)[::2], np.ones((2, 2)), 3), device_arrays=True)
    with pytest.raises(TypeError, match="must be a 1-D float64 array, got list"):
        check_arguments("k", PARAMS, ([0.0], np.ones((2, 2)), 3), device_arrays=True)


STUB_KERNEL = SimpleNamespace(definition=SimpleNamespace(name="k"))
"""What `_check_shadow` reads of a kernel: its name."""
X = Parameter("x", ArrayType(F32, 1))


@pytest.mark.parametrize("primal_on_device", [False, True], ids=["numpy_primal", "device_primal"])
def test_a_device_array_shadow(primal_on_device: bool) -> None:
    value = np.zeros(3, dtype=np.float32)
    value = iz.to_device(value) if primal_on_device else value
    _check_shadow(STUB_KERNEL, X, Duplicated(value, iz.to_device(np.ones(3, dtype=np.float32))))  # type: ignore
    with pytest.raises(ValueError, match=r"the shadow of parameter 'x' of kernel 'k' must have the array's dtype "
                                         r"and shape \(float32, \(3,\)\), not \(float64, \(3,\)\)"):
        _check_shadow(STUB_KERNEL, X, Duplicated(value, iz.to_device(np.ones(3))))  # type: ignore
    with pytest.raises(ValueError, match=r"\(float32, \(3,\)\), not \(float32, \(4,\)\)"):
        _check_shadow(STUB_KERNEL, X, Duplicated(value, iz.to_device(np.ones(4, dtype=np.float32))))  # type: ignore


def test_a_shadow_of_another_kind_is_refused() -> None:
    primal = iz.to_device(np.zeros(3, dtype=np.float32))
    with pytest.raises(TypeError, match="the shadow of parameter 'x' of kernel 'k' must be a numpy array or an "
                                        "iz.DeviceArray, not list"):
        _check_shadow(STUB_KERNEL, X, Duplicated(primal, [0.0, 0.0, 0.0]))  # type: ignore
