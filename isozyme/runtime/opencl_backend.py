"""The OpenCL backend (first slice): a kernel runs as one work item on an OpenCL device through pyopencl.

    entry = compile_opencl("norm", module, function, CodegenOptions())
    entry(out, x, 1000)             # checked arguments: copies arrays in, runs, copies them back

The device is the first whose platform or device name contains `ISOZYME_OPENCL_DEVICE` (case-insensitive),
by default the first CPU device (PoCL), else the first device. Programs are built once per source and
device (in memory). A call copies every array argument to a device buffer, runs `iz_entry` as a single
work item, copies the arrays back, then checks the error record: a failure raises the exception the
interpreter raises (`codegen/error_sites.py`). pyopencl is imported on first use only, and this path never
imports llvmlite.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.error_sites import PAYLOAD_WORDS
from isozyme.codegen.opencl import OpenCLProgram, emit_opencl
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.types import ArrayType, ScalarType

BUILD_OPTIONS = "-cl-fp32-correctly-rounded-divide-sqrt"
"""f32 division and sqrt correctly rounded, as in IEEE arithmetic (the interpreter's)."""


class OpenCLUnavailable(RuntimeError):
    """pyopencl or a matching OpenCL device is missing."""


@dataclass
class Device:
    """A chosen device with its context and queue."""

    context: Any
    queue: Any
    name: str


def _pyopencl() -> Any:
    try:
        import pyopencl
    except ImportError as error:
        raise OpenCLUnavailable("the opencl backend needs pyopencl (pip install pyopencl pocl-binary-distribution)") \
            from error
    return pyopencl


@functools.cache
def device(selector: str | None = None) -> Device:
    """The device that `selector` (or `ISOZYME_OPENCL_DEVICE`) names, by default the first CPU device."""
    cl = _pyopencl()
    wanted = (selector if selector is not None else os.environ.get("ISOZYME_OPENCL_DEVICE", "")).lower()
    try:
        candidates = [(p, d) for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error as error:
        raise OpenCLUnavailable(f"no OpenCL platform: {error}") from error
    if wanted:
        chosen = [(p, d) for p, d in candidates if wanted in p.name.lower() or wanted in d.name.lower()]
    else:
        chosen = [(p, d) for p, d in candidates if d.type & cl.device_type.CPU] or candidates
    if not chosen:
        raise OpenCLUnavailable(f"no OpenCL device matches ISOZYME_OPENCL_DEVICE={wanted!r}" if wanted
                                else "no OpenCL device")
    platform, dev = chosen[0]
    context = cl.Context([dev])
    return Device(context, cl.CommandQueue(context), f"{platform.name}: {dev.name}")


_PROGRAMS: dict[tuple[str, str], Any] = {}


def build(source: str, where: Device) -> Any:
    """The program built from `source` for `where`, cached per source and device."""
    key = (source, where.name)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = _pyopencl().Program(where.context, source).build(options=BUILD_OPTIONS)
    return _PROGRAMS[key]


def opencl_source(module: Module, function: Function, options: CodegenOptions) -> str:
    """The OpenCL C of `module` with `function` as the kernel (`iz.show_ir(kernel, stage="opencl")`)."""
    return emit_opencl(module, function, options).source


_SCALAR_DTYPES = {"i1": np.uint8, "i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}


def compile_opencl(module: Module, function: Function, options: CodegenOptions) -> Callable[..., object]:
    """A function running `function` on the OpenCL device on checked argument values (module docstring)."""
    program = emit_opencl(module, function, options)
    where = device()
    kernel = getattr(build(program.source, where), program.kernel_name)
    types = [arg.type for arg in function.args]
    return_type = function.return_type

    def run(*values: object) -> object:
        return _launch(where, kernel, program, types, return_type, values)
    return run


def _launch(where: Device, kernel: Any, program: OpenCLProgram, types: Sequence[Any], return_type: Any,
            values: Sequence[object]) -> object:
    cl = _pyopencl()
    flags = cl.mem_flags
    kernel_args: list[object] = []
    copies: list[tuple[Any, np.ndarray]] = []
    for ty, value in zip(types, values, strict=True):
        if isinstance(ty, ArrayType):
            array: np.ndarray = value  # type: ignore[assignment]
            host = array if array.size else np.zeros(1, dtype=array.dtype)  # no empty buffers in OpenCL
            buffer = cl.Buffer(where.context, flags.READ_WRITE | flags.COPY_HOST_PTR, hostbuf=host)
            kernel_args += [buffer, *(np.int64(extent) for extent in array.shape)]
            if array.size:
                copies.append((buffer, array))
        else:
            kernel_args.append(_SCALAR_DTYPES[str(ty)](value))
    record = np.zeros(1 + PAYLOAD_WORDS, dtype=np.int64)
    record_buffer = cl.Buffer(where.context, flags.READ_WRITE | flags.COPY_HOST_PTR, hostbuf=record)
    result = np.zeros(1, dtype=np.int64 if return_type.is_void else _SCALAR_DTYPES[str(return_type)])
    result_buffer = cl.Buffer(where.context, flags.READ_WRITE | flags.COPY_HOST_PTR, hostbuf=result)
    kernel(where.queue, (1,), None, *kernel_args, record_buffer, result_buffer)
    for buffer, array in copies:
        cl.enqueue_copy(where.queue, array, buffer)
    cl.enqueue_copy(where.queue, record, record_buffer)
    cl.enqueue_copy(where.queue, result, result_buffer, is_blocking=True)
    if record[0] != 0:
        raise program.sites[int(record[0]) - 1].exception([int(word) for word in record[1:]])
    if return_type.is_void:
        return None
    return _python_scalar(return_type, result[0])


def _python_scalar(ty: ScalarType, value: np.generic) -> object:
    if ty.is_bool:
        return bool(value)
    if ty.is_int:
        return int(value)
    return float(value)
