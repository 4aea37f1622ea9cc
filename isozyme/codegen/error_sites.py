"""Run-time error sites: where compiled code can fail, and the Python exception each failure becomes.

Compiled code cannot raise a Python exception. Where an instruction may fail (an index out of bounds in
checked mode, an integer division by zero, a failed `assert`, ...) the backend registers an `ErrorSite`
and emits a check; when the check fails, the code writes the site's number and a few 64-bit payload words
(the index and the shape, the offending value) into the call's error record and returns. The runtime then
calls `site.exception(payload)`, which builds the exception the interpreter raises for the same failure,
with the same message (`file:line:col: op: ...`), so every backend reports a failure identically.

Sites are plain data (`kind`, location, op, details) so that they can be stored beside object code in the
disk cache (`to_json` / `from_json`).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from isozyme.ssa.ops import ASSERT_ERRORS
from isozyme.ssa.types import allocation_failure


def _as_float(word: int) -> float:
    """The f64 whose bits are the 64-bit payload word `word`."""
    return struct.unpack("<d", struct.pack("<q", word))[0]


def _index(site: ErrorSite, payload: Sequence[int]) -> Exception:
    rank = site.details["rank"]
    index, shape = tuple(payload[:rank]), tuple(payload[rank:2 * rank])
    return IndexError(f"index {index} is out of bounds for an array of shape {shape}")


def _zero_division(site: ErrorSite, payload: Sequence[int]) -> Exception:
    return ZeroDivisionError("integer division or modulo by zero")


def _shift(site: ErrorSite, payload: Sequence[int]) -> Exception:
    bits, ty = site.details["bits"], site.details["type"]
    return ValueError(f"shift amount {payload[0]} is outside [0, {bits}) for {ty}")


def _float_to_int(site: ErrorSite, payload: Sequence[int]) -> Exception:
    value, ty = _as_float(payload[0]), site.details["type"]
    if math.isnan(value):
        return ValueError(f"cannot convert nan to {ty}")
    if math.isinf(value):
        return OverflowError(f"cannot convert {value} to {ty}")
    return OverflowError(f"{value!r} is out of the range of {ty}")


def _negative_extent(site: ErrorSite, payload: Sequence[int]) -> Exception:
    return ValueError(f"negative extent in shape {tuple(payload[:site.details['rank']])}")


def _out_of_memory(site: ErrorSite, payload: Sequence[int]) -> Exception:
    shape = tuple(payload[:site.details["rank"]])
    if "itemsize" not in site.details:  # a grow: its one extent
        return MemoryError(f"cannot allocate a local array of shape {shape}")
    return MemoryError(allocation_failure(shape, str(site.details["element"]), int(site.details["itemsize"])))  # type: ignore


def _assertion(site: ErrorSite, payload: Sequence[int]) -> Exception:
    error = ASSERT_ERRORS[str(site.details.get("error", "AssertionError"))]
    return error(site.details.get("message") or "assertion failed")


ERROR_KINDS: dict[str, Callable[[ErrorSite, Sequence[int]], Exception]] = {
    "index": _index,
    "zero-division": _zero_division,
    "shift": _shift,
    "float-to-int": _float_to_int,
    "negative-extent": _negative_extent,
    "out-of-memory": _out_of_memory,
    "assert": _assertion,
}
"""How each kind of site turns its payload into an exception (the interpreter's message, unlocated)."""

PAYLOAD_WORDS = 8
"""Payload words in an error record: enough for a 4-D index and its shape."""

UNLOCATED_KINDS = frozenset({"assert"})
"""Kinds whose message does not name the op (the interpreter's AssertionError holds only the message)."""

REPORTED_OPS = {"view": "alloc"}
"""Ops whose failures name another op: a `view` is an `alloc` that codegen placed in an arena
(`optimize/memory_reuse.py`), and the unplaced program, which the interpreter runs, fails at the alloc."""


@dataclass
class ErrorSite:
    """One place in compiled code that may fail."""

    kind: str
    """A key of ERROR_KINDS."""
    location: str | None
    """`file:line:col` of the instruction, when known."""
    op: str
    """The failing instruction's op mnemonic, named in the message as the interpreter does."""
    details: dict[str, object] = field(default_factory=dict)
    """What the message needs besides the payload: rank, type names, the assert message."""

    def exception(self, payload: Sequence[int]) -> Exception:
        """The exception this failure raises, its message prefixed with the location as in the interpreter."""
        error = ERROR_KINDS[self.kind](self, payload)
        op = REPORTED_OPS.get(self.op, self.op)
        message = str(error) if self.kind in UNLOCATED_KINDS else f"{op}: {error}"
        if self.location is not None:
            message = f"{self.location}: {message}"
        return type(error)(message)

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "location": self.location, "op": self.op, "details": self.details}

    @staticmethod
    def from_json(data: dict[str, object]) -> ErrorSite:
        return ErrorSite(str(data["kind"]), data["location"], str(data["op"]), dict(data["details"]))  # type: ignore


def register_site(sites: list[ErrorSite], site: ErrorSite) -> int:
    """Append `site` to a module's site table; its number, which the compiled check writes on failure."""
    if site.kind not in ERROR_KINDS:
        raise KeyError(f"unknown error site kind {site.kind!r}")
    sites.append(site)
    return len(sites)  # numbers start at 1: 0 in the record means success
