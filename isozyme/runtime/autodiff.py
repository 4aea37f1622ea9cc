"""The differentiation API of DESIGN 1.3: `iz.autodiff`, `iz.grad`, `iz.fwddiff`, `iz.hvp`, `Const`,
`Duplicated`, `Active`. Forward mode and Hessian-vector products are described in their docstrings. This
module checks what the user passes and calls the derivatives `compiled_derivatives.py` compiles; the
inspection helpers (`show_cache`, the derivative stages of `show_ir`) are in `inspection.py`.

`autodiff(kernel, *args, seed=None, opt="post", backend=None)` is Enzyme's combined reverse mode: each
argument is `Const(v)` (or a plain value), `Duplicated(array, shadow)` or `Active(scalar)`. The kernel runs
(arrays it writes hold their new values afterwards), each shadow *accumulates* its array's adjoint, and the
result is `(primal_return, adjoints)`, the adjoints of the Active arguments in argument order. For an
array the kernel writes, the shadow holds the seed cotangent on entry and is consumed: zeroed where the
kernel overwrote the array. `seed` is the cotangent of a returned float (Enzyme's `differet`, 1.0 when not
given); for a kernel that returns no float there is nothing for it to seed, and passing one is a TypeError.

`grad(kernel, argnums=0)` wraps it for kernels returning a float: arrays in `argnums` get fresh zero
shadows, float scalars become Active; it returns the gradient (a tuple for a tuple of `argnums`). `argnums`
is read as JAX reads it (`argnum_positions`: a negative one counts from the end; one out of range or
named twice is a ValueError), for `hvp` too.

A gradient is compiled once per kernel, activity pattern, `opt`, backend and checked mode, through the
pipeline of `enzyme_ad/gradient.py` (`compiled_derivatives.py`).

The call path is thin (`_ReverseCall`): the first call with a pattern of argument kinds (`Const`,
`Duplicated`, `Active`, plain; for `grad`, which argnums are numpy arrays) makes every check that depends on
kinds only, finds the compiled derivative and keeps both, beside the kernel's gradients (a custom rule
registered later empties them) and under the environment variables that choose compiled code
(`environment.py`: a change to `ISOZYME_BACKEND`, `ISOZYME_BOUNDSCHECK`, `ISOZYME_LOOP_FUSION` or
`ISOZYME_CHECK_RACES` takes effect at the next call). A later call then does what must be done per call:
the shadow and output arrays, the checks below, one native call (about 3-5 us in all on one-element
kernels, `benchmarks/dispatch.py`). The checks made
before every call, besides the kernel's own argument checks (which cover the shadows too: dtype, rank,
contiguity, no two arrays sharing memory): `Duplicated` needs a float array and a shadow of the same
dtype and shape; `Active` needs a float scalar parameter; integers are never active (TypeError naming the
parameter).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from isozyme.enzyme_ad.activity import ArgActivity
from isozyme.enzyme_ad.gradient import check_opt, hvp_parameters
from isozyme.runtime import compile_log
from isozyme.runtime.arguments import Parameter
from isozyme.runtime.compiled_derivatives import CompiledGradient, compiled_forward, compiled_gradient, compiled_hvp
from isozyme.runtime.device_array import DeviceArray
from isozyme.runtime.environment import selection
from isozyme.runtime.kernel import Kernel
from isozyme.ssa import interpreter
from isozyme.ssa.types import ArrayType, Type


@dataclass(frozen=True)
class Const:
    """An argument that is not differentiated (a plain value means the same)."""

    value: object


@dataclass(frozen=True)
class Duplicated:
    """An array with its shadow: the shadow accumulates the array's adjoint (reverse mode); in forward mode,
    a float array or scalar with its tangent."""

    value: object
    shadow: object


@dataclass(frozen=True)
class Active:
    """A float scalar whose adjoint `autodiff` returns."""

    value: object


Annotated = Const | Duplicated | Active


# --- the user's API ------------------------------------------------------------------------------------------


def _where(kernel: Kernel, param: Parameter) -> str:
    return f"parameter '{param.name}' of kernel '{kernel.definition.name}'"


def _classify(kernel: Kernel, param: Parameter, arg: object) -> ArgActivity:
    if isinstance(arg, Duplicated):
        if not isinstance(param.type, ArrayType):
            raise TypeError(f"{_where(kernel, param)} is a scalar: reverse mode takes Active(value) for a "
                            "float scalar, not Duplicated")
        if not param.type.element.is_float:
            raise TypeError(f"{_where(kernel, param)} is an integer array and cannot be Duplicated")
        return ArgActivity.DUP
    if isinstance(arg, Active):
        if isinstance(param.type, ArrayType):
            raise TypeError(f"{_where(kernel, param)} is an array: pass Duplicated(array, shadow), not Active")
        if not param.type.is_float:
            raise TypeError(f"{_where(kernel, param)} has type {param.type} and cannot be Active "
                            "(only float scalars are)")
        return ArgActivity.ACTIVE
    return ArgActivity.CONST


def _check_shadow(kernel: Kernel, param: Parameter, arg: Duplicated) -> None:
    array, shadow = arg.value, arg.shadow
    if not isinstance(shadow, np.ndarray | DeviceArray):
        raise TypeError(f"the shadow of {_where(kernel, param)} must be a numpy array or an iz.DeviceArray, "
                        f"not {type(shadow).__name__}")
    if isinstance(array, np.ndarray | DeviceArray) and (shadow.dtype != array.dtype or shadow.shape != array.shape):
        raise ValueError(f"the shadow of {_where(kernel, param)} must have the array's dtype and shape "
                         f"({array.dtype}, {array.shape}), not ({shadow.dtype}, {shadow.shape})")


def _checked_signature(api: str, kernel: Kernel, args: Sequence[object]) -> tuple[list[Parameter], Type]:
    """The kernel's signature, after checking that it is a kernel and that `args` has one value per
    parameter (TypeError otherwise)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"{api} needs an @iz.kernel, got {type(kernel).__name__}")
    params, return_type = kernel.signature()
    if len(args) != len(params):
        raise TypeError(f"kernel '{kernel.definition.name}' takes {len(params)} argument(s) "
                        f"({', '.join(p.name for p in params)}), got {len(args)}")
    return params, return_type


@dataclass(frozen=True, eq=False)
class _ReverseCall:
    """How to call one compiled `diffe_<f>`: what `autodiff` and `grad` worked out for an activity pattern,
    kept so that a later call with the same pattern (and the same `environment.selection()`) does per call
    only what must be done per call: the shadow and output arrays, the argument checks (the compiled entry
    makes those), and the call."""

    kernel: Kernel
    activities: tuple[ArgActivity, ...]
    opt: str
    compiled: CompiledGradient
    outputs: tuple[np.dtype | None, ...]
    """Per parameter, the dtype of its adjoint's one-element output (Active), else None."""
    default_seed: object
    """The cotangent of the returned float when no seed is given (1.0), None for a kernel returning none."""
    home: dict
    """The kernel's gradient cache it was made for: registering a custom rule replaces that cache, and with
    it every `_ReverseCall` made before."""

    invoke: Callable[[Sequence[object], Sequence[object], object], tuple[object, list]]
    """`invoke(values, shadows, seed)`: the primal return and the adjoint outputs of the Active parameters;
    `values` one per parameter, `shadows` one per Duplicated parameter (in order), `seed` the checked
    cotangent. Generated for the activity pattern (`_invoker`): the entry's arguments in place, no loop."""

    @classmethod
    def make(cls, kernel: Kernel, activities: tuple[ArgActivity, ...], opt: str, backend: str | None) -> _ReverseCall:
        params, return_type = kernel.signature()
        outputs = tuple(p.type.numpy_dtype if kind is ArgActivity.ACTIVE else None  # type: ignore[attr-defined]
                        for p, kind in zip(params, activities))
        seed = _checked_seed(kernel, return_type, None)
        compiled = compiled_gradient(kernel, activities, opt, backend)

        def log() -> None:
            compile_log.record_derivative(kernel, "reverse", activities, opt, compiled.backend)
        invoke = _invoker(compiled.entry, activities, outputs, seed is not None, log)
        return cls(kernel, activities, opt, compiled, outputs, seed, kernel.__dict__["_gradients"], invoke)

    def is_current(self) -> bool:
        return self.home is self.kernel.__dict__.get("_gradients")


def _invoker(entry: Callable[..., object], activities: tuple[ArgActivity, ...], outputs: tuple[np.dtype | None, ...],
             seeded: bool, log: Callable[[], None]) -> Callable[[Sequence[object], Sequence[object], object],
                                                               tuple[object, list]]:
    """`_ReverseCall.invoke`, from source: e.g. for (Duplicated, Active) on a kernel returning a float,
    `a1 = zeros(1, d1); return entry(values[0], shadows[0], values[1], a1, seed), [a1]`."""
    namespace: dict[str, object] = {"_entry": entry, "_zeros": np.zeros, "_log": log}
    lines, call, adjoints = [], [], []
    shadows = 0
    for index, (kind, dtype) in enumerate(zip(activities, outputs)):
        call.append(f"values[{index}]")
        if dtype is not None:
            namespace[f"_d{index}"] = dtype
            lines.append(f"    a{index} = _zeros(1, _d{index})")
            call.append(f"a{index}")
            adjoints.append(f"a{index}")
        elif kind is _DUP:
            call.append(f"shadows[{shadows}]")
            shadows += 1
    if seeded:
        call.append("seed")
    source = "\n".join(["def invoke(values, shadows, seed):", *lines, "    _log()",
                        f"    return _entry({', '.join(call)}), [{', '.join(adjoints)}]"])
    exec(compile(source, "<isozyme reverse call>", "exec"), namespace)  # noqa: S102 - our own source
    return namespace["invoke"]  # type: ignore[return-value]


_DUP = ArgActivity.DUP


def autodiff(kernel: Kernel, *args: object, seed: float | None = None, opt: str = "post",
             backend: str | None = None) -> tuple[object, tuple[object, ...]]:
    """Reverse mode (Enzyme's combined mode): run `kernel` on `args` and return `(primal_return, adjoints)`,
    the adjoints of the `Active` arguments in argument order.

    Each argument is `Const(v)` or a plain value (not differentiated), `Duplicated(array, shadow)` (a float
    array and an array of its dtype and shape that *accumulates* the array's adjoint) or `Active(scalar)` (a
    float scalar whose adjoint is returned). The kernel runs: arrays it writes hold their new values
    afterwards. For an array the kernel writes, the shadow holds the cotangent of its final contents on entry
    and is consumed: zeroed where the kernel overwrote the array.

    `seed` is the cotangent of the returned float (Enzyme's `differet`; 1.0 when not given); a TypeError for a
    kernel that returns no float, where it would seed nothing (the cotangents of array outputs go in their
    shadows). `opt` is "post" (differentiate the optimized program, the default), "pre" (differentiate the
    program as written, then optimize) or "none"; `backend` is "llvm", "opencl" or "interp" (by default the
    kernel's). A derivative is compiled once per kernel, activity pattern, `opt`, backend and checked mode.

    Integers are never active: `Duplicated` or `Active` on one is a TypeError naming the parameter; a shadow of
    another dtype or shape than its array is a ValueError."""
    cache = kernel.__dict__.get("_gradients") if isinstance(kernel, Kernel) else None
    key = ("autodiff", tuple(map(type, args)), opt, backend, selection())
    found = cache.get(key) if cache is not None else None
    if found is None:  # the first call with these kinds of arguments: every check that depends on kinds only
        params, _ = _checked_signature("autodiff", kernel, args)
        activities = tuple(_classify(kernel, p, a) for p, a in zip(params, args))
        reverse = _ReverseCall.make(kernel, activities, opt, backend)
        found = reverse.home[key] = (reverse, [(i, p) for i, (p, kind) in enumerate(zip(params, activities))
                                               if kind is _DUP])
    reverse, duplicated = found
    differet = reverse.default_seed if seed is None else _checked_seed(kernel, kernel.signature()[1], seed)
    shadows = []
    for position, param in duplicated:
        _check_shadow(kernel, param, args[position])  # type: ignore[arg-type]
        shadows.append(args[position].shadow)  # type: ignore[attr-defined]
    values = [arg.value if isinstance(arg, _ANNOTATIONS) else arg for arg in args]  # type: ignore[attr-defined]
    result, adjoints = reverse.invoke(values, shadows, differet)
    return result, tuple([adjoint.item() for adjoint in adjoints])


_ANNOTATIONS = (Const, Duplicated, Active)


def _checked_seed(kernel: Kernel, return_type: Type, seed: object) -> object:
    """The cotangent of the kernel's float return value (1.0 by default), checked like a scalar argument;
    None for a kernel that returns no float, which takes no seed (TypeError)."""
    name = kernel.definition.name
    if not return_type.is_float:
        if seed is not None:
            returns = "nothing" if return_type.is_void else f"an {return_type}, which has no derivative"
            raise TypeError(f"seed= is the cotangent of the returned float, and kernel '{name}' returns {returns}: "
                            "seed the outputs through the shadows of the arrays it writes (Duplicated(out, d_out))")
        return None
    where = f"seed= (the cotangent of the float kernel '{name}' returns)"
    return interpreter.check_scalar(where, return_type, 1.0 if seed is None else seed)  # type: ignore[arg-type]


def argnum_positions(kernel: Kernel, params: Sequence[Parameter], argnums: object) -> tuple[int, ...]:
    """The parameter positions `argnums` names, in its order, as JAX reads them: an int or a sequence of
    ints (TypeError otherwise), each in -len(params)..len(params)-1, a negative one counting from the end;
    one out of range, none at all or one parameter named twice is a ValueError."""
    name, count = kernel.definition.name, len(params)
    try:
        given = (operator.index(argnums),) if not isinstance(argnums, Sequence) else tuple(map(operator.index, argnums))
    except TypeError:
        raise TypeError(f"argnums must be an int or a sequence of ints, got {argnums!r}") from None
    if not given:
        raise ValueError(f"argnums {argnums!r} names no parameter of kernel '{name}'")
    for position in given:
        if not -count <= position < count:
            raise ValueError(f"argnums {position} is out of range for kernel '{name}' with {count} parameters "
                             f"(from {-count} to {count - 1}, negative ones counting from the end)")
    positions = tuple(position % count for position in given)
    twice = next((p for i, p in enumerate(positions) if p in positions[:i]), None)
    if twice is not None:
        raise ValueError(f"argnums {argnums!r} names parameter '{params[twice].name}' of kernel '{name}' twice")
    return positions


def _grad_activities(kernel: Kernel, params: list[Parameter], positions: tuple[int, ...],
                     arrays: tuple[bool, ...]) -> tuple[ArgActivity, ...]:
    """What `grad` differentiates: numpy arrays for array parameters in `argnums` Duplicated (with fresh zero
    shadows), any other argument there Active (checked like `autodiff`'s Active), the rest Const."""
    activities = [ArgActivity.CONST] * len(params)
    for position, array in zip(positions, arrays):
        annotated = Duplicated(None, None) if array else Active(None)
        activities[position] = _classify(kernel, params[position], annotated)
    return tuple(activities)


def grad(kernel: Kernel, argnums: int | Sequence[int] = 0, opt: str = "post",
         backend: str | None = None) -> Callable[..., object]:
    """The gradient function of a float-returning kernel, as in JAX: `iz.grad(f, argnums=(0, 1))(x, a)`.

    The function returned takes the kernel's arguments and returns the gradient with respect to the parameters
    `argnums`: a new array for an array parameter, a float for a float scalar, a tuple for a tuple of
    `argnums`. `argnums` is read as JAX reads it: a negative one counts from the end; one out of range, or a
    parameter named twice, is a ValueError. It runs reverse mode (`autodiff`) with fresh zero shadows for the
    arrays, the scalars `Active` and the seed 1.0; `opt` and `backend` are `autodiff`'s. A kernel that returns
    no float is a TypeError: differentiate it with `autodiff` and a seeded shadow."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"grad needs an @iz.kernel, got {type(kernel).__name__}")
    params, return_type = kernel.signature()
    if not return_type.is_float:
        raise TypeError(f"grad needs a kernel returning a float; '{kernel.definition.name}' returns "
                        f"{return_type}: use iz.autodiff with a seeded shadow")
    positions = argnum_positions(kernel, params, argnums)
    single = not isinstance(argnums, Sequence)
    array_params = {p for p in positions if isinstance(params[p].type, ArrayType)}
    calls: dict[tuple[object, ...], _ReverseCall] = {}
    """By which argnums are numpy arrays and `environment.selection()`."""

    def gradient(*args: object) -> object:
        if len(args) != len(params):
            _checked_signature("grad", kernel, args)  # the TypeError naming the parameters
        arrays = tuple([p in array_params and isinstance(args[p], np.ndarray) for p in positions])
        key = (arrays, selection())
        reverse = calls.get(key)
        if reverse is None or not reverse.is_current():
            activities = _grad_activities(kernel, params, positions, arrays)
            reverse = calls[key] = _ReverseCall.make(kernel, activities, opt, backend)
        if single:  # one argnum: its shadow, or its one adjoint
            array = args[positions[0]]
            if arrays[0]:
                shadow = np.zeros(array.shape, array.dtype)  # type: ignore[union-attr]
                reverse.invoke(args, (shadow,), reverse.default_seed)
                return shadow
            return reverse.invoke(args, (), reverse.default_seed)[1][0].item()
        shadows = {p: np.zeros(args[p].shape, args[p].dtype) for p, array in zip(positions, arrays) if array}
        _, adjoints = reverse.invoke(args, [shadows[p] for p in sorted(shadows)], reverse.default_seed)
        active = iter(adjoints)
        by_position = {p: (shadows[p] if p in shadows else next(active).item()) for p in sorted(positions)}
        return tuple(by_position[p] for p in positions)
    return gradient


# --- forward mode and Hessian-vector products (their docstrings say what they do) --------------------------


def _classify_forward(kernel: Kernel, param: Parameter, arg: object) -> ArgActivity:
    if isinstance(arg, Active):
        raise TypeError(f"{_where(kernel, param)}: forward mode takes Duplicated(value, tangent), not Active")
    if not isinstance(arg, Duplicated):
        return ArgActivity.CONST
    element = param.type.element if isinstance(param.type, ArrayType) else param.type
    if not element.is_float:
        raise TypeError(f"{_where(kernel, param)} has type {param.type} and cannot be Duplicated (only float "
                        "arrays and float scalars have tangents)")
    return ArgActivity.DUP


def _check_scalar_tangent(kernel: Kernel, param: Parameter, tangent: object) -> None:
    if isinstance(tangent, (bool, np.bool_)) or not isinstance(tangent, (int, float, np.integer, np.floating)):
        raise TypeError(f"the tangent of {_where(kernel, param)} must be a real number, "
                        f"not {type(tangent).__name__}")


def fwddiff(kernel: Kernel, *args: object, opt: str = "post",
            backend: str | None = None) -> tuple[object, object]:
    """Forward mode (Enzyme's, DESIGN 1.3): run `kernel` on `args` and return `(primal_return,
    tangent_of_return)`, both None for a kernel without a return value.

    Each argument is `Const(v)` or a plain value, or `Duplicated(value, tangent)` for a float array (the
    tangent: an array of its dtype and shape) or a float scalar (the tangent: a number); `Active` is a
    TypeError. The tangent of what the kernel leaves in a `Duplicated` array replaces the tangent array's
    contents (a kernel that does not write the array leaves its tangent as it was). `opt` and `backend` are
    `autodiff`'s; `fwddiffe_<f>` is compiled once per kernel, activity pattern, `opt`, backend and checked
    mode, like a gradient (llvm pipeline name `fwd:<opt>:<activities>`)."""
    params, return_type = _checked_signature("fwddiff", kernel, args)
    activities = tuple(_classify_forward(kernel, p, a) for p, a in zip(params, args))
    call: list[object] = []
    for param, arg, kind in zip(params, args, activities):
        call.append(arg.value if isinstance(arg, (Const, Duplicated)) else arg)
        if kind is ArgActivity.DUP:
            if isinstance(param.type, ArrayType):
                _check_shadow(kernel, param, arg)  # type: ignore[arg-type]
            else:
                _check_scalar_tangent(kernel, param, arg.shadow)  # type: ignore[union-attr]
            call.append(arg.shadow)  # type: ignore[union-attr]
    tangent_out = np.zeros(1, dtype=return_type.numpy_dtype) if return_type.is_float else None  # type: ignore[attr-defined]
    if tangent_out is not None:
        call.append(tangent_out)
    result = compiled_forward(kernel, activities, opt, backend).entry(*call)
    return result, (tangent_out[0].item() if tangent_out is not None else None)


def _hvp_positions(kernel: Kernel, params: list[Parameter], argnums: int | Sequence[int]) -> tuple[int, ...]:
    positions = argnum_positions(kernel, params, argnums)
    for position in positions:
        param = params[position]
        element = param.type.element if isinstance(param.type, ArrayType) else param.type
        if not element.is_float:
            raise TypeError(f"{_where(kernel, param)} has type {param.type}: a Hessian is taken with respect "
                            "to float arrays and float scalars only")
    return positions


def _direction(kernel: Kernel, param: Parameter, arg: object, v: object) -> object:
    """The part of v for one argument: an array of the argument's shape (a copy: the derivative overwrites
    the tangent of an array the kernel writes, and v stays the caller's), or a number."""
    if not isinstance(param.type, ArrayType):
        _check_scalar_tangent(kernel, param, v)
        return interpreter.check_scalar(f"the direction v for {_where(kernel, param)}", param.type, v)  # type: ignore
    direction = np.array(v, dtype=param.type.element.numpy_dtype, order="C", copy=True)
    shape = np.shape(arg)
    if direction.shape != shape:
        raise ValueError(f"the direction v for {_where(kernel, param)} must have the argument's shape {shape}, "
                         f"not {direction.shape}")
    return direction


def hvp(kernel: Kernel, argnums: int | Sequence[int] = 0, opt: str = "post",
        backend: str | None = None) -> Callable[..., object]:
    """The Hessian-vector product function of a float-returning kernel: `iz.hvp(f, argnums=0)(*args, v)`.

    The function returned computes `H v`, `H` the Hessian of the return value with respect to the parameters
    `argnums` (float arrays and float scalars), by forward mode over the reverse-mode gradient
    (`fwddiffe_diffe_<f>`, llvm pipeline name `hvp:<opt>:<positions>`). `v` is the last positional argument:
    an array of the argument's shape, or a number, or for a tuple `argnums` a tuple of those; the result has
    the same form. `argnums` is read as `grad` reads it; `opt` and `backend` are `autodiff`'s."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"hvp needs an @iz.kernel, got {type(kernel).__name__}")
    params, return_type = kernel.signature()
    if not return_type.is_float:
        raise TypeError(f"hvp needs a kernel returning a float; '{kernel.definition.name}' returns {return_type}")
    positions = _hvp_positions(kernel, params, argnums)
    check_opt(opt)

    def product(*args: object) -> object:
        if len(args) != len(params) + 1:
            raise TypeError(f"the hvp of kernel '{kernel.definition.name}' takes its {len(params)} argument(s) "
                            f"({', '.join(p.name for p in params)}) and then v, got {len(args)}")
        *primal, v = args
        directions = tuple(v) if isinstance(argnums, Sequence) else (v,)  # type: ignore[arg-type]
        if len(directions) != len(positions):
            raise ValueError(f"v needs one direction per argnum ({len(positions)}), got {len(directions)}")
        compiled = compiled_hvp(kernel, positions, opt, backend)
        by_position = {p: _direction(kernel, params[p], primal[p], d) for p, d in zip(positions, directions)}
        call: list[object] = []
        outputs: dict[int, np.ndarray] = {}
        for param in hvp_parameters([(p.name, p.type) for p in params], return_type, positions):
            if param.role == "primal":
                call.append(primal[param.position])
            elif param.role == "direction":
                call.append(by_position[param.position])
            elif param.role == "seed":
                call.append(1.0)
            else:  # "gradient", "hvp": outputs, from 0
                zeros = np.zeros(np.shape(primal[param.position]) if isinstance(params[param.position].type,
                                 ArrayType) else 1, dtype=param.type.element.numpy_dtype)  # type: ignore[attr-defined]
                if param.role == "hvp":
                    outputs[param.position] = zeros
                call.append(zeros)
        compiled.entry(*call)
        results = tuple(outputs[p] if isinstance(params[p].type, ArrayType) else outputs[p][0].item()
                        for p in positions)
        return results if isinstance(argnums, Sequence) else results[0]
    return product
