"""The contract between compiled code and the runtime, without llvmlite (a warm start from the disk cache
loads object code and calls it, so it must not need the code generator).

- `CodegenOptions`: what changes the generated code (part of every cache key).
- `CodegenError`: the IR holds something a backend cannot emit (both backends raise it).
- The error record (`PAYLOAD_WORDS` in `error_sites.py`): `i64 status`, then the payload words.
- The fast entry point's view of numpy arrays (`ARRAY_OBJECT` offsets, flag bits, the constants table
  order `DTYPE_SLOTS`) and its status `NEEDS_CHECKED_CALL`; `codegen/llvm_entry.py` explains them.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass


class CodegenError(Exception):
    """The IR holds something a backend cannot emit: a function returning an array, or an op the backend
    has no lowering for (the message names it)."""


@dataclass(frozen=True)
class CodegenOptions:
    boundscheck: bool = False
    """Check every array index (IndexError instead of undefined behaviour)."""
    fastmath: tuple[str, ...] = ()
    """LLVM fast-math flags put on float arithmetic (`fadd fsub fmul fdiv`), sorted names from
    `FASTMATH_FLAGS` (`fastmath_flags` checks them); () is IEEE-strict, the default. `("reassoc",)` lets LLVM
    reorder sums and products, so that float reductions vectorize: results change in the last bits. The
    names of `FP_MODE_FLAGS` mark no instruction: "ftz" runs the call with subnormals flushed to zero."""
    loop_fusion: bool = True
    """Run loop fusion after AD (`ISOZYME_LOOP_FUSION=0` turns it off, to measure what it brings)."""
    threads: bool = True
    """LLVM: run `prange` loops as tasks on the thread pool (`codegen/llvm_parallel.py`); off, they are
    serial loops in the function (what a thread count of 1 computes, in one task)."""


X86_64 = platform.machine().lower() in ("x86_64", "amd64")
"""LLVM: the JIT compiles for the process's own CPU (`runtime/llvm_jit.py`), so the host decides."""

MAX_TASKS = 256
"""LLVM: the most tasks one `prange` loop is split into (`codegen/llvm_parallel.py`)."""

FASTMATH_FLAGS = ("reassoc", "contract", "nsz", "arcp", "afn", "nnan", "ninf", "fast")
"""LLVM's fast-math flags (LangRef, "Fast-Math Flags"); "fast" is all of them."""

FP_MODE_FLAGS = ("ftz",)
"""`fastmath=` names that set the CPU's floating-point mode for the call instead of flagging instructions.
"ftz": subnormal results are flushed to zero and subnormal operands read as zero (x86-64: MXCSR's FTZ and
DAZ bits, set by the entry points for the call and restored after it, and taken by the thread pool's
threads for the tasks of the call), as XLA's CPU runtime runs JAX code and as `gcc -ffast-math` programs
run. Values that would be below 2.2e-308 in f64 (1.2e-38 in f32) become zero; nothing else changes. On
x86 cores that take a microcode assist for subnormals, each such operation costs about 100 cycles: the
GMM gradient at d=64, whose weights exp(main_k - max) underflow for far components, ran 2.4x to 3.3x
slower on an Intel Xeon (reassoc, strict). On other architectures, and on `opencl` and `interp`, the flag
is accepted and changes nothing (subnormals are kept, which is IEEE). "fast" does not include it."""


def instruction_flags(fastmath: tuple[str, ...]) -> tuple[str, ...]:
    """The LLVM fast-math flags of `CodegenOptions.fastmath` (without `FP_MODE_FLAGS`)."""
    return tuple(name for name in fastmath if name not in FP_MODE_FLAGS)


def fastmath_flags(flags: object) -> tuple[str, ...]:
    """The `fastmath=` of `@iz.kernel` as `CodegenOptions.fastmath`: a flag name or a sequence of them from
    `FASTMATH_FLAGS` and `FP_MODE_FLAGS`, sorted and without repeats (so that one choice has one cache key);
    `True` is ("fast",), `False` and `None` are (). Any other name is a ValueError naming it."""
    if flags is None or flags is False:
        return ()
    if flags is True:
        return ("fast",)
    names = (flags,) if isinstance(flags, str) else tuple(flags)  # type: ignore[arg-type]
    unknown = [name for name in names if name not in FASTMATH_FLAGS + FP_MODE_FLAGS]
    if unknown:
        known = ", ".join(FASTMATH_FLAGS + FP_MODE_FLAGS)
        raise ValueError(f"unknown fast-math flag {unknown[0]!r} (known: {known})")
    return tuple(sorted(set(names)))

ARRAY_OBJECT = {"type": 8, "data": 16, "ndim": 24, "shape": 32, "descr": 56, "flags": 64}
"""Byte offsets of the fields of numpy's `PyArrayObject_fields` on a 64-bit CPython (after the 16-byte
object header: refcount and type)."""
C_CONTIGUOUS, ALIGNED, WRITEABLE = 0x1, 0x100, 0x400
"""numpy's array flag bits."""
DTYPE_SLOTS = ("i1", "i32", "i64", "f32", "f64")
"""The order of the dtype objects in the constants table, after `ndarray` at slot 0."""
NEEDS_CHECKED_CALL = -1
"""Status of a fast call that did not run: check the arguments in Python and call `__raw`."""
