"""The pass manager: the registry of passes by short name, and running a list of them over a module.

Each pass is a plain worker `fn(function) -> bool` (did it change anything) registered here under its
short name; `run_passes` applies passes in order to every function of a module, optionally verifying
after each one (`verify_each`) and printing the IR after each one or after named ones. Dumps go to
stderr, as LLVM's `opt -print-after-all` does, so stdout keeps the final IR. Named pipelines (`O0`, `O1`,
`O2`) come with the scalar passes of the Optimizer issue; `O0` is empty.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TextIO

from isozyme.optimize.dead_code_elimination import dead_code_elimination
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.printer import print_function
from isozyme.ssa.verifier import VerificationError, verify


@dataclass(frozen=True)
class Pass:
    """A registered function pass."""

    name: str
    """Short name used on the command line (`dce`)."""
    run: Callable[[Function], bool]
    """The worker; returns whether it changed the function."""
    summary: str
    """One line for `--help`."""


REGISTRY: dict[str, Pass] = {p.name: p for p in (
    Pass("dce", dead_code_elimination, "delete instructions whose results nothing live uses"),
)}
"""Every pass, by short name."""

PIPELINES: dict[str, list[str]] = {"O0": []}
"""Named pass lists; a name here may be used wherever a pass name may."""


class PassError(Exception):
    """An unknown pass name, or a pass that left the IR invalid."""


def expand_pipeline(names: Iterable[str]) -> list[Pass]:
    """Pass objects for a list of pass and pipeline names."""
    passes = []
    for name in names:
        if name in PIPELINES:
            passes.extend(expand_pipeline(PIPELINES[name]))
        elif name in REGISTRY:
            passes.append(REGISTRY[name])
        else:
            known = ", ".join(sorted([*REGISTRY, *PIPELINES]))
            raise PassError(f"unknown pass '{name}' (known: {known})")
    return passes


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
    """When a dict, accumulate each pass's wall time (seconds) into it."""
    out: TextIO | None = None
    """Where dumps go (default: stderr)."""


def run_passes(module: Module, names: Iterable[str], options: PassOptions | None = None) -> bool:
    """Run the named passes, in order, on every function of `module`; True if any changed something."""
    options = options or PassOptions()
    changed = False
    for pass_ in expand_pipeline(names):
        for function in module:
            start = time.perf_counter()
            changed |= pass_.run(function)
            if options.time_passes is not None:
                elapsed = time.perf_counter() - start
                options.time_passes[pass_.name] = options.time_passes.get(pass_.name, 0.0) + elapsed
            _after_pass(pass_, function, options)
    return changed


def _after_pass(pass_: Pass, function: Function, options: PassOptions) -> None:
    if options.verify_each:
        try:
            verify(function)
        except VerificationError as error:
            raise PassError(f"IR invalid after pass '{pass_.name}' on @{function.name}:\n{error}") from error
    if options.print_after_all or pass_.name in options.print_after:
        out = options.out or sys.stderr
        print(f"; *** IR Dump After {pass_.name} on @{function.name} ***", file=out)
        print(print_function(function), file=out)
