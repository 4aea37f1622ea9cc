"""The cubic ReLU of examples/relu3.py (its kernel `relu3_sum`): `relu3_sum(x) = sum(x_i**3 for x_i > 0)`, a branch in a
loop, the shape `iz.grad` takes. Inputs standard normal, so half the branches are taken.
"""

from __future__ import annotations

import numpy as np

import isozyme as iz
from isozyme import Array, f64
from isozyme.benchmark_suite import Benchmark, Primal


# examples/relu3.py's kernel, the same source (tests/test_bench_kernels.py checks it), here so that the suite
# runs from an installed package.
@iz.kernel
def relu3_sum(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        xi = x[i]
        if xi > 0.0:
            s += xi**3
    return s


def make_args(n: int, seed: int = 0) -> tuple:
    return (np.random.default_rng(seed).standard_normal(n),)


def reference(x: np.ndarray) -> Primal:
    return Primal(float(np.sum(np.where(x > 0.0, x**3, 0.0))))


BENCHMARK = Benchmark(
    name="relu3",
    kernel=relu3_sum,
    activity=("dup",),
    sizes={"quick": ({"n": 100_000},), "full": ({"n": 10_000}, {"n": 100_000}, {"n": 1_000_000})},
    make_args=make_args,
    reference=reference,
    label=lambda size: f"n={size['n']}",
    scale=lambda size: size["n"],
    description="sum of x**3 over x > 0: a branch in a loop",
)
