"""Every scalar op of the lowering table, on every type it takes, against the reference interpreter.

For each op of `semantics.SEMANTICS` and each operand type, a one-instruction function (`%r = op %a, %b;
ret %r`) is compiled by the `llvm` backend without any SSA optimization, and run on every pair of
awkward values (signed zeros, infinities, nan, subnormals, the ends of the integer ranges, exact halves
for the floor operations). The compiled result must have the interpreter's bits, and where the
interpreter raises, compiled code must raise the same exception with the same message.
"""

from __future__ import annotations

import itertools
import math
import struct

import numpy as np
import pytest

from isozyme.codegen.abi import CodegenOptions
from isozyme.runtime import disk_cache, shared_library
from isozyme.runtime.llvm_backend import EntrySignature, compile_native
from isozyme.ssa.interpreter import run_function
from isozyme.ssa.ops import OP_INFO, Op, Syntax, type_in_class
from isozyme.ssa.parser import parse_module
from isozyme.ssa.semantics import SEMANTICS
from isozyme.ssa.types import F32, F64, I1, I32, I64, ScalarType

FLOATS = [0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.0, 3.0, -7.0, 7.25, 1e-310, 1e300, -1e300, 2.0 ** 62 + 0.5,
          math.inf, -math.inf, math.nan]
VALUES: dict[ScalarType, list[object]] = {
    F64: FLOATS + [0.1, 1e-5, 123456.789],
    F32: [float(np.float32(v)) for v in FLOATS + [0.1, 3.4e38, 1e-40] if abs(v) < 3.5e38 or not math.isfinite(v)],
    I64: [0, 1, -1, 2, -3, 7, -7, 31, 63, 64, -(1 << 63), (1 << 63) - 1],
    I32: [0, 1, -1, 2, -3, 7, -7, 31, 32, -(1 << 31), (1 << 31) - 1],
    I1: [False, True],
}
TYPES = tuple(VALUES)


def _bits(value: object) -> object:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else struct.pack("<d", value)
    return (type(value).__name__, value)


def _cases() -> list[tuple[Op, ScalarType, ScalarType | None]]:
    """(op, operand type, cast target) for every scalar op and every type its pattern admits."""
    cases = []
    for op in SEMANTICS:
        info = OP_INFO[op]
        if info.syntax is Syntax.CAST:
            source, target = info.operands
            for a, b in itertools.product(TYPES, TYPES):
                width = (b.bits > a.bits) - (b.bits < a.bits)
                if not (type_in_class(a, source) and type_in_class(b, target)):
                    continue
                if info.cast_width and width != {"widen": 1, "narrow": -1}[info.cast_width]:
                    continue
                cases.append((op, a, b))
        else:
            letter = next(ch for ch in info.operands if ch != "b") if info.operands != "b" else "b"
            cases += [(op, ty, None) for ty in TYPES if type_in_class(ty, letter)]
    return cases


def _function_text(op: Op, ty: ScalarType, target: ScalarType | None) -> str:
    pattern = OP_INFO[op].operands
    if target is not None:
        return f"func @f(%a: {ty}) -> {target} {{\nentry:\n  %r = {op} %a to {target}\n  ret %r\n}}\n"
    params = ", ".join(f"%{name}: {I1 if letter == 'b' else ty}" for name, letter in zip("cab", pattern)) \
        if pattern.startswith("b") else ", ".join(f"%{name}: {ty}" for name in "ab"[:len(pattern)])
    operands = ", ".join(f"%{name}" for name in ("cab" if pattern.startswith("b") else "ab")[:len(pattern)])
    result = I1 if OP_INFO[op].result.name == "BOOL" else ty
    return f"func @f({params}) -> {result} {{\nentry:\n  %r = {op} {operands}\n  ret %r\n}}\n"


def _outcome(function: object, args: tuple) -> object:
    try:
        with np.errstate(all="ignore"):
            return _bits(function(*args))  # type: ignore[operator]
    except (ZeroDivisionError, ValueError, OverflowError) as error:
        return (type(error).__name__, str(error))


@pytest.mark.parametrize("loader", ["mcjit", "library"])
@pytest.mark.parametrize(("op", "ty", "target"), _cases(), ids=lambda p: str(p))
def test_compiled_op_has_the_interpreters_bits(op: Op, ty: ScalarType, target: ScalarType | None,
                                               loader: str) -> None:
    """Through MCJIT (no disk cache) and through the shared library a cache miss links, where a linker is
    there; the two are emitted differently (`llvm_jit.py`). The pipeline string only names the cache key
    (`optimize` runs nothing): one per loader, so the second is not served from memory."""
    module = parse_module(_function_text(op, ty, target))
    function = module["f"]
    libraries = disk_cache.stats["library_loads"]
    compiled = compile_native(f"op_{op.name.lower()}", module, EntrySignature.of(function), f"none {loader}",
                              lambda m: function, CodegenOptions(), use_disk_cache=loader == "library")
    if loader == "library" and shared_library.linker() is not None:
        assert disk_cache.stats["library_loads"] == libraries + 1
    domains = [VALUES[arg.type] for arg in function.args]  # type: ignore[index]
    mismatches = []
    for args in itertools.product(*domains):
        expected, actual = _outcome(lambda *a: run_function(function, *a), args), _outcome(compiled, args)
        if expected != actual:
            mismatches.append(f"{op}{args}: interpreter {expected}, llvm {actual}")
    assert not mismatches, "\n".join(mismatches[:20])


SIGMOID_INPUTS = [0.0, -0.0, 1000.0, -1000.0, math.nan, math.inf, -math.inf, 0.5, -2.5, 30.0, -30.0, 700.0, -700.0,
                  -745.5, 1e-310, 0.1]


def numpy_sigmoid(x: float, ty: ScalarType) -> float:
    """The textbook `1 / (1 + exp(-x))` in numpy, in `ty`'s precision (f32: exp in f64 rounded once, as
    every math function of the IR, `semantics.py`)."""
    with np.errstate(all="ignore"):
        if ty == F32:
            one, e = np.float32(1.0), np.float32(np.exp(-np.float64(np.float32(x))))
            return float(one / (one + e))
        return float(1.0 / (1.0 + np.exp(-np.float64(x))))


@pytest.mark.parametrize("ty", [F64, F32])
def test_sigmoid_is_the_textbook_formula_bit_for_bit(ty: ScalarType) -> None:
    """`sigmoid` compiled and interpreted has the bits of numpy's 1/(1+exp(-x)), edges included (exp
    overflows to inf at -1000, so 0.0; nan stays nan)."""
    module = parse_module(_function_text(Op.SIGMOID, ty, None))
    function = module["f"]
    compiled = compile_native("op_sigmoid_numpy", module, EntrySignature.of(function), "none sigmoid",
                              lambda m: function, CodegenOptions(), use_disk_cache=False)
    for x in SIGMOID_INPUTS:
        x = float(np.float32(x)) if ty == F32 else x
        expected = _bits(numpy_sigmoid(x, ty))
        assert _outcome(lambda a: run_function(function, a), (x,)) == expected, x
        assert _outcome(compiled, (x,)) == expected, x
