"""Checks of benchmark results against their references: a benchmark that times a wrong answer fails.

Every benchmark that computes a value or a gradient (`python -m isozyme bench`, `benchmarks/*.py`) compares
the results of the calls it times with a reference (a numpy version of the same math, the CPU's gradient,
the gradient of the program as written), outside the timed region, and keeps the worst error in a `Check`
with its tolerance and the reason for that tolerance. The error is relative in the max-norm
(`relative_error`): the largest difference over the largest magnitude of the reference, per array, the
worst array counting, so entries near zero are compared at the scale of the whole result.

A failed check is printed marked `MISMATCH` (a row of a table, or a line of its own), written to the JSON as
`{"passed": false, ...}` (`Check.as_dict`; a row with several checks as `checks_json`, `passed` false if one
failed), and makes the benchmark exit with status 1 after it has printed and written everything
(`exit_status`). Timings of a failed row are still recorded: they are what the wrong program took.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

MISMATCH = "MISMATCH"
"""How a failed check is marked in tables and messages."""


def relative_error(actual: object, expected: object) -> float:
    """max |actual - expected| / max |expected| (module docstring), the worst over the arrays of a mapping
    (the same keys) or of two tuples or lists (the same length); anything else is compared as one array.
    Infinite for a different shape, different keys, a
    reference of zeros against a nonzero result, or a NaN or infinity in either (a result is never
    allowed to be NaN)."""
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping) or set(actual) != set(expected):
            return math.inf
        return max((relative_error(actual[key], expected[key]) for key in expected), default=0.0)
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)):
        if len(actual) != len(expected):
            return math.inf
        return max((relative_error(a, e) for a, e in zip(actual, expected)), default=0.0)
    try:
        got, want = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    except (TypeError, ValueError):  # None, or a value that is no number
        return math.inf
    if got.shape != want.shape:
        return math.inf
    if got.size == 0:
        return 0.0
    difference, scale = float(np.max(np.abs(got - want))), float(np.max(np.abs(want)))
    if not (math.isfinite(difference) and math.isfinite(scale)):
        return math.inf
    if scale == 0.0:
        return 0.0 if difference == 0.0 else math.inf
    return difference / scale


@dataclass
class Check:
    """One result of a benchmark checked against its reference, over every call compared."""

    what: str
    """What is compared with what ("gpu gradient against the CPU's (llvm)")."""
    tolerance: float
    """The largest `relative_error` that passes."""
    reason: str
    """Why that tolerance: what separates a correct result from its reference (rounding in another order)."""
    error: float = 0.0
    """The largest `relative_error` over the calls compared so far."""
    calls: int = 0
    """How many results were compared."""

    def compare(self, actual: object, expected: object) -> float:
        """Compare one call's result with the reference; returns its error."""
        return self.record(relative_error(actual, expected))

    def record(self, error: float) -> float:
        """Count one compared result whose error was measured elsewhere (finite differences have their own)."""
        self.error = max(self.error, error)
        self.calls += 1
        return error

    @property
    def passed(self) -> bool:
        """Every result compared is within the tolerance; a check that compared nothing has not passed."""
        return self.calls > 0 and self.error <= self.tolerance

    @property
    def mark(self) -> str:
        return "ok" if self.passed else MISMATCH

    def as_dict(self) -> dict[str, Any]:
        """The JSON of the check: `error` is null where it is infinite (a wrong shape, a NaN)."""
        return {"passed": self.passed, "error": self.error if math.isfinite(self.error) else None,
                "tolerance": self.tolerance, "calls": self.calls, "what": self.what, "reason": self.reason}

    def __str__(self) -> str:
        return (f"{self.mark}: {self.what}: relative error {self.error:.1e} over {self.calls} call(s), "
                f"tolerance {self.tolerance:.0e}")


def checks_json(checks: Mapping[str, Check]) -> dict[str, Any]:
    """The JSON of a row with several checks: passed only if every one passed."""
    return {"passed": all(check.passed for check in checks.values()),
            "checks": {name: check.as_dict() for name, check in checks.items()}}


def exit_status(checks: Iterable[Check], program: str, stream: TextIO | None = None) -> int:
    """1 after printing every failed check to `stream` (stderr), 0 if all passed."""
    failed = [check for check in checks if not check.passed]
    stream = stream or sys.stderr
    for check in failed:
        print(f"{program}: {check}", file=stream)
    if failed:
        print(f"{program}: {len(failed)} check(s) failed: a result differs from its reference beyond its "
              f"tolerance (exit status 1)", file=stream)
    return 1 if failed else 0
