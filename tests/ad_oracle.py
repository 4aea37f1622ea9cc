"""The oracle of the reverse-mode tests: a kernel as a map from its active inputs to its outputs, evaluated in
plain Python and differentiated by finite differences, and the same map differentiated by `iz.autodiff`.

A kernel with activities (`ad_kernels.Case`) is a map F from its active inputs (the entry contents of its
Duplicated arrays, then its Active scalars, in parameter order) to its outputs (the exit contents of the
Duplicated arrays it writes, then its float return value). `iz.autodiff` with a cotangent ybar of the
outputs (in the shadows of the written arrays, and `seed=` for the return value; the shadows of the arrays
it only reads start at 0) gives J^T ybar: each shadow on exit is the cotangent of its array's entry
contents, the adjoints are those of the Active scalars. This is Enzyme's convention: a written array's
shadow holds its seed on entry and is consumed, every shadow accumulates.

J comes from central differences of the *undecorated* Python functions (`kernelgen.python_reference`: the
kernels a kernel calls run as their `py_func` too), Richardson-extrapolated: error O(h^4) with h = 1e-4
relative, some 1e-11 here, so a tolerance of 1e-6 leaves a correct gradient a wide margin and a wrong term
none. Only `reverse_mode` runs compiled code; the finite differences run the `py_func`s alone (their
`iz.` math functions evaluate the op in Python).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from ad_kernels import Case
from kernelgen import python_reference

import isozyme as iz

OPTS = ("post", "pre", "none")
"""Every `opt` of the differentiation API."""
BACKENDS = ("interp", "llvm")
"""The backends derivatives run on."""
VARIANTS = [(opt, backend) for opt in OPTS for backend in BACKENDS]
"""Every (opt, backend) pair, the variants the derivative tests run."""
ALL_BACKENDS = (*BACKENDS, "opencl")
"""With OpenCL (PoCL in CI): the feature tests run there too; the corpus runs on it in test_opencl_parallel.py."""
ALL_VARIANTS = [(opt, backend) for opt in OPTS for backend in ALL_BACKENDS]

FD_STEP = 1e-4
"""The central-difference step, relative to max(1, |input|)."""
FD_RTOL = 1e-6


def copy_value(value: object) -> object:
    return value.copy() if isinstance(value, np.ndarray) else value


@dataclass
class Problem:
    """One case's arguments, cotangents and plain-Python reference (module docstring)."""

    case: Case
    args: tuple
    """The primal arguments: never modified, every use copies them."""
    pure: Callable[..., object]
    inputs: list[int]
    """Positions of the active inputs: Duplicated arrays and Active scalars."""
    written: list[int]
    """Positions of the Duplicated arrays the kernel writes (their exit contents are outputs)."""
    returns_float: bool
    array_seeds: dict[int, np.ndarray]
    """The cotangent of each written array's exit contents."""
    seed: float
    """The cotangent of the return value."""

    def input_vector(self) -> np.ndarray:
        return np.concatenate([np.ravel(self.args[p]).astype(np.float64) for p in self.inputs])

    def arguments(self, inputs: np.ndarray) -> list[object]:
        """Copies of the arguments with the active inputs taken from the vector `inputs`."""
        args = [copy_value(a) for a in self.args]
        offset = 0
        for p in self.inputs:
            if isinstance(args[p], np.ndarray):
                size = args[p].size
                args[p][...] = inputs[offset:offset + size].reshape(args[p].shape)
                offset += size
            else:
                args[p] = float(inputs[offset])
                offset += 1
        return args

    def outputs(self, inputs: np.ndarray) -> np.ndarray:
        """F(inputs) in plain Python: the written arrays' exit contents, then the return value."""
        args = self.arguments(inputs)
        result = self.pure(*args)
        parts = [np.ravel(args[p]) for p in self.written]
        if self.returns_float:
            parts.append(np.array([float(result)]))
        return np.concatenate(parts) if parts else np.zeros(0)

    def cotangent(self) -> np.ndarray:
        """ybar, laid out as `outputs`."""
        parts = [np.ravel(self.array_seeds[p]) for p in self.written]
        if self.returns_float:
            parts.append(np.array([self.seed]))
        return np.concatenate(parts) if parts else np.zeros(0)


def make_problem(case: Case) -> Problem:
    """The case's arguments, which arrays it writes (found by running it in Python) and random cotangents."""
    args = case.args()
    pure = python_reference(case.kernel)
    copies = [copy_value(a) for a in args]
    result = pure(*copies)
    inputs = [p for p, kind in enumerate(case.activity) if kind != "const"]
    written = [p for p in inputs if isinstance(args[p], np.ndarray) and not np.array_equal(args[p], copies[p])]
    rng = np.random.default_rng(zlib.crc32(case.name.encode()) + 1)
    seeds = {p: rng.standard_normal(args[p].shape) for p in written}
    return Problem(case, args, pure, inputs, written, isinstance(result, float), seeds,
                   float(rng.uniform(0.5, 1.5) * rng.choice([-1.0, 1.0])))


def central_difference(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, direction: np.ndarray,
                       h: float) -> np.ndarray:
    """The derivative of f at x along `direction`: central differences with steps h and h/2, extrapolated
    (Richardson) to cancel the h^2 error term."""

    def central(step: float) -> np.ndarray:
        return (f(x + step * direction) - f(x - step * direction)) / (2.0 * step)
    return (4.0 * central(h / 2.0) - central(h)) / 3.0


def jacobian(problem: Problem) -> np.ndarray:
    """d outputs / d inputs of the plain Python function, column by column."""
    x = problem.input_vector()
    columns = []
    for k in range(x.size):
        unit = np.zeros_like(x)
        unit[k] = 1.0
        columns.append(central_difference(problem.outputs, x, unit, FD_STEP * max(1.0, abs(x[k]))))
    return np.stack(columns, axis=1)


@dataclass
class Derivative:
    """What one `iz.autodiff` call gave."""

    gradient: np.ndarray
    """The shadows on exit and the Active adjoints, laid out as `Problem.input_vector`."""
    primal_return: object
    arrays: list[np.ndarray]
    """Every array argument on exit."""


def reverse_mode(problem: Problem, opt: str, backend: str) -> Derivative:
    """`iz.autodiff` of the case with the problem's cotangents."""
    call: list[object] = []
    shadows: dict[int, np.ndarray] = {}
    for p, (value, kind) in enumerate(zip(problem.args, problem.case.activity)):
        if kind == "dup":
            shadows[p] = problem.array_seeds[p].copy() if p in problem.written else np.zeros_like(value)
            call.append(iz.Duplicated(value.copy(), shadows[p]))
        elif kind == "active":
            call.append(iz.Active(value))
        else:
            call.append(copy_value(value))
    seed = problem.seed if problem.returns_float else None  # a kernel returning no float takes no seed
    result, adjoints = iz.autodiff(problem.case.kernel, *call, seed=seed, opt=opt, backend=backend)
    active = iter(adjoints)
    parts = [np.ravel(shadows[p]) if p in shadows else np.array([next(active)]) for p in problem.inputs]
    arrays = [a.value if isinstance(a, iz.Duplicated) else a for a in call]
    return Derivative(np.concatenate(parts), result, [a for a in arrays if isinstance(a, np.ndarray)])


def table(header: str, *columns: np.ndarray) -> str:
    """Columns of numbers side by side, for a failure message."""
    rows = [header] + ["  ".join(f"{v: .12e}" for v in row) for row in zip(*columns)]
    return "\n".join(rows)


def assert_matches_finite_differences(problem: Problem, got: np.ndarray, expected: np.ndarray) -> None:
    """|got - fd| <= FD_RTOL * max(1, |fd|), element by element."""
    bad = np.abs(got - expected) > FD_RTOL * np.maximum(1.0, np.abs(expected))
    assert not bad.any(), \
        f"{problem.case.name}: reverse mode vs finite differences:\n{table('autodiff  fd', got, expected)}"
