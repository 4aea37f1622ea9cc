"""Testing helpers: lit-style RUN lines for IR files checked with FileCheck.

A checked file holds one or more `RUN:` lines in comments, LLVM lit's convention:

    ; RUN: isozyme opt %s -p dce | filecheck %s
    ; CHECK-LABEL: func @f
    ; CHECK-NOT: fmul

`run_lit_file(path)` runs each RUN line with bash (`pipefail` on), after substituting `%s` with the
file's path, `%S` with its directory, `isozyme` with this interpreter's `python -m isozyme` and `filecheck` with
`python -m filecheck`, and raises `AssertionError` with the command and its output if one fails. A RUN
line that starts with `not` expects the command before the first `|` to fail (exit status non-zero).

`assert_ir(kernel_or_text, checks, stage="opt")` runs FileCheck on a kernel's IR at a stage of `iz.show_ir`
(or on IR text) with the CHECK lines of `checks`. `gradcheck(kernel, *args, ...)` compares reverse mode,
forward mode and central finite differences (its docstring says how); it lives in `isozyme/gradcheck.py`
and is re-exported here. Both raise AssertionError, so they read as assertions in tests.

`with check_races(): ...` runs the kernels and derivatives compiled for `interp` inside the block through
the race detector (`runtime/race_detector.py`): each parallel loop as shuffled work items, a `DataRace`
when two iterations touch one element and one of them writes it.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from isozyme.gradcheck import GradcheckError, GradcheckResult, gradcheck
from isozyme.runtime.inspection import show_ir
from isozyme.runtime.kernel import Kernel
from isozyme.runtime.race_detector import DataRace, check_races

__all__ = ["DataRace", "GradcheckError", "GradcheckResult", "assert_ir", "check_races", "gradcheck", "run_lines",
           "run_lit_file"]

_RUN_LINE = re.compile(r"(?:;|#)\s*RUN:\s*(.*)$")
_TOOLS = {"isozyme": "-m isozyme", "filecheck": "-m filecheck"}


def run_lines(path: Path) -> list[str]:
    """The RUN commands of a file, in order."""
    commands = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _RUN_LINE.search(line)
        if match:
            commands.append(match.group(1).strip())
    return commands


def _substitute(command: str, path: Path) -> str:
    python = shlex.quote(sys.executable)
    stages = []
    for stage in command.split("|"):
        words = stage.strip().split(" ", 1)
        negate = words[0] == "not"
        if negate:
            words = words[1].split(" ", 1)
        if words[0] in _TOOLS:
            words[0] = f"{python} {_TOOLS[words[0]]}"
        text = " ".join(words).replace("%S", shlex.quote(str(path.parent))).replace("%s", shlex.quote(str(path)))
        stages.append(f"( ! {text} )" if negate else text)  # a bare `!` would negate the whole pipeline
    return " | ".join(stages)


def run_lit_file(path: str | Path) -> None:
    """Run every RUN line of `path`; AssertionError with the output when one fails."""
    path = Path(path)
    commands = run_lines(path)
    if not commands:
        raise AssertionError(f"{path} has no RUN: line")
    for command in commands:
        shell = _substitute(command, path)
        result = subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True)
        if result.returncode != 0:
            raise AssertionError(f"RUN line failed ({result.returncode}): {command}\n$ {shell}\n"
                                 f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}")


def assert_ir(kernel_or_text: Kernel | str, checks: str, stage: str = "opt", opt: str | None = None,
              activity: Sequence[str] | None = None) -> str:
    """FileCheck `checks` (CHECK lines, one per line, with or without a leading `;`) against the IR of a
    kernel at `stage` (`iz.show_ir`'s stages, `opt` and `activity` as it takes them) or against IR text;
    AssertionError with FileCheck's message and the IR when they do not match. Returns the IR checked."""
    text = kernel_or_text if isinstance(kernel_or_text, str) else show_ir(kernel_or_text, stage, opt=opt,
                                                                          activity=activity)
    if not any("CHECK" in line for line in checks.splitlines()):
        raise ValueError("assert_ir needs at least one CHECK line")
    with tempfile.TemporaryDirectory(prefix="isozyme-filecheck-") as directory:
        check_file = Path(directory) / "checks.txt"
        check_file.write_text(checks, encoding="utf-8")
        result = subprocess.run([sys.executable, "-m", "filecheck", str(check_file)], input=text,
                                capture_output=True, text=True)
    if result.returncode != 0:
        what = "IR text" if isinstance(kernel_or_text, str) else f"stage {stage} of {kernel_or_text!r}"
        raise AssertionError(f"FileCheck failed on the {what}:\n{result.stderr}{result.stdout}\n"
                             f"--- the IR ---\n{text}")
    return text
