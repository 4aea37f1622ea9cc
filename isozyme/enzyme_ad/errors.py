"""The error AD raises for a construct it cannot differentiate: the construct, then the kernel's source line.

A derivative is never silently wrong (DESIGN 1.3): anything the reverse or forward pass cannot handle
stops compilation with a `DifferentiationError` that reads like a `CompileError` (file, line, column, the
source line and a caret), built from the `SourceLoc` the frontend stamped on the instruction.
"""

from __future__ import annotations

import linecache

from isozyme.ssa.ir import Block, Instruction, SourceLoc, Value


class DifferentiationError(Exception):
    """A construct the AD cannot differentiate. Attributes: `msg` and `loc` (None when unknown)."""

    def __init__(self, msg: str, loc: SourceLoc | None = None) -> None:
        self.msg, self.loc = msg, loc
        super().__init__(self._render())

    def _render(self) -> str:
        if self.loc is None:
            return self.msg
        where = f'  File "{self.loc.file}", line {self.loc.line}, column {self.loc.col + 1}'
        text = linecache.getline(self.loc.file, self.loc.line).rstrip()
        if not text.strip():
            return f"{self.msg}\n{where}"
        stripped = text.lstrip()
        caret = max(0, self.loc.col - (len(text) - len(stripped)))
        return f"{self.msg}\n{where}\n    {stripped}\n    {' ' * caret}^"


def location_of(item: Value | Block | None) -> SourceLoc | None:
    """The source location of a value, or of the first located instruction of a block."""
    if isinstance(item, Block):
        return next((inst.loc for inst in item.instructions if inst.loc is not None), None)
    return item.loc if item is not None else None


def unsupported(inst: Instruction, what: str) -> DifferentiationError:
    """The error for an instruction the AD cannot handle: `what` says why."""
    return DifferentiationError(f"cannot differentiate `{inst.op}`: {what}", inst.loc)
