"""Vectorized math functions under `fastmath=("afn",)`: glibc's libmvec through LLVM's loop vectorizer.

Compiled code calls the C library's `exp`, `log`, `erf`, ... (`llvm_lowerings.py`), one value at a time:
LLVM cannot vectorize a loop around such a call, and the call itself costs 10 to 20 ns (a softmax's
`exp`, a GELU's `erf`). With "afn" in the kernel's `fastmath=` (LLVM's "approximate functions"; "fast"
includes it), `ModuleEmitter.libm` declares each such function

- `memory(none) nounwind willreturn` (LLVM's `readnone`): its result depends on its operands only, as
  "afn" allows (`errno` is never read), so LLVM may also hoist and merge the calls;
- with LLVM's `vector-function-abi-variant` attribute naming its vector versions in glibc's libmvec, in the
  x86-64 vector function ABI: `_ZGVbN2v_exp` (SSE, 2 doubles), `_ZGVdN4v_exp` (AVX2, 4) and `_ZGVeN8v_exp`
  (AVX-512, 8), those of them that the host CPU can run (LLVM's host features, as the target machine
  of `runtime/llvm_jit.py` uses) and that libmvec defines. The loop vectorizer then calls the version of
  its vector width on 2, 4 or 8 values at once, and the scalar function in the loop's remainder, as GCC
  does for `-ffast-math` code with glibc's `<math.h>` (`#pragma omp declare simd`).

The vector versions are accurate to 4 ulp (glibc's manual, "Errors in Math Functions"), the scalar ones
of libm to 1 ulp or better: results change in the last bits, as "afn" says they may. libmvec is part of
glibc on x86-64 Linux (`exp`, `log`, `sin`, `cos` and `pow` since glibc 2.22, the others since 2.35); each
variant is looked up in it (`dlsym`) before it is named, so where the library or a function is missing
the call stays scalar (and `readnone`). A kernel's shared library links libmvec through `-lm` (glibc's
`libm.so` is a linker script naming it, as needed: `runtime/shared_library.py`), and the JIT engine loads
it (`runtime/llvm_jit.py`).
"""

from __future__ import annotations

import ctypes
import functools
import platform

from llvmlite import ir
from llvmlite.ir.values import FunctionAttributes

from isozyme.codegen.abi import X86_64

LIBMVEC = "libmvec.so.1"
"""glibc's vector math library, by its soname."""

ISAS = (("b", 2, "sse4.1"), ("d", 4, "avx2"), ("e", 8, "avx512f"))
"""The x86-64 vector function ABI's ISA letters, their number of double lanes, and the host feature each
needs (libmvec's `b` versions are SSE4.1 code)."""

APPROXIMATE_FLAGS = frozenset({"afn", "fast"})
"""`fastmath=` flags that allow the vector versions."""


def approximate_functions(fastmath: tuple[str, ...]) -> bool:
    """Does `fastmath` (`CodegenOptions.fastmath`) allow approximate math functions?"""
    return not APPROXIMATE_FLAGS.isdisjoint(fastmath)


@functools.cache
def _libmvec() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or not X86_64:
        return None
    try:
        return ctypes.CDLL(LIBMVEC)
    except OSError:
        return None


@functools.cache
def _host_isas() -> tuple[tuple[str, int], ...]:
    import llvmlite.binding as llvm  # the host's features as LLVM's target machine sees them

    features = llvm.get_host_cpu_features()
    return tuple((letter, lanes) for letter, lanes, feature in ISAS if features.get(feature, False))


@functools.cache
def vector_variants(name: str, arity: int) -> tuple[tuple[int, str], ...]:
    """The vector versions of the C library's double function `name` of `arity` operands that this host
    can call: (lanes, symbol) pairs, e.g. (4, "_ZGVdN4v_exp"); () where there are none."""
    library = _libmvec()
    if library is None:
        return ()
    found = []
    for letter, lanes in _host_isas():
        symbol = f"_ZGV{letter}N{lanes}{'v' * arity}_{name}"
        if hasattr(library, symbol):
            found.append((lanes, symbol))
    return tuple(found)


class _Attributes(FunctionAttributes):
    """Function attributes that may hold LLVM attributes llvmlite does not know (`willreturn`,
    `"key"="value"`), printed as written."""

    def add_verbatim(self, attribute: str) -> None:
        set.add(self, attribute)


def declare_approximate(module: ir.Module, function: ir.Function, name: str, arity: int) -> list[ir.Function]:
    """Make `function`, the declaration of the C library's `name`, `readnone` with its vector versions
    (module docstring); the vector versions' declarations, which the module must keep (`llvm.compiler.used`)
    so that the loop vectorizer finds them."""
    attributes = _Attributes(function.attributes)
    attributes.add("nounwind")
    attributes.add("readnone")
    attributes.add_verbatim("willreturn")
    variants = vector_variants(name, arity)
    vector_functions = []
    if variants:
        parameters = "v" * arity
        mappings = ",".join(f"_ZGV_LLVM_N{lanes}{parameters}_{name}({symbol})" for lanes, symbol in variants)
        attributes.add_verbatim(f'"vector-function-abi-variant"="{mappings}"')
        for lanes, symbol in variants:
            vector = ir.VectorType(ir.DoubleType(), lanes)
            vector_functions.append(ir.Function(module, ir.FunctionType(vector, [vector] * arity), symbol))
    function.attributes = attributes
    return vector_functions


def keep(module: ir.Module, functions: list[ir.Function]) -> None:
    """`@llvm.compiler.used`: keep these declarations in the module through LLVM's optimization (a
    declaration nothing calls is removed before the vectorizer could call it)."""
    if not functions:
        return
    pointer = ir.PointerType(ir.IntType(8))
    array = ir.ArrayType(pointer, len(functions))
    used = ir.GlobalVariable(module, array, "llvm.compiler.used")
    used.linkage = "appending"
    used.section = "llvm.metadata"
    used.initializer = ir.Constant(array, [f.bitcast(pointer) for f in functions])
