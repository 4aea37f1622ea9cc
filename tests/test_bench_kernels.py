"""The benchmark kernels of isozyme/benchmark_suite/ (issue 10): faithful to their references.

- GMM, BA and LSTM against ADBench's published golden values (its C++ module tests, awf/ADBench
  test/cpp/modules/common/{Gmm,Ba,Lstm}Tests.cpp, on its test inputs data/gmm/test.txt, data/ba/test.txt and
  data/lstm/lstm_l2_c1024.txt), objective and derivative, with opt="post" and opt="pre", to 1e-8 relative.
- Every benchmark on small seeded inputs: the primal kernel equals its numpy reference; the gradient with
  opt="post" and with opt="pre" matches central finite differences of the numpy reference's objective (at a
  few seeded coordinates of every differentiated argument) and the two agree with each other.
- The suite's shape: sizes, activities and generators as `isozyme/benchmark_suite/__init__.py` documents them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from isozyme.benchmark_suite import (
    Benchmark,
    all_benchmarks,
    ba,
    fft,
    gmm,
    lstm,
    objective,
    ode,
    run_gradient,
    run_primal,
)

DATA = Path(__file__).parent / "data"
GOLDEN_RTOL = 1e-8
OPTS = ("post", "pre")

# ADBench data/gmm/test.txt (d=2, K=3, n=1; then gamma=1, m=0), the input of GmmTests.cpp.
ADBENCH_GMM_TEST = """2 3 1
-0.649014
1.181166
-0.758453
0.092339 0.186260
0.345561 0.396767
0.538817 0.419195
0.586443 -0.851887 0.800321
-1.509405 0.875874 -0.242790
0.166813 -1.965419 -1.270071
1.175171 2.029160
1.000000 0
"""
# GmmTests.cpp: EXPECT_NEAR(8.07380408004975791e+00, output.objective, 1e-8)
GMM_OBJECTIVE = 8.07380408004975791e+00
# GmmTests.cpp `expected_gradient`: d/d(alphas (3), means (3x2), icf (3x3)), flattened in that order.
GMM_GRADIENT = [
    1.08662855508652456e-01, -7.41270039523898472e-01, 6.32607184015246071e-01, 1.11692576532787013e+00,
    1.63333013551455269e-01, -2.19989824071193142e-02, 2.27778292254236098e-01, 1.20963025612832187e+00,
    -6.06375920733956339e-02, 2.58529994051162237e+00, 1.12632694524213789e-01, 3.85744309849611777e-01,
    7.35180573182305508e-02, 5.41836362715595232e+00, -3.21494409677446469e-01, 1.71892309775004937e+00,
    8.60091090790866875e-01, -9.94640930466322848e-01,
]

# ADBench data/ba/test.txt (n=2 cameras, m=10 points, p=10 observations, replicated), the input of
# BaTests.cpp.
ADBENCH_BA_TEST = """2 10 10
1.797201 0.590697 -0.635786 90.859550 29.361415 28.777534 211.628116 -0.284531 -14.762924 0.058931 0.069976
4.173048 5.586898 1.403869
0.417022
-525.672849 161.811929
"""
# BaTests.cpp: every observation's reproj_err is (-2.69048849235189402e-01, 2.59944792677901881e-01) and
# every w_err 8.26092651515999976e-01.
BA_REPROJ_ERR = (-2.69048849235189402e-01, 2.59944792677901881e-01)
BA_W_ERR = 8.26092651515999976e-01
# BaTests.cpp `expected_J_vals` (310 values, BASparseMat order): these 30 (an observation's two rows of 11
# camera, 3 point and 1 weight derivatives) repeated for each of the 10 observations, then 10 times
# -8.34044e-01 (d w_err / d w).
BA_BLOCK = [
    2.28877202208246757e+02, 6.34574811495545418e+02, -7.82222866259340549e+02, 2.42892615607159668e+00,
    -1.17828079628011313e+01, 2.54169312487743460e+00, -1.03657084958518086e+00, 4.17022e-01, 0.0,
    -3.50739521096005205e+02, -9.12107773668008576e+02, -2.42892615607159668e+00, 1.17828079628011313e+01,
    -2.54169312487743460e+00, -6.45167039712987389e-01, -1.20542435994996879e+02, -3.85673240766460424e+02,
    9.75476291403326456e+01, -1.78372108529576567e+00, 4.15466799433126077e+00, 2.04025718029898906e+00,
    3.49176397433145880e-01, 0.0, 4.17022e-01, 1.18149147704414503e+02, 3.07250108960343255e+02,
    1.78372108529576567e+00, -4.15466799433126077e+00, -2.04025718029898906e+00, 6.23335921553064054e-01,
]
BA_J_VALS = BA_BLOCK * 10 + [-8.34044e-01] * 10

# LstmTests.cpp: EXPECT_NEAR(0.66666518, output.objective, 1e-8) on data/lstm/lstm_l2_c1024.txt (l=2,
# c=1024, b=14; tests/data/adbench_lstm_l2_c1024.txt); its `expectedGradient` is in
# tests/data/adbench_lstm_l2_c1024_gradient.txt.
LSTM_OBJECTIVE = 0.66666518


def assert_golden(actual: object, expected: object) -> None:
    """1e-8 relative; the golden zeros (exact structural zeros of the derivative) must be exact."""
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64),
                               rtol=GOLDEN_RTOL, atol=0.0)


# --- ADBench's golden values ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gmm_test_args() -> tuple:
    return gmm.args_of(gmm.read_adbench_gmm(ADBENCH_GMM_TEST))


def test_gmm_objective_matches_adbench(gmm_test_args: tuple) -> None:
    assert_golden(gmm.gmm_objective(*gmm_test_args), GMM_OBJECTIVE)
    assert_golden(gmm.reference(*gmm_test_args).value, GMM_OBJECTIVE)


@pytest.mark.parametrize("opt", OPTS)
def test_gmm_gradient_matches_adbench(gmm_test_args: tuple, opt: str) -> None:
    gradient = run_gradient(gmm.BENCHMARK, gmm_test_args, opt)
    assert_golden(gradient.value, GMM_OBJECTIVE)
    assert_golden(np.concatenate([gradient.shadows[k].ravel() for k in (0, 1, 2)]), GMM_GRADIENT)


def test_ba_objective_matches_adbench() -> None:
    args = ba.read_adbench_ba(ADBENCH_BA_TEST)
    ba.ba_objective(*args)
    assert_golden(args[5], np.tile(BA_REPROJ_ERR, (10, 1)))
    assert_golden(args[6], np.full(10, BA_W_ERR))
    reference = ba.reference(*args)
    assert_golden(reference.outputs[5], np.tile(BA_REPROJ_ERR, (10, 1)))
    assert_golden(reference.outputs[6], np.full(10, BA_W_ERR))


@pytest.mark.parametrize("opt", OPTS)
def test_ba_jacobian_matches_adbench(opt: str) -> None:
    jacobian = run_gradient(ba.BENCHMARK, ba.read_adbench_ba(ADBENCH_BA_TEST), opt)
    assert_golden(ba.sparse_values(jacobian), BA_J_VALS)


def test_ba_jacobian_per_observation_matches_adbench() -> None:
    """ADBench's driver itself: two autodiff calls per observation."""
    jacobian = ba.ba_jacobian_per_observation(ba.read_adbench_ba(ADBENCH_BA_TEST))
    assert_golden(ba.sparse_values(jacobian), BA_J_VALS)


@pytest.fixture(scope="module")
def lstm_test_args() -> tuple:
    return lstm.read_adbench_lstm((DATA / "adbench_lstm_l2_c1024.txt").read_text())


def test_lstm_objective_matches_adbench(lstm_test_args: tuple) -> None:
    assert [a.shape for a in lstm_test_args] == [(4, 56), (3, 14), (4, 14), (1024, 14)]
    assert_golden(lstm.lstm_objective(*lstm_test_args), LSTM_OBJECTIVE)


@pytest.mark.parametrize("opt", OPTS)
def test_lstm_gradient_matches_adbench(lstm_test_args: tuple, opt: str) -> None:
    text = (DATA / "adbench_lstm_l2_c1024_gradient.txt").read_text().splitlines()
    expected = [float(v) for line in text if not line.startswith("#") for v in line.split()]
    assert len(expected) == 266
    gradient = run_gradient(lstm.BENCHMARK, lstm_test_args, opt)
    assert_golden(gradient.value, LSTM_OBJECTIVE)
    assert_golden(np.concatenate([gradient.shadows[0].ravel(), gradient.shadows[1].ravel()]), expected)


# --- every benchmark against its numpy reference --------------------------------------------------------------

SMALL = {
    "norm": {"n": 7}, "relu3": {"n": 12}, "gmm": {"d": 3, "K": 4, "n": 6}, "gmm_reassoc": {"d": 3, "K": 4, "n": 6},
    "gmm_by_component": {"d": 3, "K": 4, "n": 6},
    "lstm": {"l": 2, "c": 6, "b": 5},
    "ode_euler": {"iters": 25, "n": 3}, "ode_rk4": {"iters": 25, "n": 3}, "fft": {"n": 16},
    "brusselator": {"N": 6, "jitter": 0.1}, "mlp": {"width": 5, "steps": 7, "batch": 3},
    "ba_sumsq": {"n": 3, "m": 4, "p": 5, "jitter": 0.05},
}
BENCHMARKS = {bench.name: bench for bench in all_benchmarks()}
FD_STEP = 1e-6
FD_RTOL = 1e-5
COORDINATES = 6  # checked per differentiated array


def copies(args: tuple) -> tuple:
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


def finite_difference(bench: Benchmark, args: tuple, index: int, coordinate: int) -> float:
    """Central difference of the numpy reference's objective along one input coordinate."""
    def at(delta: float) -> float:
        moved = list(copies(args))
        if isinstance(moved[index], np.ndarray):
            moved[index].flat[coordinate] += delta
        else:
            moved[index] += delta
        return objective(bench, tuple(moved))
    return (at(FD_STEP) - at(-FD_STEP)) / (2.0 * FD_STEP)


def test_every_benchmark_is_checked_here() -> None:
    assert set(BENCHMARKS) == set(SMALL) | {"ba"}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_primal_equals_reference(name: str) -> None:
    bench = BENCHMARKS[name]
    args = bench.make_args(**SMALL[name])
    expected = bench.reference(*args)
    actual_args = copies(args)
    value = run_primal(bench, actual_args)
    if expected.value is None:
        assert value is None
    else:
        np.testing.assert_allclose(value, expected.value, rtol=1e-12)
    for index, output in expected.outputs.items():
        np.testing.assert_allclose(actual_args[index], output, rtol=1e-12, atol=1e-12 * np.max(np.abs(output)))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_gradient_matches_finite_differences(name: str) -> None:
    bench = BENCHMARKS[name]
    args = bench.make_args(**SMALL[name])
    gradients = {opt: run_gradient(bench, copies(args), opt) for opt in OPTS}
    rng = np.random.default_rng(0)
    for index, kind in enumerate(bench.activity):
        if kind == "const":
            continue
        if kind == "active":
            coordinates = [0]
            computed = {opt: np.array([g.active[index]]) for opt, g in gradients.items()}
        else:
            size = args[index].size
            coordinates = sorted(rng.choice(size, min(size, COORDINATES), replace=False))
            computed = {opt: g.shadows[index].ravel()[coordinates] for opt, g in gradients.items()}
        expected = np.array([finite_difference(bench, args, index, c) for c in coordinates])
        scale = max(1.0, float(np.max(np.abs(expected))))
        for opt in OPTS:
            np.testing.assert_allclose(computed[opt], expected, rtol=FD_RTOL, atol=FD_RTOL * scale,
                                       err_msg=f"{name}: opt={opt}, argument {index}")
        np.testing.assert_allclose(computed["post"], computed["pre"], rtol=1e-12, atol=1e-14 * scale)
    for index, shadow in gradients["pre"].shadows.items():
        np.testing.assert_allclose(gradients["post"].shadows[index], shadow, rtol=1e-12,
                                   atol=1e-14 * max(1.0, float(np.max(np.abs(shadow)))))


def test_ba_jacobian_blocks_match_finite_differences() -> None:
    """BA's blocks on replicated data made distinct (jitter): each observation's 2 x 15 block against central
    differences of the numpy residuals of that observation, with post and pre and ADBench's driver."""
    args = ba.make_args(n=3, m=4, p=5, seed=1, jitter=0.05)
    cams, X, w, obs, feats = args[:5]
    jacobians = {opt: run_gradient(ba.BENCHMARK, copies(args), opt) for opt in OPTS}
    jacobians["per_observation"] = ba.ba_jacobian_per_observation(copies(args))
    for i in range(len(w)):
        inputs = np.concatenate([cams[obs[i, 0]], X[obs[i, 1]], w[i:i + 1]])

        def residual(z: np.ndarray, i: int = i) -> np.ndarray:
            return ba.reprojection_numpy(z[None, :11], z[None, 11:14], z[14:15], feats[i:i + 1])[0]
        expected = np.empty((2, 15))
        for k in range(15):
            step = FD_STEP * max(1.0, abs(inputs[k]))
            up, down = inputs.copy(), inputs.copy()
            up[k] += step
            down[k] -= step
            expected[:, k] = (residual(up) - residual(down)) / (2.0 * step)
        for name, jacobian in jacobians.items():
            block = np.concatenate([jacobian.shadows["cams"][i], jacobian.shadows["X"][i],
                                    jacobian.shadows["w"][i][:, None]], axis=1)
            np.testing.assert_allclose(block, expected, rtol=FD_RTOL, atol=FD_RTOL * np.max(np.abs(expected)),
                                       err_msg=f"observation {i}, {name}")
        np.testing.assert_allclose(jacobians["post"].shadows["w_err"], -2.0 * w, rtol=1e-15)
    for key in ("cams", "X", "w", "w_err"):
        np.testing.assert_allclose(jacobians["post"].shadows[key], jacobians["pre"].shadows[key], rtol=1e-12)
        np.testing.assert_allclose(jacobians["post"].shadows[key], jacobians["per_observation"].shadows[key],
                                   rtol=1e-12)


def test_fft_is_numpys_fft() -> None:
    data, n = fft.make_args(32, seed=3)
    out = data.copy()
    fft.fft(out, n)
    np.testing.assert_allclose(out, fft.fft_numpy(data, n).outputs[0], rtol=1e-12, atol=1e-12)
    fft.ifft(out, n)
    np.testing.assert_allclose(out, data, rtol=1e-12, atol=1e-12)


def test_ode_matches_closed_forms() -> None:
    """Enzyme's system dx/dt = -1.2 x from x(0) = 1: Euler's (1 - 1.2 t / N)^N and its t-derivative."""
    x0, t, iters = ode.make_args(iters=1000)
    factor = 1.0 - ode.DECAY * t / iters
    np.testing.assert_allclose(ode.integrate_euler(x0, t, iters), factor**iters, rtol=1e-12)
    gradient = run_gradient(ode.BENCHMARK_EULER, ode.make_args(iters=1000), "post")
    np.testing.assert_allclose(gradient.active[1], -ode.DECAY * factor ** (iters - 1), rtol=1e-10)
    np.testing.assert_allclose(gradient.shadows[0][0], factor**iters, rtol=1e-10)
    np.testing.assert_allclose(ode.integrate_rk4(x0, t, iters), np.exp(-ode.DECAY * t), rtol=1e-12)


# --- the suite's shape -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_benchmark_shape(name: str) -> None:
    bench = BENCHMARKS[name]
    parameters = bench.kernel.py_func.__code__.co_varnames[:bench.kernel.py_func.__code__.co_argcount]
    assert len(bench.activity) == len(parameters)
    assert set(bench.activity) <= {"const", "dup", "active"}
    assert set(bench.sizes) == {"quick", "full"} and all(bench.sizes.values())
    size = bench.sizes["quick"][0]
    assert isinstance(bench.label(size), str) and bench.scale(size) > 0
    small = SMALL.get(name, {"n": 2, "m": 3, "p": 4})
    for a, b in zip(bench.make_args(**small), bench.make_args(**small)):
        np.testing.assert_array_equal(a, b)  # seeded: the same inputs every time


def test_sizes_are_the_issues() -> None:
    assert {(s["d"], s["K"], s["n"]) for s in gmm.BENCHMARK.sizes["full"]} == {
        (d, K, 1000) for d in (2, 10, 20, 64) for K in (5, 10, 25, 50, 100)}
    assert {"l": 2, "c": 1024, "b": 14} in lstm.BENCHMARK.sizes["full"]
    assert {"N": 32} in BENCHMARKS["brusselator"].sizes["full"]
    assert {"width": 255, "steps": 1000, "batch": 16} in BENCHMARKS["mlp"].sizes["full"]
    assert {"n": 49, "m": 7776, "p": 31843} in ba.BENCHMARK.sizes["full"]


EXAMPLE_COPIES = {
    "norm": ("norm", ("mag", "norm")),
    "relu3": ("relu3", ("relu3_sum",)),
    "gmm": ("gmm_kernels", ("logsumexp", "sqnorm", "qtimesx", "log_wishart_prior", "gmm_objective",
                            "gmm_objective_by_component", "HALF_LOG_2PI", "log_gamma_distrib", "GMMInput", "gmm_data",
                            "_logsumexp_numpy", "gmm_objective_numpy")),
}
"""example -> (suite module, the names it copies from the example): the suite ships inside the package, so it
holds copies of the examples' kernels (and GMM's data and numpy reference), which must stay the same code."""


@pytest.mark.parametrize("example", sorted(EXAMPLE_COPIES))
def test_the_suite_holds_the_examples_code(example: str) -> None:
    import importlib
    import inspect

    from example_modules import load_example

    original = load_example(example)
    module_name, names = EXAMPLE_COPIES[example]
    copy = importlib.import_module(f"isozyme.benchmark_suite.{module_name}")
    for name in names:
        theirs, ours = getattr(original, name), getattr(copy, name)
        if isinstance(theirs, float):
            assert ours == theirs, name
            continue
        theirs, ours = getattr(theirs, "py_func", theirs), getattr(ours, "py_func", ours)
        assert inspect.getsource(ours) == inspect.getsource(theirs), f"{name} differs from examples/{example}.py"
