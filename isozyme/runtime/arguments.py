"""Checking a kernel's arguments at the call (DESIGN 1.1), before any backend sees them.

Arrays must be numpy arrays of exactly the parameter's dtype and number of dimensions, C-contiguous, and
no two array arguments may share memory (the optimizer assumes distinct arrays do not overlap, like
`restrict` in C): `TypeError` for the wrong kind, dtype or rank, `ValueError` for layout and overlap.
Scalars: a float parameter takes any real number, an integer parameter an integer (not a float: no silent
truncation) in its range (`OverflowError` otherwise), a boolean parameter a bool. Every message names the
parameter and the kernel. The per-value checks are the interpreter's (`ssa.interpreter.check_array`,
`check_scalar`), so `isozyme run` and kernels accept the same values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from isozyme.ssa import interpreter
from isozyme.ssa.types import ArrayType, Type

Scalar = int | float | bool


@dataclass(frozen=True)
class Parameter:
    name: str
    type: Type


def bind(kernel: str, params: Sequence[Parameter], args: Sequence[object],
         kwargs: Mapping[str, object]) -> list[object]:
    """Arguments in parameter order, from positional and keyword arguments, as Python binds them."""
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


def check_array(kernel: str, param: Parameter, value: object) -> np.ndarray:
    """The interpreter's array check (kind, dtype, rank), plus C-contiguity for compiled code."""
    where = f"parameter '{param.name}' of kernel '{kernel}'"
    array = interpreter.check_array(where, param.type, value)  # type: ignore[arg-type]
    if not array.flags.c_contiguous:
        raise ValueError(f"{where} must be C-contiguous; pass np.ascontiguousarray({param.name})")
    return array


def check_scalar(kernel: str, param: Parameter, value: object) -> Scalar:
    return interpreter.check_scalar(f"parameter '{param.name}' of kernel '{kernel}'", param.type, value)  # type: ignore


def check_arguments(kernel: str, params: Sequence[Parameter], args: Sequence[object],
                    kwargs: Mapping[str, object] | None = None) -> list[object]:
    """The checked argument values in parameter order (module docstring)."""
    values = bind(kernel, params, args, kwargs or {})
    checked: list[object] = []
    for param, value in zip(params, values, strict=True):
        if isinstance(param.type, ArrayType):
            checked.append(check_array(kernel, param, value))
        else:
            checked.append(check_scalar(kernel, param, value))
    check_no_overlap(kernel, params, checked)
    return checked


def check_no_overlap(kernel: str, params: Sequence[Parameter], values: Sequence[object]) -> None:
    """Two array arguments must not share memory (for C-contiguous arrays `may_share_memory` is exact)."""
    arrays = [(p.name, v) for p, v in zip(params, values, strict=True) if isinstance(v, np.ndarray)]
    for i, (name_a, a) in enumerate(arrays):
        for name_b, b in arrays[i + 1:]:
            if np.may_share_memory(a, b):
                raise ValueError(f"parameters '{name_a}' and '{name_b}' of kernel '{kernel}' share memory; "
                                 "isozyme assumes distinct array arguments do not overlap")
