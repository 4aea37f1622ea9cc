"""Random well-typed isozyme kernels as Python source text, for differential tests.

`programs()` draws a module: `import math`, `import isozyme as iz`, maybe module-level constants, zero to
two helper kernels and an entry kernel `entry(out, x, [y], [idx], n, [a], [k], [flag])`. `arguments(p)`
draws seeded numpy arguments for it, `cases()` both. `load_module(source, directory)` writes the source to a
file and imports it (the frontend reads kernels with `inspect.getsource`); `python_reference(kernel)` is the
undecorated function to compare with; `assert_same_results` and `assert_bit_identical` compare two runs.

The kernel language is a subset of Python whose meaning the kernel must keep (DESIGN 1.2), with known
divergences: 64-bit int wrap-around, IEEE floats where Python raises, no negative index wrap-around. A
generated program stays inside the common part by construction, which is what this module's invariants
are for (every program runs as plain Python without an exception or an int beyond 2**52; floats are finite
except in the programs with non-finite values, see the last point):

- Magnitudes are tracked: every expression carries a bound on |value| (`Expr.bound`). A variable or array
  element holds at most INT_VAR / FLOAT_VAR: plain stores take values up to *_NOMINAL (larger ones are
  reduced first by `%`, `&`, a clamp, `tanh`, ...), `+=`-like updates add at most *_STEP, `*=` multiplies
  by at most 1, `/=` and `//=` divide by at least 1. A statement runs at most (2 * (LOOP_BOUND + 1) + 1) ** 3
  times (loops nest three deep along any call chain: two in `entry`, one in the helper) and a program has
  fewer than MAX_STATEMENTS statements, so the drift stays below INT_VAR - INT_NOMINAL (FLOAT_VAR - ...).
  Int subexpressions stay below INT_LIMIT = 2**52 (no wrap-around, exact as floats), float ones below
  FLOAT_LIMIT, so no float overflows and no nan appears (int contexts never see a float that is not).
- Guards: divisors are nonzero constants or `(1.0 + abs(e))`-like; `sqrt(abs(e))`, `log(1.0 + abs(e))`,
  `exp(min(e, 20.0))`, `asin(e / (1.0 + abs(e)))`; `**` has a non-negative base or an int exponent, and
  a float power never has the exponent 2.0 or 3.0 (isozyme defines those as the products `x*x`, `x*x*x`,
  which may differ from Python's C `pow` by an ulp: `semantics.py`);
  shift counts lie in [0, 64); `int()` gets a clamped value; a short-circuit guard (`d != 0 and a // d > 1`,
  `0 <= j < n and x[j] > 0.0`) is the only protection of the operation it guards, so it must short-circuit.
- Indices lie in [0, extent): loop variables of ranges inside [0, n), `idx[...]` (an index table whose stores
  are reduced `% n`), or `(e % n)`.
- Python ints versus floats: a float-typed expression may hold a Python int at run time (`min(k, 2.5)`,
  `math.floor(e)`, a float variable that starts as `0` and widens in a loop). Such a value is exact as a
  float, and every arithmetic operator in float context has an operand that is surely a Python float
  (`Expr.sf`), so Python computes with floats exactly where the kernel does. Stores into float variables
  are surely floats, except the widening accumulators `acc = 0` (a small int until their first update).
- Scoping: every variable has a fresh name; one assigned inside a block is only read inside it; loop
  variables are never assigned; `iz.empty` arrays are filled before they are read; `prange` bodies write one
  array, at the loop index only, and only assign variables of their own.
- Non-finite values: a quarter of the programs (`Program.nonfinite`) may define `INF = math.inf`,
  `NAN = math.nan`, `HUGE = 1e300` and get nan, infinities, -0.0 and 1e300 in their float arguments. There
  any float may be anything (`Expr.finite` is false; bounds hold for finite-flagged expressions only), and
  what raises in Python on such a value gets `Generator.finite`'s guard `(e if abs(e) < 1e6 else 0.0)`:
  `int()`, `math.floor`/`ceil`, `sin`/`cos`/`tan` (of inf), `**` and `math.pow` (overflow raises). These
  programs test what optimizers get wrong: ordered versus unordered comparisons, `x * 0.0`, `x - x`, the
  order of `min`/`max` arguments, signed zeros.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import math
import struct
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from hypothesis import strategies as st

T = TypeVar("T")

NMAX = 6  # array length n in [1, NMAX]
LOOP_BOUND = 6  # |range bound| <= LOOP_BOUND + 1, |while bound| <= LOOP_BOUND
F_PARAM_BOUND = 10.0  # |f64 parameter or f64 argument array element|
I_PARAM_BOUND = 12  # |i64 parameter|
MAX_STATEMENTS = 64  # statements in a whole program (entry and helpers), counting generous
ENTRY_STATEMENTS, HELPER_STATEMENTS = 16, 8

INT_NOMINAL, INT_STEP, INT_VAR, INT_LIMIT = 2**16, 2**6, 2**25, 2**52
FLOAT_NOMINAL, FLOAT_STEP, FLOAT_VAR, FLOAT_LIMIT = 1e4, 1e3, 1e9, 1e30

_EXECUTIONS = (2 * (LOOP_BOUND + 1) + 1) ** 3  # the most times one statement runs
assert INT_NOMINAL + MAX_STATEMENTS * _EXECUTIONS * 2 * INT_STEP <= INT_VAR and INT_VAR**2 <= INT_LIMIT
assert FLOAT_NOMINAL + MAX_STATEMENTS * _EXECUTIONS * FLOAT_STEP <= FLOAT_VAR

FLOAT_LITERALS = ("0.0", "1.0", "0.5", "2.0", "-1.5", "3.25", "0.1", "-0.75", "10.0", "0.001", "-2.0", "7.0", "-0.0")
INT_LITERALS = (0, 1, 2, 3, -1, 5, 7, -3, 4, 10, 100, -37, 1000)


# --- the pieces of a program ------------------------------------------------------------------------


@dataclass(frozen=True)
class Expr:
    """A generated expression and what is known about its value."""

    text: str
    """Python source, parenthesized unless atomic."""
    kind: str
    """"i" (i64), "f" (f64) or "b" (boolean)."""
    bound: float = 0
    """|value| <= bound at run time (an int for ints)."""
    sf: bool = True
    """Float context: the value is surely a Python (or numpy) float, never an int."""
    index: bool = False
    """Int: the value lies in [0, n), a valid index into the function's length-n arrays."""
    copy: bool = False
    """A bare variable or element read: storing it anywhere raises no magnitude."""
    finite: bool = True
    """Float: surely finite (in a program with non-finite values, `bound` holds only for finite ones)."""


@dataclass
class Var:
    """A scalar variable in scope."""

    name: str
    kind: str
    bound: float
    sf: bool = True
    index: bool = False
    mutable: bool = True
    widening: bool = False
    """Float accumulator `acc = 0`: a small int until its first update (every update is surely a float)."""
    in_prange: bool = False
    """Declared inside the current prange body: the only variables that body may assign."""


@dataclass(frozen=True)
class Arr:
    """An array in scope: a parameter or a local."""

    name: str
    kind: str
    """"f" (f64) or "i" (i64)."""
    dims: tuple[str | int, ...]
    """Each extent is "n" (the function's length parameter) or a constant."""
    index_table: bool = False
    """An i64 array whose elements are valid indices in [0, n); stores keep them so."""


@dataclass(frozen=True)
class Param:
    """A parameter of `entry`: kind "farray", "iarray" (index table), "n", "f", "i" or "b"."""

    name: str
    kind: str


@dataclass(frozen=True)
class Helper:
    """A generated helper kernel that `entry` (or a later helper) may call."""

    name: str
    params: tuple[tuple[str, str], ...]
    """(name, kind) with kind "farray" (length n), "n", "f" or "i"."""
    returns: str | None
    """"f", "i", "b", or None for a helper that writes its first array."""


@dataclass(frozen=True)
class Program:
    """A generated module: its source and the signature of its `entry` kernel."""

    source: str
    params: tuple[Param, ...]
    returns: str | None
    nonfinite: bool = False
    """Whether nan and infinities may occur (as constants and in the arguments)."""

    def __repr__(self) -> str:
        return f"Program(returns={self.returns!r}, nonfinite={self.nonfinite}, source='''\n{self.source}''')"


@dataclass
class Ctx:
    """Where a statement is generated."""

    loop_depth: int = 0
    nest: int = 0
    top: bool = True
    """At the function's top level (not inside a branch or loop): local arrays are declared here."""
    prange: tuple[str, str] | None = None
    """Inside a prange body: (the array it writes, the loop index)."""


@dataclass
class Function:
    """The function being generated."""

    name: str
    returns: str | None
    is_entry: bool
    max_loop_depth: int
    budget: int
    helpers: list[Helper]
    arrays: list[Arr] = field(default_factory=list)
    scopes: list[list[Var]] = field(default_factory=lambda: [[]])
    lines: list[str] = field(default_factory=list)
    counter: itertools.count = field(default_factory=itertools.count)

    @property
    def has_n(self) -> bool:
        """Whether the function has the length parameter `n` (helpers without arrays have none)."""
        return any(v.name == "n" for v in self.scopes[0])

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.counter)}"

    def variables(self) -> list[Var]:
        return [v for scope in self.scopes for v in scope]

    def declare(self, var: Var) -> Var:
        self.scopes[-1].append(var)
        return var

    def emit(self, ctx_indent: int, line: str) -> None:
        self.lines.append("    " * (ctx_indent + 1) + line)


# --- the generator ----------------------------------------------------------------------------------


def _lit(value: int) -> str:
    return f"({value})" if value < 0 else str(value)


def _flit(text: str) -> str:
    return f"({text})" if text.startswith("-") else text


class Choices:
    """Random choices drawn from `integer(lo, hi)` (which a subclass defines from its entropy bytes); each
    shrinks towards its first / smallest / False option."""

    def integer(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def pick(self, options: Sequence[T]) -> T:
        return options[self.integer(0, len(options) - 1)]

    def chance(self, percent: int) -> bool:
        return self.integer(0, 99) >= 100 - percent

    def weighted(self, options: Sequence[tuple[int, T]]) -> T:
        roll = self.integer(0, sum(w for w, _ in options) - 1)
        for weight, value in options:
            if roll < weight:
                return value
            roll -= weight
        raise AssertionError("unreachable")


class Generator(Choices):
    """Makes one program from a string of entropy bytes, deterministically.

    Every choice reads one or two bytes; a zero byte (also past the end) takes the first, smallest or
    False option, so when hypothesis shrinks the bytes towards zeros the program gets simpler. One
    `st.binary` draw per program instead of hundreds of `st.integers` draws makes generation ~10x faster.
    """

    def __init__(self, entropy: bytes) -> None:
        self.entropy = entropy
        self.position = 0
        self.constants: dict[str, Expr] = {}
        self.statements = 0
        self.nonfinite = False
        """Floats may be nan or infinite: every float variable, element and parameter may be."""

    # random choices; each shrinks towards its first / smallest / False option

    def integer(self, lo: int, hi: int) -> int:
        width = 1 if hi - lo < 256 else 2
        chunk = self.entropy[self.position:self.position + width]
        self.position += width
        return lo + int.from_bytes(chunk, "little") % (hi - lo + 1)

    # --- squashing: reduce a value's magnitude ----------------------------------------------------

    def isquash(self, e: Expr) -> Expr:
        """`e` reduced to at most INT_NOMINAL in magnitude."""
        form = self.integer(0, 3)
        if form == 0:
            m = self.pick((97, 7, 1000, -13, 4096, -1000))
            return Expr(f"({e.text} % {_lit(m)})", "i", abs(m))
        if form == 1:
            mask = self.pick((255, 1023, 65535))
            return Expr(f"({e.text} & {mask})", "i", mask)
        if form == 2:
            c = self.pick((100, 5000))
            return Expr(f"min(max({e.text}, {-c}), {c})", "i", c)
        return Expr(f"({e.text} // {self.pick((2**40, 2**20, -(2**30)))} % 509)", "i", 509)

    def fsquash(self, e: Expr) -> Expr:
        """`e` reduced to at most FLOAT_NOMINAL in magnitude (and a surely-float result where possible)."""
        form = self.integer(0, 4 if len(e.text) < 60 else 3)
        if form == 0:
            m = self.pick(("97.0", "10.0", "1000.0", "-50.0", "2.5"))
            return Expr(f"({e.text} % {_flit(m)})", "f", abs(float(m)), finite=e.finite)
        if form == 1:
            c = self.pick(("100.0", "1000.0"))
            return Expr(f"min(max({e.text}, -{c}), {c})", "f", float(c), sf=e.sf, finite=e.finite)
        if form == 2:
            fn = self.pick(("tanh", "sin", "atan", "cos", "erf"))
            return self.call_math(fn, e, 2.0)
        if form == 3:
            return Expr(f"({e.text} % {_flit(self.pick(('7.5', '-3.0')))})", "f", 7.5, finite=e.finite)
        return Expr(f"({e.text} / (1.0 + abs({e.text})))", "f", 1.0, finite=e.finite)

    def finite(self, e: Expr) -> Expr:
        """`e`, or 0.0 where it is not finite (or huge): a guard for what raises in Python on nan or inf
        (`int()`, `math.floor`, `sin`, `cos`, `tan`) or on overflow (`**`, `math.pow`)."""
        if e.finite:
            return e
        return Expr(f"({e.text} if abs({e.text}) < 1000000.0 else 0.0)", "f", 1e6, sf=e.sf)

    def call_math(self, name: str, e: Expr, bound: float, prefix: str | None = None) -> Expr:
        """`math.name(e)` (or `iz.`) for a function defined everywhere: sin, cos, tan, tanh, atan, erf."""
        if name in ("sin", "cos", "tan"):
            e = self.finite(e)  # math.sin(inf) raises
        return Expr(f"{prefix or self.mathmod()}{name}({e.text})", "f", bound, finite=e.finite)

    def fit(self, e: Expr, copies: bool = False) -> Expr:
        """`e` made storable in a variable or element: at most *_NOMINAL (with `copies`, a plain copy of a
        variable or element may keep its larger bound: copying raises no magnitude)."""
        if e.kind == "i" and e.bound > INT_NOMINAL and not (copies and e.copy):
            return self.isquash(e)
        if e.kind == "f" and e.bound > FLOAT_NOMINAL and not (copies and e.copy):
            return self.fsquash(e)
        return e

    def to_var_bound(self, e: Expr) -> Expr:
        """`e` reduced to a variable's bound (for helper arguments)."""
        if e.kind == "i" and e.bound > INT_VAR:
            return self.isquash(e)
        if e.kind == "f" and e.bound > FLOAT_VAR:
            return self.fsquash(e)
        return e

    def small_int(self, fn: Function, ctx: Ctx, bound: int, depth: int = 1) -> Expr:
        """An int expression with |value| <= bound (bound >= 1)."""
        e = self.iexpr(fn, ctx, depth)
        if e.bound <= bound:
            return e
        if self.chance(50):
            return Expr(f"({e.text} % {bound})", "i", bound)
        return Expr(f"({e.text} % {2 * bound + 1} - {bound})", "i", bound)

    def small_float(self, fn: Function, ctx: Ctx, bound: float, depth: int = 1) -> Expr:
        e = self.sure(self.fexpr(fn, ctx, depth))
        if e.bound <= bound:
            return e
        if self.chance(50):
            return Expr(f"min(max({e.text}, {-bound}), {bound})", "f", bound, finite=e.finite)
        return Expr(f"({e.text} % {bound})", "f", bound, finite=e.finite)

    @staticmethod
    def sure(e: Expr) -> Expr:
        """`e` as a surely-float expression (`float(e)` where it might be an int)."""
        return e if e.sf else Expr(f"float({e.text})", "f", e.bound, finite=e.finite)

    def depth(self) -> int:
        """The depth of a statement's expression: mostly shallow, which keeps compile times short."""
        return self.weighted([(4, 1), (4, 2), (1, 3)])

    def mathmod(self) -> str:
        return self.pick(("math.", "iz."))

    # --- expressions --------------------------------------------------------------------------------

    def expr(self, kind: str, fn: Function, ctx: Ctx, depth: int) -> Expr:
        return {"i": self.iexpr, "f": self.fexpr, "b": self.bexpr}[kind](fn, ctx, depth)

    def readable(self, fn: Function, kind: str) -> list[Var]:
        return [v for v in fn.variables() if v.kind == kind]

    def constant(self, kind: str) -> Expr | None:
        options = [e for e in self.constants.values() if e.kind == kind]
        return self.pick(options) if options else None

    def array_read(self, fn: Function, ctx: Ctx, kind: str, depth: int) -> Expr | None:
        arrays = [a for a in fn.arrays if a.kind == kind]
        if not arrays:
            return None
        arr = self.pick(arrays)
        text = f"{arr.name}[{self.indices(fn, ctx, arr, depth)}]"
        if arr.index_table:
            return Expr(text, "i", NMAX, index=True, copy=True)
        return Expr(text, kind, FLOAT_VAR if kind == "f" else INT_VAR, copy=True,
                    finite=kind == "i" or not self.nonfinite)

    def indices(self, fn: Function, ctx: Ctx, arr: Arr, depth: int) -> str:
        if ctx.prange is not None and arr.name == ctx.prange[0]:
            return ctx.prange[1]  # the array a prange body writes is only touched at the loop index
        return ", ".join(self.index(fn, ctx, dim, depth) for dim in arr.dims)

    def index(self, fn: Function, ctx: Ctx, dim: str | int, depth: int) -> str:
        """An index expression in [0, dim)."""
        if dim != "n":
            if self.chance(30):
                return str(self.integer(0, dim - 1))
            return f"({self.iexpr(fn, ctx, max(depth - 1, 0)).text} % {dim})"
        form = self.integer(0, 3)
        index_vars = [v for v in self.readable(fn, "i") if v.index]
        if form == 0 and index_vars:
            return self.pick(index_vars).name
        tables = [a for a in fn.arrays if a.index_table]
        if form == 1 and tables and depth > 0:
            table = self.pick(tables)
            return f"{table.name}[{self.index(fn, ctx, 'n', depth - 1)}]"
        e = self.iexpr(fn, ctx, max(depth - 1, 0))
        if e.index:
            return e.text
        return f"({e.text} % {self.length_text(fn)})"

    def length_text(self, fn: Function) -> str:
        """An expression for n: the parameter or the length of a length-n array (a constant without n)."""
        if not fn.has_n:
            return str(self.integer(1, NMAX))
        form = self.integer(0, 5)
        vectors = [a for a in fn.arrays if a.dims == ("n",)]
        if form == 4 and vectors:
            return f"len({self.pick(vectors).name})"
        matrices = [a for a in fn.arrays if a.dims[0] == "n"]
        if form == 5 and matrices:
            return f"{self.pick(matrices).name}.shape[0]"
        return "n"

    # floats

    def fexpr(self, fn: Function, ctx: Ctx, depth: int) -> Expr:
        if depth <= 0 or not self.chance(80):  # a zero byte (shrinking) gives a leaf
            return self.fleaf(fn, ctx)
        form = self.weighted([(6, "arith"), (2, "div"), (1, "floordiv"), (1, "mod"), (1, "neg"), (1, "abs"),
                              (1, "pow"), (2, "minmax"), (1, "ifexp"), (3, "math"), (1, "call"), (1, "float")])
        d = depth - 1
        if form == "arith":
            a, b = self.sf_pair(self.fexpr(fn, ctx, d), self.fexpr(fn, ctx, d))
            op = self.pick(("+", "-", "*"))
            bound = a.bound * b.bound if op == "*" else a.bound + b.bound
            return self.flimit(Expr(f"({a.text} {op} {b.text})", "f", bound, finite=a.finite and b.finite))
        if form in ("div", "floordiv", "mod"):
            a = self.fexpr(fn, ctx, d)
            divisor, smallest = self.fdivisor(fn, ctx, d)
            a, divisor = self.sf_pair(a, divisor) if form != "div" else (a, divisor)
            finite = a.finite and divisor.finite
            if form == "div":
                return self.flimit(Expr(f"({a.text} / {divisor.text})", "f", a.bound / smallest, finite=finite))
            if form == "floordiv":
                return self.flimit(Expr(f"({a.text} // {divisor.text})", "f", a.bound / smallest + 1,
                                        finite=finite))
            return Expr(f"({a.text} % {divisor.text})", "f", divisor.bound, finite=finite)
        if form == "neg":
            a = self.fexpr(fn, ctx, d)
            return replace(a, text=f"(-{a.text})", copy=False)
        if form == "abs":
            a = self.fexpr(fn, ctx, d)
            return replace(a, text=f"abs({a.text})", copy=False)
        if form == "pow":
            return self.fpow(fn, ctx, d)
        if form == "minmax":
            args = [self.fexpr(fn, ctx, d) if self.chance(80) else self.iexpr(fn, ctx, d)
                    for _ in range(self.integer(2, 3))]
            name = self.pick(("min", "max"))
            return Expr(f"{name}({', '.join(a.text for a in args)})", "f", max(a.bound for a in args),
                        sf=all(a.kind == "f" and a.sf for a in args), finite=all(a.finite for a in args))
        if form == "ifexp":
            c = self.bexpr(fn, ctx, d)
            a, b = self.fexpr(fn, ctx, d), self.fexpr(fn, ctx, d)
            return Expr(f"({a.text} if {c.text} else {b.text})", "f", max(a.bound, b.bound), sf=a.sf and b.sf,
                        finite=a.finite and b.finite)
        if form == "math":
            return self.fmath(fn, ctx, d)
        if form == "call":
            call = self.call(fn, ctx, "f", d)
            if call is not None:
                return call
        e = self.iexpr(fn, ctx, d)
        return Expr(f"float({e.text})", "f", e.bound)

    def fleaf(self, fn: Function, ctx: Ctx) -> Expr:
        form = self.weighted([(3, "literal"), (4, "var"), (4, "array"), (1, "const"), (1, "int")])
        if form == "var":
            variables = self.readable(fn, "f")
            if variables:
                v = self.pick(variables)
                return Expr(v.name, "f", v.bound, sf=v.sf, copy=True, finite=not self.nonfinite)
        if form == "array":
            read = self.array_read(fn, ctx, "f", 1)
            if read is not None:
                return read
        if form == "const":
            const = self.constant("f")
            if const is not None:
                return const
        if form == "int":
            e = self.ileaf(fn, ctx)
            return Expr(e.text, "f", e.bound, sf=False)
        text = self.pick(FLOAT_LITERALS)
        return Expr(_flit(text), "f", abs(float(text)))

    def flimit(self, e: Expr) -> Expr:
        return self.fsquash(e) if e.bound > FLOAT_LIMIT else e

    def sf_pair(self, a: Expr, b: Expr) -> tuple[Expr, Expr]:
        """Make one of two arithmetic operands surely a float, so Python computes in floats as the kernel."""
        if a.sf and a.kind == "f" or b.sf and b.kind == "f":
            return a, b
        return (self.sure(replace(a, kind="f")), b) if self.chance(50) else (a, self.sure(replace(b, kind="f")))

    def fdivisor(self, fn: Function, ctx: Ctx, depth: int) -> tuple[Expr, float]:
        """A divisor that is never zero, and the least magnitude it can have."""
        form = self.integer(0, 4)
        if form == 0:
            text = self.pick(("2.0", "-4.0", "0.5", "3.0", "-1.5", "10.0", "0.25"))
            return Expr(_flit(text), "f", abs(float(text))), abs(float(text))
        e = self.fexpr(fn, ctx, depth)
        if form == 1:
            return Expr(f"(1.0 + abs({e.text}))", "f", 1 + e.bound, finite=e.finite), 1.0
        if form == 2:
            return Expr(f"(abs({e.text}) + 0.5)", "f", e.bound + 0.5, finite=e.finite), 0.5
        if form == 3:
            return Expr(f"(-(2.0 + {self.call_math('cos', e, 1.0).text}))", "f", 3.0), 1.0
        i = self.iexpr(fn, ctx, depth)
        return Expr(f"(abs({i.text}) + 1)", "i", i.bound + 1, sf=False), 1.0

    def fpow(self, fn: Function, ctx: Ctx, depth: int) -> Expr:
        base = self.finite(self.sure(self.fexpr(fn, ctx, depth)))  # a huge base would overflow: Python raises
        form = self.integer(0, 2)
        if form == 0:  # non-negative base, float exponent
            exponent = self.pick(("0.5", "1.5", "2.5", "1.0", "0.0"))
            if base.bound ** float(exponent) > FLOAT_LIMIT:
                base = self.fsquash(base)
            return Expr(f"(abs({base.text}) ** {exponent})", "f", max(base.bound, 1.0) ** float(exponent))
        if form == 1:  # any base, integer exponent
            exponent = self.integer(4, 5)
            if base.bound**exponent > FLOAT_LIMIT:
                base = self.fsquash(base)
            return Expr(f"({base.text} ** {exponent})", "f", max(base.bound, 1.0) ** exponent)
        exponent = self.finite(self.fexpr(fn, ctx, depth))
        func = f"{self.mathmod()}pow" if self.chance(50) else None
        b, x = f"min(abs({base.text}), 4.0)", f"min(abs({exponent.text}), 1.75)"
        return Expr(f"{func}({b}, {x})" if func else f"({b} ** {x})", "f", 4.0**1.75)

    def fmath(self, fn: Function, ctx: Ctx, depth: int) -> Expr:
        m = self.mathmod()
        e = self.fexpr(fn, ctx, depth)
        name = self.pick(("sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "sinh", "cosh",
                          "asin", "acos", "atan", "atan2", "fabs", "floor", "ceil", "erf", "pow"))
        x, bound = e.text, e.bound
        finite = e.finite
        if name == "sqrt":
            return Expr(f"{m}sqrt(abs({x}))", "f", math.sqrt(bound), finite=finite)
        if name in ("exp", "expm1"):
            return Expr(f"{m}{name}(min({x}, 20.0))", "f", math.exp(20.0), finite=finite)
        if name == "log":
            return Expr(f"{m}log(1.0 + abs({x}))", "f", math.log(1 + bound) + 1, finite=finite)
        if name == "log1p":
            return Expr(f"{m}log1p(abs({x}))", "f", math.log1p(bound) + 1, finite=finite)
        if name in ("sin", "cos", "tanh", "erf", "tan", "atan"):
            return self.call_math(name, e, 1e17 if name == "tan" else 2.0, m)
        if name in ("sinh", "cosh"):
            return Expr(f"{m}{name}(max(min({x}, 20.0), -20.0))", "f", math.cosh(20.0), finite=finite)
        if name in ("asin", "acos"):  # an argument in [-1, 1] (or nan)
            arg = f"({x} / (1.0 + abs({x})))" if len(x) < 50 else self.call_math("sin", e, 1.0).text
            return Expr(f"{m}{name}({arg})", "f", 4.0, finite=finite)
        if name == "atan2":
            y = self.fexpr(fn, ctx, depth)
            return Expr(f"{m}atan2({x}, {y.text})", "f", 4.0, finite=finite and y.finite)
        if name == "fabs":
            return Expr(f"{m}fabs({x})", "f", bound, finite=finite)
        if name in ("floor", "ceil"):
            if m == "math.":  # an int in Python and in the kernel (i64: its argument must fit)
                e = self.finite(e)
                if e.bound > 2.0**50:
                    e = self.fsquash(e)
                return Expr(f"math.{name}({e.text})", "f", e.bound + 1, sf=False)
            return Expr(f"iz.{name}({x})", "f", bound + 1, finite=finite)  # iz.floor returns a float
        return self.fpow(fn, ctx, depth)

    # ints

    def iexpr(self, fn: Function, ctx: Ctx, depth: int) -> Expr:
        if depth <= 0 or not self.chance(75):
            return self.ileaf(fn, ctx)
        form = self.weighted([(6, "arith"), (1, "neg"), (1, "abs"), (2, "floordiv"), (2, "mod"), (1, "pow"),
                              (1, "shift"), (2, "bitwise"), (1, "minmax"), (1, "ifexp"), (1, "int"), (1, "call")])
        d = depth - 1
        if form == "arith":
            op = self.pick(("+", "-", "*"))
            return self.ibinary(op, self.iexpr(fn, ctx, d), self.iexpr(fn, ctx, d))
        if form == "neg":
            a = self.iexpr(fn, ctx, d)
            return Expr(f"(-{a.text})", "i", a.bound)
        if form == "abs":
            a = self.iexpr(fn, ctx, d)
            return Expr(f"abs({a.text})", "i", a.bound)
        if form in ("floordiv", "mod"):
            a, divisor = self.iexpr(fn, ctx, d), self.idivisor(fn, ctx, d)
            if form == "floordiv":
                return Expr(f"({a.text} // {divisor.text})", "i", a.bound + 1)
            return Expr(f"({a.text} % {divisor.text})", "i", divisor.bound)
        if form == "pow":
            return self.ibinary("**", self.iexpr(fn, ctx, d), Expr(str(self.integer(0, 3)), "i", 3))
        if form == "shift":
            if self.chance(50):
                count = Expr(str(self.integer(0, 8)), "i", 8) if self.chance(60) else \
                    Expr(f"({self.iexpr(fn, ctx, d).text} % 9)", "i", 8)
                return self.ibinary("<<", self.iexpr(fn, ctx, d), count)
            count = Expr(str(self.integer(0, 63)), "i", 63) if self.chance(60) else \
                Expr(f"({self.iexpr(fn, ctx, d).text} % 64)", "i", 63)
            return self.ibinary(">>", self.iexpr(fn, ctx, d), count)
        if form == "bitwise":
            return self.ibinary(self.pick(("&", "|", "^")), self.iexpr(fn, ctx, d), self.iexpr(fn, ctx, d))
        if form == "minmax":
            args = [self.iexpr(fn, ctx, d) for _ in range(self.integer(2, 3))]
            name = self.pick(("min", "max"))
            return Expr(f"{name}({', '.join(a.text for a in args)})", "i", max(a.bound for a in args),
                        index=all(a.index for a in args))
        if form == "ifexp":
            c = self.bexpr(fn, ctx, d)
            a, b = self.iexpr(fn, ctx, d), self.iexpr(fn, ctx, d)
            return Expr(f"({a.text} if {c.text} else {b.text})", "i", max(a.bound, b.bound),
                        index=a.index and b.index)
        if form == "int":
            return self.int_of_float(fn, ctx, d)
        call = self.call(fn, ctx, "i", d)
        return call if call is not None else self.ileaf(fn, ctx)

    def int_of_float(self, fn: Function, ctx: Ctx, depth: int) -> Expr:
        """`int(e)`, truncating toward zero, of a float clamped into the exact range of ints."""
        e = self.finite(self.fexpr(fn, ctx, depth))
        if e.bound <= 2.0**40 and self.chance(50):
            return Expr(f"int({e.text})", "i", int(e.bound))
        if self.chance(50):
            return Expr(f"int(min(max({e.text}, -1000000.0), 1000000.0))", "i", 10**6)
        e = self.sure(e)
        return Expr(f"int({e.text} % {_flit(self.pick(('100.0', '-7.5')))})", "i", 100)

    def ileaf(self, fn: Function, ctx: Ctx) -> Expr:
        form = self.weighted([(3, "literal"), (5, "var"), (2, "n"), (2, "array"), (1, "const")])
        if form == "var":
            variables = self.readable(fn, "i")
            if variables:
                v = self.pick(variables)
                return Expr(v.name, "i", v.bound, index=v.index, copy=True)
        if form == "n":
            return Expr(self.length_text(fn), "i", NMAX)
        if form == "array":
            read = self.array_read(fn, ctx, "i", 1)
            if read is not None:
                return read
        if form == "const":
            const = self.constant("i")
            if const is not None:
                return const
        value = self.pick(INT_LITERALS)
        return Expr(_lit(value), "i", abs(value))

    def ibinary(self, op: str, a: Expr, b: Expr) -> Expr:
        """`a op b`, its operands reduced first where the result could exceed INT_LIMIT."""
        for _ in range(3):
            bound = _int_bound(op, a.bound, b.bound)
            if bound <= INT_LIMIT:
                return Expr(f"({a.text} {op} {b.text})", "i", bound)
            if op in ("**", "<<") or a.bound >= b.bound:
                a = self.isquash(a) if op != "**" else Expr(f"({a.text} % 13)", "i", 13)
            else:
                b = self.isquash(b)
        raise AssertionError(f"cannot bound {a.text} {op} {b.text}")

    def idivisor(self, fn: Function, ctx: Ctx, depth: int) -> Expr:
        form = self.integer(0, 4)
        if form == 0:
            value = self.pick((2, 3, 7, -1, -2, 5, -7, 10, 1))
            return Expr(_lit(value), "i", abs(value))
        if form == 4:
            return Expr(self.length_text(fn), "i", NMAX)
        e = self.iexpr(fn, ctx, depth)
        if form == 1:
            return Expr(f"(abs({e.text}) + 1)", "i", e.bound + 1)
        if form == 2:
            return Expr(f"({e.text} % 5 + 1)", "i", 5)
        return Expr(f"(-(abs({e.text}) % 4) - 1)", "i", 4)

    # booleans

    def bexpr(self, fn: Function, ctx: Ctx, depth: int) -> Expr:
        form = self.weighted([(6, "compare"), (2, "chained"), (2, "andor"), (1, "not"), (2, "var"),
                              (2, "guard"), (1, "call"), (1, "literal")])
        d = max(depth - 1, 0)
        if form == "chained":
            kind = self.pick(("i", "f"))
            parts = [self.expr(kind, fn, ctx, d) for _ in range(3)]
            ops = [self.pick(("<", "<=", "<", ">", ">=", "==", "!=")) for _ in range(2)]
            return Expr(f"({parts[0].text} {ops[0]} {parts[1].text} {ops[1]} {parts[2].text})", "b")
        if form == "andor" and depth > 0:
            a, b = self.bexpr(fn, ctx, d), self.bexpr(fn, ctx, d)
            return Expr(f"({a.text} {self.pick(('and', 'or'))} {b.text})", "b")
        if form == "not":
            return Expr(f"(not {self.bexpr(fn, ctx, d).text})", "b")
        if form == "var":
            variables = self.readable(fn, "b")
            if variables:
                return Expr(self.pick(variables).name, "b")
        if form == "guard":
            return self.guard(fn, ctx, d)
        if form == "call":
            call = self.call(fn, ctx, "b", d)
            if call is not None:
                return call
        if form == "literal":
            return Expr(self.pick(("True", "False")), "b")
        kinds = self.pick((("i", "i"), ("f", "f"), ("i", "f"), ("f", "i")))
        a, b = self.expr(kinds[0], fn, ctx, d), self.expr(kinds[1], fn, ctx, d)
        return Expr(f"({a.text} {self.pick(('<', '<=', '>', '>=', '==', '!='))} {b.text})", "b")

    def guard(self, fn: Function, ctx: Ctx, depth: int) -> Expr:
        """A short-circuit condition whose right side would raise (or read out of bounds) if evaluated."""
        form = self.integer(0, 3)
        if form == 0 or form == 1:
            d = self.small_int(fn, ctx, 4, depth)
            a = self.iexpr(fn, ctx, depth)
            c = _lit(self.integer(-3, 3))
            if form == 0:
                return Expr(f"({d.text} != 0 and ({a.text} // {d.text}) > {c})", "b")
            return Expr(f"({d.text} == 0 or ({a.text} % {d.text}) <= {c})", "b")
        arrays = [a for a in fn.arrays if a.dims == ("n",) and not (ctx.prange and a.name == ctx.prange[0])]
        if form == 2 and arrays:
            arr = self.pick(arrays)
            j = self.small_int(fn, ctx, NMAX + 2, depth)
            value = self.expr(arr.kind, fn, ctx, depth)
            return Expr(f"(0 <= {j.text} < n and {arr.name}[{j.text}] > {value.text})", "b")
        divisor = self.fexpr(fn, ctx, depth)
        a = self.fexpr(fn, ctx, depth)
        return Expr(f"({divisor.text} != 0.0 and ({a.text} / {divisor.text}) < 1.0)", "b")

    # calls

    def call(self, fn: Function, ctx: Ctx, returns: str | None, depth: int) -> Expr | None:
        """A call of a helper returning `returns` (None: an array-writing helper), or None if impossible."""
        if ctx.prange is not None or (not fn.is_entry and ctx.loop_depth > 0):
            return None  # prange bodies write one array only; helpers call helpers outside loops only
        arrays = [a for a in fn.arrays if a.kind == "f" and a.dims == ("n",)]
        helpers = [h for h in fn.helpers if h.returns == returns
                   and sum(1 for _, k in h.params if k == "farray") <= len(arrays)]
        if not helpers:
            return None
        helper = self.pick(helpers)
        available = list(arrays)
        args: list[str] = []
        for _, kind in helper.params:
            if kind == "farray":
                arr = self.pick(available)
                available.remove(arr)  # distinct arrays: kernels may assume arguments do not alias
                args.append(arr.name)
            elif kind == "n":
                args.append(self.length_text(fn))
            else:
                args.append(self.to_var_bound(self.expr(kind, fn, ctx, depth)).text)
        keywords = self.integer(0, len(args)) if self.chance(25) else 0
        parts = args[: len(args) - keywords]
        named = [f"{name}={arg}" for (name, _), arg in list(zip(helper.params, args))[len(args) - keywords:]]
        if named and self.chance(50):
            named.reverse()
        text = f"{helper.name}({', '.join(parts + named)})"
        if returns == "f":
            return Expr(text, "f", FLOAT_NOMINAL, sf=False, finite=not self.nonfinite)
        if returns == "i":
            return Expr(text, "i", INT_NOMINAL)
        return Expr(text, returns or "none")

    # --- statements --------------------------------------------------------------------------------

    def block(self, fn: Function, ctx: Ctx, indent: int, most: int = 4) -> None:
        """A non-empty block in a new scope."""
        start = len(fn.lines)
        fn.scopes.append([])
        for _ in range(self.integer(1, most)):
            if fn.budget <= 0:
                break
            self.statement(fn, ctx, indent)
        fn.scopes.pop()
        if len(fn.lines) == start:
            fn.emit(indent, "pass")

    def assignable(self, fn: Function, ctx: Ctx, kind: str | None = None) -> list[Var]:
        return [v for v in fn.variables() if v.mutable and (kind is None or v.kind == kind)
                and (ctx.prange is None or v.in_prange)]

    def statement(self, fn: Function, ctx: Ctx, indent: int) -> None:
        fn.budget -= 1
        self.statements += 1
        in_loop = ctx.loop_depth > 0
        can_nest = ctx.nest < 3 and fn.budget > 1
        can_loop = can_nest and ctx.loop_depth < fn.max_loop_depth and ctx.prange is None
        options: list[tuple[int, str]] = [(5, "new"), (3, "assign"), (4, "augassign"), (1, "tuple"), (4, "store")]
        if can_nest:
            options.append((3, "if"))
        if can_loop:
            options += [(3, "for"), (1, "while")]
        if can_loop and fn.is_entry and ctx.loop_depth == 0 and ctx.nest == 0:
            options.append((1, "prange"))
        if in_loop:
            options.append((2, "jump"))
        if ctx.prange is None:
            options += [(1, "return"), (1, "call")]
        if ctx.top and fn.has_n:
            options.append((2, "local_array"))
        options.append((1, "assert"))
        form = self.weighted(options)
        getattr(self, f"stmt_{form}")(fn, ctx, indent)

    def stmt_new(self, fn: Function, ctx: Ctx, indent: int) -> None:
        kind = self.weighted([(4, "f"), (3, "i"), (1, "b"), (1, "index")])
        if kind == "index" and fn.has_n:  # an index variable, never reassigned
            name = fn.fresh("j")
            fn.emit(indent, f"{name} = {self.index(fn, ctx, 'n', 2)}")
            fn.declare(Var(name, "i", NMAX, index=True, mutable=False))
            return
        if kind == "index":
            kind = "i"
        if kind == "f" and ctx.top and self.chance(30):  # an accumulator that widens from int to float
            name = fn.fresh("acc")
            fn.emit(indent, f"{name} = {self.pick(('0', '0', '1'))}")
            fn.declare(Var(name, "f", FLOAT_VAR, sf=False, widening=True))
            return
        e = self.fit(self.expr(kind, fn, ctx, self.depth()))
        if kind == "f":
            e = self.sure(e)
        name = fn.fresh("v")
        fn.emit(indent, f"{name} = {e.text}")
        bound = {"i": INT_VAR, "f": FLOAT_VAR, "b": 1}[kind]
        fn.declare(Var(name, kind, bound, in_prange=ctx.prange is not None))

    def rhs(self, fn: Function, ctx: Ctx, var: Var, depth: int) -> Expr:
        """A value for a plain assignment to `var`."""
        e = self.fit(self.expr(var.kind, fn, ctx, depth), copies=True)
        if var.kind == "f":
            e = self.sure(e)
        return e

    def stmt_assign(self, fn: Function, ctx: Ctx, indent: int) -> None:
        targets = self.assignable(fn, ctx)
        if not targets:
            return self.stmt_new(fn, ctx, indent)
        var = self.pick(targets)
        fn.emit(indent, f"{var.name} = {self.rhs(fn, ctx, var, self.depth()).text}")

    def stmt_tuple(self, fn: Function, ctx: Ctx, indent: int) -> None:
        targets = self.assignable(fn, ctx)
        pairs = [(a, b) for a in targets for b in targets if a is not b and a.kind == b.kind
                 and a.widening == b.widening]
        if pairs and self.chance(50):  # a swap
            a, b = self.pick(pairs)
            fn.emit(indent, f"{a.name}, {b.name} = {b.name}, {a.name}")
            return
        if len(targets) >= 2 and self.chance(60):
            a, b = self.pick(targets), self.pick(targets)
            if a is not b:
                ea, eb = self.rhs(fn, ctx, a, 2), self.rhs(fn, ctx, b, 2)
                fn.emit(indent, f"{a.name}, {b.name} = {ea.text}, {eb.text}")
                return
        kinds = (self.pick(("i", "f")), self.pick(("i", "f", "b")))
        names = (fn.fresh("v"), fn.fresh("v"))
        values = []
        for kind in kinds:
            e = self.fit(self.expr(kind, fn, ctx, 2))
            values.append(self.sure(e) if kind == "f" else e)
        fn.emit(indent, f"{names[0]}, {names[1]} = {values[0].text}, {values[1].text}")
        for name, kind in zip(names, kinds):
            fn.declare(Var(name, kind, {"i": INT_VAR, "f": FLOAT_VAR, "b": 1}[kind],
                           in_prange=ctx.prange is not None))

    def update(self, fn: Function, ctx: Ctx, kind: str, widening: bool) -> tuple[str, Expr] | None:
        """An augmented-assignment operator and operand that keep a variable or element in its bound."""
        if kind == "b":
            return None
        if kind == "i":
            op = self.weighted([(4, "+="), (2, "-="), (1, "*="), (1, "//="), (1, "%="), (1, "&="), (1, "|="),
                                (1, "^="), (1, ">>=")])
            if op in ("+=", "-=", "|=", "^="):
                return op, self.small_int(fn, ctx, INT_STEP, 2)
            if op == "*=":
                return op, self.small_int(fn, ctx, 1, 1)
            if op in ("//=", "%="):
                divisor = self.idivisor(fn, ctx, 1)
                if op == "%=" and divisor.bound > INT_NOMINAL:  # the remainder is bounded by the divisor
                    divisor = Expr(str(self.pick((3, 10, 64))), "i", 64)
                return op, divisor
            if op == "&=":  # with a non-negative mask: the result lies in [0, mask]
                if self.chance(50):
                    return op, Expr(str(self.pick((255, 7, 1023, 0))), "i", 1023)
                return op, Expr(f"({self.iexpr(fn, ctx, 1).text} % 256)", "i", 255)
            count = self.integer(0, 63)
            return op, Expr(str(count), "i", count)
        op = self.weighted([(4, "+="), (2, "-="), (2, "*="), (2, "/="), (1, "//="), (1, "%=")])
        if op in ("+=", "-="):
            return op, self.small_float(fn, ctx, FLOAT_STEP, 2)
        if op == "*=":  # a factor of magnitude at most 1
            if self.chance(40):
                return op, Expr(_flit(self.pick(("0.5", "-0.75", "1.0", "-1.0"))), "f", 1.0)
            return op, self.call_math(self.pick(("sin", "cos", "tanh", "erf")), self.fexpr(fn, ctx, 1), 1.0)
        divisor, smallest = self.fdivisor(fn, ctx, 1)
        if smallest < 1.0:
            divisor = Expr(f"(1.0 + abs({divisor.text}))", "f", divisor.bound + 1, finite=divisor.finite)
        if op == "%=" and divisor.bound > FLOAT_NOMINAL:
            divisor = Expr(_flit(self.pick(("3.0", "-4.0", "10.0"))), "f", 10.0)
        return op, self.sure(divisor) if widening or op != "/=" else divisor

    def stmt_augassign(self, fn: Function, ctx: Ctx, indent: int) -> None:
        targets = [v for v in self.assignable(fn, ctx) if v.kind != "b"]
        if not targets:
            return self.stmt_new(fn, ctx, indent)
        var = self.pick(targets)
        if self.chance(10):  # a growing operator, after a reduction that makes room for it
            if var.kind == "i":
                fn.emit(indent, f"{var.name} %= {self.pick((13, 64, 97))}")
                fn.emit(indent, f"{var.name} {self.pick(('<<= 3', '**= 2', '*= 5'))}")
            else:
                fn.emit(indent, f"{var.name} %= 7.0")
                fn.emit(indent, f"{var.name} **= {self.pick(('1.5', '0.5', '4'))}")
            return
        update = self.update(fn, ctx, var.kind, var.widening)
        assert update is not None
        op, e = update
        if var.widening:
            e = self.sure(e)
        fn.emit(indent, f"{var.name} {op} {e.text}")

    def stmt_store(self, fn: Function, ctx: Ctx, indent: int) -> None:
        if ctx.prange is not None:
            arrays = [a for a in fn.arrays if a.name == ctx.prange[0]]
        else:
            arrays = list(fn.arrays)
        if not arrays:
            return self.stmt_new(fn, ctx, indent)
        self.store(fn, ctx, indent, self.pick(arrays))

    def store(self, fn: Function, ctx: Ctx, indent: int, arr: Arr) -> None:
        """A store or augmented store into an element of `arr`."""
        target = f"{arr.name}[{self.indices(fn, ctx, arr, 2)}]"
        if arr.index_table:
            fn.emit(indent, f"{target} = {self.index(fn, ctx, 'n', 2)}")
            return
        if self.chance(45):
            update = self.update(fn, ctx, arr.kind, False)
            if update is not None:
                fn.emit(indent, f"{target} {update[0]} {update[1].text}")
                return
        value = self.fit(self.expr(arr.kind, fn, ctx, self.depth()))
        if arr.kind == "f" and self.chance(10):
            value = self.fit(self.iexpr(fn, ctx, 2))  # an int stored into an f64 array
        fn.emit(indent, f"{target} = {value.text}")

    def stmt_if(self, fn: Function, ctx: Ctx, indent: int) -> None:
        inner = replace(ctx, nest=ctx.nest + 1, top=False)
        fn.emit(indent, f"if {self.bexpr(fn, ctx, 2).text}:")
        self.block(fn, inner, indent + 1)
        for _ in range(self.weighted([(5, 0), (3, 1), (1, 2)])):
            fn.emit(indent, f"elif {self.bexpr(fn, ctx, 2).text}:")
            self.block(fn, inner, indent + 1)
        if self.chance(50):
            fn.emit(indent, "else:")
            if self.chance(15):
                fn.emit(indent + 1, "pass")
            else:
                self.block(fn, inner, indent + 1)

    def loop_body(self, fn: Function, ctx: Ctx, indent: int, var: Var | None) -> None:
        inner = replace(ctx, nest=ctx.nest + 1, loop_depth=ctx.loop_depth + 1, top=False)
        fn.scopes.append([var] if var is not None else [])
        self.block(fn, inner, indent + 1)
        fn.scopes.pop()

    def stmt_for(self, fn: Function, ctx: Ctx, indent: int) -> None:
        name = fn.fresh("i")
        header, index = self.range_header(fn, ctx)
        fn.emit(indent, f"for {name} in {header}:")
        self.loop_body(fn, ctx, indent, Var(name, "i", LOOP_BOUND + NMAX + 1, index=index, mutable=False))

    def range_header(self, fn: Function, ctx: Ctx) -> tuple[str, bool]:
        """A `range(...)` with bounds in [-LOOP_BOUND - 1, LOOP_BOUND + 1] and whether it stays in [0, n)."""
        n = self.length_text(fn)
        form = self.integer(0, 9) if fn.has_n else self.integer(4, 7)
        if form == 0:
            return f"range({n})", True
        if form == 1:
            return f"range({n} - 1, -1, {_lit(-self.integer(1, 3))})", True
        if form == 2:
            return f"range({self.index(fn, ctx, 'n', 1)}, {n})", True
        if form == 3:
            step = str(self.integer(1, 3)) if self.chance(50) else \
                f"({self.iexpr(fn, ctx, 1).text} % {self.integer(1, 3)} + 1)"
            return f"range(0, {n}, {step})", True
        lo = self.small_int(fn, ctx, LOOP_BOUND, 1)
        hi = self.small_int(fn, ctx, LOOP_BOUND, 1)
        if form == 4:
            return f"range({hi.text})", False
        if form == 5:
            return f"range({lo.text}, {hi.text})", False
        if form == 6:
            return f"range({hi.text}, {lo.text}, {_lit(self.pick((-1, -2, 2, 3, -3)))})", False
        if form == 7:  # runtime step of either sign
            step = self.pick((f"(1 if {self.bexpr(fn, ctx, 1).text} else -1)",
                              f"(({self.iexpr(fn, ctx, 1).text} % 2) * 2 - 1)",
                              f"(-({self.iexpr(fn, ctx, 1).text} % 3) - 1)",
                              f"({self.iexpr(fn, ctx, 1).text} % 3 + 1)"))
            return f"range({lo.text}, {hi.text}, {step})", False
        if form == 8:
            return f"range({n} - 1, {lo.text}, -1)", False
        return f"range({lo.text}, {n} + 1)", False

    def stmt_while(self, fn: Function, ctx: Ctx, indent: int) -> None:
        counter = fn.fresh("w")
        form = self.integer(0, 3)
        inner = replace(ctx, loop_depth=ctx.loop_depth + 1)  # for what runs once per iteration
        limit = self.small_int(fn, ctx if form == 3 else inner, LOOP_BOUND, 1)
        var = Var(counter, "i", LOOP_BOUND + 1, mutable=False)
        if form == 3:  # counting down
            fn.emit(indent, f"{counter} = {limit.text}")
            fn.emit(indent, f"while {counter} > 0:")
            fn.emit(indent + 1, f"{counter} -= 1")
        else:
            fn.emit(indent, f"{counter} = 0")
            if form == 0:
                fn.emit(indent, f"while {counter} < {limit.text}:")
            elif form == 1:
                fn.emit(indent, f"while {counter} < {limit.text} and {self.bexpr(fn, inner, 1).text}:")
            else:
                fn.emit(indent, "while True:")
                fn.emit(indent + 1, f"if {counter} >= {limit.text}:")
                fn.emit(indent + 2, "break")
            fn.emit(indent + 1, f"{counter} += 1")  # first, so that `continue` cannot skip it
        fn.declare(var)  # readable after the loop too: its final value is defined
        self.loop_body(fn, ctx, indent, None)

    def stmt_prange(self, fn: Function, ctx: Ctx, indent: int) -> None:
        targets = [a for a in fn.arrays if a.kind == "f" and a.dims == ("n",)]
        if not targets:
            return self.stmt_for(fn, ctx, indent)
        target = self.pick(targets)
        name = fn.fresh("i")
        fn.emit(indent, f"for {name} in iz.prange({self.pick(('n', f'len({target.name})', '0, n'))}):")
        inner = replace(ctx, nest=ctx.nest + 1, loop_depth=ctx.loop_depth + 1, top=False,
                        prange=(target.name, name))
        fn.scopes.append([Var(name, "i", NMAX, index=True, mutable=False)])
        self.block(fn, inner, indent + 1, most=3)
        self.statements += 1
        self.store(fn, inner, indent + 1, target)  # at least one store, at the loop index
        fn.scopes.pop()

    def stmt_jump(self, fn: Function, ctx: Ctx, indent: int) -> None:
        jump = "continue" if ctx.prange is not None else self.pick(("break", "continue"))
        fn.emit(indent, f"if {self.bexpr(fn, ctx, 1).text}:")
        fn.emit(indent + 1, jump)

    def return_value(self, fn: Function, ctx: Ctx) -> str:
        if fn.returns is None:
            return ""
        e = self.expr(fn.returns, fn, ctx, self.depth())
        if not fn.is_entry:
            e = self.fit(e)
        return " " + e.text

    def stmt_return(self, fn: Function, ctx: Ctx, indent: int) -> None:
        fn.emit(indent, f"if {self.bexpr(fn, ctx, 1).text}:")
        fn.emit(indent + 1, f"return{self.return_value(fn, ctx)}")

    def stmt_call(self, fn: Function, ctx: Ctx, indent: int) -> None:
        call = self.call(fn, ctx, None, 2)
        if call is None:
            return self.stmt_store(fn, ctx, indent)
        fn.emit(indent, call.text)

    def stmt_assert(self, fn: Function, ctx: Ctx, indent: int) -> None:
        form = self.integer(0, 4)
        if form in (2, 3) and not fn.has_n:
            form = 0
        if form == 0:
            text = f"({self.iexpr(fn, ctx, 2).text} % {self.integer(1, 9)}) >= 0"
        elif form == 1:
            text = f"abs({self.finite(self.fexpr(fn, ctx, 2)).text}) >= 0.0"  # false for nan
        elif form == 2:
            text = f"0 <= {self.index(fn, ctx, 'n', 2)} < n"
        elif form == 3:
            text = "n >= 1"
        else:
            b = self.bexpr(fn, ctx, 1).text
            text = f"{b} or not {b}"
        fn.emit(indent, f"assert {text}")

    def stmt_local_array(self, fn: Function, ctx: Ctx, indent: int) -> None:
        name = fn.fresh("t")
        form = self.weighted([(3, "zeros"), (2, "empty"), (2, "2d"), (1, "int"), (1, "fixed")])
        if form == "zeros" or form == "empty":
            fn.emit(indent, f"{name} = iz.{form}({self.length_text(fn)}, f64)")
            if form == "empty":
                self.fill(fn, ctx, indent, name, ("n",))
            fn.arrays.append(Arr(name, "f", ("n",)))
        elif form == "2d":
            m = self.integer(1, 4)
            zeros = self.chance(50)
            fn.emit(indent, f"{name} = iz.{'zeros' if zeros else 'empty'}((n, {m}), f64)")
            if not zeros:
                self.fill(fn, ctx, indent, name, ("n", m))
            fn.arrays.append(Arr(name, "f", ("n", m)))
        elif form == "int":
            fn.emit(indent, f"{name} = iz.zeros(n, i64)")
            fn.arrays.append(Arr(name, "i", ("n",)))
        else:
            m = self.integer(1, 5)
            fn.emit(indent, f"{name} = iz.zeros({m}, f64)")
            fn.arrays.append(Arr(name, "f", (m,)))

    def fill(self, fn: Function, ctx: Ctx, indent: int, name: str, dims: tuple[str | int, ...]) -> None:
        """Initialize every element of an `iz.empty` array (uninitialized memory differs between runs)."""
        loop_vars = [fn.fresh("i") for _ in dims]
        for depth, (var, dim) in enumerate(zip(loop_vars, dims)):
            fn.emit(indent + depth, f"for {var} in range({dim}):")
        fn.scopes.append([Var(loop_vars[0], "i", NMAX, index=True, mutable=False)])
        value = self.fit(self.fexpr(fn, replace(ctx, loop_depth=ctx.loop_depth + 1, top=False), 1))
        fn.scopes.pop()
        fn.emit(indent + len(dims), f"{name}[{', '.join(loop_vars)}] = {value.text}")


def _int_bound(op: str, a: int, b: int) -> int:
    """A bound on |x op y| for |x| <= a, |y| <= b (b is the exponent or shift count for ** << >>)."""
    if op in ("+", "-"):
        return a + b
    if op == "*":
        return a * b
    if op == "**":
        return max(a, 1) ** b
    if op == "<<":
        return a << b
    if op == ">>":
        return a
    return 1 << max(a, b).bit_length()  # & | ^ on two's complement values in [-2**k, 2**k)


# --- the program ------------------------------------------------------------------------------------


_HELPER_PARAMS = {"f": ("p", "q", "r"), "i": ("k", "m")}


def _helper(gen: Generator, index: int, helpers: list[Helper]) -> tuple[Helper, list[str]]:
    """A helper kernel: scalar-returning (f64, i64, boolean) or writing its first array argument."""
    returns = gen.weighted([(3, "f"), (2, "i"), (1, "b"), (3, None)])
    params: list[tuple[str, str]] = []
    arrays = gen.integer(1 if returns is None else 0, 2)
    params += [(name, "farray") for name in ("dst", "src")[:arrays]] if returns is None else \
        [(name, "farray") for name in ("a", "b")[:arrays]]
    if arrays:
        params.append(("n", "n"))
    for kind in ("f", "i"):
        params += [(name, kind) for name in _HELPER_PARAMS[kind][: gen.integer(0 if arrays else 1, 2)]]
    name = f"h{index}"
    fn = Function(name, returns, is_entry=False, max_loop_depth=1, budget=HELPER_STATEMENTS, helpers=helpers)
    for pname, kind in params:
        if kind == "farray":
            fn.arrays.append(Arr(pname, "f", ("n",)))
        elif kind == "n":
            fn.declare(Var(pname, "i", NMAX, mutable=False))
        else:
            bound = FLOAT_VAR if kind == "f" else INT_VAR
            fn.declare(Var(pname, kind, bound, sf=False, mutable=False))  # an f64 parameter may get an int
    gen.block(fn, Ctx(), 0, most=4)
    if returns is None:  # a writing helper writes
        gen.statements += 1
        gen.store(fn, Ctx(), 0, fn.arrays[0])
    else:
        fn.emit(0, f"return{gen.return_value(fn, Ctx())}")
    annotations = {"farray": "Array[f64]", "n": "i64", "f": "f64", "i": "i64"}
    signature = ", ".join(f"{p}: {annotations[k]}" for p, k in params)
    ret = {None: "", "f": " -> f64", "i": " -> i64", "b": " -> boolean"}[returns]
    lines = ["@iz.kernel", f"def {name}({signature}){ret}:", *fn.lines]
    return Helper(name, tuple(params), returns), lines


def _entry(gen: Generator, helpers: list[Helper]) -> tuple[list[Param], str | None, list[str]]:
    params = [Param("out", "farray"), Param("x", "farray")]
    if gen.chance(50):
        params.append(Param("y", "farray"))
    if gen.chance(50):
        params.append(Param("idx", "iarray"))
    params.append(Param("n", "n"))
    for name, kind in (("a", "f"), ("k", "i"), ("flag", "b")):
        if gen.chance(50 if kind != "b" else 25):
            params.append(Param(name, kind))
    returns = gen.weighted([(9, "f"), (7, "i"), (4, None)])
    fn = Function("entry", returns, is_entry=True, max_loop_depth=2, budget=ENTRY_STATEMENTS, helpers=helpers)
    for p in params:
        if p.kind == "farray":
            fn.arrays.append(Arr(p.name, "f", ("n",)))
        elif p.kind == "iarray":
            fn.arrays.append(Arr(p.name, "i", ("n",), index_table=True))
        elif p.kind == "n":
            fn.declare(Var("n", "i", NMAX, mutable=False))
        else:
            bound = {"f": F_PARAM_BOUND, "i": I_PARAM_BOUND, "b": 1}[p.kind]
            fn.declare(Var(p.name, p.kind, bound, mutable=False))
    gen.block(fn, Ctx(), 0, most=6)
    gen.statements += 1
    gen.store(fn, Ctx(), 0, fn.arrays[0])  # entry writes `out`
    if returns is not None:
        fn.emit(0, f"return{gen.return_value(fn, Ctx())}")
    annotations = {"farray": "Array[f64]", "iarray": "Array[i64]", "n": "i64", "f": "f64", "i": "i64",
                   "b": "boolean"}
    signature = ", ".join(f"{p.name}: {annotations[p.kind]}" for p in params)
    ret = {None: "", "f": " -> f64", "i": " -> i64"}[returns]
    decorator = gen.pick(("@iz.kernel", "@iz.kernel", '@iz.kernel(backend="interp")'))
    return params, returns, [decorator, f"def entry({signature}){ret}:", *fn.lines]


ENTROPY_BYTES = 2048
"""Bytes of entropy per program: more than any program reads (a choice past the end takes option 0)."""


def programs() -> st.SearchStrategy[Program]:
    """Random modules with an `entry` kernel (module docstring)."""
    return st.binary(min_size=ENTROPY_BYTES, max_size=ENTROPY_BYTES).map(generate_program)


def generate_program(entropy: bytes) -> Program:
    """The program that `entropy` describes."""
    gen = Generator(entropy)
    header = ["import math", "", "import isozyme as iz", "from isozyme import Array, boolean, f64, i64", ""]
    gen.nonfinite = gen.chance(25)
    if gen.nonfinite:  # bounds mean nothing for these: every use that could raise in Python is guarded
        for name, value in (("INF", "math.inf"), ("NAN", "math.nan"), ("HUGE", "1e300")):
            if gen.chance(60):
                header.append(f"{name} = {value}")
                gen.constants[name] = Expr(name, "f", 1.0, finite=False)
    if gen.chance(40):
        header.append("SCALE = 0.75")
        gen.constants["SCALE"] = Expr("SCALE", "f", 0.75)
    if gen.chance(40):
        header.append("STRIDE = 3")
        gen.constants["STRIDE"] = Expr("STRIDE", "i", 3)
    chunks = ["\n".join(header)]
    helpers: list[Helper] = []
    for index in range(gen.weighted([(4, 0), (3, 1), (1, 2)])):
        helper, lines = _helper(gen, index, list(helpers))
        helpers.append(helper)
        chunks.append("\n".join(lines))
    params, returns, lines = _entry(gen, helpers)
    chunks.append("\n".join(lines))
    assert gen.statements <= MAX_STATEMENTS
    return Program("\n\n\n".join(chunks) + "\n", tuple(params), returns, gen.nonfinite)


@st.composite
def arguments(draw: Callable[[st.SearchStrategy[Any]], Any], program: Program) -> tuple[Any, ...]:
    """Arguments for `program`'s entry: seeded numpy arrays of moderate values, n in [1, NMAX]."""
    n = draw(st.integers(1, NMAX))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    args: list[Any] = []
    specials = [np.nan, np.inf, -np.inf, -0.0, 1e300] if program.nonfinite else [0.0]
    for p in program.params:
        if p.kind == "farray":
            values = np.round(rng.uniform(-4.0, 4.0, n), int(rng.choice([1, 3, 17])))
            where = rng.random(n) < 0.15
            values[where] = rng.choice(specials, int(where.sum()))
            args.append(values)
        elif p.kind == "iarray":
            args.append(rng.integers(0, n, n, dtype=np.int64))
        elif p.kind == "n":
            args.append(n)
        elif p.kind == "f":
            args.append(float(rng.choice([*specials, 1.0, -2.0, 0.5, round(float(rng.uniform(-5.0, 5.0)), 3)])))
        elif p.kind == "i":
            args.append(int(rng.integers(-I_PARAM_BOUND, I_PARAM_BOUND + 1)))
        else:
            args.append(bool(rng.integers(0, 2)))
    return tuple(args)


@st.composite
def cases(draw: Callable[[st.SearchStrategy[Any]], Any]) -> tuple[Program, tuple[Any, ...]]:
    """A program and arguments for it."""
    program = draw(programs())
    return program, draw(arguments(program))


# --- running and comparing --------------------------------------------------------------------------


_module_numbers = itertools.count()


def load_module(source: str, directory: Path | str) -> types.ModuleType:
    """Write `source` to a new file in `directory` and import it under a unique module name.

    The module is registered in `sys.modules` (as an imported module is), so `inspect.getsource` finds its
    kernels' source.
    """
    digest = hashlib.sha1(source.encode()).hexdigest()[:10]
    name = f"izgen_{digest}_{next(_module_numbers)}"
    path = Path(directory) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def is_kernel(value: object) -> bool:
    return callable(value) and hasattr(value, "py_func")


def python_reference(kernel: Any) -> Callable[..., Any]:
    """`kernel.py_func`, with every kernel it can reach replaced by that kernel's own `py_func`.

    Inside `entry.py_func` the global `h0` is still a kernel, so calling it would run compiled code; the
    oracle of a differential test must be plain Python all the way down. The functions are rebuilt from
    their code objects over a copy of their module globals (and of their closure cells) in which kernels
    are replaced, recursively; the module itself is left alone.
    """
    new_globals: dict[int, dict[str, Any]] = {}
    functions: dict[int, types.FunctionType] = {}

    def plain(value: Any) -> Any:
        return convert(value) if is_kernel(value) else value

    def convert(k: Any) -> types.FunctionType:
        if id(k) in functions:
            return functions[id(k)]
        fn = k.py_func
        key = id(fn.__globals__)
        fresh = key not in new_globals
        if fresh:
            new_globals[key] = dict(fn.__globals__)
        closure = None
        if fn.__closure__ is not None:
            closure = tuple(types.CellType(plain(_cell_value(cell))) for cell in fn.__closure__)
        converted = types.FunctionType(fn.__code__, new_globals[key], fn.__name__, fn.__defaults__, closure)
        converted.__kwdefaults__ = fn.__kwdefaults__
        functions[id(k)] = converted
        if fresh:
            g = new_globals[key]
            for name, value in list(g.items()):
                g[name] = plain(value)
        return converted

    return convert(kernel)


def _cell_value(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def copy_args(args: Sequence[Any]) -> list[Any]:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _float_close(expected: float, actual: float, rtol: float) -> bool:
    if math.isnan(expected) or math.isnan(actual):
        return math.isnan(expected) and math.isnan(actual)
    if math.isinf(expected) or math.isinf(actual):
        return expected == actual
    return abs(expected - actual) <= rtol * max(abs(expected), abs(actual))


def check_return_type(returns: str | None, actual: Any) -> None:
    """The kernel's return value has the annotated type: "f", "i", "b" or None."""
    if returns is None:
        assert actual is None, f"a kernel without return annotation returned {actual!r}"
    elif returns == "b":
        assert isinstance(actual, bool | np.bool_), f"-> boolean returned {actual!r}"
    elif returns == "i":
        assert isinstance(actual, int | np.integer) and not isinstance(actual, bool | np.bool_), \
            f"-> i64 returned {actual!r} ({type(actual).__name__})"
    else:
        assert isinstance(actual, float | np.floating), f"-> f64 returned {actual!r} ({type(actual).__name__})"


def assert_same_results(expected: tuple[Any, Sequence[Any]], actual: tuple[Any, Sequence[Any]],
                        returns: str | None, rtol: float = 1e-12) -> None:
    """Return values and arguments (arrays after the run) agree: ints and booleans exactly, floats within
    `rtol` relative error with nan at the same places. `returns` is the annotation ("f", "i", "b", None)."""
    (expected_ret, expected_args), (actual_ret, actual_args) = expected, actual
    check_return_type(returns, actual_ret)
    if returns is None:
        assert expected_ret is None, f"python returned {expected_ret!r}"
    elif returns == "f":
        assert _float_close(float(expected_ret), float(actual_ret), rtol), \
            f"return value: python {expected_ret!r}, kernel {actual_ret!r}"
    else:
        assert expected_ret == actual_ret, f"return value: python {expected_ret!r}, kernel {actual_ret!r}"
    for position, (e, a) in enumerate(zip(expected_args, actual_args)):
        if not isinstance(e, np.ndarray):
            continue
        assert a.dtype == e.dtype and a.shape == e.shape
        if e.dtype.kind != "f":
            mismatch = np.flatnonzero(e != a)
        else:
            close = [_float_close(float(u), float(v), rtol) for u, v in zip(e.ravel(), a.ravel())]
            mismatch = np.flatnonzero(~np.array(close, dtype=bool))
        assert mismatch.size == 0, (f"argument {position} differs at {mismatch.tolist()}: python "
                                    f"{e.ravel()[mismatch].tolist()}, kernel {a.ravel()[mismatch].tolist()}")


def _bits(value: Any) -> Any:
    """A float by its bit pattern (any nan as "nan": which nan an operation returns depends on the order
    of its operands, which an optimizer may swap); other values as they are."""
    if isinstance(value, float | np.floating):
        return "nan" if math.isnan(value) else struct.pack("<d", float(value)).hex()
    return value


def assert_bit_identical(first: tuple[Any, Sequence[Any]], second: tuple[Any, Sequence[Any]]) -> None:
    """Two runs of kernels agree exactly: return values (floats by bit pattern) and arrays byte for byte."""
    (ret1, args1), (ret2, args2) = first, second
    assert type(ret1) is type(ret2) and _bits(ret1) == _bits(ret2), f"return value: {ret1!r} versus {ret2!r}"
    for position, (a, b) in enumerate(zip(args1, args2)):
        if isinstance(a, np.ndarray):
            same = a.dtype == b.dtype and _array_bits(a) == _array_bits(b)
            assert same, f"argument {position}: {a.tolist()} versus {b.tolist()}"


def _array_bits(a: np.ndarray) -> list[Any]:
    return [_bits(value) for value in a.ravel().tolist()]
