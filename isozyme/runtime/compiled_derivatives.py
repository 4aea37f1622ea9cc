"""Derivatives compiled for a backend: `diffe_<f>` (reverse mode), `fwddiffe_<f>` (forward mode) and
`fwddiffe_diffe_<f>` (a Hessian-vector product) of a kernel, for the user's API (`autodiff.py`) to call and
the inspection helpers (`inspection.py`, `memory_report.py`) to show.

A derivative is compiled once per kernel, activity pattern (or HVP positions), `opt`, backend and checked
mode, through a pipeline of `enzyme_ad/gradient.py`, and cached on the kernel (`_gradients`,
`_forward_derivatives`; registering a custom rule empties both). On the `llvm` backend its object code goes
through the same memory and disk caches as a primal kernel, on `opencl` through the OpenCL backend's: the
pipeline name (`grad:<opt>:<activities>`, `fwd:<opt>:<activities>`, `hvp:<opt>:<positions>`) keeps the keys
of different derivatives apart. Every lookup is recorded in the compile log (`compile_log.py`). The entry
of a compiled derivative checks its arguments as a kernel's does, shadows included; what the user passes is
checked before that, in `autodiff.py`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from isozyme.enzyme_ad.activity import ArgActivity
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
from isozyme.runtime.kernel import Kernel, print_ir_request
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.printer import print_module
from isozyme.ssa.types import ArrayType
from isozyme.ssa.verifier import verify


@dataclass
class CompiledGradient:
    """`diffe_<f>` compiled for one backend: call it with the arguments `gradient_parameters` lists."""

    name: str
    params: list[Parameter]
    entry: Callable[..., object]
    backend: str
    """The backend it was compiled for (what the compile log records per call)."""


def _gradient_params(kernel: Kernel, activities: tuple[ArgActivity, ...]) -> list[Parameter]:
    params, return_type = kernel.signature()
    return [Parameter(p.name, p.type) for p in
            gradient_parameters([(p.name, p.type) for p in params], activities, return_type)]


def _stage_printer(kernel: Kernel, opt: str) -> Callable[[str, Module], None]:
    """Prints a stage ("grad", "grad-opt", "fwd", ...) to stderr when ISOZYME_PRINT_IR asks for it."""
    def stage(name: str, module: Module) -> None:
        if name in print_ir_request():
            print(f"; *** {name} of kernel {kernel.definition.name} ({opt}) ***\n{print_module(module)}",
                  file=sys.stderr)
    return stage


def _stage_callback(kernel: Kernel, opt: str, on_stage: Callable[[str, Module], None] | None
                    ) -> Callable[[str, Module], None]:
    """The stage callback of an AD pipeline: print what ISOZYME_PRINT_IR asks for, then tell `on_stage`."""
    printer = _stage_printer(kernel, opt)

    def stage(name: str, module: Module) -> None:
        printer(name, module)
        if on_stage is not None:
            on_stage(name, module)
    return stage


_IR_STAGES = frozenset({"ssa", "opt", "grad", "grad-opt", "fwd", "fwd-opt"})
"""ISOZYME_PRINT_IR words that name a stage, not a pass."""


def _pass_options() -> PassOptions:
    print_ir = print_ir_request()
    return PassOptions(print_after_all="after-all" in print_ir, print_after=print_ir - _IR_STAGES)


def differentiate(kernel: Kernel, activities: tuple[ArgActivity, ...], opt: str,
                  on_stage: Callable[[str, Module], None] | None = None) -> Gradient:
    """A fresh `diffe_<f>` of `kernel` (not cached: `show_ir` and `show_cache` use it)."""
    module, function = kernel.lower()
    try:
        gradient = reverse_gradient(module, function, activities, opt, _pass_options(),
                                    _stage_callback(kernel, opt, on_stage))
    except DifferentiationError as error:
        raise error.with_traceback(None) from None
    _stage_printer(kernel, opt)("grad-opt", module)
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
                                      compile_for(kernel, activities, opt, params), chosen)
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
                         function.return_type, use_disk_cache=not print_ir_request())

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
                          kernel.codegen_options(), use_disk_cache=not print_ir_request(),
                          print_stages=frozenset(print_ir_request()))


def _gradient_optimizer(kernel: Kernel, function: Function, activities: tuple[ArgActivity, ...],
                        opt: str) -> Callable[[Module], Function]:
    """What a backend runs on the lowered module on a cache miss: the gradient pipeline, `diffe_<f>`."""
    def optimize(module: Module) -> Function:
        verify(module)
        try:
            gradient = reverse_gradient(module, function, activities, opt, _pass_options(), _stage_printer(kernel, opt))
        except DifferentiationError as error:
            raise error.with_traceback(None) from None
        _stage_printer(kernel, opt)("grad-opt", module)
        return gradient.function
    return optimize


DERIVATIVE_BACKENDS = ("llvm", "interp", "opencl")
"""The backends derivatives compile for."""


def derivative_backend(kernel: Kernel, backend: str | None) -> str:
    """The backend a derivative of `kernel` runs on; ValueError for one that cannot run derivatives yet."""
    chosen = kernel.backend(backend)
    if chosen not in DERIVATIVE_BACKENDS:
        raise ValueError(f"derivatives run on the {' and '.join(DERIVATIVE_BACKENDS)} backends; the {chosen!r} "
                         f"backend runs primal kernels only in this version (kernel '{kernel.definition.name}')")
    return chosen


def parse_activity(kernel: Kernel, activity: Sequence[str | ArgActivity]) -> tuple[ArgActivity, ...]:
    params, _ = kernel.signature()
    if len(activity) != len(params):
        raise ValueError(f"activity needs one entry per parameter of '{kernel.definition.name}' "
                         f"({', '.join(p.name for p in params)}), got {len(activity)}")
    try:
        return tuple(ArgActivity(a) if isinstance(a, str) else a for a in activity)
    except ValueError:
        raise ValueError(f"activities are 'const', 'dup' or 'active', got {list(activity)}") from None


# --- forward mode and Hessian-vector products --------------------------------------------------------------


Build = Callable[[Module, Function, PassOptions, Callable[[str, Module], None]], ForwardDerivative]
"""Runs an AD pipeline of `enzyme_ad/gradient.py` on a freshly lowered module and function."""


def run_build(kernel: Kernel, build: Build, module: Module, function: Function, opt: str,
               on_stage: Callable[[str, Module], None] | None = None) -> ForwardDerivative:
    """`build` with the stages ISOZYME_PRINT_IR asks for printed ("fwd-opt" at the end), `on_stage` told."""
    try:
        derivative = build(module, function, _pass_options(), _stage_callback(kernel, opt, on_stage))
    except DifferentiationError as error:
        raise error.with_traceback(None) from None
    _stage_printer(kernel, opt)("fwd-opt", module)
    return derivative


def _compile_derivative(kernel: Kernel, name: str, params: list[Parameter], pipeline: str, opt: str,
                        backend: str, build: Build) -> Callable[..., object]:
    """The entry of the derivative `build` makes, for `backend` (through the llvm caches for "llvm")."""
    if backend == "interp":
        module, function = kernel.lower()
        derivative = run_build(kernel, build, module, function, opt)
        writable = writable_parameters(derivative.module, derivative.function)
        run = race_detector.interpreted(derivative.module, derivative.function)

        def entry(*args: object) -> object:
            return run(check_arguments(name, params, args, writable=writable))
        return entry
    module, function = kernel.lower(verify_ir=False)

    def optimize(module: Module) -> Function:  # on a cache miss only
        verify(module)
        return run_build(kernel, build, module, function, opt).function
    if backend == "opencl":
        return opencl_entry(kernel, name, params, module, function, pipeline, optimize)
    from isozyme.runtime.llvm_backend import EntrySignature, compile_native

    signature = EntrySignature(name, tuple(params), function.return_type)
    print_ir = print_ir_request()
    return compile_native(name, module, signature, pipeline, optimize, kernel.codegen_options(),
                          use_disk_cache=not print_ir, print_stages=frozenset(print_ir))


def _cached_derivative(kernel: Kernel, key: tuple, make: Callable[[], CompiledGradient]) -> CompiledGradient:
    cache = kernel.__dict__.setdefault("_forward_derivatives", {})
    if key not in cache:
        cache[key] = make()
    return cache[key]


def forward_build(activities: tuple[ArgActivity, ...], opt: str) -> Build:
    return lambda module, function, options, stage: forward_derivative(module, function, activities, opt,
                                                                       options, stage)


def compiled_forward(kernel: Kernel, activities: tuple[ArgActivity, ...], opt: str,
                     backend: str | None) -> CompiledGradient:
    """`fwddiffe_<f>` for these activities, compiled (cached on the kernel)."""
    chosen = derivative_backend(kernel, backend)
    check_opt(opt)
    params, return_type = kernel.signature()
    compile_log.record_derivative(kernel, "forward", activities, opt, chosen)

    def make() -> CompiledGradient:
        signature = forward_parameters([(p.name, p.type) for p in params], activities, return_type)
        call_params = [Parameter(p.name, p.type) for p in signature]
        name = f"fwddiffe_{kernel.definition.name}"
        pipeline = f"fwd:{opt}:{','.join(map(str, activities))}"
        entry = _compile_derivative(kernel, name, call_params, pipeline, opt, chosen, forward_build(activities, opt))
        return CompiledGradient(name, call_params, entry, chosen)
    return _cached_derivative(kernel, ("fwd", activities, opt, chosen, kernel.codegen_options(),
                                       race_detector.checks_races(chosen)), make)


def compiled_hvp(kernel: Kernel, positions: tuple[int, ...], opt: str, backend: str | None) -> CompiledGradient:
    """`fwddiffe_diffe_<f>` for the parameters at `positions`, compiled (cached on the kernel)."""
    chosen = derivative_backend(kernel, backend)
    check_opt(opt)
    params, return_type = kernel.signature()
    compile_log.record_derivative(kernel, "hvp", _hvp_gradient_activity(params, positions), opt, chosen)

    def build(module: Module, function: Function, options: PassOptions,
              stage: Callable[[str, Module], None]) -> ForwardDerivative:
        return hessian_vector_product(module, function, positions, opt, options, stage)

    def make() -> CompiledGradient:
        signature = hvp_parameters([(p.name, p.type) for p in params], return_type, positions)
        call_params = [Parameter(p.name, p.type) for p in signature]
        name = f"fwddiffe_diffe_{kernel.definition.name}"
        pipeline = f"hvp:{opt}:{','.join(map(str, positions))}"
        entry = _compile_derivative(kernel, name, call_params, pipeline, opt, chosen, build)
        return CompiledGradient(name, call_params, entry, chosen)
    return _cached_derivative(kernel, ("hvp", positions, opt, chosen, kernel.codegen_options(),
                                       race_detector.checks_races(chosen)), make)


def _hvp_gradient_activity(params: list[Parameter], positions: tuple[int, ...]) -> tuple[ArgActivity, ...]:
    """The activity of the gradient inside an HVP (what `show_ir(stage="grad")` takes to show it)."""
    def activity(position: int, param: Parameter) -> ArgActivity:
        if position not in positions:
            return ArgActivity.CONST
        return ArgActivity.DUP if isinstance(param.type, ArrayType) else ArgActivity.ACTIVE
    return tuple(activity(position, param) for position, param in enumerate(params))
