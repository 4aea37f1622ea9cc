"""Forward mode (`iz.fwddiff`, DESIGN 1.3 and 5) against finite differences and against reverse mode, over the
corpus of `ad_kernels.py`, and its argument checks.

A case is the map F of `ad_oracle.py` from its active inputs (Duplicated arrays, then the scalars its
reverse-mode activity calls Active, which forward mode takes as Duplicated(value, tangent)) to its outputs
(the arrays it writes, then its float return value). For a random direction t:

- **Finite differences.** `iz.fwddiff` with the tangents t gives J t: the tangents the kernel leaves in the
  written arrays' tangent arrays and the tangent of the return value. It must match central differences of
  the undecorated Python functions along t, element by element.
- **The dot-product test.** `<ybar, J t>` (forward mode) == `<J^T ybar, t>` (`iz.autodiff`, reverse mode)
  for the oracle's random cotangent ybar.
- **The primal runs too.** The return value and the arrays afterwards are those of a plain call on the
  interpreter, to 1e-12.

Every case runs with one variant of the six (opt x backend), rotating over the cases, and the finite
differences and primal checks also with the default variant (opt="post" on llvm): that keeps the module
within seconds while every variant sees a sixth of the corpus (and reverse mode is compiled once per case).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from ad_kernels import CASES, Case
from ad_oracle import (
    ALL_BACKENDS,
    FD_RTOL,
    FD_STEP,
    OPTS,
    VARIANTS,
    Problem,
    central_difference,
    copy_value,
    make_problem,
    reverse_mode,
    table,
)

import isozyme as iz
from isozyme import Array, f64, i64

DEFAULT = ("post", "llvm")
PRIMAL_RTOL = 1e-12


ROTATING = [(case, *VARIANTS[index % len(VARIANTS)]) for index, case in enumerate(CASES)]
"""Each case with one variant, rotating over the six."""
CASE_VARIANTS = [(case, *DEFAULT) for case in CASES] + [v for v in ROTATING if v[1:] != DEFAULT]
"""Each case with the default variant, and with its rotating variant."""


def _by_variants(variants: list[tuple[Case, str, str]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(("case", "opt", "backend"), variants,
                                   ids=[f"{c.name}-{o}-{b}" for c, o, b in variants])


by_case_variant = _by_variants(CASE_VARIANTS)
problem = functools.cache(make_problem)


@pytest.fixture(autouse=True, scope="module")
def _no_disk_cache() -> Iterator[None]:
    """The native derivatives compiled here are compiled once: the disk cache would only cost time."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ISOZYME_CACHE", "off")
        yield


@functools.cache
def direction(case: Case) -> np.ndarray:
    """A random direction of all active inputs, max-norm 1."""
    size = problem(case).input_vector().size
    t = np.random.default_rng(zlib.crc32(case.name.encode()) + 3).standard_normal(size)
    return t / np.abs(t).max()


@dataclass
class Tangent:
    """What one `iz.fwddiff` call gave."""

    jvp: np.ndarray
    """The tangents of the outputs, laid out as `Problem.outputs`."""
    primal_return: object
    arrays: list[np.ndarray]
    """Every array argument on exit."""


def forward_mode(p: Problem, t: np.ndarray, opt: str, backend: str) -> Tangent:
    """`iz.fwddiff` of the case with the tangents `t` (laid out as `Problem.input_vector`)."""
    call: list[object] = []
    tangents: dict[int, np.ndarray] = {}
    offset = 0
    for position, (value, kind) in enumerate(zip(p.args, p.case.activity)):
        if kind == "const":
            call.append(copy_value(value))
            continue
        if isinstance(value, np.ndarray):
            tangents[position] = t[offset:offset + value.size].reshape(value.shape).copy()
            call.append(iz.Duplicated(value.copy(), tangents[position]))
            offset += value.size
        else:
            call.append(iz.Duplicated(value, float(t[offset])))
            offset += 1
    result, d_result = iz.fwddiff(p.case.kernel, *call, opt=opt, backend=backend)
    parts = [np.ravel(tangents[position]) for position in p.written]
    if p.returns_float:
        parts.append(np.array([d_result]))
    else:
        assert d_result is None
    arrays = [a.value if isinstance(a, iz.Duplicated) else a for a in call]
    return Tangent(np.concatenate(parts) if parts else np.zeros(0), result,
                   [a for a in arrays if isinstance(a, np.ndarray)])


@functools.cache
def tangent(case: Case, opt: str, backend: str) -> Tangent:
    return forward_mode(problem(case), direction(case), opt, backend)


@functools.cache
def finite_difference_jvp(case: Case) -> np.ndarray:
    p = problem(case)
    x = p.input_vector()
    return central_difference(p.outputs, x, direction(case), FD_STEP * max(1.0, np.abs(x).max()))


@by_case_variant
def test_jvp_matches_finite_differences(case: Case, opt: str, backend: str) -> None:
    got, expected = tangent(case, opt, backend).jvp, finite_difference_jvp(case)
    bad = np.abs(got - expected) > FD_RTOL * np.maximum(1.0, np.abs(expected))
    assert not bad.any(), f"{case.name}: forward mode vs finite differences:\n{table('fwddiff  fd', got, expected)}"


@_by_variants(ROTATING)
def test_dot_product_with_reverse_mode(case: Case, opt: str, backend: str) -> None:
    """<ybar, J t> (forward mode) == <J^T ybar, t> (reverse mode, the same variant)."""
    p = problem(case)
    t = direction(case)
    jvp = tangent(case, opt, backend).jvp
    vjp = reverse_mode(p, opt, backend).gradient
    ybar = p.cotangent()
    forward, reverse = float(ybar @ jvp), float(vjp @ t)
    scale = max(1.0, float(np.abs(ybar * jvp).sum()), float(np.abs(vjp * t).sum()))
    assert abs(forward - reverse) <= 1e-10 * scale, f"<ybar, J t> = {forward!r}, <J^T ybar, t> = {reverse!r}"


def _close(got: object, expected: object) -> bool:
    got_array, expected_array = np.asarray(got, dtype=float), np.asarray(expected, dtype=float)
    scale = max(1.0, float(np.abs(expected_array).max(initial=0.0)))
    return bool(np.all(np.abs(got_array - expected_array) <= PRIMAL_RTOL * scale))


@by_case_variant
def test_primal_results_match_a_plain_call(case: Case, opt: str, backend: str) -> None:
    args = [copy_value(a) for a in problem(case).args]
    expected = case.kernel.compile(backend="interp")(*args)
    got = tangent(case, opt, backend)
    if expected is None:
        assert got.primal_return is None
    else:
        assert _close(got.primal_return, expected), (got.primal_return, expected)
    for array, plain in zip(got.arrays, [a for a in args if isinstance(a, np.ndarray)]):
        assert _close(array, plain)


# --- beyond the reverse-mode corpus ------------------------------------------------------------------------


@iz.kernel
def shrink_until_small(x: Array[f64], a: f64) -> f64:
    # a while loop with a data-dependent trip count and a break: nothing forward mode needs to record
    s = x[0]
    k = 0
    while s > 0.05:
        s = s * iz.cos(a * s)
        k += 1
        if k >= 50:
            break
    return s * x[1]


@iz.kernel
def scratch_per_row(A: Array[f64, 2], out: Array[f64]):
    # an active local array allocated inside a loop (each row gets its own)
    for i in range(A.shape[0]):
        t = iz.zeros(A.shape[1], f64)
        for j in range(A.shape[1]):
            t[j] = iz.exp(A[i, j])
        s = 0.0
        for j in range(A.shape[1]):
            s += t[j] * t[A.shape[1] - 1 - j]
        out[i] = s


def _scalar_jvp_by_finite_differences(f, x: float, h: float = 1e-5) -> float:
    return (f(x + h) - f(x - h)) / (2 * h)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("opt", OPTS)
def test_while_loop_with_break(opt: str, backend: str) -> None:
    x = np.array([0.9, 1.3])
    value, d_value = iz.fwddiff(shrink_until_small, iz.Duplicated(x.copy(), np.zeros(2)), iz.Duplicated(0.8, 1.0),
                                opt=opt, backend=backend)
    reference = shrink_until_small.py_func
    assert value == pytest.approx(reference(x, 0.8), rel=1e-13)
    expected = _scalar_jvp_by_finite_differences(lambda a: reference(x, a), 0.8)
    assert d_value == pytest.approx(expected, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_local_array_in_a_loop(backend: str) -> None:
    rng = np.random.default_rng(7)
    A, dA = rng.uniform(-1, 1, (3, 4)), rng.standard_normal((3, 4))
    d_out = np.full(3, np.nan)  # overwritten: every element of out is written
    iz.fwddiff(scratch_per_row, iz.Duplicated(A.copy(), dA), iz.Duplicated(np.zeros(3), d_out), backend=backend)
    E = np.exp(A)
    expected = 2.0 * np.einsum("ij,ij->i", E * dA, E[:, ::-1])  # d/dt sum_j e_j e_{n-1-j}
    np.testing.assert_allclose(d_out, expected, rtol=1e-12)


@iz.kernel
def scaled_copy(out: Array[f64], x: Array[f64], a: f64):
    for i in range(len(x)):
        out[i] = a * x[i]


@iz.kernel
def weighted_sum(x: Array[f64], idx: Array[i64], k: i64) -> f64:
    s = 0.0
    for i in range(len(idx)):
        s += x[idx[i]] * k
    return s


def test_tangents_of_written_arrays_land_in_their_shadows() -> None:
    x, dx = np.array([1.0, -2.0, 3.0]), np.array([0.5, 0.25, -1.0])
    out, d_out = np.zeros(3), np.full(3, 7.0)
    result = iz.fwddiff(scaled_copy, iz.Duplicated(out, d_out), iz.Duplicated(x, dx), iz.Duplicated(2.0, 3.0),
                        backend="interp")
    assert result == (None, None)
    np.testing.assert_array_equal(out, 2.0 * x)
    np.testing.assert_array_equal(d_out, 2.0 * dx + 3.0 * x)  # overwritten, not accumulated
    np.testing.assert_array_equal(dx, [0.5, 0.25, -1.0])  # read only: left as it was


def test_const_arguments_and_plain_values() -> None:
    x = np.array([1.0, 2.0, 3.0])
    idx = np.array([2, 0, 2], dtype=np.int64)
    value, d_value = iz.fwddiff(weighted_sum, iz.Duplicated(x, np.array([1.0, 10.0, 100.0])), idx, iz.Const(2))
    assert value == 2.0 * (3.0 + 1.0 + 3.0)
    assert d_value == 2.0 * (100.0 + 1.0 + 100.0)
    value, d_value = iz.fwddiff(weighted_sum, x, idx, 2)  # nothing Duplicated: the tangent is 0
    assert (value, d_value) == (14.0, 0.0)


# --- argument checks ---------------------------------------------------------------------------------------


def test_active_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="parameter 'a' of kernel 'scaled_copy'.*not Active"):
        iz.fwddiff(scaled_copy, np.zeros(2), np.ones(2), iz.Active(1.0))


def test_integer_duplicated_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="parameter 'k' of kernel 'weighted_sum'.*cannot be Duplicated"):
        iz.fwddiff(weighted_sum, np.ones(2), np.zeros(1, dtype=np.int64), iz.Duplicated(2, 1))
    idx = np.zeros(1, dtype=np.int64)
    with pytest.raises(TypeError, match="parameter 'idx' of kernel 'weighted_sum'.*cannot be Duplicated"):
        iz.fwddiff(weighted_sum, np.ones(2), iz.Duplicated(idx, np.zeros_like(idx)), 2)


def test_shadow_shape_mismatch_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="shadow of parameter 'x' of kernel 'scaled_copy'.*shape"):
        iz.fwddiff(scaled_copy, np.zeros(3), iz.Duplicated(np.ones(3), np.ones(2)), 1.0)
    with pytest.raises(ValueError, match="shadow of parameter 'out' of kernel 'scaled_copy'.*dtype"):
        iz.fwddiff(scaled_copy, iz.Duplicated(np.zeros(3), np.zeros(3, dtype=np.float32)), np.ones(3), 1.0)


def test_scalar_tangent_must_be_a_number() -> None:
    with pytest.raises(TypeError, match="tangent of parameter 'a' of kernel 'scaled_copy' must be a real number"):
        iz.fwddiff(scaled_copy, np.zeros(3), np.ones(3), iz.Duplicated(1.0, np.ones(1)))


def test_shadow_sharing_memory_is_a_value_error() -> None:
    x = np.ones(4)
    with pytest.raises(ValueError, match="share memory"):
        iz.fwddiff(scaled_copy, iz.Duplicated(np.zeros(4), x), iz.Duplicated(x, np.zeros(4)), 1.0)


def test_wrong_number_of_arguments() -> None:
    with pytest.raises(TypeError, match="takes 3 argument"):
        iz.fwddiff(scaled_copy, np.zeros(3), np.ones(3))


def test_unknown_opt() -> None:
    with pytest.raises(ValueError, match="opt must be one of"):
        iz.fwddiff(scaled_copy, np.zeros(3), np.ones(3), 1.0, opt="fast")


def test_show_ir_forward_stages() -> None:
    after_ad = iz.show_ir(scaled_copy, stage="fwd", activity=("dup", "dup", "dup"), opt="none")
    assert "func @fwddiffe_scaled_copy(%out: f64[?], %d_out: f64[?], %x: f64[?], %d_x: f64[?], %a: f64, " \
           "%d_a: f64)" in after_ad
    optimized = iz.show_ir(scaled_copy, stage="fwd-opt", activity=("dup", "const", "dup"))
    assert "%d_x" not in optimized and "store" in optimized
    with pytest.raises(TypeError, match="parameter 'a' of @scaled_copy is active"):
        iz.show_ir(scaled_copy, stage="fwd", activity=("dup", "dup", "active"))


# --- edge choices, errors and printing -----------------------------------------------------------------------


def _edges(x: f64, y: f64) -> f64:
    return abs(x) + max(x, y) + min(y, x) + iz.pow(x, y)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_edge_choices_match_reverse_mode(backend: str) -> None:
    """At x = y = 0: fabs has slope 0, max and min pass on the first operand's tangent on a tie, pow(x, y)
    has slopes (0, 0) at x = y = 0 (the documented choices of rules.py, in both modes)."""
    edges = iz.kernel(_edges)
    value, d_value = iz.fwddiff(edges, iz.Duplicated(0.0, 0.3), iz.Duplicated(0.0, 0.7), backend=backend)
    assert (value, d_value) == (1.0, 0.3 + 0.7)
    assert iz.grad(edges, argnums=(0, 1), backend=backend)(0.0, 0.0) == (1.0, 1.0)


def test_a_missing_tangent_rule_names_the_op_and_the_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from isozyme.enzyme_ad.rules import TANGENT_RULES
    from isozyme.ssa.ops import Op

    def wave(x: f64) -> f64:
        return iz.sin(x) * x

    monkeypatch.delitem(TANGENT_RULES, Op.SIN)
    kernel = iz.kernel(wave)
    with pytest.raises(iz.DifferentiationError, match=r"(?s)cannot differentiate `sin`: no tangent rule.*"
                       r"test_forward_mode.py\", line \d+.*iz.sin\(x\) \* x"):
        iz.fwddiff(kernel, iz.Duplicated(0.5, 1.0), backend="interp")


def test_forward_mode_refuses_calls() -> None:
    from isozyme.enzyme_ad.activity import analyze_activity
    from isozyme.enzyme_ad.forward import forward_mode
    from isozyme.ssa.parser import parse_module

    module = parse_module("func @g(%a: f64) -> f64 readnone {\nbb0:\n  %b = fmul %a, %a\n  ret %b\n}\n"
                          "func @f(%x: f64) -> f64 {\nbb0:\n  %y = call @g(%x)\n  ret %y\n}\n")
    function = module["f"]
    with pytest.raises(iz.DifferentiationError, match="cannot differentiate `call`: calls must be inlined"):
        forward_mode(function, analyze_activity(function, ["dup"]))


def test_print_ir_shows_the_forward_stages(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    def double(x: f64) -> f64:
        return 2.0 * x

    monkeypatch.setenv("ISOZYME_PRINT_IR", "fwd,fwd-opt")
    assert iz.fwddiff(iz.kernel(double), iz.Duplicated(1.5, 1.0), backend="interp") == (3.0, 2.0)
    printed = capsys.readouterr().err
    assert "; *** fwd of kernel double (post) ***\nfunc @fwddiffe_double(" in printed
    assert "; *** fwd-opt of kernel double (post) ***\nfunc @fwddiffe_double(" in printed
