"""benchmarks/peer_formulations.py (issue 60): every alternative formulation of a JAX or PyTorch peer computes
the peer's derivative, and the script checks every call, failing on a wrong one.

Tiny sizes (compilation dominates: about a second per JAX formulation), PyTorch eager only (`torch.compile`
costs 3 to 20 s a unit, tests/test_bench_peers.py checks it); the JAX and PyTorch peers themselves are
checked against isozyme by tests/test_bench_peers.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax", reason="jax: not installed (pip install -e '.[peers]')")
pytest.importorskip("torch", reason="torch: not installed (pip install -e '.[peers]')")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import peer_formulations  # noqa: E402

TINY = {"gmm": {"d": 3, "K": 2, "n": 7}, "ba": {"n": 3, "m": 5, "p": 8}, "ba_sumsq": {"n": 3, "m": 5, "p": 8},
        "lstm": {"l": 2, "c": 6, "b": 4}, "mlp": {"width": 4, "steps": 5, "batch": 3},
        "ode_euler": {"iters": 20, "n": 2}, "ode_rk4": {"iters": 20, "n": 2}, "fft": {"n": 8},
        "brusselator": {"N": 6}}
"""A size per benchmark at which every formulation compiles in about a second."""
OPTIONS = peer_formulations.parse(["--torch-modes", "eager", "--python-loop-limit", "50"])


@pytest.fixture(scope="module")
def torch_device() -> str:
    return peer_formulations.setup("cpu")


def tiny_args(name: str) -> tuple:
    from isozyme.benchmark_suite import peers

    bench = peers.benchmarks()[name]
    if name in ("ba", "ba_sumsq"):
        return bench.make_args(**TINY[name], jitter=0.01)  # observations that differ
    return bench.make_args(**TINY[name])


@pytest.mark.parametrize("name", sorted(TINY))
def test_every_formulation_computes_the_peers_derivative(name: str, torch_device: str) -> None:
    """Each formulation's result equals its library peer's (that of JAX and of PyTorch equal, too)."""
    from isozyme.benchmark_checks import relative_error
    from isozyme.benchmark_suite import peers

    args = tiny_args(name)
    seeds = peers.benchmarks()[name].seeds(args)
    formulations = peer_formulations.formulations_of(name, OPTIONS, torch_device)
    assert {f.library for f in formulations} == {"jax", "torch"}
    assert sum(f.peer is not None for f in formulations) == 2  # JAX's and PyTorch's eager peer
    results = {}
    for formulation in formulations:
        assert peer_formulations.skipped(name, formulation, TINY[name], 50) is None
        call, host = formulation.prepare(args, seeds)
        results[formulation.label] = host(call())
    want = results[next(f.label for f in formulations if f.peer == "jax")]
    for label, result in results.items():
        assert set(result) == set(want), label
        assert relative_error(result, want) <= peers.PEER_TOLERANCE, label


def test_the_python_loops_are_left_out_by_default() -> None:
    python_loop = next(f for f in peer_formulations.formulations_of("ode_euler", peer_formulations.parse([]), "cpu")
                       if f.name == "python loop")
    assert "--python-loop-limit" in peer_formulations.skipped("ode_euler", python_loop, {"iters": 1000, "n": 1}, 0)


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[int, dict]:
    monkeypatch.setattr(peer_formulations, "sizes_of", lambda problem, which: (TINY[problem],))
    output = tmp_path / "report.json"
    status = peer_formulations.main(["--only", name, "--torch-modes", "eager", "--repeats", "3",
                                     "--max-seconds", "1", "--json", str(output)])
    return status, json.loads(output.read_text())


def test_the_script_checks_every_formulation_against_the_peer_and_isozyme(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture) -> None:
    status, report = _run(tmp_path, monkeypatch, "ode_euler")
    assert status == 0, capsys.readouterr().out
    assert report["passed"] is True
    rows = [r for r in report["rows"] if not r["skipped"]]
    assert {r["formulation"] for r in rows} >= {"fori_loop", "scan", "scan unroll=8", "python loop"}
    for r in rows:
        assert r["check"]["passed"] and r["check"]["calls"] >= 2 + 3  # the first two calls and each sample's
        assert r["median_ms"] > 0 and r["samples"] >= 3
        assert (r["isozyme_check"] is not None) == (r["peer"] is not None)
    assert all(r["isozyme_check"]["passed"] for r in rows if r["peer"])


def test_the_script_fails_on_a_wrong_formulation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture) -> None:
    """An alternative whose derivative is off by 1e-4 in its third call (the first sample's) fails its check."""
    import peer_alternatives_torch

    alternative = peer_alternatives_torch.ALTERNATIVES["fft"]["view_as_complex"]
    calls = [0]

    def wrong_unit(data, seed_data):
        calls[0] += 1
        value = alternative.peer.unit(data, seed_data)
        return value + 1e-4 * data.sum() if calls[0] == 3 else value
    wrong = type(alternative)(type(alternative.peer)(**{**alternative.peer.__dict__, "unit": wrong_unit}))
    monkeypatch.setitem(peer_alternatives_torch.ALTERNATIVES["fft"], "view_as_complex", wrong)
    status, report = _run(tmp_path, monkeypatch, "fft")
    assert status == 1
    assert report["passed"] is False
    failed = [r for r in report["rows"] if r["check"] and not r["check"]["passed"]]
    assert [r["formulation"] for r in failed] == ["view_as_complex"]
    assert "MISMATCH" in capsys.readouterr().out
    assert np.isfinite(failed[0]["check"]["error"])
