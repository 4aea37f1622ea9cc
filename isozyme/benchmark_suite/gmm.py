"""ADBench's Gaussian mixture model objective: the kernels of examples/gmm.py (gmm_kernels.py), ADBench's sizes.

The objective is `gmm_objective(alphas, means, icf, x, gamma, m, log_gamma_d)` of the example (its docstring
gives the formula and ADBench's `icf` layout); the gradient is with respect to alphas, means and icf
(ADBench's 'J', in that order when flattened). `make_args` draws ADBench's distributions from a seeded NumPy
generator (`gmm_data` of the example) at d in {2, 10, 20, 64}, K in {5, 10, 25, 50, 100}, n = 1,000;
`read_adbench_gmm` parses ADBench's input files (data/gmm/*.txt: "d K n", alphas, means, icf, x, "gamma m").

`gmm_reassoc` is the same kernel compiled with `fastmath=("reassoc",)`: LLVM may reorder its sums, which
vectorizes the reductions (the squared norm, the adjoint summed over a row of Q_k), as XLA reorders JAX's.
Its row stands beside the strict `gmm` row, at the quick sizes and ADBench's two target sizes (d=10 K=25,
d=64 K=100), against the same peers. `gmm_by_component` is `gmm_objective_by_component`, the same objective
with the components outside (a `prange`, on every core) and the points inside, at the same sizes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import isozyme as iz
from isozyme.benchmark_suite import Benchmark, Primal
from isozyme.benchmark_suite.gmm_kernels import (
    GMMInput,
    gmm_data,
    gmm_objective,
    gmm_objective_by_component,
    gmm_objective_numpy,
    log_gamma_distrib,
)

FULL_D = (2, 10, 20, 64)
FULL_K = (5, 10, 25, 50, 100)


def args_of(data: GMMInput) -> tuple:
    """The kernel's arguments for one problem, with the log-gamma constant computed here."""
    d = data.means.shape[1]
    return (data.alphas, data.means, data.icf, data.x, float(data.gamma), int(data.m),
            log_gamma_distrib(0.5 * (d + data.m + 1), d))


def make_args(d: int, K: int, n: int = 1000, seed: int = 0) -> tuple:
    return args_of(gmm_data(d, K, n, seed=seed))


def read_adbench_gmm(text: str, replicate_point: bool = False) -> GMMInput:
    """An ADBench GMM input file's contents (its `read_gmm_instance`): "d K n", K alphas, K means of d, K icf
    rows of d(d+1)/2, n points of d (or one point replicated n times), then "gamma m"."""
    tokens = text.split()
    d, K, n = (int(t) for t in tokens[:3])
    values = iter(float(t) for t in tokens[3:])

    def take(count: int) -> np.ndarray:
        return np.array([next(values) for _ in range(count)])
    alphas = take(K)
    means = take(K * d).reshape(K, d)
    icf = take(K * d * (d + 1) // 2).reshape(K, d * (d + 1) // 2)
    x = np.tile(take(d), (n, 1)) if replicate_point else take(n * d).reshape(n, d)
    gamma, m = next(values), int(next(values))
    return GMMInput(alphas, means, icf, np.ascontiguousarray(x), gamma, m)


def reference(alphas, means, icf, x, gamma, m, log_gamma_d) -> Primal:
    return Primal(gmm_objective_numpy(GMMInput(alphas, means, icf, x, gamma, m)))


BENCHMARK = Benchmark(
    name="gmm",
    kernel=gmm_objective,
    activity=("dup", "dup", "dup", "const", "const", "const", "const"),
    sizes={"quick": ({"d": 2, "K": 5, "n": 1000}, {"d": 10, "K": 25, "n": 1000}),
           "full": tuple({"d": d, "K": K, "n": 1000} for d in FULL_D for K in FULL_K)},
    make_args=make_args,
    reference=reference,
    label=lambda size: f"d={size['d']} K={size['K']} n={size['n']}",
    scale=lambda size: size["K"] * size["d"] * (size["d"] + 1) // 2 + size["K"] * (size["d"] + 1),
    description="ADBench GMM objective, gradient w.r.t. alphas, means, icf",
)

BENCHMARK_REASSOC = replace(
    BENCHMARK,
    name="gmm_reassoc",
    kernel=iz.kernel(fastmath=("reassoc",))(gmm_objective.py_func),
    sizes={"quick": BENCHMARK.sizes["quick"],
           "full": ({"d": 10, "K": 25, "n": 1000}, {"d": 64, "K": 100, "n": 1000})},
    description='the GMM gradient built with fastmath=("reassoc",): sums reordered, as XLA does',
)
BENCHMARK_BY_COMPONENT = replace(
    BENCHMARK,
    name="gmm_by_component",
    kernel=gmm_objective_by_component,
    sizes=BENCHMARK_REASSOC.sizes,
    description="the GMM gradient with the loops swapped: a prange over the components, the points inside",
)

BENCHMARKS = (BENCHMARK, BENCHMARK_REASSOC, BENCHMARK_BY_COMPONENT)
