"""Device arrays (DESIGN 1.4 and 6): `iz.to_device(array)` copies a numpy array into an OpenCL buffer once,
so that OpenCL kernels can use it across calls without copying it in and out each time.

    x = iz.to_device(np.linspace(0.0, 1.0, 1000))   # a DeviceArray on opencl_device.device()
    norm(x, 1000)                                   # backend="opencl": no copy
    x.get()                                         # a new numpy array with the contents

A `DeviceArray` is C-contiguous and holds one of the kernel language's dtypes (bool, int32, int64, float32,
float64). OpenCL has no empty buffers, so a zero-length array owns a buffer of one element. Copies go
through the device's in-order queue, so they are ordered with the kernels launched on it; `get` and `set`
block until their copy is done. This module imports pyopencl (through `opencl_device.import_pyopencl`) on
first use only: argument checking imports it on every path, and it never imports llvmlite. It sits below
the OpenCL backend (`opencl_backend.py` imports it), never above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from isozyme.runtime.opencl_device import Device, device, import_pyopencl

DEVICE_DTYPES = tuple(np.dtype(name) for name in ("bool", "int32", "int64", "float32", "float64"))
"""The dtypes a device array may hold: those of the kernel language's scalar types."""


@dataclass(eq=False)
class DeviceArray:
    """A C-contiguous array living in an OpenCL buffer (module docstring)."""

    data: Any
    """The `pyopencl.Buffer` holding the elements, in C order (at least one element's bytes)."""
    shape: tuple[int, ...]
    """The extent of each dimension, as numpy gives it."""
    dtype: np.dtype
    """The element type, one of `DEVICE_DTYPES`."""
    where: Device
    """The device (with its context and queue) that owns `data`."""

    def __post_init__(self) -> None:
        self.shape = tuple(int(extent) for extent in self.shape)
        self.dtype = np.dtype(self.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d device array")  # numpy's rule for 0-d arrays
        return self.shape[0]

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, device={self.where.name!r})"

    def get(self) -> np.ndarray:
        """A new numpy array with the contents (a blocking copy from the device)."""
        host = np.empty(self.shape, dtype=self.dtype)
        if self.size:
            import_pyopencl().enqueue_copy(self.where.queue, host, self.data, is_blocking=True)
        return host

    def set(self, array: np.ndarray) -> None:
        """Copy `array`, a numpy array of this shape and dtype, in (TypeError or ValueError otherwise)."""
        if not isinstance(array, np.ndarray):
            raise TypeError(f"DeviceArray.set takes a numpy array, not {type(array).__name__}")
        if array.dtype != self.dtype:
            raise TypeError(f"DeviceArray.set needs dtype {self.dtype.name}, got {_dtype_text(array.dtype)}")
        if array.shape != self.shape:
            raise ValueError(f"DeviceArray.set needs shape {self.shape}, got {array.shape}")
        if self.size:
            import_pyopencl().enqueue_copy(self.where.queue, self.data, _c_contiguous(array), is_blocking=True)

    def copy(self) -> DeviceArray:
        """A new device array with the same contents (copied on the device, not through the host)."""
        cl = import_pyopencl()
        data = cl.Buffer(self.where.context, cl.mem_flags.READ_WRITE, _buffer_bytes(self.size, self.dtype))
        if self.size:
            cl.enqueue_copy(self.where.queue, data, self.data, byte_count=self.nbytes)
        return DeviceArray(data, self.shape, self.dtype, self.where)

    def shares_buffer(self, other: DeviceArray) -> bool:
        """Whether the two device arrays live in the same OpenCL buffer (then they share memory)."""
        return self.data is other.data or self.data == other.data


def to_device(array: object) -> DeviceArray:
    """A new device array on `opencl_device.device()` holding a copy of `array` (anything `np.asarray`
    takes, of a dtype in `DEVICE_DTYPES`: TypeError naming the dtype otherwise); a DeviceArray as it is.

    The data is on the device when it returns: a new buffer, then `set` (a blocking copy). A buffer made
    with `COPY_HOST_PTR` instead left NVIDIA's driver to move the data inside the enqueue of the first
    kernel that used it: on an H200, six arrays of 512 MiB took 2.1-2.6 s to make (1.2-1.5 GB/s) and the
    first elementwise gradient on them 613-650 ms, against 0.31-0.34 s (9.5-10.6 GB/s) and 2.1-3.3 ms
    this way; the next calls took 1.5-2.1 ms either way."""
    if isinstance(array, DeviceArray):
        return array
    host = np.asarray(array)
    if host.dtype not in DEVICE_DTYPES:
        names = ", ".join(dtype.name for dtype in DEVICE_DTYPES[:-1])
        raise TypeError(f"iz.to_device takes arrays of dtype {names} or {DEVICE_DTYPES[-1].name}, "
                        f"not {_dtype_text(host.dtype)}")
    where = device()
    cl = import_pyopencl()
    data = cl.Buffer(where.context, cl.mem_flags.READ_WRITE, _buffer_bytes(host.size, host.dtype))
    on_device = DeviceArray(data, host.shape, host.dtype, where)
    on_device.set(host)
    return on_device


def _c_contiguous(array: np.ndarray) -> np.ndarray:
    # Not np.ascontiguousarray, which has turned 0-d arrays into 1-d ones in some numpy versions.
    return array if array.flags.c_contiguous else array.copy(order="C")


def _buffer_bytes(size: int, dtype: np.dtype) -> int:
    return max(size, 1) * dtype.itemsize


def _dtype_text(dtype: np.dtype) -> str:
    """The dtype's name, with its byte order where that is not the machine's ('>f8' is not float64 here)."""
    from isozyme.ssa.interpreter import dtype_text
    return dtype_text(dtype)
