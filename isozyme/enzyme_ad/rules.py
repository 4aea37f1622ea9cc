"""The derivative rule table: one reverse rule and one tangent rule per differentiable op (DESIGN 5, STYLE 8:
rules are data). The tangent rules of forward mode (`TANGENT_RULES`) are the last section of this file.

A reverse rule receives a `RuleContext` for one active instruction and the adjoint `d` of its result (for
`store` and `atomic_add`, which have none: None) and adds each active operand's contribution with
`r.add(i, contribution)`. It asks for primal values through `r.operand(i)` and `r.result()`, which the
cache planner (`cache.py`) answers by using, recomputing or taping them, so a rule asks only for what its
formula needs. Integer ops, comparisons and `dim` are never active and have no rule. An active op without
a rule is a `DifferentiationError` naming the op and the source line.

Choices at the edges (each one JAX's, and Enzyme's where Enzyme defines one):
- `sqrt` at 0: `d / (2 sqrt(x))`, +inf for a nonzero seed (nan for a zero seed, as 0 * inf).
- `fabs` (and `abs`) at 0: 0, the subgradient of smallest norm (JAX's `sign(x)`).
- `min`/`max` (`fmin`/`fmax`) and `select`: the adjoint goes to the operand that was returned; for
  `min(a, b)` that is `a` unless `b < a` (Python's rule), so a tie sends it all to `a`.
- `pow(x, y)`: with respect to x, `y * x**(y-1)`, and 0 where `y == 0` (so `x**0` has no nan at x = 0);
  with respect to y, `x**y * log(x)` with `log(x)` taken as 0 where `x == 0` (JAX's `_replace_zero`).
- `atan2(y, x)`: `(x, -y) / (x*x + y*y)`, nan at the origin.
- `floor`, `ceil`, `//` on floats: derivative 0 (piecewise constant); `%` on floats: `a - floor(a/b)*b`,
  so `(1, -floor(a/b))`.
- `fpext`/`fptrunc`: the adjoint is converted back to the operand's type.
- `load x[i]`: `d_x[i] += d`; `store v, x[i]`: `d_v += d_x[i]`, then `d_x[i] = 0` (the store overwrote
  what `x[i]` held, so that value's adjoint ends here); `atomic_add v, x[i]`: `d_v += d_x[i]`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from isozyme.ssa.builder import Builder
from isozyme.ssa.ir import Constant, Instruction, Value
from isozyme.ssa.ops import Op

TWO_OVER_SQRT_PI = 1.1283791670955126
"""d/dx erf(x) = 2/sqrt(pi) * exp(-x*x)."""


class RuleContext(Protocol):
    """What a rule may use (implemented by the reverse pass)."""

    b: Builder
    """Emits the rule's code in the reverse block."""
    inst: Instruction
    """The primal instruction being differentiated."""

    def operand(self, index: int) -> Value:
        """Primal operand `index`, as it was in the iteration being reversed."""

    def result(self) -> Value:
        """The instruction's primal result, as it was in the iteration being reversed."""

    def active(self, index: int) -> bool:
        """Does operand `index` carry a derivative?"""

    def add(self, index: int, contribution: Value) -> None:
        """Add `contribution` to the adjoint of operand `index` (nothing when it is not active)."""

    def shadow_element(self) -> tuple[Value, list[Value]]:
        """For a memory op: the shadow of its array and the (reverse-side) indices."""


ReverseRule = Callable[[RuleContext, "Value | None"], None]


# --- arithmetic ----------------------------------------------------------------------------------------------


def _fadd(r: RuleContext, d: Value) -> None:
    r.add(0, d)
    r.add(1, d)


def _fsub(r: RuleContext, d: Value) -> None:
    r.add(0, d)
    if r.active(1):
        r.add(1, r.b.fneg(d))


def _fmul(r: RuleContext, d: Value) -> None:
    if r.active(0):
        r.add(0, r.b.fmul(d, r.operand(1)))
    if r.active(1):
        r.add(1, r.b.fmul(d, r.operand(0)))


def _fdiv(r: RuleContext, d: Value) -> None:
    """q = a / b: da = d / b, db = -d * a / (b * b)."""
    b = r.b
    divisor = r.operand(1)
    quotient = b.fdiv(d, divisor)
    r.add(0, quotient)
    if r.active(1):
        r.add(1, b.fneg(b.fdiv(b.fmul(quotient, r.operand(0)), divisor)))


def _fneg(r: RuleContext, d: Value) -> None:
    r.add(0, r.b.fneg(d))


def _ffloordiv(r: RuleContext, d: Value) -> None:
    """Piecewise constant: no contribution."""


def _ffloormod(r: RuleContext, d: Value) -> None:
    r.add(0, d)
    if r.active(1):
        r.add(1, r.b.fneg(r.b.fmul(d, r.b.ffloordiv(r.operand(0), r.operand(1)))))


def _select_by(r: RuleContext, d: Value, first_taken: Value, first: int, second: int) -> None:
    """Send `d` to operand `first` where `first_taken`, else to operand `second`."""
    b = r.b
    zero = 0.0
    if r.active(first):
        r.add(first, b.select(first_taken, d, zero))
    if r.active(second):
        r.add(second, b.select(first_taken, zero, d))


def _select(r: RuleContext, d: Value) -> None:
    _select_by(r, d, r.operand(0), 1, 2)


def _fmin(r: RuleContext, d: Value) -> None:
    """Python's min(a, b) is b if b < a else a."""
    _select_by(r, d, r.b.fcmp_olt(r.operand(1), r.operand(0)), 1, 0)


def _fmax(r: RuleContext, d: Value) -> None:
    """Python's max(a, b) is b if b > a else a."""
    _select_by(r, d, r.b.fcmp_ogt(r.operand(1), r.operand(0)), 1, 0)


def _fabs(r: RuleContext, d: Value) -> None:
    b = r.b
    x = r.operand(0)
    signed = b.select(b.fcmp_olt(x, 0.0), b.fneg(d), d)
    r.add(0, b.select(b.fcmp_oeq(x, 0.0), 0.0, signed))


def _pow(r: RuleContext, d: Value) -> None:
    b = r.b
    x, y = r.operand(0), r.operand(1)
    if r.active(0):
        slope = b.fmul(y, b.pow(x, b.fsub(y, 1.0)))
        r.add(0, b.fmul(d, b.select(b.fcmp_oeq(y, 0.0), 0.0, slope)))
    if r.active(1):
        safe_x = b.select(b.fcmp_oeq(x, 0.0), 1.0, x)
        r.add(1, b.fmul(d, b.fmul(r.result(), b.log(safe_x))))


def _atan2(r: RuleContext, d: Value) -> None:
    """z = atan2(y, x): dz/dy = x / (x*x + y*y), dz/dx = -y / (x*x + y*y)."""
    b = r.b
    y, x = r.operand(0), r.operand(1)
    scaled = b.fdiv(d, b.fadd(b.fmul(x, x), b.fmul(y, y)))
    if r.active(0):
        r.add(0, b.fmul(scaled, x))
    if r.active(1):
        r.add(1, b.fneg(b.fmul(scaled, y)))


def _cast_back(op: Op) -> ReverseRule:
    def rule(r: RuleContext, d: Value) -> None:
        r.add(0, r.b.cast(op, d, r.inst.operands[0].type))  # type: ignore[arg-type]
    return rule


# --- math functions: d/dx f(x) from x and y = f(x) -----------------------------------------------------------

Derivative = Callable[[Builder, Callable[[], Value], Callable[[], Value]], Value]
"""`derivative(b, x, y)`: f'(x), with `x()` and `y()` fetching the operand and the result on demand."""


def _one_minus_square(b: Builder, v: Value) -> Value:
    return b.fsub(1.0, b.fmul(v, v))


UNARY_DERIVATIVES: dict[Op, Derivative] = {
    Op.SQRT: lambda b, x, y: b.fdiv(0.5, y()),
    Op.EXP: lambda b, x, y: y(),
    Op.LOG: lambda b, x, y: b.fdiv(1.0, x()),
    Op.LOG1P: lambda b, x, y: b.fdiv(1.0, b.fadd(x(), 1.0)),
    Op.EXPM1: lambda b, x, y: b.fadd(y(), 1.0),
    Op.SIN: lambda b, x, y: b.cos(x()),
    Op.COS: lambda b, x, y: b.fneg(b.sin(x())),
    Op.TAN: lambda b, x, y: b.fadd(1.0, b.fmul(y(), y())),
    Op.TANH: lambda b, x, y: _one_minus_square(b, y()),
    Op.SIGMOID: lambda b, x, y: b.fmul(y(), b.fsub(1.0, y())),
    Op.SINH: lambda b, x, y: b.cosh(x()),
    Op.COSH: lambda b, x, y: b.sinh(x()),
    Op.ASIN: lambda b, x, y: b.fdiv(1.0, b.sqrt(_one_minus_square(b, x()))),
    Op.ACOS: lambda b, x, y: b.fdiv(-1.0, b.sqrt(_one_minus_square(b, x()))),
    Op.ATAN: lambda b, x, y: b.fdiv(1.0, b.fadd(1.0, b.fmul(x(), x()))),
    Op.ERF: lambda b, x, y: b.fmul(TWO_OVER_SQRT_PI, b.exp(b.fneg(b.fmul(x(), x())))),
}
"""f'(x) for each unary math function (d/dx of `fabs`, `floor` and `ceil` are rules of their own)."""


def _unary(derivative: Derivative) -> ReverseRule:
    def rule(r: RuleContext, d: Value) -> None:
        slope = derivative(r.b, lambda: r.operand(0), r.result)
        r.add(0, r.b.fmul(d, slope))
    return rule


def _zero(r: RuleContext, d: Value) -> None:
    """A piecewise constant function: no contribution."""


# --- memory ----------------------------------------------------------------------------------------------------


def _load(r: RuleContext, d: Value) -> None:
    shadow, indices = r.shadow_element()
    b = r.b
    b.store(b.fadd(b.load(shadow, *indices), d), shadow, *indices)


def _store(r: RuleContext, d: Value | None) -> None:
    shadow, indices = r.shadow_element()
    b = r.b
    if r.active(0):
        r.add(0, b.load(shadow, *indices))
    b.store(0.0, shadow, *indices)


def _atomic_add(r: RuleContext, d: Value | None) -> None:
    shadow, indices = r.shadow_element()
    if r.active(0):
        r.add(0, r.b.load(shadow, *indices))


REVERSE_RULES: dict[Op, ReverseRule] = {
    Op.FADD: _fadd,
    Op.FSUB: _fsub,
    Op.FMUL: _fmul,
    Op.FDIV: _fdiv,
    Op.FNEG: _fneg,
    Op.FFLOORDIV: _ffloordiv,
    Op.FFLOORMOD: _ffloormod,
    Op.FMIN: _fmin,
    Op.FMAX: _fmax,
    Op.FABS: _fabs,
    Op.FLOOR: _zero,
    Op.CEIL: _zero,
    Op.SELECT: _select,
    Op.POW: _pow,
    Op.ATAN2: _atan2,
    Op.FPEXT: _cast_back(Op.FPTRUNC),
    Op.FPTRUNC: _cast_back(Op.FPEXT),
    **{op: _unary(derivative) for op, derivative in UNARY_DERIVATIVES.items()},
    Op.LOAD: _load,
    Op.STORE: _store,
    Op.ATOMIC_ADD: _atomic_add,
    Op.ALLOC: _zero,  # an active local array: its shadow is allocated in the forward pass
}
"""The reverse rule of every differentiable op; `phi` is handled by the reverse pass (adjoint flow along
the reversed edges), `call` by inlining first."""


# === forward mode: tangent rules ===============================================================================
#
# A tangent rule receives a `TangentContext` for one active instruction and returns the tangent of its result
# (for an array result, its shadow), or None where that tangent is zero (or the op has no result: `store`,
# `atomic_add`). It reads the operands' tangents through `t.tangent(i)`, None for an operand that carries none,
# so a rule emits only the terms that can be nonzero. The forward pass inserts the rule's code right after
# the instruction. The edge choices are those of the reverse rules above (module docstring): `fabs` at 0
# has slope 0, `min`/`max`/`select` pass on the tangent of the operand they returned (a tie: the first),
# `pow` has no nan at `x == 0` for `y == 0` (and takes `log(0)` as 0), `floor`, `ceil`, `//` have slope 0.


class TangentContext(Protocol):
    """What a tangent rule may use (implemented by the forward pass)."""

    b: Builder
    """Emits the rule's code right after the primal instruction."""
    inst: Instruction
    """The primal instruction being differentiated."""

    def operand(self, index: int) -> Value:
        """Primal operand `index`."""

    def active(self, index: int) -> bool:
        """Does operand `index` carry a derivative?"""

    def tangent(self, index: int) -> Value | None:
        """The tangent of scalar operand `index`; None when it is not active (its tangent is zero)."""

    def shadow(self, index: int) -> Value:
        """The shadow of array operand `index`."""


TangentRule = Callable[[TangentContext], "Value | None"]


def _scaled(b: Builder, tangent: Value | None, factor: Value) -> Value | None:
    return None if tangent is None else b.fmul(tangent, factor)


def _negated(b: Builder, tangent: Value | None) -> Value | None:
    return None if tangent is None else b.fneg(tangent)


def _sum(b: Builder, *terms: Value | None) -> Value | None:
    """The sum of the nonzero terms; None when every term is zero."""
    present = [term for term in terms if term is not None]
    if not present:
        return None
    total = present[0]
    for term in present[1:]:
        total = b.fadd(total, term)
    return total


def _difference(b: Builder, a: Value | None, c: Value | None) -> Value | None:
    if c is None:
        return a
    return b.fneg(c) if a is None else b.fsub(a, c)


def _tangent_fadd(t: TangentContext) -> Value | None:
    return _sum(t.b, t.tangent(0), t.tangent(1))


def _tangent_fsub(t: TangentContext) -> Value | None:
    return _difference(t.b, t.tangent(0), t.tangent(1))


def _tangent_fmul(t: TangentContext) -> Value | None:
    return _sum(t.b, _scaled(t.b, t.tangent(0), t.operand(1)), _scaled(t.b, t.tangent(1), t.operand(0)))


def _tangent_fdiv(t: TangentContext) -> Value | None:
    """q = a / b: dq = (da - q * db) / b."""
    b = t.b
    numerator = _difference(b, t.tangent(0), _scaled(b, t.tangent(1), t.inst))
    return None if numerator is None else b.fdiv(numerator, t.operand(1))


def _tangent_fneg(t: TangentContext) -> Value | None:
    return _negated(t.b, t.tangent(0))


def _tangent_ffloormod(t: TangentContext) -> Value | None:
    """a % b = a - floor(a / b) * b, floor piecewise constant."""
    b = t.b
    db = t.tangent(1)
    return _difference(b, t.tangent(0), None if db is None else b.fmul(db, b.ffloordiv(t.operand(0), t.operand(1))))


def _tangent_zero(t: TangentContext) -> Value | None:
    """A piecewise constant function: tangent zero."""
    return None


def _chosen(t: TangentContext, first_taken: Value, first: int, second: int) -> Value | None:
    """The tangent of operand `first` where `first_taken`, else that of operand `second`."""
    d_first, d_second = t.tangent(first), t.tangent(second)
    if d_first is None and d_second is None:
        return None
    zero = Constant(t.inst.type, 0.0)
    return t.b.select(first_taken, zero if d_first is None else d_first, zero if d_second is None else d_second)


def _tangent_select(t: TangentContext) -> Value | None:
    return _chosen(t, t.operand(0), 1, 2)


def _tangent_fmin(t: TangentContext) -> Value | None:
    """Python's min(a, b) is b if b < a else a."""
    if t.tangent(0) is None and t.tangent(1) is None:
        return None
    return _chosen(t, t.b.fcmp_olt(t.operand(1), t.operand(0)), 1, 0)


def _tangent_fmax(t: TangentContext) -> Value | None:
    """Python's max(a, b) is b if b > a else a."""
    if t.tangent(0) is None and t.tangent(1) is None:
        return None
    return _chosen(t, t.b.fcmp_ogt(t.operand(1), t.operand(0)), 1, 0)


def _tangent_fabs(t: TangentContext) -> Value | None:
    b, d = t.b, t.tangent(0)
    if d is None:
        return None
    x = t.operand(0)
    signed = b.select(b.fcmp_olt(x, 0.0), b.fneg(d), d)
    return b.select(b.fcmp_oeq(x, 0.0), 0.0, signed)


def _tangent_pow(t: TangentContext) -> Value | None:
    b = t.b
    x, y = t.operand(0), t.operand(1)
    d_base = d_exponent = None
    if t.tangent(0) is not None:
        slope = b.fmul(y, b.pow(x, b.fsub(y, 1.0)))
        d_base = b.fmul(t.tangent(0), b.select(b.fcmp_oeq(y, 0.0), 0.0, slope))
    if t.tangent(1) is not None:
        safe_x = b.select(b.fcmp_oeq(x, 0.0), 1.0, x)
        d_exponent = b.fmul(t.tangent(1), b.fmul(t.inst, b.log(safe_x)))
    return _sum(b, d_base, d_exponent)


def _tangent_atan2(t: TangentContext) -> Value | None:
    """z = atan2(y, x): dz = (x dy - y dx) / (x*x + y*y)."""
    b = t.b
    y, x = t.operand(0), t.operand(1)
    numerator = _difference(b, _scaled(b, t.tangent(0), x), _scaled(b, t.tangent(1), y))
    return None if numerator is None else b.fdiv(numerator, b.fadd(b.fmul(x, x), b.fmul(y, y)))


def _tangent_cast(t: TangentContext) -> Value | None:
    """fpext/fptrunc: the tangent converted like the value."""
    d = t.tangent(0)
    return None if d is None else t.b.cast(t.inst.op, d, t.inst.type)  # type: ignore[arg-type]


def _tangent_unary(derivative: Derivative) -> TangentRule:
    def rule(t: TangentContext) -> Value | None:
        d = t.tangent(0)
        return None if d is None else t.b.fmul(d, derivative(t.b, lambda: t.operand(0), lambda: t.inst))
    return rule


def _tangent_load(t: TangentContext) -> Value | None:
    return t.b.load(t.shadow(0), *t.inst.operands[1:])


def _tangent_store(t: TangentContext) -> Value | None:
    """The stored value's tangent goes to the shadow (0 for a constant: the old tangent is overwritten)."""
    d = t.tangent(0)
    t.b.store(0.0 if d is None else d, t.shadow(1), *t.inst.operands[2:])
    return None


def _tangent_atomic_add(t: TangentContext) -> Value | None:
    d = t.tangent(0)
    if d is not None:
        t.b.atomic_add(d, t.shadow(1), *t.inst.operands[2:])
    return None


def _tangent_alloc(t: TangentContext) -> Value | None:
    """An active local array: a shadow of the same extents and flags (`growable` too), zeroed."""
    inst = t.inst
    shadow = Instruction(inst.type, op=Op.ALLOC, operands=inst.operands, attrs=dict(inst.attrs),
                         flags=inst.flags | {"zeroed"}, name=f"d_{inst.name or 'local'}")
    return t.b.insert(shadow)


def _tangent_mirror(t: TangentContext) -> Value | None:
    """An op that reshapes an active array (`grow`): the same op on its shadow; an array result's shadow
    is the mirrored op's result."""
    inst = t.inst
    operands = tuple(t.shadow(i) if v.type.is_array else v for i, v in enumerate(inst.operands))
    mirrored = t.b.insert(Instruction(inst.type, op=inst.op, operands=operands, attrs=dict(inst.attrs),
                                      flags=set(inst.flags)))
    return mirrored if inst.type.is_array else None


MIRRORED_OPS: frozenset[Op] = frozenset({Op.GROW})
"""Ops that change an array's extent rather than its contents: the forward pass repeats them on the
array's shadow, whatever the activity of their other operands (`grow` of a growable tape)."""

TANGENT_RULES: dict[Op, TangentRule] = {
    Op.FADD: _tangent_fadd,
    Op.FSUB: _tangent_fsub,
    Op.FMUL: _tangent_fmul,
    Op.FDIV: _tangent_fdiv,
    Op.FNEG: _tangent_fneg,
    Op.FFLOORDIV: _tangent_zero,
    Op.FFLOORMOD: _tangent_ffloormod,
    Op.FMIN: _tangent_fmin,
    Op.FMAX: _tangent_fmax,
    Op.FABS: _tangent_fabs,
    Op.FLOOR: _tangent_zero,
    Op.CEIL: _tangent_zero,
    Op.SELECT: _tangent_select,
    Op.POW: _tangent_pow,
    Op.ATAN2: _tangent_atan2,
    Op.FPEXT: _tangent_cast,
    Op.FPTRUNC: _tangent_cast,
    **{op: _tangent_unary(derivative) for op, derivative in UNARY_DERIVATIVES.items()},
    Op.LOAD: _tangent_load,
    Op.STORE: _tangent_store,
    Op.ATOMIC_ADD: _tangent_atomic_add,
    Op.ALLOC: _tangent_alloc,
    **{op: _tangent_mirror for op in MIRRORED_OPS},
}
"""The tangent rule of every differentiable op; `phi` is handled by the forward pass (a phi of tangents),
`call` by inlining first."""
