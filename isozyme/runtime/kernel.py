"""The kernel object: `@iz.kernel` wraps a Python function; calling it compiles once per backend and
pipeline, checks the arguments and runs.

Compilation is lazy (DESIGN 1.3): the first call, `compile()` or `show_ir()` lowers the kernel and its
callees to SSA (a CompileError is raised then, at the latest), runs the optimization pipeline (`O2` unless
`compile(opt=...)` says otherwise) and hands the module to the backend. Backends: `"llvm"` (the default: LLVM
machine code for the host CPU, cached in memory and on disk, `runtime/llvm_backend.py`), `"opencl"` (OpenCL C:
`prange` loops as NDRange kernels, `runtime/opencl_backend.py`) and `"interp"`, the reference
interpreter (bounds-checked, slow, exact: the semantic oracle). `ISOZYME_BACKEND` overrides the default,
a decorator's `backend=` overrides that; both are read at the kernel's first call, which binds the kernel
to its compiled entry so that later calls cost one Python call more than the entry itself.
With the `llvm` backend, a kernel compiled before from the same sources and the same values of the names
they read outside the kernels is found by its source key and loaded without lowering
(`runtime/source_key.py`): a warm start costs a few milliseconds and never loads LLVM.

Checked mode (`@iz.kernel(boundscheck=True)`, or `ISOZYME_BOUNDSCHECK=1` for kernels that do not say)
makes compiled code check every array index and raise IndexError with the source location, the index and
the shape, on `llvm` and `opencl` (`interp` always checks). The kernel called from Python (or
differentiated) in checked mode flags every access of its module `checked` (`flags.CHECKED`: its callees',
inlined or not, and AD's shadow accesses too), and a kernel that says `boundscheck=True` flags its own, so
they stay checked inside an unchecked caller. Unchecked, an out-of-bounds index is undefined behaviour (on
a CPU a far one kills the process with a segmentation fault).

`ISOZYME_PRINT_IR` prints IR at compile time to stderr: `ssa` (as lowered), `opt` (after the pipeline),
`after-all` (after every pass), a pass name, `grad` and `grad-opt` (a gradient `diffe_f` right after AD and
optimized), `fwd` and `fwd-opt` (the same for a forward-mode `fwddiffe_f`), `llvm` or `llvm-opt` (the LLVM
IR before and after LLVM's O3); several separated by commas. While it is set, the disk cache is not read (a
cache hit would skip the stages to print).

Custom derivative rules (`defvjp`, `defjvp`) are checked against the signature of the derivative they stand
for and registered here. This module imports nothing from the runtime's derivatives or inspection
(`compiled_derivatives.py`, `autodiff.py`, `inspection.py`, which build on it): `iz.show_ir` is in
`inspection.py`.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from isozyme.codegen.abi import CodegenOptions, fastmath_flags
from isozyme.enzyme_ad.activity import ArgActivity
from isozyme.enzyme_ad.custom import differentiated_activities
from isozyme.enzyme_ad.forward import forward_parameters
from isozyme.enzyme_ad.reverse import gradient_parameters
from isozyme.frontend.compiler import lower_kernel
from isozyme.frontend.definitions import KernelDefinition, StaticRead
from isozyme.frontend.diagnostics import CompileError
from isozyme.optimize.loop_fusion import fusion_enabled
from isozyme.optimize.pass_manager import PassOptions, run_passes
from isozyme.runtime import compile_log, race_detector
from isozyme.runtime.arguments import Parameter, check_arguments, writable_parameters
from isozyme.ssa.flags import mark_checked
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.printer import print_module
from isozyme.ssa.types import Type
from isozyme.ssa.verifier import verify

BACKENDS = ("llvm", "interp", "opencl")
"""Backends that can run kernels (`runtime/llvm_backend.py`, the interpreter, `runtime/opencl_backend.py`)."""
DEFAULT_BACKEND = "llvm"
DEFAULT_PIPELINE = "O2"
"""The pipeline primal kernels compile with when none is given."""


@dataclass
class CompiledKernel:
    """A kernel compiled for one backend and pipeline: call it like the kernel."""

    name: str
    backend: str
    params: list[Parameter]
    entry: Callable[..., object]
    """Checks the arguments and runs the kernel."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.entry(*args, **kwargs)


class Kernel:
    """A compiled-on-demand kernel, made by `@iz.kernel`; `py_func` is the undecorated function.

    Calling it compiles it at the first call (lowering to SSA, where a CompileError is raised at the latest,
    the `O2` pipeline, the backend), checks the arguments and runs. A plain call runs on the decorator's
    `backend=`, else `ISOZYME_BACKEND`, else "llvm", chosen at the first call; `compile(backend=...)` gives
    another. With "llvm", a kernel compiled before from the same sources is loaded from the disk cache without
    lowering. `ISOZYME_PRINT_IR` prints IR at compile time to stderr (docs/environment.md)."""

    def __init__(self, py_func: Callable, backend: str | None = None, boundscheck: bool | None = None,
                 inline: bool = True, fastmath: object = ()) -> None:
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
        self.py_func = py_func
        self.fastmath = fastmath_flags(fastmath)
        """The LLVM fast-math flags of the code compiled for this kernel (`kernel`'s `fastmath=`)."""
        self.definition = KernelDefinition(py_func, {"backend": backend, "boundscheck": boundscheck,
                                                     "inline": inline})
        self.__isozyme_definition__ = self.definition
        self._compiled: dict[tuple[str, str, bool, bool], CompiledKernel] = {}
        """By backend, pipeline, checked mode and race checking (`runtime/race_detector.py`)."""
        self._call: Callable[..., object] = self._first_call
        self._signature: tuple[list[Parameter], Type] | None = None
        """The parameters and return type, once `signature()` has lowered the kernel."""
        functools.update_wrapper(self, py_func)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._call(*args, **kwargs)

    def _first_call(self, *args: object, **kwargs: object) -> object:
        """Compile for the default backend, then let every later call go straight to the compiled entry."""
        self._call = self.compile().entry
        return self._call(*args, **kwargs)

    def record_next_call(self) -> None:
        """Make the kernel's next call record it in the compile log (the backend and pipeline of the entry it is
        bound to) and bind the entry back, so that later calls cost what they did (`compile_log.start()`)."""
        entry = self._call
        bound = next((key for key, compiled in self._compiled.items() if compiled.entry is entry), None)
        if bound is None:  # not bound yet (its first call compiles, and records), or already rebound
            return
        backend, pipeline = bound[0], bound[1]

        def first_call_in_log(*args: object, **kwargs: object) -> object:
            self._call = entry
            compile_log.record_primal(self, backend, pipeline)
            return entry(*args, **kwargs)
        self._call = first_call_in_log

    def __repr__(self) -> str:
        return f"<isozyme kernel {self.definition.name}>"

    def backend(self, backend: str | None = None) -> str:
        chosen = backend or self.definition.options.get("backend") or os.environ.get("ISOZYME_BACKEND") \
            or DEFAULT_BACKEND
        if chosen not in BACKENDS:
            raise ValueError(f"backend {chosen!r} is not available (available: {', '.join(BACKENDS)})")
        return chosen  # type: ignore[return-value]

    def boundscheck(self) -> bool:
        """Checked mode: the decorator's `boundscheck=`, else `ISOZYME_BOUNDSCHECK=1`."""
        chosen = self.definition.options.get("boundscheck")
        if chosen is None:
            return os.environ.get("ISOZYME_BOUNDSCHECK", "").lower() in ("1", "true", "yes", "on")
        return bool(chosen)

    def defvjp(self, rule: Kernel) -> Kernel:
        """Register the kernel `rule` as this kernel's reverse-mode derivative (enzyme_ad/custom.py says what
        it takes and must do); returns `rule`, so it works as a decorator above `@iz.kernel`."""
        register_vjp(self, rule)
        return rule

    def defjvp(self, rule: Kernel) -> Kernel:
        """Register the kernel `rule` as this kernel's forward-mode derivative (enzyme_ad/custom.py says what
        it takes and must do); returns `rule`, so it works as a decorator above `@iz.kernel`."""
        register_jvp(self, rule)
        return rule

    def signature(self) -> tuple[list[Parameter], Type]:
        """The kernel's parameters and return type (lowered once per kernel)."""
        if self._signature is None:
            _, function = self.lower()
            self._signature = ([Parameter(arg.name or "", arg.type) for arg in function.args], function.return_type)
        return self._signature

    def lower(self, verify_ir: bool = True, static_reads: list[StaticRead] | None = None) -> tuple[Module, Function]:
        """A fresh SSA module of this kernel and its callees, as lowered (unoptimized); verified unless
        the caller verifies it later (the llvm backend does, only when it compiles). The names read outside
        the kernels are appended to `static_reads` when it is given (`source_key.py`)."""
        try:
            module, function = lower_kernel(self.definition, static_reads)
        except CompileError as error:
            raise error.with_traceback(None) from None  # the user's frames only, not the compiler's
        if self.boundscheck():
            for callee in module.functions.values():
                mark_checked(callee)
        if verify_ir:
            verify(module)
        if "ssa" in print_ir_request():
            print(f"; *** SSA of kernel {self.definition.name} ***\n{print_module(module)}", file=sys.stderr)
        return module, function

    def run_pipeline(self, module: Module, pipeline: str) -> None:
        """Optimize `module` in place with `pipeline`, printing what ISOZYME_PRINT_IR asks for."""
        print_ir = print_ir_request()
        options = PassOptions(print_after_all="after-all" in print_ir, print_after=print_ir - {"ssa", "opt"})
        run_passes(module, [pipeline], options)
        if "opt" in print_ir:
            print(f"; *** {pipeline} IR of kernel {self.definition.name} ***\n{print_module(module)}", file=sys.stderr)

    def optimized(self, pipeline: str) -> tuple[Module, Function]:
        module, function = self.lower()
        self.run_pipeline(module, pipeline)
        return module, function

    def codegen_options(self) -> CodegenOptions:
        return CodegenOptions(boundscheck=self.boundscheck(), fastmath=self.fastmath,
                              loop_fusion=fusion_enabled())

    def compile(self, backend: str | None = None, opt: str = DEFAULT_PIPELINE) -> CompiledKernel:
        """The kernel compiled for `backend` with pipeline `opt` (cached)."""
        chosen = self.backend(backend)
        key = (chosen, opt, self.boundscheck(), race_detector.checks_races(chosen))
        compile_log.record_primal(self, key[0], opt)
        if key not in self._compiled:
            self._compiled[key] = _BACKEND_COMPILERS[key[0]](self, opt)
        return self._compiled[key]


def _compile_interp(kernel: Kernel, pipeline: str) -> CompiledKernel:
    module, function = kernel.optimized(pipeline)
    name = kernel.definition.name
    params = [Parameter(arg.name, arg.type) for arg in function.args]  # type: ignore[arg-type]
    writable = writable_parameters(module, function)
    run = race_detector.interpreted(module, function)

    def entry(*args: object, **kwargs: object) -> object:
        return run(check_arguments(name, params, args, kwargs, writable=writable))
    return CompiledKernel(name, "interp", params, entry)


def _compile_llvm(kernel: Kernel, pipeline: str) -> CompiledKernel:
    """Through the kernel's source key when it finds compiled code (no lowering), else lowered and
    compiled (or loaded by the module's key), and the source key remembered."""
    from isozyme.runtime import disk_cache, source_key
    from isozyme.runtime.llvm_backend import EntrySignature, cache_key, compile_native, load_compiled

    name, options, print_ir = kernel.definition.name, kernel.codegen_options(), print_ir_request()
    use_disk_cache = not print_ir and disk_cache.cache_directory() is not None
    key = source_key.source_key(kernel.definition, pipeline, options) if use_disk_cache else None
    known = source_key.recall(key, kernel.definition) if key else None
    if known is not None:
        entry = load_compiled(known.key, name, EntrySignature(known.function, known.params, known.return_type))
        if entry is not None:
            return CompiledKernel(name, "llvm", list(known.params), entry)
    reads: list[StaticRead] = []
    module, function = kernel.lower(verify_ir=False, static_reads=reads)
    params = [Parameter(arg.name, arg.type) for arg in function.args]  # type: ignore[arg-type]
    signature = EntrySignature.of(function)
    compiled_key = cache_key(module, signature, pipeline, options)

    def optimize(module: Module) -> Function:  # on a cache miss only
        verify(module)
        kernel.run_pipeline(module, pipeline)
        return function
    entry = compile_native(name, module, signature, pipeline, optimize, options, use_disk_cache=not print_ir,
                           print_stages=frozenset(print_ir), key=compiled_key)
    if key:
        source_key.remember(key, kernel.definition, reads, source_key.CompiledSignature(
            compiled_key, signature.function, signature.params, signature.return_type))
    return CompiledKernel(name, "llvm", params, entry)


def _compile_opencl(kernel: Kernel, pipeline: str) -> CompiledKernel:
    """OpenCL: a serial kernel and an NDRange kernel per parallel loop (`runtime/opencl_backend.py`); numpy
    arrays are copied in and out, device arrays (`iz.to_device`) are used in place."""
    from isozyme.runtime.opencl_backend import compile_cached

    module, function = kernel.lower()
    name = kernel.definition.name
    params = [Parameter(arg.name, arg.type) for arg in function.args]  # type: ignore[arg-type]

    def optimize(module: Module) -> Function:  # on a cache miss only
        kernel.run_pipeline(module, pipeline)
        return function
    run = compile_cached(name, module, function.name, pipeline, optimize, kernel.codegen_options(),
                         [p.type for p in params], function.return_type, use_disk_cache=not print_ir_request())

    def entry(*args: object, **kwargs: object) -> object:
        return run(*check_arguments(name, params, args, kwargs, device_arrays=True, writable=run.writable))
    return CompiledKernel(name, "opencl", params, entry)


_BACKEND_COMPILERS: dict[str, Callable[[Kernel, str], CompiledKernel]] = {
    "interp": _compile_interp,
    "llvm": _compile_llvm,
    "opencl": _compile_opencl,
}


def print_ir_request() -> set[str]:
    """The words of `ISOZYME_PRINT_IR` (module docstring): the stages and passes whose IR to print."""
    return {part.strip() for part in os.environ.get("ISOZYME_PRINT_IR", "").split(",") if part.strip()}


def kernel(function: Callable | None = None, *, backend: str | None = None, boundscheck: bool | None = None,
           inline: bool = True, fastmath: object = ()) -> Kernel | Callable[[Callable], Kernel]:
    """Decorate a Python function as a kernel: `@iz.kernel` or `@iz.kernel(backend="interp")`.
    `inline=False`: calls of this kernel are never inlined, by the optimizer or by reverse mode (which
    differentiates them in split mode, enzyme_ad/custom.py). `boundscheck=True`: checked mode (every array
    index checked, an IndexError naming the source line, the index and the shape, on `llvm` and `opencl`;
    `interp` always checks; the default is `ISOZYME_BOUNDSCHECK`, else unchecked), for this kernel's own
    accesses wherever it is called from and for all the code it calls.
    `fastmath=("reassoc",)` (off by default: IEEE-strict): LLVM fast-math flags on the float arithmetic of
    all the code compiled for this kernel, its primal and derivatives and the kernels they call (names in
    `codegen/abi.FASTMATH_FLAGS`; `True` is "fast"). "reassoc" lets LLVM reorder sums, so that reductions
    vectorize: results, derivatives included, change in the last bits. "afn" lets loops that call `exp`,
    `log`, `erf`, ... vectorize, through glibc's vector math functions (4 ulp; codegen/llvm_vector_math.py).
    "ftz" runs each call with subnormal floats flushed to zero (x86-64; `codegen/abi.FP_MODE_FLAGS`), as
    JAX runs on the CPU: on CPUs that handle subnormals in microcode it removes a slowdown of up to 100x
    per operation. The `llvm` backend only; isozyme's own passes stay exact."""
    if function is not None:
        return Kernel(function, backend, boundscheck, inline, fastmath)
    return lambda f: Kernel(f, backend, boundscheck, inline, fastmath)


# --- custom derivatives --------------------------------------------------------------------------------------


def register_vjp(kernel: Kernel, rule: Kernel) -> None:
    """`kernel.defvjp(rule)`: check that `rule` has the signature of `diffe_<kernel>` with every float
    parameter differentiated (enzyme_ad/custom.py) and register it. Gradients already compiled for kernels
    calling `kernel` in this process keep the derivative they had: register rules before differentiating."""
    if not isinstance(kernel, Kernel) or not isinstance(rule, Kernel):
        raise TypeError(f"defvjp registers an @iz.kernel as the reverse rule of an @iz.kernel, got "
                        f"{type(rule).__name__}")
    params, return_type = kernel.signature()
    expected = gradient_parameters([(p.name, p.type) for p in params],
                                   differentiated_activities([p.type for p in params]), return_type)
    got, got_return = rule.signature()
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
    params, return_type = kernel.signature()
    activities = tuple(ArgActivity.CONST if a is ArgActivity.CONST else ArgActivity.DUP
                       for a in differentiated_activities([p.type for p in params]))
    expected = forward_parameters([(p.name, p.type) for p in params], activities, return_type)
    got, got_return = rule.signature()
    where = f"the forward rule {rule.definition.name} of kernel {kernel.definition.name}"
    wanted = ", ".join(f"{p.name}: {p.type}" for p in expected)
    if [p.type for p in got] != [p.type for p in expected]:
        raise TypeError(f"{where} must take ({wanted}), got ({', '.join(f'{p.name}: {p.type}' for p in got)})")
    if got_return != return_type:
        raise TypeError(f"{where} must return {return_type} (the kernel's value), got {got_return}")
    kernel.definition.options["custom_jvp"] = rule
    for cache in ("_gradients", "_forward_derivatives"):
        kernel.__dict__.pop(cache, None)
