"""The derivative rule table: one reverse rule per differentiable op (DESIGN 5, STYLE 8: rules are data).

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
from isozyme.ssa.ir import Instruction, Value
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
