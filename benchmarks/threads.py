"""`prange` on the CPU: the thread pool against one thread, side by side in one run (issue 25, item 1).

    python benchmarks/threads.py [--threads N] [--repeats 7] [--quick] [--json FILE]

Rows, each timed with the pool's N threads (default: `iz.get_num_threads()`, the CPUs this process may
use) and with one, the variants interleaved (call k of each, then call k + 1), medians of `--repeats`
calls (half as many for the largest GMM) after a warm-up call that compiles:

1. `compute`: out[i] = sum_k sin(x[i] k) / (k + 1) over 20,000 points and 200 terms, as a `prange` loop
   and as a `range` loop (the same kernel otherwise): the target is `range / prange` >= 1.6 on 2 cores.
2. `gmm d=10 K=25` and `gmm d=64 K=100` (n = 1000): the gradient (value and the three shadows) of ADBench's
   GMM objective written with `prange` over the points (`benchmarks/opencl_gpu.py`'s `gmm_prange`), N
   threads against one, and the serial example's kernel (`examples/gmm.py`, `range`).
3. `small`: 1,000 cheap iterations (out[i] = 2 x[i], a sum), `prange` against `range`: what handing a loop
   too small to share to the pool costs.
4. `mlp`: the gradient of `examples/mlp.py`'s loss (its stages are `prange` loops), 255-255-255, batch 64.

Checks: every result of every call, the warm-up's included, is compared with a reference (max-norm
relative error): the `compute` outputs and their sum with numpy's (1e-12), the GMM gradients with the
serial example kernel's first gradient (1e-10: other code, its sums in another order), the MLP gradients
with the one-thread gradient (1e-12), which is itself checked against central differences of the numpy
model (`examples/mlp.py`, 1e-5). A mismatch marks the row MISMATCH, and the script exits with status 1
after printing and writing everything.

`--json` writes the results schema (`isozyme/benchmark_suite/results.py`): a row per variant, every kernel
"natural" (the examples' and `gmm_prange`, the example's loops with a `prange`), the speedups as ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "examples"), str(ROOT)]

import isozyme as iz  # noqa: E402
from isozyme import Array, f64, i64  # noqa: E402
from isozyme.benchmark_checks import MISMATCH, Check, checks_json, exit_status  # noqa: E402
from isozyme.benchmark_suite import results  # noqa: E402

TOLERANCE = 1e-12
GMM_TOLERANCE = 1e-10
FD_TOLERANCE = 1e-5
REASON = "the same f64 math; the threads' partial sums added in another order"
Measured = tuple[list[dict[str, Any]], list[Check]]
"""Rows of the results schema and their checks."""


@iz.kernel
def compute_prange(out: Array[f64], x: Array[f64], terms: i64) -> f64:
    total = 0.0
    for i in iz.prange(len(x)):
        v = 0.0
        for k in range(terms):
            v += iz.sin(x[i] * k) / (k + 1.0)
        out[i] = v
        total += v
    return total


@iz.kernel
def compute_range(out: Array[f64], x: Array[f64], terms: i64) -> f64:
    total = 0.0
    for i in range(len(x)):
        v = 0.0
        for k in range(terms):
            v += iz.sin(x[i] * k) / (k + 1.0)
        out[i] = v
        total += v
    return total


@iz.kernel
def small_prange(out: Array[f64], x: Array[f64]) -> f64:
    total = 0.0
    for i in iz.prange(len(x)):
        out[i] = 2.0 * x[i]
        total += x[i]
    return total


@iz.kernel
def small_range(out: Array[f64], x: Array[f64]) -> f64:
    total = 0.0
    for i in range(len(x)):
        out[i] = 2.0 * x[i]
        total += x[i]
    return total


def interleaved(variants: dict[str, Callable[[], object]], repeats: int, threads: dict[str, int],
                setup: Callable[[], object] | None = None) -> tuple[dict[str, float], dict[str, list[object]]]:
    """Median seconds per variant, and every result (the warm-up's first); `setup` runs untimed before each
    call."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    results: dict[str, list[object]] = {name: [] for name in variants}
    for index in range(repeats + 1):
        for name, call in variants.items():
            iz.set_num_threads(threads[name])
            if setup is not None:
                setup()
            start = time.perf_counter()
            returned = call()
            elapsed = time.perf_counter() - start
            results[name].append(returned)
            if index:
                times[name].append(elapsed)
    return {name: statistics.median(values) for name, values in times.items()}, results


def rows_of(problem: str, size: str, seconds: dict[str, float], checks: dict[str, Check], calls: int,
            ratios: dict[str, float]) -> Measured:
    """A results row per variant (its median and check), the ratios with the first."""
    rows = [results.row(problem, size, name, "natural", value * 1e3, checks[name].as_dict(), calls=calls)
            for name, value in seconds.items()]
    rows[0]["ratios"] = ratios
    return rows, list(checks.values())


def checked(results_of: dict[str, list[object]], expected: object, what: str, tolerance: float,
            against: str = "numpy") -> dict[str, Check]:
    """A check per variant of every result it returned against `expected` (`against`'s)."""
    checks = {}
    for name, calls in results_of.items():
        checks[name] = Check(f"{what}: {name} against {against}", tolerance, REASON)
        for value in calls:
            checks[name].compare(value, expected)
    return checks


def compute_row(count: int, repeats: int, quick: bool) -> Measured:
    n, terms = (2000, 50) if quick else (20_000, 200)
    x = np.random.default_rng(0).random(n)
    names = {f"prange {count} threads": count, "range": count, "prange 1 thread": 1}
    outs = {name: np.zeros(n) for name in names}
    kernels = {name: compute_range if name == "range" else compute_prange for name in names}
    variants = {name: (lambda name=name: (kernels[name](outs[name], x, terms), outs[name].copy())) for name in names}
    seconds, returned = interleaved(variants, repeats, names, setup=lambda: [out.fill(0.0) for out in outs.values()])
    k = np.arange(terms, dtype=float)
    expected_out = (np.sin(np.outer(x, k)) / (k + 1.0)).sum(axis=1)
    checks = checked(returned, (expected_out.sum(), expected_out), "compute", TOLERANCE)
    prange = seconds[f"prange {count} threads"]
    return rows_of("compute", f"n={n} terms={terms}", seconds, checks, repeats,
                   {"range/prange": seconds["range"] / prange, "1 thread/prange": seconds["prange 1 thread"] / prange})


def small_row(count: int, repeats: int) -> Measured:
    """What a loop too small to share costs on the pool: 1,000 cheap iterations, `prange` against `range`,
    each time the median of 200 calls."""
    x = np.random.default_rng(1).random(1000)
    out = np.zeros_like(x)
    variants = {"prange": lambda: [(small_prange(out, x), out.copy()) for _ in range(200)][-1],
                "range": lambda: [(small_range(out, x), out.copy()) for _ in range(200)][-1]}
    seconds, returned = interleaved(variants, repeats, {"prange": count, "range": count},
                                    setup=lambda: out.fill(0.0))
    per_call = {name: value / 200 for name, value in seconds.items()}
    checks = checked(returned, (x.sum(), 2.0 * x), "small loop", TOLERANCE)
    return rows_of("small loop (per call)", "n=1000", per_call, checks, 200 * repeats,
                   {"range/prange": per_call["range"] / per_call["prange"]})


def gradient_row(problem: str, size: str, gradient: Callable, serial: Callable | None, args: tuple, count: int,
                 repeats: int) -> tuple[list[dict[str, Any]], list[Check], dict[str, Check]]:
    """The rows of `count` threads, one thread and the serial kernel (if any), each call checked against the
    serial kernel's first result (else the one thread's first); the checks by variant too."""
    variants: dict[str, Callable[[], object]] = {f"{count} threads": lambda: gradient(*args),
                                                 "1 thread": lambda: gradient(*args)}
    threads = {f"{count} threads": count, "1 thread": 1}
    if serial is not None:
        variants["serial kernel"] = lambda: serial(*args)
        threads["serial kernel"] = 1
    seconds, returned = interleaved(variants, repeats, threads)
    against = "serial kernel" if serial is not None else "1 thread"
    checks = checked(returned, returned[against][0], f"{problem} {size}",
                     GMM_TOLERANCE if serial is not None else TOLERANCE, f"the {against}'s first result")
    rows, _ = rows_of(problem, size, seconds, checks, repeats,
                      {"1 thread/threads": seconds["1 thread"] / seconds[f"{count} threads"]})
    return rows, list(checks.values()), checks


def gmm_rows(count: int, repeats: int, quick: bool) -> Measured:
    from gmm import gmm_objective  # examples/gmm.py
    from opencl_gpu import gmm_prange

    from isozyme.benchmark_suite.gmm import make_args

    rows, checks = [], []
    for d, K in ([(2, 5)] if quick else [(10, 25), (64, 100)]):
        args = make_args(d, K, 200 if quick else 1000)
        gradient = iz.grad(gmm_prange, argnums=(0, 1, 2))
        serial = iz.grad(gmm_objective, argnums=(0, 1, 2))
        size_rows, size_checks, _ = gradient_row("gmm gradient", f"d={d} K={K} n={len(args[3])}", _values_of(gradient),
                                                 _values_of(serial), args, count,
                                                 repeats if d * K < 1000 else max(repeats // 2, 2))
        rows += size_rows
        checks += size_checks
    return rows, checks


def _values_of(gradient: Callable) -> Callable[..., tuple]:
    return lambda *args: tuple(gradient(*args))


def mlp_row(count: int, repeats: int, quick: bool) -> Measured:
    """The MLP gradient's rows; the one thread's row also holds the check of its gradient against central
    differences of the numpy model."""
    from mlp import finite_difference_check, mlp_data, mlp_gradient  # examples/mlp.py

    size = 32 if quick else 255
    problem = mlp_data(size, size, size, batch=16 if quick else 64)
    gradient = mlp_gradient()
    rows, checks, by_variant = gradient_row("mlp gradient", f"{size}-{size}-{size} batch {problem.X.shape[1]}",
                                            _values_of(gradient), None, tuple(problem), count, repeats)
    iz.set_num_threads(1)
    differences = Check("mlp gradient (1 thread) against central differences of the numpy model", FD_TOLERANCE,
                        "central differences: their truncation and rounding")
    differences.record(float(finite_difference_check(problem, tuple(gradient(*problem)))))
    one = next(row for row in rows if row["variant"] == "1 thread")
    one["check"] = checks_json({"1 thread": by_variant["1 thread"], "finite differences": differences})
    return rows, [*checks, differences]


def print_rows(rows: list[dict[str, Any]]) -> None:
    """A line per problem and size: each variant's median, the first row's ratios, MISMATCH if one failed."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["problem"], row["size"]), []).append(row)
    for (problem, size), group in groups.items():
        timings = "  ".join(f"{row['variant']} {row['median_ms']:9.4f} ms" for row in group)
        ratios = "  ".join(f"{name} {value:.2f}x" for name, value in group[0]["ratios"].items())
        mark = "" if all(row["check"]["passed"] for row in group) else f"  {MISMATCH}"
        print(f"{problem + ' ' + size:<40} {timings}  {ratios}{mark}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=iz.get_num_threads())
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="small sizes (tests)")
    parser.add_argument("--json", metavar="FILE")
    options = parser.parse_args(argv)
    count = options.threads
    measured = [compute_row(count, options.repeats, options.quick), small_row(count, options.repeats),
                gmm_rows(count, options.repeats, options.quick), mlp_row(count, options.repeats, options.quick)]
    rows = [row for part, _ in measured for row in part]
    print_rows(rows)
    if options.json:
        results.write(options.json, "threads", rows, {"threads": count, "repeats": options.repeats,
                                                      "quick": options.quick})
    return exit_status([check for _, checks in measured for check in checks], "threads.py")

if __name__ == "__main__":
    sys.exit(main())
