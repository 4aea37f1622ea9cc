"""Reverse mode against finite differences, over the corpus of `ad_kernels.py` (issue 6, DESIGN 7).

Every kernel, for each `opt` ("post", "pre", "none") and each backend ("interp", "llvm"):

- **Finite differences.** With random cotangents ybar of the kernel's outputs (the arrays it writes, its
  float return value), `iz.autodiff` must give J^T ybar, J from central differences of the undecorated
  Python functions (`ad_oracle.py` says how, and why Enzyme's shadow convention makes this one formula).
- **The dot-product test.** `<ybar, J t> == <J^T ybar, t>` for a random direction t of all active inputs:
  J t by central differences along t (forward mode does not exist yet), J^T ybar by reverse mode.
- **The variants agree.** The gradient and the primal results of every variant agree to 1e-10 relative
  (max-norm) with those of the unoptimized gradient on the interpreter.
- **The primal runs too.** The return value and the arrays after `iz.autodiff` are, bit for bit, those of a
  plain call of the kernel on the interpreter (the semantic oracle; the llvm backend computes its bits).

Each variant is differentiated once per kernel (`derivative`, cached for the module), the Jacobian is
computed once per kernel, so the four tests share the work.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterator

import numpy as np
import pytest
from ad_kernels import CASES, Case
from ad_oracle import (
    ALL_VARIANTS,
    FD_RTOL,
    FD_STEP,
    VARIANTS,
    Derivative,
    Problem,
    assert_matches_finite_differences,
    central_difference,
    copy_value,
    jacobian,
    make_problem,
    reverse_mode,
    table,
)

REFERENCE = ("none", "interp")
VARIANTS_BUT_REFERENCE = [v for v in VARIANTS if v != REFERENCE]
VARIANT_RTOL = 1e-10


def _variant_ids(variants: list[tuple[str, str]]) -> list[str]:
    return [f"{opt}-{backend}" for opt, backend in variants]


by_case = pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
by_variant = pytest.mark.parametrize(("opt", "backend"), VARIANTS, ids=_variant_ids(VARIANTS))

problem = functools.cache(make_problem)


@pytest.fixture(autouse=True, scope="module")
def _no_disk_cache() -> Iterator[None]:
    """The ~240 native gradients compiled here go to the session's fresh cache directory, which nothing reads
    again: skipping the disk cache (and the shared library it links per entry) keeps the module fast."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ISOZYME_CACHE", "off")
        yield


@functools.cache
def finite_difference_gradient(case: Case) -> np.ndarray:
    """J^T ybar, J by finite differences."""
    return jacobian(problem(case)).T @ problem(case).cotangent()


@functools.cache
def derivative(case: Case, opt: str, backend: str) -> Derivative:
    return reverse_mode(problem(case), opt, backend)


@by_case
@by_variant
def test_gradient_matches_finite_differences(case: Case, opt: str, backend: str) -> None:
    assert_matches_finite_differences(problem(case), derivative(case, opt, backend).gradient,
                                      finite_difference_gradient(case))


@by_case
@by_variant
def test_dot_product(case: Case, opt: str, backend: str) -> None:
    """<ybar, J t> (J t: finite differences along t) == <J^T ybar, t> (J^T ybar: reverse mode)."""
    p: Problem = problem(case)
    x = p.input_vector()
    t = np.random.default_rng(zlib.crc32(case.name.encode()) + 2).standard_normal(x.size)
    t /= np.abs(t).max()
    jvp = central_difference(p.outputs, x, t, FD_STEP * max(1.0, np.abs(x).max()))
    ybar = p.cotangent()
    vjp = derivative(case, opt, backend).gradient
    forward, reverse = float(ybar @ jvp), float(vjp @ t)
    scale = max(1.0, float(np.abs(ybar * jvp).sum()), float(np.abs(vjp * t).sum()))
    assert abs(forward - reverse) <= FD_RTOL * scale, f"<ybar, J t> = {forward!r}, <J^T ybar, t> = {reverse!r}"


def _relative_difference(got: np.ndarray, expected: np.ndarray) -> float:
    """max |got - expected| / max |expected| (0 when they are equal, zeros included)."""
    difference = float(np.abs(got - expected).max(initial=0.0))
    return 0.0 if difference == 0.0 else difference / float(np.abs(expected).max(initial=0.0))


@by_case
@pytest.mark.parametrize(("opt", "backend"), VARIANTS_BUT_REFERENCE, ids=_variant_ids(VARIANTS_BUT_REFERENCE))
def test_variants_agree(case: Case, opt: str, backend: str) -> None:
    """The gradient and the primal results agree with opt="none" on the interpreter to 1e-10 (max-norm)."""
    got, reference = derivative(case, opt, backend), derivative(case, *REFERENCE)
    difference = _relative_difference(got.gradient, reference.gradient)
    assert difference <= VARIANT_RTOL, \
        f"gradient differs by {difference:.2e}:\n{table('this  reference', got.gradient, reference.gradient)}"
    for array, expected in zip(got.arrays, reference.arrays):
        assert _relative_difference(array, expected) <= VARIANT_RTOL
    if reference.primal_return is not None:
        assert _relative_difference(np.array([got.primal_return]), np.array([reference.primal_return])) \
            <= VARIANT_RTOL


@by_case
@by_variant
def test_primal_results_match_a_plain_call(case: Case, opt: str, backend: str) -> None:
    args = [copy_value(a) for a in problem(case).args]
    expected = case.kernel.compile(backend="interp")(*args)
    got = derivative(case, opt, backend)
    if expected is None:
        assert got.primal_return is None
    else:
        assert got.primal_return == expected
    for array, plain in zip(got.arrays, [a for a in args if isinstance(a, np.ndarray)]):
        np.testing.assert_array_equal(array, plain)


LOCAL_ARRAYS_IN_EXITING_LOOPS = [case for case in CASES if case.name.endswith("reads_local_array")]


@pytest.mark.parametrize("case", LOCAL_ARRAYS_IN_EXITING_LOOPS, ids=[c.name for c in LOCAL_ARRAYS_IN_EXITING_LOOPS])
@pytest.mark.parametrize(("opt", "backend"), ALL_VARIANTS, ids=_variant_ids(ALL_VARIANTS))
def test_local_array_read_in_a_loop_the_data_exits(case: Case, opt: str, backend: str) -> None:
    """while/break loops reading a local array written before them (issue 22): the shadow's zeroed alloc
    once sank into the irreducible reverse loop and the gradient came out zero. On OpenCL too."""
    assert_matches_finite_differences(problem(case), derivative(case, opt, backend).gradient,
                                      finite_difference_gradient(case))
