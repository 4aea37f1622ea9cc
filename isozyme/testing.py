"""Testing helpers: lit-style RUN lines for IR files checked with FileCheck.

A checked file holds one or more `RUN:` lines in comments, LLVM lit's convention:

    ; RUN: isozyme opt %s -p dce | filecheck %s
    ; CHECK-LABEL: func @f
    ; CHECK-NOT: fmul

`run_lit_file(path)` runs each RUN line with bash (`pipefail` on), after substituting `%s` with the
file's path, `%S` with its directory, `isozyme` with this interpreter's `python -m isozyme` and `filecheck` with
`python -m filecheck`, and raises `AssertionError` with the command and its output if one fails. A RUN
line that starts with `not` expects the command before the first `|` to fail (exit status non-zero).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

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
