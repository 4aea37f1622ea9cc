"""The race detector (`runtime/race_detector.py`: `ISOZYME_CHECK_RACES=1` or `iz.testing.check_races()` on
the `interp` backend), issue 22. PoCL on 2 cores runs work items almost in order: a race in a parallel loop
or in its reverse is invisible there, so every `prange` kernel of the tests runs through the detector too.

- **It catches races.** Deliberately racy kernels (two iterations store one element; a stored element read
  by another iteration through a tape-like local array) raise `DataRace` naming the array, the element,
  the kernel line and both iterations.
- **It catches the GMM gradient race.** With the planner as it was (a subtracting accumulation left a plain
  load and store of the shadow, and argument arrays were trusted), the gradient of the GMM objective with
  its loop over points a `prange` (and of its minimal shape, `t = x[i] - m[k]`) raises `DataRace` on the
  shadow of the means; with the planner as it is, it runs and matches the llvm gradient.
- **No race anywhere else.** Every hand-written `prange` kernel of test_opencl_parallel.py (primal and
  gradient, opt "post" and "pre"), the examples with `prange` (heat, matvec, the MLP and its gradient),
  kernelgen's random programs with `prange` and gradgen's random differentiable programs with `prange`
  (their gradients) run through the detector and compute what the plain interpreter computes (to 1e-12:
  reductions and atomic adds change the order of float additions).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gradgen
import kernelgen
import numpy as np
import pytest
import test_gradient_fuzz as fuzz
import test_opencl_parallel as parallel
from example_modules import load_example
from hypothesis import given

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.codegen import parallel_loops
from isozyme.runtime.race_detector import DataRace, check_races

RTOL = 1e-12

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))


def assert_close(got: Any, expected: Any, rtol: float = RTOL) -> None:
    """Equal to `rtol` of the largest magnitude (max-norm: sums in another order cancel differently)."""
    got, expected = np.asarray(got, dtype=float), np.asarray(expected, dtype=float)
    scale = float(np.abs(expected).max(initial=0.0))
    np.testing.assert_allclose(got, expected, rtol=0.0, atol=rtol * scale)


def copies(args: list[Any]) -> list[Any]:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def checked_and_plain(kernel: iz.Kernel, args: list[Any]) -> tuple[tuple[Any, list[Any]], tuple[Any, list[Any]]]:
    """(return value, arrays afterwards) of the kernel on `interp` with and without race checking."""
    results = []
    for checking in (True, False):
        call = copies(args)
        if checking:
            with check_races():
                value = kernel.compile(backend="interp")(*call)
        else:
            value = kernel.compile(backend="interp")(*call)
        results.append((value, [a for a in call if isinstance(a, np.ndarray)]))
    return results[0], results[1]


def assert_same_results(kernel: iz.Kernel, args: list[Any], rtol: float = RTOL) -> None:
    (value, arrays), (plain_value, plain_arrays) = checked_and_plain(kernel, args)
    if plain_value is not None:
        assert_close(value, plain_value, rtol)
    for got, expected in zip(arrays, plain_arrays, strict=True):
        assert_close(got, expected, rtol)


def gradient(kernel: iz.Kernel, make_call: Any, opt: str, checking: bool) -> tuple[Any, list[np.ndarray]]:
    """`parallel.prange_gradient` on the interpreter, with or without race checking."""
    if not checking:
        return parallel.prange_gradient(kernel, make_call, opt, "interp")
    with check_races():
        return parallel.prange_gradient(kernel, make_call, opt, "interp")


# --- it catches races ------------------------------------------------------------------------------------


@iz.kernel
def last_writer_wins(out: Array[f64], x: Array[f64]):
    for i in iz.prange(len(x)):
        out[0] = x[i]


@iz.kernel
def scatter(out: Array[f64], x: Array[f64], idx: Array[i64]):
    for i in iz.prange(len(x)):
        out[idx[i]] = 2.0 * x[i]


def test_two_iterations_storing_one_element_is_a_race() -> None:
    with check_races(), pytest.raises(DataRace) as caught:
        last_writer_wins.compile(backend="interp")(np.zeros(1), np.arange(5.0))
    message = str(caught.value)
    assert "%out[0]" in message and "test_race_detector.py:" in message
    assert message.count("iteration") >= 2 and "wrote" in message


def test_a_scatter_with_a_repeated_index_is_a_race_and_one_without_is_not() -> None:
    x = np.arange(6.0)
    scatter.compile(backend="interp")(np.zeros(6), x, np.array([0, 1, 2, 3, 4, 4]))  # unchecked: no error
    with check_races():
        scatter.compile(backend="interp")(np.zeros(6), x, np.array([5, 4, 3, 2, 1, 0]))
        with pytest.raises(DataRace, match=r"iteration [45] writes %out\[4\], which iteration [45] wrote"):
            scatter.compile(backend="interp")(np.zeros(6), x, np.array([0, 1, 2, 3, 4, 4]))


def test_without_checking_the_interpreter_runs_iterations_in_order() -> None:
    out = np.zeros(1)
    last_writer_wins.compile(backend="interp")(out, np.arange(5.0))
    assert out[0] == 4.0


# --- the GMM gradient race -------------------------------------------------------------------------------


@iz.kernel
def centered_squares(x: Array[f64, 2], m: Array[f64, 2]) -> f64:
    """The shape of GMM's loop over points: every iteration reads every mean; the reverse subtracts from
    every element of d_m."""
    s = 0.0
    for i in iz.prange(x.shape[0]):
        for k in range(m.shape[0]):
            for j in range(m.shape[1]):
                t = x[i, j] - m[k, j]
                s += t * t * (k + 1.0)
    return s


def _planner_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """Subtracting accumulations left as a load and a store, argument arrays trusted: the planner before
    issue 22, under which the GMM gradient was wrong on an H100 and right on PoCL."""
    monkeypatch.setattr(parallel_loops, "NEGATION", {})
    monkeypatch.setattr(parallel_loops, "_check_argument_array", lambda array, loop: None)


def _centered_call(rng: np.random.Generator) -> list[Any]:
    return [iz.Duplicated(rng.normal(size=(9, 3)), np.zeros((9, 3))),
            iz.Duplicated(rng.normal(size=(4, 3)), np.zeros((4, 3)))]


@pytest.mark.parametrize("opt", ["post", "pre"])
def test_the_gmm_gradient_shape_raced_under_the_old_planner(opt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = parallel.fresh(centered_squares)
    (value, _), arrays = gradient(kernel, _centered_call, opt, checking=False)
    (expected, _), expected_arrays = parallel.prange_gradient(kernel, _centered_call, opt, "llvm")
    assert_close(value, expected)
    for got, want in zip(arrays, expected_arrays, strict=True):
        assert_close(got, want)
    (checked, _), checked_arrays = gradient(kernel, _centered_call, opt, checking=True)
    for got, want in zip(checked_arrays, expected_arrays, strict=True):
        assert_close(got, want)
    _planner_as_it_was(monkeypatch)
    with pytest.raises(DataRace, match=r"%d_m\[\d, \d\], which iteration \d+ (wrote|read)"):
        gradient(parallel.fresh(centered_squares), _centered_call, opt, checking=True)


def _gmm_call(n: int, d: int, k: int) -> tuple[Any, list[Any]]:
    gmm = load_example("gmm")
    data = gmm.gmm_data(d, k, n, seed=0)
    args = [data.alphas, data.means, data.icf]
    log_gamma_d = gmm.log_gamma_distrib(0.5 * (d + data.m + 1), d)

    def make_call(rng: np.random.Generator) -> list[Any]:
        return [*(iz.Duplicated(a.copy(), np.zeros_like(a)) for a in args), data.x, data.gamma, data.m, log_gamma_d]
    return gmm.gmm_objective, make_call


def test_the_gmm_prange_gradient_has_no_race_and_matches_the_serial_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    from opencl_gpu import gmm_prange

    serial, make_call = _gmm_call(n=12, d=3, k=4)
    (_, _), expected = parallel.prange_gradient(serial, make_call, "post", "llvm")
    for opt in ("post", "pre"):
        (_, _), arrays = gradient(parallel.fresh(gmm_prange), make_call, opt, checking=True)
        for got, want in zip(arrays, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    _planner_as_it_was(monkeypatch)
    with pytest.raises(DataRace, match=r"%d_means\["):
        gradient(parallel.fresh(gmm_prange), make_call, "post", checking=True)


# --- no race in any prange kernel of the tests -------------------------------------------------------------


@pytest.mark.parametrize(("kernel", "make_args", "rtol"), [case[1:] for case in parallel.PRIMAL_CASES],
                         ids=[case[0] for case in parallel.PRIMAL_CASES])
def test_hand_written_prange_kernels(kernel: iz.Kernel, make_args: Any, rtol: float) -> None:
    """(f32 sums in another order differ by their rounding: each case's own tolerance.)"""
    assert_same_results(kernel, list(make_args(parallel._rng())), rtol)


@pytest.mark.parametrize("opt", ["post", "pre"])
@pytest.mark.parametrize(("kernel", "make_call"), [case[1:] for case in parallel.PRANGE_GRADIENTS],
                         ids=[case[0] for case in parallel.PRANGE_GRADIENTS])
def test_hand_written_prange_gradients(kernel: iz.Kernel, make_call: Any, opt: str) -> None:
    (value, adjoints), arrays = gradient(kernel, make_call, opt, checking=True)
    (plain_value, plain_adjoints), plain_arrays = gradient(kernel, make_call, opt, checking=False)
    if plain_value is not None:
        assert_close(value, plain_value)
    assert_close(adjoints, plain_adjoints)
    for got, expected in zip(arrays, plain_arrays, strict=True):
        assert_close(got, expected)


@pytest.mark.parametrize("kernel", [parallel.shared_active, parallel.shared_element, parallel.stencil_sum,
                                    parallel.scratch_per_item], ids=lambda k: k.__name__)
def test_shared_parameter_stencil_and_scratch_gradients(kernel: iz.Kernel) -> None:
    rng = parallel._rng()
    n = 40
    call: list[Any] = [iz.Duplicated(np.zeros(n), rng.normal(size=n)), iz.Duplicated(rng.normal(size=n),
                                                                                      np.zeros(n))]
    if kernel is parallel.shared_active:
        call.append(iz.Active(0.7))
    elif kernel is parallel.shared_element:
        call.append(iz.Duplicated(np.array([0.7]), np.zeros(1)))
    elif kernel is parallel.scratch_per_item:
        call.append(5)
    with check_races():
        iz.autodiff(kernel, *call, backend="interp")


def test_examples_with_prange() -> None:
    heat, matvec, mlp = (load_example(name) for name in ("heat", "matvec", "mlp"))
    rng = np.random.default_rng(7)
    assert_same_results(heat.heat, [rng.uniform(size=12), 0.2, 3])
    assert_same_results(matvec.matvec, [np.zeros(5), rng.normal(size=(5, 4)), rng.normal(size=4)])
    problem = mlp.mlp_data(d=5, hidden=4, out=3, batch=6)
    assert_same_results(mlp.mlp_loss, list(problem))
    with check_races():
        checked = mlp.mlp_gradient("interp")(*problem)
    for got, expected in zip(checked, mlp.mlp_gradient("interp")(*problem), strict=True):
        assert_close(got, expected)


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("race_detector")


@fuzz.scaled(0.3)
@given(case=kernelgen.cases().filter(lambda case: "iz.prange(" in case[0].source))
def test_random_programs_with_prange(kernel_dir: Path, case: Any) -> None:
    program, args = case
    entry = kernelgen.load_module(program.source, kernel_dir).entry
    expected_args, actual_args = kernelgen.copy_args(args), kernelgen.copy_args(args)
    expected = entry.compile(backend="interp")(*expected_args)
    with check_races():
        actual = entry.compile(backend="interp")(*actual_args)
    kernelgen.assert_same_results((expected, expected_args), (actual, actual_args), program.returns)


PRANGE_PROGRAMS = frozenset({"prange", "loss", "accumulators", "math", "local_arrays", "second_input", "index_table",
                             "nested_loops", "branches", "overwrites"})
"""gradgen's features around its `prange` loops (the others add loops the detector does not look at)."""


@fuzz.scaled(0.3)
@given(program=gradgen.programs(PRANGE_PROGRAMS), seed=fuzz.seeds)
def test_random_gradients_with_prange(kernel_dir: Path, program: gradgen.Program, seed: int) -> None:
    problem = fuzz.make_problem(program, seed, kernel_dir)
    with check_races():
        checked = fuzz.reverse_mode(problem, "post", "interp")
    plain = fuzz.reverse_mode(problem, "post", "interp")
    assert_close(checked.gradient, plain.gradient)
