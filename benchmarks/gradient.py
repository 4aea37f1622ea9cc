"""Reverse-mode figures of issue 6, on the `llvm` backend, measured side by side in one run:

1. norm's gradient with `opt="post"` and `opt="pre"` for n = 1,000, 4,000 and 16,000: post differentiates
   the program in which O2 hoisted `mag(x, n)` out of the loop (O(n)), pre the program as written (O(n^2)),
   so their ratio should grow about linearly with n;
2. gradient/primal time ratios for GMM (ADBench-sized: d = 10, K = 25, n = 1,000) and relu3 (n = 10^6).

Timing: each variant is compiled and warmed up first; then the variants of one benchmark take turns, one
call at a time, each until it has run for at least `--min-time` seconds (and 3 calls); the median and the
minimum per call are reported. Compile time is not included (the disk cache is off for this run).

    python benchmarks/gradient.py [--min-time 0.2] [--sizes 1000,4000,16000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("ISOZYME_CACHE", "off")  # time the code, never a stale cache entry

import numpy as np  # noqa: E402

import isozyme as iz  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from gmm import gmm_data, gmm_objective, log_gamma_distrib  # noqa: E402
from norm import norm  # noqa: E402
from relu3 import relu3_sum  # noqa: E402


def interleaved(variants: dict[str, Callable[[], object]], min_time: float) -> dict[str, dict[str, float]]:
    """Median and minimum seconds per call of each variant, the variants taking turns (module docstring)."""
    for run in variants.values():
        run()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    spent = dict.fromkeys(variants, 0.0)
    def unfinished() -> list[str]:
        return [name for name in variants if spent[name] < min_time or len(samples[name]) < 3]
    while pending := unfinished():
        for name in pending:
            run = variants[name]
            start = time.perf_counter()
            run()
            elapsed = time.perf_counter() - start
            samples[name].append(elapsed)
            spent[name] += elapsed
    return {name: {"median": statistics.median(s), "min": min(s), "calls": len(s)} for name, s in samples.items()}


def norm_variants(n: int) -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(n)
    x, out = rng.random(n), np.empty(n)
    dx, dout = np.zeros(n), np.ones(n)

    def gradient(opt: str) -> Callable[[], object]:
        return lambda: iz.autodiff(norm, iz.Duplicated(out, dout), iz.Duplicated(x, dx), n, opt=opt)
    return {"primal": lambda: norm(out, x, n), "post": gradient("post"), "pre": gradient("pre")}


def gmm_variants() -> dict[str, Callable[[], object]]:
    d, k, n = 10, 25, 1000
    data = gmm_data(d, k, n)
    args = (data.alphas, data.means, data.icf, data.x, data.gamma, data.m,
            log_gamma_distrib(0.5 * (d + data.m + 1), d))
    gradient = iz.grad(gmm_objective, (0, 1, 2))
    return {"primal": lambda: gmm_objective(*args), "post": lambda: gradient(*args)}


def relu3_variants() -> dict[str, Callable[[], object]]:
    x = np.random.default_rng(3).standard_normal(1_000_000)
    gradient = iz.grad(relu3_sum)
    return {"primal": lambda: relu3_sum(x), "post": lambda: gradient(x)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-time", type=float, default=0.2)
    parser.add_argument("--sizes", default="1000,4000,16000")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    results: dict[str, object] = {}
    print("norm gradient, opt=pre vs opt=post (llvm backend)")
    print(f"{'n':>7} {'primal':>10} {'post':>10} {'pre':>10} {'pre/post':>9} {'post/primal':>12}")
    for n in (int(s) for s in args.sizes.split(",")):
        times = interleaved(norm_variants(n), args.min_time)
        results[f"norm_{n}"] = times
        primal, post, pre = (times[v]["median"] for v in ("primal", "post", "pre"))
        print(f"{n:>7} {primal * 1e6:>8.1f}us {post * 1e6:>8.1f}us {pre * 1e3:>8.2f}ms {pre / post:>9.1f} "
              f"{post / primal:>12.2f}")
    print("\ngradient / primal (opt=post, llvm backend)")
    for name, make in (("gmm d=10 K=25 n=1000", gmm_variants), ("relu3 n=1e6", relu3_variants)):
        times = interleaved(make(), args.min_time)
        results[name] = times
        primal, post = times["primal"]["median"], times["post"]["median"]
        print(f"{name:<22} primal {primal * 1e3:8.3f} ms  gradient {post * 1e3:8.3f} ms  ratio {post / primal:5.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
