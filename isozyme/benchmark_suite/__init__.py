"""The kernels of `python -m isozyme bench` (issue 10), one module per benchmark, in one shape.

Each module of this package defines its kernels (`@iz.kernel`), a seeded input generator, a numpy (or pure
Python) reference of what the kernel computes, and `BENCHMARK`, a `Benchmark` (below), or `BENCHMARKS`, a
tuple of them where one module holds several (ode.py: Euler and RK4). A harness iterates over them without
knowing anything else about the modules:

    from isozyme.benchmark_suite import all_benchmarks, run_primal, run_gradient

    for bench in all_benchmarks():
        for size in bench.sizes["quick"]:              # or "full"
            args = bench.make_args(**size)             # fresh arguments, in the kernel's parameter order
            run_primal(bench, args)                    # bench.kernel(*args)
            grad = run_gradient(bench, args, opt="post")   # or opt="pre"
            reference = bench.reference(*args)         # numpy: Primal(value, outputs)

The shape, field by field (`Benchmark`):
- `name`: the table row ("gmm", "ba", ...); `kernel`: the primal kernel (its helper kernels are called from
  it); `activity`: one of "const", "dup", "active" per kernel parameter, as `iz.show_ir(..., activity=...)`
  takes them. Integer parameters are always "const".
- `sizes`: {"quick": (size, ...), "full": (size, ...)}, each size a dict of keyword arguments of
  `make_args` (e.g. {"d": 10, "K": 25, "n": 1000}); `make_args(seed=0, **size)` returns a tuple of fresh
  numpy arrays and scalars, deterministic for a seed (kernels that write an argument get new arrays each
  call, so the harness calls `make_args` again, or copies, when it needs the original inputs).
- `seeds(args)`: {parameter index: cotangent array} for the "dup" arrays the kernel writes (its outputs);
  every other "dup" array gets a zero shadow, which accumulates the adjoint. `seed_return` is the adjoint of
  the scalar return value (1.0). Together they define the scalar objective whose gradient is computed,
  L = seed_return * return + sum_k <seeds[k], output_k> (`objective`), which the tests check against
  central finite differences of the numpy reference.
- `reference(*args)`: the numpy reference, a `Primal(value, outputs)`: the scalar the kernel returns (None
  if none) and {parameter index: array} for the arrays it writes. It never modifies `args`.
- `gradient`: None for "one `iz.autodiff` call with the activities and seeds above" (`run_gradient` does it);
  or a driver `gradient(args, opt, backend) -> Gradient` for benchmarks whose derivative is several sweeps
  (BA's Jacobian blocks: two reverse sweeps, one per residual component).
- `label(size)`: a short text for tables ("d=10 K=25 n=1000"); `scale(size)`: one number per size for the
  x axis of plots (the problem size in the benchmark's natural unit).
- `primal_tolerance`, `gradient_tolerance`: how far (`isozyme.benchmark_checks.relative_error`, relative in
  the max-norm) the bench lets the primal's results be from `reference` and a gradient from the reference
  gradient (`PRIMAL_TOLERANCE`, `GRADIENT_TOLERANCE` below, which say why; a module that needs another
  says why in its docstring).

`run_gradient` returns a `Gradient(value, shadows, active)`: the primal return value, {parameter index:
shadow array} for every "dup" parameter after the call, and {parameter index: adjoint} for every "active"
scalar (a custom `gradient` driver documents its own keys: BA's are the names of its Jacobian blocks).
`Primal.results()` and `Gradient.results()` put what a call computed in one mapping, the form the bench's
checks compare (the return value under "value").

The modules, in table order (`MODULES`): norm and relu3 (the kernels of examples/norm.py and relu3.py), gmm
(ADBench, examples/gmm.py's kernel in gmm_kernels.py), ba and lstm (ADBench), ode (Enzyme: Euler and RK4),
fft (Enzyme), brusselator (Enzyme's ode-real vector-Jacobian product), mlp (SGD training in the kernel). Each
module's docstring says where its facts (formulas, constants, data) come from and where the kernel departs
from the reference's code.
Correctness: tests/test_bench_kernels.py (ADBench's golden values, numpy references, finite differences).
`results.py` is no benchmark: it holds the schema of the results JSON that `python -m isozyme bench --json` and
the scripts of benchmarks/ write (the stamp of the run, a row per variant, its check).

The suite is part of the installed package (a tool, like `isozyme.benchmarking`: no package of the compiler
imports it, pyproject.toml's import-linter contract "no-tools"), so `python -m isozyme bench` runs from any
directory. The kernels it shares with examples/ are copies of the examples' source, which the tests keep equal.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import isozyme as iz

MODULES = ("norm", "relu3", "gmm", "ba", "lstm", "ode", "fft", "brusselator", "mlp")
PRIMAL_TOLERANCE = 1e-10
"""The primal against its numpy reference: the same math in f64, rounded in another order (numpy's pairwise
sums, BLAS and FFT against the kernel's loops). Measured over the full suite on `llvm`: at most 2e-11 (the
FFT at n = 2^20 against numpy's FFT), 3e-12 elsewhere."""
GRADIENT_TOLERANCE = 1e-10
"""A gradient against the reference gradient: derivatives of the same program, differing only in the order
their sums are taken (and, on OpenCL, atomic adds in any order and contracted multiply-adds). Measured over
the full suite on `llvm`, opt="post" against "pre": at most 4e-12 (RK4 at 1e5 steps)."""


@dataclass(frozen=True)
class Primal:
    """What a kernel computes: its scalar return value (None if none) and the arrays it writes, by
    parameter index."""

    value: float | None
    outputs: Mapping[int, np.ndarray] = field(default_factory=dict)

    def results(self) -> dict[int | str, object]:
        """The return value (key "value", if any) and the written arrays, by parameter index."""
        return {**({} if self.value is None else {"value": self.value}), **self.outputs}


@dataclass(frozen=True)
class Gradient:
    """A derivative: the primal return value, the shadows of the "dup" parameters after the call (by index)
    and the adjoints of the "active" scalars (by index)."""

    value: float | None
    shadows: Mapping[int, np.ndarray]
    active: Mapping[int, float] = field(default_factory=dict)

    def results(self, value: bool = True) -> dict[int | str, object]:
        """The shadows and adjoints by key, and (with `value`, if any) the return value under "value"."""
        returned = {"value": self.value} if value and self.value is not None else {}
        return {**returned, **self.shadows, **self.active}


def no_seeds(args: tuple) -> dict[int, np.ndarray]:
    """The seeds of a kernel that writes no differentiated array (it returns its objective)."""
    return {}


@dataclass(frozen=True)
class Benchmark:
    """One benchmark of the suite: the module docstring describes every field."""

    name: str
    kernel: iz.Kernel
    activity: tuple[str, ...]
    sizes: Mapping[str, tuple[Mapping[str, Any], ...]]
    make_args: Callable[..., tuple]
    reference: Callable[..., Primal]
    label: Callable[[Mapping[str, Any]], str]
    scale: Callable[[Mapping[str, Any]], float]
    seeds: Callable[[tuple], dict[int, np.ndarray]] = no_seeds
    seed_return: float = 1.0
    gradient: Callable[[tuple, str, str | None], Gradient] | None = None
    description: str = ""
    primal_tolerance: float = PRIMAL_TOLERANCE
    gradient_tolerance: float = GRADIENT_TOLERANCE


def all_benchmarks() -> list[Benchmark]:
    """Every benchmark of the suite, in table order."""
    benchmarks: list[Benchmark] = []
    for name in MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        benchmarks.extend(getattr(module, "BENCHMARKS", None) or (module.BENCHMARK,))
    return benchmarks


def run_primal(bench: Benchmark, args: tuple) -> object:
    """The primal kernel on `args`."""
    return bench.kernel(*args)


def annotate(bench: Benchmark, args: tuple) -> tuple[list[object], dict[int, np.ndarray]]:
    """The arguments of `iz.autodiff` for `args` (Duplicated with fresh shadows, Active, Const) and the
    shadows by parameter index."""
    seeds = bench.seeds(args)
    annotated: list[object] = []
    shadows: dict[int, np.ndarray] = {}
    for index, (kind, value) in enumerate(zip(bench.activity, args)):
        if kind == "dup":
            shadows[index] = np.array(seeds[index], dtype=value.dtype) if index in seeds else np.zeros_like(value)
            annotated.append(iz.Duplicated(value, shadows[index]))
        elif kind == "active":
            annotated.append(iz.Active(value))
        else:
            annotated.append(iz.Const(value))
    return annotated, shadows


def prepare_gradient(bench: Benchmark, args: tuple, opt: str = "post", backend: str | None = None
                     ) -> tuple[Callable[[], object], Callable[[object], Gradient]]:
    """The benchmark's derivative on `args` in two steps, so that the first can be timed alone: a call that
    computes it (its fresh shadows made here, before), and a function of what that call returned that
    gives the `Gradient`."""
    if bench.gradient is not None:
        driver = bench.gradient
        return (lambda: driver(args, opt, backend)), lambda gradient: gradient  # type: ignore[return-value]
    annotated, shadows = annotate(bench, args)
    active_positions = [i for i, kind in enumerate(bench.activity) if kind == "active"]
    returns_float = bench.kernel.signature()[1].is_float  # lowered once per kernel, not once per call
    seed = bench.seed_return if returns_float else None  # a kernel returning no float takes no seed

    def call() -> object:
        return iz.autodiff(bench.kernel, *annotated, seed=seed, opt=opt, backend=backend)

    def finish(returned: object) -> Gradient:
        value, adjoints = returned  # type: ignore[misc]
        return Gradient(value, shadows, dict(zip(active_positions, adjoints)))
    return call, finish


def run_gradient(bench: Benchmark, args: tuple, opt: str = "post", backend: str | None = None) -> Gradient:
    """The benchmark's derivative on `args` (module docstring)."""
    call, finish = prepare_gradient(bench, args, opt, backend)
    return finish(call())


def objective(bench: Benchmark, args: tuple) -> float:
    """The scalar whose gradient `run_gradient` computes, from the numpy reference: seed_return * value +
    sum of <seed, output> over the written "dup" arrays."""
    primal = bench.reference(*args)
    total = bench.seed_return * primal.value if primal.value is not None else 0.0
    for index, seed in bench.seeds(args).items():
        total += float(np.sum(seed * primal.outputs[index]))
    return float(total)
