"""The kernel option `fastmath=`: LLVM fast-math flags on float arithmetic, off by default.

It reaches the LLVM IR (the flags on `fadd`/`fmul`, none without it), lets LLVM vectorize a float reduction,
is a separate compilation (cache key) from the strict kernel, refuses an unknown flag, and keeps gradients
within rounding of the strict build and of finite differences (GMM, whose sums it reorders).
"""

from __future__ import annotations

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64
from isozyme.codegen.abi import fastmath_flags
from tests.example_modules import load_example

gmm = load_example("gmm")


def sum_of_squares(v: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(v)):
        s += v[i] * v[i]
    return s


strict_kernel = iz.kernel(sum_of_squares)
reassoc_kernel = iz.kernel(fastmath=("reassoc",))(sum_of_squares)


def test_fastmath_flags_are_checked_and_normalized() -> None:
    assert fastmath_flags(()) == fastmath_flags(None) == fastmath_flags(False) == ()
    assert fastmath_flags(True) == ("fast",)
    assert fastmath_flags("reassoc") == ("reassoc",)
    assert fastmath_flags(["nsz", "reassoc", "nsz"]) == ("nsz", "reassoc")
    with pytest.raises(ValueError, match="'reassociate'"):
        iz.kernel(fastmath=("reassociate",))(sum_of_squares)


def test_the_strict_default_has_no_fast_math_flags() -> None:
    code = iz.show_ir(strict_kernel, stage="llvm")
    assert "fadd double" in code
    float_ops = [line for line in code.splitlines() if any(f" {op} " in line for op in ("fadd", "fmul"))]
    assert float_ops and not any("reassoc" in line or " fast " in line for line in float_ops)


def test_reassoc_reaches_the_llvm_ir_of_primal_and_gradient() -> None:
    assert "fadd reassoc double" in iz.show_ir(reassoc_kernel, stage="llvm")
    gradient = iz.show_ir(reassoc_kernel, stage="llvm", activity=("dup",))
    assert "fmul reassoc double" in gradient and "fadd reassoc double" in gradient


def test_reassoc_vectorizes_the_reduction() -> None:
    """LLVM vectorizes a strict float sum only where reordering is allowed: a vector accumulator (a `<N x
    double>` phi) with reassoc, none strict."""
    def vector_phi(code: str) -> bool:
        return any("phi" in line and "x double>" in line for line in code.splitlines())
    assert vector_phi(iz.show_ir(reassoc_kernel, stage="llvm-opt"))
    assert not vector_phi(iz.show_ir(strict_kernel, stage="llvm-opt"))


def test_reassoc_results_are_those_of_the_strict_kernel_within_rounding() -> None:
    v = np.random.default_rng(0).standard_normal(1001)
    assert reassoc_kernel(v) == pytest.approx(strict_kernel(v), rel=1e-13)
    np.testing.assert_allclose(iz.grad(reassoc_kernel)(v), 2 * v, rtol=1e-15)


def test_reassoc_gmm_gradient_matches_strict_and_finite_differences() -> None:
    data = gmm.gmm_data(4, 3, 20, seed=1, gamma=1.1, m=1)
    args = (*data, gmm.log_gamma_distrib(0.5 * (4 + 1 + 1), 4))
    fast = iz.kernel(fastmath=("reassoc",))(gmm.gmm_objective.py_func)
    iz.testing.gradcheck(fast, *args, argnums=(0, 1, 2), show_summary=False)

    def gradient(kernel: iz.Kernel) -> list[np.ndarray]:
        shadows = [np.zeros_like(a) for a in args[:3]]
        iz.autodiff(kernel, *(iz.Duplicated(a, s) for a, s in zip(args[:3], shadows)), *args[3:])
        return shadows
    for reordered, strict in zip(gradient(fast), gradient(gmm.gmm_objective)):
        np.testing.assert_allclose(reordered, strict, rtol=1e-12, atol=1e-12)
