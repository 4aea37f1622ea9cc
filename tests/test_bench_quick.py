"""The quick suite that is quick (issue 60): what `--suite quick` keeps of the full one and the timing
settings per suite. Nothing here is timed; what is checked is what the harness does with the times it
gets."""

from __future__ import annotations

from typing import Any

import pytest

from isozyme import benchmark_suite as suite
from isozyme import benchmarking
from isozyme.__main__ import main as isozyme_main
from isozyme.benchmarking import SUITE_MIN_TIME


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


def test_min_time_per_suite(monkeypatch: pytest.MonkeyPatch, bench_environment: None) -> None:
    """--min-time defaults to the suite's (quick runs shorter than full); a given one is passed on."""
    runs: list[dict[str, Any]] = []

    def run_suite(suite_name: str, min_time: float, *args: Any, **kwargs: Any) -> list:
        runs.append({"suite": suite_name, "min_time": min_time})
        return []
    monkeypatch.setattr(benchmarking, "run_suite", run_suite)
    assert SUITE_MIN_TIME["quick"] < SUITE_MIN_TIME["full"]
    for argv in (["bench"], ["bench", "--suite", "full"], ["bench", "--min-time", "0.3"]):
        assert isozyme_main(argv) == 0
    assert runs == [{"suite": "quick", "min_time": SUITE_MIN_TIME["quick"]},
                    {"suite": "full", "min_time": SUITE_MIN_TIME["full"]},
                    {"suite": "quick", "min_time": 0.3}]
