"""What O2 does to the example kernels, and how long it takes: the optimizer's closing figures.

    python benchmarks/optimizer_report.py [--repeat 20]

For every kernel in `examples/*.py` (each with the kernels it calls), lowers it, runs `O2` with per-pass
statistics, and prints the summed table (runs, runs that changed something, net instructions and blocks)
and the instruction count before and after. Then times lowering and `O2` on the ADBench GMM objective
(median of `--repeat` fresh compilations, this machine, no other work in the same process).

Check (`isozyme/benchmark_checks.py`): every module the timed compilations produced is verified and run on
the reference interpreter on a small GMM problem, against the example's `gmm_objective_numpy` within
1e-10 relative (the same math, rounded in another order); a failed check is printed MISMATCH and the script
exits with status 1 after printing everything. (Every example kernel's O2 module is verified too; a module
that fails verification stops the script.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from isozyme.benchmark_checks import Check, exit_status  # noqa: E402
from isozyme.kernel_files import load_kernels  # noqa: E402
from isozyme.optimize.pass_manager import PassOptions, PassStatistics, format_statistics, ir_size, run_passes  # noqa: E402
from isozyme.ssa import interpreter  # noqa: E402
from isozyme.ssa.verifier import verify  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
from gmm import gmm_data, gmm_objective_numpy, log_gamma_distrib  # noqa: E402  (examples/gmm.py)

CHECK_SIZE = {"d": 3, "K": 4, "n": 10}
"""The GMM problem each optimized module is run on (by the interpreter, which is slow)."""


def example_kernels() -> list:
    kernels = []
    for path in sorted((ROOT / "examples").glob("*.py")):
        kernels += [(path.stem, kernel) for kernel in load_kernels(str(path)).values()]
    return kernels


def report_o2_changes() -> None:
    totals: dict[str, PassStatistics] = {}
    before = after = 0
    for _, kernel in example_kernels():
        module, _ = kernel.lower()
        before += ir_size(module)[0]
        run_passes(module, ["O2"], PassOptions(statistics=totals))
        verify(module)
        after += ir_size(module)[0]
    print(f"O2 on {len(example_kernels())} example kernels (each module with its callees): "
          f"{before} -> {after} instructions")
    print(format_statistics(totals))


def time_gmm(repeat: int) -> Check:
    kernel = load_kernels(str(ROOT / "examples" / "gmm.py"))["gmm_objective"]
    data = gmm_data(**CHECK_SIZE)
    args = (*data, log_gamma_distrib(0.5 * (CHECK_SIZE["d"] + data.m + 1), CHECK_SIZE["d"]))
    check = Check(f"GMM objective after O2 (interpreter, d={CHECK_SIZE['d']} K={CHECK_SIZE['K']} "
                  f"n={CHECK_SIZE['n']}) against gmm_objective_numpy", 1e-10,
                  "the same math in f64, rounded in another order")
    lower_times, o2_times = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        module, function = kernel.lower()
        middle = time.perf_counter()
        run_passes(module, ["O2"])
        end = time.perf_counter()
        lower_times.append(middle - start)
        o2_times.append(end - middle)
        verify(module)
        check.compare(interpreter.run_function(module[function.name], *args), gmm_objective_numpy(data))
    size = ir_size(module)[0]
    print(f"GMM objective: lowering {1e3 * statistics.median(lower_times):.1f} ms, O2 "
          f"{1e3 * statistics.median(o2_times):.1f} ms (median of {repeat}); {size} instructions after O2")
    print(check)
    return check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    report_o2_changes()
    return exit_status([time_gmm(args.repeat)], "optimizer_report.py")


if __name__ == "__main__":
    raise SystemExit(main())
