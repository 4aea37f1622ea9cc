"""Range lengths: the trip count of `for i in range(start, stop, step)`, exact for any i64 bounds.

Python's `len(range(a, b, s))` is max(0, ceil((b - a) / s)). Computed in i64, `b - a` and `b - a + s - 1`
wrap when the bounds are far apart (`range(0, 2**63 - 1, 2**62)` counted 0 iterations, `range(2**63 - 1,
-2**63)` one). `emit_range_length` emits the count of i64 values a, b, s with no intermediate value that
can wrap, in one of two forms chosen by what `signed_range` proves about the operands (constants, array
extents, the loop variables of the enclosing loops, which the frontend passes in `known`). With
hi, lo, mag = (b, a, s) for a step s > 0 and (a, b, -s) for s < 0:

  - **Direct**, when the ranges prove that hi - lo (hi - (lo + 1) for mag > 1) cannot wrap: the count is
        max(hi - lo, 0)                       for mag = 1,
        max((hi - (lo + 1)) // mag + 1, 0)    for mag > 1 (no `+ mag - 1` that could wrap).
    Where only the low end can wrap (hi far below lo, where the count is 0 anyway), hi is first clamped to
    max(hi, c) for a constant c <= lo: c = 0 when lo >= 0 (`range(1, n)` counts max(max(n, 0) - 1, 0), the
    max(n, 0) shared with a `range(n)` around it), which keeps the count and makes the difference fit.
    These are the shapes the analyses know: `max(D - (i + 1), 0)` of a triangle's rows, monotone in the
    counters of enclosing loops, `max(n, 0)` known not negative; LLVM folds them as before.
  - **Wide**, otherwise (two bounds of unknown sign, or a step known only at run time, whose hi, lo and mag
    are selects on s > 0): the span is read as an unsigned 64-bit number. For hi > lo, hi - lo - 1 wraps to
    its true value modulo 2^64, which is in [0, 2^64 - 2], so
        raw = select(hi > lo, udiv(hi - lo - 1, mag) + 1, 0)
    is the count up to 2^64 - 1 (mag = -s is 2^63 for s = -2^63: right as unsigned too). A count over
    2^63 - 1 wraps negative, and `assert raw >= 0, "range() has more than 2**63 - 1 iterations",
    OverflowError` raises it at the loop (left out where the ranges prove the count fits, as for
    |s| >= 3); the trip count is then max(raw, 0), known not negative. A division that cannot see a
    wrapped span (the ranges say hi - lo - 1 fits) is the signed `ifloordiv`, a unit step none.

Bounds that are all constants fold to the count (or to the failing assert). The loop's own values do not
wrap either: the frontend counts k = 0, 1, ..., trip - 1 and sets i = a + k*s, whose exact value lies
between a and b, so the wrapping i64 ops compute it exactly, and no `i + s` past the last value is made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from isozyme.ssa.builder import Builder
from isozyme.ssa.ir import Constant, Instruction, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.trip_count import IntegerArithmetic
from isozyme.ssa.types import I1, I64, ScalarType, Type

Interval = tuple[int, int]
"""Bounds [low, high] of an integer value, both included."""

I64_MIN, I64_MAX = -2**63, 2**63 - 1
RANGE_DEPTH = 8
"""How far `signed_range` looks through operands."""
TOO_MANY_ITERATIONS = "range() has more than 2**63 - 1 iterations"
"""The message of the OverflowError of a loop whose trip count does not fit in i64."""


def type_range(ty: Type) -> Interval:
    """All values of the integer type `ty` (i1: 0 and 1)."""
    bits = ty.bits if isinstance(ty, ScalarType) and ty.is_int else 1
    return (0, 1) if bits == 1 else (-2**(bits - 1), 2**(bits - 1) - 1)


def _quotients(a: Interval, b: Interval) -> Interval | None:
    if b[0] <= 0:
        return None  # only by a positive divisor: floor division is then monotone in both operands
    corners = [x // y for x in a for y in b]
    return min(corners), max(corners)


RANGE_RULES: dict[Op, Callable[..., Interval | None]] = {
    Op.IADD: lambda a, b: (a[0] + b[0], a[1] + b[1]),
    Op.ISUB: lambda a, b: (a[0] - b[1], a[1] - b[0]),
    Op.IMUL: lambda a, b: (min(x * y for x in a for y in b), max(x * y for x in a for y in b)),
    Op.INEG: lambda a: (-a[1], -a[0]),
    Op.IMAX: lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    Op.IMIN: lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    Op.IFLOORDIV: _quotients,
    Op.SELECT: lambda c, a, b: (min(a[0], b[0]), max(a[1], b[1])),
    Op.SEXT: lambda a: a,
    Op.ZEXT: lambda a: a,
}
"""The exact bounds of an op's result from its operands' (Python integers): a result outside its type may
have wrapped, and `signed_range` widens it to the whole type."""


def signed_range(value: Value, known: Mapping[Value, Interval], depth: int = RANGE_DEPTH) -> Interval:
    """Bounds of the integer `value` in every run: a constant's value, an extent's [0, 2^63 - 1] (numpy's
    largest), `known`'s entry, the rules of `RANGE_RULES` on its operands', else its whole type."""
    if isinstance(value, Constant) and isinstance(value.value, int):
        return (int(value.value), int(value.value))
    if value in known:
        return known[value]
    whole = type_range(value.type)
    if not isinstance(value, Instruction) or depth == 0:
        return whole
    if value.op is Op.DIM:
        return (0, I64_MAX)
    rule = RANGE_RULES.get(value.op)
    if rule is None:
        return whole
    result = rule(*[signed_range(operand, known, depth - 1) for operand in value.operands])
    if result is None or result[0] < whole[0] or result[1] > whole[1]:
        return whole
    return result


@dataclass(frozen=True)
class RangeLength:
    """What `emit_range_length` made."""

    trip: Value
    """The count, an i64 known not negative (a constant, or `imax ..., 0`)."""
    most: int
    """An upper bound of the count (at most 2^63 - 1), for the ranges of the loop's variables."""


class _Emitter:
    """Folding i64 arithmetic (`IntegerArithmetic`) with the selects and comparisons of the wide form."""

    def __init__(self, builder: Builder) -> None:
        self.builder, self.arith = builder, IntegerArithmetic(builder)

    def __call__(self, op: Op, a: Value, b: Value) -> Value:
        return self.arith(op, a, b)

    def greater(self, a: Value, b: Value) -> Value:
        if isinstance(a, Constant) and isinstance(b, Constant):
            return Constant(I1, a.value > b.value)  # type: ignore[operator]
        return self.builder.icmp_sgt(a, b)

    def select(self, condition: Value, a: Value, b: Value) -> Value:
        if isinstance(condition, Constant):
            return a if condition.value else b
        return self.builder.select(condition, a, b)

    def clipped(self, count: Value) -> Value:
        """`imax count, 0`, the frontend's shape of a trip count (folded for a constant)."""
        if isinstance(count, Constant):
            return Constant(I64, max(int(count.value), 0))
        return self.builder.imax(count, 0)


def emit_range_length(builder: Builder, start: Value, stop: Value, step: Value,
                      known: Mapping[Value, Interval]) -> RangeLength:
    """`len(range(start, stop, step))` of i64 values, emitted at `builder` (module docstring). A step that
    may be zero must have been checked before."""
    if all(isinstance(v, Constant) for v in (start, stop, step)):
        a, b, s = (int(v.value) for v in (start, stop, step))  # type: ignore[union-attr]
        count = max(0, -((a - b) // s))  # ceil((b - a) / s): len() of a range that long raises
        if count > I64_MAX:
            builder.assert_(Constant(I1, False), TOO_MANY_ITERATIONS, "OverflowError")
            count = 0
        return RangeLength(Constant(I64, count), count)
    if isinstance(step, Constant) and step.value != I64_MIN:
        upward = step.value > 0  # type: ignore[operator]
        hi, lo = (stop, start) if upward else (start, stop)
        direct = _direct(builder, hi, lo, abs(step.value), known)  # type: ignore[arg-type]
        if direct is not None:
            return direct
    return _wide(builder, start, stop, step, known)


def _direct(builder: Builder, hi: Value, lo: Value, mag: int, known: Mapping[Value, Interval]
            ) -> RangeLength | None:
    """The direct form, when the ranges allow it (module docstring). For mag > 1 it subtracts lo + 1 (which
    folds for a constant lo), not 1 after lo: `range(n - 1, -1, -2)` counts (n - 1) // 2 + 1."""
    arith = _Emitter(builder)
    (hi_low, hi_high), (lo_low, lo_high) = signed_range(hi, known), signed_range(lo, known)
    shift = 1 if mag > 1 else 0
    if lo_high + shift > I64_MAX:
        return None
    lowest = I64_MIN + lo_high + shift  # hi - (lo + shift) >= I64_MIN for every hi at least this
    if hi_low < lowest:
        clamp = 0 if lowest <= 0 <= lo_low else lo_low  # hi <= clamp <= lo: no iteration either way
        if clamp < lowest:
            return None  # lo is not known well enough to clamp hi
        hi, hi_low, hi_high = arith(Op.IMAX, hi, Constant(I64, clamp)), max(hi_low, clamp), max(hi_high, clamp)
    if hi_high - (lo_low + shift) > I64_MAX:
        return None
    distance = arith(Op.ISUB, hi, arith(Op.IADD, lo, Constant(I64, shift)))
    if mag > 1:
        distance = arith(Op.IADD, arith(Op.IFLOORDIV, distance, Constant(I64, mag)), Constant(I64, 1))
    return RangeLength(arith.clipped(distance), max(0, -(-(hi_high - lo_low) // mag)))


def _wide(builder: Builder, start: Value, stop: Value, step: Value, known: Mapping[Value, Interval]
          ) -> RangeLength:
    """The wide form (module docstring)."""
    arith = _Emitter(builder)
    a, b, s = (signed_range(v, known) for v in (start, stop, step))
    if isinstance(step, Constant):
        upward = step.value > 0  # type: ignore[operator]
        hi, lo = (stop, start) if upward else (start, stop)
        mag: Value = Constant(I64, _wrapped(-step.value) if not upward else step.value)  # type: ignore[operator]
        (hi_high, lo_low) = (b[1], a[0]) if upward else (a[1], b[0])
    else:
        up = builder.icmp_sgt(step, 0)
        hi, lo = builder.select(up, stop, start), builder.select(up, start, stop)
        mag = builder.select(up, step, builder.ineg(step))
        hi_high, lo_low = max(a[1], b[1]), min(a[0], b[0])
    least = s[0] if s[0] > 0 else -s[1] if s[1] < 0 else 1  # the smallest |step|
    if isinstance(mag, Constant) and mag.value == 1:
        count = arith(Op.ISUB, hi, lo)
    else:
        span = arith(Op.ISUB, arith(Op.ISUB, hi, lo), Constant(I64, 1))
        signed = isinstance(mag, Constant) and mag.value > 0 and hi_high - lo_low - 1 <= I64_MAX  # type: ignore[operator]
        count = arith(Op.IADD, arith(Op.IFLOORDIV if signed else Op.UDIV, span, mag), Constant(I64, 1))
    raw = arith.select(arith.greater(hi, lo), count, Constant(I64, 0))
    most = max(0, -(-(hi_high - lo_low) // least))
    if most > I64_MAX:
        builder.assert_(builder.icmp_sge(raw, 0), TOO_MANY_ITERATIONS, "OverflowError")
    return RangeLength(arith.clipped(raw), min(most, I64_MAX))


def _wrapped(value: int) -> int:
    """`value` modulo 2^64 as an i64 (-(-2^63) is -2^63: the magnitude 2^63 as an unsigned word)."""
    return (value + 2**63) % 2**64 - 2**63
