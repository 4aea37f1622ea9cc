"""The results tables of benchmarks/README.md, generated from benchmarks/results/ (issue 60, item 3).

    python benchmarks/tables.py            # rewrite the README's results sections
    python benchmarks/tables.py --check    # exit 1, printing the difference, when the README is out of date

Each results file `benchmarks/results/NAME.json` (the schema of `isozyme/benchmark_suite/results.py`) has a
section of the README between `<!-- results:begin NAME -->` and `<!-- results:end NAME -->`, and only the
text between those markers is written. A section is the run's stamp (benchmark, machine, commit, date,
command) and a table of its rows: per problem and size, in the file's order, the natural rows, the tuned
rows beside them (a tuned row of a problem and size that has no natural row is left out, and counted under
the table), then the peers; every row's time over that of the fastest peer of the same problem and size
(its check passed), both from the same file, never across runs. A results file without a section gets one
before `<!-- results:new -->` (else at the end); a section whose file is gone is removed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from isozyme.benchmark_suite.results import validate  # noqa: E402

README = ROOT / "benchmarks" / "README.md"
RESULTS = ROOT / "benchmarks" / "results"
SECTION = re.compile(r"<!-- results:begin (?P<name>[^ ]+) -->\n.*?<!-- results:end (?P=name) -->\n?", re.DOTALL)
NEW = "<!-- results:new -->"
ORDER = {"natural": 0, "tuned": 1, "peer": 2}


def duration(ms: float | None) -> str:
    """Milliseconds in the unit that suits them, four significant digits."""
    if ms is None:
        return "failed"
    for unit, scale in (("s", 1e3), ("ms", 1.0), ("us", 1e-3)):
        if ms >= scale or unit == "us":
            return f"{ms / scale:.4g} {unit}"
    raise AssertionError


def number(value: float) -> str:
    """Three significant digits, without an exponent below 10^6."""
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def mark(check: Mapping[str, Any]) -> str:
    return {True: "ok", False: "MISMATCH", None: "unchecked"}[check["passed"]]


def stamp(document: Mapping[str, Any]) -> str:
    """The run in one paragraph: what, where, which code, when, the command, the versions, the verdict."""
    machine = document["machine"]
    where = f"{machine['cpu']}, {machine['cores_used']} of {machine['cores_total']} cores"
    if machine["load_average"] is not None:
        where += f", load {machine['load_average']:.1f} at the start"
    if machine["gpu"]:
        where += f", {machine['gpu']} (driver {machine['gpu_driver']})"
    elif machine["opencl_device"]:
        where += f", OpenCL on {machine['opencl_device']}"
    commit = "no commit (not run from a checkout)" if document["commit"] is None else \
        f"commit `{document['commit'][:12]}`" + {True: " (uncommitted changes)", False: "", None: ""}[document["dirty"]]
    environment = "".join(f"{name}={shlex.quote(value)} " for name, value in document["environment"].items())
    peers = ", ".join(f"{name} {version}" for name, version in document["peers"].items() if version)
    verdict = "every check passed" if document["passed"] else "**a check failed (MISMATCH)**"
    return (f"**{document['benchmark']}** on `{machine['kind']}` ({where}), {commit}, {document['date']}: "
            f"`{environment}{document['command']}`; isozyme {document['isozyme_version']}, Python "
            f"{document['python']}{', ' + peers if peers else ''}; {verdict}.")


def groups(rows: Sequence[Mapping[str, Any]]) -> tuple[list[list[Mapping[str, Any]]], int]:
    """The rows by problem and size, in the order of the file, each group ordered natural, tuned, peer; the
    tuned rows of a group without a natural row are left out and counted."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        grouped.setdefault((row["problem"], row["size"]), []).append(row)
    shown, hidden = [], 0
    for group in grouped.values():
        natural = any(row["kind"] == "natural" for row in group)
        hidden += 0 if natural else sum(row["kind"] == "tuned" for row in group)
        shown.append(sorted((row for row in group if natural or row["kind"] != "tuned"),
                            key=lambda row: ORDER[row["kind"]]))  # stable: the file's order within a kind
    return shown, hidden


def against_peer(row: Mapping[str, Any], group: Sequence[Mapping[str, Any]]) -> str:
    """The row's time over the fastest peer's of its group whose check passed ("" without one)."""
    peers = [r for r in group if r["kind"] == "peer" and r["check"]["passed"] and r["median_ms"]]
    if not peers or row["median_ms"] is None or row["check"]["passed"] is False:
        return "" if not peers else "-"
    fastest = min(peers, key=lambda r: r["median_ms"])
    if row is fastest:
        return "fastest peer"
    return f"{row['median_ms'] / fastest['median_ms']:.2f} ({fastest['variant']})"


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(document: Mapping[str, Any]) -> str:
    """The section's text (module docstring)."""
    shown, hidden = groups(document["rows"])
    header = ["problem", "size", "variant", "kind", "median", "time / fastest peer's", "ratios", "check"]
    lines = []
    for group in shown:
        for row in group:
            ratios = ", ".join(f"{name} {number(value)}" for name, value in row.get("ratios", {}).items()
                               if value is not None)
            lines.append([row["problem"], row["size"], row["variant"], row["kind"], duration(row["median_ms"]),
                          against_peer(row, group), ratios, mark(row["check"])])
    keep = [i for i in range(len(header)) if i not in (5, 6) or any(line[i] for line in lines)]
    text = [stamp(document), "", "| " + " | ".join(header[i] for i in keep) + " |",
            "|" + "---|" * len(keep)]
    text += ["| " + " | ".join(cell(line[i]) for i in keep) + " |" for line in lines]
    if hidden:
        text += ["", f"{hidden} tuned row(s) left out: no natural row of their problem and size in this run."]
    return "\n".join(text) + "\n"


def block(name: str, document: Mapping[str, Any]) -> str:
    return f"<!-- results:begin {name} -->\n{table(document)}<!-- results:end {name} -->\n"


def render(readme: str, documents: Mapping[str, Mapping[str, Any]]) -> str:
    """`readme` with every results section written from `documents` (by file stem), sections of missing files
    removed, and sections for files that had none added (module docstring)."""
    present: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        present.add(name)
        return block(name, documents[name]) if name in documents else ""
    text = SECTION.sub(replace, readme)
    added = "".join(block(name, documents[name]) + "\n" for name in documents if name not in present)
    if added and NEW in text:
        return text.replace(NEW, added + NEW, 1)
    return text + ("\n" + added if added else "")


def load(folder: Path) -> dict[str, dict[str, Any]]:
    """Every results file of `folder` by its stem, in name order; SystemExit naming what does not validate."""
    documents, problems = {}, []
    for path in sorted(folder.glob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        problems += [f"{path.name}: {problem}" for problem in validate(document)]
        documents[path.stem] = document
    if problems:
        raise SystemExit("results files that do not follow the schema:\n  " + "\n  ".join(problems))
    return documents


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1, printing the diff, if the README is stale")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--results", type=Path, default=RESULTS)
    options = parser.parse_args(argv)
    current = options.readme.read_text(encoding="utf-8")
    wanted = render(current, load(options.results))
    if options.check:
        if wanted == current:
            return 0
        sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), wanted.splitlines(True),
                                                   str(options.readme), "generated from the results"))
        print(f"\n{options.readme} is out of date: run python benchmarks/tables.py")
        return 1
    if wanted != current:
        options.readme.write_text(wanted, encoding="utf-8")
        print(f"wrote the results tables of {options.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
