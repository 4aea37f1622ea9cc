"""The pytest plugin (entry point `pytest11`, name `isozyme`): when a test fails, its report gets a section
"isozyme IR (<stages>)" with the IR of every kernel and derivative the test used, at the stages of
`--isozyme-ir` (default `opt,grad-opt`; any stage `iz.show_ir` takes: `ssa opt grad grad-opt fwd fwd-opt llvm
llvm-opt opencl`). `--isozyme-ir-all` adds the section to passing tests too, and prints it in the terminal
summary. `-p no:isozyme` turns the plugin off (and spares a pytest run that does not test kernels the import
of isozyme, about half a second).

What a test used is what `runtime/compile_log.py` recorded from the test's setup to its teardown: kernels
compiled or called (also those compiled and cached by earlier tests), and derivatives looked up by
`iz.autodiff`, `iz.grad`, `iz.fwddiff`, `iz.hvp`. Each stage applies where it means something: `ssa`, `opt`,
`llvm`, `llvm-opt` and `opencl` to every kernel used (with its pipeline: `O2` unless `kernel.compile(opt=...)`
said otherwise), `grad`/`grad-opt` to reverse-mode derivatives (and the gradient inside a Hessian-vector
product) with their activity and `opt`, `fwd`/`fwd-opt` to forward-mode ones. The IR is made again when the
report is written (`iz.show_ir`), only for tests that show it; an error doing so is printed in its place.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable

import pytest

from isozyme.runtime import compile_log
from isozyme.runtime.compile_log import CompileRecord
from isozyme.runtime.inspection import STAGES, show_ir

DEFAULT_STAGES = ("opt", "grad-opt")
STAGE_MODES = {"grad": ("reverse", "hvp"), "grad-opt": ("reverse", "hvp"), "fwd": ("forward",), "fwd-opt": ("forward",)}
"""The derivative stages and the records they apply to."""
_PASSED_SECTIONS = pytest.StashKey[list[tuple[str, str, str]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("isozyme", "isozyme kernels")
    group.addoption("--isozyme-ir", default=",".join(DEFAULT_STAGES), metavar="STAGES",
                    help="IR stages shown for the kernels a failing test used, comma-separated "
                         f"(default {','.join(DEFAULT_STAGES)}; any of {' '.join(STAGES)})")
    group.addoption("--isozyme-ir-all", action="store_true", default=False,
                    help="show the kernels' IR for passing tests too")


def parse_stages(text: str) -> tuple[str, ...]:
    """The stages of `--isozyme-ir`; UsageError naming an unknown one."""
    stages = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [stage for stage in stages if stage not in STAGES]
    if unknown or not stages:
        raise pytest.UsageError(f"--isozyme-ir: unknown stage(s) {', '.join(unknown) or '(none given)'} "
                                f"(known: {', '.join(STAGES)})")
    return stages


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_PASSED_SECTIONS] = []
    parse_stages(config.getoption("isozyme_ir"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    compile_log.start()
    try:
        yield
    finally:
        compile_log.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, object, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    show_all = item.config.getoption("isozyme_ir_all")
    if not (report.failed or (show_all and report.when == "call")):
        return
    records = compile_log.current()
    if not records:
        return
    stages = parse_stages(item.config.getoption("isozyme_ir"))
    title = f"isozyme IR ({', '.join(stages)})"
    text = render(records, stages)
    report.sections.append((title, text))
    if report.passed:
        item.config.stash[_PASSED_SECTIONS].append((report.nodeid, title, text))


def pytest_terminal_summary(terminalreporter: object, exitstatus: int, config: pytest.Config) -> None:
    """With `--isozyme-ir-all`, the passing tests' sections (pytest shows sections of failures only)."""
    sections = config.stash.get(_PASSED_SECTIONS, [])
    if not sections or any(char in (config.getoption("reportchars") or "") for char in "PA"):
        return  # -rP / -rA print them already
    terminalreporter.section("isozyme IR of passing tests")  # type: ignore[attr-defined]
    for nodeid, title, text in sections:
        terminalreporter.write_sep("-", f"{nodeid}: {title}")  # type: ignore[attr-defined]
        terminalreporter.write_line(text)  # type: ignore[attr-defined]


def render(records: Iterable[CompileRecord], stages: Iterable[str]) -> str:
    """The IR of each record at each stage that applies to it, each under a `; ===` header line."""
    records = list(records)
    parts: list[str] = []
    for stage in stages:
        for record in _records_for(stage, records):
            parts.append(f"; === {record.describe()}: stage {stage} ===\n{_ir(record, stage).rstrip()}")
    if not parts:
        used = ", ".join(record.describe() for record in records)
        return f"; no stage of {', '.join(stages)} applies to what the test used: {used}"
    return "\n\n".join(parts)


def _records_for(stage: str, records: list[CompileRecord]) -> list[CompileRecord]:
    if stage in STAGE_MODES:
        return [record for record in records if record.mode in STAGE_MODES[stage]]
    primal: dict[tuple[object, str], CompileRecord] = {}
    for record in records:  # one per kernel and pipeline; a derivative's kernel counts with O2
        pipeline = record.opt if record.mode == "primal" else "O2"
        key = (record.kernel, "" if stage == "ssa" else pipeline)
        primal.setdefault(key, CompileRecord(record.kernel, "primal", record.backend, pipeline))
    return list(primal.values())


def _ir(record: CompileRecord, stage: str) -> str:
    try:
        if record.mode == "primal":
            return show_ir(record.kernel, stage, opt=record.opt)
        return show_ir(record.kernel, stage, opt=record.opt, activity=record.activity)
    except Exception as error:  # noqa: BLE001 - the report shows why there is no IR instead of failing
        return f"; (no IR: {type(error).__name__}: {error})"
