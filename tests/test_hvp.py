"""Hessian-vector products (`iz.hvp`: forward mode over the reverse-mode gradient) against finite differences
of the gradient, and the symmetry of the Hessian.

The kernels come from `ad_kernels.py` (straight-line scalars, a loop with a sqrt, branches on the active
state, a local array, array and scalar arguments mixed, nested loops, while loops with growable tapes); the
Hessian is taken with respect to every argument that the corpus differentiates (argnums: its Duplicated
and Active positions). For random directions u, w:

- **Finite differences of the gradient.** H u == (g(x + h u) - g(x - h u)) / 2h, Richardson-extrapolated,
  g being `iz.grad` (reverse mode, tested against finite differences of the plain Python function on its
  own in test_autodiff_numeric.py) with opt="none" on the interpreter.
- **Symmetry.** <H u, w> == <u, H w>.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterator

import numpy as np
import pytest
from ad_kernels import CASES, Case
from ad_oracle import ALL_BACKENDS, ALL_VARIANTS, FD_RTOL, FD_STEP, central_difference, copy_value, table

import isozyme as iz
from isozyme import Array, f64, i64

KERNELS = ("rational", "example_mag", "branch_on_active_state", "local_scratch", "several_scalars",
           "nested_triangular", "while_product", "newton_sqrt")
BY_NAME = {case.name: case for case in CASES}
HVP_CASES = [BY_NAME[name] for name in KERNELS]


@pytest.fixture(autouse=True, scope="module")
def _no_disk_cache() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ISOZYME_CACHE", "off")
        yield


def argnums(case: Case) -> int | tuple[int, ...]:
    """The differentiated positions; an int when there is one (hvp's other calling form)."""
    positions = tuple(p for p, kind in enumerate(case.activity) if kind != "const")
    return positions[0] if len(positions) == 1 else positions


def positions(case: Case) -> tuple[int, ...]:
    chosen = argnums(case)
    return (chosen,) if isinstance(chosen, int) else chosen


@functools.cache
def arguments(case: Case) -> tuple:
    return case.args()


def pack(values: tuple) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in values])


def unpack(case: Case, vector: np.ndarray) -> tuple:
    """`vector` cut into one part per differentiated argument, shaped like it."""
    parts, offset = [], 0
    for p in positions(case):
        like = arguments(case)[p]
        if isinstance(like, np.ndarray):
            parts.append(vector[offset:offset + like.size].reshape(like.shape).copy())
            offset += like.size
        else:
            parts.append(float(vector[offset]))
            offset += 1
    return tuple(parts)


def with_inputs(case: Case, vector: np.ndarray) -> list[object]:
    args = [copy_value(a) for a in arguments(case)]
    for p, part in zip(positions(case), unpack(case, vector)):
        args[p] = part
    return args


def gradient(case: Case, vector: np.ndarray) -> np.ndarray:
    result = iz.grad(case.kernel, argnums(case), opt="none", backend="interp")(*with_inputs(case, vector))
    return pack((result,) if isinstance(argnums(case), int) else result)


def direction(case: Case, salt: int) -> np.ndarray:
    x = pack(tuple(arguments(case)[p] for p in positions(case)))
    u = np.random.default_rng(zlib.crc32(case.name.encode()) + salt).standard_normal(x.size)
    return u / np.abs(u).max()


def hessian_vector_product(case: Case, v: np.ndarray, opt: str, backend: str) -> np.ndarray:
    """`iz.hvp` along v (a packed vector), packed."""
    parts = unpack(case, v)
    direction_argument = parts[0] if isinstance(argnums(case), int) else parts
    args = [copy_value(a) for a in arguments(case)]
    result = iz.hvp(case.kernel, argnums(case), opt=opt, backend=backend)(*args, direction_argument)
    return pack((result,) if isinstance(argnums(case), int) else result)


@functools.cache
def finite_difference_hvp(case: Case) -> np.ndarray:
    x = pack(tuple(arguments(case)[p] for p in positions(case)))
    return central_difference(lambda y: gradient(case, y), x, direction(case, 5),
                              FD_STEP * max(1.0, np.abs(x).max()))


by_case = pytest.mark.parametrize("case", HVP_CASES, ids=KERNELS)


@by_case
@pytest.mark.parametrize(("opt", "backend"), ALL_VARIANTS, ids=[f"{o}-{b}" for o, b in ALL_VARIANTS])
def test_hvp_matches_finite_differences_of_the_gradient(case: Case, opt: str, backend: str) -> None:
    got, expected = hessian_vector_product(case, direction(case, 5), opt, backend), finite_difference_hvp(case)
    bad = np.abs(got - expected) > FD_RTOL * np.maximum(1.0, np.abs(expected))
    assert not bad.any(), f"{case.name}: hvp vs finite differences of the gradient:\n{table('hvp  fd', got, expected)}"


@by_case
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_hessian_is_symmetric(case: Case, backend: str) -> None:
    u, w = direction(case, 6), direction(case, 7)
    hu, hw = hessian_vector_product(case, u, "post", backend), hessian_vector_product(case, w, "post", backend)
    left, right = float(hu @ w), float(u @ hw)
    scale = max(1.0, float(np.abs(hu * w).sum()), float(np.abs(u * hw).sum()))
    assert abs(left - right) <= 1e-12 * scale, f"<H u, w> = {left!r}, <u, H w> = {right!r}"


# --- a Hessian known in closed form, and the API -----------------------------------------------------------


@iz.kernel
def quadratic_form(A: Array[f64, 2], x: Array[f64], c: f64) -> f64:
    # x^T A x + c^3 x[0]: Hessian in x is A + A^T, in c is 6 c x[0], mixed d2/dx[0]dc = 3 c^2
    s = 0.0
    for i in range(len(x)):
        for j in range(len(x)):
            s += x[i] * A[i, j] * x[j]
    return s + c * c * c * x[0]


@iz.kernel
def count_positive(x: Array[f64]) -> i64:
    n = 0
    for i in range(len(x)):
        if x[i] > 0.0:
            n += 1
    return n


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_closed_form_hessian(backend: str) -> None:
    rng = np.random.default_rng(11)
    A, x, c = rng.standard_normal((3, 3)), rng.standard_normal(3), 0.7
    v_x, v_c = rng.standard_normal(3), -1.3
    hx, hc = iz.hvp(quadratic_form, argnums=(1, 2), backend=backend)(A, x, c, (v_x, v_c))
    expected_x = (A + A.T) @ v_x + np.array([3 * c * c * v_c, 0.0, 0.0])
    np.testing.assert_allclose(hx, expected_x, rtol=1e-13, atol=1e-14)
    assert hc == pytest.approx(3 * c * c * v_x[0] + 6 * c * x[0] * v_c, rel=1e-13)
    only_x = iz.hvp(quadratic_form, argnums=1, backend=backend)(A, x, c, v_x)
    np.testing.assert_allclose(only_x, (A + A.T) @ v_x, rtol=1e-13, atol=1e-14)


def test_hvp_argument_checks() -> None:
    A, x = np.eye(2), np.ones(2)
    with pytest.raises(TypeError, match="returning a float"):
        iz.hvp(count_positive)
    with pytest.raises(ValueError, match="out of range"):
        iz.hvp(quadratic_form, argnums=3)
    with pytest.raises(ValueError, match="twice"):
        iz.hvp(quadratic_form, argnums=(1, 1))
    with pytest.raises(ValueError, match="direction v for parameter 'x' of kernel 'quadratic_form'.*shape"):
        iz.hvp(quadratic_form, argnums=1, backend="interp")(A, x, 0.5, np.ones(3))
    with pytest.raises(ValueError, match="one direction per argnum"):
        iz.hvp(quadratic_form, argnums=(1, 2), backend="interp")(A, x, 0.5, (np.ones(2),))
    with pytest.raises(TypeError, match="and then v"):
        iz.hvp(quadratic_form, argnums=1, backend="interp")(A, x, 0.5)
    with pytest.raises(TypeError, match="tangent of parameter 'c' of kernel 'quadratic_form' must be a real"):
        iz.hvp(quadratic_form, argnums=2, backend="interp")(A, x, 0.5, "up")


@iz.kernel
def indexed_energy(x: Array[f64], idx: Array[i64], k: i64) -> f64:
    s = 0.0
    for i in range(len(idx)):
        s += x[idx[i]] ** 3 * k
    return s


def test_integer_arguments_are_not_differentiable() -> None:
    with pytest.raises(TypeError, match="parameter 'k' of kernel 'indexed_energy'.*float"):
        iz.hvp(indexed_energy, argnums=2)
    with pytest.raises(TypeError, match="parameter 'idx' of kernel 'indexed_energy'.*float"):
        iz.hvp(indexed_energy, argnums=1)


@iz.kernel
def softplus(x: f64) -> f64:
    return iz.log(1.0 + iz.exp(x))


@softplus.defvjp
@iz.kernel
def softplus_vjp(x: f64, d_x: Array[f64], differet: f64) -> None:
    d_x[0] = differet / (1.0 + iz.exp(-x))


@iz.kernel
def softplus_moment(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += softplus(x[i]) * x[i]
    return s


@pytest.mark.parametrize(("opt", "backend"), ALL_VARIANTS, ids=[f"{o}-{b}" for o, b in ALL_VARIANTS])
def test_hvp_through_a_custom_reverse_rule(opt: str, backend: str) -> None:
    """The gradient calls softplus's rule; forward mode differentiates the rule: d2/dx2 (softplus(x) x) =
    sigma'(x) x + 2 sigma(x), sigma the logistic function."""
    x, v = np.array([-1.5, 0.25, 2.0]), np.array([0.5, -1.0, 2.0])
    sigma = 1.0 / (1.0 + np.exp(-x))
    got = iz.hvp(softplus_moment, opt=opt, backend=backend)(x, v)
    np.testing.assert_allclose(got, (sigma * (1.0 - sigma) * x + 2.0 * sigma) * v, rtol=1e-13)
