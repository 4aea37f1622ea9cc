"""Types of the SSA IR: scalars (`i1 i32 i64 f32 f64`), arrays (element type and rank) and `void`.

Types are immutable and compare by value, so `ArrayType(F64, 1) == ArrayType(F64, 1)`. The text form is
the one of DESIGN section 3: `f64`, `i64`, `f64[?]` (1-D), `f64[?,?]` (2-D).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import Enum

import numpy as np

MAX_ARRAY_RANK = 4


class ScalarKind(Enum):
    """What a scalar type holds: a boolean, a two's-complement integer or an IEEE float."""

    BOOL = "bool"
    INT = "int"
    FLOAT = "float"


@dataclass(frozen=True)
class Type:
    """Base of all IR types."""

    @property
    def is_scalar(self) -> bool:
        return False

    @property
    def is_array(self) -> bool:
        return False

    @property
    def is_void(self) -> bool:
        return False

    @property
    def is_float(self) -> bool:
        return False

    @property
    def is_int(self) -> bool:
        """True for the integer types `i32` and `i64` (not `i1`)."""
        return False

    @property
    def is_bool(self) -> bool:
        return False


@dataclass(frozen=True)
class VoidType(Type):
    """The type of instructions that produce no value (`store`, `br`, a call of a void function)."""

    @property
    def is_void(self) -> bool:
        return True

    def __str__(self) -> str:
        return "void"


@dataclass(frozen=True)
class ScalarType(Type):
    """A scalar: `i1` (boolean), `i32`, `i64` (wrapping two's complement), `f32`, `f64` (IEEE 754)."""

    kind: ScalarKind
    """Boolean, integer or float."""
    bits: int
    """Width in bits: 1, 32 or 64."""

    @property
    def is_scalar(self) -> bool:
        return True

    @property
    def is_float(self) -> bool:
        return self.kind is ScalarKind.FLOAT

    @property
    def is_int(self) -> bool:
        return self.kind is ScalarKind.INT

    @property
    def is_bool(self) -> bool:
        return self.kind is ScalarKind.BOOL

    @functools.cached_property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype holding one value of this type (kept: every kernel call checks its arguments')."""
        return np.dtype(_NUMPY_DTYPES[str(self)])

    def __str__(self) -> str:
        prefix = "f" if self.is_float else "i"
        return f"{prefix}{self.bits}"


@dataclass(frozen=True)
class ArrayType(Type):
    """A C-contiguous array of `element` with `rank` dimensions whose extents are known at run time."""

    element: ScalarType
    """Type of one element."""
    rank: int
    """Number of dimensions, 1 to MAX_ARRAY_RANK."""

    def __post_init__(self) -> None:
        if not 1 <= self.rank <= MAX_ARRAY_RANK:
            raise ValueError(f"array rank must be 1..{MAX_ARRAY_RANK}, got {self.rank}")

    @property
    def is_array(self) -> bool:
        return True

    def __str__(self) -> str:
        return f"{self.element}[{','.join('?' * self.rank)}]"


VOID = VoidType()
I1 = ScalarType(ScalarKind.BOOL, 1)
I32 = ScalarType(ScalarKind.INT, 32)
I64 = ScalarType(ScalarKind.INT, 64)
F32 = ScalarType(ScalarKind.FLOAT, 32)
F64 = ScalarType(ScalarKind.FLOAT, 64)

SCALAR_TYPES: dict[str, ScalarType] = {str(t): t for t in (I1, I32, I64, F32, F64)}
"""Scalar types by their text name."""

_NUMPY_DTYPES = {"i1": "bool", "i32": "int32", "i64": "int64", "f32": "float32", "f64": "float64"}


def scalar_type_of_dtype(dtype: np.dtype) -> ScalarType:
    """The scalar type whose values a numpy array of `dtype` holds; ValueError for other dtypes."""
    for name, numpy_name in _NUMPY_DTYPES.items():
        if np.dtype(dtype) == np.dtype(numpy_name):
            return SCALAR_TYPES[name]
    raise ValueError(f"no isozyme type for numpy dtype {np.dtype(dtype)}")


LARGEST_SIZE = 2**63 - 1
"""The most bytes a local array may have: sizes are 64-bit signed integers on every backend."""


def allocation_failure(shape: tuple[int, ...], element: str, itemsize: int) -> str:
    """Why a local array of `shape` (extents not negative) and `element` (`itemsize` bytes) could not be
    allocated: its exact size in bytes, and whether that size overflows a 64-bit size. One message for
    the interpreter and the compiled backends (`codegen/error_sites.py`)."""
    size = itemsize
    for extent in shape:
        size *= extent
    reason = "more than a 64-bit size can hold" if size > LARGEST_SIZE else "not available"
    return f"cannot allocate a local array of shape {shape} of {element}: {size} bytes, {reason}"
