"""The examples in examples/: every kernel against its undecorated Python function (`kernel.py_func`) on seeded
random inputs (exact for integers, 1e-12 relative for f64), GMM and the MLP loss against their independent
numpy formulations (1e-10 relative), the MLP's gradient against central differences of its numpy loss, and
norm.py run as a script. Sizes are small: kernels run on whatever backend the call
picks, the interpreter included."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from example_modules import EXAMPLES, load_example

RTOL = 1e-12


norm = load_example("norm")
relu3 = load_example("relu3")
dot = load_example("dot")
matvec = load_example("matvec")
gmm = load_example("gmm")
heat = load_example("heat")
euler = load_example("euler")
mlp = load_example("mlp")


def assert_close(actual: object, expected: object, rtol: float = RTOL) -> None:
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=0.0)


def run_both(kernel, *args: object) -> tuple[tuple[object, list[np.ndarray]], tuple[object, list[np.ndarray]]]:
    """Call the kernel and its py_func on separate copies of the arguments; return each one's
    (return value, arrays after the call)."""
    results = []
    for fn in (kernel, kernel.py_func):
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        value = fn(*copies)
        results.append((value, [a for a in copies if isinstance(a, np.ndarray)]))
    return results[0], results[1]


def check_against_py_func(kernel, *args: object) -> object:
    """The kernel and its py_func agree on the return value and on every array afterwards; returns the
    kernel's return value."""
    (value, arrays), (expected_value, expected_arrays) = run_both(kernel, *args)
    if expected_value is None:
        assert value is None
    else:
        assert_close(value, expected_value)
    for array, expected in zip(arrays, expected_arrays):
        assert_close(array, expected)
    return value


# ---- norm -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 17])
def test_norm_matches_python(n: int) -> None:
    x = np.random.default_rng(n).standard_normal(n)
    assert_close(check_against_py_func(norm.mag, x, n), np.linalg.norm(x))
    check_against_py_func(norm.norm, np.empty(n), x, n)


def test_norm_script_runs() -> None:
    result = subprocess.run([sys.executable, str(EXAMPLES / "norm.py")], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("norm:")


# ---- relu3 ------------------------------------------------------------------------------------------------

def test_relu3_matches_python() -> None:
    x = np.random.default_rng(1).uniform(-2.0, 2.0, 41)
    x[:3] = [0.0, -0.0, 1.0]
    check_against_py_func(relu3.relu3, np.empty_like(x), x)
    total = check_against_py_func(relu3.relu3_sum, x)
    assert_close(total, np.sum(np.where(x > 0.0, x**3, 0.0)), rtol=1e-10)


# ---- dot and matvec ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 25])
def test_dot_matches_python(n: int) -> None:
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    check_against_py_func(dot.dot, a, b)
    ia, ib = rng.integers(-(2**20), 2**20, n), rng.integers(-(2**20), 2**20, n)
    value = dot.idot(ia, ib)
    assert isinstance(value, (int, np.integer)) and value == dot.idot.py_func(ia, ib) == int(np.dot(ia, ib))


def test_dot_asserts_equal_lengths() -> None:
    with pytest.raises(AssertionError):
        dot.dot(np.ones(3), np.ones(4))


@pytest.mark.parametrize("shape", [(5, 3), (1, 1), (0, 4), (3, 0)])
def test_matvec_matches_python(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    A, x = rng.standard_normal(shape), rng.standard_normal(shape[1])
    check_against_py_func(matvec.matvec, np.empty(shape[0]), A, x)
    y = np.empty(shape[0])
    matvec.matvec(y, A, x)
    assert_close(y, A @ x, rtol=1e-10)


# ---- heat and euler ---------------------------------------------------------------------------------------

def test_heat_matches_python_and_numpy() -> None:
    u = np.random.default_rng(2).uniform(-1.0, 1.0, 12)
    energy = check_against_py_func(heat.heat, u, 0.45, 7)
    u_kernel, u_numpy = u.copy(), u.copy()
    heat.heat(u_kernel, 0.45, 7)
    assert_close(energy, heat.heat_numpy(u_numpy, 0.45, 7))
    assert_close(u_kernel, u_numpy)
    assert u_kernel[0] == u[0] and u_kernel[-1] == u[-1]  # the boundary stays fixed


def test_euler_matches_python_and_numpy() -> None:
    m, beta, damping = 3, 0.8, 0.05
    y = np.random.default_rng(3).uniform(-0.5, 0.5, 2 * m)
    check_against_py_func(euler.fput_rhs, np.empty(2 * m), y, m, beta, damping)
    check_against_py_func(euler.chain_energy, y, m, beta)
    assert_close(check_against_py_func(euler.spring_force, 0.3, beta), 0.3 + beta * 0.027)
    check_against_py_func(euler.euler, y, 0.01, 6, beta, damping)
    dydt = np.empty(2 * m)
    euler.fput_rhs(dydt, y, m, beta, damping)
    assert_close(dydt, euler.fput_rhs_numpy(y, beta, damping), rtol=1e-10)


# ---- gmm --------------------------------------------------------------------------------------------------

GMM_SHAPES = [  # d, K, n, gamma, m
    (1, 1, 1, 1.0, 0),
    (2, 3, 7, 0.7, 2),
    (4, 3, 5, 1.3, 1),
]


@pytest.mark.parametrize(("d", "K", "n", "gamma", "m"), GMM_SHAPES)
def test_gmm_matches_numpy(d: int, K: int, n: int, gamma: float, m: int) -> None:
    data = gmm.gmm_data(d, K, n, seed=d + K + n, gamma=gamma, m=m)
    assert_close(gmm.gmm(data), gmm.gmm_objective_numpy(data), rtol=1e-10)


def test_gmm_kernels_match_python() -> None:
    data = gmm.gmm_data(3, 4, 6, seed=5, gamma=1.1, m=2)
    d, K = 3, 4
    log_gamma_d = gmm.log_gamma_distrib(0.5 * (d + data.m + 1), d)
    check_against_py_func(gmm.gmm_objective, *data, log_gamma_d)
    check_against_py_func(gmm.logsumexp, data.alphas)
    check_against_py_func(gmm.logsumexp, np.array([-1000.0, -1001.0]))  # exp underflows without the shift
    check_against_py_func(gmm.sqnorm, data.x[0].copy())
    qdiag = np.exp(data.icf[:, :d])
    for k in range(K):
        check_against_py_func(gmm.qtimesx, np.empty(d), qdiag, data.icf, k, data.x[1].copy())
    check_against_py_func(gmm.log_wishart_prior, qdiag, data.icf[:, :d].sum(axis=1), data.icf, data.gamma, data.m,
                          log_gamma_d)


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_gmm_by_component_matches_the_points_outside_kernel(threads: int) -> None:
    """The components-outside formulation: the same value as numpy's and the same gradient as `gmm_objective`'s
    (another summation order: 1e-10), on 1, 2 and 5 threads, every loop split into one task per thread."""
    import isozyme as iz
    from isozyme.runtime import thread_pool

    data = gmm.gmm_data(6, 7, 300, seed=3, gamma=1.2, m=1)
    args = (*data, gmm.log_gamma_distrib(0.5 * (6 + 1 + 1), 6))
    previous = iz.get_num_threads()
    iz.set_num_threads(threads)
    thread_pool.set_task_work(1)
    try:
        assert_close(gmm.gmm_objective_by_component(*args), gmm.gmm_objective_numpy(data), rtol=1e-12)
        ours = iz.grad(gmm.gmm_objective_by_component, argnums=(0, 1, 2))(*args)
    finally:
        thread_pool.set_task_work(None)
        iz.set_num_threads(previous)
    theirs = iz.grad(gmm.gmm_objective, argnums=(0, 1, 2))(*args)
    for a, b in zip(ours, theirs):
        assert_close(a, b, rtol=1e-10)


def test_gmm_qtimesx_orders_the_lower_triangle_by_column() -> None:
    """icf's strictly lower entries are column by column, as ADBench stores them: for d = 3,
    L[1, 0], L[2, 0], L[2, 1]."""
    icf = np.array([[0.0, 0.0, 0.0, 2.0, 3.0, 5.0]])
    out = np.empty(3)
    gmm.qtimesx(out, np.ones((1, 3)), icf, 0, np.array([1.0, 10.0, 100.0]))
    assert out.tolist() == [1.0, 10.0 + 2.0, 100.0 + 3.0 + 50.0]


def test_log_gamma_distrib_closed_forms() -> None:
    """Gamma_1(a) = Gamma(a); Gamma_2(3) = pi * 2**-4 * Gamma(5) (Legendre's duplication formula);
    Gamma_3(2) = pi**1.5 * Gamma(2) Gamma(3/2) Gamma(1) = pi**2 / 2."""
    assert gmm.log_gamma_distrib(2.5, 1) == math.lgamma(2.5)
    assert_close(gmm.log_gamma_distrib(3.0, 2), math.log(1.5 * math.pi))
    assert_close(gmm.log_gamma_distrib(2.0, 3), math.log(math.pi**2 / 2))


# ---- mlp --------------------------------------------------------------------------------------------------

def test_mlp_matches_python_and_numpy() -> None:
    problem = mlp.mlp_data(d=5, hidden=4, out=3, batch=6, seed=7)
    loss = check_against_py_func(mlp.mlp_loss, *problem)
    assert_close(loss, mlp.mlp_loss_numpy(*problem), rtol=1e-10)
    h = np.empty((4, 6))
    check_against_py_func(mlp.dense, h, problem.W1, problem.X)
    check_against_py_func(mlp.bias_sigmoid, np.empty((4, 6)), problem.W1 @ problem.X, problem.b1)
    check_against_py_func(mlp.mean_squared_error, problem.Y, np.zeros_like(problem.Y))


def test_mlp_gradient_matches_finite_differences() -> None:
    """`iz.grad` of the loss (on `llvm`, the default) against central differences of the numpy model;
    `sgd_step` lowers the loss."""
    problem = mlp.mlp_data(d=6, hidden=5, out=4, batch=3, seed=2)
    gradients = mlp.mlp_gradient("llvm")(*problem)
    assert [g.shape for g in gradients] == [p.shape for p in problem[:4]]
    assert mlp.finite_difference_check(problem, gradients, samples=4) < 1e-6
    stepped, before = mlp.sgd_step(problem, learning_rate=1.0, backend="llvm")
    assert mlp.mlp_loss(*stepped) < before


# ---- O0 and O2 compute the same bits -----------------------------------------------------------------------

def _gmm_args(rng: np.random.Generator) -> tuple:
    data = gmm.gmm_data(3, 4, 6, seed=int(rng.integers(100)), gamma=1.5, m=1)
    return (data.alphas, data.means, data.icf, data.x, data.gamma, data.m, gmm.log_gamma_distrib(2.5, 3))


O2_CASES = {
    "mag": (norm.mag, lambda r: (r.standard_normal(9), 9)),
    "norm": (norm.norm, lambda r: (np.zeros(9), r.standard_normal(9), 9)),
    "relu3": (relu3.relu3, lambda r: (np.zeros(8), r.standard_normal(8))),
    "relu3_sum": (relu3.relu3_sum, lambda r: (r.standard_normal(8),)),
    "dot": (dot.dot, lambda r: (r.standard_normal(7), r.standard_normal(7))),
    "idot": (dot.idot, lambda r: (r.integers(-50, 50, 7), r.integers(-50, 50, 7))),
    "matvec": (matvec.matvec, lambda r: (np.zeros(4), r.standard_normal((4, 5)), r.standard_normal(5))),
    "gmm_objective": (gmm.gmm_objective, _gmm_args),
    "gmm_objective_by_component": (gmm.gmm_objective_by_component, _gmm_args),
    "heat": (heat.heat, lambda r: (r.standard_normal(12), 0.4, 5)),
    "euler": (euler.euler, lambda r: (r.standard_normal(8), 0.01, 6, 0.3, 0.05)),
    "mlp_loss": (mlp.mlp_loss, lambda r: tuple(mlp.mlp_data(d=5, hidden=4, out=3, batch=6, seed=int(r.integers(99))))),
}


def _bits(value: object) -> object:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else np.float64(value).tobytes()
    return value


@pytest.mark.parametrize("name", O2_CASES)
def test_o2_computes_the_same_bits_as_o0(name: str) -> None:
    kernel, make_args = O2_CASES[name]
    outcomes = []
    for opt in ("O0", "O2"):
        args = make_args(np.random.default_rng(5))
        value = kernel.compile(backend="interp", opt=opt)(*args)
        arrays = [a.tobytes() for a in args if isinstance(a, np.ndarray)]
        outcomes.append((_bits(value), arrays))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("name", O2_CASES)
@pytest.mark.parametrize("boundscheck", [False, True])
def test_llvm_computes_the_interpreters_bits(name: str, boundscheck: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The `llvm` backend, checked or not, against the reference interpreter: the same bits (no fast-math;
    the math functions are the C library's on both)."""
    kernel, make_args = O2_CASES[name]
    monkeypatch.setenv("ISOZYME_BOUNDSCHECK", "1" if boundscheck else "0")
    outcomes = []
    for backend in ("interp", "llvm"):
        args = make_args(np.random.default_rng(11))
        value = kernel.compile(backend=backend)(*args)
        outcomes.append((_bits(value), [a.tobytes() for a in args if isinstance(a, np.ndarray)]))
    assert outcomes[0] == outcomes[1]
