"""The differentiation API of DESIGN 1.3: `iz.autodiff`, `iz.grad`, `Const`, `Duplicated`, `Active`,
and the inspection helpers `show_cache` and the `grad`/`grad-opt` stages of `show_ir`.

`autodiff(kernel, *args, seed=1.0, opt="post", backend=None)` is Enzyme's combined reverse mode: each
argument is `Const(v)` (or a plain value), `Duplicated(array, shadow)` or `Active(scalar)`. The kernel runs
(arrays it writes hold their new values afterwards), each shadow *accumulates* its array's adjoint, and the
result is `(primal_return, adjoints)`, the adjoints of the Active arguments in argument order. For an
array the kernel writes, the shadow holds the seed cotangent on entry and is consumed: zeroed where the
kernel overwrote the array.

`grad(kernel, argnums=0)` wraps it for kernels returning a float: arrays in `argnums` get fresh zero
shadows, float scalars become Active; it returns the gradient (a tuple for a tuple of `argnums`).

A gradient is compiled once per kernel, activity pattern, `opt`, backend and checked mode, through the
pipeline of `enzyme_ad/gradient.py`; on the `llvm` backend its object code goes through the same memory
and disk caches as a primal kernel (the pipeline name carries the activity and `opt`). The checks made
before every call, besides the kernel's own argument checks (which cover the shadows too: dtype, rank,
contiguity, no two arrays sharing memory): `Duplicated` needs a float array and a shadow of the same
dtype and shape; `Active` needs a float scalar parameter; integers are never active (TypeError naming the
parameter).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from isozyme.enzyme_ad.activity import ArgActivity
from isozyme.enzyme_ad.errors import DifferentiationError
from isozyme.enzyme_ad.gradient import Gradient, check_opt, reverse_gradient
from isozyme.enzyme_ad.reverse import gradient_parameters
from isozyme.optimize.pass_manager import PassOptions
from isozyme.runtime.arguments import Parameter, check_arguments
from isozyme.runtime.kernel import Kernel, _print_ir_request
from isozyme.ssa.interpreter import run_function
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.printer import print_module
from isozyme.ssa.types import ArrayType, Type
from isozyme.ssa.verifier import verify


@dataclass(frozen=True)
class Const:
    """An argument that is not differentiated (a plain value means the same)."""

    value: object


@dataclass(frozen=True)
class Duplicated:
    """An array with its shadow: the shadow accumulates the array's adjoint (reverse mode)."""

    value: object
    shadow: object


@dataclass(frozen=True)
class Active:
    """A float scalar whose adjoint `autodiff` returns."""

    value: object


Annotated = Const | Duplicated | Active


@dataclass
class CompiledGradient:
    """`diffe_<f>` compiled for one backend: call it with the arguments `gradient_parameters` lists."""

    name: str
    params: list[Parameter]
    entry: Callable[..., object]


# --- compiling -----------------------------------------------------------------------------------------------


def _signature(kernel: Kernel) -> tuple[list[Parameter], Type]:
    """The kernel's parameters and return type (lowered once per kernel)."""
    cached = getattr(kernel, "_signature", None)
    if cached is None:
        _, function = kernel.lower()
        cached = ([Parameter(arg.name or "", arg.type) for arg in function.args], function.return_type)
        kernel._signature = cached  # type: ignore[attr-defined]
    return cached


def _gradient_params(kernel: Kernel, activities: tuple[ArgActivity, ...]) -> list[Parameter]:
    params, return_type = _signature(kernel)
    return [Parameter(p.name, p.type) for p in
            gradient_parameters([(p.name, p.type) for p in params], activities, return_type)]


def _stage_printer(kernel: Kernel, opt: str) -> Callable[[str, Module], None]:
    """Prints the "grad" stage to stderr when ISOZYME_PRINT_IR asks for it."""
    def stage(name: str, module: Module) -> None:
        if name in _print_ir_request():
            print(f"; *** {name} of kernel {kernel.definition.name} ({opt}) ***\n{print_module(module)}",
                  file=sys.stderr)
    return stage


def differentiate(kernel: Kernel, activities: tuple[ArgActivity, ...], opt: str,
                  on_stage: Callable[[str, Module], None] | None = None) -> Gradient:
    """A fresh `diffe_<f>` of `kernel` (not cached: `show_ir` and `show_cache` use it)."""
    module, function = kernel.lower()
    print_ir = _print_ir_request()
    options = PassOptions(print_after_all="after-all" in print_ir,
                          print_after=print_ir - {"ssa", "opt", "grad", "grad-opt"})

    printer = _stage_printer(kernel, opt)

    def stage(name: str, module: Module) -> None:
        printer(name, module)
        if on_stage is not None:
            on_stage(name, module)
    try:
        gradient = reverse_gradient(module, function, activities, opt, options, stage)
    except DifferentiationError as error:
        raise error.with_traceback(None) from None
    if "grad-opt" in print_ir:
        print(f"; *** grad-opt of kernel {kernel.definition.name} ({opt}) ***\n{print_module(module)}",
              file=sys.stderr)
    return gradient


def compiled_gradient(kernel: Kernel, activities: tuple[ArgActivity, ...], opt: str,
                      backend: str | None) -> CompiledGradient:
    """`diffe_<f>` for these activities, compiled (cached on the kernel)."""
    chosen = kernel.backend(backend)
    key = ("grad", activities, check_opt(opt), chosen, kernel.boundscheck())
    cache = kernel.__dict__.setdefault("_gradients", {})
    if key not in cache:
        params = _gradient_params(kernel, activities)
        compile_for = _compile_llvm if chosen == "llvm" else _compile_interp
        cache[key] = CompiledGradient(f"diffe_{kernel.definition.name}", params,
                                      compile_for(kernel, activities, opt, params))
    return cache[key]


def _compile_interp(kernel: Kernel, activities: tuple[ArgActivity, ...], opt: str,
                    params: list[Parameter]) -> Callable[..., object]:
    function = differentiate(kernel, activities, opt).function
    name = function.name

    def entry(*args: object) -> object:
        return run_function(function, *check_arguments(name, params, args))
    return entry


def _compile_llvm(kernel: Kernel, activities: tuple[ArgActivity, ...], opt: str,
                  params: list[Parameter]) -> Callable[..., object]:
    from isozyme.runtime.llvm_backend import EntrySignature, compile_native

    module, function = kernel.lower(verify_ir=False)
    name = f"diffe_{kernel.definition.name}"
    signature = EntrySignature(name, tuple(params), function.return_type)
    pipeline = f"grad:{opt}:{','.join(map(str, activities))}"

    def optimize(module: Module) -> Function:  # on a cache miss only
        verify(module)
        print_ir = _print_ir_request()
        options = PassOptions(print_after_all="after-all" in print_ir,
                              print_after=print_ir - {"ssa", "opt", "grad", "grad-opt"})
        try:
            gradient = reverse_gradient(module, function, activities, opt, options, _stage_printer(kernel, opt))
        except DifferentiationError as error:
            raise error.with_traceback(None) from None
        if "grad-opt" in print_ir:
            print(f"; *** grad-opt of kernel {kernel.definition.name} ({opt}) ***\n{print_module(module)}",
                  file=sys.stderr)
        return gradient.function
    return compile_native(name, module, signature, pipeline, optimize, kernel.codegen_options(),
                          use_disk_cache=not _print_ir_request(), print_stages=frozenset(_print_ir_request()))


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
    if not isinstance(shadow, np.ndarray):
        raise TypeError(f"the shadow of {_where(kernel, param)} must be a numpy array, "
                        f"not {type(shadow).__name__}")
    if isinstance(array, np.ndarray) and (shadow.dtype != array.dtype or shadow.shape != array.shape):
        raise ValueError(f"the shadow of {_where(kernel, param)} must have the array's dtype and shape "
                         f"({array.dtype}, {array.shape}), not ({shadow.dtype}, {shadow.shape})")


def autodiff(kernel: Kernel, *args: object, seed: float = 1.0, opt: str = "post",
             backend: str | None = None) -> tuple[object, tuple[object, ...]]:
    """Reverse mode (module docstring): `(primal_return, adjoints of the Active arguments)`."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"autodiff needs an @iz.kernel, got {type(kernel).__name__}")
    params, return_type = _signature(kernel)
    if len(args) != len(params):
        raise TypeError(f"kernel '{kernel.definition.name}' takes {len(params)} argument(s) "
                        f"({', '.join(p.name for p in params)}), got {len(args)}")
    activities = tuple(_classify(kernel, p, a) for p, a in zip(params, args))
    call: list[object] = []
    outputs: list[np.ndarray] = []
    for param, arg, kind in zip(params, args, activities):
        value = arg.value if isinstance(arg, (Const, Duplicated, Active)) else arg
        call.append(value)
        if kind is ArgActivity.DUP:
            _check_shadow(kernel, param, arg)  # type: ignore[arg-type]
            call.append(arg.shadow)  # type: ignore[union-attr]
        elif kind is ArgActivity.ACTIVE:
            outputs.append(np.zeros(1, dtype=param.type.numpy_dtype))  # type: ignore[attr-defined]
            call.append(outputs[-1])
    if return_type.is_float:
        call.append(seed)
    result = compiled_gradient(kernel, activities, opt, backend).entry(*call)
    return result, tuple(output[0].item() for output in outputs)


def grad(kernel: Kernel, argnums: int | Sequence[int] = 0, opt: str = "post",
         backend: str | None = None) -> Callable[..., object]:
    """The gradient function of a float-returning kernel (module docstring)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"grad needs an @iz.kernel, got {type(kernel).__name__}")
    params, return_type = _signature(kernel)
    if not return_type.is_float:
        raise TypeError(f"grad needs a kernel returning a float; '{kernel.definition.name}' returns "
                        f"{return_type}: use iz.autodiff with a seeded shadow")
    positions = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for position in positions:
        if not 0 <= position < len(params):
            raise ValueError(f"argnums {position} is out of range for kernel '{kernel.definition.name}' "
                             f"with {len(params)} parameters")

    def gradient(*args: object) -> object:
        annotated: list[object] = list(args)
        shadows: dict[int, np.ndarray] = {}
        for position in positions:
            if isinstance(params[position].type, ArrayType) and isinstance(args[position], np.ndarray):
                shadows[position] = np.zeros_like(args[position])
                annotated[position] = Duplicated(args[position], shadows[position])
            else:
                annotated[position] = Active(args[position])
        _, adjoints = autodiff(kernel, *annotated, opt=opt, backend=backend)
        active = iter(adjoints)
        by_position = {p: (shadows[p] if p in shadows else next(active)) for p in sorted(set(positions))}
        values = tuple(by_position[p] for p in positions)
        return values[0] if isinstance(argnums, int) else values
    return gradient


def parse_activity(kernel: Kernel, activity: Sequence[str | ArgActivity]) -> tuple[ArgActivity, ...]:
    params, _ = _signature(kernel)
    if len(activity) != len(params):
        raise ValueError(f"activity needs one entry per parameter of '{kernel.definition.name}' "
                         f"({', '.join(p.name for p in params)}), got {len(activity)}")
    try:
        return tuple(ArgActivity(a) if isinstance(a, str) else a for a in activity)
    except ValueError:
        raise ValueError(f"activities are 'const', 'dup' or 'active', got {list(activity)}") from None


def gradient_ir(kernel: Kernel, stage: str, activity: Sequence[str | ArgActivity], opt: str = "post") -> str:
    """The IR of `diffe_<f>`: "grad" right after AD, "grad-opt" after the optimization that follows."""
    captured: dict[str, str] = {}
    gradient = differentiate(kernel, parse_activity(kernel, activity), opt,
                             on_stage=lambda name, module: captured.setdefault(name, print_module(module)))
    return captured["grad"] if stage == "grad" else print_module(gradient.module)


def show_cache(kernel: Kernel, activity: Sequence[str | ArgActivity], opt: str = "post") -> str:
    """Every value the reverse pass tapes: its name, source line, element type and number of elements
    (JAX's `print_saved_residuals`)."""
    gradient = differentiate(kernel, parse_activity(kernel, activity), opt)
    lines = [f"; cache of diffe_{kernel.definition.name} (opt={opt}): {len(gradient.tapes)} taped value(s)"]
    for tape in gradient.tapes:
        loc = tape.value.loc
        where = f"{loc.file}:{loc.line}" if loc is not None else "?"
        name = f"%{tape.value.name}" if tape.value.name else f"<{tape.value.op}>"  # type: ignore[attr-defined]
        lines.append(f"{name}  {tape.element}  x {tape.size_text}  at {where}")
    return "\n".join(lines)
