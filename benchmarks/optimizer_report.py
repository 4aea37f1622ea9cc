"""What O2 does to the example kernels, and how long it takes: the optimizer's closing figures.

    python benchmarks/optimizer_report.py [--repeat 20]

For every kernel in `examples/*.py` (each with the kernels it calls), lowers it, runs `O2` with per-pass
statistics, and prints the summed table (runs, runs that changed something, net instructions and blocks)
and the instruction count before and after. Then times lowering and `O2` on the ADBench GMM objective
(median of `--repeat` fresh compilations, this machine, no other work in the same process).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from isozyme.kernel_files import load_kernels  # noqa: E402
from isozyme.optimize.pass_manager import PassOptions, PassStatistics, format_statistics, ir_size, run_passes  # noqa: E402
from isozyme.ssa.verifier import verify  # noqa: E402


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


def time_gmm(repeat: int) -> None:
    kernel = load_kernels(str(ROOT / "examples" / "gmm.py"))["gmm_objective"]
    lower_times, o2_times = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        module, _ = kernel.lower()
        middle = time.perf_counter()
        run_passes(module, ["O2"])
        end = time.perf_counter()
        lower_times.append(middle - start)
        o2_times.append(end - middle)
    size = ir_size(module)[0]
    print(f"GMM objective: lowering {1e3 * statistics.median(lower_times):.1f} ms, O2 "
          f"{1e3 * statistics.median(o2_times):.1f} ms (median of {repeat}); {size} instructions after O2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    report_o2_changes()
    time_gmm(args.repeat)


if __name__ == "__main__":
    main()
