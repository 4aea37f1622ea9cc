"""Programs deeper than Python's recursion limit (issue 23): every stage, from the frontend to LLVM and
the interpreter and AD, handles them without recursion, in seconds.

Generated code (sympy's output, unrolled stencils) has expressions of thousands of terms, and
`a + b + c + ...` nests as deep as it is long, as does the def-use chain of its SSA; a kernel of
thousands of `if`s in a row has a dominator tree and predecessor chains as deep. Python's recursion
limit is 1,000 frames.

CPython's own parser and compiler stop near 3,000 terms of a flat `+` chain (3.11, 3.12), so a longer
expression cannot come from a file; the 10,000-term kernels here get their syntax tree built directly
(`deep_kernel`): the stub's `return x[0]` is replaced by the long expression. Chains that Python parses
flat (`and`, `or`, comparisons) and the longest `+` chain it compiles come from source files.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import kernelgen
import numpy as np
import pytest

import isozyme as iz

TERMS = 10_000
"""Terms of the long expressions: ten times the recursion limit."""

IFS = 1_500
"""`if` statements in a row in the deep CFG: 1.5 times the recursion limit of joins in a row."""

FLAT_TERMS = 2_000
"""The longest `+` chain of the source-file tests: CPython 3.11 and 3.12 compile it (not 3,000)."""

DEFAULT_RECURSION_LIMIT = 1_000
"""Python's: the tests run at it (`default_recursion_limit`)."""


def coefficients(count: int) -> np.ndarray:
    return np.array([float(k % 7 + 1) for k in range(count)])


@pytest.fixture(autouse=True)
def default_recursion_limit() -> Iterator[None]:
    """Each test runs at Python's default recursion limit, whatever ran before it."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(DEFAULT_RECURSION_LIMIT)
    yield
    sys.setrecursionlimit(limit)


def load_kernel(source: str, name: str, directory: Path) -> iz.Kernel:
    """The kernel `name` of `source`, written to a file in `directory` and imported."""
    module = kernelgen.load_module("import isozyme as iz\nfrom isozyme import Array, f64, i64\n\n" + source,
                                   directory)
    return getattr(module, name)


def deep_kernel(name: str, build: Callable[[ast.expr], ast.expr], directory: Path) -> iz.Kernel:
    """A kernel `name(x: Array[f64]) -> f64` returning the expression `build(stub)` makes, a syntax tree
    too deep for CPython to parse from a file: a stub returning `x[0]` is imported, and the frontend's
    tree of it (parsed once per kernel) gets the built expression instead of `x[0]`, which `build` is
    given for the source position of the nodes it makes."""
    kernel = load_kernel(f"@iz.kernel\ndef {name}(x: Array[f64]) -> f64:\n    return x[0]\n", name, directory)
    returned = kernel.definition.source.tree.body[0]
    assert isinstance(returned, ast.Return) and returned.value is not None
    returned.value = build(returned.value)
    return kernel


def at(node: ast.AST, like: ast.expr) -> ast.expr:
    """`node` with the source position of `like` (`ast.fix_missing_locations` would recurse)."""
    for field in ("lineno", "col_offset", "end_lineno", "end_col_offset"):
        setattr(node, field, getattr(like, field))
    return node  # type: ignore[return-value]


def element(index: int, like: ast.expr) -> ast.expr:
    """`x[index]`."""
    return at(ast.Subscript(at(ast.Name("x", ast.Load()), like), at(ast.Constant(index), like), ast.Load()), like)


def chain(operands: list[ast.expr], operator: Callable[[int], ast.operator], like: ast.expr) -> ast.expr:
    """`operands[0] op1 operands[1] op2 ...`, left-associated as Python parses it; `operator(k)` is the
    operator before operand k."""
    tree = operands[0]
    for k, operand in enumerate(operands[1:], start=1):
        tree = at(ast.BinOp(tree, operator(k), operand), like)
    return tree


OPERATIONS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: float.__add__, ast.Sub: float.__sub__, ast.Mult: float.__mul__, ast.Div: float.__truediv__}


def left_to_right(values: list[float], operator: Callable[[int], ast.operator]) -> float:
    """What Python computes for `chain` of these values (it has no function to call: CPython cannot
    compile the expression)."""
    result = values[0]
    for k in range(1, len(values)):
        result = OPERATIONS[type(operator(k))](result, values[k])
    return result


# --- a 10,000-term expression -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_sum(tmp_path_factory: pytest.TempPathFactory) -> iz.Kernel:
    """`x[0]*1.0 + x[1]*2.0 + ... + x[9999]*c`, the 10,000-term sum of issue 23."""
    def build(like: ast.expr) -> ast.expr:
        terms = [at(ast.BinOp(element(k, like), ast.Mult(), at(ast.Constant(c), like)), like)
                 for k, c in enumerate(coefficients(TERMS).tolist())]
        return chain(terms, lambda _: ast.Add(), like)
    return deep_kernel("long_sum", build, tmp_path_factory.mktemp("deep"))


@pytest.mark.parametrize("backend", ["llvm", "interp"])
def test_a_10000_term_sum_and_its_gradient(long_sum: iz.Kernel, backend: str) -> None:
    x = np.linspace(-1.0, 1.0, TERMS)
    terms = [value * c for value, c in zip(x.tolist(), coefficients(TERMS).tolist())]
    assert long_sum.compile(backend).entry(x) == left_to_right(terms, lambda _: ast.Add())
    assert np.array_equal(iz.grad(long_sum, backend=backend)(x), coefficients(TERMS))


@pytest.mark.parametrize(("name", "operator"), [
    ("product", lambda _: ast.Mult()),
    ("difference", lambda _: ast.Sub()),
    ("mixed", lambda k: [ast.Add(), ast.Mult(), ast.Sub(), ast.Div()][k % 4]),
])
def test_long_operator_chains(name: str, operator: Callable[[int], ast.operator], tmp_path: Path) -> None:
    kernel = deep_kernel(f"chain_{name}", lambda like: chain([element(k, like) for k in range(TERMS)], operator,
                                                             like), tmp_path)
    x = np.random.default_rng(0).uniform(0.999, 1.001, TERMS)
    assert kernel(x) == left_to_right(x.tolist(), operator)


# --- chains Python parses flat ----------------------------------------------------------------------------


def test_the_longest_sum_python_compiles(tmp_path: Path) -> None:
    """A flat `+` chain from a source file, as long as CPython compiles (twice the recursion limit)."""
    terms = " + ".join(f"x[{k}] * {c}" for k, c in enumerate(coefficients(FLAT_TERMS)))
    kernel = load_kernel(f"@iz.kernel\ndef flat_sum(x: Array[f64]) -> f64:\n    return {terms}\n", "flat_sum",
                         tmp_path)
    x = np.linspace(-1.0, 1.0, FLAT_TERMS)
    assert kernel(x) == kernel.py_func(x)
    assert kernel.compile("interp").entry(x) == kernel.py_func(x)


CHAINS = {
    "and": " and ".join(f"x[{k}] > 0.0" for k in range(TERMS)),
    "or": " or ".join(f"x[{k}] < 0.0" for k in range(TERMS)),
    "comparison": " < ".join(f"x[{k}]" for k in range(TERMS)),
}
"""Conditions of 10,000 operands that Python parses flat: each is a CFG of 10,000 blocks in a row."""


@pytest.mark.parametrize(("chain", "backend"), [("and", "llvm"), ("and", "interp"), ("or", "interp"),
                                                ("comparison", "llvm")])
def test_long_boolean_and_comparison_chains(chain: str, backend: str, tmp_path: Path) -> None:
    """One backend per chain but `and` (LLVM takes about 10 s over such a function, its own time)."""
    kernel = load_kernel(f"""@iz.kernel
def {chain}_chain(x: Array[f64]) -> f64:
    if {CHAINS[chain]}:
        return x[0] * 2.0
    return x[1] * 3.0
""", f"{chain}_chain", tmp_path)
    rising = np.linspace(0.5, 1.0, TERMS)
    for x in (rising, rising[::-1].copy(), np.where(np.arange(TERMS) == TERMS - 1, -1.0, rising)):
        assert kernel.compile(backend).entry(x) == kernel.py_func(x)


# --- a deep CFG ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def many_ifs(tmp_path_factory: pytest.TempPathFactory) -> iz.Kernel:
    """IFS `if`s in a row, each adding to `s` on one side and subtracting on the other."""
    body = "".join(f"    if x[{k}] > 0.5:\n        s = s + x[{k}] * {c}\n    else:\n        s = s - x[{k}]\n"
                   for k, c in enumerate(coefficients(IFS)))
    return load_kernel(f"@iz.kernel\ndef many_ifs(x: Array[f64]) -> f64:\n    s = 0.0\n{body}    return s\n",
                       "many_ifs", tmp_path_factory.mktemp("deep"))


@pytest.mark.parametrize("backend", ["llvm", "interp"])
def test_a_deep_cfg_runs_and_differentiates(many_ifs: iz.Kernel, backend: str) -> None:
    x = np.random.default_rng(1).uniform(0.0, 1.0, IFS)
    assert many_ifs.compile(backend).entry(x) == many_ifs.py_func(x)
    expected = np.where(x > 0.5, coefficients(IFS), -1.0)
    assert np.array_equal(iz.grad(many_ifs, backend=backend)(x), expected)
