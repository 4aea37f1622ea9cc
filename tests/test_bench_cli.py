"""The harness of `python -m isozyme bench` (isozyme/benchmarking.py): timing in turns, the table, the JSON
and the SVG plot, and the command end to end on the smallest benchmark. Times are not checked (tests do not
time things); what is checked is what the harness computes from them.

And the checks (isozyme/benchmark_checks.py, issue 22): the error measure, every call of every variant
compared with its reference, and a wrong gradient (in one call of many) marked MISMATCH in the table, left
out of the summary, written to the JSON with "passed": false, and the command's exit status 1."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import xml.dom.minidom
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from isozyme.__main__ import main as isozyme_main
from isozyme.benchmark_checks import MISMATCH, Check, checks_json, exit_status, relative_error
from isozyme.benchmark_suite.results import validate
from isozyme.benchmarking import (
    References,
    Row,
    Timing,
    checked_peer,
    format_table,
    geometric_mean,
    interleaved,
    paired_ratio,
    plot_svg,
    summary,
    to_json,
)


def test_interleaved_prepares_outside_and_runs_every_variant_enough() -> None:
    calls = {"a": 0, "b": 0}
    prepared = {"a": 0, "b": 0}

    def variant(name: str):
        def prepare():
            prepared[name] += 1
            return lambda: calls.__setitem__(name, calls[name] + 1)
        return prepare
    timings = interleaved({"a": variant("a"), "b": variant("b")}, min_time=0.0, min_calls=5)
    assert calls == {"a": 6, "b": 6} == prepared  # one warm-up call, then 5 timed, each freshly prepared
    assert all(t.calls == 5 and t.min <= t.median for t in timings.values())


def test_interleaved_checks_every_call_after_every_first_call() -> None:
    """Each call's result goes to its check; the first calls' once all variants have made theirs (a
    reference may compile what a variant's first call must time)."""
    events: list[str] = []
    counter = {"a": 0, "b": 0}

    def variant(name: str):
        def prepare():
            def call() -> str:
                counter[name] += 1
                events.append(f"call {name}")
                return f"{name}{counter[name]}"
            return call
        return prepare
    interleaved({"a": variant("a"), "b": variant("b")}, min_time=0.0, min_calls=3,
                checks={"a": lambda value: events.append(f"check {value}"),
                        "b": lambda value: events.append(f"check {value}")})
    assert events[:4] == ["call a", "call b", "check a1", "check b1"]
    rounds = [("a", "b"), ("b", "a"), ("a", "b")]  # the order alternates between rounds
    assert events[4:] == [event for k, order in zip((2, 3, 4), rounds) for name in order
                          for event in (f"call {name}", f"check {name}{k}")]


def test_pre_over_post_is_the_median_of_each_rounds_ratio() -> None:
    """A machine that slows down 10x halfway: each round's pre call takes 1.05x its post call, so pre/post
    is 1.05, while the medians of the two (the slow half of pre against the fast half of post, or the
    other way round) can say anything."""
    post = Timing(0.0, 0.0, 6, 0.0, (1.0, 1.0, 1.0, 10.0, 10.0, 10.0))
    pre = Timing(0.0, 0.0, 6, 0.0, (1.05, 1.05, 10.5, 10.5, 10.5, 10.5))
    assert paired_ratio(pre, post) == pytest.approx(1.05)
    assert paired_ratio(Timing(2.0, 2.0, 3, 0.0), Timing(1.0, 1.0, 3, 0.0)) == 2.0  # no samples: medians


def test_relative_error_is_max_norm_relative() -> None:
    expected = np.array([100.0, 1.0, 0.0])
    assert relative_error(expected.copy(), expected) == 0.0
    assert relative_error(np.array([100.0, 1.5, 0.5]), expected) == pytest.approx(0.005)  # scale: 100
    assert relative_error(2.0, 1.0) == 1.0 and relative_error([1.0, 2.0], np.array([1.0, 2.0])) == 0.0
    assert relative_error({"a": expected, 0: 2.0}, {"a": expected, 0: 1.0}) == 1.0  # the worst key
    assert relative_error((expected, [1.1]), (expected, [1.0])) == pytest.approx(0.1)
    for wrong in (np.array([100.0, np.nan, 0.0]), np.ones(2), None, {"a": expected}):
        assert relative_error(wrong, expected) == math.inf
    assert relative_error({"a": expected}, {"a": expected, "b": 1.0}) == math.inf  # a key missing
    assert relative_error(np.zeros(3), np.zeros(3)) == 0.0 and relative_error(np.ones(3), np.zeros(3)) == math.inf
    assert relative_error(np.empty(0), np.empty(0)) == 0.0


def test_check_keeps_the_worst_call_and_exit_status_fails_on_it() -> None:
    check = Check("x against numpy", 1e-10, "rounding")
    assert not check.passed  # nothing compared yet
    check.compare(np.ones(4), np.ones(4))
    assert check.passed and check.mark == "ok"
    check.compare(np.array([1.0, 1.0, 1.0, 1.5]), np.ones(4))  # one wrong call among right ones
    check.compare(np.ones(4), np.ones(4))
    assert (check.error, check.calls, check.passed, check.mark) == (0.5, 3, False, MISMATCH)
    assert check.as_dict() == {"passed": False, "error": 0.5, "tolerance": 1e-10, "calls": 3,
                               "what": "x against numpy", "reason": "rounding"}
    assert str(check).startswith("MISMATCH: x against numpy: relative error 5.0e-01 over 3 call(s)")
    check.compare(np.array([np.nan] * 4), np.ones(4))
    assert check.as_dict()["error"] is None  # infinite: written as null, never as a number JSON lacks
    fine = Check("y", 0.0, "exact")
    fine.compare(3.0, 3.0)
    assert checks_json({"x": check, "y": fine})["passed"] is False and checks_json({"y": fine})["passed"] is True
    stream = io.StringIO()
    assert exit_status([fine], "bench", stream) == 0 and stream.getvalue() == ""
    assert exit_status([fine, check], "bench", stream) == 1
    assert "bench: MISMATCH: x against numpy" in stream.getvalue() and "exit status 1" in stream.getvalue()


def _row(name: str, scale: float, primal: float, post: float, pre: float, passed: bool = True) -> Row:
    timing = {k: Timing(v, v, 3, 0.5) for k, v in {"primal": primal, "post": post, "pre": pre}.items()}
    checks = {variant: Check(f"{name} {variant}", 1e-10, "rounding") for variant in ("primal", "post", "pre")}
    for variant, check in checks.items():
        check.compare(2.0 if variant == "post" and not passed else 1.0, 1.0)
    return Row(name, f"n={scale:g}", scale, timing, checks=checks)


def test_table_summary_and_plot(tmp_path: Path) -> None:
    rows = [_row("norm", 1000, 1e-6, 2e-6, 2e-4), _row("gmm", 10, 1e-3, 4e-3, 8e-3),
            _row("gmm", 100, 1e-2, 3e-2, 3e-2)]
    assert rows[0].speedup == pytest.approx(100.0) and rows[1].ratio == pytest.approx(4.0)
    table = format_table(rows)
    assert "100.00x" in table and "2.00x" in table and "1.00x" in table and MISMATCH not in table
    assert summary(rows).startswith(f"geometric mean of pre/post over 2 rows (norm's sweep apart): "
                                    f"{geometric_mean([2.0, 1.0]):.2f}x")
    plot_svg(rows, str(tmp_path / "plot.svg"))
    document = xml.dom.minidom.parse(str(tmp_path / "plot.svg"))
    assert len(document.getElementsByTagName("polyline")) == 4  # two panels, two benchmarks


def test_a_failed_row_is_marked_and_never_a_success(tmp_path: Path) -> None:
    rows = [_row("norm", 1000, 1e-6, 2e-6, 2e-4), _row("gmm", 10, 1e-3, 4e-3, 8e-3),
            _row("mlp", 100, 1e-2, 3e-2, 3e-2, passed=False)]
    lines = format_table(rows).splitlines()
    assert lines[-1].startswith("mlp") and lines[-1].endswith(f"{MISMATCH} post")
    assert all(line.endswith("ok") for line in lines[2:-1])
    text = summary(rows)
    assert text.startswith("geometric mean of pre/post over 1 rows") and f"{MISMATCH}: 1 row(s) left out" in text
    data = to_json(rows, "quick", "llvm")
    assert data["passed"] is False and data["benchmark"] == "bench_quick" and validate(data) == []
    failed = [(row["problem"], row["variant"]) for row in data["rows"] if not row["check"]["passed"]]
    assert failed == [("mlp gradient", "isozyme post")] and len(data["rows"]) == 9
    post = next(row for row in data["rows"] if row["problem"] == "mlp gradient" and row["variant"] == "isozyme post")
    assert post["check"] == {"passed": False, "error": 1.0, "tolerance": 1e-10, "calls": 1, "what": "mlp post",
                             "reason": "rounding"}
    assert post["ratios"] == {"pre/post": 1.0, "gradient/primal": 3.0} and post["median_ms"] == 30.0
    assert plot_svg(rows, str(tmp_path / "plot.svg"))
    document = xml.dom.minidom.parse(str(tmp_path / "plot.svg"))
    assert len(document.getElementsByTagName("polyline")) == 4  # the failed row's benchmark is not drawn
    assert not plot_svg(rows[2:], str(tmp_path / "none.svg")) and not (tmp_path / "none.svg").exists()


def test_bench_command_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, "-m", "isozyme", "bench", "--only", "norm", "--min-time", "0.01",
                             "--json", str(out), "--plot", str(tmp_path / "bench.svg")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)  # any directory
    assert result.returncode == 0, result.stderr
    assert "pre/post" in result.stdout and "geometric mean" not in result.stdout.split("\n")[0]
    data = json.loads(out.read_text())
    assert validate(data) == [] and data["benchmark"] == "bench_quick" and data["passed"] is True
    assert data["parameters"]["suite"] == "quick" and data["parameters"]["backend"] == "llvm"
    assert data["command"].startswith("python -m isozyme bench --only norm")
    assert [(row["problem"], row["variant"]) for row in data["rows"][:3]] == [
        ("norm primal", "isozyme"), ("norm gradient", "isozyme post"), ("norm gradient", "isozyme pre")]
    assert len(data["rows"]) == 9 and {row["kind"] for row in data["rows"]} == {"natural"}
    first = data["rows"][:3]  # compiled in the worker processes (benchmark_compiles.py), timed here
    assert all(row["compile_ms"] > 0.0 for row in first)
    for row in data["rows"]:
        assert row["calls"] >= 3 and row["min_ms"] <= row["median_ms"] and row["check"]["passed"] is True
        check = row["check"]  # every call checked: the first and every timed one
        assert check["calls"] == row["calls"] + 1 and check["error"] <= check["tolerance"] == 1e-10
    assert data["rows"][1]["ratios"]["pre/post"] > 0.0


@pytest.fixture
def bench_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command in this process; the variables it sets are restored after."""
    monkeypatch.setenv("ISOZYME_CACHE", "off")
    monkeypatch.setenv("ISOZYME_BACKEND", "llvm")


def test_bench_command_fails_on_a_wrong_gradient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture, bench_environment: None) -> None:
    """The opt="post" gradient of norm wrong in its fifth call only: the row is marked, the JSON says it
    failed, the command exits 1 after writing everything; the pre gradient and the primal pass."""
    from isozyme import benchmark_suite as suite

    prepare_gradient, calls = suite.prepare_gradient, [0]

    def wrong_post(bench: Any, args: tuple, opt: str = "post", backend: str | None = None) -> Any:
        call, finish = prepare_gradient(bench, args, opt, backend)
        if opt != "post":
            return call, finish

        def perturbed(returned: object) -> Any:
            calls[0] += 1
            gradient = finish(returned)
            if calls[0] == 5:
                gradient.shadows[1][0] += 1e-6 * np.max(np.abs(gradient.shadows[1]))
            return gradient
        return call, perturbed
    monkeypatch.setattr(suite, "prepare_gradient", wrong_post)
    out = tmp_path / "bench.json"
    status = isozyme_main(["bench", "--only", "norm", "--min-time", "0.001", "--json", str(out),
                           "--plot", str(tmp_path / "bench.svg")])
    captured = capsys.readouterr()
    assert status == 1
    table_rows = [["norm", f"n={n}"] for n in (1000, 2000, 4000)]
    rows = [line for line in captured.out.splitlines() if line.split()[:2] in table_rows]
    assert len(rows) == 3
    assert rows[0].endswith(f"{MISMATCH} post") and all(row.endswith("ok") for row in rows[1:])
    assert "MISMATCH: norm gradient (opt=post) against opt=pre on llvm" in captured.err
    data = json.loads(out.read_text())
    assert data["passed"] is False and validate(data) == []
    failed = [(row["size"], row["variant"]) for row in data["rows"] if not row["check"]["passed"]]
    assert failed == [("n=1000", "isozyme post")] and data["rows"][1]["check"]["error"] > 1e-10


def test_references_are_computed_once_at_first_use(bench_environment: None) -> None:
    """The reference gradient is opt="pre" on llvm, computed when a check first needs it (after the first
    calls: it may compile) and once per row."""
    from isozyme import benchmark_suite as suite

    bench = next(b for b in suite.all_benchmarks() if b.name == "relu3")
    args = bench.make_args(n=50)
    references = References(bench, args, suite)
    assert "gradient" not in vars(references)
    gradient = references.gradient
    assert references.gradient is gradient and set(gradient) == {"value", 0}
    np.testing.assert_allclose(gradient[0], np.where(args[0] > 0, 3.0 * args[0] ** 2, 0.0), rtol=1e-14)
    assert set(references.derivative) == {0} and references.primal["value"] == pytest.approx(gradient["value"])


def test_peers_are_checked_against_the_references() -> None:
    """A gradient peer against the reference gradient (at the peers' tolerance), numba against the numpy
    reference (at the primal's); `peers.result` (here a stand-in) makes a call's result comparable."""
    peers = SimpleNamespace(GRADIENT_PEERS=("jax",), PEER_TOLERANCE=1e-8, PEER_REASON="written differently",
                            result=lambda name, peer, args, value: value)
    references = SimpleNamespace(derivative={0: np.ones(3)}, primal={"value": 2.0})
    bench = SimpleNamespace(name="relu3", primal_tolerance=1e-10)
    jax = checked_peer(bench, (), "jax", lambda: lambda: None, peers, references)
    jax.compare({0: np.ones(3)})
    assert jax.check.passed and jax.check.tolerance == 1e-8
    jax.compare({0: np.array([1.0, 1.0, 1.1])})
    assert (jax.check.passed, jax.check.calls) == (False, 2)
    numba = checked_peer(bench, (), "numba", lambda: lambda: None, peers, references)
    numba.compare({"value": 2.0})
    assert numba.check.passed and numba.check.tolerance == 1e-10
    numba.compare({"value": 2.0 + 1e-9})
    assert not numba.check.passed


def test_bench_command_refuses_an_unknown_benchmark(capsys: pytest.CaptureFixture, bench_environment: None) -> None:
    assert isozyme_main(["bench", "--only", "norm,nrom"]) == 2
    err = capsys.readouterr().err
    assert "--only: no benchmark nrom (known: norm, relu3, gmm" in err
