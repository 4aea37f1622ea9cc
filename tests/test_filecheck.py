"""Runs every lit-style file under tests/filecheck (RUN: lines, see isozyme/testing.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from isozyme.testing import run_lines, run_lit_file

ROOT = Path(__file__).parent / "filecheck"
FILES = sorted(p for p in ROOT.rglob("*") if p.suffix in (".ir", ".py") and run_lines(p))


def test_there_are_filecheck_files() -> None:
    assert len(FILES) >= 5


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_filecheck(path: Path) -> None:
    run_lit_file(path)


def test_a_wrong_check_line_fails(tmp_path: Path) -> None:
    source = (ROOT / "ir" / "mag.ir").read_text().replace("CHECK-NEXT:    %r = sqrt %s", "CHECK-NEXT:    %r = exp %s")
    broken = tmp_path / "broken.ir"
    broken.write_text(source)
    with pytest.raises(AssertionError, match="RUN line failed"):
        run_lit_file(broken)


def test_a_file_without_run_lines_fails(tmp_path: Path) -> None:
    empty = tmp_path / "empty.ir"
    empty.write_text("func @f() {\nbb0:\n  ret\n}\n")
    with pytest.raises(AssertionError, match="no RUN: line"):
        run_lit_file(empty)


def test_not_expects_failure(tmp_path: Path) -> None:
    valid = tmp_path / "valid.ir"
    valid.write_text("; RUN: not isozyme opt %s\nfunc @f() {\nbb0:\n  ret\n}\n")
    with pytest.raises(AssertionError, match="RUN line failed"):
        run_lit_file(valid)
