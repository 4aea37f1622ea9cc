"""Generated code compiles and differentiates: long operator chains, thousands of terms in one kernel,
thousands of sequential branches (docs/bad_input.md, "Long and deep programs").

No stage recurses along the IR's def-use chains or the nesting of an expression, so the only limit on a
chain is CPython's own parser: it refuses a left-nested `a + b + ...` of about 3,000 terms (3.11 and 3.12
alike), so a single chain is tested at 2,000 terms, and 10,000 terms as five chains in one kernel, a flat
`and` of 10,000 operands and 2,000 sequential `if`s. Each value is compared with the undecorated Python
function, each gradient with the coefficients the generator knows."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import isozyme as iz

SIZE = 100
"""Elements of the argument: term k reads x[k % SIZE] with coefficient k + 1."""


def load_module(tmp_path: Path, name: str, body: str) -> object:
    """A generated kernel module, imported from a file (a kernel's source must be in a file)."""
    path = tmp_path / f"{name}.py"
    path.write_text("import isozyme as iz\nfrom isozyme import Array, f64\n\n" + body)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def chain(start: int, count: int) -> str:
    return " + ".join(f"x[{k % SIZE}] * {k + 1}.0" for k in range(start, start + count))


def coefficients(terms: int) -> np.ndarray:
    expected = np.zeros(SIZE)
    np.add.at(expected, np.arange(terms) % SIZE, np.arange(terms) + 1.0)
    return expected


@pytest.mark.parametrize("backend", ["llvm", "interp"])
def test_a_chain_of_2000_terms(tmp_path: Path, backend: str) -> None:
    module = load_module(tmp_path, f"chain_{backend}", f"@iz.kernel\ndef f(x: Array[f64]) -> f64:\n"
                                                      f"    return {chain(0, 2000)}\n")
    kernel = module.f  # type: ignore[attr-defined]
    x = np.linspace(-1.0, 1.0, SIZE)
    assert np.isclose(kernel.compile(backend)(x), kernel.py_func(x), rtol=1e-12)
    assert np.allclose(iz.grad(kernel, backend=backend)(x), coefficients(2000), rtol=1e-13)


def test_ten_thousand_terms_in_one_kernel(tmp_path: Path) -> None:
    statements = "".join(f"    s = s + {chain(2000 * j, 2000)}\n" for j in range(5))
    module = load_module(tmp_path, "five_chains", f"@iz.kernel\ndef f(x: Array[f64]) -> f64:\n    s = 0.0\n"
                                                  f"{statements}    return s\n")
    kernel = module.f  # type: ignore[attr-defined]
    x = np.linspace(-1.0, 1.0, SIZE)
    assert np.isclose(kernel(x), kernel.py_func(x), rtol=1e-12)
    assert np.allclose(iz.grad(kernel)(x), coefficients(10_000), rtol=1e-13)


def test_a_flat_and_of_10000_operands(tmp_path: Path) -> None:
    condition = " and ".join(f"x[{k % SIZE}] > {-k - 1}.0" for k in range(10_000))
    module = load_module(tmp_path, "long_and", f"@iz.kernel\ndef f(x: Array[f64]) -> f64:\n"
                                               f"    if {condition}:\n        return x[0] * 2.0\n"
                                               f"    return x[1] * 3.0\n")
    kernel = module.f  # type: ignore[attr-defined]
    for x in (np.zeros(SIZE), np.full(SIZE, -50.0)):  # every test true; the 50th one false
        assert kernel(x) == kernel.py_func(x)


def test_2000_sequential_branches(tmp_path: Path) -> None:
    branches = "".join(f"    if x[{k % SIZE}] > 0.0:\n        s = s + x[{k % SIZE}] * {k + 1}.0\n"
                       for k in range(2000))
    module = load_module(tmp_path, "branches", f"@iz.kernel\ndef f(x: Array[f64]) -> f64:\n    s = 0.0\n"
                                               f"{branches}    return s\n")
    kernel = module.f  # type: ignore[attr-defined]
    x = np.linspace(-1.0, 1.0, SIZE)
    assert np.isclose(kernel(x), kernel.py_func(x), rtol=1e-12)
    assert np.allclose(iz.grad(kernel)(x), coefficients(2000) * (x > 0.0), rtol=1e-13)


def test_a_block_of_a_thousand_checks_compiles(tmp_path: Path) -> None:
    """Each bounds check ends an LLVM block and continues in a new one; the new block's name must not grow
    with the number of checks before it (LLVM refuses a name over 1,024 characters: the long fuzz profile
    found `entry.ok.ok...` in a gradient with a few hundred checks in one block)."""
    terms = 1000
    body = "    return " + " + ".join(f"x[{k}] * {k + 1}.0" for k in range(terms)) + "\n"
    module = load_module(tmp_path, "checked_terms", "@iz.kernel(boundscheck=True)\ndef checked_terms(x: Array[f64]) "
                         "-> f64:\n" + body)
    x = np.linspace(-1.0, 1.0, terms)
    weights = np.arange(1.0, terms + 1.0)
    assert module.checked_terms(x) == pytest.approx(float(weights @ x), rel=1e-12)
    np.testing.assert_allclose(iz.grad(module.checked_terms)(x), weights, rtol=1e-15)
    with pytest.raises(IndexError):
        module.checked_terms(x[:10])
