"""The harness of `python -m isozyme bench` (isozyme/benchmarking.py): timing in turns, the table, the JSON
and the SVG plot, and the command end to end on the smallest benchmark. Times are not checked (tests do not
time things); what is checked is what the harness computes from them."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.dom.minidom
from pathlib import Path

import pytest

from isozyme.benchmarking import Row, Timing, format_table, geometric_mean, interleaved, plot_svg, summary

ROOT = Path(__file__).resolve().parent.parent


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


def _row(name: str, scale: float, primal: float, post: float, pre: float) -> Row:
    timing = {k: Timing(v, v, 3, 0.5) for k, v in {"primal": primal, "post": post, "pre": pre}.items()}
    return Row(name, f"n={scale:g}", scale, timing)


def test_table_summary_and_plot(tmp_path: Path) -> None:
    rows = [_row("norm", 1000, 1e-6, 2e-6, 2e-4), _row("gmm", 10, 1e-3, 4e-3, 8e-3),
            _row("gmm", 100, 1e-2, 3e-2, 3e-2)]
    assert rows[0].speedup == pytest.approx(100.0) and rows[1].ratio == pytest.approx(4.0)
    table = format_table(rows)
    assert "100.00x" in table and "2.00x" in table and "1.00x" in table
    assert summary(rows).startswith(f"geometric mean of pre/post over 2 rows (norm's sweep apart): "
                                    f"{geometric_mean([2.0, 1.0]):.2f}x")
    plot_svg(rows, str(tmp_path / "plot.svg"))
    document = xml.dom.minidom.parse(str(tmp_path / "plot.svg"))
    assert len(document.getElementsByTagName("polyline")) == 4  # two panels, two benchmarks


def test_bench_command_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, "-m", "isozyme", "bench", "--only", "norm", "--min-time", "0.01",
                             "--json", str(out), "--plot", str(tmp_path / "bench.svg")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "pre/post" in result.stdout and "geometric mean" not in result.stdout.split("\n")[0]
    data = json.loads(out.read_text())
    assert data["suite"] == "quick" and data["backend"] == "llvm" and data["rows"]
    for row in data["rows"]:
        timings = row["timings"]
        assert row["speedup"] == pytest.approx(timings["pre"]["median"] / timings["post"]["median"])
        assert all(timings[k]["calls"] >= 3 for k in ("primal", "post", "pre"))
