"""Random kernels (`kernelgen.py`) run as plain Python, on the interpreter at O0 and at O2, and on LLVM.

A kernel is valid Python, and on the programs the generator makes (inside the common part of Python and
the kernel language, see kernelgen's docstring) it must compute what its undecorated function computes:
return value and every array argument, ints exactly, floats to 1e-12 relative (nan where Python has nan).
O2 must not change a single bit of what O0 computes (any nan counts as the same nan), and the `llvm`
backend must compute the interpreter's bits (no fast-math; f32 math is evaluated in f64 on both). The oracle is plain
Python all the way down (`kernelgen.python_reference`: helper kernels run as their `py_func` too). A
program that is not valid Python, or raises in Python, is a bug of the generator: it fails the test, it
is never filtered out.

Examples are derandomized (CI is reproducible). A program is made from one `st.binary` draw, which
hypothesis shrinks towards zero bytes, i.e. towards a small program: the falsifying example shows the
source of the kernel and its arguments (shrinking takes a few minutes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import kernelgen
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings

PROFILE = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "phases": (Phase.generate, Phase.shrink),  # no `explain`: its line report is noise for generated code
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generated modules go to files: the frontend reads kernels with `inspect.getsource`."""
    return tmp_path_factory.mktemp("random_kernels")


def run(function: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, list[Any]]:
    """`function` on fresh copies of `args`: (its return value, the arguments after the call).

    numpy scalars (the elements Python reads) warn on nan and overflow, which programs with non-finite
    values compute on purpose; a division by zero is a bug of the generator (Python floats would raise).
    """
    copies = kernelgen.copy_args(args)
    with np.errstate(divide="raise", invalid="ignore", over="ignore", under="ignore"):
        return function(*copies), copies


@settings(max_examples=200, **PROFILE)
@given(case=kernelgen.cases())
def test_kernel_computes_what_python_computes(kernel_dir: Path, case: tuple[kernelgen.Program, tuple]) -> None:
    program, args = case
    entry = kernelgen.load_module(program.source, kernel_dir).entry
    expected = run(kernelgen.python_reference(entry), args)
    kernelgen.assert_same_results(expected, run(entry, args), program.returns)


@settings(max_examples=300, **PROFILE)
@given(case=kernelgen.cases())
def test_o2_is_bit_identical_to_o0(kernel_dir: Path, case: tuple[kernelgen.Program, tuple]) -> None:
    program, args = case
    entry = kernelgen.load_module(program.source, kernel_dir).entry
    at_o0 = run(entry.compile(backend="interp", opt="O0"), args)
    kernelgen.assert_same_results(run(kernelgen.python_reference(entry), args), at_o0, program.returns)
    at_o2 = run(entry.compile(backend="interp", opt="O2"), args)
    kernelgen.assert_bit_identical(at_o0, at_o2)


@settings(max_examples=200, **PROFILE)
@given(case=kernelgen.cases())
def test_llvm_is_bit_identical_to_the_interpreter(kernel_dir: Path, case: tuple[kernelgen.Program, tuple]) -> None:
    program, args = case
    entry = kernelgen.load_module(program.source, kernel_dir).entry
    interpreted = run(entry.compile(backend="interp", opt="O2"), args)
    kernelgen.assert_bit_identical(interpreted, run(entry.compile(backend="llvm", opt="O2"), args))
