"""The cubic ReLU of examples/relu3.py (imported): `relu3_sum(x) = sum(x_i**3 for x_i > 0)`, a branch in a
loop, the shape `iz.grad` takes. Inputs standard normal, so half the branches are taken.
"""

from __future__ import annotations

import numpy as np

from benchmarks.suite import Benchmark, Primal, load_example

_example = load_example("relu3")
relu3 = _example.relu3
relu3_sum = _example.relu3_sum


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
