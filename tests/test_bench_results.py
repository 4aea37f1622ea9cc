"""Results as data (issue 60, item 3): the schema every benchmark writes (`isozyme/benchmark_suite/results.py`),
the files kept in benchmarks/results/, and the tables of benchmarks/README.md generated from them
(`benchmarks/tables.py`), which must not drift from the files."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from isozyme.benchmark_checks import Check, checks_json
from isozyme.benchmark_suite import results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

import tables  # noqa: E402  (benchmarks/tables.py)


def passed_check(error: float = 0.0, tolerance: float = 1e-10) -> dict[str, Any]:
    check = Check("a result against its reference", tolerance, "rounding")
    check.record(error)
    return check.as_dict()


def good_document() -> dict[str, Any]:
    rows = [results.row("gmm gradient", "d=10", "isozyme", "natural", 2.0, passed_check(), min_ms=1.5, calls=9),
            results.row("gmm gradient", "d=10", "isozyme by component", "tuned", 1.0, passed_check()),
            results.row("gmm gradient", "d=10", "jax", "peer", 4.0, passed_check(1e-12, 1e-8))]
    return results.document("gmm_cpu", rows, {"n": 1000}, {"note": "extra data"})


# --- (a) the files kept ----------------------------------------------------------------------------------------

def test_the_results_folder_holds_results_files_only() -> None:
    """Only the schema's files, at least one (the pipeline is exercised on real data); plots and logs go."""
    names = sorted(path.name for path in RESULTS.iterdir())
    assert names and all(name.endswith(".json") for name in names), names


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda path: path.name)
def test_every_results_file_follows_the_schema(path: Path) -> None:
    """Valid, stamped, and named `<benchmark>_<machine kind>.json`: the latest run of each pair."""
    document = json.loads(path.read_text(encoding="utf-8"))
    assert results.validate(document) == []
    assert path.name == results.file_name(document["benchmark"], document["machine"]["kind"])
    assert document["commit"] is not None and document["dirty"] is False, "a kept run was made on a clean commit"


# --- (b) the README's tables -----------------------------------------------------------------------------------

def test_the_readme_tables_are_generated_from_the_results() -> None:
    readme = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert tables.render(readme, tables.load(RESULTS)) == readme, \
        "benchmarks/README.md's results tables differ from benchmarks/results/: run python benchmarks/tables.py"


def test_every_results_file_has_its_section() -> None:
    readme = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    for path in RESULTS.glob("*.json"):
        assert f"<!-- results:begin {path.stem} -->" in readme


# --- (c) the validator -----------------------------------------------------------------------------------------

def test_a_document_made_by_the_writer_is_valid() -> None:
    document = good_document()
    assert results.validate(document) == [] and document["passed"] is True
    assert json.loads(json.dumps(document)) == document


BREAKS = [
    ("schema", lambda d: d.update(schema="something else"), "schema: expected"),
    ("a field unknown", lambda d: d.update(host="dev"), "unknown field 'host'"),
    ("the commit", lambda d: d.update(commit="abc"), "commit: 40 hex digits"),
    ("dirty outside a checkout", lambda d: d.update(commit=None, dirty=False), "dirty: null outside a checkout"),
    ("a local date", lambda d: d.update(date="2026-12-01T10:00:00+02:00"), "date: UTC"),
    ("no date", lambda d: d.update(date="yesterday"), "date: ISO 8601"),
    ("the machine's kind", lambda d: d["machine"].update(kind="Xeon 2 cores"), "machine.kind"),
    ("the cores", lambda d: d["machine"].update(cores_used=0), "machine.cores_used: at least 1"),
    ("no rows", lambda d: d.update(rows=[]), "rows: expected a non-empty list"),
    ("a kind", lambda d: d["rows"][0].update(kind="fast"), "rows[0].kind: one of natural, tuned, peer"),
    ("a time", lambda d: d["rows"][0].update(median_ms=-1.0), "rows[0].median_ms: negative"),
    ("a NaN", lambda d: d["rows"][0].update(min_ms=math.nan), "rows[0].min_ms: expected a finite number"),
    ("a row field unknown", lambda d: d["rows"][0].update(speed=3), "rows[0]: unknown field 'speed'"),
    ("a row twice", lambda d: d["rows"].append(copy.deepcopy(d["rows"][0])), "a second row of problem"),
    ("a check without 'passed'", lambda d: d["rows"][1].update(check={"error": 0.0}), "rows[1].check: a check is"),
    ("a pass over the tolerance", lambda d: d["rows"][0]["check"].update(error=1e-3),
     "rows[0].check: passed with error 0.001 over tolerance 1e-10"),
    ("a pass of an unmeasurable error", lambda d: d["rows"][0]["check"].update(error=None), "passed with error None"),
    ("a pass without a call", lambda d: d["rows"][0]["check"].update(calls=0), "passed without a call compared"),
    ("an unchecked row without a reason", lambda d: d["rows"][2].update(check={"passed": None}),
     "rows[2].check.reason: expected str"),
    ("a failed row in a passed run",
     lambda d: d["rows"][1]["check"].update(passed=False, error=1.0), "passed: true, but a row's check failed"),
]


@pytest.mark.parametrize(("what", "breaking", "message"), BREAKS, ids=[b[0] for b in BREAKS])
def test_the_validator_names_what_is_broken(what: str, breaking: Any, message: str) -> None:
    document = good_document()
    breaking(document)
    problems = results.validate(document)
    assert any(message in problem for problem in problems), problems


def test_the_validator_on_checks_of_several_parts() -> None:
    good, bad = Check("a", 1e-10, "r"), Check("b", 1e-10, "r")
    good.record(0.0)
    bad.record(1.0)
    document = good_document()
    document["rows"][0]["check"] = checks_json({"a": good, "b": bad})
    document["passed"] = False
    assert results.validate(document) == []
    document["rows"][0]["check"]["passed"] = True
    assert any("passed, but one of its checks failed" in p for p in results.validate(document))
    assert results.validate([]) == ["a document is a JSON object"]


def test_the_writer_refuses_an_invalid_document_and_writes_json(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rows\\[0\\].kind"):
        results.write(tmp_path / "x.json", "x", [results.row("p", "s", "v", "quick", 1.0, passed_check())])
    assert not (tmp_path / "x.json").exists()
    rows = [results.row("p", "s", "v", "natural", np.float64(1.0), passed_check(),
                        details={"count": np.int64(3), "error": math.inf})]
    made = results.write(tmp_path / "deep" / "x.json", "x", rows, passed=False)
    assert json.loads((tmp_path / "deep" / "x.json").read_text()) == made
    assert made["passed"] is False and made["rows"][0]["details"] == {"count": 3, "error": None}


# --- (d) the stamp ------------------------------------------------------------------------------------------------

def git(directory: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(directory), "-c", "user.name=bench", "-c", "user.email=bench@example.org",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def test_the_stamp_reads_the_commit_and_whether_the_tree_is_dirty(tmp_path: Path) -> None:
    repository = tmp_path / "checkout"
    (repository / "isozyme").mkdir(parents=True)
    git(repository, "init", "-q")
    (repository / "isozyme" / "__init__.py").write_text("")
    git(repository, "add", ".")
    git(repository, "commit", "-q", "-m", "first")
    head = git(repository, "rev-parse", "HEAD")
    assert results.git_state(repository / "isozyme") == (head, False)
    (repository / "benchmarks" / "results").mkdir(parents=True)
    (repository / "benchmarks" / "results" / "run_h200.json").write_text("{}")
    assert results.git_state(repository / "isozyme") == (head, False)  # results written are no change of code
    (repository / "scratch.py").write_text("")
    assert results.git_state(repository / "isozyme") == (head, True)  # untracked counts
    (repository / "scratch.py").unlink()
    (repository / "isozyme" / "__init__.py").write_text("x = 1\n")
    assert results.git_state(repository / "isozyme") == (head, True)
    (repository / "untracked").mkdir()
    assert results.git_state(repository / "untracked") == (None, None)  # files no checkout tracks
    outside = tmp_path / "site"
    outside.mkdir()
    assert results.git_state(outside) == (None, None)
    declared = {"ISOZYME_SOURCE_COMMIT": head, "ISOZYME_SOURCE_DIRTY": "0"}  # a copy sent elsewhere
    assert results.source_state(outside, declared) == (head, False)
    assert results.source_state(outside, {"ISOZYME_SOURCE_COMMIT": "main"}) == (None, None)
    assert results.source_state(repository / "isozyme", {}) == (head, True)  # a checkout says what it is itself
    # ... unless the sender of a copy declares it: the copy may lie over a stale checkout of its own
    assert results.source_state(repository / "isozyme", {**declared, "ISOZYME_SOURCE_COMMIT": "0" * 40}) == \
        ("0" * 40, False)


def test_the_stamp_of_this_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(ROOT / "isozyme" / "__main__.py"), "bench", "--json", "out file.json"])
    monkeypatch.setenv("ISOZYME_MACHINE_KIND", "test-machine")
    stamp = results.stamp("bench_quick")
    commit, _ = results.git_state(results.PACKAGE)
    assert stamp["commit"] == commit and stamp["benchmark"] == "bench_quick"
    if (ROOT / ".git").exists():
        assert stamp["commit"] == git(ROOT, "rev-parse", "HEAD") and isinstance(stamp["dirty"], bool)
    assert stamp["command"] == "python -m isozyme bench --json 'out file.json'"
    assert stamp["date"].endswith("Z") and stamp["machine"]["kind"] == "test-machine"
    assert stamp["machine"]["cores_used"] >= 1 and stamp["machine"]["cpu"]
    assert set(stamp["peers"]) == set(results.PEERS)
    assert results.command_line(["benchmarks/gmm_cpu.py", "--sizes", "10x25"]) == \
        "python benchmarks/gmm_cpu.py --sizes 10x25"


@pytest.mark.parametrize(("cpu", "cores", "gpu", "kind"), [
    ("Intel(R) Xeon(R) Platinum 8480+", 2, None, "xeon-2cores"), ("AMD EPYC 7763 64-Core Processor", 16, None,
                                                                 "epyc-16cores"),
    ("AMD EPYC", 2, "NVIDIA H100 80GB HBM3", "h100"), ("Intel(R) Xeon(R) Processor", 2, "NVIDIA H200", "h200")])
def test_the_machine_kind(cpu: str, cores: int, gpu: str | None, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ISOZYME_MACHINE_KIND", raising=False)
    assert results.machine_kind(cpu, cores, gpu) == kind


# --- the tables ---------------------------------------------------------------------------------------------------

def table_document() -> dict[str, Any]:
    failed = Check("wrong", 1e-10, "r")
    failed.record(1.0)
    row = results.row
    rows = [row("gmm gradient", "d=10", "jax", "peer", 4.0, passed_check()),
            row("gmm gradient", "d=10", "isozyme by component", "tuned", 1.0, passed_check()),
            row("gmm gradient", "d=10", "isozyme", "natural", 2.0, passed_check(), ratios={"pre/post": 1234.5}),
            row("gmm gradient", "d=10", "torch", "peer", 1.6, failed.as_dict()),  # fastest, but wrong
            row("gmm gradient", "d=10", "torch_compile", "peer", 3.0, passed_check()),
            row("gmm gradient", "d=64", "isozyme pairs", "tuned", 5.0, passed_check()),  # no natural row
            row("gmm gradient", "d=64", "jax", "peer", 0.5, passed_check())]
    return results.document("gmm_gpu", rows)


def test_a_table_shows_natural_then_tuned_then_peers_against_the_fastest_peer() -> None:
    text = tables.table(table_document())
    lines = [line for line in text.splitlines() if line.startswith("| gmm")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert [(c[1], c[2]) for c in cells] == [("d=10", "isozyme"), ("d=10", "isozyme by component"), ("d=10", "jax"),
                                             ("d=10", "torch"), ("d=10", "torch_compile"), ("d=64", "jax")]
    against = {(c[1], c[2]): c[5] for c in cells}
    assert against[("d=10", "isozyme")] == "0.67 (torch_compile)"  # torch is faster, and failed its check
    assert against[("d=10", "isozyme by component")] == "0.33 (torch_compile)"
    assert against[("d=10", "torch")] == "-" and against[("d=10", "torch_compile")] == "fastest peer"
    assert against[("d=10", "jax")] == "1.33 (torch_compile)"
    assert cells[0][6] == "pre/post 1234" and cells[3][7] == "MISMATCH" and cells[0][4] == "2 ms"
    assert "1 tuned row(s) left out" in text and "**a check failed (MISMATCH)**" in text
    assert text.splitlines()[0].startswith("**gmm_gpu** on `")


def test_render_rewrites_only_the_sections(tmp_path: Path) -> None:
    document = table_document()
    readme = ("# Benchmarks\n\nprose stays\n\n<!-- results:begin gmm_gpu_h200 -->\nstale\n"
              "<!-- results:end gmm_gpu_h200 -->\n\nmore prose\n\n<!-- results:begin gone_h100 -->\nold\n"
              "<!-- results:end gone_h100 -->\n<!-- results:new -->\n")
    text = tables.render(readme, {"gmm_gpu_h200": document, "new_h200": document})
    assert "stale" not in text and "gone_h100" not in text and text.count("prose") == 2
    assert text.index("results:begin gmm_gpu_h200") < text.index("more prose") < text.index("results:begin new_h200")
    assert text.endswith("<!-- results:end new_h200 -->\n\n<!-- results:new -->\n")
    assert tables.render(text, {"gmm_gpu_h200": document, "new_h200": document}) == text
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "gmm_gpu_h200.json").write_text(json.dumps(document))
    (tmp_path / "README.md").write_text(readme)
    arguments = ["--readme", str(tmp_path / "README.md"), "--results", str(folder)]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tables.py"), "--check", *arguments],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "-stale" in done.stdout and "out of date" in done.stdout
    assert tables.main(arguments) == 0 and tables.main(["--check", *arguments]) == 0
    (folder / "broken_h200.json").write_text(json.dumps({**document, "rows": []}))
    with pytest.raises(SystemExit, match="broken_h200.json: rows: expected a non-empty list"):
        tables.main(arguments)
