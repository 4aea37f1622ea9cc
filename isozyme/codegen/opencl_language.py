"""The C-style languages the OpenCL backend writes: a renderer base class (`CRenderer`) whose language
details are class attributes, and its OpenCL C subclass (`OpenCLRenderer`).

A renderer holds what the functions of one program share (the options, the error sites, the versions of
called functions that calls need, whether the device heap is used) and the text of the language: the C
type of each SSA type (in variables; in memory a boolean is a `uchar`, numpy's byte), exact literals
(floats as hexadecimal literals) and the prelude's helpers: Python's floor division and modulo, and on
OpenCL the atomic adds on global memory (`ATOMIC_HELPERS`: `cl_ext_float_atomics` when available, NVIDIA's
native `red.global.add` in inline PTX, else a compare-and-swap loop on the bits). It knows nothing of
instructions (`opencl_lowerings.py`).
"""

from __future__ import annotations

import math

from isozyme.codegen.abi import CodegenError, CodegenOptions
from isozyme.codegen.address_spaces import FunctionVersions
from isozyme.codegen.error_sites import ErrorSite
from isozyme.ssa.ir import Constant
from isozyme.ssa.types import ArrayType, ScalarType, Type


class CRenderer:
    """C-style source for a module. Language details are class attributes, overridden per dialect."""

    scalar_types = {"i1": "bool", "i32": "int", "i64": "long", "f32": "float", "f64": "double"}
    unsigned_types = {"i32": "uint", "i64": "ulong"}
    storage_types = {"i1": "uchar", "i32": "int", "i64": "long", "f32": "float", "f64": "double"}
    global_space = ""
    """Address-space qualifier of pointers to argument arrays."""
    private_space = ""
    """Address-space qualifier of pointers to a function's own C arrays."""
    kernel_qualifier = ""
    function_qualifier = ""
    prelude_lines: tuple[str, ...] = ()
    kernel_name = "iz_entry"
    unroll: str | None = None
    """The line before a C loop that asks the compiler to unroll it (`FunctionRenderer.render_loop`); None:
    loops stay `goto`s."""

    def __init__(self, options: CodegenOptions) -> None:
        self.options = options
        self.sites: list[ErrorSite] = []
        self.uses_heap = False
        """Does a called function allocate on the device heap?"""
        self.versions = FunctionVersions()
        """The versions of called functions that the calls rendered so far need (`address_spaces.py`)."""

    def scalar(self, ty: Type) -> str:
        if not isinstance(ty, ScalarType):
            raise CodegenError(f"{ty} is not a scalar type")
        return self.scalar_types[str(ty)]

    def storage(self, ty: ScalarType) -> str:
        return self.storage_types[str(ty)]

    def pointer(self, ty: ArrayType, space: str | None = None) -> str:
        space = self.global_space if space is None else space
        return f"{space + ' ' if space else ''}{self.storage(ty.element)}*"

    def record_type(self) -> str:
        return f"{self.global_space + ' ' if self.global_space else ''}long*"

    def constant(self, value: Constant) -> str:
        """A C literal of the constant's type, exact (floats as hexadecimal literals)."""
        ty = value.type
        if ty.is_bool:  # type: ignore[union-attr]
            return "true" if value.value else "false"
        if ty.is_int:  # type: ignore[union-attr]
            suffix = "L" if ty.bits == 64 else ""  # type: ignore[union-attr]
            if value.value == -(1 << (ty.bits - 1)):  # type: ignore[union-attr]
                return f"(({self.scalar(ty)})(-{(1 << (ty.bits - 1)) - 1}{suffix} - 1))"  # type: ignore[union-attr]
            return f"(({self.scalar(ty)}){value.value}{suffix})"
        return self.float_literal(float(value.value), ty)  # type: ignore[arg-type]

    def float_literal(self, x: float, ty: Type) -> str:
        name = self.scalar(ty)
        if math.isnan(x):
            return f"(({name})NAN)"
        if math.isinf(x):
            return f"(({name}){'-' if x < 0 else ''}INFINITY)"
        return f"(({name}){x.hex()}{'f' if name == 'float' else ''})"

    def helpers(self) -> list[str]:
        """Python's floor division and modulo on ints and floats."""
        out: list[str] = []
        for ty, uty in (("int", "uint"), ("long", "ulong")):
            out += [
                f"{ty} iz_floordiv_{ty}({ty} a, {ty} b) {{",
                f"  if (b == -1) return ({ty})(({uty})0 - ({uty})a);",
                f"  {ty} q = a / b, r = a % b;",
                "  return (r != 0 && ((r ^ b) < 0)) ? q - 1 : q;",
                "}",
                f"{ty} iz_floormod_{ty}({ty} a, {ty} b) {{",
                "  if (b == -1) return 0;",
                f"  {ty} r = a % b;",
                "  return (r != 0 && ((r ^ b) < 0)) ? r + b : r;",
                "}",
            ]
        for ty in ("float", "double"):
            out += [
                f"{ty} iz_ffloordiv_{ty}({ty} x, {ty} y) {{",
                f"  if (y == 0) return ({ty})NAN;",
                f"  {ty} mod = fmod(x, y);",
                f"  {ty} div = (x - mod) / y;",
                f"  if (mod != 0 && ((y < 0) != (mod < 0))) div -= ({ty})1;",
                f"  if (div == 0) return copysign(({ty})0, x / y);",
                f"  {ty} fd = floor(div);",
                f"  if (div - fd > ({ty})0.5) fd += ({ty})1;",
                "  return fd;",
                "}",
                f"{ty} iz_ffloormod_{ty}({ty} x, {ty} y) {{",
                f"  if (y == 0) return ({ty})NAN;",
                f"  {ty} mod = fmod(x, y);",
                "  if (mod != 0) { if ((y < 0) != (mod < 0)) mod += y; }",
                f"  else mod = copysign(({ty})0, y);",
                "  return mod;",
                "}",
            ]
        return out


class OpenCLRenderer(CRenderer):
    """OpenCL C: `__kernel`, `__global` pointers, double precision through `cl_khr_fp64`."""

    global_space = "__global"
    private_space = "__private"
    kernel_qualifier = "__kernel"
    prelude_lines = ("#pragma OPENCL EXTENSION cl_khr_fp64 : enable",
                     "#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable", "#pragma OPENCL FP_CONTRACT OFF")
    unroll = "#pragma unroll 8"

    def helpers(self) -> list[str]:
        return [*super().helpers(), *ATOMIC_HELPERS]


WARP_HELPERS = [
    "#if defined(IZ_PTX_ATOMICS) && !defined(IZ_NO_WARP_SUMS)",
    "uint iz_lane(void) { uint lane; asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(lane)); return lane; }",
    "uint iz_shfl_idx0(uint v) {",
    '  uint r; asm volatile("shfl.sync.idx.b32 %0, %1, 0, 31, -1;" : "=r"(r) : "r"(v)); return r;',
    "}",
    "uint iz_shfl_bfly(uint v, uint lanes) {",
    '  uint r; asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 31, -1;" : "=r"(r) : "r"(v), "r"(lanes)); return r;',
    "}",
    "bool iz_warp_same_address(ulong a) {",
    '  uint mask; asm volatile("activemask.b32 %0;" : "=r"(mask));',
    "  if (mask != 0xffffffffu) return false;",
    "  uint lo = (uint)a, hi = (uint)(a >> 32);",
    "  uint lo0 = iz_shfl_idx0(lo), hi0 = iz_shfl_idx0(hi);  /* both by every lane: no && */",
    "  uint same = (uint)(lo0 == lo) & (uint)(hi0 == hi), all;",
    '  asm volatile("{ .reg .pred p, q; setp.ne.u32 p, %1, 0; vote.sync.all.pred q, p, -1; selp.u32 %0, 1, 0, q; }"',
    '               : "=r"(all) : "r"(same));',
    "  return all != 0;",
    "}",
    "double iz_warp_sum_double(double v) {",
    "  for (uint lanes = 16; lanes > 0; lanes >>= 1) {",
    "    uint2 b = as_uint2(v);",
    "    v += as_double((uint2)(iz_shfl_bfly(b.x, lanes), iz_shfl_bfly(b.y, lanes)));",
    "  }",
    "  return v;",
    "}",
    "float iz_warp_sum_float(float v) {",
    "  for (uint lanes = 16; lanes > 0; lanes >>= 1) v += as_float(iz_shfl_bfly(as_uint(v), lanes));",
    "  return v;",
    "}",
    "#endif",
]
"""Warp sums before an atomic add on NVIDIA's OpenCL (`-D IZ_PTX_ATOMICS`): when all 32 lanes of a warp
are at the same atomic add (`activemask`) and add into one address (its two halves compared with lane 0's
by `shfl.sync`, agreed by `vote.sync.all`), the warp sums its 32 values with five butterfly shuffles and lane
0 alone adds the sum, so an element that every work item updates takes one global add per warp instead of
32. Otherwise (lanes diverged, or different addresses) each lane adds its own value. The `.sync`
instructions name all 32 lanes only on the path where `activemask` said all 32 are here, and every lane
runs each of them (the two halves' shuffles are not joined by a short-circuit `&&`, which would let the
lanes whose low halves differ skip the second shuffle and leave the others waiting forever), so no lane
waits for one that took another branch. `-D IZ_NO_WARP_SUMS` (`ISOZYME_OPENCL_WARP_SUMS=0`) leaves them out."""

ATOMIC_HELPERS = [
    *WARP_HELPERS,
    "void iz_atomic_add_double(volatile __global double* p, double v) {",
    "#if defined(__opencl_c_ext_fp64_global_atomic_add)",
    "  atomic_fetch_add_explicit((volatile __global atomic_double*)p, v, memory_order_relaxed, memory_scope_device);",
    "#elif defined(IZ_PTX_ATOMICS)",
    "#if !defined(IZ_NO_WARP_SUMS)",
    "  if (iz_warp_same_address((ulong)p)) {",
    "    v = iz_warp_sum_double(v);",
    "    if (iz_lane() != 0) return;",
    "  }",
    "#endif",
    '  asm volatile("red.global.add.f64 [%0], %1;" :: "l"(p), "d"(v) : "memory");',
    "#else",
    "  volatile __global long* q = (volatile __global long*)p;",
    "  long seen, old = *q;",
    "  do { seen = old; old = atom_cmpxchg(q, seen, as_long(as_double(seen) + v)); } while (old != seen);",
    "#endif",
    "}",
    "void iz_atomic_add_float(volatile __global float* p, float v) {",
    "#if defined(__opencl_c_ext_fp32_global_atomic_add)",
    "  atomic_fetch_add_explicit((volatile __global atomic_float*)p, v, memory_order_relaxed, memory_scope_device);",
    "#elif defined(IZ_PTX_ATOMICS)",
    "#if !defined(IZ_NO_WARP_SUMS)",
    "  if (iz_warp_same_address((ulong)p)) {",
    "    v = iz_warp_sum_float(v);",
    "    if (iz_lane() != 0) return;",
    "  }",
    "#endif",
    '  asm volatile("red.global.add.f32 [%0], %1;" :: "l"(p), "f"(v) : "memory");',
    "#else",
    "  volatile __global int* q = (volatile __global int*)p;",
    "  int seen, old = *q;",
    "  do { seen = old; old = atomic_cmpxchg(q, seen, as_int(as_float(seen) + v)); } while (old != seen);",
    "#endif",
    "}",
    "void iz_atomic_add_long(volatile __global long* p, long v) { atom_add(p, v); }",
    "void iz_atomic_add_int(volatile __global int* p, int v) { atomic_add(p, v); }",
]
"""Atomic adds on global memory: `cl_ext_float_atomics` where the compiler offers it (OpenCL C 3.0 with
the feature macro); on NVIDIA's OpenCL (`-D IZ_PTX_ATOMICS`, `runtime/opencl_backend.build_options`) the
GPU's native float reduction `red.global.add` in inline PTX (sm_60 and later: every GPU that driver still
supports); a compare-and-swap loop on the bits otherwise, which serializes badly when many work items add
into one element. Integers wrap (two's complement)."""
