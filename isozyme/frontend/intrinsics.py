"""The functions a kernel may call besides other kernels: `iz.prange`, `iz.zeros`, `iz.empty` and the
math functions of DESIGN 1.2, plus the tables that tell the frontend which Python object means which op.

Every function here also runs in plain Python with the kernel's semantics, so `kernel.py_func` computes
what the compiled kernel computes: `iz.sqrt(-1.0)` is nan (not a ValueError as `math.sqrt` raises) and
`iz.floor` returns a float. `math.<name>` is recognized in kernels too and keeps Python's result type
(`math.floor` returns an int); its domain errors are the documented divergence (the kernel gives IEEE
results). The numpy spellings (`np.sqrt`, `np.arctan2`, ...) are recognized as the same ops.
"""

from __future__ import annotations

import builtins
import itertools
import math
from collections.abc import Callable

import numpy as np

from isozyme.frontend.annotations import f64, scalar_annotation
from isozyme.ssa.ops import Op
from isozyme.ssa.semantics import evaluate
from isozyme.ssa.types import F64

MATH_OPS: dict[str, Op] = {
    "sqrt": Op.SQRT, "exp": Op.EXP, "log": Op.LOG, "log1p": Op.LOG1P, "expm1": Op.EXPM1, "sin": Op.SIN,
    "cos": Op.COS, "tan": Op.TAN, "tanh": Op.TANH, "sinh": Op.SINH, "cosh": Op.COSH, "asin": Op.ASIN,
    "acos": Op.ACOS, "atan": Op.ATAN, "atan2": Op.ATAN2, "pow": Op.POW, "fabs": Op.FABS, "floor": Op.FLOOR,
    "ceil": Op.CEIL, "erf": Op.ERF, "sigmoid": Op.SIGMOID,
}
"""The math functions of the kernel language, by name, and the op each one is."""

_NUMPY_NAMES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arctan2": "atan2", "power": "pow",
                "abs": "fabs"}


def _math_function(name: str, op: Op) -> Callable[..., float]:
    def function(*args: float) -> float:
        return evaluate(op, F64, [float(a) for a in args])  # type: ignore[return-value]

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"`{name}` with the kernel's IEEE semantics (nan or inf instead of Python's errors)."
    return function


MATH_FUNCTIONS: dict[str, Callable[..., float]] = {name: _math_function(name, op) for name, op in MATH_OPS.items()}
"""The `iz.<name>` functions."""


def prange(*args: int) -> range:
    """`range` whose iterations are independent: a kernel runs them in parallel (on `opencl` as an NDRange
    kernel, on `llvm` as tasks on the thread pool; `interp` runs them in order). docs/parallel.md says what
    the promise covers and what the compiler checks."""
    return range(*args)


def ndrange(*extents: int) -> itertools.product:
    """`for i, j in iz.ndrange(n, m)`: the pairs (i, j), i < n, j < m, j fastest, as independent iterations:
    a kernel runs them as one parallel loop over all n * m pairs (one NDRange on OpenCL), however small n."""
    return itertools.product(*(range(extent) for extent in extents))


def _numpy_dtype(dtype: object) -> np.dtype:
    annotation = scalar_annotation(dtype)
    if annotation is None:
        raise TypeError(f"unsupported dtype {dtype!r}: use one of f32 f64 i32 i64 boolean")
    return annotation.dtype


def zeros(shape: int | tuple[int, ...], dtype: object = f64) -> np.ndarray:
    """A local array of zeros (`iz.zeros(n, f64)`, `iz.zeros((n, m), f32)`), freed at kernel exit."""
    return np.zeros(shape, _numpy_dtype(dtype))


def empty(shape: int | tuple[int, ...], dtype: object = f64) -> np.ndarray:
    """A local array with unspecified contents; the interpreter fills it with nan (ints: the minimum)."""
    return np.full(shape, np.nan if _numpy_dtype(dtype).kind == "f" else 0, _numpy_dtype(dtype))


def _intrinsic_objects() -> dict[int, tuple[str, object]]:
    """id(python object) -> (role, detail), for every Python object the frontend gives a meaning."""
    table: dict[int, tuple[str, object]] = {}
    for name, op in MATH_OPS.items():
        table[id(MATH_FUNCTIONS[name])] = ("math", op)
        if hasattr(math, name):
            table[id(getattr(math, name))] = ("python-math", op)
    for np_name in (*MATH_OPS, *_NUMPY_NAMES):
        function = getattr(np, np_name, None)
        if function is not None:
            table[id(function)] = ("math", MATH_OPS[_NUMPY_NAMES.get(np_name, np_name)])
    for role, function in (("prange", prange), ("ndrange", ndrange), ("zeros", zeros), ("empty", empty),
                           ("range", builtins.range),
                           ("abs", builtins.abs), ("min", builtins.min), ("max", builtins.max),
                           ("float", builtins.float), ("int", builtins.int), ("bool", builtins.bool),
                           ("len", builtins.len)):
        table[id(function)] = (role, function)
    return table


INTRINSICS = _intrinsic_objects()
"""Which role a called Python object plays: `("math", Op.SQRT)`, `("python-math", Op.FLOOR)`, `("zeros", .)`."""
_KEEP_ALIVE = (MATH_FUNCTIONS, prange, ndrange, zeros, empty)


def intrinsic_role(function: object) -> tuple[str, object] | None:
    """The role of `function` when a kernel calls it, or None when it is not an intrinsic."""
    return INTRINSICS.get(id(function))
