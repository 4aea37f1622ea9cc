"""The pass manager: the registry of passes by short name, the pipelines, and running them over a module.

Each pass is a plain worker registered here under its short name, returning whether it changed anything.
A function pass's worker takes a `Function` and runs on every function of the module in turn; a module
pass's worker takes the `Module` (`inline` and `func-attrs`, which walk the call graph bottom-up).

A pass list (`run_passes`, `isozyme opt -p`) names passes and pipelines. A pass may take parameters,
written as in LLVM's new pass manager: `inline<threshold=100>`, several separated by `;`. Each parameter is
declared with its default in `Pass.parameters`, and the default's type (int, float, bool) reads the value;
the worker receives them as keyword arguments. Pipelines (`PIPELINES`) are lists of pass names and
`FixedPoint` groups, whose passes run in rounds until a round changes nothing, at most `max_rounds` times:

    O0  nothing
    O1  func-attrs, loop-canon, mem2reg, then one round of the scalar passes
    O2  func-attrs, inline, loop-canon, mem2reg, the scalar passes to a fixed point (10 rounds at most),
        then simplify-cfg
    scalar passes: simplify-cfg, const-fold, instcombine, cse, licm, dce

A name that is neither a registered pass nor a pipeline is a `PassError`, also when a pipeline names it.
`PassOptions` instruments a run: verify after every pass (`verify_each`, which also checks that a pass
reporting "no change" left the IR as it was, since the fixed point trusts that answer), print the IR after
every pass or after named ones, and add up each pass's wall time (`format_timing_report` prints it). Dumps
and timing go to stderr, as with LLVM's `opt -print-after-all -time-passes`, so stdout keeps the final IR.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import TextIO

from isozyme.optimize.alloc_sinking import sink_allocs
from isozyme.optimize.array_privatization import privatize_arrays
from isozyme.optimize.common_subexpression_elimination import common_subexpression_elimination
from isozyme.optimize.constant_folding import constant_folding
from isozyme.optimize.dead_code_elimination import dead_code_elimination
from isozyme.optimize.function_attributes import function_attributes
from isozyme.optimize.inline import DEFAULT_THRESHOLD, inline
from isozyme.optimize.instcombine import instcombine
from isozyme.optimize.jump_threading import jump_threading
from isozyme.optimize.loop_canonicalization import loop_canonicalization
from isozyme.optimize.loop_fusion import loop_fusion
from isozyme.optimize.loop_invariant_code_motion import loop_invariant_code_motion
from isozyme.optimize.mem2reg import mem2reg
from isozyme.optimize.memory_reuse import place_in_arena
from isozyme.optimize.scalarize_temporaries import scalarize_private_arrays
from isozyme.optimize.simplify_cfg import simplify_cfg
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.printer import print_function, print_module
from isozyme.ssa.verifier import VerificationError, verify


class Scope(Enum):
    """What a pass's worker takes."""

    FUNCTION = "function"
    """One function at a time; the pass manager runs it on every function of the module."""
    MODULE = "module"
    """The whole module, once."""


ParameterValue = int | float | bool
"""The types a pass parameter may have."""


@dataclass(frozen=True)
class Pass:
    """A registered pass."""

    name: str
    """Short name used on the command line (`dce`)."""
    run: Callable[..., bool]
    """The worker `run(function_or_module, **parameters)`; returns whether it changed anything."""
    summary: str
    """One line for `--help`."""
    scope: Scope = Scope.FUNCTION
    """Whether the worker takes a function or the module."""
    parameters: dict[str, ParameterValue] = field(default_factory=dict, hash=False)
    """The parameters the worker accepts as keyword arguments, with their defaults."""


REGISTRY: dict[str, Pass] = {p.name: p for p in (
    Pass("dce", dead_code_elimination, "delete instructions whose results nothing live uses"),
    Pass("mem2reg", mem2reg, "promote local arrays accessed at constant indices to SSA values"),
    Pass("func-attrs", function_attributes, "infer readnone/readonly/argmemonly bottom-up over the call graph",
         Scope.MODULE),
    Pass("inline", inline, "inline calls of small non-recursive functions of the module", Scope.MODULE,
         {"threshold": DEFAULT_THRESHOLD}),
    Pass("simplify-cfg", simplify_cfg, "fold constant branches, drop unreachable and empty blocks, merge chains"),
    Pass("const-fold", constant_folding, "evaluate instructions with constant operands (IEEE-exact)"),
    Pass("instcombine", instcombine, "algebraic identities and canonical forms, from a rule table"),
    Pass("loop-canon", loop_canonicalization, "preheaders, single latches, dedicated exits, 0-based IVs, guards"),
    Pass("licm", loop_invariant_code_motion, "hoist loop-invariant instructions into the preheader"),
    Pass("cse", common_subexpression_elimination, "dominator-scoped value numbering of pure ops and loads"),
    Pass("jump-threading", jump_threading, "fold branches an earlier branch decided, skip empty branch blocks"),
    Pass("loop-fusion", loop_fusion, "fuse adjacent loops over the same iteration space when no dependence forbids"),
    Pass("scalarize-temporaries", scalarize_private_arrays,
         "replace a local array private to the iterations of a loop by the values stored into it"),
    Pass("privatize-arrays", privatize_arrays,
         "allocate in a prange loop a local array of which each iteration uses a slice of its own"),
    Pass("sink-allocs", sink_allocs, "move each alloc down to the nearest common dominator of its uses"),
    Pass("memory-reuse", place_in_arena, "local arrays as views of one arena per call, by liveness (codegen's "
         "last step: no pass may follow it)"),
)}
"""Every pass, by short name."""

@dataclass(frozen=True)
class FixedPoint:
    """A pipeline entry: its passes run in rounds until no pass of a round changes anything."""

    names: tuple[str, ...]
    """The passes (or pipelines) of one round, in order."""
    max_rounds: int = 10
    """At most this many rounds run, so a pair of passes undoing each other cannot loop forever."""


SCALAR_PASSES = ("simplify-cfg", "const-fold", "instcombine", "cse", "licm", "dce")
"""The per-function clean-up passes that O1 runs once and O2 runs to a fixed point."""

PIPELINES: dict[str, list[str | FixedPoint]] = {
    "O0": [],
    "O1": ["func-attrs", "loop-canon", "mem2reg", *SCALAR_PASSES],
    "O2": ["func-attrs", "inline", "loop-canon", "mem2reg", FixedPoint(SCALAR_PASSES), "simplify-cfg"],
}
"""Named pass lists; a name here may be used wherever a pass name may."""


class PassError(Exception):
    """An unknown pass name or parameter, or a pass that left the IR invalid."""


@dataclass(frozen=True)
class Invocation:
    """One pass as a pass list names it, with its parameter values (`inline<threshold=100>`)."""

    pass_: Pass
    """The registered pass."""
    arguments: dict[str, ParameterValue] = field(default_factory=dict, hash=False)
    """The parameters given in the pass list (the others keep the worker's defaults)."""

    def __str__(self) -> str:
        if not self.arguments:
            return self.pass_.name
        return f"{self.pass_.name}<{';'.join(f'{k}={v}' for k, v in self.arguments.items())}>"


@dataclass(frozen=True)
class Rounds:
    """An expanded `FixedPoint`: the steps of one round and the bound on rounds."""

    steps: tuple[Step, ...]
    """What one round runs, in order."""
    max_rounds: int
    """The most rounds that run."""


Step = Invocation | Rounds
"""One element of an expanded pass list."""

_INVOCATION = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)(?:<(?P<parameters>[^<>]*)>)?")


def _read_parameter(pass_: Pass, assignment: str) -> tuple[str, ParameterValue]:
    """`key=value` as the parameter's name and value, read by the type of the parameter's default."""
    key, _, text = assignment.partition("=")
    key, text = key.strip(), text.strip()
    if key not in pass_.parameters:
        known = ", ".join(sorted(pass_.parameters)) or "none"
        raise PassError(f"pass '{pass_.name}' has no parameter '{key}' (parameters: {known})")
    kind = type(pass_.parameters[key])
    try:
        if kind is bool:
            return key, {"true": True, "false": False}[text]
        return key, kind(text)
    except (KeyError, ValueError):
        raise PassError(f"parameter '{key}' of pass '{pass_.name}' needs a {kind.__name__}, got '{text}'") from None


def parse_invocation(text: str) -> Invocation:
    """The pass named by `text` (`dce`, `inline<threshold=100>`); PassError if there is none."""
    match = _INVOCATION.fullmatch(text.strip())
    name = match.group("name") if match else text
    if match is None or name not in REGISTRY:
        if match is not None and name in PIPELINES:
            raise PassError(f"pipeline '{name}' takes no parameters")
        known = ", ".join(sorted([*REGISTRY, *PIPELINES]))
        raise PassError(f"unknown pass '{name}' (known: {known})")
    pass_ = REGISTRY[name]
    written = match.group("parameters")
    assignments = [part for part in (written or "").split(";") if part.strip()]
    return Invocation(pass_, dict(_read_parameter(pass_, part) for part in assignments))


def expand_pipeline(names: Iterable[str | FixedPoint]) -> list[Step]:
    """The steps of a list of pass names, pipeline names and fixed-point groups, pipelines expanded."""
    steps: list[Step] = []
    for entry in names:
        if isinstance(entry, FixedPoint):
            steps.append(Rounds(tuple(expand_pipeline(entry.names)), entry.max_rounds))
        elif entry in PIPELINES:
            try:
                steps.extend(expand_pipeline(PIPELINES[entry]))
            except PassError as error:
                raise PassError(f"in pipeline {entry}: {error}") from None
        else:
            steps.append(parse_invocation(entry))
    return steps


def flatten(steps: Iterable[Step]) -> list[Invocation]:
    """Every invocation of `steps`, fixed-point groups listed once: what a pipeline runs, in order."""
    flat: list[Invocation] = []
    for step in steps:
        flat.extend(flatten(step.steps) if isinstance(step, Rounds) else [step])
    return flat


@dataclass
class PassOptions:
    """How `run_passes` instruments the pipeline."""

    verify_each: bool = False
    """Verify every function after every pass."""
    print_after_all: bool = False
    """Dump the function after every pass."""
    print_after: set[str] = field(default_factory=set)
    """Dump the function after these passes."""
    time_passes: dict[str, float] | None = None
    """When a dict, accumulate each pass's wall time (seconds) into it, and the verifier's as `verify`."""
    out: TextIO | None = None
    """Where dumps go (default: stderr)."""
    statistics: dict[str, PassStatistics] | None = None
    """When a dict, count per pass what it changed (LLVM's `-stats`, coarser): see `PassStatistics`."""


@dataclass
class PassStatistics:
    """What one pass did over a pipeline run: how often it ran and changed something, and the net change
    in instructions and blocks it caused (negative: it removed them)."""

    runs: int = 0
    changed: int = 0
    instructions: int = 0
    blocks: int = 0

    def record(self, changed: bool, size_before: tuple[int, int], size_after: tuple[int, int]) -> None:
        self.runs += 1
        self.changed += changed
        self.instructions += size_after[0] - size_before[0]
        self.blocks += size_after[1] - size_before[1]


def ir_size(target: Function | Module) -> tuple[int, int]:
    """(instructions, blocks) of a function or of every function of a module."""
    functions = [target] if isinstance(target, Function) else list(target)
    return (sum(len(b.instructions) for f in functions for b in f.blocks), sum(len(f.blocks) for f in functions))


def format_statistics(statistics: dict[str, PassStatistics]) -> str:
    """A table of `PassStatistics`, one pass per line, in first-run order."""
    lines = [f"{'pass':<14}{'runs':>6}{'changed':>9}{'instructions':>14}{'blocks':>8}"]
    for name, stats in statistics.items():
        lines.append(f"{name:<14}{stats.runs:>6}{stats.changed:>9}{stats.instructions:>+14}{stats.blocks:>+8}")
    return "\n".join(lines) + "\n"


def run_passes(module: Module, names: Iterable[str | FixedPoint], options: PassOptions | None = None) -> bool:
    """Run the passes and pipelines named, in order, over `module`; True if any pass changed something."""
    return _run_steps(module, expand_pipeline(names), options or PassOptions())


def _run_steps(module: Module, steps: Iterable[Step], options: PassOptions) -> bool:
    changed = False
    for step in steps:
        if isinstance(step, Rounds):
            changed |= _run_rounds(module, step, options)
        else:
            changed |= _run_invocation(module, step, options)
    return changed


def _run_rounds(module: Module, rounds: Rounds, options: PassOptions) -> bool:
    """Run rounds until one changes nothing, at most `max_rounds`; True if any round changed something."""
    changed = False
    for _ in range(rounds.max_rounds):
        if not _run_steps(module, rounds.steps, options):
            break
        changed = True
    return changed


def _run_invocation(module: Module, invocation: Invocation, options: PassOptions) -> bool:
    """Run one pass: once on the module, or on each function in turn."""
    if invocation.pass_.scope is Scope.MODULE:
        return _run_on(invocation, module, options)
    changed = False
    for function in list(module):
        changed |= _run_on(invocation, function, options)
    return changed


def _run_on(invocation: Invocation, target: Function | Module, options: PassOptions) -> bool:
    """Run a pass on one function (or the module), then verify and print as `options` asks."""
    before = _text(target) if options.verify_each else ""
    size_before = ir_size(target) if options.statistics is not None else (0, 0)
    with _timer(options, invocation.pass_.name):
        changed = bool(invocation.pass_.run(target, **invocation.arguments))
    if options.statistics is not None:
        stats = options.statistics.setdefault(invocation.pass_.name, PassStatistics())
        stats.record(changed, size_before, ir_size(target))
    if options.verify_each:
        with _timer(options, "verify"):
            _check_after(invocation, target, before, changed)
    if options.print_after_all or invocation.pass_.name in options.print_after:
        out = options.out or sys.stderr
        print(f"; *** IR Dump After {invocation.pass_.name} on {_describe(target)} ***", file=out)
        print(_text(target).rstrip("\n"), file=out)
    return changed


def _text(target: Function | Module) -> str:
    return print_function(target) if isinstance(target, Function) else print_module(target)


def _describe(target: Function | Module) -> str:
    return f"@{target.name}" if isinstance(target, Function) else "[module]"


def _check_after(invocation: Invocation, target: Function | Module, before: str, changed: bool) -> None:
    """The IR is valid, and unchanged if the pass said so (the fixed point relies on that answer)."""
    try:
        verify(target)
    except VerificationError as error:
        raise PassError(f"IR invalid after pass '{invocation}' on {_describe(target)}:\n{error}") from error
    if not changed and _text(target) != before:
        raise PassError(f"pass '{invocation}' changed {_describe(target)} but reported no change")


@contextmanager
def _timer(options: PassOptions, name: str) -> Iterator[None]:
    """Add the wall time of the `with` body to `options.time_passes[name]`, when timing is on."""
    start = time.perf_counter()
    try:
        yield
    finally:
        if options.time_passes is not None:
            elapsed = time.perf_counter() - start
            options.time_passes[name] = options.time_passes.get(name, 0.0) + elapsed


_REPORT_RULE = "===" + "-" * 73 + "==="


def format_timing_report(times: dict[str, float]) -> str:
    """LLVM's `-time-passes` table: each pass's total wall time and share, slowest first, then the total."""
    total = sum(times.values())
    lines = [_REPORT_RULE, "... Pass execution timing report ...".center(len(_REPORT_RULE)).rstrip(),
             _REPORT_RULE, f"  Total Execution Time: {total:.4f} seconds ({total:.4f} wall clock)", "",
             "   ---Wall Time---  --- Name ---"]
    for name, seconds in sorted(times.items(), key=lambda item: (-item[1], item[0])):
        share = 100.0 * seconds / total if total else 0.0
        lines.append(f"   {seconds:.4f} ({share:5.1f}%)  {name}")
    lines.append(f"   {total:.4f} (100.0%)  Total")
    return "\n".join(lines) + "\n"
