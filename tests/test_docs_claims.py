"""The claims of docs/comparison.md that no other test states on its own: each test here is named in that
page next to its claim. Gradients are checked against central differences of the undecorated Python
function (`kernel.py_func`), on the interpreter and the llvm backend."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.enzyme_ad.activity import ArgActivity
from isozyme.runtime.compiled_derivatives import differentiate
from isozyme.ssa.interpreter import StepLimitExceeded, run_function

BACKENDS = ["interp", "llvm"]


def central_gradient(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """d f / d x by central differences, f a function of a copy of x."""
    gradient = np.zeros_like(x)
    for k in range(x.size):
        step = np.zeros_like(x)
        step[k] = eps
        gradient[k] = (f((x + step).copy()) - f((x - step).copy())) / (2 * eps)
    return gradient


def line_of(kernel: iz.Kernel, text: str) -> int:
    lines, first = inspect.getsourcelines(kernel.py_func)
    return first + next(i for i, line in enumerate(lines) if text in line)


# --- loops whose trip count the data decides ------------------------------------------------------------


@iz.kernel
def grow_until(x: Array[f64], limit: f64) -> f64:
    s = x[0]
    total = 0.0
    while s < limit:  # how many times this runs depends on x (hundreds of times here)
        s = s * (1.0 + 0.01 * x[1]) + 0.001
        total += iz.tanh(s) * x[2]
    return total + s


def grow_until_trips(x: np.ndarray, limit: float) -> int:
    s, trips = x[0], 0
    while s < limit:
        s, trips = s * (1.0 + 0.01 * x[1]) + 0.001, trips + 1
    return trips


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opt", ["post", "pre"])
def test_while_loop_with_a_data_dependent_trip_count_matches_finite_differences(backend: str, opt: str) -> None:
    """The reverse pass runs a `while` loop back exactly as many times as it ran, with every iteration's
    state (hundreds of them, taped in a growable stack): no fixed-size stack, no static trip count."""
    for x in (np.array([0.3, 1.7, 0.8]), np.array([1.9, 0.9, -0.4])):
        trips = grow_until_trips(x, 2.0)
        assert 0 < trips and all(grow_until_trips(x + d, 2.0) == trips for d in (1e-6, -1e-6))
        got = iz.grad(grow_until, argnums=0, opt=opt, backend=backend)(x.copy(), 2.0)
        expected = central_gradient(lambda v: grow_until.py_func(v, 2.0), x)
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-8)
    assert grow_until_trips(np.array([0.3, 1.7, 0.8]), 2.0) > 100


# --- memory overwritten in place --------------------------------------------------------------------------


@iz.kernel
def step_in_place(x: Array[f64], a: f64, steps: i64) -> f64:
    for _ in range(steps):  # each step overwrites x with a nonlinear function of its old values
        for i in range(x.shape[0]):
            x[i] = x[i] - a * iz.sin(x[i]) * x[(i + 1) % x.shape[0]]
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opt", ["post", "pre"])
def test_array_overwritten_in_place_matches_finite_differences(backend: str, opt: str) -> None:
    """x[i] is overwritten at every step, and x[i + 1] is read before (and x[0] after) its own update: the
    reverse pass needs every overwritten value, which it tapes; the gradient of the initial x and of a
    matches central differences, and the primal result is left in x as in a plain call."""
    x0, a = np.array([0.4, -0.7, 1.1, 0.2, -0.3]), 0.3
    x, d_x = x0.copy(), np.zeros(5)
    value, (d_a,) = iz.autodiff(step_in_place, iz.Duplicated(x, d_x), iz.Active(a), 6, opt=opt, backend=backend)
    reference = x0.copy()
    assert value == pytest.approx(step_in_place.py_func(reference, a, 6), rel=1e-14)
    np.testing.assert_allclose(x, reference, rtol=1e-14)
    expected = central_gradient(lambda v: step_in_place.py_func(v, a, 6), x0)
    np.testing.assert_allclose(d_x, expected, rtol=1e-6, atol=1e-9)
    expected_a = (step_in_place.py_func(x0.copy(), a + 1e-6, 6) - step_in_place.py_func(x0.copy(), a - 1e-6, 6)) / 2e-6
    assert d_a == pytest.approx(expected_a, rel=1e-6)


# --- a construct reverse mode refuses ---------------------------------------------------------------------


@iz.kernel
def scratch_sized_by_data(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(x.shape[0]):
        m = int(x[i] * 3.0) + 1
        t = iz.zeros(m, f64)  # active, and its size depends on the data
        for j in range(m):
            t[j] = x[i] * j
        for j in range(m):
            s += t[j] * t[m - 1 - j]
    return s


def test_a_refused_construct_is_a_differentiation_error_naming_the_line() -> None:
    """Never a wrong gradient: what reverse mode cannot differentiate yet is an error with file and line."""
    with pytest.raises(iz.DifferentiationError) as error:
        iz.grad(scratch_sized_by_data, backend="interp")(np.array([0.5, 1.5]))
    assert f"line {line_of(scratch_sized_by_data, 'iz.zeros(')}," in str(error.value)
    assert __file__ in str(error.value) or "test_docs_claims.py" in str(error.value)
    x = np.array([0.5, 1.5])
    assert scratch_sized_by_data(x) == pytest.approx(scratch_sized_by_data.py_func(x))  # the primal runs


# --- optimizing before AD changes the gradient's complexity --------------------------------------------------


@iz.kernel
def mag(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return iz.sqrt(s)


@iz.kernel
def norm(out: Array[f64], x: Array[f64], n: i64):
    for i in range(n):
        out[i] = x[i] / mag(x, n)


@pytest.mark.parametrize("n", [100, 200])
def test_norm_gradient_is_linear_after_o2_and_quadratic_before(n: int) -> None:
    """AD of the optimized program (opt="post") runs the gradient of norm in O(n) interpreted instructions
    (about 44 n, here checked under 50 n); AD of the program as written (opt="pre") needs more than 10 n^2
    (about 30 n^2): the reverse of mag runs inside the reversed loop of norm."""
    activities = (ArgActivity.DUP, ArgActivity.DUP, ArgActivity.CONST)
    x = np.random.default_rng(0).random(n)
    for opt, limit, fits in (("post", 50 * n, True), ("pre", 10 * n * n, False)):
        function = differentiate(norm, activities, opt).function
        args = (np.empty(n), np.ones(n), x.copy(), np.zeros(n), n)
        if fits:
            run_function(function, *args, step_limit=limit)
        else:
            with pytest.raises(StepLimitExceeded):
                run_function(function, *args, step_limit=limit)


def test_norm_tapes_one_value_after_o2_and_n_before() -> None:
    activity = ("dup", "dup", "const")
    assert "1 taped value(s)" in iz.show_cache(norm, activity=activity, opt="post")
    assert "x 1  at" in iz.show_cache(norm, activity=activity, opt="post")
    assert "x max(n, 0)  at" in iz.show_cache(norm, activity=activity, opt="pre")


# --- JAX, where it is installed: its reverse mode refuses a while loop --------------------------------------


def test_jax_reverse_mode_refuses_a_while_loop_that_isozyme_differentiates() -> None:
    """`jax.grad` of `lax.while_loop` is a ValueError (JAX differentiates it in forward mode only); the
    same loop as a kernel has a reverse-mode gradient."""
    jax = pytest.importorskip("jax", reason="JAX is a peer, installed with '.[peers]'")

    def halve(x):
        return jax.lax.while_loop(lambda s: s > 0.1, lambda s: s * 0.5 + 0.01 * s * s, x)

    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for lax.while_loop"):
        jax.grad(halve)(1.0)
    x = np.array([1.0])
    assert iz.grad(halve_kernel, backend="interp")(x)[0] == pytest.approx(
        central_gradient(lambda v: halve_kernel.py_func(v), x)[0], rel=1e-6)


@iz.kernel
def halve_kernel(x: Array[f64]) -> f64:
    s = x[0]
    while s > 0.1:
        s = s * 0.5 + 0.01 * s * s
    return s
