"""Value ranges of the integers that size arrays: bounds [low, high] of an i64 built from constants and
array extents by `iadd imul imax imin`, proven without running the code.

`value_range(value)` is None when it cannot bound the value (an argument, a load, a phi, a negative
operand). An array's extent (`dim`) is in [0, LARGEST_EXTENT]: no memory holds a larger array, so a bound
built on it is a bound of every run. The walk through operands is at most `RANGE_DEPTH` deep, whatever the
def-use depth of the IR. Users: `dead_code_elimination.py` (an unused alloc whose shape cannot fail) and
`memory_reuse.py` (an arena buffer that cannot be too large).
"""

from __future__ import annotations

from collections.abc import Callable

from isozyme.ssa.ir import Constant, Instruction, Value
from isozyme.ssa.ops import Op

LARGEST_EXTENT = 2**44
"""Bounds an array's extent (`dim`): no memory holds an array of 16 TiB."""
RANGE_DEPTH = 6
"""How far `value_range` looks through operands (a bounded walk, not one along the def-use depth)."""


def value_range(value: Value, depth: int = RANGE_DEPTH) -> tuple[int, int] | None:
    """Bounds [low, high] of an i64 value built from constants and extents by + * max min, or None."""
    if isinstance(value, Constant):
        return (value.value, value.value) if isinstance(value.value, int) else None  # type: ignore[return-value]
    if not isinstance(value, Instruction) or depth == 0:
        return None
    if value.op is Op.DIM:
        return (0, LARGEST_EXTENT)
    combine = RANGE_RULES.get(value.op)
    if combine is None:
        return None
    ranges = [value_range(operand, depth - 1) for operand in value.operands]
    if any(r is None for r in ranges) or any(r[0] < 0 for r in ranges):  # type: ignore[index]
        return None  # only non-negative operands: no product changes sign
    return combine(*ranges)  # type: ignore[arg-type]


RANGE_RULES: dict[Op, Callable[[tuple[int, int], tuple[int, int]], tuple[int, int]]] = {
    Op.IADD: lambda a, b: (a[0] + b[0], a[1] + b[1]),
    Op.IMUL: lambda a, b: (a[0] * b[0], a[1] * b[1]),
    Op.IMAX: lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    Op.IMIN: lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
}
"""Bounds of an op's result from its operands' bounds (all not negative: exact Python integers, which the
callers compare with the limits they need)."""
