"""Local type inference: Python's promotion rules on isozyme's scalar types, and conversions as SSA ops.

Promotion is a join on the chain `boolean < i32 < i64 < f32 < f64`: an integer with `f32` gives `f32` (as
in JAX, so f32 kernels stay f32; numpy would give f64). Literals and frozen module constants are *weak*
(JAX's term): they take the other operand's type when it is of the same kind or a wider kind, so
`x32 * 2.0` stays `f32` and `k32 + 1` stays `i32`. Arithmetic on two booleans gives `i64`, as
`True + True == 2` in Python.

Three strengths of conversion: a *merge* (phi) only widens; an *assignment* (store into an array element,
argument of a kernel call, return value, annotated assignment) also narrows within floats or within
integers, like numpy's element assignment, but never turns a float into an integer or a number into a
boolean; an *explicit* conversion (`int()`, `float()`, `f32()`, `bool()`) does everything.
"""

from __future__ import annotations

import numpy as np

from isozyme.ssa.ir import Constant, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import F32, F64, I1, I32, I64, ArrayType, ScalarType, Type

_RANK: dict[Type, int] = {I1: 0, I32: 1, I64: 2, F32: 3, F64: 4}


def kind_rank(ty: ScalarType) -> int:
    """0 for boolean, 1 for integers, 2 for floats."""
    return 0 if ty.is_bool else 1 if ty.is_int else 2


def join(a: Type, b: Type) -> Type | None:
    """The type both `a` and `b` widen to at a merge; None when they conflict (arrays, or array and scalar)."""
    if a == b:
        return a
    if a in _RANK and b in _RANK:
        return a if _RANK[a] >= _RANK[b] else b
    return None


def binary_type(a: Value, b: Value) -> ScalarType:
    """The common type of two scalar operands, with weak constants (module docstring)."""
    ta, tb = a.type, b.type
    assert isinstance(ta, ScalarType) and isinstance(tb, ScalarType)
    weak_a, weak_b = isinstance(a, Constant), isinstance(b, Constant)
    if weak_a and not weak_b and kind_rank(ta) <= kind_rank(tb):
        return tb
    if weak_b and not weak_a and kind_rank(tb) <= kind_rank(ta):
        return ta
    joined = join(ta, tb)
    assert isinstance(joined, ScalarType)
    return joined


def arithmetic_type(a: Value, b: Value) -> ScalarType:
    """`binary_type`, with booleans promoted to i64 (`True + True == 2`)."""
    ty = binary_type(a, b)
    return I64 if ty.is_bool else ty


def true_division_type(a: Value, b: Value) -> ScalarType:
    """The float type of `a / b`: f32 only when the float operands are f32, else f64."""
    ty = binary_type(a, b)
    return ty if ty.is_float else F64


CONVERSION_STEPS: dict[tuple[ScalarType, ScalarType], tuple[tuple[Op, ScalarType], ...]] = {
    (I1, I32): ((Op.ZEXT, I32),), (I1, I64): ((Op.ZEXT, I64),),
    (I1, F32): ((Op.ZEXT, I64), (Op.SITOFP, F32)), (I1, F64): ((Op.ZEXT, I64), (Op.SITOFP, F64)),
    (I32, I64): ((Op.SEXT, I64),), (I64, I32): ((Op.TRUNC, I32),),
    (I32, F32): ((Op.SITOFP, F32),), (I32, F64): ((Op.SITOFP, F64),),
    (I64, F32): ((Op.SITOFP, F32),), (I64, F64): ((Op.SITOFP, F64),),
    (F32, F64): ((Op.FPEXT, F64),), (F64, F32): ((Op.FPTRUNC, F32),),
    (F32, I32): ((Op.FPTOSI, I32),), (F32, I64): ((Op.FPTOSI, I64),),
    (F64, I32): ((Op.FPTOSI, I32),), (F64, I64): ((Op.FPTOSI, I64),),
}
"""How to convert between scalar types, as a chain of cast ops (to boolean: a truth test instead)."""


def widens(source: ScalarType, target: ScalarType) -> bool:
    """True when a merge may convert `source` to `target`."""
    return join(source, target) == target


def assignable(source: ScalarType, target: ScalarType) -> bool:
    """True when an assignment may convert `source` to `target` (module docstring)."""
    if source == target or widens(source, target):
        return True
    return kind_rank(source) == kind_rank(target) and not target.is_bool


def describe_type(ty: Type) -> str:
    """A type as users write it: `Array[f64, 2]`, `f64`, `boolean`."""
    if isinstance(ty, ArrayType):
        element = "boolean" if ty.element is I1 else str(ty.element)
        return f"Array[{element}]" if ty.rank == 1 else f"Array[{element}, {ty.rank}]"
    return "boolean" if ty is I1 else str(ty)


def python_scalar_constant(value: object) -> Constant | None:
    """The weak constant for a Python or numpy scalar, None when `value` is not a number."""
    if isinstance(value, bool | np.bool_):
        return Constant(I1, bool(value))
    if isinstance(value, np.integer):
        return Constant(I32 if value.dtype == np.int32 else I64, int(value)) if value.dtype.itemsize <= 8 else None
    if isinstance(value, int):
        return Constant(I64, value) if -(1 << 63) <= value < 1 << 63 else None
    if isinstance(value, np.float32):
        return Constant(F32, float(value))
    if isinstance(value, float | np.floating):
        return Constant(F64, float(value))
    return None
