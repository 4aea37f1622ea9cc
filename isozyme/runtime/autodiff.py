"""The differentiation API of DESIGN 1.3: `iz.autodiff`, `iz.grad`, `iz.fwddiff`, `iz.hvp`, `Const`,
`Duplicated`, `Active`, and the inspection helpers `show_cache` and the `grad`/`grad-opt` and `fwd`/`fwd-opt`
stages of `show_ir`. Forward mode and Hessian-vector products are described in their section below.

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
pipeline of `enzyme_ad/gradient.py`; on the `llvm` backend its object code goes through the same memory
and disk caches as a primal kernel (the pipeline name carries the activity and `opt`). The checks made
before every call, besides the kernel's own argument checks (which cover the shadows too: dtype, rank,
contiguity, no two arrays sharing memory): `Duplicated` needs a float array and a shadow of the same
dtype and shape; `Active` needs a float scalar parameter; integers are never active (TypeError naming the
parameter).
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from isozyme.enzyme_ad.activity import ArgActivity
from isozyme.enzyme_ad.custom import differentiated_activities
from isozyme.enzyme_ad.errors import DifferentiationError
from isozyme.enzyme_ad.forward import forward_parameters
from isozyme.enzyme_ad.gradient import (
    ForwardDerivative,
    Gradient,
    check_opt,
    forward_derivative,
    hessian_vector_product,
    hvp_parameters,
    reverse_gradient,
)
from isozyme.enzyme_ad.reverse import gradient_parameters
from isozyme.optimize.pass_manager import PassOptions
from isozyme.runtime import compile_log, race_detector
from isozyme.runtime.arguments import Parameter, check_arguments, writable_parameters
from isozyme.runtime.device_array import DeviceArray
from isozyme.runtime.kernel import Kernel, _print_ir_request
from isozyme.ssa import interpreter
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
    """An array with its shadow: the shadow accumulates the array's adjoint (reverse mode); in forward mode,
    a float array or scalar with its tangent."""

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
    chosen = derivative_backend(kernel, backend)
    key = ("grad", activities, check_opt(opt), chosen, kernel.codegen_options(), race_detector.checks_races(chosen))
    compile_log.record_derivative(kernel, "reverse", activities, opt, chosen)
    cache = kernel.__dict__.setdefault("_gradients", {})
    if key not in cache:
        params = _gradient_params(kernel, activities)
        compile_for = {"llvm": _compile_llvm, "opencl": _compile_opencl}.get(chosen, _compile_interp)
        cache[key] = CompiledGradient(f"diffe_{kernel.definition.name}", params,
                                      compile_for(kernel, activities, opt, params))
    return cache[key]


def _compile_interp(kernel: Kernel, activities: tuple[ArgActivity, ...], opt: str,
                    params: list[Parameter]) -> Callable[..., object]:
    gradient = differentiate(kernel, activities, opt)
    name = gradient.function.name
    writable = writable_parameters(gradient.module, gradient.function)
    run = race_detector.interpreted(gradient.module, gradient.function)

    def entry(*args: object) -> object:
        return run(check_arguments(name, params, args, writable=writable))
    return entry


def _compile_opencl(kernel: Kernel, activities: tuple[ArgActivity, ...], opt: str,
                    params: list[Parameter]) -> Callable[..., object]:
    module, function = kernel.lower(verify_ir=False)
    pipeline = f"grad:{opt}:{','.join(map(str, activities))}"
    return opencl_entry(kernel, f"diffe_{kernel.definition.name}", params, module, function, pipeline,
                        _gradient_optimizer(kernel, function, activities, opt))


def opencl_entry(kernel: Kernel, name: str, params: list[Parameter], module: Module, function: Function,
                 pipeline: str, optimize: Callable[[Module], Function]) -> Callable[..., object]:
    """The derivative `optimize` makes of the lowered `module`, run by the OpenCL backend on checked
    arguments (device arrays accepted), through its memory and disk caches."""
    from isozyme.runtime.opencl_backend import compile_cached

    run = compile_cached(name, module, name, pipeline, optimize, kernel.codegen_options(), [p.type for p in params],
                         function.return_type, use_disk_cache=not _print_ir_request())

    def entry(*args: object) -> object:
        return run(*check_arguments(name, params, args, device_arrays=True, writable=run.writable))
    return entry


def _compile_llvm(kernel: Kernel, activities: tuple[ArgActivity, ...], opt: str,
                  params: list[Parameter]) -> Callable[..., object]:
    from isozyme.runtime.llvm_backend import EntrySignature, compile_native

    module, function = kernel.lower(verify_ir=False)
    name = f"diffe_{kernel.definition.name}"
    signature = EntrySignature(name, tuple(params), function.return_type)
    pipeline = f"grad:{opt}:{','.join(map(str, activities))}"
    return compile_native(name, module, signature, pipeline, _gradient_optimizer(kernel, function, activities, opt),
                          kernel.codegen_options(), use_disk_cache=not _print_ir_request(),
                          print_stages=frozenset(_print_ir_request()))


def _gradient_optimizer(kernel: Kernel, function: Function, activities: tuple[ArgActivity, ...],
                        opt: str) -> Callable[[Module], Function]:
    """What a backend runs on the lowered module on a cache miss: the gradient pipeline, `diffe_<f>`."""
    def optimize(module: Module) -> Function:
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
    return optimize


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


DERIVATIVE_BACKENDS = ("llvm", "interp", "opencl")
"""The backends derivatives compile for."""


def derivative_backend(kernel: Kernel, backend: str | None) -> str:
    """The backend a derivative of `kernel` runs on; ValueError for one that cannot run derivatives yet."""
    chosen = kernel.backend(backend)
    if chosen not in DERIVATIVE_BACKENDS:
        raise ValueError(f"derivatives run on the {' and '.join(DERIVATIVE_BACKENDS)} backends; the {chosen!r} "
                         f"backend runs primal kernels only in this version (kernel '{kernel.definition.name}')")
    return chosen


def _checked_signature(api: str, kernel: Kernel, args: Sequence[object]) -> tuple[list[Parameter], Type]:
    """The kernel's signature, after checking that it is a kernel and that `args` has one value per
    parameter (TypeError otherwise)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"{api} needs an @iz.kernel, got {type(kernel).__name__}")
    params, return_type = _signature(kernel)
    if len(args) != len(params):
        raise TypeError(f"kernel '{kernel.definition.name}' takes {len(params)} argument(s) "
                        f"({', '.join(p.name for p in params)}), got {len(args)}")
    return params, return_type


def autodiff(kernel: Kernel, *args: object, seed: float | None = None, opt: str = "post",
             backend: str | None = None) -> tuple[object, tuple[object, ...]]:
    """Reverse mode (module docstring): `(primal_return, adjoints of the Active arguments)`. `seed` is the
    cotangent of the returned float (default 1.0); a TypeError for a kernel that returns no float, where
    it would seed nothing (the cotangents of array outputs go in their shadows)."""
    params, return_type = _checked_signature("autodiff", kernel, args)
    differet = _checked_seed(kernel, return_type, seed)
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
    if differet is not None:
        call.append(differet)
    result = compiled_gradient(kernel, activities, opt, backend).entry(*call)
    return result, tuple(output[0].item() for output in outputs)


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


def grad(kernel: Kernel, argnums: int | Sequence[int] = 0, opt: str = "post",
         backend: str | None = None) -> Callable[..., object]:
    """The gradient function of a float-returning kernel (module docstring)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"grad needs an @iz.kernel, got {type(kernel).__name__}")
    params, return_type = _signature(kernel)
    if not return_type.is_float:
        raise TypeError(f"grad needs a kernel returning a float; '{kernel.definition.name}' returns "
                        f"{return_type}: use iz.autodiff with a seeded shadow")
    positions = argnum_positions(kernel, params, argnums)

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
        by_position = {p: (shadows[p] if p in shadows else next(active)) for p in sorted(positions)}
        values = tuple(by_position[p] for p in positions)
        return values if isinstance(argnums, Sequence) else values[0]
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


def gradient_code(kernel: Kernel, stage: str, activity: Sequence[str | ArgActivity], opt: str = "post") -> str:
    """The code a backend makes of `diffe_<f>` for `activity`: "llvm" the LLVM IR as emitted, "llvm-opt"
    after LLVM's O3, "opencl" the OpenCL C; built as `compiled_gradient` builds it (AD with `opt`, local
    arrays and tapes placed in arenas), without compiling or caching anything."""
    gradient = differentiate(kernel, parse_activity(kernel, activity), opt)
    if stage == "opencl":
        from isozyme.runtime.opencl_backend import opencl_source
        return (f"// {gradient.function.name}: the gradient of {kernel.definition.name} (opt={opt})\n"
                + opencl_source(gradient.module, gradient.function, kernel.codegen_options()))
    from isozyme.runtime.llvm_backend import llvm_ir
    return llvm_ir(gradient.module, gradient.function, kernel.codegen_options(), optimized=stage == "llvm-opt")


def show_cache(kernel: Kernel, activity: Sequence[str | ArgActivity], opt: str = "post") -> str:
    """Every value the reverse pass tapes: its name, source line, element type and number of elements
    (JAX's `print_saved_residuals`)."""
    gradient = differentiate(kernel, parse_activity(kernel, activity), opt)
    lines = [f"; cache of diffe_{kernel.definition.name} (opt={opt}): {len(gradient.tapes)} taped value(s)"]
    for tape in gradient.tapes:
        loc = tape.loc or tape.value.loc
        where = f"{loc.file}:{loc.line}" if loc is not None else "?"
        name = f"%{tape.value.name}" if tape.value.name else f"<{tape.value.op}>"  # type: ignore[attr-defined]
        lines.append(f"{name}  {tape.element}  x {tape.size_text}  at {where}")
    return "\n".join(lines)


# --- forward mode and Hessian-vector products --------------------------------------------------------------
#
# `fwddiff(kernel, *args, opt="post", backend=None)` is Enzyme's forward mode (DESIGN 1.3): each argument is
# `Const(v)` (or a plain value) or `Duplicated(value, tangent)`, for a float array (the tangent: an array of
# its dtype and shape) or a float scalar (the tangent: a number); `Active` is a TypeError. The kernel runs,
# and returns `(primal_return, tangent_of_return)` (both None without a return value); the tangent of what
# the kernel leaves in a Duplicated array replaces the tangent array's contents (a kernel that does not
# write the array leaves its tangent as it was). `fwddiffe_<f>` is compiled once per kernel, activity
# pattern, `opt`, backend and checked mode, like a gradient (llvm pipeline name `fwd:<opt>:<activities>`).
#
# `hvp(kernel, argnums=0, opt="post", backend=None)`: for a float-returning kernel, the function
# `(*args, v) -> H v`, H the Hessian of the return value with respect to the parameters `argnums` (float
# arrays and float scalars), by forward mode over the reverse-mode gradient (`fwddiffe_diffe_<f>`, llvm
# pipeline name `hvp:<opt>:<positions>`). `v` is the last positional argument: an array of the argument's
# shape, or a number, or for a tuple `argnums` a tuple of those; the result has the same form.

_IR_STAGES = frozenset({"ssa", "opt", "grad", "grad-opt", "fwd", "fwd-opt"})
"""ISOZYME_PRINT_IR words that name a stage, not a pass."""

Build = Callable[[Module, Function, PassOptions, Callable[[str, Module], None]], ForwardDerivative]
"""Runs an AD pipeline of `enzyme_ad/gradient.py` on a freshly lowered module and function."""


def _pass_options() -> PassOptions:
    print_ir = _print_ir_request()
    return PassOptions(print_after_all="after-all" in print_ir, print_after=print_ir - _IR_STAGES)


def _run_build(kernel: Kernel, build: Build, module: Module, function: Function, opt: str,
               on_stage: Callable[[str, Module], None] | None = None) -> ForwardDerivative:
    """`build` with the stages ISOZYME_PRINT_IR asks for printed ("fwd-opt" at the end), `on_stage` told."""
    printer = _stage_printer(kernel, opt)

    def stage(name: str, module: Module) -> None:
        printer(name, module)
        if on_stage is not None:
            on_stage(name, module)
    try:
        derivative = build(module, function, _pass_options(), stage)
    except DifferentiationError as error:
        raise error.with_traceback(None) from None
    printer("fwd-opt", module)
    return derivative


def _compile_derivative(kernel: Kernel, name: str, params: list[Parameter], pipeline: str, opt: str,
                        backend: str, build: Build) -> Callable[..., object]:
    """The entry of the derivative `build` makes, for `backend` (through the llvm caches for "llvm")."""
    if backend == "interp":
        module, function = kernel.lower()
        derivative = _run_build(kernel, build, module, function, opt)
        writable = writable_parameters(derivative.module, derivative.function)
        run = race_detector.interpreted(derivative.module, derivative.function)

        def entry(*args: object) -> object:
            return run(check_arguments(name, params, args, writable=writable))
        return entry
    module, function = kernel.lower(verify_ir=False)

    def optimize(module: Module) -> Function:  # on a cache miss only
        verify(module)
        return _run_build(kernel, build, module, function, opt).function
    if backend == "opencl":
        return opencl_entry(kernel, name, params, module, function, pipeline, optimize)
    from isozyme.runtime.llvm_backend import EntrySignature, compile_native

    signature = EntrySignature(name, tuple(params), function.return_type)
    print_ir = _print_ir_request()
    return compile_native(name, module, signature, pipeline, optimize, kernel.codegen_options(),
                          use_disk_cache=not print_ir, print_stages=frozenset(print_ir))


def _cached_derivative(kernel: Kernel, key: tuple, make: Callable[[], CompiledGradient]) -> CompiledGradient:
    cache = kernel.__dict__.setdefault("_forward_derivatives", {})
    if key not in cache:
        cache[key] = make()
    return cache[key]


def _forward_build(activities: tuple[ArgActivity, ...], opt: str) -> Build:
    return lambda module, function, options, stage: forward_derivative(module, function, activities, opt,
                                                                       options, stage)


def compiled_forward(kernel: Kernel, activities: tuple[ArgActivity, ...], opt: str,
                     backend: str | None) -> CompiledGradient:
    """`fwddiffe_<f>` for these activities, compiled (cached on the kernel)."""
    chosen = derivative_backend(kernel, backend)
    check_opt(opt)
    params, return_type = _signature(kernel)
    compile_log.record_derivative(kernel, "forward", activities, opt, chosen)

    def make() -> CompiledGradient:
        signature = forward_parameters([(p.name, p.type) for p in params], activities, return_type)
        call_params = [Parameter(p.name, p.type) for p in signature]
        name = f"fwddiffe_{kernel.definition.name}"
        pipeline = f"fwd:{opt}:{','.join(map(str, activities))}"
        entry = _compile_derivative(kernel, name, call_params, pipeline, opt, chosen, _forward_build(activities, opt))
        return CompiledGradient(name, call_params, entry)
    return _cached_derivative(kernel, ("fwd", activities, opt, chosen, kernel.codegen_options(),
                                       race_detector.checks_races(chosen)), make)


def compiled_hvp(kernel: Kernel, positions: tuple[int, ...], opt: str, backend: str | None) -> CompiledGradient:
    """`fwddiffe_diffe_<f>` for the parameters at `positions`, compiled (cached on the kernel)."""
    chosen = derivative_backend(kernel, backend)
    check_opt(opt)
    params, return_type = _signature(kernel)
    compile_log.record_derivative(kernel, "hvp", _hvp_gradient_activity(params, positions), opt, chosen)

    def build(module: Module, function: Function, options: PassOptions,
              stage: Callable[[str, Module], None]) -> ForwardDerivative:
        return hessian_vector_product(module, function, positions, opt, options, stage)

    def make() -> CompiledGradient:
        signature = hvp_parameters([(p.name, p.type) for p in params], return_type, positions)
        call_params = [Parameter(p.name, p.type) for p in signature]
        name = f"fwddiffe_diffe_{kernel.definition.name}"
        pipeline = f"hvp:{opt}:{','.join(map(str, positions))}"
        return CompiledGradient(name, call_params, _compile_derivative(kernel, name, call_params, pipeline, opt,
                                                                       chosen, build))
    return _cached_derivative(kernel, ("hvp", positions, opt, chosen, kernel.codegen_options(),
                                       race_detector.checks_races(chosen)), make)


def _hvp_gradient_activity(params: list[Parameter], positions: tuple[int, ...]) -> tuple[ArgActivity, ...]:
    """The activity of the gradient inside an HVP (what `show_ir(stage="grad")` takes to show it)."""
    def activity(position: int, param: Parameter) -> ArgActivity:
        if position not in positions:
            return ArgActivity.CONST
        return ArgActivity.DUP if isinstance(param.type, ArrayType) else ArgActivity.ACTIVE
    return tuple(activity(position, param) for position, param in enumerate(params))


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
    """Forward mode (the comment above): `(primal_return, tangent_of_return)`."""
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
    """The Hessian-vector product function of a float-returning kernel (the comment above)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"hvp needs an @iz.kernel, got {type(kernel).__name__}")
    params, return_type = _signature(kernel)
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


def forward_ir(kernel: Kernel, stage: str, activity: Sequence[str | ArgActivity], opt: str = "post") -> str:
    """The IR of `fwddiffe_<f>`: "fwd" right after AD, "fwd-opt" after the optimization that follows."""
    activities = parse_activity(kernel, activity)
    captured: dict[str, str] = {}
    module, function = kernel.lower()
    derivative = _run_build(kernel, _forward_build(activities, opt), module, function, opt,
                            on_stage=lambda name, module: captured.setdefault(name, print_module(module)))
    return captured["fwd"] if stage == "fwd" else print_module(derivative.module)


# --- custom derivatives --------------------------------------------------------------------------------------


def register_vjp(kernel: Kernel, rule: Kernel) -> None:
    """`kernel.defvjp(rule)`: check that `rule` has the signature of `diffe_<kernel>` with every float
    parameter differentiated (enzyme_ad/custom.py) and register it. Gradients already compiled for kernels
    calling `kernel` in this process keep the derivative they had: register rules before differentiating."""
    if not isinstance(kernel, Kernel) or not isinstance(rule, Kernel):
        raise TypeError(f"defvjp registers an @iz.kernel as the reverse rule of an @iz.kernel, got "
                        f"{type(rule).__name__}")
    params, return_type = _signature(kernel)
    expected = gradient_parameters([(p.name, p.type) for p in params],
                                   differentiated_activities([p.type for p in params]), return_type)
    got, got_return = _signature(rule)
    where = f"the reverse rule {rule.definition.name} of kernel {kernel.definition.name}"
    wanted = ", ".join(f"{p.name}: {p.type}" for p in expected)
    if [p.type for p in got] != [p.type for p in expected]:
        raise TypeError(f"{where} must take ({wanted}), got ({', '.join(f'{p.name}: {p.type}' for p in got)})")
    if not got_return.is_void and got_return != return_type:
        raise TypeError(f"{where} must return nothing or {return_type}, got {got_return}")
    kernel.definition.options["custom_vjp"] = rule
    for cache in ("_gradients", "_forward_derivatives"):
        kernel.__dict__.pop(cache, None)


def register_jvp(kernel: Kernel, rule: Kernel) -> None:
    """`kernel.defjvp(rule)`: check that `rule` has the signature of `fwddiffe_<kernel>` with every float
    parameter Duplicated (enzyme_ad/custom.py) and register it, as `register_vjp` does."""
    if not isinstance(kernel, Kernel) or not isinstance(rule, Kernel):
        raise TypeError(f"defjvp registers an @iz.kernel as the forward rule of an @iz.kernel, got "
                        f"{type(rule).__name__}")
    params, return_type = _signature(kernel)
    activities = tuple(ArgActivity.CONST if a is ArgActivity.CONST else ArgActivity.DUP
                       for a in differentiated_activities([p.type for p in params]))
    expected = forward_parameters([(p.name, p.type) for p in params], activities, return_type)
    got, got_return = _signature(rule)
    where = f"the forward rule {rule.definition.name} of kernel {kernel.definition.name}"
    wanted = ", ".join(f"{p.name}: {p.type}" for p in expected)
    if [p.type for p in got] != [p.type for p in expected]:
        raise TypeError(f"{where} must take ({wanted}), got ({', '.join(f'{p.name}: {p.type}' for p in got)})")
    if got_return != return_type:
        raise TypeError(f"{where} must return {return_type} (the kernel's value), got {got_return}")
    kernel.definition.options["custom_jvp"] = rule
    for cache in ("_gradients", "_forward_derivatives"):
        kernel.__dict__.pop(cache, None)
