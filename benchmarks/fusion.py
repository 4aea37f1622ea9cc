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
call compiles and warms, one call is counted (`opencl_backend.counting()`: NDRange launches of loop
kernels, runs of the serial kernel, the loop kernels and a hash of the source of the program that ran, and
the modelled bytes: each array a loop kernel reads or writes counted at full size once per launch and
direction, the serial kernel's arrays once per call; a model, not a hardware counter), then `--repeats`
rounds each time one call of each setting, interleaved (the machine is shared and noisy), medians and
minima reported. Arguments are numpy arrays, so each call copies them in and out, the same in both
settings. The memory column is `iz.show_memory`'s plan of the gradient's local arrays and tapes: the bytes
the plan uses as a fraction of the bytes requested (every buffer apart). The script checks that both
settings compute the same gradient (1e-12 relative to its largest entry: OpenCL's atomic adds run in any
order), says when fusion left the program unchanged, prints the table side by side and writes the JSON to
`benchmarks/results/fusion_<device>.json`. With default sizes it takes well under a minute on PoCL with 2
cores after compiling; `--quick` (small sizes, for the tests) a few seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from example_modules import load_example  # noqa: E402  (tests/example_modules.py)

import isozyme as iz  # noqa: E402
from isozyme.runtime import opencl_backend  # noqa: E402

SETTINGS = {"off": "0", "on": "1"}
"""`ISOZYME_LOOP_FUSION` for each column."""
HEAT_STEPS = 50


class Case:
    """One gradient to measure: a kernel, its activities for `iz.show_memory`, and a call."""

    def __init__(self, name: str, kernel: Any, activity: tuple[str, ...], sizes: dict[str, Any],
                 call: Callable[[], tuple[np.ndarray, ...]]) -> None:
        self.name, self.kernel, self.activity, self.sizes, self.call = name, kernel, activity, sizes, call


def cases(quick: bool, heat_sizes: list[int]) -> list[Case]:
    mlp, heat = load_example("mlp"), load_example("heat")
    problem = mlp.mlp_data(d=32, hidden=32, out=32, batch=16) if quick else mlp.mlp_data(d=255, batch=64)
    mlp_gradient = mlp.mlp_gradient("opencl")
    made = [Case("mlp", mlp.mlp_loss, ("dup",) * 4 + ("const",) * 2, problem._asdict(),
                 lambda: tuple(mlp_gradient(*problem)))]
    heat_gradient = iz.grad(heat.heat, argnums=0, backend="opencl")
    steps = 10 if quick else HEAT_STEPS
    for n in heat_sizes:
        u = np.sin(np.linspace(0.0, np.pi, n)) + 0.1 * np.random.default_rng(n).standard_normal(n)
        made.append(Case(f"heat {n}", heat.heat, ("dup", "active", "const"), {"u": n, "steps": steps},
                         lambda u=u, steps=steps: (heat_gradient(u.copy(), 0.4, steps),)))
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


def measure(case: Case, repeats: int) -> dict[str, dict[str, Any]]:
    """Counts, times and memory plan of `case` for each setting."""
    results: dict[str, dict[str, Any]] = {}
    for setting in SETTINGS:
        with fusion(setting):
            gradient = case.call()  # compiles, warms the caches
            with opencl_backend.counting() as stats:
                case.call()
            memory = peak_fraction(case)
        results[setting] = {"case": case.name, **stats.as_dict(), "loop_kernels": sum(stats.programs.values()),
                            "serial_prange": sum(stats.serial_prange_loops.values()),
                            "memory_used": memory[0] if memory else None,
                            "memory_requested": memory[1] if memory else None,
                            "gradient": gradient, "seconds": []}
    for _ in range(repeats):
        for setting in SETTINGS:
            with fusion(setting):
                start = time.perf_counter()
                case.call()
                results[setting]["seconds"].append(time.perf_counter() - start)
    for result in results.values():
        result["median_s"], result["min_s"] = statistics.median(result["seconds"]), min(result["seconds"])
    return results


def device_tag(name: str) -> str:
    """A short file name part for a device: pocl, or the device name's words."""
    lowered = name.lower()
    if "portable computing" in lowered or "pocl" in lowered:
        return "pocl"
    words = re.findall(r"[a-z0-9]+", lowered.split(":")[-1])
    return "_".join(w for w in words if w not in ("nvidia", "corporation"))[:40] or "device"


def gradient_difference(off: dict[str, Any], on: dict[str, Any]) -> float:
    """The largest difference between the two settings' gradients, relative to the largest entry of each
    gradient array (must be within 1e-12)."""
    worst = 0.0
    for a, b in zip(off["gradient"], on["gradient"], strict=True):
        scale = max(float(np.max(np.abs(a))), 1e-300)
        worst = max(worst, float(np.max(np.abs(a - b))) / scale)
    return worst


def table(rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    head = (f"{'case':<11} {'loop kernels':>12} {'serial prange':>13} {'launches':>12} {'serial runs':>12} "
            f"{'modelled MB':>15} {'ms per call':>15} {'speedup':>7} {'memory used/req':>16}")
    lines = [head, f"{'':<11} {'off -> on':>12} {'off -> on':>13} {'off -> on':>12} {'off -> on':>12} "
             f"{'off -> on':>15} {'off -> on':>15} {'':>7} {'off -> on':>16}", "-" * len(head)]
    for off, on in rows:
        def pair(key: str, scale: float = 1.0, digits: int = 0, off: dict = off, on: dict = on) -> str:
            return f"{off[key] * scale:.{digits}f} -> {on[key] * scale:.{digits}f}"
        memory = " -> ".join(f"{r['memory_used'] / r['memory_requested']:.3f}" if r["memory_requested"] else "-"
                             for r in (off, on))
        lines.append(f"{off['case']:<11} {pair('loop_kernels'):>12} {pair('serial_prange'):>13} "
                     f"{pair('loop_launches'):>12} {pair('serial_launches'):>12} {pair('modelled_bytes', 1e-6, 2):>15} "
                     f"{pair('median_s', 1e3, 2):>15} {off['median_s'] / on['median_s']:>6.2f}x {memory:>16}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (the tests' smoke run)")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds per case (default 25, quick 2)")
    parser.add_argument("--heat", default=None, help="heat sizes n, comma-separated (default 1000,2048,4096)")
    parser.add_argument("--json", default=None, help="where to write the results "
                        "(default benchmarks/results/fusion_<device>.json)")
    args = parser.parse_args()
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 25)
    heat_sizes = [int(n) for n in (args.heat or ("200" if args.quick else "1000,2048,4096")).split(",")]
    measured = [measure(case, repeats) for case in cases(args.quick, heat_sizes)]
    name = opencl_backend.device().name
    print(f"loop fusion off -> on, OpenCL gradients on {name}")
    print(table([(m["off"], m["on"]) for m in measured]))
    differences = {m["off"]["case"]: gradient_difference(m["off"], m["on"]) for m in measured}
    print("largest difference of the gradients, off against on (relative to the largest entry): "
          + ", ".join(f"{case} {d:.1e}" for case, d in differences.items()))
    unchanged = [m["off"]["case"] for m in measured if m["off"]["programs"] == m["on"]["programs"]]
    if unchanged:
        print(f"fusion left the OpenCL program unchanged (same source) in: {', '.join(unchanged)}")
    serialized = [m["on"]["case"] for m in measured if m["on"]["serial_prange"] > m["off"]["serial_prange"]]
    if serialized:
        print(f"with fusion, more prange loops run serially (SerialLoopWarning) in: {', '.join(serialized)}")
    for m in measured:
        for result in m.values():
            del result["gradient"]
    output = Path(args.json) if args.json else ROOT / "benchmarks" / "results" / f"fusion_{device_tag(name)}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    summary = {"device": name, "quick": args.quick, "repeats": repeats, "heat_steps": 10 if args.quick else HEAT_STEPS,
               "gradient_differences": differences, "unchanged": unchanged,
               "more_serial_prange_loops": serialized, "cases": measured}
    output.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {output}")
    if max(differences.values()) > 1e-12:
        raise SystemExit("fusion changed a gradient by more than 1e-12 (relative)")

if __name__ == "__main__":
    main()
