"""The LLVM types of SSA values, shared by every module of the LLVM backend (`llvm.py` lists them).

Every SSA type has one LLVM register type (`register_type`) and, for array elements, one storage type
(`storage_type`); an SSA parameter becomes the LLVM parameters of `flat_parameter_types`. The other modules
of the backend build LLVM values only of these types, so a function's LLVM signature, the calls to it and
the C entry points (`llvm_entry.py`) agree.

Representation:
  - scalars are `i1 i32 i64 float double` in registers; in memory a boolean is one byte (`i8`, numpy's).
  - an array value is the struct `{element*, i64 extent_0, ..., i64 extent_r-1}`; functions take arrays
    flattened to the data pointer and the extents (`noalias` on the entry kernel's pointers: distinct
    array arguments never overlap, which the runtime checks at the call). Indexing is row-major.
  - every function takes a last parameter, the call's error record (`RECORD_POINTER`): `i64 status`
    then `PAYLOAD_WORDS` payload words. A failing check writes the site number (`error_sites.py`) and its
    payload there and returns; a caller checks the status after every call and passes failures up.
"""

from __future__ import annotations

from llvmlite import ir

from isozyme.codegen.abi import CodegenError
from isozyme.ssa.types import ArrayType, ScalarType, Type

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
POINTER = ir.PointerType(I8)
RECORD_POINTER = ir.PointerType(I64)
"""The error record: `1 + PAYLOAD_WORDS` i64 words, the status (0: success, else the failing site's
number), then the payload words."""


def register_type(ty: Type) -> ir.Type:
    """The LLVM type of an SSA value of type `ty`."""
    if isinstance(ty, ArrayType):
        return ir.LiteralStructType([ir.PointerType(storage_type(ty.element)), *([I64] * ty.rank)])
    if isinstance(ty, ScalarType):
        return _SCALARS[str(ty)]
    raise CodegenError(f"no LLVM type for {ty}")


def storage_type(ty: ScalarType) -> ir.Type:
    """The LLVM type of one array element of `ty` in memory (a boolean is a byte, as in numpy)."""
    return I8 if ty.is_bool else _SCALARS[str(ty)]


def element_size(ty: ScalarType) -> int:
    """Bytes of one element of `ty` in memory."""
    return 1 if ty.is_bool else ty.bits // 8


_SCALARS: dict[str, ir.Type] = {"i1": I1, "i32": I32, "i64": I64, "f32": F32, "f64": F64}


def flat_parameter_types(ty: Type) -> list[ir.Type]:
    """The LLVM parameters one SSA parameter becomes: an array is its data pointer and its extents."""
    if isinstance(ty, ArrayType):
        return [ir.PointerType(storage_type(ty.element)), *([I64] * ty.rank)]
    return [register_type(ty)]
