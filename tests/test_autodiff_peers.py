"""Kernels on which peer tools are documented to give wrong gradients: isozyme must get them right (issue 6).

One test per construct, each run for opt "post" and "pre" on both backends and checked against central
differences of the undecorated function (`ad_oracle.py`), and, where the derivative has a closed form,
against that too. The kernels are those of the corpus (`ad_kernels.py`, each docstring quotes the statement
that matters); the arguments here are larger: past 32 loop iterations where a peer's fixed-size stack is
the problem.

Sources for what the peers do: NVIDIA Warp's user guide, "Differentiability" (sections "Dynamic Loops",
"In-Place Math Operations", "Array Overwrite Tracking"); Taichi's "Differentiable Programming" (its
"Global Data Access Rules"), its AD-stack (`CompileConfig::default_ad_stack_size`, 32, used when the
size cannot be determined; `stack_push` in `runtime.cpp` does not check the bound) and its issues #3802,
#6204 and #7115 on branches.
"""

from __future__ import annotations

import numpy as np
import pytest
from ad_kernels import (
    Case,
    branch_inputs,
    branch_on_active_state,
    dynamic_trip_product,
    inplace_multiply,
    read_then_overwrite,
    tanh_recurrence,
    uniform,
)
from ad_oracle import assert_matches_finite_differences, jacobian, make_problem, reverse_mode

VARIANTS = [(opt, backend) for opt in ("post", "pre") for backend in ("interp", "llvm")]
by_variant = pytest.mark.parametrize(("opt", "backend"), VARIANTS, ids=[f"{o}-{b}" for o, b in VARIANTS])


def check(case: Case, opt: str, backend: str) -> np.ndarray:
    """Reverse mode against finite differences for this case; the reverse-mode gradient."""
    problem = make_problem(case)
    expected = jacobian(problem).T @ problem.cotangent()
    got = reverse_mode(problem, opt, backend).gradient
    assert_matches_finite_differences(problem, got, expected)
    return got


# --- a product over a loop whose trip count is a runtime argument ----------------------------------------


@by_variant
def test_product_with_runtime_trip_count(opt: str, backend: str) -> None:
    """`p *= x[i]` for i < n, n a runtime argument: d p / d x[i] = p / x[i] needs every partial product.

    Warp does not replay dynamic loops (a `range` over a runtime value) in the backward pass, so the
    adjoint sees only the final `p`: its guide shows this very loop giving [32, 8, 2] instead of
    [4, 4, 4]. Taichi keeps loop-carried locals on an AD-stack whose size, for a runtime trip count,
    falls back to 32 entries with an unchecked push: longer loops overflow it silently. Here n = 40 of
    45 elements: the tape must hold 40 values and the 5 elements past n get no gradient."""
    x = uniform(np.random.default_rng(1), 0.9, 1.1, 45)
    case = Case("peer_dynamic_product", dynamic_trip_product, ("dup", "const"), lambda rng: (x.copy(), 40))
    got = check(case, opt, backend)
    seed = make_problem(case).seed
    closed_form = [seed * np.prod(np.delete(x[:40], i)) for i in range(40)] + [0.0] * 5
    np.testing.assert_allclose(got, closed_form, rtol=1e-12, atol=0.0)


# --- an in-place product of two Duplicated arrays --------------------------------------------------------


@by_variant
def test_inplace_multiply_both_duplicated(opt: str, backend: str) -> None:
    """`a[i] *= b[i]`: the adjoint of b needs a's value from *before* the store, and the adjoint of a's
    entry contents is the seed of its exit contents times b.

    Warp's guide: "In-place multiplication and division are not supported and incorrect results will be
    obtained in the backward pass". In Taichi it breaks Global Data Access Rule #2 (a second write to an
    element must be an atomic add), which is not checked unless validation is asked for."""
    rng = np.random.default_rng(2)
    a, b = uniform(rng, -1.0, 1.0, 9), uniform(rng, -1.0, 1.0, 9)
    case = Case("peer_inplace_multiply", inplace_multiply, ("dup", "dup"), lambda rng: (a.copy(), b.copy()))
    got = check(case, opt, backend)
    abar = make_problem(case).array_seeds[0]
    np.testing.assert_allclose(got, np.concatenate([abar * b, abar * a]), rtol=1e-15, atol=0.0)


# --- an array overwritten after being read ---------------------------------------------------------------


@by_variant
def test_array_overwritten_after_being_read(opt: str, backend: str) -> None:
    """`a[i]` is read, then overwritten in the same iteration, and its new value is read later: the
    reverse pass needs both the old value (for d b / d a) and the new one.

    Warp's guide (Array Overwrite Tracking, case B "Intra-Kernel Overwrite": `b[tid] = a[tid] * a[tid];
    a[tid] = 1.0`) shows the wrong gradient this gives, since the backward pass reads the array's current
    contents. Taichi forbids it (Global Data Access Rule #1: once read, an element may not be mutated)
    and gives wrong gradients when it is broken without validation."""
    rng = np.random.default_rng(3)
    a, b = uniform(rng, -1.0, 1.0, 8), rng.standard_normal(8)
    case = Case("peer_read_then_overwrite", read_then_overwrite, ("dup", "dup"), lambda rng: (a.copy(), b.copy()))
    check(case, opt, backend)


# --- a branch on an active value -------------------------------------------------------------------------


@by_variant
def test_branch_on_active_value(opt: str, backend: str) -> None:
    """The condition depends on the loop-carried active `s`: the reverse pass must replay, iteration by
    iteration, the side the forward pass took, and never evaluate the other side (`sqrt(0.5 - s)` is nan
    where s > 0.5).

    Warp's backward pass does not replay dynamic loops: the intermediate values computed in one, here the
    `s` each branch was decided on, are not restored per iteration (its guide, "Dynamic Loops"). Taichi
    had wrong adjoints for branches on field values (issue #3802) and on the loop index (#6204, fixed by
    keeping each iteration's condition on the AD-stack), and with `flatten_if` it turns branches into
    selects whose untaken side is differentiated too, giving nan (#7115)."""
    x = branch_inputs(np.random.default_rng(4), 12)
    case = Case("peer_branch_on_active_state", branch_on_active_state, ("dup",), lambda rng: (x.copy(),))
    got = check(case, opt, backend)
    assert np.isfinite(got).all()


# --- a loop-carried nonlinear state ----------------------------------------------------------------------


@by_variant
def test_loop_carried_tanh_state(opt: str, backend: str) -> None:
    """`s = tanh(s + x[i])`: d s_end / d x[i] is the product of tanh' at every later step, so every
    iteration's s must be kept (here 40 of them).

    Warp does not replay the dynamic loop backward and evaluates every tanh' at the final state; its guide
    warns that such adjoints are wrong. Taichi's AD-stack for `s` has 32 unchecked entries when the trip
    count (the array's length) is only known at run time."""
    x = uniform(np.random.default_rng(5), -1.0, 1.0, 40)
    case = Case("peer_tanh_recurrence", tanh_recurrence, ("dup",), lambda rng: (x.copy(),))
    check(case, opt, backend)
