"""Random *differentiable* isozyme kernels as Python source text, for the gradient fuzz tests.

`programs(features)` draws a module: `import isozyme as iz`, zero to two helper kernels and an entry kernel
`entry(out, x, [y], [idx], n, a, [b]) [-> f64]`, using only the features named in `features` (a subset of
`FEATURES`; `Program.features` says which ones a program really uses). `arguments(program, rng)` draws
its arguments, `traced_module(source)` turns the source into plain Python whose branch decisions are
recorded (the finite-difference oracle), `program_from_source` wraps a hand-written module (regression
tests). Modules are loaded with `kernelgen.load_module`. The test is `test_gradient_fuzz.py`.

The features, each behind a switch:

| feature | what the generator emits |
|---|---|
| `loss` | the entry returns a float (otherwise it only writes `out`) |
| `second_input` | a second input array `y` |
| `index_table` | an `Array[i64]` table `idx` of indices in [0, n): gathers `x[idx[i]]`, scatters `out[idx[i]] +=` |
| `nested_loops` | loops inside loops (entry depth 2, helpers 1 more) |
| `reversed_ranges` | `range(n - 1, -1, -1)` and `range(0, n, 2)` |
| `triangular_loops` | `range(i, n)` and `range(i + 1, n)` over an outer index `i` |
| `computed_trip_counts` | `range(k)` with an int `k` the kernel computes from `n` and loop indices |
| `data_trip_counts` | `range(k)` with `k` counted from data (`if x[j] > 0.3: k += 1`) or read from `idx` |
| `while_loops` | `while w < n and <test on active data>:` with a counter `w` (at most n trips) |
| `break` | `if <test>: break` in a `for` or `while` body |
| `continue` | `if <test>: continue` in a `for` body |
| `return_in_loop` | `if <test>: return <value>` inside a loop |
| `branches` | `if`/`else` and conditional expressions on active values (`if x[i] * a > 0.5:`) and on ints |
| `early_return` | `if <test>: return <value>` in a branch outside loops |
| `overwrites` | stores into the input arrays `x`, `y` (`x[i] = 0.5 * x[i] * x[i]`) that later reads see |
| `accumulators` | `s += e`, `s -= e`, `s = 0.5 * s + e`, `s *= tanh(e)` on variables of enclosing scopes |
| `helper_calls` | `@iz.kernel` helpers returning a float or writing an array, called from the entry |
| `split_calls` | helpers declared `@iz.kernel(inline=False)`: reverse mode differentiates their calls in split mode |
| `local_arrays` | `iz.zeros(n, f64)` / `iz.empty(n, f64)` at the function's top level, filled before read |
| `local_arrays_in_loops` | the same where the allocation does not dominate the exit: in a loop body or a branch, |
| | after an early `return`, or in a helper called there |
| `exits_over_local_arrays` | the entry starts with a local array filled from the inputs, then a loop the data |
| | leaves (`while` with a data test, or `for` with `break`), maybe inside a `for`, whose body adds a term |
| | that reads the array into `out` |
| `prange` | top-level `for i in iz.prange(n):` loops in the entry: a value of the inputs (maybe summed by an |
| | inner loop over every `x[j]`, whose adjoint every iteration adds to), stored or added into `out[i]`, |
| | maybe added to an accumulator (a reduction); the body reads `out` only at `i` and writes nothing else |
| `math` | sin, cos, exp of bounded arguments, tanh, sqrt(1 + e*e), log(1 + e*e), e / (1 + e*e) |

Numerical conditioning (why finite differences of these programs are accurate):

- Magnitudes are bounded by construction: inputs lie in [-2, 2], `x`/`y` elements stay in [-2, 2] (their
  stores are squashed to 2: `0.5 * x[i] * x[i]` or a squash), other stored values are squashed to <= 4
  (`e / (1 + e*e)`, `tanh`, `sin`), products only take operands <= 4, `exp` only arguments <= 2 (else
  `exp(tanh(e))`), `sin`/`cos` only arguments <= 10. Accumulators may grow to ~1e5 (a few hundred updates of
  <= 4); they are squashed before a product. Divisors are `1 + e*e`, roots and logs see `1 + e*e`.
  Nothing overflows, every function is smooth (C-infinity) between branch decisions.
- Kinks come only from control flow: `if`/`while` tests (on active values against thresholds such as 0.5),
  and trip counts counted from such tests. No `abs`, `min`, `max`, `floor` or `int()` on floats. So the
  program is smooth wherever its *trace* (the sequence of all branch decisions) is locally constant.
  `traced_module` rewrites every `if`/`while`/conditional-expression test `t` into `_branch(t)`, which records
  the decision: the oracle differentiates only where the traces at all finite-difference points equal the
  trace at the point itself (then every point runs the same composition of smooth functions), and skips the
  finite-difference comparison otherwise (rare: a threshold within ~1e-3 of a tested value).
- Loops terminate: `for` over ranges within [0, n], `while` loops test `w < n` first and increment `w` as
  the last statement of the body (no `continue` in a `while` body).

Indices lie in [0, n): loop variables of ranges within [0, n), `idx[...]`, `(i + 1) % n`, `n - 1 - i`, 0.
Scoping follows kernelgen: a name assigned inside a block is read only inside it; loop variables are never
assigned; `iz.empty` arrays are filled before they are read. Helpers never receive two arrays that alias.
"""

from __future__ import annotations

import ast
import itertools
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st
from kernelgen import Choices

FEATURES = frozenset({
    "loss", "second_input", "index_table", "nested_loops", "reversed_ranges", "triangular_loops",
    "computed_trip_counts", "data_trip_counts", "while_loops", "break", "continue", "return_in_loop",
    "branches", "early_return", "overwrites", "accumulators", "helper_calls", "split_calls", "local_arrays",
    "local_arrays_in_loops", "exits_over_local_arrays", "prange", "math",
})
"""Every switch the generator knows (module docstring)."""

NMAX = 5
"""Array length n in [1, NMAX]."""
INPUT_BOUND = 2.0
"""|x|, |y| elements (on entry and after every store)."""
NOMINAL = 4.0
"""|a stored value| other than into x, y and accumulators."""
LARGE = 1e5
"""|an accumulator| or an element of an array that `+=` updates."""
ENTRY_STATEMENTS, HELPER_STATEMENTS = 10, 5
THRESHOLDS = ("0.5", "0.25", "0.0", "-0.25", "1.0", "-0.5", "0.3")


@dataclass(frozen=True)
class Expr:
    """A generated float expression and a bound on |its value|."""

    text: str
    bound: float


@dataclass
class ArrayVar:
    """A float array in scope: a parameter or a local."""

    name: str
    bound: float
    """|element| on reads."""
    writable: bool
    readable: bool = True
    """False for an `iz.empty` array until its fill loop is emitted."""
    accumulates: bool = False
    """`+=` stores allowed (its elements are LARGE)."""
    store_bound: float = NOMINAL


@dataclass
class FloatVar:
    name: str
    bound: float
    mutable: bool


@dataclass
class Scope:
    """Names declared in one block."""

    floats: list[FloatVar] = field(default_factory=list)
    indices: list[str] = field(default_factory=list)
    """Int expressions (names) valid as indices: in [0, n)."""
    outer_indices: list[str] = field(default_factory=list)
    """Loop variables i of `for` ranges starting at 0 or more and ending at n: `range(i, n)` is valid."""
    trips: list[str] = field(default_factory=list)
    """Int variables in [0, n]: valid trip counts."""
    arrays: list[ArrayVar] = field(default_factory=list)


@dataclass
class Ctx:
    """Where a statement is generated."""

    indent: int = 0
    loops: tuple[str, ...] = ()
    """The kinds ("for", "while") of the enclosing loops, innermost last."""
    top: bool = True
    """At the function's top level (outside loops and branches)."""


@dataclass(frozen=True)
class Helper:
    name: str
    kind: str
    """"reduce" (`h(v, n, c) -> f64`) or "write" (`h(dst, src, n, c)`: writes dst)."""
    allocates: bool
    """It allocates local arrays: called inside a loop or branch, they are allocated there (inlining)."""


@dataclass
class Function:
    name: str
    returns: bool
    max_depth: int
    budget: int
    helpers: list[Helper]
    has_idx: bool
    scopes: list[Scope] = field(default_factory=lambda: [Scope()])
    lines: list[str] = field(default_factory=list)
    counter: itertools.count = field(default_factory=itertools.count)
    returned: bool = False
    """A `return` was emitted before the current statement: what follows need not run (an allocation here
    does not dominate the exit, like one in a branch)."""

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.counter)}"

    def emit(self, ctx: Ctx, line: str) -> None:
        self.lines.append("    " * (ctx.indent + 1) + line)

    def all(self, attribute: str) -> list[Any]:
        return [item for scope in self.scopes for item in getattr(scope, attribute)]


@dataclass(frozen=True)
class Program:
    """A generated module and what the tests need to know about its `entry` kernel."""

    source: str
    params: tuple[tuple[str, str], ...]
    """(name, kind) with kind "farray", "iarray", "n" or "f"."""
    returns: bool
    """The entry returns a float."""
    features: frozenset[str]
    """The features the program uses."""
    writes: frozenset[str]
    """The parameter arrays the program may write."""

    def __repr__(self) -> str:
        return f"Program(features={sorted(self.features)}, source='''\n{self.source}''')"


class Generator(Choices):
    """Makes one program from entropy bytes, deterministically (a byte per choice; zero bytes, also past
    the end, take the first option, so shrinking the bytes simplifies the program, as in kernelgen)."""

    def __init__(self, entropy: bytes, features: frozenset[str]) -> None:
        unknown = features - FEATURES
        assert not unknown, f"unknown features {sorted(unknown)}"
        self.entropy, self.position, self.features = entropy, 0, features
        self.used: set[str] = set()
        self.writes: set[str] = set()

    def integer(self, lo: int, hi: int) -> int:
        byte = self.entropy[self.position] if self.position < len(self.entropy) else 0
        self.position += 1
        return lo + byte % (hi - lo + 1)

    def on(self, feature: str) -> bool:
        return feature in self.features

    def use(self, feature: str) -> None:
        assert feature in self.features, feature
        self.used.add(feature)

    # --- expressions -------------------------------------------------------------------------------------

    def index(self, fn: Function) -> str:
        """An int expression in [0, n)."""
        names = fn.all("indices") or ["0"]
        base = self.pick(names)
        form = self.weighted([(6, "plain"), (2, "next"), (1, "mirror"), (2, "table")])
        if form == "next":
            return f"({base} + 1) % n"
        if form == "mirror":
            return f"n - 1 - {base}"
        if form == "table" and fn.has_idx:
            self.use("index_table")
            return f"idx[{base}]"
        return base

    def leaf(self, fn: Function) -> Expr:
        arrays = [a for a in fn.all("arrays") if a.readable]
        floats = fn.all("floats")
        roll = self.integer(0, 9)
        if roll < 5 and arrays:
            array = self.pick(arrays)
            return Expr(f"{array.name}[{self.index(fn)}]", array.bound)
        if roll < 8 and floats:
            var = self.pick(floats)
            return Expr(var.name, LARGE if var.mutable else var.bound)
        if roll == 8 and fn.all("indices"):
            return Expr(f"float({self.pick(fn.all('indices'))})", NMAX)
        text = self.pick(("0.5", "1.5", "-0.75", "2.0", "0.1", "-1.25"))
        return Expr(f"({text})" if text.startswith("-") else text, abs(float(text)))

    def expr(self, fn: Function, depth: int = 2) -> Expr:
        """A float expression of nesting depth <= `depth`."""
        if depth == 0 or self.chance(30):
            return self.leaf(fn)
        form = self.weighted([(3, "add"), (2, "sub"), (3, "mul"), (1, "scale"), (4, "math"), (1, "ratio"),
                              (1, "select")])
        if form == "math" and not self.on("math"):
            form = "ratio"
        if form == "select" and not self.on("branches"):
            form = "add"
        if form == "select":
            self.use("branches")
            test, left, right = self.condition(fn, depth=depth - 1), self.expr(fn, depth - 1), self.expr(fn, depth - 1)
            return Expr(f"({left.text} if {test} else {right.text})", max(left.bound, right.bound))
        if form in ("add", "sub"):
            left, right = self.expr(fn, depth - 1), self.expr(fn, depth - 1)
            return Expr(f"({left.text} {'+' if form == 'add' else '-'} {right.text})", left.bound + right.bound)
        if form == "mul":
            left, right = self.squash(self.expr(fn, depth - 1), NOMINAL), self.squash(self.expr(fn, depth - 1),
                                                                                       NOMINAL)
            return Expr(f"({left.text} * {right.text})", left.bound * right.bound)
        if form == "scale":
            inner = self.expr(fn, depth - 1)
            c = self.pick(("0.5", "2.0", "-1.5", "0.25"))
            return Expr(f"({_paren(c)} * {inner.text})", abs(float(c)) * inner.bound)
        if form == "ratio":
            num, den = self.expr(fn, depth - 1), self.squash(self.expr(fn, depth - 1), 100.0)
            return Expr(f"({num.text} / (1.0 + {den.text} * {den.text}))", num.bound)
        return self.math(fn, self.expr(fn, depth - 1))

    def math(self, fn: Function, e: Expr) -> Expr:
        """A smooth math function of `e`, its argument bounded where the function needs it."""
        self.use("math")
        name = self.pick(("sin", "cos", "exp", "tanh", "sqrt", "log", "tanh"))
        if name in ("sin", "cos"):
            e = self.squash(e, 10.0)
            return Expr(f"iz.{name}({e.text})", 1.0)
        if name == "exp":
            arg = e if e.bound <= 2.0 else Expr(f"iz.tanh({e.text})", 1.0)
            return Expr(f"iz.exp({arg.text})", float(np.exp(arg.bound)))
        if name == "tanh":
            return Expr(f"iz.tanh({e.text})", 1.0)
        e = self.squash(e, 100.0)
        if name == "sqrt":
            return Expr(f"iz.sqrt(1.0 + {e.text} * {e.text})", 1.0 + e.bound)
        return Expr(f"iz.log(1.0 + {e.text} * {e.text})", 2.0 * float(np.log1p(e.bound)))

    def squash(self, e: Expr, bound: float) -> Expr:
        """`e`, or a smooth function of it with |value| <= bound (bound >= 1)."""
        if e.bound <= bound:
            return e
        forms = ["ratio"] + (["tanh", "tanh", "sin"] if self.on("math") else [])
        form = self.pick(forms)
        if form == "sin" and e.bound <= 10.0:
            self.use("math")
            return Expr(f"iz.sin({e.text})", 1.0)
        if form in ("tanh", "sin"):
            self.use("math")
            return Expr(f"iz.tanh({e.text})", 1.0)
        return Expr(f"({e.text} / (1.0 + {e.text} * {e.text}))", 0.5)

    def condition(self, fn: Function, active: bool = True, depth: int = 1) -> str:
        """A test: an active value against a threshold, or (if not `active`) maybe one on integers."""
        indices = fn.all("indices")
        if (not active or self.chance(25)) and indices:
            i = self.pick(indices)
            return self.pick((f"{i} % 2 == 0", f"{i} == 0", f"{i} < n - 1", f"{i} > 1"))
        e = self.expr(fn, depth)
        return f"{e.text} {self.pick(('>', '<'))} {_paren(self.pick(THRESHOLDS))}"

    # --- statements --------------------------------------------------------------------------------------

    def block(self, fn: Function, ctx: Ctx, most: int) -> None:
        """1..most statements in a new scope."""
        fn.scopes.append(Scope())
        for position in range(self.integer(1, most)):
            if fn.budget > 0:
                self.statement(fn, ctx)
            elif position == 0:  # a block is never empty; past the budget, a simple statement
                self._let(fn, ctx)
        fn.scopes.pop()

    def statement(self, fn: Function, ctx: Ctx) -> None:
        fn.budget -= 1
        depth = len(ctx.loops)
        kinds: list[tuple[int, str]] = [(4, "let"), (5, "store")]
        if fn.all("floats") and self.on("accumulators"):
            kinds.append((5, "accumulate"))
        if depth == 0 or (depth < fn.max_depth and self.on("nested_loops")):
            kinds.append((5, "for"))
            if self.on("while_loops"):
                kinds.append((2, "while"))
        if self.on("branches"):
            kinds.append((3, "if"))
        if ctx.loops and self.on("break"):
            kinds.append((1, "break"))
        if ctx.loops and ctx.loops[-1] == "for" and self.on("continue"):
            kinds.append((1, "continue"))
        if ctx.loops and self.on("return_in_loop") or not ctx.loops and not ctx.top and self.on("early_return"):
            kinds.append((1, "return"))
        if fn.helpers and depth <= 1 and self.on("helper_calls"):
            kinds.append((3, "call"))
        if self.on("local_arrays" if ctx.top and not fn.returned else "local_arrays_in_loops"):
            kinds.append((2, "local"))
        if self.on("prange") and ctx.top and fn.name == "entry":
            kinds.append((4, "prange"))
        getattr(self, f"_{self.weighted(kinds)}")(fn, ctx)

    def _prange(self, fn: Function, ctx: Ctx) -> None:
        """The `prange` feature (module docstring): iterations independent but for `out[i]` and a reduction."""
        self.use("prange")
        out = next(a for a in fn.all("arrays") if a.name == "out")
        out.readable = False  # other iterations write it: read only at the loop index
        index = fn.fresh("i")
        fn.emit(ctx, f"for {index} in iz.prange(n):")
        fn.scopes.append(Scope(indices=[index]))
        body = Ctx(ctx.indent + 1, (*ctx.loops, "for"), top=False)
        value = fn.fresh("t")
        fn.emit(body, f"{value} = {self.squash(self.expr(fn), NOMINAL).text}")
        if self.chance(60):
            inner = fn.fresh("j")
            fn.emit(body, f"for {inner} in range(n):")
            fn.scopes.append(Scope(indices=[inner]))
            term = self.squash(self.expr(fn), NOMINAL)
            fn.emit(Ctx(body.indent + 1), f"{value} += x[{inner}] * {term.text}")
            fn.scopes.pop()
        stored = self.squash(Expr(value, LARGE), NOMINAL)
        fn.emit(body, f"out[{index}] {self.pick(('=', '+='))} {stored.text}")
        targets = [v for v in fn.scopes[0].floats if v.mutable]
        if targets and self.chance(50):
            self.use("accumulators")
            fn.emit(body, f"{self.pick(targets).name} += {self.squash(self.expr(fn), NOMINAL).text}")
        fn.scopes.pop()
        out.readable = True

    def _let(self, fn: Function, ctx: Ctx) -> None:
        name = fn.fresh("t")
        mutable = self.on("accumulators") and self.chance(40)
        e = self.squash(self.expr(fn), NOMINAL)
        fn.emit(ctx, f"{name} = {e.text}")
        fn.scopes[-1].floats.append(FloatVar(name, e.bound, mutable))

    def _accumulate(self, fn: Function, ctx: Ctx) -> None:
        targets = [v for v in fn.all("floats") if v.mutable]
        if not targets:
            return self._let(fn, ctx)
        self.use("accumulators")
        var = self.pick(targets)
        e = self.squash(self.expr(fn), NOMINAL)
        form = self.pick(("+=", "-=", "decay", "*="))
        if form == "decay":
            fn.emit(ctx, f"{var.name} = 0.5 * {var.name} + {e.text}")
        elif form == "*=" and self.on("math"):
            self.use("math")
            fn.emit(ctx, f"{var.name} *= iz.tanh({e.text})")
        else:
            fn.emit(ctx, f"{var.name} {'-=' if form == '-=' else '+='} {e.text}")

    def _store(self, fn: Function, ctx: Ctx) -> None:
        arrays = [a for a in fn.all("arrays") if a.writable and (a.readable or a.accumulates)]
        if not arrays:
            return self._let(fn, ctx)
        array = self.pick(arrays)
        if array.name in ("x", "y", "src"):
            self.use("overwrites")
        if array.name in ("x", "y"):
            self.writes.add(array.name)
        index = self.index(fn)
        if array.accumulates and self.chance(50):
            fn.emit(ctx, f"{array.name}[{index}] += {self.squash(self.expr(fn), NOMINAL).text}")
        elif array.bound <= INPUT_BOUND and self.chance(50):  # the classic overwrite: x[i] = x[i] * x[i]
            fn.emit(ctx, f"{array.name}[{index}] = 0.5 * {array.name}[{index}] * {array.name}[{index}]")
        else:
            fn.emit(ctx, f"{array.name}[{index}] = {self.squash(self.expr(fn), array.store_bound).text}")

    def _for(self, fn: Function, ctx: Ctx) -> None:
        if ctx.loops:
            self.use("nested_loops")
        var = fn.fresh("i")
        forms = [(6, "n")]
        if self.on("reversed_ranges"):
            forms += [(2, "down"), (1, "step2")]
        if self.on("triangular_loops") and fn.all("outer_indices"):
            forms.append((5, "triangle"))
        if self.on("computed_trip_counts"):
            forms.append((3, "computed"))
        if self.on("data_trip_counts"):
            forms.append((2, "data"))
        form = self.weighted(forms)
        outer = True
        if form == "down":
            self.use("reversed_ranges")
            header = "range(n - 1, -1, -1)"
        elif form == "step2":
            self.use("reversed_ranges")
            header = "range(0, n, 2)"
        elif form == "triangle":
            self.use("triangular_loops")
            header = f"range({self.pick(fn.all('outer_indices'))}{self.pick(('', ' + 1'))}, n)"
        elif form in ("computed", "data"):
            header = f"range({self.trip_count(fn, ctx, form)})"
            outer = False
        else:
            header = "range(n)"
        fn.emit(ctx, f"for {var} in {header}:")
        fn.scopes.append(Scope(indices=[var], outer_indices=[var] if outer else []))
        self.block(fn, Ctx(ctx.indent + 1, (*ctx.loops, "for"), top=False), 4)
        fn.scopes.pop()

    def trip_count(self, fn: Function, ctx: Ctx, form: str) -> str:
        """The name of an int in [0, n] emitted before a loop: computed from n and indices, or from data."""
        name = fn.fresh("k")
        indices = fn.all("indices")
        if form == "computed":
            self.use("computed_trip_counts")
            options = ["n // 2 + 1", "n - 1"]
            if indices:
                i = self.pick(indices)
                options += [f"n - {i}", f"{i} + 1", f"({i} * 3 + 1) % n + 1"]
            fn.emit(ctx, f"{name} = {self.pick(options)}")
            return name
        self.use("data_trip_counts")
        if fn.has_idx and indices and self.chance(40):
            self.use("index_table")
            fn.emit(ctx, f"{name} = idx[{self.pick(indices)}] + 1")
            return name
        counter = fn.fresh("j")
        fn.emit(ctx, f"{name} = 0")
        fn.emit(ctx, f"for {counter} in range(n):")
        fn.scopes.append(Scope(indices=[counter]))
        fn.emit(Ctx(ctx.indent + 1), f"if {self.condition(fn)}:")
        fn.scopes.pop()
        fn.emit(Ctx(ctx.indent + 2), f"{name} += 1")
        return name

    def _while(self, fn: Function, ctx: Ctx) -> None:
        self.use("while_loops")
        if ctx.loops:
            self.use("nested_loops")
        counter = fn.fresh("w")
        fn.emit(ctx, f"{counter} = 0")
        fn.scopes.append(Scope(indices=[counter]))
        fn.emit(ctx, f"while {counter} < n and {self.condition(fn)}:")
        inner = Ctx(ctx.indent + 1, (*ctx.loops, "while"), top=False)
        self.block(fn, inner, 3)
        fn.emit(inner, f"{counter} += 1")
        fn.scopes.pop()

    def _if(self, fn: Function, ctx: Ctx) -> None:
        self.use("branches")
        fn.emit(ctx, f"if {self.condition(fn)}:")
        inner = Ctx(ctx.indent + 1, ctx.loops, top=False)
        self.block(fn, inner, 3)
        if self.chance(50):
            fn.emit(ctx, "else:")
            self.block(fn, inner, 2)

    def _break(self, fn: Function, ctx: Ctx) -> None:
        self.use("break")
        fn.emit(ctx, f"if {self.condition(fn)}:")
        fn.emit(Ctx(ctx.indent + 1), "break")

    def _continue(self, fn: Function, ctx: Ctx) -> None:
        self.use("continue")
        fn.emit(ctx, f"if {self.condition(fn)}:")
        fn.emit(Ctx(ctx.indent + 1), "continue")

    def _return(self, fn: Function, ctx: Ctx) -> None:
        self.use("return_in_loop" if ctx.loops else "early_return")
        fn.returned = True
        fn.emit(ctx, f"if {self.condition(fn)}:")
        fn.emit(Ctx(ctx.indent + 1), f"return {self.expr(fn).text}" if fn.returns else "return")

    def _call(self, fn: Function, ctx: Ctx) -> None:
        dominates_exit = ctx.top and not fn.returned
        helpers = [h for h in fn.helpers if dominates_exit or not h.allocates or self.on("local_arrays_in_loops")]
        if not helpers:
            return self._let(fn, ctx)
        self.use("helper_calls")
        helper = self.pick(helpers)
        if helper.allocates and not dominates_exit:
            self.use("local_arrays_in_loops")
        arrays = [a for a in fn.all("arrays") if a.readable]
        c = self.squash(self.expr(fn, 1), NOMINAL).text
        if helper.kind == "reduce":
            targets = [v for v in fn.all("floats") if v.mutable]
            call = f"{helper.name}({self.pick(arrays).name}, n, {c})"
            if targets and self.chance(60):
                fn.emit(ctx, f"{self.pick(targets).name} += {call}")
            else:
                name = fn.fresh("t")
                fn.emit(ctx, f"{name} = {call}")
                fn.scopes[-1].floats.append(FloatVar(name, LARGE, False))
            return
        destinations = [a for a in fn.all("arrays") if a.writable and a.readable and a.store_bound >= NOMINAL]
        if not destinations:
            return self._let(fn, ctx)
        dst = self.pick(destinations)
        sources = [a for a in arrays if a.name != dst.name]
        if not sources:
            return self._let(fn, ctx)
        src = self.pick(sources)
        if src.name in ("x", "y") and self.on("overwrites"):
            self.writes.add(src.name)  # the helper may overwrite its `src`
        fn.emit(ctx, f"{helper.name}({dst.name}, {src.name}, n, {c})")

    def _local(self, fn: Function, ctx: Ctx) -> None:
        self.use("local_arrays" if ctx.top and not fn.returned else "local_arrays_in_loops")
        name = fn.fresh("v")
        if self.chance(50):
            fn.emit(ctx, f"{name} = iz.zeros(n, f64)")
            array = ArrayVar(name, LARGE, writable=True, accumulates=True)
            fn.scopes[-1].arrays.append(array)
            return
        self._filled_local(fn, ctx, name)

    def _filled_local(self, fn: Function, ctx: Ctx, name: str) -> ArrayVar:
        """`name = iz.empty(n, f64)` and a loop that fills it."""
        fn.emit(ctx, f"{name} = iz.empty(n, f64)")
        counter = fn.fresh("j")
        fn.emit(ctx, f"for {counter} in range(n):")
        fn.scopes.append(Scope(indices=[counter]))
        value = self.squash(self.expr(fn), NOMINAL)
        fn.scopes.pop()
        fn.emit(Ctx(ctx.indent + 1), f"{name}[{counter}] = {value.text}")
        array = ArrayVar(name, NOMINAL, writable=True)
        fn.scopes[-1].arrays.append(array)
        return array

    def exit_over_local(self, fn: Function) -> None:
        """The `exits_over_local_arrays` prologue (module docstring), at the entry's top level."""
        self.use("exits_over_local_arrays")
        array = self._filled_local(fn, Ctx(), fn.fresh("v"))
        ctx = Ctx()
        if self.on("nested_loops") and self.chance(40):
            self.use("nested_loops")
            outer = fn.fresh("k")
            fn.emit(ctx, f"for {outer} in range(n):")
            fn.scopes.append(Scope(indices=[outer]))
            ctx = Ctx(1, ("for",), top=False)
        counter = fn.fresh("w")
        fn.scopes.append(Scope(indices=[counter]))
        if self.chance(50):
            fn.emit(ctx, f"for {counter} in range(n):")
            fn.emit(Ctx(ctx.indent + 1), f"if {self.condition(fn)}:")
            fn.emit(Ctx(ctx.indent + 2), "break")
            increment = None
        else:
            fn.emit(ctx, f"{counter} = 0")
            fn.emit(ctx, f"while {counter} < n and {self.condition(fn)}:")
            increment = f"{counter} += 1"
        inner = Ctx(ctx.indent + 1, (*ctx.loops, "while"), top=False)
        term = self.squash(Expr(f"({array.name}[{self.index(fn)}] * {self.squash(self.expr(fn), NOMINAL).text})",
                                NOMINAL * NOMINAL), NOMINAL)
        fn.emit(inner, f"out[{self.index(fn)}] += {term.text}")
        if increment is not None:
            fn.emit(inner, increment)
        fn.scopes.pop()
        if ctx.indent:
            fn.scopes.pop()


def _paren(text: str) -> str:
    return f"({text})" if text.startswith("-") else text


# --- functions and modules -------------------------------------------------------------------------------


def _helper(gen: Generator, index: int) -> tuple[Helper, list[str]]:
    kind = gen.pick(("reduce", "write"))
    name = f"h{index}"
    fn = Function(name, kind == "reduce", max_depth=1, budget=HELPER_STATEMENTS, helpers=[], has_idx=False)
    scope = fn.scopes[0]
    scope.floats.append(FloatVar("c", NOMINAL, False))
    if kind == "reduce":
        signature = "v: Array[f64], n: i64, c: f64) -> f64"
        scope.arrays.append(ArrayVar("v", LARGE, writable=False))
    else:
        signature = "dst: Array[f64], src: Array[f64], n: i64, c: f64)"
        scope.arrays += [ArrayVar("dst", LARGE, writable=True, accumulates=True),
                         ArrayVar("src", LARGE, writable=gen.on("overwrites"), store_bound=INPUT_BOUND)]
    if kind == "reduce" and gen.on("accumulators"):
        fn.emit(Ctx(), "r = 0.0")
        scope.floats.append(FloatVar("r", 0.0, True))
    gen.block(fn, Ctx(), 4)
    if kind == "write":
        fn.emit(Ctx(), "for j in range(n):")
        fn.scopes.append(Scope(indices=["j"]))
        fn.emit(Ctx(1), f"dst[j] = {gen.squash(gen.expr(fn), NOMINAL).text}")
        fn.scopes.pop()
    else:
        fn.emit(Ctx(), f"return {gen.expr(fn).text}")
    allocates = any("iz.zeros(" in line or "iz.empty(" in line for line in fn.lines)
    decorator = "@iz.kernel"
    if gen.on("split_calls") and gen.chance(50):
        gen.use("split_calls")
        decorator = "@iz.kernel(inline=False)"
    return Helper(name, kind, allocates), [decorator, f"def {name}({signature}:", *fn.lines]


def _entry(gen: Generator, helpers: list[Helper]) -> tuple[list[tuple[str, str]], bool, list[str]]:
    params = [("out", "farray"), ("x", "farray")]
    if gen.on("second_input") and gen.chance(60):
        gen.use("second_input")
        params.append(("y", "farray"))
    has_idx = gen.on("index_table") and gen.chance(60)
    if has_idx:
        params.append(("idx", "iarray"))
    params += [("n", "n"), ("a", "f")]
    if gen.chance(50):
        params.append(("b", "f"))
    returns = gen.on("loss") and gen.chance(75)
    if returns:
        gen.use("loss")
    fn = Function("entry", returns, max_depth=2, budget=ENTRY_STATEMENTS, helpers=helpers, has_idx=has_idx)
    scope = fn.scopes[0]
    for name, kind in params:
        if kind == "farray" and name == "out":
            scope.arrays.append(ArrayVar(name, LARGE, writable=True, accumulates=True))
        elif kind == "farray":
            scope.arrays.append(ArrayVar(name, INPUT_BOUND, writable=gen.on("overwrites"), store_bound=INPUT_BOUND))
        elif kind == "f":
            scope.floats.append(FloatVar(name, 1.5, False))
    if gen.on("accumulators"):
        for _ in range(gen.integer(1, 2)):
            name = fn.fresh("s")
            fn.emit(Ctx(), f"{name} = 0.0")
            scope.floats.append(FloatVar(name, 0.0, True))
    if gen.on("exits_over_local_arrays") and gen.chance(75):
        gen.exit_over_local(fn)
    gen.block(fn, Ctx(), 6)
    if not returns or gen.chance(60):
        fn.emit(Ctx(), "for i in range(n):")
        fn.scopes.append(Scope(indices=["i"]))
        operator = gen.pick(("=", "+="))
        fn.emit(Ctx(1), f"out[i] {operator} {gen.squash(gen.expr(fn), NOMINAL).text}")
        fn.scopes.pop()
    if returns:
        fn.emit(Ctx(), f"return {gen.expr(fn).text} + {gen.expr(fn).text}")
    annotations = {"farray": "Array[f64]", "iarray": "Array[i64]", "n": "i64", "f": "f64"}
    signature = ", ".join(f"{name}: {annotations[kind]}" for name, kind in params)
    return params, returns, ["@iz.kernel", f"def entry({signature}){' -> f64' if returns else ''}:", *fn.lines]


ENTROPY_BYTES = 1024
"""Bytes of entropy per program: more than any program reads (a choice past the end takes option 0)."""


def generate_program(entropy: bytes, features: frozenset[str] = FEATURES) -> Program:
    """The program that `entropy` describes, using only `features`."""
    gen = Generator(entropy, frozenset(features))
    header = "import isozyme as iz\nfrom isozyme import Array, f64, i64\n"
    chunks = [header]
    helpers: list[Helper] = []
    if gen.on("helper_calls"):
        for index in range(gen.weighted([(2, 0), (3, 1), (1, 2)])):
            helper, lines = _helper(gen, index)
            helpers.append(helper)
            chunks.append("\n".join(lines))
    params, returns, lines = _entry(gen, helpers)
    chunks.append("\n".join(lines))
    source = "\n\n".join(chunks) + "\n"
    return Program(source, tuple(params), returns, frozenset(gen.used), frozenset(gen.writes))


def programs(features: frozenset[str] = FEATURES) -> st.SearchStrategy[Program]:
    """Random modules with an `entry` kernel that use only `features`."""
    return st.binary(min_size=ENTROPY_BYTES, max_size=ENTROPY_BYTES).map(
        lambda entropy: generate_program(entropy, features))


def arguments(program: Program, rng: np.random.Generator) -> list[Any]:
    """Arguments for the entry: x, y in [-2, 2], out in [-1, 1], idx in [0, n), a, b in [-1.5, 1.5]."""
    n = int(rng.integers(1, NMAX + 1))
    args: list[Any] = []
    for name, kind in program.params:
        if kind == "farray":
            args.append(rng.uniform(-1.0, 1.0, n) if name == "out" else rng.uniform(-INPUT_BOUND, INPUT_BOUND, n))
        elif kind == "iarray":
            args.append(rng.integers(0, n, n, dtype=np.int64))
        elif kind == "n":
            args.append(n)
        else:
            args.append(float(rng.uniform(-1.5, 1.5)))
    return args


# --- the traced plain-Python version -------------------------------------------------------------------


class _TraceBranches(ast.NodeTransformer):
    """Drops the decorators and wraps every if/while/conditional-expression test `t` into `_branch(t)`."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.decorator_list = []
        return self.generic_visit(node)

    def _wrap(self, node: ast.If | ast.While | ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        node.test = ast.Call(ast.Name("_branch", ast.Load()), [node.test], [])
        return node

    visit_If = visit_While = visit_IfExp = _wrap


def traced_module(source: str) -> types.ModuleType:
    """`source` as plain Python (no `@iz.kernel`) whose functions append every branch decision to the
    module's list `TRACE` (module docstring: the oracle compares traces to stay away from kinks)."""
    tree = ast.fix_missing_locations(_TraceBranches().visit(ast.parse(source)))
    module = types.ModuleType("gradgen_traced")
    module.TRACE = []  # type: ignore[attr-defined]

    def branch(decision: object) -> object:
        module.TRACE.append(bool(decision))  # type: ignore[attr-defined]
        return decision
    module._branch = branch  # type: ignore[attr-defined]
    exec(compile(tree, "<gradgen traced>", "exec"), module.__dict__)
    return module


def run_traced(module: types.ModuleType, args: Sequence[Any]) -> tuple[Any, tuple[bool, ...]]:
    """`module.entry(*args)` (args are modified in place): its return value and its branch decisions."""
    module.TRACE.clear()  # type: ignore[attr-defined]
    result = module.entry(*args)
    return result, tuple(module.TRACE)  # type: ignore[attr-defined]


def program_from_source(source: str, writes: frozenset[str] = frozenset({"x", "y"})) -> Program:
    """A `Program` for a hand-written module with an `entry` kernel of the generator's signature (the
    regression tests); `writes` the input arrays it may write (by default both: `y` is then never Const)."""
    kinds = {"Array[f64]": "farray", "Array[i64]": "iarray", "i64": "n", "f64": "f"}
    entry = next(node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef) and node.name == "entry")
    params = tuple((arg.arg, kinds[ast.unparse(arg.annotation)]) for arg in entry.args.args if arg.annotation)
    return Program(source, params, entry.returns is not None, frozenset(), writes)


def numbered(program: Program) -> str:
    """The source with line numbers (for failure reports)."""
    return "\n".join(f"{k + 1:3} {line}" for k, line in enumerate(program.source.splitlines()))
