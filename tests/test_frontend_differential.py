"""The frontend, construct by construct: each kernel of `kernels/constructs.py` computes what its
undecorated Python function computes, on a few seeded random inputs.

The oracle is plain Python (`kernelgen.python_reference`: kernels the construct calls run as Python too).
Return values must have the annotated type; ints and booleans compare exactly, floats to 1e-12 relative
(1e-5 for f32 kernels, which round every step to f32 where Python computes in f64), arrays likewise.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import kernelgen
import numpy as np
import pytest
from kernels.constructs import CONSTRUCTS, Construct

from isozyme import boolean, f32, f64, i32, i64

SEEDS = range(6)
RETURN_KINDS = {f64: "f", f32: "f", i64: "i", i32: "i", boolean: "b"}


def return_kind(kernel: Any) -> str | None:
    """"f", "i" or "b" for the kernel's return annotation, None when it has none."""
    annotation = inspect.signature(kernel.py_func).return_annotation
    return None if annotation is inspect.Signature.empty else RETURN_KINDS[annotation]


def run(function: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, list[Any]]:
    copies = kernelgen.copy_args(args)
    return function(*copies), copies


def test_constructs_are_many_and_named_uniquely() -> None:
    names = [construct.name for construct in CONSTRUCTS]
    assert len(names) >= 45 and len(set(names)) == len(names)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda construct: construct.name)
def test_kernel_computes_what_python_computes(construct: Construct, seed: int) -> None:
    args = construct.make_args(np.random.default_rng(seed))
    expected = run(kernelgen.python_reference(construct.kernel), args)
    actual = run(construct.kernel, args)
    kernelgen.assert_same_results(expected, actual, return_kind(construct.kernel), rtol=construct.rtol)
