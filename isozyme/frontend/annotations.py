"""The annotation types of the kernel language: `f32 f64 i32 i64 boolean` and `Array[dtype, ndim]`.

They annotate kernel parameters (`x: Array[f64]`, `n: i64`) and return values, name the dtype of local
arrays (`iz.zeros(n, f64)`), and convert scalars when called (`f32(x)`), in kernels and in plain Python
alike, so a kernel stays a valid Python function. Each maps to an SSA type (`ssa_type`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isozyme.ssa.ir import canonical_scalar
from isozyme.ssa.types import F32, F64, I1, I32, I64, ArrayType, ScalarType, Type

MAX_RANK = 4
"""Arrays have 1 to 4 dimensions (DESIGN 1.1)."""


@dataclass(frozen=True, eq=False)
class ScalarAnnotation:
    """A scalar type usable as an annotation, a dtype and a conversion function."""

    name: str
    """The name users write (`f64`)."""
    ssa: ScalarType
    """The SSA type it stands for."""

    def __call__(self, value: object) -> int | float | bool:
        """Python's view of the kernel conversion: floats truncate toward zero into ints, ints wrap."""
        if self.ssa.is_float:
            return float(np.dtype(self.ssa.numpy_dtype).type(value))
        if self.ssa is I1:
            return bool(value)
        return canonical_scalar(self.ssa, int(value))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.ssa.numpy_dtype)

    def __repr__(self) -> str:
        return self.name


f32 = ScalarAnnotation("f32", F32)
f64 = ScalarAnnotation("f64", F64)
i32 = ScalarAnnotation("i32", I32)
i64 = ScalarAnnotation("i64", I64)
boolean = ScalarAnnotation("boolean", I1)

SCALAR_ANNOTATIONS: tuple[ScalarAnnotation, ...] = (f32, f64, i32, i64, boolean)


@dataclass(frozen=True)
class ArrayAnnotation:
    """`Array[dtype, ndim]`: a C-contiguous numpy array of exactly that dtype and rank."""

    element: ScalarAnnotation
    ndim: int

    @property
    def ssa(self) -> ArrayType:
        return ArrayType(self.element.ssa, self.ndim)

    def __repr__(self) -> str:
        return f"Array[{self.element.name}]" if self.ndim == 1 else f"Array[{self.element.name}, {self.ndim}]"


class Array:
    """Write `Array[f64]` for a 1-D array, `Array[f64, 2]` for 2-D, up to 4-D."""

    def __class_getitem__(cls, params: object) -> ArrayAnnotation:
        if isinstance(params, tuple) and len(params) != 2:
            raise TypeError("Array takes a dtype and a number of dimensions: Array[f64, 2]")
        element, ndim = params if isinstance(params, tuple) else (params, 1)
        if not isinstance(element, ScalarAnnotation):
            raise TypeError(f"Array's dtype must be one of f32 f64 i32 i64 boolean, not {element!r}")
        if not isinstance(ndim, int) or isinstance(ndim, bool) or not 1 <= ndim <= MAX_RANK:
            raise TypeError(f"Array's number of dimensions must be 1 to {MAX_RANK}, not {ndim!r}")
        return ArrayAnnotation(element, ndim)


_DTYPE_ALIASES: dict[object, ScalarAnnotation] = {float: f64, int: i64, bool: boolean}


def scalar_annotation(dtype: object) -> ScalarAnnotation | None:
    """The scalar annotation a dtype designator stands for (`f64`, `float`, `np.float32`, 'f4'), or None."""
    if isinstance(dtype, ScalarAnnotation):
        return dtype
    if dtype in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[dtype]  # type: ignore[index]
    try:
        numpy_dtype = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError:
        return None
    return next((a for a in SCALAR_ANNOTATIONS if a.dtype == numpy_dtype), None)


def ssa_type_of_annotation(annotation: object) -> Type | None:
    """The SSA type of a parameter or return annotation, or None when it is not one."""
    if isinstance(annotation, ScalarAnnotation | ArrayAnnotation):
        return annotation.ssa
    return None
