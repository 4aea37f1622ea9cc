"""Which kernels and derivatives a stretch of code used: the record the pytest plugin
(`isozyme/pytest_plugin.py`) prints the IR of when a test fails.

`start()` opens a log and `stop()` closes the innermost one and returns its records, in the order of their
first use, without repeats. While no log is open, recording is one test of an empty list. Logs nest (a test
that runs pytest in-process, `pytester`, sees what its inner tests compiled): a record goes to every open log.

What is recorded, and when:
- A primal kernel, `record_primal(kernel, backend, pipeline)`, at every `Kernel.compile` (a cache miss or a
  hit) before it compiles, so a kernel whose compilation fails is listed too. A kernel's first call binds
  it to its compiled entry and later calls skip `compile`: so that a kernel compiled before the log opened
  (in an earlier test, at import) is still listed when it is called, `start()` asks every kernel it saw
  compiled to record its next call (`Kernel.record_next_call` rebinds it to a one-shot wrapper that records
  it and binds the entry back). A call costs nothing more, the first call of each kernel in a log one
  Python call.
- A derivative, `record_derivative(kernel, mode, activity, opt, backend)`, at every call: `fwddiff` and `hvp`
  look their derivative up in `runtime/compiled_derivatives.py`, which records it; `autodiff` and `grad` call
  through the derivative their first call found (`autodiff.py`, `_ReverseCall`), which records it each time.

This module sits below the kernel (`runtime/kernel.py` imports it): it knows a kernel only as a
`LoggedKernel`, what it asks of one.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Protocol

from isozyme.frontend.definitions import KernelDefinition


class LoggedKernel(Protocol):
    """What the log asks of a kernel (`runtime/kernel.py`'s `Kernel` is one)."""

    definition: KernelDefinition
    """Its definition, for its name."""

    def record_next_call(self) -> None:
        """Make the next call record the kernel with `record_primal`, then run as calls ran before."""

MODES = ("primal", "reverse", "forward", "hvp")
"""What was compiled: the kernel, `diffe_<f>`, `fwddiffe_<f>`, or `fwddiffe_diffe_<f>` (a Hessian-vector
product; `activity` is then the activity of its inner gradient)."""


@dataclass(frozen=True)
class CompileRecord:
    """One kernel or derivative used while a log was open."""

    kernel: LoggedKernel
    mode: str
    """One of MODES."""
    backend: str
    opt: str
    """The pipeline for a primal kernel (`"O2"`), `"post"`, `"pre"` or `"none"` for a derivative."""
    activity: tuple[str, ...] | None = None
    """`"const"`, `"dup"` or `"active"` per parameter, for a derivative."""

    def describe(self) -> str:
        """`kernel mag (reverse, activity dup,const, opt=post, llvm)`."""
        name = self.kernel.definition.name
        if self.mode == "primal":
            return f"kernel {name} ({self.opt}, {self.backend})"
        return f"kernel {name} ({self.mode}, activity {','.join(self.activity or ())}, opt={self.opt}, {self.backend})"


MAX_RECORDS = 64
"""A log keeps the records of the last 64 kernels and derivatives first used while it was open (and so keeps
them alive), dropping the oldest."""
_logs: list[dict[CompileRecord, None]] = []
"""The open logs, innermost last (dicts as ordered sets)."""
_seen: weakref.WeakSet[LoggedKernel] = weakref.WeakSet()
"""Kernels compiled while a log was open, for `start()` to rebind."""


def start() -> None:
    """Open a log; kernels seen compiled before it are listed again at their next call."""
    _logs.append({})
    for kernel in list(_seen):
        kernel.record_next_call()


def stop() -> list[CompileRecord]:
    """Close the innermost log; its records in order of first use."""
    return list(_logs.pop()) if _logs else []


def current() -> list[CompileRecord]:
    """The innermost open log's records so far (empty when none is open)."""
    return list(_logs[-1]) if _logs else []


def record_primal(kernel: LoggedKernel, backend: str, pipeline: str) -> None:
    """`Kernel.compile(backend, opt=pipeline)` was called (cache hit or miss)."""
    if _logs:
        _seen.add(kernel)
        _add(CompileRecord(kernel, "primal", backend, pipeline))


def record_derivative(kernel: LoggedKernel, mode: str, activity: tuple[object, ...], opt: str, backend: str) -> None:
    """A derivative of `kernel` (`mode` one of "reverse", "forward", "hvp") was looked up to be called."""
    if _logs:
        _add(CompileRecord(kernel, mode, backend, opt, tuple(str(a) for a in activity)))


def _add(record: CompileRecord) -> None:
    for log in _logs:
        if record not in log:
            log[record] = None
            if len(log) > MAX_RECORDS:  # a hypothesis test compiles a kernel per example: keep the last ones
                del log[next(iter(log))]
