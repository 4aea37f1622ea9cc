"""`gradcheck(kernel, *args, argnums=None, eps=None, rtol=None, atol=None, ...)`: the gradient of a kernel
by reverse mode (`iz.autodiff`), by forward mode (`iz.fwddiff`) and by central finite differences, compared
element by element, like `warp.autograd.gradcheck` and `torch.autograd.gradcheck`.

What is differentiated. A scalar function of the kernel's arguments,

    L(args) = ret + sum over the float arrays the kernel may write of <w_a, a after the call>

with `ret` the kernel's float return value (0 when it returns nothing) and `w_a` a fixed random cotangent
per written array (normal, from `seed`): for a kernel that only returns a float, L is that float; for one
that writes output arrays this is the dot-product test, and every method sees the same L. Which arrays the
kernel may write is func-attrs' summary of the lowered kernel. L is differentiated with respect to the
float arguments in `argnums` (default: every float array and float scalar), at `args`:
- *reverse*: one `autodiff` call, every written float array `Duplicated` with shadow `w_a` (the seed of its
  final value; on return the shadow holds the adjoint of its initial value), every array in `argnums` with
  a zero shadow, every float scalar in `argnums` `Active`, the return seeded with 1;
- *forward*: one `fwddiff` per element, along each basis direction (tangent 1 on that element, 0 elsewhere),
  so every element of the gradient is compared, not only projections on random directions: L's tangent
  is the return's tangent plus `<w_a, tangent of a>`;
- *finite differences*: (L(x + eps e_j) - L(x - eps e_j)) / (2 eps) per element, L evaluated by the compiled
  primal (`reference="compiled"`, the default) or by the undecorated Python function (`reference="python"`,
  an oracle that shares nothing with the compiler but runs at Python's speed). For f32 arguments the step is
  the one the rounded perturbed values really make.
Each evaluation gets fresh copies of the arrays: the caller's arguments are never changed. Cost: two primal
calls and one forward call per element of the arguments in `argnums`, so check small instances.

A pair of gradients agrees when every element has |a - b| <= atol + rtol * max(|a|, |b|) (nan only with
nan). The table gives per argument and pair the largest absolute and relative errors; on a disagreement
`GradcheckError` (an AssertionError) carries the table and the IR of the gradient
(`iz.show_ir(kernel, stage="grad-opt", activity=...)`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from isozyme.enzyme_ad.custom import reads_and_writes
from isozyme.runtime.arguments import Parameter
from isozyme.runtime.autodiff import Active, Const, Duplicated, argnum_positions, autodiff, fwddiff
from isozyme.runtime.inspection import show_ir
from isozyme.runtime.kernel import Kernel
from isozyme.ssa.types import ArrayType, Type

METHODS = ("reverse", "forward", "fd")
PAIRS = (("reverse", "fd"), ("forward", "fd"), ("reverse", "forward"))
DEFAULTS = {"f64": (1e-6, 1e-5, 1e-7), "f32": (1e-2, 5e-2, 1e-3)}
"""(eps, rtol, atol) by the least precise float type among the arguments differentiated: the step near the
cube root of the machine epsilon, where truncation and rounding errors of central differences balance."""


class GradcheckError(AssertionError):
    """The gradients disagree: the message holds the table and the gradient's IR."""


@dataclass
class PairErrors:
    """How far apart two methods' gradients of one argument are."""

    max_abs: float
    max_rel: float
    ok: bool


@dataclass
class GradcheckResult:
    """What `gradcheck` compared; true when every pair agreed."""

    passed: bool
    table: str
    gradients: dict[str, dict[str, np.ndarray]]
    """Method ("reverse", "forward", "fd") -> argument name -> gradient (an array of the argument's shape)."""
    errors: dict[str, dict[tuple[str, str], PairErrors]] = field(default_factory=dict)
    """Argument name -> method pair -> errors."""

    def __bool__(self) -> bool:
        return self.passed


@dataclass
class _Problem:
    """A kernel, its arguments and the scalar function L being checked."""

    kernel: Kernel
    params: list[Parameter]
    returns_float: bool
    args: tuple[object, ...]
    argnums: tuple[int, ...]
    cotangents: dict[int, np.ndarray]
    """Position of each float array the kernel may write -> w_a."""

    def copies(self) -> list[object]:
        return [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in self.args]

    def value(self, ret: object, arrays: Sequence[object]) -> float:
        total = float(ret) if self.returns_float else 0.0  # type: ignore[arg-type]
        for position, w in self.cotangents.items():
            total += float(np.dot(w.ravel(), np.asarray(arrays[position], dtype=np.float64).ravel()))
        return total


def gradcheck(kernel: Kernel, *args: object, argnums: int | Sequence[int] | None = None, eps: float | None = None,
              rtol: float | None = None, atol: float | None = None, opt: str = "post", backend: str | None = None,
              reference: str = "compiled", seed: int = 0, show_summary: bool = True,
              raise_on_failure: bool = True) -> GradcheckResult:
    """Compare reverse mode, forward mode and central finite differences (module docstring) at `args`.
    Prints the table when `show_summary`; raises GradcheckError on a disagreement unless not
    `raise_on_failure`. `eps`, `rtol`, `atol` default by precision (DEFAULTS)."""
    problem = _problem(kernel, args, argnums, seed)
    default_eps, default_rtol, default_atol = DEFAULTS[_precision(problem)]
    eps, rtol, atol = eps or default_eps, default_rtol if rtol is None else rtol, default_atol if atol is None else atol
    evaluate = _primal(kernel, reference)
    gradients = {"reverse": _reverse(problem, opt, backend), "forward": _forward(problem, opt, backend),
                 "fd": _finite_differences(problem, evaluate, eps)}
    errors = {problem.params[p].name: {pair: _compare(gradients[pair[0]][problem.params[p].name],
                                                      gradients[pair[1]][problem.params[p].name], rtol, atol)
                                       for pair in PAIRS} for p in problem.argnums}
    passed = all(e.ok for by_pair in errors.values() for e in by_pair.values())
    header = (f"gradcheck of kernel {kernel.definition.name} (opt={opt}, {kernel.backend(backend)}; eps={eps:g}, "
              f"rtol={rtol:g}, atol={atol:g}; L = {_describe_l(problem)}): {'passed' if passed else 'FAILED'}")
    table = header + "\n" + _table(problem, errors)
    if show_summary:
        print(table)
    result = GradcheckResult(passed, table, gradients, errors)
    if not passed and raise_on_failure:
        raise GradcheckError(f"{table}\n\n{_gradient_ir(problem, opt)}")
    return result


# --- setting up ----------------------------------------------------------------------------------------------


def _element(type_: Type) -> Type:
    return type_.element if isinstance(type_, ArrayType) else type_


def _problem(kernel: Kernel, args: tuple[object, ...], argnums: int | Sequence[int] | None, seed: int) -> _Problem:
    if not isinstance(kernel, Kernel):
        raise TypeError(f"gradcheck needs an @iz.kernel, got {type(kernel).__name__}")
    params, return_type = kernel.signature()
    if len(args) != len(params):
        raise TypeError(f"kernel '{kernel.definition.name}' takes {len(params)} argument(s) "
                        f"({', '.join(p.name for p in params)}), got {len(args)}")
    floats = tuple(i for i, p in enumerate(params) if _element(p.type).is_float)
    positions = floats if argnums is None else argnum_positions(kernel, params, argnums)
    for position in positions:
        if position not in floats:
            raise ValueError(f"argnums {position} of kernel '{kernel.definition.name}' is not a float array or "
                             f"float scalar parameter")
    _, function = kernel.lower()
    _, writes = reads_and_writes(function)
    rng = np.random.default_rng(seed)
    cotangents = {i: rng.standard_normal(np.shape(args[i])) for i, arg in enumerate(function.args)
                  if arg in writes and _element(params[i].type).is_float}
    if not return_type.is_float and not cotangents:
        raise TypeError(f"kernel '{kernel.definition.name}' returns no float and writes no float array: "
                        "there is nothing to differentiate")
    return _Problem(kernel, params, return_type.is_float, args, tuple(dict.fromkeys(positions)), cotangents)


def _precision(problem: _Problem) -> str:
    types = {str(_element(problem.params[p].type)) for p in problem.argnums}
    return "f32" if "f32" in types else "f64"


def _primal(kernel: Kernel, reference: str) -> Callable[..., object]:
    if reference == "compiled":
        return kernel
    if reference == "python":
        return kernel.py_func
    raise ValueError(f"reference is 'compiled' or 'python', not {reference!r}")


def _describe_l(problem: _Problem) -> str:
    terms = (["ret"] if problem.returns_float else []) + [f"<w, {problem.params[p].name}>" for p in problem.cotangents]
    return " + ".join(terms)


# --- the three gradients -------------------------------------------------------------------------------------


def _reverse(problem: _Problem, opt: str, backend: str | None) -> dict[str, np.ndarray]:
    call: list[object] = []
    shadows: dict[int, np.ndarray] = {}
    for position, (param, value) in enumerate(zip(problem.params, problem.copies())):
        if isinstance(param.type, ArrayType) and (position in problem.cotangents or position in problem.argnums):
            w = problem.cotangents.get(position)
            shadows[position] = (w.astype(value.dtype) if w is not None  # type: ignore[union-attr]
                                 else np.zeros_like(value))
            call.append(Duplicated(value, shadows[position]))
        elif position in problem.argnums:
            call.append(Active(value))
        else:
            call.append(Const(value))
    _, adjoints = autodiff(problem.kernel, *call, opt=opt, backend=backend)
    active = iter(adjoints)
    gradients = {}
    for position, param in enumerate(problem.params):
        if position in shadows and position in problem.argnums:
            gradients[param.name] = shadows[position].astype(np.float64)
        elif position in problem.argnums:
            gradients[param.name] = np.array(next(active), dtype=np.float64)
    return gradients


def _forward(problem: _Problem, opt: str, backend: str | None) -> dict[str, np.ndarray]:
    gradients = {}
    for position in problem.argnums:
        shape = np.shape(problem.args[position])
        gradient = np.zeros(shape, dtype=np.float64)
        for index in np.ndindex(shape):
            gradient[index] = _directional(problem, position, index, opt, backend)
        gradients[problem.params[position].name] = gradient
    return gradients


def _directional(problem: _Problem, position: int, index: tuple[int, ...], opt: str, backend: str | None) -> float:
    """L's derivative along the basis direction of element `index` of argument `position`."""
    call: list[object] = []
    tangents: dict[int, np.ndarray] = {}
    for p, (param, value) in enumerate(zip(problem.params, problem.copies())):
        if isinstance(param.type, ArrayType) and (p == position or p in problem.cotangents):
            tangents[p] = np.zeros_like(value)
            if p == position:
                tangents[p][index] = 1.0
            call.append(Duplicated(value, tangents[p]))
        elif p == position:
            call.append(Duplicated(value, 1.0))
        else:
            call.append(Const(value))
    _, tangent = fwddiff(problem.kernel, *call, opt=opt, backend=backend)
    return problem.value(tangent if problem.returns_float else 0.0, tangents)


def _finite_differences(problem: _Problem, evaluate: Callable[..., object], eps: float) -> dict[str, np.ndarray]:
    gradients = {}
    for position in problem.argnums:
        shape = np.shape(problem.args[position])
        gradient = np.zeros(shape, dtype=np.float64)
        for index in np.ndindex(shape):
            (plus, x_plus), (minus, x_minus) = (_shifted(problem, evaluate, position, index, step)
                                                for step in (eps, -eps))
            gradient[index] = (plus - minus) / (x_plus - x_minus)
        gradients[problem.params[position].name] = gradient
    return gradients


def _shifted(problem: _Problem, evaluate: Callable[..., object], position: int, index: tuple[int, ...],
             step: float) -> tuple[float, float]:
    """L with element `index` of argument `position` moved by `step`, and that element's value (rounded to
    the argument's type, so that the quotient uses the step really taken)."""
    args = problem.copies()
    if isinstance(args[position], np.ndarray):
        array = args[position]
        array[index] += step  # type: ignore[index]
        moved = float(array[index])  # type: ignore[index]
    else:
        moved = float(np.dtype(_element(problem.params[position].type).numpy_dtype).type(
            float(args[position]) + step))  # type: ignore[arg-type]
        args[position] = moved
    return problem.value(evaluate(*args), args), moved


# --- comparing and reporting ---------------------------------------------------------------------------------


def _compare(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> PairErrors:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return PairErrors(0.0, 0.0, True)
    both_nan = np.isnan(a) & np.isnan(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        difference = np.where(both_nan, 0.0, np.abs(a - b))
        scale = np.maximum(np.abs(a), np.abs(b))
        relative = np.where(difference == 0.0, 0.0, difference / scale)
        ok = bool(np.all(difference <= atol + rtol * scale))  # nan differences fail
    return PairErrors(float(np.max(difference)), float(np.max(relative)), ok)


def _table(problem: _Problem, errors: dict[str, dict[tuple[str, str], PairErrors]]) -> str:
    rows = [("argument", "elements", "pair", "max abs err", "max rel err", "ok")]
    for position in problem.argnums:
        name = problem.params[position].name
        for pair, e in errors[name].items():
            rows.append((name, str(np.size(problem.args[position])), f"{pair[0]} vs {pair[1]}", f"{e.max_abs:.3e}",
                         f"{e.max_rel:.3e}", "yes" if e.ok else "NO"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _gradient_ir(problem: _Problem, opt: str) -> str:
    """The optimized `diffe_<f>` the reverse gradient came from (or why it cannot be shown)."""
    activity = []
    for position, param in enumerate(problem.params):
        if isinstance(param.type, ArrayType) and (position in problem.cotangents or position in problem.argnums):
            activity.append("dup")
        else:
            activity.append("active" if position in problem.argnums else "const")
    try:
        ir = show_ir(problem.kernel, stage="grad-opt", activity=activity, opt=opt)
    except Exception as error:  # noqa: BLE001 - the table is what matters; say why the IR is missing
        ir = f"; (no IR: {type(error).__name__}: {error})"
    return f"--- the gradient's IR (stage grad-opt, activity {','.join(activity)}, opt={opt}) ---\n{ir}"
