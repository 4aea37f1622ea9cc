"""The GMM gradient on the CPU against JAX, side by side in one run (issue 25, item 2).

    python benchmarks/gmm_cpu.py [--sizes 10x25,64x100] [--n 1000] [--repeats 9] [--json FILE]

ADBench's GMM objective, the gradient with respect to alphas, means and icf, f64, at
d x K with n points. Variants, interleaved (call k of each, then call k + 1), medians of `--repeats` calls
after a warm-up call that compiles (half as many at d=64):

- `isozyme`: `examples/gmm.py`'s kernel (`range` over the points), strict IEEE;
- `isozyme reassoc`: the same kernel with `fastmath=("reassoc",)` (LLVM may reorder its sums, as XLA does);
- `isozyme prange`: the objective with a `prange` over the points (`benchmarks/opencl_gpu.py`), on the
  thread pool (`iz.get_num_threads()` threads: the CPUs this process may use);
- `isozyme prange reassoc`: both;
- `isozyme by component`: `examples/gmm.py`'s `gmm_objective_by_component`, the loops swapped (a `prange` over
  the components, the points inside), strict IEEE; `isozyme by component reassoc`: the same with reassoc;
- `... ftz`: `fastmath=("reassoc", "ftz")`, subnormals flushed to zero as XLA runs JAX on the CPU (at d=64
  some weights exp(main_k - max) are subnormal, which costs Intel CPUs a microcode assist per operation);
- `jax`: the K-batched JAX formulation (Q_k (x_i - mu_k) one batched matmul), `jax.jit(jax.grad(...))`
  (`isozyme/benchmark_suite/peer_jax.py`), when JAX is installed (it uses the same CPUs; run under
  `taskset` to compare on fewer).

Checks: every result of every call, the warm-up's included, against the first result of `isozyme`
(max-norm relative: 1e-12 for the strict variants, 1e-9 for reassoc and JAX, whose sums are in another
order); a mismatch marks the row MISMATCH and the script exits with status 1 after printing and writing
everything.

`--json` writes the results schema (`isozyme/benchmark_suite/results.py`): a row per size and variant, the
by-component kernels "tuned" (their loops swapped by hand), JAX a "peer", the rest "natural".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "examples"), str(ROOT)]

import isozyme as iz  # noqa: E402
from isozyme.benchmark_checks import MISMATCH, Check, exit_status  # noqa: E402
from isozyme.benchmark_suite import results  # noqa: E402

STRICT, REORDERED = 1e-12, 1e-9
REASONS = {STRICT: "the same strict f64 math (threads: each point's terms summed in the same order)",
           REORDERED: "the same f64 math, its sums in another order"}


def kind_of(variant: str) -> str:
    """The variant's kind in the results (module docstring)."""
    return "peer" if variant == "jax" else "tuned" if "by component" in variant else "natural"


def variants(d: int, K: int, n: int) -> tuple[tuple, dict[str, tuple[Callable[[], tuple], float]]]:
    """The arguments and, per variant, its call (the gradients in alphas, means, icf) and tolerance."""
    from gmm import gmm_objective, gmm_objective_by_component  # examples/gmm.py
    from opencl_gpu import gmm_prange

    from isozyme.benchmark_suite.gmm import make_args

    args = make_args(d, K, n)
    table: dict[str, tuple[Callable[[], tuple], float]] = {}
    for name, kernel, tolerance in (
            ("isozyme", gmm_objective, STRICT),
            ("isozyme reassoc", iz.kernel(fastmath=("reassoc",))(gmm_objective.py_func), REORDERED),
            ("isozyme prange", gmm_prange, STRICT),
            ("isozyme prange reassoc", iz.kernel(fastmath=("reassoc",))(gmm_prange.py_func), REORDERED),
            ("isozyme by component", gmm_objective_by_component, REORDERED),
            ("isozyme by component reassoc", iz.kernel(fastmath=("reassoc",))(gmm_objective_by_component.py_func),
             REORDERED),
            ("isozyme prange reassoc ftz", iz.kernel(fastmath=("reassoc", "ftz"))(gmm_prange.py_func), REORDERED),
            ("isozyme by component reassoc ftz",
             iz.kernel(fastmath=("reassoc", "ftz"))(gmm_objective_by_component.py_func), REORDERED)):
        gradient = iz.grad(kernel, argnums=(0, 1, 2))
        table[name] = ((lambda gradient=gradient: tuple(gradient(*args))), tolerance)
    try:
        from isozyme.benchmark_suite import peer_jax
    except ImportError:
        return args, table
    call = peer_jax.prepare("gmm", args, {})
    if call is not None:
        table["jax"] = ((lambda: tuple(peer_jax.results("gmm", call()).values())), REORDERED)
    return args, table


def measure(d: int, K: int, n: int, repeats: int) -> tuple[list[dict[str, Any]], list[Check]]:
    """A results row per variant, and its check: every call against the first result of `isozyme`."""
    _, table = variants(d, K, n)
    times: dict[str, list[float]] = {name: [] for name in table}
    returned: dict[str, list[tuple]] = {name: [] for name in table}
    for index in range(repeats + 1):
        for name, (call, _) in table.items():
            start = time.perf_counter()
            value = call()
            elapsed = time.perf_counter() - start
            returned[name].append(value)
            if index:
                times[name].append(elapsed)
    size, rows, checks = f"d={d} K={K} n={n}", [], []
    for name, (_, tolerance) in table.items():
        check = Check(f"GMM {size} {name} gradient against the first of isozyme's", tolerance, REASONS[tolerance])
        for value in returned[name]:
            check.compare(value, returned["isozyme"][0])
        rows.append(results.row("gmm gradient", size, name, kind_of(name), statistics.median(times[name]) * 1e3,
                                check.as_dict(), min_ms=min(times[name]) * 1e3, calls=repeats))
        checks.append(check)
    return rows, checks


def print_size(rows: list[dict[str, Any]]) -> None:
    jax = next((row["median_ms"] for row in rows if row["variant"] == "jax"), None)
    cells = "  ".join(f"{row['variant']} {row['median_ms']:8.3f} ms"
                      + (f" ({jax / row['median_ms']:.2f}x jax)" if jax and row["variant"] != "jax" else "")
                      + ("" if row["check"]["passed"] else f" {MISMATCH}") for row in rows)
    print(f"{rows[0]['size']:<20} {cells}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10x25,64x100", help="comma-separated dxK")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", metavar="FILE")
    options = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    checks: list[Check] = []
    for size in options.sizes.split(","):
        d, K = map(int, size.split("x"))
        repeats = options.repeats if d * K < 1000 else max(options.repeats // 2, 2)
        size_rows, size_checks = measure(d, K, options.n, repeats)
        print_size(size_rows)
        rows += size_rows
        checks += size_checks
    if options.json:
        results.write(options.json, "gmm_cpu", rows, {"sizes": options.sizes, "n": options.n,
                                                      "repeats": options.repeats, "threads": iz.get_num_threads()})
    return exit_status(checks, "gmm_cpu.py")

if __name__ == "__main__":
    sys.exit(main())
