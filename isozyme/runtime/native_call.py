"""Calling compiled kernels from Python: one generated Python function per compiled kernel.

The call path is built once (`make_entry`): ctypes function objects with fixed argument types for the
`__fast` and `__raw` entry points (`codegen/llvm_entry.py`), and a Python function, generated from source,
with the kernel's own parameter names, so Python binds positional and keyword arguments itself:

    def norm(out, x, n):
        if n.__class__ is not int or not -9223372036854775808 <= n <= 9223372036854775807:
            n = _iz_scalar_2(n)
        _iz_record = _iz_Record()
        _iz_result = _iz_fast(_iz_record, _iz_constants, out, x, n)
        if _iz_record.status:
            return _iz_finish(_iz_record, (out, x, n))
        return _iz_result

Scalars take the fast test of their exact Python type (`float`, `int` in range, `bool`); anything else goes
through the full check (`arguments.check_scalar`: numpy scalars, ints for float parameters, or the error).
Arrays go to `__fast` as objects, which validates them in compiled code. A status of `NEEDS_CHECKED_CALL`
sends the call to `checked_call`: the Python checks of `arguments.py` (raising the error that names the
parameter), then `__raw` with pointers; any other status is a run-time failure, raised as the exception
of its error site. ctypes releases the GIL while compiled code runs.

The fast path reads numpy's array struct at fixed offsets; `array_layout_matches()` checks them against
the running numpy and CPython once, and without a match every call takes the checked path.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from isozyme.codegen.abi import ARRAY_OBJECT, DTYPE_SLOTS, NEEDS_CHECKED_CALL
from isozyme.codegen.error_sites import PAYLOAD_WORDS, ErrorSite
from isozyme.runtime.arguments import Parameter, check_arguments, check_scalar
from isozyme.ssa.types import SCALAR_TYPES, ArrayType, ScalarType, Type


class Record(ctypes.Structure):
    """The error record of one call (`codegen/llvm_types.py`)."""

    _fields_ = [("status", ctypes.c_int64), ("payload", ctypes.c_int64 * PAYLOAD_WORDS)]


C_TYPES: dict[str, type] = {"i1": ctypes.c_bool, "i32": ctypes.c_int32, "i64": ctypes.c_int64,
                            "f32": ctypes.c_float, "f64": ctypes.c_double}


@functools.cache
def array_layout_matches() -> bool:
    """Do numpy arrays in this process have the field offsets that `__fast` reads?"""
    probe = np.zeros((3, 5), dtype=np.float64)
    base = id(probe)

    def word(offset: int, ctype: type = ctypes.c_int64) -> int:
        return ctype.from_address(base + offset).value  # type: ignore[attr-defined]
    try:
        shape = ctypes.cast(word(ARRAY_OBJECT["shape"]), ctypes.POINTER(ctypes.c_int64))
        return (word(ARRAY_OBJECT["type"]) == id(np.ndarray) and word(ARRAY_OBJECT["data"]) == probe.ctypes.data
                and word(ARRAY_OBJECT["ndim"], ctypes.c_int32) == 2 and (shape[0], shape[1]) == (3, 5)
                and word(ARRAY_OBJECT["descr"]) == id(probe.dtype)
                and word(ARRAY_OBJECT["flags"], ctypes.c_int32) == probe.flags.num)
    except (ValueError, OverflowError):
        return False


@functools.cache
def constants_table() -> ctypes.Array:
    """`ndarray`'s type object, then the canonical dtype objects in `DTYPE_SLOTS` order."""
    objects = [np.ndarray, *(SCALAR_TYPES[name].numpy_dtype for name in DTYPE_SLOTS)]
    return (ctypes.c_void_p * len(objects))(*map(id, objects))


@dataclass
class NativeSignature:
    """What the call path needs to know about a compiled kernel."""

    name: str
    params: list[Parameter]
    return_type: Type
    writable: frozenset[int]
    """Positions of the array parameters the kernel may write."""
    sites: list[ErrorSite]


def _c_return(ty: Type) -> type | None:
    return None if ty.is_void else C_TYPES[str(ty)]


def make_entry(signature: NativeSignature, fast_address: int, raw_address: int) -> Callable[..., object]:
    """The Python function that calls the compiled kernel (module docstring)."""
    params, restype = signature.params, _c_return(signature.return_type)
    raw_args: list[type] = [ctypes.POINTER(Record)]
    fast_args: list[type] = [ctypes.POINTER(Record), ctypes.c_void_p]
    for param in params:
        if isinstance(param.type, ArrayType):
            raw_args += [ctypes.c_void_p, *([ctypes.c_int64] * param.type.rank)]
            fast_args.append(ctypes.py_object)
        else:
            raw_args.append(C_TYPES[str(param.type)])
            fast_args.append(C_TYPES[str(param.type)])
    raw = ctypes.CFUNCTYPE(restype, *raw_args)(raw_address)
    fast = ctypes.CFUNCTYPE(restype, *fast_args)(fast_address)

    def finish(record: Record, args: Sequence[object]) -> object:
        if record.status == NEEDS_CHECKED_CALL:
            return checked_call(signature, raw, args)
        raise raised(signature, record)

    return _generate(signature, fast, finish, lambda *args: checked_call(signature, raw, args))


def raised(signature: NativeSignature, record: Record) -> Exception:
    """The exception of a failed call: its error site's, with the payload the compiled check recorded."""
    return signature.sites[record.status - 1].exception(list(record.payload)).with_traceback(None)


def checked_call(signature: NativeSignature, raw: Callable[..., object], args: Sequence[object]) -> object:
    """Check every argument in Python (the errors name the parameter), then call `__raw` with pointers."""
    values = check_arguments(signature.name, signature.params, args, writable=signature.writable)
    flat: list[object] = []
    for value in values:
        if isinstance(value, np.ndarray):
            flat += [value.ctypes.data, *value.shape]
        else:
            flat.append(value)
    record = Record()
    result = raw(record, *flat)
    if record.status:
        raise raised(signature, record)
    return result


def _scalar_test(name: str, ty: ScalarType) -> str:
    """A Python condition that is true when `name` needs the full scalar check."""
    if ty.is_float:
        return f"{name}.__class__ is not float"
    if ty.is_bool:
        return f"{name}.__class__ is not bool"
    low, high = -(1 << (ty.bits - 1)), (1 << (ty.bits - 1)) - 1
    return f"{name}.__class__ is not int or not {low} <= {name} <= {high}"


def _generate(signature: NativeSignature, fast: Callable[..., object], finish: Callable[..., object],
              checked: Callable[..., object]) -> Callable[..., object]:
    names = [param.name for param in signature.params]
    prefix = "_iz_"
    while any(name.startswith(prefix) for name in names):
        prefix += "_"
    namespace: dict[str, object] = {f"{prefix}fast": fast, f"{prefix}finish": finish,
                                    f"{prefix}checked": checked, f"{prefix}Record": Record,
                                    f"{prefix}constants": constants_table()}
    arguments = ", ".join(names)
    packed = f"({arguments},)" if names else "()"
    lines = [f"def {signature.name}({arguments}):"]
    if not array_layout_matches():
        lines.append(f"    return {prefix}checked({arguments})")
    else:
        for index, param in enumerate(signature.params):
            if isinstance(param.type, ScalarType):
                check = f"{prefix}scalar_{index}"
                namespace[check] = functools.partial(check_scalar, signature.name, param)
                lines += [f"    if {_scalar_test(param.name, param.type)}:",
                          f"        {param.name} = {check}({param.name})"]
        record = f"{prefix}record"
        lines += [f"    {record} = {prefix}Record()",
                  f"    {prefix}result = {prefix}fast({', '.join([record, f'{prefix}constants', *names])})",
                  f"    if {record}.status:",
                  f"        return {prefix}finish({record}, {packed})",
                  f"    return {prefix}result"]
    exec(compile("\n".join(lines), f"<isozyme entry of kernel {signature.name}>", "exec"), namespace)
    return namespace[signature.name]  # type: ignore[return-value]
