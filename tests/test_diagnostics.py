"""Diagnostics of the frontend: a bad kernel is a CompileError naming the construct, with the file, line,
column, source line and a caret, never an internal traceback.

Each case is a kernel module; the line marked `# <-` is where the error must point, and `at` is the text
the caret must start under on that line."""

from __future__ import annotations

import importlib.util
import itertools
import textwrap
from pathlib import Path

import pytest

import isozyme as iz

HEADER = """\
import math
import numpy as np
import isozyme as iz
from isozyme import f32, f64, i32, i64, boolean, Array

W = np.ones(3)

def plain(v):
    return v

@iz.kernel
def mag(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return iz.sqrt(s)

"""

CASES = {
    "unsupported statement": ("""
        @iz.kernel
        def k(x: Array[f64]):
            with open("f") as g:  # <-
                pass
        """, "unsupported statement in a kernel: 'with' statement", "with"),
    "unsupported expression": ("""
        @iz.kernel
        def k(x: Array[f64]) -> f64:
            y = [v for v in range(3)]  # <-
            return 1.0
        """, "unsupported expression in a kernel: list comprehension", "[v for"),
    "unannotated parameter": ("""
        @iz.kernel
        def k(x, n: i64):  # <-
            pass
        """, "parameter 'x' of kernel 'k' needs a type annotation", "x, n"),
    "unknown name": ("""
        @iz.kernel
        def k(n: i64) -> i64:
            return n + undefined_thing  # <-
        """, "unknown name 'undefined_thing'", "undefined_thing"),
    "plain python function": ("""
        @iz.kernel
        def k(x: Array[f64]) -> f64:
            return plain(x[0])  # <-
        """, "call of plain Python function 'plain': decorate it with @iz.kernel", "plain("),
    "python builtin": ("""
        @iz.kernel
        def k(x: Array[f64]):
            print(x[0])  # <-
        """, "call of Python builtin 'print' is not supported in a kernel", "print"),
    "type conflict between paths": ("""
        @iz.kernel
        def k(x: Array[f64], c: boolean) -> f64:
            if c:
                a = x
            else:
                a = 1.0
            return a  # <-
        """, "type conflict between paths: variable 'a' is", "a  #"),
    "kernel call with too many arguments": ("""
        @iz.kernel
        def k(x: Array[f64], n: i64) -> f64:
            return mag(x, n, n)  # <-
        """, "kernel 'mag' takes 2 argument(s) (x, n), got 3", "mag("),
    "kernel call with a wrong argument type": ("""
        @iz.kernel
        def k(x: Array[f64], n: i64) -> f64:
            return mag(n, n)  # <-
        """, "argument 'x' of kernel 'mag' must be Array[f64], got i64", "n, n"),
    "kernel call with a float for an integer": ("""
        @iz.kernel
        def k(x: Array[f64], n: i64) -> f64:
            return mag(x, n / 2)  # <-
        """, "argument 'n' of kernel 'mag' must be i64, got f64", "n / 2"),
    "kernel call with an unknown keyword": ("""
        @iz.kernel
        def k(x: Array[f64], n: i64) -> f64:
            return mag(x, m=n)  # <-
        """, "unexpected keyword argument 'm'", "m=n"),
    "value returned without annotation": ("""
        @iz.kernel
        def k(x: Array[f64]):
            return x[0]  # <-
        """, "kernel 'k' returns a value but has no return annotation; declare it: -> f64", "x[0]"),
    "bare return with annotation": ("""
        @iz.kernel
        def k(x: Array[f64]) -> f64:
            return  # <-
        """, "kernel 'k' must return a f64 value", "return"),
    "falls off the end": ("""
        @iz.kernel
        def k(x: Array[f64], n: i64) -> f64:
            for i in range(n):  # <-
                return x[i]
        """, "kernel 'k' is declared to return f64 but can reach its end without a return", "for i"),
    "recursion": ("""
        @iz.kernel
        def fact(n: i64) -> i64:
            if n <= 1:
                return 1
            return n * fact(n - 1)  # <-
        """, "recursive call of kernel 'fact' (fact -> fact): recursion is not supported", "fact(n"),
    "mutual recursion": ("""
        @iz.kernel
        def even(n: i64) -> boolean:
            return n == 0 or odd(n - 1)

        @iz.kernel
        def odd(n: i64) -> boolean:
            return n != 0 and even(n - 1)  # <-
        """, "recursive call of kernel 'even' (even -> odd -> even)", "even(n"),
    "slice": ("""
        @iz.kernel
        def k(x: Array[f64]) -> f64:
            return x[1:3]  # <-
        """, "slices are not supported in kernels", "1:3"),
    "wrong number of indices": ("""
        @iz.kernel
        def k(a: Array[f64, 2]) -> f64:
            return a[0]  # <-
        """, "array of 2 dimension(s) indexed with 1 index(es)", "a[0]"),
    "float index": ("""
        @iz.kernel
        def k(x: Array[f64]) -> f64:
            return x[x[0]]  # <-
        """, "array index must be an integer, got f64", "x[0]]"),
    "range of floats": ("""
        @iz.kernel
        def k(x: Array[f64], n: f64):
            for i in range(n):  # <-
                x[i] = 0.0
        """, "range() needs integers, got f64", "n)"),
    "iteration over an array": ("""
        @iz.kernel
        def k(x: Array[f64]) -> f64:
            s = 0.0
            for v in x:  # <-
                s += v
            return s
        """, "for loops iterate over range(...), iz.prange(...) or iz.ndrange(...) only", "x:"),
    "zero step": ("""
        @iz.kernel
        def k(x: Array[f64], n: i64):
            for i in range(0, n, 0):  # <-
                x[i] = 0.0
        """, "range() step must not be zero", "0):"),
    "float stored into an integer array": ("""
        @iz.kernel
        def k(idx: Array[i64], x: Array[f64]):
            idx[0] = x[0]  # <-
        """, "cannot store a f64 value into an element of Array[i64] (convert it explicitly)", "idx[0] ="),
    "integer power with a runtime exponent": ("""
        @iz.kernel
        def k(n: i64) -> i64:
            return n ** n  # <-
        """, "integer ** needs a constant exponent >= 0", "n ** n"),
    "variable not assigned on every path": ("""
        @iz.kernel
        def k(c: boolean) -> f64:
            if c:
                y = 1.0
            return y  # <-
        """, "variable 'y' may be used before it is assigned", "y  #"),
    "global array": ("""
        @iz.kernel
        def k(x: Array[f64]) -> f64:
            return W[0]  # <-
        """, "global array 'W' cannot be used in a kernel; pass it as a parameter", "W["),
    "method call": ("""
        @iz.kernel
        def k(x: Array[f64]) -> f64:
            return x.sum()  # <-
        """, "cannot call 'x.sum'", "x.sum"),
    "array arithmetic": ("""
        @iz.kernel
        def k(x: Array[f64]) -> f64:
            y = x + 1.0  # <-
            return y[0]
        """, "'+' needs a number, got the array f64[?]", "x +"),
    "array return annotation": ("""
        @iz.kernel
        def k(x: Array[f64]) -> Array[f64]:  # <-
            return x
        """, "kernels return scalars only", "Array[f64]:"),
    "array rebound on different paths": ("""
        @iz.kernel
        def k(x: Array[f64], y: Array[f64], c: boolean) -> f64:
            a = x
            if c:
                a = y
            return a[0]  # <-
        """, "array variable 'a' refers to different arrays on different paths", "a[0]"),
    "bitwise on floats": ("""
        @iz.kernel
        def k(a: f64, b: f64) -> f64:
            return a & b  # <-
        """, "'&' needs integers, got f64 and f64", "a & b"),
    "tuple value": ("""
        @iz.kernel
        def k(a: f64) -> f64:
            t = (a, a)  # <-
            return a
        """, "tuples are only supported on both sides of an assignment", "(a, a)"),
    "string constant": ("""
        @iz.kernel
        def k(a: f64) -> f64:
            s = "abc"  # <-
            return a
        """, "unsupported constant in a kernel: str", '"abc"'),
    "default parameter": ("""
        @iz.kernel
        def k(a: f64, b: f64 = 1.0) -> f64:  # <-
            return a
        """, "kernel parameters are plain positional parameters without defaults", "1.0)"),
    "range outside a for loop": ("""
        @iz.kernel
        def k(n: i64) -> i64:
            r = range(n)  # <-
            return n
        """, "'range' is only allowed as the iterable of a for loop", "range(n)"),
    "used before assignment": ("""
        @iz.kernel
        def k(n: i64) -> i64:
            m = m + n  # <-
            return m
        """, "local variable 'm' is used before it is assigned", "m + n"),
    "bad dtype of a local array": ("""
        @iz.kernel
        def k(n: i64) -> f64:
            a = iz.zeros(n, np.complex128)  # <-
            return a[0]
        """, "unsupported dtype 'np.complex128'", "np.complex128"),
}

_counter = itertools.count()


def load(tmp_path: Path, body: str):
    """Write HEADER + body to a file, import it, return the module and the file's lines."""
    source = HEADER + textwrap.dedent(body)
    path = tmp_path / f"diag_{next(_counter)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path, source.splitlines()


def compile_error(module) -> iz.CompileError:
    kernels = [v for v in vars(module).values() if isinstance(v, iz.Kernel) and v.__name__ != "mag"]
    with pytest.raises(iz.CompileError) as info:
        for kernel in kernels:
            iz.show_ir(kernel)
    return info.value


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_diagnostic(case: str, tmp_path: Path) -> None:
    body, message, at = CASES[case]
    module, path, lines = load(tmp_path, body)
    error = compile_error(module)
    marked = next(n for n, line in enumerate(lines, 1) if line.rstrip().endswith("# <-"))
    assert message in error.msg
    assert (error.filename, error.lineno) == (str(path), marked)
    assert error.column == lines[marked - 1].index(at) + 1
    rendered = str(error).splitlines()
    assert rendered[0] == error.msg
    assert rendered[1] == f'  File "{path}", line {marked}, column {error.column}'
    assert rendered[2].strip() == lines[marked - 1].strip()
    caret_line = rendered[3]
    indent = len(lines[marked - 1]) - len(lines[marked - 1].lstrip())
    assert caret_line.index("^") - 4 == error.column - 1 - indent


def test_there_are_enough_diagnostic_cases() -> None:
    assert len(CASES) >= 20
    assert len({message for _, message, _ in CASES.values()}) == len(CASES)


def test_error_reads_like_a_syntax_error(tmp_path: Path) -> None:
    module, path, _ = load(tmp_path, CASES["unknown name"][0])
    error = compile_error(module)
    assert str(error) == (
        "unknown name 'undefined_thing'\n"
        f'  File "{path}", line {error.lineno}, column 16\n'
        "    return n + undefined_thing  # <-\n"
        "               ^^^^^^^^^^^^^^^")


def test_error_is_raised_by_the_first_call_too(tmp_path: Path) -> None:
    module, _, _ = load(tmp_path, CASES["unknown name"][0])
    with pytest.raises(iz.CompileError, match="unknown name"):
        module.k(3)


def test_kernel_defined_in_a_function_points_at_the_right_column(tmp_path: Path) -> None:
    module, path, lines = load(tmp_path, """
        def factory():
            @iz.kernel
            def k(n: i64) -> i64:
                return n + nowhere  # <-
            return k
        """)
    error = compile_error(type("M", (), {"k": module.factory()}))
    marked = next(n for n, line in enumerate(lines, 1) if line.rstrip().endswith("# <-"))
    assert (error.lineno, error.column) == (marked, lines[marked - 1].index("nowhere") + 1)
