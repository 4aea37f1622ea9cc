"""Triangular indices: the running index of a packed triangle, recomputed from its loop's counter.

GMM's `qtimesx` walks the strictly lower triangle of Q_k, stored packed, with one index:

    idx = d
    for col in range(d):
        for row in range(col + 1, d):
            ... icf[k, idx] ...
            idx += 1

`idx` is an induction variable of the row loop (start + counter), and its start is the phi of the column
loop's header, which grows in each column by the row loop's trip count, d - col - 1: not a constant step, so
`trip_count.induction_variable` does not see it, and the cache planner taped it once per column. It is a
closed form of the column counter, though:

    idx(col) = start + step * sum_{u < col} (D - a - u) = start + step * (col * (D - a) - col * (col - 1) / 2)

for a row loop `range(col + a, D)` (a = 0 or 1, trip count `max(D - (col + a), 0)`) in a column loop
`range(D)` (trip count `max(D, 0)`): every column u < max(D, 0) has D - a - u >= 1 - a >= 0 rows, so the
`max(., 0)` of the row trip count never clips, and the row loop adds `step` per row (its exit value is its
start plus step times its trip count). `triangular_index` recognizes the pattern in the IR after loop
canonicalization (`optimize/loop_canonicalization.py`): the column header's phi p = phi [start, q], with q
= phi [guard: p, row header: p_row] where the guard branches into the row loop on `trip > 0` and past it
otherwise, and p_row the row loop's induction variable of start p and constant step. Integers wrap at 64
bits; the closed form is exact while col * (col - 1) does (a triangle of 2^31 columns).
"""

from __future__ import annotations

from dataclasses import dataclass

from isozyme.enzyme_ad.prepare import LoopFrame
from isozyme.ssa.ir import Block, Constant, Instruction, Phi, Value
from isozyme.ssa.loops import Loop, LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.trip_count import induction_variable, is_known_nonnegative, same_value, single_entering_block
from isozyme.ssa.types import I64


@dataclass(frozen=True)
class TriangularIndex:
    """A header phi that is `start + step * (col * first - col * (col - 1) / 2)` in the iteration col of
    `loop` (module docstring)."""

    loop: Loop
    """The column loop, whose header holds the phi."""
    start: Value
    """The phi's value when the loop is entered."""
    step: Constant
    """What the row loop adds per row."""
    bound: Value
    """D of the row loop `range(col + offset, D)`."""
    offset: int
    """a of the row loop `range(col + a, D)`: 0 or 1."""


def triangular_index(value: Value, nest: LoopNest, frames: dict[Loop, LoopFrame]) -> TriangularIndex | None:
    """`value` as a triangular index (module docstring), or None."""
    if not isinstance(value, Phi) or value.type != I64 or value.block is None:
        return None
    loop = nest.loop_of(value.block)
    if loop is None or loop.header is not value.block or len(loop.latches) != 1 or loop not in frames:
        return None
    entering = single_entering_block(loop)
    frame = frames[loop]
    if entering is None or frame.trip is None or len(value.operands) != 2:
        return None
    start, merged = value.incoming_value(entering), value.incoming_value(loop.latches[0])
    rows = _rows_of(merged, value, loop, nest, frames)
    if rows is None:
        return None
    step, row_trip = rows
    shape = _row_trip_shape(row_trip, frame.counter)
    if shape is None or not _is_max_zero_of(frame.trip, shape[0]):
        return None
    return TriangularIndex(loop, start, step, shape[0], shape[1])


def _rows_of(merged: Value, phi: Phi, loop: Loop, nest: LoopNest,
             frames: dict[Loop, LoopFrame]) -> tuple[Constant, Value] | None:
    """(step, row trip count) when `merged` is phi [guard: `phi`, row header: the row loop's induction
    variable of start `phi` and constant step], the guard skipping the row loop exactly when its trip count
    is not positive, and the row loop left only from its header."""
    if not isinstance(merged, Phi) or merged.block is None or len(merged.operands) != 2:
        return None
    incoming = merged.incoming
    guard = next((block for block, incoming_value in incoming if incoming_value is phi), None)
    row_value = next((v for _, v in incoming if v is not phi), None)
    if guard is None or not isinstance(row_value, Phi) or row_value.block is None:
        return None
    rows = nest.loop_of(row_value.block)
    if rows is None or rows.header is not row_value.block or rows.parent is not loop or rows not in frames \
            or nest.loop_of(guard) is not loop:
        return None
    iv = induction_variable(rows, row_value)
    trip = frames[rows].trip
    if iv is None or iv.start is not phi or not isinstance(iv.step, Constant) or trip is None:
        return None
    if any(not rows.contains(successor) for block in rows.blocks if block is not rows.header
           for successor in block.successors):
        return None  # a break: the row loop may add fewer than its trip count of steps
    if not _guards(guard, rows, trip, merged.block):
        return None
    return iv.step, trip


def _guards(guard: Block, rows: Loop, trip: Value, past: Block) -> bool:
    """Does `guard` end in `cbr trip > 0` whose true edge enters `rows` (directly or through a preheader)
    and whose false edge goes to `past`?"""
    terminator = guard.terminator
    if terminator is None or terminator.op is not Op.CBR:
        return False
    enters, skips = terminator.successors
    condition = terminator.operands[0]
    return skips is past and (enters is rows.header or enters.successors == (rows.header,)) \
        and isinstance(condition, Instruction) and positive_test(condition, trip)


def _row_trip_shape(trip: Value, counter: Value) -> tuple[Value, int] | None:
    """(D, a) when `trip` is `max(D - (counter + a), 0)` (a = 1) or `max(D - counter, 0)` (a = 0)."""
    if not isinstance(trip, Instruction) or trip.op is not Op.IMAX or not _is_zero(trip.operands[1]):
        return None
    difference = trip.operands[0]
    if not isinstance(difference, Instruction) or difference.op is not Op.ISUB:
        return None
    bound, first_row = difference.operands
    if first_row is counter:
        return bound, 0
    if isinstance(first_row, Instruction) and first_row.op is Op.IADD:
        left, right = first_row.operands
        if left is counter and isinstance(right, Constant) and right.value == 1:
            return bound, 1
        if right is counter and isinstance(left, Constant) and left.value == 1:
            return bound, 1
    return None


def _is_max_zero_of(trip: Value, bound: Value) -> bool:
    """Is `trip` `max(bound, 0)`: that, or `bound` itself when it is not negative (the row loop of a
    `range(col + 1, d)` over an argument d clamps it: `max(max(d, 0) - (col + 1), 0)`, `range_length.py`)?"""
    if same_value(trip, bound) and is_known_nonnegative(bound):
        return True
    return isinstance(trip, Instruction) and trip.op is Op.IMAX and _is_zero(trip.operands[1]) \
        and same_value(trip.operands[0], bound)


def _is_zero(value: Value) -> bool:
    return isinstance(value, Constant) and value.value == 0


def positive_test(condition: Instruction, value: Value) -> bool:
    """Is `condition` `value > 0` (`icmp.sgt value, 0` or `icmp.slt 0, value`)?"""
    if condition.op is Op.ICMP_SGT:
        return same_value(condition.operands[0], value) and _is_zero(condition.operands[1])
    if condition.op is Op.ICMP_SLT:
        return _is_zero(condition.operands[0]) and same_value(condition.operands[1], value)
    return False
