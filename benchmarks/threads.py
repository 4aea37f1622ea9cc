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
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "examples"), str(ROOT)]

import isozyme as iz  # noqa: E402
from isozyme import Array, f64, i64  # noqa: E402
from isozyme.benchmark_checks import relative_error  # noqa: E402

TOLERANCE = 1e-12
GMM_TOLERANCE = 1e-10


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


def compute_row(count: int, repeats: int, quick: bool) -> dict[str, object]:
    n, terms = (2000, 50) if quick else (20_000, 200)
    x = np.random.default_rng(0).random(n)
    outs = {"prange": np.zeros(n), "range": np.zeros(n), "prange 1 thread": np.zeros(n)}
    variants = {
        "prange": lambda: (compute_prange(outs["prange"], x, terms), outs["prange"].copy()),
        "range": lambda: (compute_range(outs["range"], x, terms), outs["range"].copy()),
        "prange 1 thread": lambda: (compute_prange(outs["prange 1 thread"], x, terms),
                                    outs["prange 1 thread"].copy()),
    }
    seconds, results = interleaved(variants, repeats, {"prange": count, "range": count, "prange 1 thread": 1},
                                   setup=lambda: [out.fill(0.0) for out in outs.values()])
    k = np.arange(terms, dtype=float)
    expected_out = (np.sin(np.outer(x, k)) / (k + 1.0)).sum(axis=1)
    problems = []
    for name, calls in results.items():
        for total, out in calls:
            if relative_error((total, out), (expected_out.sum(), expected_out)) > TOLERANCE:
                problems.append(name)
                break
    return {"row": f"compute n={n} terms={terms}", "seconds": seconds,
            "speedup": seconds["range"] / seconds["prange"],
            "speedup_vs_one_thread": seconds["prange 1 thread"] / seconds["prange"],
            "check": {"passed": not problems, "mismatched": problems}}


def small_row(count: int, repeats: int) -> dict[str, object]:
    """What a loop too small to share costs on the pool: 1,000 cheap iterations, `prange` against `range`,
    each time the median of 200 calls."""
    x = np.random.default_rng(1).random(1000)
    out = np.zeros_like(x)
    variants = {"prange": lambda: [(small_prange(out, x), out.copy()) for _ in range(200)][-1],
                "range": lambda: [(small_range(out, x), out.copy()) for _ in range(200)][-1]}
    seconds, results = interleaved(variants, repeats, {"prange": count, "range": count},
                                   setup=lambda: out.fill(0.0))
    expected = (x.sum(), 2.0 * x)
    passed = all(relative_error(r, expected) <= TOLERANCE for calls in results.values() for r in calls)
    per_call = {name: value / 200 for name, value in seconds.items()}
    return {"row": "small loop n=1000 (per call)", "seconds": per_call,
            "speedup": per_call["range"] / per_call["prange"], "check": {"passed": bool(passed)}}


def gradient_row(label: str, gradient: Callable, serial: Callable | None, args: tuple, count: int,
                 repeats: int) -> dict[str, object]:
    variants: dict[str, Callable[[], object]] = {f"{count} threads": lambda: gradient(*args),
                                                 "1 thread": lambda: gradient(*args)}
    threads = {f"{count} threads": count, "1 thread": 1}
    if serial is not None:
        variants["serial kernel"] = lambda: serial(*args)
        threads["serial kernel"] = 1
    seconds, results = interleaved(variants, repeats, threads)
    reference = results["serial kernel" if serial is not None else "1 thread"][0]
    errors = {name: max(relative_error(r, reference) for r in calls) for name, calls in results.items()}
    tolerance = GMM_TOLERANCE if serial is not None else TOLERANCE
    passed = bool(all(error <= tolerance for error in errors.values()))
    return {"row": label, "seconds": seconds, "speedup": seconds["1 thread"] / seconds[f"{count} threads"],
            "check": {"passed": passed, "relative_errors": errors}}


def gmm_rows(count: int, repeats: int, quick: bool) -> list[dict[str, object]]:
    from gmm import gmm_objective  # examples/gmm.py
    from opencl_gpu import gmm_prange

    from isozyme.benchmark_suite.gmm import make_args

    rows = []
    for d, K in ([(2, 5)] if quick else [(10, 25), (64, 100)]):
        args = make_args(d, K, 200 if quick else 1000)
        gradient = iz.grad(gmm_prange, argnums=(0, 1, 2))
        serial = iz.grad(gmm_objective, argnums=(0, 1, 2))
        rows.append(gradient_row(f"gmm gradient d={d} K={K} n={len(args[3])}", _values_of(gradient),
                                 _values_of(serial), args, count, repeats if d * K < 1000 else max(repeats // 2, 2)))
    return rows


def _values_of(gradient: Callable) -> Callable[..., tuple]:
    return lambda *args: tuple(gradient(*args))


def mlp_row(count: int, repeats: int, quick: bool) -> dict[str, object]:
    from mlp import finite_difference_check, mlp_data, mlp_gradient  # examples/mlp.py

    size = 32 if quick else 255
    problem = mlp_data(size, size, size, batch=16 if quick else 64)
    gradient = mlp_gradient()
    row = gradient_row(f"mlp gradient {size}-{size}-{size}", _values_of(gradient), None, tuple(problem), count,
                       repeats)
    iz.set_num_threads(1)
    difference = float(finite_difference_check(problem, tuple(gradient(*problem))))
    row["check"]["finite_differences"] = difference  # type: ignore[index]
    row["check"]["passed"] = row["check"]["passed"] and difference <= 1e-5  # type: ignore[index]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=iz.get_num_threads())
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="small sizes (tests)")
    parser.add_argument("--json", metavar="FILE")
    options = parser.parse_args(argv)
    count = options.threads
    rows = [compute_row(count, options.repeats, options.quick), small_row(count, options.repeats),
            *gmm_rows(count, options.repeats, options.quick), mlp_row(count, options.repeats, options.quick)]
    for row in rows:
        timings = "  ".join(f"{name} {seconds * 1e3:9.4f} ms" for name, seconds in row["seconds"].items())
        mark = "" if row["check"]["passed"] else "  MISMATCH"
        print(f"{row['row']:<36} {timings}  x{row['speedup']:.2f}{mark}")
    passed = all(row["check"]["passed"] for row in rows)
    if options.json:
        report = {"threads": count, "cpus": len(os.sched_getaffinity(0)), "machine": platform.machine(),
                  "processor": platform.processor(), "python": platform.python_version(), "passed": passed,
                  "rows": rows}
        Path(options.json).write_text(json.dumps(report, indent=1))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
