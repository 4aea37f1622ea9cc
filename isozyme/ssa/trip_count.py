"""Trip counts: a loop's canonical induction variable, how many times its body runs, and whether it runs at all.

A loop is *counted* (`analyze_trip_count` gives a `TripCount`) when

  - it has one latch and one entering block, and its header is its only exiting block (no `break`);
  - the header ends in `cbr %c, ...` with one target inside the loop, and the condition for staying (%c, or
    its negation when the loop stays on false) is `icmp.PRED %iv, %bound`, in either operand order;
  - %iv is an i64 phi of the header `[entering: %a, latch: %iv.next]` with `%iv.next = iadd %iv, %s`
    (`iadd %s, %iv`, or `isub %iv, C` for a constant C), the step %s and the bound loop-invariant;
  - PRED goes with the step's direction: `slt`/`sle` with a positive step (a constant > 0, or assumed for
    an invariant step), `sgt`/`sge` with a negative one, `ne` with a constant step of 1 or -1.

The trip count is then Python's `len(range(a, B, s)) = max(0, ceil((B - a) / s))` with the exclusive bound
B (b for slt/sgt, b + 1 for sle, b - 1 for sge), emitted as the i64 instructions the frontend uses for
`range`: `imax(0, ifloordiv(B - a + s - sign(s), s))`, with constants folded and identities dropped. So
the frontend's form (`%k = phi [pre: 0, latch: %k.next]`, `icmp.slt %k, %trip`, `%trip = imax 0, ...`)
has the trip count `%trip` itself. For `ne` it is `b - a` (step 1) or `a - b` (step -1) modulo 2^64: the
loop stops when the wrapping IV reaches the bound, and a negative count stands for 2^63 or more iterations.

Assumptions, as LLVM's `nsw`: the IV and the formula's intermediate values do not overflow i64. A loop whose
IV would wrap runs another number of times than the formula says: the divergence from Python's unbounded
ints that DESIGN 1.1 documents for the frontend's own `range` lowering. With an invariant step of unknown
sign the formula assumes the comparison's direction; with the other sign the loop never leaves by its test
(until the IV wraps) while the formula gives 0, and an emitted count divides by the step, so a zero step
(an endless loop) traps there. Only i64 IVs are recognized.

Anything else is an `UnknownTripCount` whose reason says why ("unknown trip count: the loop also exits from
bb4"). `loop_runs_at_least_once(loop, tree)` proves that the header's exit test lets control into the loop
on entry: by folding the test on the header phis' entry values, or by finding the same test (up to operand
order, `sgt`/`slt` swaps and negation) as a branch condition that holds on the entering edge (a `cbr` that
dominates it, or the entering block's own `cbr`), such as the guard `icmp.slt 0, %trip` that loop-canon
puts in front of a loop that may run zero times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from isozyme.ssa.builder import Builder
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.ir import Argument, Block, Constant, Instruction, Phi, Value
from isozyme.ssa.loops import Loop
from isozyme.ssa.ops import OP_INFO, Op, Syntax
from isozyme.ssa.semantics import evaluate
from isozyme.ssa.types import I64, Type

SWAPPED_PREDICATE: dict[Op, Op] = {
    Op.ICMP_SLT: Op.ICMP_SGT, Op.ICMP_SGT: Op.ICMP_SLT, Op.ICMP_SLE: Op.ICMP_SGE, Op.ICMP_SGE: Op.ICMP_SLE,
    Op.ICMP_EQ: Op.ICMP_EQ, Op.ICMP_NE: Op.ICMP_NE,
    Op.FCMP_OLT: Op.FCMP_OGT, Op.FCMP_OGT: Op.FCMP_OLT, Op.FCMP_OLE: Op.FCMP_OGE, Op.FCMP_OGE: Op.FCMP_OLE,
    Op.FCMP_OEQ: Op.FCMP_OEQ, Op.FCMP_UNE: Op.FCMP_UNE,
}
"""`a PRED b` is `b SWAPPED[PRED] a`."""

NEGATED_PREDICATE: dict[Op, Op] = {
    Op.ICMP_SLT: Op.ICMP_SGE, Op.ICMP_SGE: Op.ICMP_SLT, Op.ICMP_SLE: Op.ICMP_SGT, Op.ICMP_SGT: Op.ICMP_SLE,
    Op.ICMP_EQ: Op.ICMP_NE, Op.ICMP_NE: Op.ICMP_EQ,
}
"""`not (a PRED b)` is `a NEGATED[PRED] b`. Integer predicates only: a float comparison with nan is false
either way round."""

CANONICAL_DIRECTION = frozenset({Op.ICMP_SGT, Op.ICMP_SGE, Op.FCMP_OGT, Op.FCMP_OGE})
"""Predicates that keys rewrite with swapped operands, so `a > b` and `b < a` get one key."""

_STEP_SIGN = {Op.ICMP_SLT: 1, Op.ICMP_SLE: 1, Op.ICMP_SGT: -1, Op.ICMP_SGE: -1}
"""The step direction a staying condition `iv PRED bound` needs to be a counted loop."""

_BOUND_ADJUSTMENT = {Op.ICMP_SLT: 0, Op.ICMP_SGT: 0, Op.ICMP_SLE: 1, Op.ICMP_SGE: -1}
"""What to add to the bound to make it exclusive."""


# --- loop-invariance and the exit test --------------------------------------------------------------------


def is_loop_invariant(value: Value, loop: Loop) -> bool:
    """Is `value` defined outside `loop` (a constant, an argument or an instruction of another block)?"""
    if isinstance(value, (Constant, Argument)):
        return True
    return isinstance(value, Instruction) and value.block is not None and value.block not in loop


@dataclass(eq=False)
class ExitTest:
    """How the header decides: control stays in the loop iff `condition` is `stays_when`."""

    condition: Value
    """The `cbr` operand of the header."""
    stays_when: bool
    """True when the `cbr`'s true target is the one inside the loop."""


def header_exit_test(loop: Loop) -> ExitTest | None:
    """The header's `cbr` test, when exactly one of its targets is outside the loop."""
    terminator = loop.header.terminator
    if terminator is None or terminator.op is not Op.CBR:
        return None
    if_true, if_false = terminator.successors
    if (if_true in loop) == (if_false in loop):
        return None
    return ExitTest(terminator.operands[0], if_true in loop)


def single_entering_block(loop: Loop) -> Block | None:
    return loop.entering_blocks[0] if len(loop.entering_blocks) == 1 else None


SAME_VALUE_DEPTH = 6
"""How deep `same_value` compares two trees of pure ops."""


def same_value(a: Value | None, b: Value, depth: int = 0) -> bool:
    """Are `a` and `b` the same number wherever both are defined: one SSA value, equal constants of one
    type, `dim` of a local array and its extent, or one pure op of the same operands (two copies of a trip
    count `max(d, 0)`, one per inlined callee, before CSE merged them)?"""
    a, b = _extent_of_alloc(a), _extent_of_alloc(b)
    if a is b:
        return True
    if isinstance(a, Constant) and isinstance(b, Constant):
        return a.type == b.type and a.value == b.value
    if not isinstance(a, Instruction) or not isinstance(b, Instruction) or isinstance(a, Phi) \
            or isinstance(b, Phi) or depth >= SAME_VALUE_DEPTH:
        return False
    return a.op is b.op and a.info.pure and a.op not in (Op.LOAD, Op.ALLOC) and a.attrs == b.attrs \
        and a.type == b.type and len(a.operands) == len(b.operands) \
        and all(same_value(x, y, depth + 1) for x, y in zip(a.operands, b.operands, strict=True))


def _extent_of_alloc(value: Value | None) -> Value | None:
    """The extent operand of the local array when `value` is `dim` of an `alloc` (`len(xcentered)` in a
    callee, `d` of `iz.empty(d, f64)`), else `value`."""
    if isinstance(value, Instruction) and value.op is Op.DIM:
        array = value.operands[0]
        if isinstance(array, Instruction) and array.op is Op.ALLOC:
            return array.operands[value.attrs["axis"]]  # type: ignore[index]
    return value


def bounded_by(trip: Value, extent: Value) -> bool:
    """Is the trip count `trip` at most `extent`: the same value, or `max(extent, 0)` (a `range(extent)`)?"""
    if same_value(trip, extent):
        return True
    return isinstance(trip, Instruction) and trip.op is Op.IMAX and any(
        same_value(a, extent) and isinstance(b, Constant) and b.value == 0
        for a, b in (trip.operands, trip.operands[::-1]))


def is_known_nonnegative(value: Value) -> bool:
    """A cheap proof that an i64 value is >= 0: a constant, a `dim`, or `imax` with such an operand."""
    work = [value]  # the operands of `imax`s, from a stack: `max(a, b, c, ...)` is a chain of them
    while work:
        value = work.pop()
        if isinstance(value, Constant):
            if value.type.is_int and value.value >= 0:  # type: ignore[operator]
                return True
        elif isinstance(value, Instruction) and value.op is Op.DIM:
            return True
        elif isinstance(value, Instruction) and value.op is Op.IMAX:
            work += reversed(value.operands)
    return False


# --- the induction variable and the trip count -------------------------------------------------------------


@dataclass(eq=False)
class InductionVariable:
    """A header phi that starts at `start` and grows by the invariant `step` on every back edge."""

    phi: Phi
    """The header phi."""
    start: Value
    """Its value on entry (from the entering block)."""
    step: Value
    """The loop-invariant amount added per iteration (a constant for `isub %iv, C`: -C)."""
    increment: Instruction
    """`%iv.next`, the phi's value from the latch."""

    @property
    def constant_step(self) -> int | None:
        return self.step.value if isinstance(self.step, Constant) else None  # type: ignore[return-value]


def induction_variable(loop: Loop, value: Value) -> InductionVariable | None:
    """`value` as an i64 induction variable of `loop` (module docstring), or None."""
    entering = single_entering_block(loop)
    if not isinstance(value, Phi) or value.block is not loop.header or value.type != I64:
        return None
    if entering is None or len(loop.latches) != 1 or len(value.operands) != 2:
        return None
    try:
        start, increment = value.incoming_value(entering), value.incoming_value(loop.latches[0])
    except KeyError:
        return None
    step = _step_of(increment, value, loop)
    return InductionVariable(value, start, step, increment) if step is not None else None  # type: ignore[arg-type]


def _step_of(increment: Value, phi: Phi, loop: Loop) -> Value | None:
    """The step of `increment` = `phi + step` (or `phi - C`), when the step is loop-invariant."""
    if not isinstance(increment, Instruction):
        return None
    operands = increment.operands
    if increment.op is Op.IADD and phi in operands:
        step = operands[1] if operands[0] is phi else operands[0]
        return step if is_loop_invariant(step, loop) and step is not phi else None
    if increment.op is Op.ISUB and operands[0] is phi and isinstance(operands[1], Constant):
        return Constant(I64, -operands[1].value)  # type: ignore[operator]
    return None


@dataclass(frozen=True)
class UnknownTripCount:
    """The analysis could not count the loop's iterations."""

    reason: str
    """Why, for diagnostics."""

    def __str__(self) -> str:
        return f"unknown trip count: {self.reason}"


@dataclass(eq=False)
class TripCount:
    """A counted loop: the body runs once per value of `iv` for which `iv predicate bound` holds."""

    loop: Loop
    """The counted loop."""
    iv: InductionVariable
    """The induction variable the exit test compares."""
    bound: Value
    """The loop-invariant value it is compared with."""
    predicate: Op
    """The condition for staying in the loop, with the IV on the left (`icmp.slt`: `iv < bound`)."""

    @property
    def is_canonical(self) -> bool:
        """Does the IV count 0, 1, 2, ... up to the bound (`slt`, or `ne`)?"""
        start, step = self.iv.start, self.iv.constant_step
        zero_based = isinstance(start, Constant) and start.value == 0
        return zero_based and step == 1 and self.predicate in (Op.ICMP_SLT, Op.ICMP_NE)

    def constant(self) -> int | None:
        """The trip count when it folds to a constant."""
        try:
            count = self._count(IntegerArithmetic(None))
        except _NeedsCode:
            return None
        return count.value if isinstance(count, Constant) else None  # type: ignore[return-value]

    def evaluate(self, value_of: Callable[[Value], int]) -> int:
        """The trip count, with `value_of` giving the values of the bound, start and step that are not
        constants (it raises what it raises for a value it does not know)."""
        count = self._count(_EvaluatingArithmetic(value_of))
        return count.value  # type: ignore[return-value]

    def emit(self, builder: Builder) -> Value:
        """The trip count as an i64 value, emitting at `builder` what is not already a value."""
        count = self._count(IntegerArithmetic(builder))
        if isinstance(count, Instruction) and count.block is builder.block and count.name is None:
            count.name = "trip"
        return count

    def emit_in_preheader(self) -> Value:
        """The trip count, emitted at the end of the loop's preheader (which loop-canon guarantees)."""
        preheader = self.loop.preheader
        if preheader is None or preheader.terminator is None:
            raise ValueError("the loop has no preheader: run loop-canon first")
        return self.emit(Builder().before(preheader.terminator))

    def _count(self, arith: IntegerArithmetic) -> Value:
        start, step = self.iv.start, self.iv.step
        if self.predicate is Op.ICMP_NE:
            # Steps of +-1 only (the analysis checks): the distance to the bound, modulo 2^64.
            upward = self.iv.constant_step == 1
            return arith(Op.ISUB, self.bound, start) if upward else arith(Op.ISUB, start, self.bound)
        bound = arith(Op.IADD, self.bound, _i64(_BOUND_ADJUSTMENT[self.predicate]))
        sign = _STEP_SIGN[self.predicate]
        if isinstance(step, Constant):
            adjust: Value = _i64(step.value - sign)  # type: ignore[operator]
        else:
            adjust = arith(Op.ISUB, step, _i64(sign))
        span = arith(Op.IADD, arith(Op.ISUB, bound, start), adjust)
        return arith(Op.IMAX, _i64(0), arith(Op.IFLOORDIV, span, step))


def _i64(value: int) -> Constant:
    return Constant(I64, value)


class _NeedsCode(Exception):
    """Raised by a folding-only `IntegerArithmetic` when a result is not a constant."""


_RIGHT_IDENTITY = {Op.IADD: 0, Op.ISUB: 0, Op.IMUL: 1, Op.IFLOORDIV: 1}
_LEFT_IDENTITY = {Op.IADD: 0, Op.IMUL: 1}


class IntegerArithmetic:
    """i64 arithmetic that folds constants and drops identities (`x + 0`, `x * 1`, `imax(0, n)` for a known
    non-negative n); it emits the rest at `builder`, or raises `_NeedsCode` without one."""

    def __init__(self, builder: Builder | None) -> None:
        self.builder = builder

    def __call__(self, op: Op, a: Value, b: Value) -> Value:
        if isinstance(a, Constant) and isinstance(b, Constant):
            return _i64(evaluate(op, I64, [a.value, b.value]))  # type: ignore[arg-type]
        if isinstance(b, Constant) and _RIGHT_IDENTITY.get(op) == b.value:
            return a
        if isinstance(a, Constant) and _LEFT_IDENTITY.get(op) == a.value:
            return b
        if op is Op.IMAX and isinstance(a, Constant) and a.value == 0 and is_known_nonnegative(b):
            return b
        if self.builder is None:
            raise _NeedsCode
        return self.builder.emit(op, a, b)


class _EvaluatingArithmetic:
    """i64 arithmetic on the values a function gives (`TripCount.evaluate`)."""

    def __init__(self, value_of: Callable[[Value], int]) -> None:
        self.value_of = value_of

    def __call__(self, op: Op, a: Value, b: Value) -> Value:
        operands = [x.value if isinstance(x, Constant) else self.value_of(x) for x in (a, b)]
        return _i64(evaluate(op, I64, operands))  # type: ignore[arg-type]


def analyze_trip_count(loop: Loop) -> TripCount | UnknownTripCount:
    """Recognize the loop's induction variable and bound (module docstring), or say why not."""
    if len(loop.latches) != 1:
        return UnknownTripCount("the loop has several latches (run loop-canon)")
    if single_entering_block(loop) is None:
        return UnknownTripCount("the loop has several entering blocks (run loop-canon)")
    others = [block for block in loop.exiting_blocks if block is not loop.header]
    if others:
        return UnknownTripCount(f"the loop also exits from {others[0].name or 'a block other than its header'}")
    test = header_exit_test(loop)
    condition = test.condition if test is not None else None
    if test is None or not isinstance(condition, Instruction) or condition.op not in NEGATED_PREDICATE:
        return UnknownTripCount("the header's exit test is not an integer comparison")
    predicate = condition.op if test.stays_when else NEGATED_PREDICATE[condition.op]
    lhs, rhs = condition.operands
    for iv_value, bound, pred in ((lhs, rhs, predicate), (rhs, lhs, SWAPPED_PREDICATE[predicate])):
        iv = induction_variable(loop, iv_value)
        if iv is not None and is_loop_invariant(bound, loop):
            problem = _direction_problem(iv, pred)
            return UnknownTripCount(problem) if problem else TripCount(loop, iv, bound, pred)
    return UnknownTripCount("the exit test does not compare an induction variable with an invariant bound")


def _direction_problem(iv: InductionVariable, predicate: Op) -> str | None:
    """Why `iv predicate bound` with this step is not a counted loop, or None when it is."""
    step = iv.constant_step
    if predicate is Op.ICMP_NE:
        return None if step in (1, -1) else "an `ne` exit test needs a constant step of 1 or -1"
    if predicate not in _STEP_SIGN:
        return f"the loop stays while {predicate}: it runs at most once"
    if step is not None and (step == 0 or (step > 0) != (_STEP_SIGN[predicate] > 0)):
        return f"the step {step} moves away from the bound of an {predicate} test"
    return None


# --- does the loop run at least once? ------------------------------------------------------------------------

Key = tuple
"""A structural name of a value: equal keys mean equal values (module docstring of `_EntryKeys`)."""

MAX_KEY_DEPTH = 12
"""How deep keys look through pure instructions; deeper values are named by identity (sound, less precise)."""


def constant_key(ty: Type, value: int | float | bool) -> Key:
    """A constant's key: floats by their bits (hex), so -0.0 and 0.0 differ and nan equals nan."""
    return ("const", ty, value.hex() if isinstance(value, float) else value)


def _key_constant(key: Key) -> int | float | bool | None:
    if key[0] != "const":
        return None
    return float.fromhex(key[2]) if isinstance(key[2], str) else key[2]


def comparison_key(op: Op, ty: Type, a: Key, b: Key) -> Key:
    """The key of `a op b` in its canonical direction, so swapped comparisons get equal keys."""
    if op in CANONICAL_DIRECTION:
        op, a, b = SWAPPED_PREDICATE[op], b, a
    elif OP_INFO[op].commutative:
        a, b = sorted((a, b), key=repr)
    if op is Op.ICMP_SLT and a[0] == "const" and b[0] == Op.IMAX:
        # c < max(d, x) with d <= c is c < x: the guard `0 < n` proves `0 < imax(0, n)`.
        bound, other = _split_constant(b[3])
        if bound is not None and bound <= _key_constant(a):  # type: ignore[operator]
            b = other
    return (op, ty, (), (a, b))


def _split_constant(operands: tuple[Key, Key]) -> tuple[int | None, Key]:
    """For `imax` operand keys: the constant operand and the other one, if one is constant."""
    first, second = operands
    if first[0] == "const":
        return _key_constant(first), second  # type: ignore[return-value]
    if second[0] == "const":
        return _key_constant(second), first  # type: ignore[return-value]
    return None, first


class _EntryKeys:
    """Keys of values as they are when control first reaches the header of `loop` from `entering`.

    A header phi stands for its entering value, a pure instruction (in the header or outside the loop) for
    its op applied to its operands' keys (folded when they are constants), anything else outside the loop
    for itself. Values the loop computes otherwise have no entry key (None)."""

    def __init__(self, loop: Loop, entering: Block) -> None:
        self.loop = loop
        self.entering = entering
        self.memo: dict[Value, Key | None] = {}

    def key(self, value: Value, depth: int = 0) -> Key | None:
        if isinstance(value, Constant):
            return constant_key(value.type, value.value)
        if value not in self.memo:
            self.memo[value] = self._compute(value, depth)
        return self.memo[value]

    def _compute(self, value: Value, depth: int) -> Key | None:
        if isinstance(value, Phi) and value.block is self.loop.header:
            return self.key(value.incoming_value(self.entering), depth + 1)
        inside = not is_loop_invariant(value, self.loop)
        computable = isinstance(value, Instruction) and is_scalar_op(value) and depth < MAX_KEY_DEPTH
        if inside and not (computable and value.block is self.loop.header):  # type: ignore[union-attr]
            return None
        if not computable:
            return ("value", id(value))
        operands = [self.key(operand, depth + 1) for operand in value.operands]  # type: ignore[union-attr]
        if any(operand is None for operand in operands):
            return None
        return instruction_key(value, operands)  # type: ignore[arg-type]


def is_scalar_op(inst: Instruction) -> bool:
    """An op on scalars without memory effects (it may trap: `ifloordiv`), with a row in `semantics`."""
    info = inst.info
    return info.syntax in (Syntax.OPERANDS, Syntax.CAST) and not (info.reads_memory or info.writes_memory)


def instruction_key(inst: Instruction, operands: list[Key]) -> Key:
    """The key of a scalar instruction from its operands' keys: folded when they are all constants."""
    values = [_key_constant(operand) for operand in operands]
    if all(value is not None for value in values):
        try:
            return constant_key(inst.type, evaluate(inst.op, inst.type, values))  # type: ignore[arg-type]
        except (ArithmeticError, ValueError):
            pass  # the op traps on these constants: keep it symbolic
    if inst.op in SWAPPED_PREDICATE:
        return comparison_key(inst.op, inst.type, operands[0], operands[1])
    if OP_INFO[inst.op].commutative:
        operands = sorted(operands, key=repr)
    return (inst.op, inst.type, (), tuple(operands))


def _fact(key: Key, truth: bool) -> tuple[Key, bool]:
    """A known condition in a normal form: integer comparisons are stated as true."""
    if not truth and key[0] in NEGATED_PREDICATE:
        a, b = key[3]
        return comparison_key(NEGATED_PREDICATE[key[0]], key[1], a, b), True
    return key, truth


def _with_consequences(fact: tuple[Key, bool]) -> list[tuple[Key, bool]]:
    """`a and b` true gives `a`, `b` true; `a or b` false gives both false."""
    key, truth = fact
    if (key[0] is Op.AND and truth) or (key[0] is Op.OR and not truth):
        return [fact, *(f for operand in key[3] for f in _with_consequences(_fact(operand, truth)))]
    return [fact]


def dominating_conditions(block: Block, tree: DominatorTree, successor: Block | None = None
                          ) -> Iterator[tuple[Value, bool]]:
    """Branch conditions known in `block` (on its edge to `successor`, when given): (condition, value) for
    the edge itself and for every block on `block`'s dominator chain entered only by one edge of a `cbr`,
    nearest first, one at a time (the walk up the chain stops when the caller does)."""
    terminator = block.terminator
    if successor is not None and terminator is not None and terminator.op is Op.CBR:
        yield terminator.operands[0], terminator.successors[0] is successor
    current: Block | None = block
    while current is not None:
        preds = [pred for pred in tree.preds[current] if tree.is_reachable(pred)]
        terminator = preds[0].terminator if len(preds) == 1 else None
        if terminator is not None and terminator.op is Op.CBR:
            yield terminator.operands[0], terminator.successors[0] is current
        current = tree.idom.get(current)


def loop_entry_test_value(loop: Loop) -> bool | None:
    """Whether control enters the loop's body on entry, when the header's test folds to a constant."""
    test, entering = header_exit_test(loop), single_entering_block(loop)
    if test is None or entering is None:
        return None
    key = _EntryKeys(loop, entering).key(test.condition)
    value = _key_constant(key) if key is not None else None
    return None if value is None else bool(value) == test.stays_when


def loop_runs_at_least_once(loop: Loop, tree: DominatorTree) -> bool:
    """Is the header's exit test known to send control into the loop the first time (module docstring)?"""
    test, entering = header_exit_test(loop), single_entering_block(loop)
    if test is None:
        # A header that does not exit always goes on into the loop.
        return entering is not None and all(succ in loop for succ in loop.header.successors)
    if entering is None:
        return False
    keys = _EntryKeys(loop, entering)
    wanted_key = keys.key(test.condition)
    if wanted_key is None:
        return False
    constant = _key_constant(wanted_key)
    if constant is not None:
        return bool(constant) == test.stays_when
    wanted = _fact(wanted_key, test.stays_when)
    # nearest first: a guard (loop-canon's) is the condition on the entering block's own edge
    return any(wanted in _with_consequences(_fact(key, truth))
               for condition, truth in dominating_conditions(entering, tree, loop.header)
               if (key := keys.key(condition)) is not None)

