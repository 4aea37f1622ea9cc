"""The text form round-trips: print(parse(print(f))) == print(f) for every .ir file and for constants."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from isozyme.ssa.builder import Builder, make_function
from isozyme.ssa.ir import Constant
from isozyme.ssa.parser import parse_module
from isozyme.ssa.printer import print_function, print_module
from isozyme.ssa.types import F32, F64, I1, I32, I64, ArrayType

REPO = Path(__file__).parent.parent
IR_FILES = sorted([*REPO.glob("tests/**/*.ir"), *REPO.glob("examples/**/*.ir")])


def test_there_are_ir_files() -> None:
    assert len(IR_FILES) >= 6


@pytest.mark.parametrize("path", IR_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_file_round_trips(path: Path) -> None:
    printed = print_module(parse_module(path.read_text(), str(path)))
    assert print_module(parse_module(printed)) == printed


def test_mag_example_prints_back_unchanged() -> None:
    text = (REPO / "examples" / "mag.ir").read_text()
    assert print_module(parse_module(text)) == text


def _constant_function(constant: Constant) -> str:
    function = make_function("c", [], constant.type)
    Builder(function.add_block()).ret(constant)
    return print_function(function)


def _parsed_constant(text: str) -> Constant:
    ret = parse_module(text)["c"].entry.instructions[-1]
    constant = ret.operands[0]
    assert isinstance(constant, Constant)
    return constant


def _same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_f64_constants_are_exact(value: float) -> None:
    text = _constant_function(Constant(F64, value))
    parsed = _parsed_constant(text)
    assert parsed.type == F64 and _same_float(parsed.value, value)
    assert _constant_function(parsed) == text


@given(st.floats(width=32, allow_nan=True, allow_infinity=True))
def test_f32_constants_are_exact(value: float) -> None:
    text = _constant_function(Constant(F32, value))
    parsed = _parsed_constant(text)
    assert parsed.type == F32 and _same_float(parsed.value, float(np.float32(value)))
    assert _constant_function(parsed) == text


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.sampled_from([I32, I64]))
def test_integer_constants_are_exact(value: int, ty) -> None:
    constant = Constant(ty, value)
    parsed = _parsed_constant(_constant_function(constant))
    assert parsed.type == ty and parsed.value == constant.value


def test_bool_constants() -> None:
    for value in (True, False):
        assert _parsed_constant(_constant_function(Constant(I1, value))).value is value


def test_builder_names_round_trip() -> None:
    """Repeated and missing hints print as unique names that read back as the same names."""
    function = make_function("f", [("x", ArrayType(F64, 1)), ("x", F64)], F64)
    b = Builder(function.add_block())
    a = b.fadd(function.args[1], 1.0, name="s")
    c = b.fadd(a, 2.0, name="s")
    d = b.fmul(c, c)
    e = b.fadd(d, d, name="1")
    b.ret(e)
    text = print_function(function)
    assert "func @f(%x: f64[?], %x.1: f64) -> f64 {" in text
    assert "%s = fadd %x.1, 1.0" in text and "%s.1 = fadd %s, 2.0" in text
    assert "%0 = fmul %s.1, %s.1" in text and "%1 = fadd %0, %0" in text
    assert print_function(parse_module(text)["f"]) == text
