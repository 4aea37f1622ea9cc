"""Per-call cost of isozyme's call paths on one-element kernels, side by side in one run, with JAX's
`jit(grad)` where JAX is installed (the `peers` extra).

    python benchmarks/dispatch.py [--number 20000] [--repeat 9] [--json FILE]

The kernels (`first(x: Array[f64]) -> f64`: `x[0] * x[0]`; `square(a: f64) -> f64`: `a * a`) do no work
worth timing, so what is timed is the call path: for the primal `kernel(args)`; for `iz.grad(kernel)`
the argument checks, a fresh shadow (or the adjoint's output), the native call and the result; for
`iz.autodiff` the same from `Duplicated`/`Active` arguments (the annotation objects are made outside the
timer, as a caller that reuses them would). Every variant is timed with `timeit`, `--number` calls per
sample, `--repeat` samples, the variants interleaved (sample k of every variant, then sample k + 1), on a
warm compiled derivative. Target (issue 25): `iz.grad` and `iz.autodiff` at most 5 us per call.

Checks: every variant's result before and after its samples is compared with the derivative worked out by
hand (`2 x[0]`, `2 a`) within 1e-15 relative; a mismatch marks the row and the script exits with status 1
after printing and writing everything.

`--json` writes the results schema (`isozyme/benchmark_suite/results.py`): a row per variant, its problem
the kernel and what is computed (`ROWS`), the targets under "extra".
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import timeit
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's isozyme, whose commit is recorded

import isozyme as iz  # noqa: E402
from isozyme import Array, f64  # noqa: E402
from isozyme.benchmark_checks import Check, exit_status  # noqa: E402
from isozyme.benchmark_suite import results  # noqa: E402

TARGET_US = 5.0
RTOL = 1e-15
ROWS = {"first(x) primal": ("first(x) primal", "isozyme", "natural"),
        "square(a) primal": ("square(a) primal", "isozyme", "natural"),
        "iz.grad(first)(x)": ("first(x) gradient", "iz.grad", "natural"),
        "iz.grad(square)(a)": ("square(a) gradient", "iz.grad", "natural"),
        "iz.autodiff(first, Duplicated)": ("first(x) gradient", "iz.autodiff(Duplicated)", "natural"),
        "iz.autodiff(square, Active)": ("square(a) gradient", "iz.autodiff(Active)", "natural"),
        "jax.jit(grad)(x) on first": ("first(x) gradient", "jax.jit(grad)", "peer"),
        "jax.jit(grad)(a) on square": ("square(a) gradient", "jax.jit(grad)", "peer")}
"""Each variant's row in the results: (problem, variant, kind)."""


@iz.kernel
def first(x: Array[f64]) -> f64:
    return x[0] * x[0]


@iz.kernel
def square(a: f64) -> f64:
    return a * a


def variants() -> dict[str, tuple[object, tuple, object, object]]:
    """name -> (function, arguments, how to read the derivative from its result, expected derivative)."""
    x, a = np.array([3.0]), 2.0
    dx, ax, aa = np.zeros(1), iz.Duplicated(x, np.zeros(1)), iz.Active(a)
    grad_first, grad_square = iz.grad(first), iz.grad(square)

    def autodiff_first(annotated: object) -> object:
        annotated.shadow[0] = 0.0  # type: ignore[attr-defined]
        iz.autodiff(first, annotated)
        return annotated.shadow  # type: ignore[attr-defined]

    table = {
        "first(x) primal": (first, (x,), lambda r: r, 9.0),
        "square(a) primal": (square, (a,), lambda r: r, 4.0),
        "iz.grad(first)(x)": (grad_first, (x,), lambda r: r[0], 6.0),
        "iz.grad(square)(a)": (grad_square, (a,), lambda r: r, 4.0),
        "iz.autodiff(first, Duplicated)": (autodiff_first, (ax,), lambda r: r[0], 6.0),
        "iz.autodiff(square, Active)": (lambda v: iz.autodiff(square, v), (aa,), lambda r: r[1][0], 4.0),
    }
    del dx
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        jax_first = jax.jit(jax.grad(lambda v: v[0] * v[0]))
        jax_square = jax.jit(jax.grad(lambda v: v * v))
        xj = jax.numpy.asarray(x)
        table["jax.jit(grad)(x) on first"] = (lambda v: jax_first(v).block_until_ready(), (xj,),
                                              lambda r: float(r[0]), 6.0)
        table["jax.jit(grad)(a) on square"] = (lambda v: jax_square(v).block_until_ready(), (a,),
                                               lambda r: float(r), 4.0)
    except ImportError:
        pass
    return table


def result_row(name: str, row: dict, calls: int) -> dict:
    """A variant's row of the results schema (`ROWS`)."""
    problem, variant, kind = ROWS[name]
    return results.row(problem, "1 element", variant, kind, row["median_us"] * 1e-3, row["check"],
                       min_ms=row["min_us"] * 1e-3, calls=calls, details={"samples_us": row["samples_us"]})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000, help="calls per sample (default 20000)")
    parser.add_argument("--repeat", type=int, default=9, help="samples per variant (default 9)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    print(f"host: {platform.node()} {platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}")
    table = variants()
    checks = {name: Check(f"{name}: the derivative (or value) against the one worked out by hand", RTOL,
                          "one multiplication: the same rounding") for name in table}
    timers = {}
    for name, (function, arguments, read, expected) in table.items():
        checks[name].compare(read(function(*arguments)), expected)
        timers[name] = timeit.Timer(lambda f=function, a=arguments: f(*a))
        timers[name].timeit(args.number // 10)  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(args.repeat):
        for name, timer in timers.items():
            samples[name].append(timer.timeit(args.number) / args.number * 1e6)
    for name, (function, arguments, read, expected) in table.items():
        checks[name].compare(read(function(*arguments)), expected)
    rows = {name: {"median_us": statistics.median(s), "min_us": min(s), "samples_us": s,
                   "check": checks[name].as_dict()} for name, s in samples.items()}
    print(f"{'call':34} {'median us':>10} {'min us':>8}  check")
    for name, row in rows.items():
        print(f"{name:34} {row['median_us']:10.2f} {row['min_us']:8.2f}  {checks[name].mark}")
    targets = {name: {"median_us": row["median_us"], "target_us": TARGET_US,
                      "met": row["median_us"] <= TARGET_US}
               for name, row in rows.items() if name.startswith(("iz.grad", "iz.autodiff"))}
    for name, target in targets.items():
        print(f"target: {name} <= {TARGET_US} us: {target['median_us']:.2f} us "
              f"({'met' if target['met'] else 'not met'})")
    if args.json:
        results.write(args.json, "dispatch", [result_row(name, row, args.number * args.repeat)
                                              for name, row in rows.items()],
                      {"number": args.number, "repeat": args.repeat}, {"targets": targets})
    return exit_status(checks.values(), "dispatch")


if __name__ == "__main__":
    sys.exit(main())
