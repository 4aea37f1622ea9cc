"""The quick suite that is quick (issue 60): what `--suite quick` keeps of the full one, the timing settings
per suite, and the variants compiled in worker processes before the timing
(isozyme/benchmark_compiles.py). Nothing here is timed; what is checked is what the harness does with the
times it gets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from isozyme import benchmark_compiles as compiles
from isozyme import benchmark_suite as suite
from isozyme import benchmarking
from isozyme.__main__ import main as isozyme_main
from isozyme.benchmarking import SUITE_MIN_TIME, Timing, compiled_in_workers


@pytest.fixture
def bench_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command in this process; the variables it sets are restored after."""
    monkeypatch.setenv("ISOZYME_CACHE", "off")
    monkeypatch.setenv("ISOZYME_BACKEND", "llvm")


def test_the_quick_suite_has_every_benchmark_and_norms_sweep() -> None:
    """Every benchmark runs in quick at one size at least, and norm at three sizes at least, over a factor of
    4 in n: enough to see its pre gradient's O(n^2) against the post gradient's O(n)."""
    for bench in suite.all_benchmarks():
        assert bench.sizes["quick"] and bench.sizes["full"], bench.name
    norm = next(bench for bench in suite.all_benchmarks() if bench.name == "norm")
    sweep = sorted(size["n"] for size in norm.sizes["quick"])
    assert len(sweep) >= 3 and sweep[-1] >= 4 * sweep[0]


def test_min_time_per_suite_and_jobs(monkeypatch: pytest.MonkeyPatch, bench_environment: None) -> None:
    """--min-time defaults to the suite's (quick runs shorter than full), --min-time and --jobs are passed
    on; on OpenCL the variants compile in the main process."""
    runs: list[dict[str, Any]] = []

    def run_suite(suite_name: str, min_time: float, peers: Any = (), only: Any = None, stream: Any = None,
                  jobs: int = 0) -> list:
        runs.append({"suite": suite_name, "min_time": min_time, "jobs": jobs})
        return []
    monkeypatch.setattr(benchmarking, "run_suite", run_suite)
    assert SUITE_MIN_TIME["quick"] < SUITE_MIN_TIME["full"]
    for argv in (["bench"], ["bench", "--suite", "full"], ["bench", "--min-time", "0.3", "--jobs", "0"],
                 ["bench", "--backend", "opencl", "--jobs", "3"]):
        assert isozyme_main(argv) == 0
    assert runs == [{"suite": "quick", "min_time": SUITE_MIN_TIME["quick"], "jobs": compiles.default_workers()},
                    {"suite": "full", "min_time": SUITE_MIN_TIME["full"], "jobs": compiles.default_workers()},
                    {"suite": "quick", "min_time": 0.3, "jobs": 0},
                    {"suite": "quick", "min_time": SUITE_MIN_TIME["quick"], "jobs": 0}]


def test_a_workers_first_call_gives_the_compile_time_of_the_first_row_only() -> None:
    """The compile time of a variant compiled in a worker: its first call there less its median here."""
    timings = {"primal": Timing(0.5, 0.4, 3, 0.01), "post": Timing(1.0, 0.9, 3, 0.02)}
    changed = compiled_in_workers("norm", timings, {("norm", "primal"): 2.5, ("norm", "post"): 0.5,
                                                    ("relu3", "post"): 9.0})
    assert (changed["primal"].compile, changed["post"].compile) == (2.0, 0.0)  # never below 0
    assert (changed["primal"].median, changed["primal"].calls) == (0.5, 3)
    assert compiled_in_workers("ba", timings, {("norm", "primal"): 2.5}) == timings


def test_jobs_cover_every_variant_of_every_benchmark_at_its_first_row() -> None:
    benches = {bench.name: bench for bench in suite.all_benchmarks()}
    work = [(benches["norm"], {"n": 10}), (benches["norm"], {"n": 20}), (benches["relu3"], {"n": 5})]
    jobs = compiles.jobs_of(work)
    assert sorted((name, variant) for name, variant, _ in jobs) == sorted(
        (name, variant) for name in ("norm", "relu3") for variant in ("primal", "post", "pre"))
    assert all(size == ({"n": 10} if name == "norm" else {"n": 5}) for name, _, size in jobs)
    assert [variant for _, variant, _ in jobs][:2] == ["post", "post"]  # the gradients first: they take longest


def test_workers_compile_into_a_private_cache_removed_after() -> None:
    """A spawned worker makes each variant's first call and stores the code in the run's private cache,
    which is empty before, removed after, and the cache variables restored."""
    before = {name: os.environ.get(name) for name in compiles.CACHE_VARIABLES}
    relu3 = next(bench for bench in suite.all_benchmarks() if bench.name == "relu3")
    steps: list[str] = []
    with compiles.private_cache() as directory:
        assert list(Path(directory).iterdir()) == [] and os.environ["ISOZYME_CACHE_DIR"] == directory
        first = compiles.first_calls_in_workers(compiles.jobs_of([(relu3, {"n": 50})]), 1, steps.append)
        compiled = list(Path(directory).glob("*.izc"))
    assert set(first) == {("relu3", variant) for variant in ("primal", "post", "pre")}
    assert all(seconds > 0.0 for seconds in first.values()) and len(steps) == 3
    assert len(compiled) == 3  # the primal and the two gradients
    assert not Path(directory).exists()
    assert {name: os.environ.get(name) for name in compiles.CACHE_VARIABLES} == before


def test_a_variant_that_fails_in_a_worker_is_left_to_the_main_process() -> None:
    assert compiles.first_call(("no such benchmark", "post", {})) is None
