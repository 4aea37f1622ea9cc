"""DESIGN section 1's `norm` (the kernels of examples/norm.py): out = x / |x| with `mag(x, n)` called inside the
loop, which O2 hoists. Swept over n: post-optimization AD is O(n), pre-optimization AD O(n^2).

The gradient is one reverse sweep with the cotangent of `out` seeded (uniform random weights, fixed per n).
"""

from __future__ import annotations

import numpy as np

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.benchmark_suite import Benchmark, Primal


# examples/norm.py's kernels, the same source (tests/test_bench_kernels.py checks it), here so that the suite
# runs from an installed package.
@iz.kernel
def mag(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return iz.sqrt(s)          # math.sqrt works too


@iz.kernel
def norm(out: Array[f64], x: Array[f64], n: i64):
    for i in range(n):
        out[i] = x[i] / mag(x, n)


def make_args(n: int, seed: int = 0) -> tuple:
    """(out, x, n): x uniform on [0, 1), out zeros."""
    rng = np.random.default_rng(seed)
    return np.zeros(n), rng.random(n), n


def seeds(args: tuple) -> dict[int, np.ndarray]:
    """The cotangent of `out`: weights uniform on [0, 1), seeded by n."""
    return {0: np.random.default_rng(1000 + args[2]).random(args[2])}


def reference(out: np.ndarray, x: np.ndarray, n: int) -> Primal:
    return Primal(None, {0: x[:n] / np.sqrt(np.sum(x[:n] * x[:n]))})


BENCHMARK = Benchmark(
    name="norm",
    kernel=norm,
    activity=("dup", "dup", "const"),
    sizes={"quick": ({"n": 1000}, {"n": 2000}, {"n": 4000}),
           "full": ({"n": 1000}, {"n": 2000}, {"n": 4000}, {"n": 8000}, {"n": 16000})},
    make_args=make_args,
    reference=reference,
    seeds=seeds,
    label=lambda size: f"n={size['n']}",
    scale=lambda size: size["n"],
    description="x / |x| with mag() called in the loop (DESIGN section 1)",
)
