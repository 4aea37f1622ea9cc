"""The dependence test of loop fusion (`loop_fusion_legality.py`): may iteration j of loop L1 and iteration i
of loop L2 touch one element, with one of the two accesses a write, other than when j <= i (j == i for
`prange` loops, whose iterations run on different work items)?

    in_order(first, one, second, two, same_iteration, shift)     # first in L1, second in L2: accesses

Each index is read as affine in the loop's induction variable v, `a*v + s + c` (a and c constants, s one
loop-invariant value; `affine_form`): one index with equal coefficients pins j - i to (c2 - c1) / a, whatever
the other indices are (an inner loop's index, say), and one that never agrees rules any conflict out. No
index that pins them: not proven.

An index may also be a row-major position whose leading digit is affine in v (`leading_digit`): AD's tapes
of values computed in inner loops are indexed `(b * E1 + c1) * E2 + c2`, where c1 and c2 are the counters
of loops inside the fused one, around the access, whose trip counts are at most E1 and E2 (loop-invariant
values; in a loop's header, where its counter reaches the trip count t, a radix t + 1), so
0 <= c1 * E2 + c2 < E1 * E2. Two such indices with the same radices E1, E2 are equal only when
their leading digits b are, and those are read as affine forms in turn. The counter of a loop counting up
is its induction variable (0, 1, ... < t); of a reverse loop `v - 1` for its `t, ..., 1` (both in [0, t)
in the loop's body).
"""

from __future__ import annotations

from isozyme.ssa.def_use import operands_first
from isozyme.ssa.ir import Block, Constant, Instruction, Phi, Value
from isozyme.ssa.loops import Loop
from isozyme.ssa.ops import Op
from isozyme.ssa.trip_count import (
    TripCount,
    analyze_trip_count,
    bounded_by,
    is_known_nonnegative,
    is_loop_invariant,
    same_value,
)

Affine = tuple[int, Value | None, int]
"""`a*v + s + c`: the coefficient of the induction variable v, one invariant value s (or none), a constant c."""


def affine_form(root: Value, loop: Loop, iv: Phi) -> Affine | None:
    """`root` as `a*v + s + c` for the induction variable `iv` of `loop`, None when it is not of that form.
    The index ops are evaluated operands first (`operands_first`): a chain of them may be long."""

    def is_leaf(value: Value) -> bool:
        return value is iv or isinstance(value, Constant) or is_loop_invariant(value, loop)

    def inputs(value: Value) -> tuple[Value, ...]:
        if is_leaf(value) or not isinstance(value, Instruction):
            return ()
        return value.operands if value.op in (Op.INEG, Op.IADD, Op.ISUB, Op.IMUL) else ()

    forms: dict[Value, Affine | None] = {}
    for value in operands_first(root, inputs):
        forms[value] = _leaf_form(value, iv) if is_leaf(value) else _combined_form(value, forms)
    return forms[root]


def _leaf_form(value: Value, iv: Phi) -> Affine | None:
    """The form of the induction variable, a constant or a loop-invariant value."""
    if value is iv:
        return 1, None, 0
    if isinstance(value, Constant):
        return (0, None, int(value.value)) if value.type.is_int else None  # type: ignore[union-attr]
    return 0, value, 0


def _combined_form(value: Value, forms: dict[Value, Affine | None]) -> Affine | None:
    """The form of an `ineg`, `iadd`, `isub` or `imul` from its operands' forms (None for other ops)."""
    if isinstance(value, Instruction) and value.op is Op.INEG:
        inner = forms[value.operands[0]]
        return (-inner[0], None, -inner[2]) if inner is not None and inner[1] is None else None
    if not isinstance(value, Instruction) or value.op not in (Op.IADD, Op.ISUB, Op.IMUL):
        return None
    parts = [forms[operand] for operand in value.operands]
    if parts[0] is None or parts[1] is None:
        return None
    (a1, s1, c1), (a2, s2, c2) = parts[0], parts[1]
    if value.op is Op.IMUL:
        if a1 == 0 and s1 is None:  # constant * (a k + s + c)
            scale, (a, s, c) = c1, (a2, s2, c2)
        elif a2 == 0 and s2 is None:
            scale, (a, s, c) = c2, (a1, s1, c1)
        else:
            return None
        return (a * scale, s, c * scale) if s is None or scale == 1 else None
    if value.op is Op.ISUB:
        return (a1 - a2, s1, c1 - c2) if s2 is None else None
    if s1 is not None and s2 is not None:
        return None
    return a1 + a2, s1 if s1 is not None else s2, c1 + c2




def leading_digit(index: Value, loop: Loop, block: Block) -> tuple[Value, list[Value]] | None:
    """`index` as `(...((b * E1 + c1) * E2 + c2)...)`, at least one digit, for an access in `block` of `loop`
    (module docstring): b and the radices [E1, E2, ...], outermost first; None if it is not of that form."""
    radices: list[Value] = []
    inner = _loops_around(block, loop)
    value = index
    while isinstance(value, Instruction) and value.op is Op.IADD:
        for product, counter in (value.operands, value.operands[::-1]):
            if not isinstance(product, Instruction) or product.op is not Op.IMUL:
                continue
            for base, radix in (product.operands, product.operands[::-1]):
                if is_loop_invariant(radix, loop) and any(counts_iterations(counter, trip, head, radix)
                                                          for trip, head in inner):
                    radices.append(radix)
                    value = base
                    break
            else:
                continue
            break
        else:
            break
    return (value, radices[::-1]) if radices else None


def _loops_around(block: Block, loop: Loop) -> list[tuple[TripCount, bool]]:
    """The trip counts of the counted loops inside `loop` that hold `block`, and whether it is their header
    (where a counter counting up reaches its end)."""
    found: list[tuple[TripCount, bool]] = []
    pending = list(loop.children)
    while pending:
        inner = pending.pop()
        if block in inner:
            trip = analyze_trip_count(inner)
            if isinstance(trip, TripCount):
                found.append((trip, block is inner.header))
            pending.extend(inner.children)
    return found


def counts_iterations(counter: Value, trip: TripCount, in_header: bool, radix: Value) -> bool:
    """Is `counter` in [0, radix) where the access is: the loop's counter `0, 1, ... < t` with t the radix
    or `max(radix, 0)` (in the header, where it reaches t, the radix `t + 1` with t known not negative), or
    `v - 1` of a loop `t, t-1, ... != 0` in its body (v in [1, t])?"""
    step, iv = trip.iv.step, trip.iv.phi
    if not isinstance(step, Constant):
        return False
    if step.value == 1 and _is_zero(trip.iv.start) and trip.predicate is Op.ICMP_SLT and counter is iv:
        if not in_header:
            return _at_most(trip.bound, radix)
        return _plus_one(radix, trip.bound)
    if step.value == -1 and _is_zero(trip.bound) and trip.predicate in (Op.ICMP_NE, Op.ICMP_SGT) \
            and not in_header:
        return isinstance(counter, Instruction) and counter.op is Op.ISUB and counter.operands[0] is iv \
            and _is_one(counter.operands[1]) and _at_most(trip.iv.start, radix)
    return False


def _at_most(extent: Value, radix: Value) -> bool:
    """Is `extent` the radix, `max(radix, 0)`, or (known not negative) the radix less one?"""
    return bounded_by(extent, radix) or _plus_one(radix, extent)


def _plus_one(radix: Value, extent: Value) -> bool:
    """Is `radix` `extent + 1`, with `extent` known not negative?"""
    return is_known_nonnegative(extent) and isinstance(radix, Instruction) and radix.op is Op.IADD and any(
        same_value(a, extent) and _is_one(b) for a, b in (radix.operands, radix.operands[::-1]))


def _is_zero(value: Value) -> bool:
    return isinstance(value, Constant) and value.type.is_int and value.value == 0


def _is_one(value: Value) -> bool:
    return isinstance(value, Constant) and value.type.is_int and value.value == 1


def in_order(first: Instruction, one: tuple[Loop, Phi], second: Instruction, two: tuple[Loop, Phi],
             same_iteration: bool, step: int, shift: int = 0) -> bool:
    """Do iteration j of L1 (`one`: the loop and its induction variable) at access `first` and iteration i of
    L2 at `second` reach the same element only when j <= i (only when j == i if `same_iteration`)? One
    index that agrees only at one offset j - i decides it, whatever the other indices are; an index that
    never agrees proves there is no conflict at all (module docstring). L1's counter steps by `step`; in
    iteration i, L2's counter is L1's plus `shift` (mirrored loops)."""
    offsets: set[int] = set()
    for x, y in zip(indices_of(first), indices_of(second), strict=True):
        fx, fy = affine_form(x, *one), affine_form(y, *two)
        if fx is None or fy is None:
            digits_x, digits_y = leading_digit(x, one[0], first.block), leading_digit(y, two[0], second.block)  # type: ignore[arg-type]
            if digits_x is None or digits_y is None or len(digits_x[1]) != len(digits_y[1]) \
                    or not all(map(same_value, digits_x[1], digits_y[1])):
                continue  # unknown: agrees for any pair of iterations, as far as the test knows
            fx, fy = affine_form(digits_x[0], *one), affine_form(digits_y[0], *two)
            if fx is None or fy is None:
                continue
        fy = fy[0], fy[1], fy[2] + fy[0] * shift
        (a1, s1, c1), (a2, s2, c2) = fx, fy
        if s1 is not s2:
            continue
        if a1 == a2 == 0:
            if c1 != c2:
                return True  # this index never agrees: never the same element
            continue
        if a1 != a2:
            continue
        if (c2 - c1) % a1:
            return True
        offsets.add((c2 - c1) // a1)  # j - i
    if not offsets:
        return False  # no index ties the iterations together: not proven
    if len(offsets) > 1:
        return True  # the indices agree for different offsets: never at once
    offset = offsets.pop()  # in values of the induction variable: iterations j - i = offset / step
    return offset == 0 if same_iteration else offset * step <= 0


def indices_of(inst: Instruction) -> tuple[Value, ...]:
    """The indices of a `load`, `store` or `atomic_add`."""
    return inst.operands[1:] if inst.op is Op.LOAD else inst.operands[2:]

