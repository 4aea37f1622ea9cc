"""Malformed IR text is a ParseError naming the file, line and column, with the line and a caret."""

from __future__ import annotations

import pytest

from isozyme.ssa.parser import ParseError, parse_function, parse_module
from isozyme.ssa.printer import print_function

CASES = [
    ("undefined value", "func @f() -> f64 {\nbb0:\n  ret %nope\n}", 3, 7, "use of undefined value %nope"),
    ("unknown op", "func @f(%a: f64) -> f64 {\nbb0:\n  %x = fmadd %a, %a\n  ret %x\n}", 3, 8,
     "unknown op 'fmadd'"),
    ("undefined label", "func @f() {\nbb0:\n  br bb9\n}", 3, 6, "branch to undefined block bb9"),
    ("value defined twice", "func @f(%a: f64) {\nbb0:\n  %x = fadd %a, %a\n  %x = fmul %a, %a\n  ret\n}", 4, 3,
     "%x is defined twice"),
    ("argument redefined", "func @f(%a: f64) {\nbb0:\n  %a = fadd %a, %a\n  ret\n}", 3, 3, "%a is defined twice"),
    ("block defined twice", "func @f() {\nbb0:\n  br bb0\nbb0:\n  ret\n}", 4, 1, "block bb0 is defined twice"),
    ("unknown type", "func @f(%a: f16) {\nbb0:\n  ret\n}", 1, 13, "unknown type 'f16'"),
    ("unknown callee", "func @f() {\nbb0:\n  call @g()\n  ret\n}", 3, 8, "call of undefined function @g"),
    ("float literal typed as int", "func @f() -> i64 {\nbb0:\n  ret 1.5:i64\n}", 3, 7,
     "float literal 1.5 cannot have type i64"),
    ("missing comma", "func @f(%a: f64) -> f64 {\nbb0:\n  %x = fadd %a %a\n  ret %x\n}", 3, 16,
     "expected a flag or the end of the line, found '%a'"),
    ("instruction before a label", "func @f() {\n  ret\n}", 2, 3, "instruction before the first block label"),
    ("missing closing brace", "func @f() {\nbb0:\n  ret\n", 1, 1, "function has no closing '}'"),
    ("self-referential value", "func @f() -> i64 {\nbb0:\n  %x = iadd %x, 1\n  ret %x\n}", 3, 3,
     "%x is defined in terms of itself"),
    ("function defined twice", "func @f() {\nbb0:\n  ret\n}\nfunc @f() {\nbb0:\n  ret\n}", 5, 6,
     "function @f is defined twice"),
    ("stray character", "func @f() {\nbb0:\n  ret $\n}", 3, 7, "unexpected character '$'"),
    ("load from a scalar", "func @f(%a: f64) -> f64 {\nbb0:\n  %x = load %a[0]\n  ret %x\n}", 3, 3,
     "cannot derive a result type for load"),
]


@pytest.mark.parametrize("name, text, line, column, message", CASES, ids=[c[0] for c in CASES])
def test_parse_error(name: str, text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(ParseError) as error:
        parse_module(text, "test.ir")
    assert error.value.loc.line == line
    assert error.value.loc.col + 1 == column
    assert message in error.value.message
    rendered = str(error.value).splitlines()
    assert rendered[0].startswith(f"test.ir:{line}:{column}: error: ")
    assert rendered[1] == "  " + text.splitlines()[line - 1]
    assert rendered[2] == "  " + " " * (column - 1) + "^"


def test_comments_and_blank_lines_are_dropped() -> None:
    function = parse_function("""
; a comment line
func @f(%a: f64) -> f64 {   ; trailing comment

bb0:                        ; preds nothing really
  %x = fadd %a, %a          ; double it
  ret %x
}
""")
    assert print_function(function) == "func @f(%a: f64) -> f64 {\nbb0:\n  %x = fadd %a, %a\n  ret %x\n}"


def test_source_locations_point_into_the_file() -> None:
    function = parse_function("func @f(%a: f64) -> f64 {\nbb0:\n  %x = fadd %a, %a\n  ret %x\n}", "k.ir")
    x = function.entry.instructions[0]
    assert (x.loc.file, x.loc.line, x.loc.col) == ("k.ir", 3, 2)
    assert str(x.loc) == "k.ir:3:3"


def test_parse_function_wants_exactly_one() -> None:
    with pytest.raises(ValueError, match="expected one function, found 2"):
        parse_function("func @f() {\nbb0:\n  ret\n}\nfunc @g() {\nbb0:\n  ret\n}")
