"""The command line: `isozyme opt` and `isozyme run`, in-process through `main` and once as a subprocess."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from isozyme.__main__ import main

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_opt_prints_mag_back_unchanged(capsys) -> None:
    status, out, _ = run_cli(capsys, "opt", str(EXAMPLES / "mag.ir"))
    assert status == 0 and out == (EXAMPLES / "mag.ir").read_text()


def test_run_mag_matches_python(capsys) -> None:
    xs = [0.5, -2.25, 3.0, 7.125]
    status, out, _ = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", repr(xs), str(len(xs)))
    assert status == 0 and float(out) == math.sqrt(sum(x * x for x in xs))


def test_run_prints_changed_arrays(capsys) -> None:
    xs = [3.0, 4.0, 12.0]
    status, out, _ = run_cli(capsys, "run", str(EXAMPLES / "norm.ir"), "@norm", "[0, 0, 0]", repr(xs), "3")
    norm = math.sqrt(sum(x * x for x in xs))
    assert status == 0 and out == f"%out = {[x / norm for x in xs]!r}\n"


def test_run_reports_a_bounds_error_with_the_ir_line(capsys) -> None:
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[1.0]", "2")
    assert status == 1
    assert "IndexError" in err and "mag.ir:10" in err and "(1,)" in err


def test_run_checks_its_arguments(capsys) -> None:
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[1.0]")
    assert status == 1 and "@mag takes 2 argument(s), got 1" in err
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[[1.0]]", "1")
    assert status == 1 and "expected a 1-d array, got 2-d" in err
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@nope")
    assert status == 1 and "no function @nope" in err


def test_run_refuses_arguments_of_the_wrong_kind(capsys) -> None:
    """2.7 for an i64 parameter is an error, never silently truncated to 2."""
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[3.0, 4.0]", "2.7")
    assert status == 1 and "argument %n: expected an integer for i64, got 2.7" in err
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[3.0, 4.5]", "true")
    assert status == 1 and "argument %n: expected an integer for i64, got true" in err
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[3.0, 4.5]", "[2]")
    assert status == 1 and "argument %n: expected a scalar i64, got a list" in err


def test_run_step_limit(capsys, tmp_path: Path) -> None:
    spin = tmp_path / "spin.ir"
    spin.write_text("func @spin() {\nbb0:\n  br bb1\nbb1:\n  br bb1\n}\n")
    status, _, err = run_cli(capsys, "run", str(spin), "@spin", "--step-limit", "1000")
    assert status == 1 and "StepLimitExceeded" in err


def test_opt_rejects_unknown_pass_and_bad_files(capsys, tmp_path: Path) -> None:
    status, _, err = run_cli(capsys, "opt", str(EXAMPLES / "mag.ir"), "-p", "frobnicate")
    assert status == 1 and "unknown pass 'frobnicate'" in err
    broken = tmp_path / "broken.ir"
    broken.write_text("func @f() {\nbb0:\n  ret %x\n}\n")
    status, _, err = run_cli(capsys, "opt", str(broken))
    assert status == 1 and f"{broken}:3:7: error: use of undefined value %x" in err and "^" in err
    status, _, err = run_cli(capsys, "opt", str(tmp_path / "missing.ir"))
    assert status == 1 and "No such file" in err


def test_module_entry_point_runs_as_a_subprocess() -> None:
    result = subprocess.run([sys.executable, "-m", "isozyme", "run", str(EXAMPLES / "mag.ir"), "@mag",
                             "[3.0, 4.0]", "2"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "5.0\n"
