"""What loop fusion after AD (`optimize/loop_fusion.py`) changes in OpenCL gradients: kernel launches, the
modelled bytes they move, the time per call, and the memory plan's peak.

    python benchmarks/fusion.py [--quick] [--repeats N] [--heat 1000,2048,4096] [--json FILE]
    ISOZYME_OPENCL_DEVICE=nvidia python benchmarks/fusion.py

Two gradients on the opencl backend (PoCL by default), each with fusion off and on:

  - `mlp`: the training step's gradient of `examples/mlp.py` (`iz.grad(mlp_loss)` in W1, b1, W2, b2;
    d = hidden = out = 255, batch 64);
  - `heat n`: the gradient of `examples/heat.py` in u (`iz.grad(heat)`, 50 steps), for each n of `--heat`.

`ISOZYME_LOOP_FUSION` is read at each call and is part of the cache keys, so one process holds both
variants: each call runs with it set for its setting (`off`: 0, `on`: 1). For each case and setting: one
call compiles and warms, one call is counted (`opencl_counters.counting()`: NDRange launches of loop
kernels, runs of the serial kernel, the loop kernels and a hash of the source of the program that ran, and
the modelled bytes: each array a loop kernel reads or writes counted at full size once per launch and
direction, the serial kernel's arrays once per call; a model, not a hardware counter), then `--repeats`
rounds each time one call of each setting, interleaved (the machine is shared and noisy), medians and
minima reported. Arguments are numpy arrays, so each call copies them in and out, the same in both
settings. The memory column is `iz.show_memory`'s plan of the gradient's local arrays and tapes: the bytes
the plan uses as a fraction of the bytes requested (every buffer apart).

Checks (`isozyme/benchmark_checks.py`): the gradient of every call above (the warm-up, the counted and
every timed one) is compared, after its timer stopped, with the same gradient on the `llvm` backend
(computed once per case, untimed) within `GPU_TOLERANCE`, 1e-10 relative in the max-norm (the same math,
OpenCL's atomic adds in any order); and the two settings' first gradients with each other within
`FUSION_TOLERANCE`, 1e-12 (fusion reorders no arithmetic). A failed check is marked MISMATCH in the table and
written to the JSON as "check": {"passed": false, ...} (each setting's, and the case's "fusion_check"),
with "passed": false at the top; the script exits with status 1 after printing and writing everything.

The script says when fusion left the program unchanged, prints the table side by side and writes the JSON
(the results schema, `isozyme/benchmark_suite/results.py`: a row per case and setting, both "natural", the
counts in each row's "details", the check of on against off with the "fusion on" row's) to
`benchmarks/results/fusion_<machine kind>.json` unless `--json` names a file. With default sizes it takes
well under a minute on PoCL with 2 cores after compiling; `--quick` (small sizes, for the tests) a few
seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]  # this checkout's isozyme, whose commit is recorded

from example_modules import load_example  # noqa: E402  (tests/example_modules.py)

import isozyme as iz  # noqa: E402
from isozyme.benchmark_checks import MISMATCH, Check, checks_json, exit_status  # noqa: E402
from isozyme.benchmark_suite import results  # noqa: E402
from isozyme.runtime import opencl_counters, opencl_device  # noqa: E402

SETTINGS = {"off": "0", "on": "1"}
"""`ISOZYME_LOOP_FUSION` for each column."""
HEAT_STEPS = 50
GPU_TOLERANCE = 1e-10
GPU_REASON = "the same math on OpenCL and on the CPU, its sums taken in another order (atomic adds in any order)"
FUSION_TOLERANCE = 1e-12
FUSION_REASON = "fusion merges loops and reorders no arithmetic; OpenCL's atomic adds run in any order"


class Case:
    """One gradient to measure: a kernel, its activities for `iz.show_memory`, a call (on OpenCL) and its
    reference (the same gradient on the `llvm` backend); `size` names the sizes in the results' rows."""

    def __init__(self, name: str, kernel: Any, activity: tuple[str, ...], sizes: dict[str, Any],
                 call: Callable[[], tuple[np.ndarray, ...]], reference: Callable[[], tuple[np.ndarray, ...]],
                 size: str = "") -> None:
        self.name, self.kernel, self.activity, self.sizes, self.call = name, kernel, activity, sizes, call
        self.reference, self.size = reference, size


def cases(quick: bool, heat_sizes: list[int]) -> list[Case]:
    mlp, heat = load_example("mlp"), load_example("heat")
    problem = mlp.mlp_data(d=32, hidden=32, out=32, batch=16) if quick else mlp.mlp_data(d=255, batch=64)
    mlp_gradient, mlp_reference = mlp.mlp_gradient("opencl"), mlp.mlp_gradient("llvm")
    layers = f"{problem.W1.shape[1]}-{problem.W1.shape[0]}-{problem.W2.shape[0]} batch {problem.X.shape[1]}"
    made = [Case("mlp", mlp.mlp_loss, ("dup",) * 4 + ("const",) * 2, problem._asdict(),
                 lambda: tuple(mlp_gradient(*problem)), lambda: tuple(mlp_reference(*problem)), layers)]
    heat_gradient = iz.grad(heat.heat, argnums=0, backend="opencl")
    heat_reference = iz.grad(heat.heat, argnums=0, backend="llvm")
    steps = 10 if quick else HEAT_STEPS
    for n in heat_sizes:
        u = np.sin(np.linspace(0.0, np.pi, n)) + 0.1 * np.random.default_rng(n).standard_normal(n)
        made.append(Case(f"heat {n}", heat.heat, ("dup", "active", "const"), {"u": n, "steps": steps},
                         lambda u=u, steps=steps: (heat_gradient(u.copy(), 0.4, steps),),
                         lambda u=u, steps=steps: (heat_reference(u.copy(), 0.4, steps),), f"n={n} steps={steps}"))
    return made


def peak_fraction(case: Case) -> tuple[int, int] | None:
    """The memory plan's (used, requested) bytes, from `iz.show_memory`'s header line."""
    plan = iz.show_memory(case.kernel, activity=case.activity, **case.sizes)
    found = re.search(r"requested (\d+) B, used (\d+) B", plan)
    return (int(found.group(2)), int(found.group(1))) if found else None


@contextlib.contextmanager
def fusion(setting: str) -> Iterator[None]:
    """Calls in the block compile and run the variant of `setting` (the variable is read at each call)."""
    saved = os.environ.get("ISOZYME_LOOP_FUSION")
    os.environ["ISOZYME_LOOP_FUSION"] = SETTINGS[setting]
    try:
        yield
    finally:
        if saved is None:
            del os.environ["ISOZYME_LOOP_FUSION"]
        else:
            os.environ["ISOZYME_LOOP_FUSION"] = saved


def measure(case: Case, repeats: int) -> tuple[dict[str, dict[str, Any]], dict[str, Check]]:
    """Counts, times and memory plan of `case` for each setting, and the checks of its gradients (module
    docstring): one per setting, and "fusion" (on against off)."""
    reference = case.reference()
    results: dict[str, dict[str, Any]] = {}
    checks = {setting: Check(f"{case.name}: gradient with fusion {setting} (opencl) against llvm's",
                             GPU_TOLERANCE, GPU_REASON) for setting in SETTINGS}
    first: dict[str, tuple[np.ndarray, ...]] = {}
    for setting in SETTINGS:
        with fusion(setting):
            first[setting] = case.call()  # compiles, warms the caches
            checks[setting].compare(first[setting], reference)
            with opencl_counters.counting() as stats:
                counted = case.call()
            checks[setting].compare(counted, reference)
            memory = peak_fraction(case)
        results[setting] = {"case": case.name, **stats.as_dict(), "loop_kernels": sum(stats.programs.values()),
                            "serial_prange": sum(stats.serial_prange_loops.values()),
                            "memory_used": memory[0] if memory else None,
                            "memory_requested": memory[1] if memory else None, "seconds": []}
    for _ in range(repeats):
        for setting in SETTINGS:
            with fusion(setting):
                start = time.perf_counter()
                gradient = case.call()
                results[setting]["seconds"].append(time.perf_counter() - start)
            checks[setting].compare(gradient, reference)
    checks["fusion"] = Check(f"{case.name}: gradient with fusion on against off", FUSION_TOLERANCE, FUSION_REASON)
    checks["fusion"].compare(first["on"], first["off"])
    for setting, result in results.items():
        result["median_s"], result["min_s"] = statistics.median(result["seconds"]), min(result["seconds"])
        result["check"] = checks[setting].as_dict()
    return results, checks


def result_rows(case: Case, measured: dict[str, dict[str, Any]], checks: dict[str, Check]) -> list[dict[str, Any]]:
    """The case's rows of the results schema: one per setting, the counts in "details" (module docstring)."""
    made = []
    for setting, result in measured.items():
        check = checks_json({"gradient": checks[setting], "fusion on against off": checks["fusion"]}) \
            if setting == "on" else checks[setting].as_dict()
        details = {key: value for key, value in result.items() if key not in ("case", "seconds", "median_s", "min_s",
                                                                              "check")}
        made.append(results.row(f"{case.name.split()[0]} gradient", case.size, f"fusion {setting}", "natural",
                                result["median_s"] * 1e3, check, min_ms=result["min_s"] * 1e3,
                                calls=len(result["seconds"]), details=details))
    made[-1]["ratios"] = {"off/on": measured["off"]["median_s"] / measured["on"]["median_s"]}
    return made


def mark(checks: dict[str, Check]) -> str:
    """"ok", or MISMATCH and the checks that failed."""
    failed = [name for name, check in checks.items() if not check.passed]
    return f"{MISMATCH} {','.join(failed)}" if failed else "ok"


def table(rows: list[tuple[dict[str, Any], dict[str, Any]]], checks: Sequence[dict[str, Check]]) -> str:
    head = (f"{'case':<11} {'loop kernels':>12} {'serial prange':>13} {'launches':>12} {'serial runs':>12} "
            f"{'modelled MB':>15} {'ms per call':>15} {'speedup':>7} {'memory used/req':>16}  check")
    lines = [head, f"{'':<11} {'off -> on':>12} {'off -> on':>13} {'off -> on':>12} {'off -> on':>12} "
             f"{'off -> on':>15} {'off -> on':>15} {'':>7} {'off -> on':>16}", "-" * len(head)]
    for (off, on), case_checks in zip(rows, checks, strict=True):
        def pair(key: str, scale: float = 1.0, digits: int = 0, off: dict = off, on: dict = on) -> str:
            return f"{off[key] * scale:.{digits}f} -> {on[key] * scale:.{digits}f}"
        memory = " -> ".join(f"{r['memory_used'] / r['memory_requested']:.3f}" if r["memory_requested"] else "-"
                             for r in (off, on))
        lines.append(f"{off['case']:<11} {pair('loop_kernels'):>12} {pair('serial_prange'):>13} "
                     f"{pair('loop_launches'):>12} {pair('serial_launches'):>12} {pair('modelled_bytes', 1e-6, 2):>15} "
                     f"{pair('median_s', 1e3, 2):>15} {off['median_s'] / on['median_s']:>6.2f}x {memory:>16}  "
                     f"{mark(case_checks)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (the tests' smoke run)")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds per case (default 25, quick 2)")
    parser.add_argument("--heat", default=None, help="heat sizes n, comma-separated (default 1000,2048,4096)")
    parser.add_argument("--json", default=None, help="where to write the results "
                        "(default benchmarks/results/fusion_<device>.json)")
    args = parser.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 25)
    heat_sizes = [int(n) for n in (args.heat or ("200" if args.quick else "1000,2048,4096")).split(",")]
    made = cases(args.quick, heat_sizes)
    measured, checks = zip(*(measure(case, repeats) for case in made), strict=True)
    name = opencl_device.device().name
    print(f"loop fusion off -> on, OpenCL gradients on {name}")
    print(table([(m["off"], m["on"]) for m in measured], checks))
    differences = {m["off"]["case"]: c["fusion"].error for m, c in zip(measured, checks, strict=True)}
    print("largest difference of the gradients, off against on (relative to the largest entry): "
          + ", ".join(f"{case} {d:.1e}" for case, d in differences.items()))
    unchanged = [m["off"]["case"] for m in measured if m["off"]["programs"] == m["on"]["programs"]]
    if unchanged:
        print(f"fusion left the OpenCL program unchanged (same source) in: {', '.join(unchanged)}")
    serialized = [m["on"]["case"] for m in measured if m["on"]["serial_prange"] > m["off"]["serial_prange"]]
    if serialized:
        print(f"with fusion, more prange loops run serially (SerialLoopWarning) in: {', '.join(serialized)}")
    output = Path(args.json) if args.json else \
        ROOT / results.RESULTS_FOLDER / results.file_name("fusion", results.machine()["kind"])
    every_check = [check for case_checks in checks for check in case_checks.values()]
    results.write(output, "fusion", [row for case, m, c in zip(made, measured, checks, strict=True)
                                     for row in result_rows(case, m, c)],
                  {"quick": args.quick, "repeats": repeats, "heat": heat_sizes,
                   "heat_steps": 10 if args.quick else HEAT_STEPS},
                  {"gradient_differences": differences, "unchanged": unchanged, "more_serial_prange_loops": serialized})
    print(f"wrote {output}")
    return exit_status(every_check, "fusion.py")


if __name__ == "__main__":
    raise SystemExit(main())
