"""Checking a kernel's arguments at the call (DESIGN 1.1), before any backend sees them.

Arrays must be numpy arrays of exactly the parameter's dtype and number of dimensions, C-contiguous, and
no two array arguments may share memory (the optimizer assumes distinct arrays do not overlap, like
`restrict` in C): `TypeError` for the wrong kind, dtype (naming a byte order that is not the machine's) or
rank, `ValueError` for layout and overlap.
A read-only numpy array is accepted where the kernel only reads it; where it may write it
(`writable_parameters`: the memory effects that `optimize/function_attributes.py` infers for the compiled
entry, so a gradient's shadows count as written) it is a `ValueError`, raised before anything runs.
Where the backend runs on OpenCL (`device_arrays=True`) an array parameter also takes a `DeviceArray`
(`iz.to_device`), checked for dtype and rank alike and passed on as it is; two parameters given the same
device buffer overlap. Elsewhere a device array is a `TypeError` pointing to `.get()`.
Scalars: a float parameter takes any real number (an integer too large for its type is an `OverflowError`; a
float rounds, 1e300 to inf as an f32), an integer parameter an integer (not a float: no silent truncation)
in its range (`OverflowError` naming the range otherwise), a boolean parameter a bool. Every message names the
parameter and the kernel. The per-value checks are the interpreter's (`ssa.interpreter.check_array`,
`check_scalar`), so `isozyme run` and kernels accept the same values.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from isozyme.runtime.device_array import DeviceArray
from isozyme.ssa import interpreter
from isozyme.ssa.types import ArrayType, Type

if TYPE_CHECKING:
    from isozyme.ssa.ir import Function, Module

Scalar = int | float | bool


@dataclass(frozen=True)
class Parameter:
    name: str
    type: Type


def bind(kernel: str, params: Sequence[Parameter], args: Sequence[object],
         kwargs: Mapping[str, object]) -> list[object]:
    """Arguments in parameter order, from positional and keyword arguments, as Python binds them."""
    if not kwargs and len(args) == len(params):
        return list(args)
    names = [p.name for p in params]
    signature = f"kernel '{kernel}' takes {len(params)} argument(s) ({', '.join(names)})"
    if len(args) > len(params):
        raise TypeError(f"{signature}, got {len(args) + len(kwargs)}")
    bound = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            raise TypeError(f"{'unexpected' if key not in names else 'repeated'} argument '{key}': {signature}")
        bound[key] = value
    missing = [n for n in names if n not in bound]
    if missing:
        raise TypeError(f"{signature}; missing: {', '.join(missing)}")
    return [bound[n] for n in names]


def check_array(kernel: str, param: Parameter, value: object,
                device_arrays: bool = False) -> np.ndarray | DeviceArray:
    """The interpreter's array check (kind, dtype, rank), plus C-contiguity for compiled code; a device
    array where `device_arrays` allows it (module docstring)."""
    if isinstance(value, DeviceArray):
        if not device_arrays:
            raise TypeError(f"{_where(kernel, param)} got an iz.DeviceArray: device arrays run on "
                            f"backend=\"opencl\"; {param.name}.get() gives a numpy array")
        return check_device_array(kernel, param, value)
    where = _where(kernel, param)
    array = interpreter.check_array(where, param.type, value, param.name)  # type: ignore[arg-type]
    if not array.flags.c_contiguous:
        raise ValueError(f"{where} must be C-contiguous; pass np.ascontiguousarray({param.name})")
    return array


def check_device_array(kernel: str, param: Parameter, value: DeviceArray) -> DeviceArray:
    """`value` if its dtype and rank are the parameter's, TypeError otherwise, in `interpreter.check_array`'s
    words (a device array is C-contiguous by construction)."""
    ty: ArrayType = param.type  # type: ignore[assignment]
    dtype = ty.element.numpy_dtype
    if value.dtype != dtype:
        raise TypeError(f"{_where(kernel, param)} must have dtype {dtype.name}, got {value.dtype.name}")
    if value.ndim != ty.rank:
        raise TypeError(f"{_where(kernel, param)} must be a {ty.rank}-D array, got {value.ndim}-D")
    return value


def check_scalar(kernel: str, param: Parameter, value: object) -> Scalar:
    return interpreter.check_scalar(_where(kernel, param), param.type, value)  # type: ignore


def _where(kernel: str, param: Parameter) -> str:
    return f"parameter '{param.name}' of kernel '{kernel}'"


def check_arguments(kernel: str, params: Sequence[Parameter], args: Sequence[object],
                    kwargs: Mapping[str, object] | None = None, device_arrays: bool = False,
                    writable: Collection[int] = ()) -> list[object]:
    """The checked argument values in parameter order; `device_arrays` lets array parameters take
    DeviceArrays, for the OpenCL backend; `writable`: the positions of the array parameters the kernel may
    write, which refuse read-only numpy arrays (module docstring)."""
    values = bind(kernel, params, args, kwargs or {})
    checked: list[object] = []
    for param, value in zip(params, values, strict=True):
        if isinstance(param.type, ArrayType):
            checked.append(check_array(kernel, param, value, device_arrays))
        else:
            checked.append(check_scalar(kernel, param, value))
    check_no_overlap(kernel, params, checked)
    check_writable(kernel, params, checked, writable)
    return checked


def check_writable(kernel: str, params: Sequence[Parameter], values: Sequence[object],
                   writable: Collection[int]) -> None:
    """ValueError for a read-only numpy array at a position in `writable` (device arrays are always
    writable)."""
    for position in sorted(writable):
        value = values[position]
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            name = params[position].name
            raise ValueError(f"parameter '{name}' of kernel '{kernel}' is read-only, but the kernel may write it; "
                             f"pass a writable array ({name}.copy())")


def writable_parameters(module: Module, entry: Function) -> frozenset[int]:
    """The positions of `entry`'s array parameters that it, or a function it calls, may write."""
    from isozyme.optimize.function_attributes import module_memory_effects  # not on a warm start's path

    return frozenset(module_memory_effects(module)[entry].writes)


def check_no_overlap(kernel: str, params: Sequence[Parameter], values: Sequence[object]) -> None:
    """Two array arguments must not share memory (for C-contiguous arrays `may_share_memory` is exact; device
    arrays share memory when they share a buffer, and never with a numpy array)."""
    arrays: list[tuple[str, np.ndarray]] = []
    buffers: dict[int, str] = {}  # device arrays: by their buffer's handle
    for param, value in zip(params, values, strict=True):
        if isinstance(value, DeviceArray):
            other = buffers.setdefault(value.data.int_ptr, param.name)
            if other != param.name:
                _overlap(kernel, other, param.name)
        elif isinstance(value, np.ndarray):
            arrays.append((param.name, value))
    for i, (name_a, a) in enumerate(arrays):
        for name_b, b in arrays[i + 1:]:
            if np.may_share_memory(a, b):
                _overlap(kernel, name_a, name_b)


def _overlap(kernel: str, name_a: str, name_b: str) -> None:
    raise ValueError(f"parameters '{name_a}' and '{name_b}' of kernel '{kernel}' share memory; "
                     "isozyme assumes distinct array arguments do not overlap")
