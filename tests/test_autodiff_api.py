"""The differentiation API (DESIGN 1.3): argument checks, `iz.grad`'s results, Enzyme's shadow semantics and
the errors for what reverse mode cannot differentiate. Expected gradients are worked out by hand here."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64, i64


@iz.kernel
def weighted_squares(x: Array[f64], idx: Array[i64], w: f64, k: i64) -> f64:
    s = 0.0
    for i in range(len(idx)):
        s += w * x[idx[i]] ** 2
    return s + k


@iz.kernel
def scaled_sines(out: Array[f64], x: Array[f64], a: f64):
    for i in range(len(x)):
        out[i] = a * iz.sin(x[i])


@iz.kernel
def count_positive(x: Array[f64]) -> i64:
    n = 0
    for i in range(len(x)):
        if x[i] > 0.0:
            n += 1
    return n


@iz.kernel
def mixed_scalars(a: f64, b: f64, c: f64) -> f64:
    return a * b * b + iz.exp(c)


@iz.kernel
def halving_steps(x: Array[f64]) -> f64:
    s = x[0]
    while s > 0.1:  # the trip count depends on the data: recorded at run time
        s = s * iz.sin(s)
    return s


def halving_steps_derivative(x0: float) -> tuple[float, int]:
    """d/dx0 of halving_steps by the chain rule, step by step: s' = s sin(s) has ds'/ds = sin(s) + s cos(s);
    and the number of steps."""
    s, derivative, steps = x0, 1.0, 0
    while s > 0.1:
        derivative *= math.sin(s) + s * math.cos(s)
        s = s * math.sin(s)
        steps += 1
    return derivative, steps


@iz.kernel
def data_sized_scratch(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        m = int(x[i] * 3.0) + 1
        t = iz.zeros(m, f64)  # an active local array whose size the data decides
        for j in range(m):
            t[j] = x[i] * j
        for j in range(m):
            s += t[j] * t[m - 1 - j]
    return s


X = np.array([0.5, -1.0, 2.0, 0.25])
IDX = np.array([0, 2, 2, 3], dtype=np.int64)


def weighted_squares_gradient(x: np.ndarray, w: float) -> np.ndarray:
    """d/dx of sum_i w x[idx[i]]^2: 2 w x[j] times the number of times j occurs in IDX."""
    return 2.0 * w * x * np.bincount(IDX, minlength=len(x))


# --- activities ---------------------------------------------------------------------------------------------


def test_duplicated_integer_array_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="'idx'.*integer array"):
        iz.autodiff(weighted_squares, iz.Duplicated(X.copy(), np.zeros(4)), iz.Duplicated(IDX, np.zeros_like(IDX)),
                    1.0, 0)


def test_active_array_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="'x'.*array"):
        iz.autodiff(weighted_squares, iz.Active(X.copy()), IDX, 1.0, 0)


def test_duplicated_scalar_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="'w'.*scalar"):
        iz.autodiff(weighted_squares, X.copy(), IDX, iz.Duplicated(1.0, 0.0), 0)


def test_active_integer_scalar_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="'k'"):
        iz.autodiff(weighted_squares, X.copy(), IDX, 1.0, iz.Active(3))


def test_grad_with_respect_to_an_integer_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="'idx'"):
        iz.grad(weighted_squares, argnums=1)(X.copy(), IDX, 1.0, 0)
    with pytest.raises(TypeError, match="'k'"):
        iz.grad(weighted_squares, argnums=3)(X.copy(), IDX, 1.0, 0)


# --- shadows ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shadow", [np.zeros(5), np.zeros((4, 1)), np.zeros(4, dtype=np.float32),
                                    np.zeros(4, dtype=np.int64)],
                         ids=["length", "rank", "float32", "int64"])
def test_shadow_of_the_wrong_shape_or_dtype_is_a_value_error(shadow: np.ndarray) -> None:
    with pytest.raises(ValueError, match="shadow of parameter 'x'"):
        iz.autodiff(weighted_squares, iz.Duplicated(X.copy(), shadow), IDX, 1.0, 0)


def test_shadow_that_is_not_an_array_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="shadow of parameter 'x'"):
        iz.autodiff(weighted_squares, iz.Duplicated(X.copy(), [0.0] * 4), IDX, 1.0, 0)


def _overlaps() -> dict[str, tuple[object, object]]:
    """(out argument, x argument) of scaled_sines whose shadows share memory with another argument."""
    x, block = X.copy(), np.zeros(6)
    return {
        "shadow is the array": (iz.Duplicated(np.zeros(4), np.ones(4)), iz.Duplicated(x, x)),
        "shadow is another argument": (iz.Duplicated(np.zeros(4), x), iz.Duplicated(x, np.zeros(4))),
        "shadow is a Const argument": (iz.Duplicated(np.zeros(4), x), x),
        "shadows overlap": (iz.Duplicated(np.zeros(4), block[:4]), iz.Duplicated(x, block[2:])),
        "shadow overlaps an argument": (iz.Duplicated(block[:4], np.ones(4)), iz.Duplicated(x, block[2:])),
    }


@pytest.mark.parametrize("name", list(_overlaps()))
def test_shadow_sharing_memory_with_another_argument_is_a_value_error(name: str) -> None:
    out, x = _overlaps()[name]
    with pytest.raises(ValueError, match="share memory"):
        iz.autodiff(scaled_sines, out, x, 2.0)


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_shadows_accumulate(backend: str) -> None:
    """A shadow adds the adjoint to what it holds: two calls give twice the gradient."""
    x = X.copy()
    dx = np.zeros(4)
    for calls in (1, 2):
        iz.autodiff(weighted_squares, iz.Duplicated(x, dx), IDX, 1.5, 0, backend=backend)
        np.testing.assert_allclose(dx, calls * weighted_squares_gradient(X, 1.5), rtol=1e-15)
    np.testing.assert_array_equal(x, X)  # only read: the array is unchanged


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_shadow_of_a_written_array_is_the_seed_and_is_consumed(backend: str) -> None:
    """out[i] = a sin(x[i]): d_out holds the cotangent on entry and 0 on exit (out was overwritten); d_x
    gets d_out a cos(x) added to what it held; a's adjoint is sum(d_out sin(x))."""
    x, out = X.copy(), np.full(4, np.nan)
    d_out = np.array([1.0, -2.0, 0.5, 3.0])
    d_x = np.full(4, 10.0)
    result, adjoints = iz.autodiff(scaled_sines, iz.Duplicated(out, d_out.copy()), iz.Duplicated(x, d_x),
                                   iz.Active(1.5), backend=backend)
    assert result is None
    np.testing.assert_allclose(out, 1.5 * np.sin(X), rtol=1e-15)
    np.testing.assert_allclose(d_x, 10.0 + d_out * 1.5 * np.cos(X), rtol=1e-15)
    (d_a,) = adjoints
    assert d_a == pytest.approx(float(np.sum(d_out * np.sin(X))), rel=1e-14)


def test_shadow_consumed_into_an_overwritten_array_is_zero() -> None:
    x, out, d_out = X.copy(), np.zeros(4), np.ones(4)
    iz.autodiff(scaled_sines, iz.Duplicated(out, d_out), iz.Duplicated(x, np.zeros(4)), 2.0)
    np.testing.assert_array_equal(d_out, np.zeros(4))


# --- results ------------------------------------------------------------------------------------------------


def test_autodiff_returns_the_primal_and_the_active_adjoints_in_argument_order() -> None:
    """a b^2 + exp(c): adjoints (b^2, 2 a b, exp(c)) times the seed."""
    result, adjoints = iz.autodiff(mixed_scalars, iz.Active(2.0), iz.Active(3.0), iz.Active(0.5), seed=0.5)
    assert result == pytest.approx(18.0 + math.exp(0.5), rel=1e-15)
    assert adjoints == pytest.approx((4.5, 6.0, 0.5 * math.exp(0.5)), rel=1e-15)
    assert all(type(a) is float for a in adjoints)


def test_autodiff_without_active_arguments_returns_an_empty_tuple() -> None:
    result, adjoints = iz.autodiff(mixed_scalars, 2.0, iz.Const(3.0), 0.5)
    assert adjoints == ()
    assert result == pytest.approx(18.0 + math.exp(0.5), rel=1e-15)


def test_seed_scales_the_gradient() -> None:
    dx = np.zeros(4)
    result, _ = iz.autodiff(weighted_squares, iz.Duplicated(X.copy(), dx), IDX, 1.5, 2, seed=-3.0)
    np.testing.assert_allclose(dx, -3.0 * weighted_squares_gradient(X, 1.5), rtol=1e-15)
    assert result == pytest.approx(1.5 * float(np.sum(X[IDX] ** 2)) + 2, rel=1e-15)


def test_grad_of_a_float_scalar_is_a_python_float() -> None:
    g = iz.grad(weighted_squares, argnums=2)(X.copy(), IDX, 1.5, 0)
    assert type(g) is float
    assert g == pytest.approx(float(np.sum(X[IDX] ** 2)), rel=1e-15)


def test_grad_with_an_argnums_tuple_returns_a_tuple() -> None:
    x = X.copy()
    g = iz.grad(weighted_squares, argnums=(2, 0))(x, IDX, 1.5, 0)
    assert isinstance(g, tuple) and len(g) == 2
    assert g[0] == pytest.approx(float(np.sum(X[IDX] ** 2)), rel=1e-15)
    np.testing.assert_allclose(g[1], weighted_squares_gradient(X, 1.5), rtol=1e-15)
    assert g[1] is not x and not np.shares_memory(g[1], x)
    np.testing.assert_array_equal(x, X)


def test_grad_of_an_array_is_a_new_array() -> None:
    x = X.copy()
    g = iz.grad(weighted_squares)(x, IDX, 1.5, 0)
    assert isinstance(g, np.ndarray) and g.shape == x.shape and g.dtype == np.float64
    np.testing.assert_allclose(g, weighted_squares_gradient(X, 1.5), rtol=1e-15)


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_zero_length_arrays_have_empty_gradients(backend: str) -> None:
    g = iz.grad(weighted_squares, argnums=(0, 2), backend=backend)(np.zeros(0), np.zeros(0, dtype=np.int64), 1.0, 0)
    assert g[0].shape == (0,) and g[1] == 0.0


# --- errors -------------------------------------------------------------------------------------------------


def test_grad_of_a_kernel_returning_nothing_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="scaled_sines"):
        iz.grad(scaled_sines)


def test_grad_of_a_kernel_returning_an_integer_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="count_positive"):
        iz.grad(count_positive)


def test_grad_argnums_out_of_range_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="argnums"):
        iz.grad(weighted_squares, argnums=4)


@pytest.mark.parametrize("call", ["autodiff", "grad"])
def test_unknown_opt_is_a_value_error(call: str) -> None:
    with pytest.raises(ValueError, match="bogus"):
        if call == "autodiff":
            iz.autodiff(weighted_squares, iz.Duplicated(X.copy(), np.zeros(4)), IDX, 1.0, 0, opt="bogus")
        else:
            iz.grad(weighted_squares, opt="bogus")(X.copy(), IDX, 1.0, 0)


def test_wrong_number_of_arguments_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="takes 4 argument"):
        iz.autodiff(weighted_squares, iz.Duplicated(X.copy(), np.zeros(4)), IDX, 1.0)


def test_autodiff_of_a_plain_function_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="@iz.kernel"):
        iz.autodiff(weighted_squares.py_func, X.copy(), IDX, 1.0, 0)


def _line_of(kernel: iz.Kernel, text: str) -> int:
    """The absolute line number of the first source line of `kernel` that contains `text`."""
    lines, first = inspect.getsourcelines(kernel.py_func)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("opt", ["post", "pre", "none"])
@pytest.mark.parametrize("backend", ["interp", "llvm"])
@pytest.mark.parametrize("x0", [0.05, 1.3, 2.9])
def test_while_loop_with_a_data_dependent_trip_count(opt: str, backend: str, x0: float) -> None:
    """The loop runs 0, a few or many times, as the data decides: the reverse pass runs it back exactly."""
    expected, steps = halving_steps_derivative(x0)
    assert (steps == 0) == (x0 < 0.1)
    shadow = np.zeros(1)
    iz.autodiff(halving_steps, iz.Duplicated(np.array([x0]), shadow), opt=opt, backend=backend)
    assert shadow[0] == pytest.approx(expected, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("opt", ["post", "pre", "none"])
@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_active_local_array_sized_by_the_data_names_its_line(opt: str, backend: str) -> None:
    """Its shadow would need the largest size over the loop before the loop runs: not differentiable in
    this version, and the error points at the allocation."""
    line = _line_of(data_sized_scratch, "iz.zeros(")
    with pytest.raises(iz.DifferentiationError) as error:
        iz.autodiff(data_sized_scratch, iz.Duplicated(np.array([0.5, 1.5]), np.zeros(2)), 2, opt=opt,
                    backend=backend)
    message = str(error.value)
    assert f"line {line}," in message
    assert "iz.zeros(" in message
    assert __file__ in message or "test_autodiff_api.py" in message
