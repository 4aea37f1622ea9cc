"""The kernel object: `@iz.kernel` wraps a Python function; calling it compiles once per backend and
pipeline, checks the arguments and runs.

Compilation is lazy (DESIGN 1.3): the first call, `compile()` or `show_ir()` lowers the kernel and its
callees to SSA (a CompileError is raised then, at the latest), runs the optimization pipeline (`O2` unless
`compile(opt=...)` says otherwise) and hands the module to the backend. Backends: `"interp"`, the
reference interpreter (bounds-checked, slow, exact: the semantic oracle). `ISOZYME_BACKEND` overrides the
default, a decorator's `backend=` overrides that. `ISOZYME_PRINT_IR` prints IR at compile time to stderr:
`ssa` (as lowered), `opt` (after the pipeline), `after-all` (after every pass) or a pass name; several
separated by commas.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from isozyme.frontend.compiler import KernelDefinition, lower_kernel
from isozyme.frontend.diagnostics import CompileError
from isozyme.optimize.pass_manager import PassOptions, run_passes
from isozyme.runtime.arguments import Parameter, check_arguments
from isozyme.ssa.interpreter import run_function
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.printer import print_module
from isozyme.ssa.verifier import verify

BACKENDS = ("interp",)
"""Backends that can run kernels now; "llvm" and "opencl" arrive with their issues."""
DEFAULT_BACKEND = "interp"
DEFAULT_PIPELINE = "O2"
"""The pipeline primal kernels compile with when none is given."""
STAGES = ("ssa", "opt")


@dataclass
class CompiledKernel:
    """A kernel compiled for one backend and pipeline: call it like the kernel."""

    name: str
    module: Module
    function: Function
    params: list[Parameter]
    backend: str

    def __call__(self, *args: object, **kwargs: object) -> object:
        values = check_arguments(self.name, self.params, args, kwargs)
        return run_function(self.function, *values)


class Kernel:
    """A compiled-on-demand kernel; see the module docstring. `py_func` is the undecorated function."""

    def __init__(self, py_func: Callable, backend: str | None = None, boundscheck: bool | None = None) -> None:
        if backend is not None and backend not in (*BACKENDS, "llvm", "opencl"):
            raise ValueError(f"unknown backend {backend!r} (known: interp, llvm, opencl)")
        self.py_func = py_func
        self.definition = KernelDefinition(py_func, {"backend": backend, "boundscheck": boundscheck})
        self.__isozyme_definition__ = self.definition
        self._compiled: dict[tuple[str, str], CompiledKernel] = {}
        functools.update_wrapper(self, py_func)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.compile()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<isozyme kernel {self.definition.name}>"

    def backend(self, backend: str | None = None) -> str:
        chosen = backend or self.definition.options.get("backend") or os.environ.get("ISOZYME_BACKEND") \
            or DEFAULT_BACKEND
        if chosen not in BACKENDS:
            raise ValueError(f"backend {chosen!r} is not available yet (available: {', '.join(BACKENDS)})")
        return chosen  # type: ignore[return-value]

    def lower(self) -> tuple[Module, Function]:
        """A fresh SSA module of this kernel and its callees, as lowered (unoptimized)."""
        try:
            return lower_kernel(self.definition)
        except CompileError as error:
            raise error.with_traceback(None) from None  # the user's frames only, not the compiler's

    def optimized(self, pipeline: str) -> tuple[Module, Function]:
        module, function = self.lower()
        verify(module)
        print_ir = _print_ir_request()
        if "ssa" in print_ir:
            print(f"; *** SSA of kernel {self.definition.name} ***\n{print_module(module)}", file=sys.stderr)
        options = PassOptions(print_after_all="after-all" in print_ir, print_after=print_ir - {"ssa", "opt"})
        run_passes(module, [pipeline], options)
        if "opt" in print_ir:
            print(f"; *** {pipeline} IR of kernel {self.definition.name} ***\n{print_module(module)}", file=sys.stderr)
        return module, function

    def compile(self, backend: str | None = None, opt: str = DEFAULT_PIPELINE) -> CompiledKernel:
        """The kernel compiled for `backend` with pipeline `opt` (cached)."""
        key = (self.backend(backend), opt)
        if key not in self._compiled:
            module, function = self.optimized(opt)
            params = [Parameter(arg.name, arg.type) for arg in function.args]  # type: ignore[arg-type]
            self._compiled[key] = CompiledKernel(self.definition.name, module, function, params, key[0])
        return self._compiled[key]


def _print_ir_request() -> set[str]:
    return {part.strip() for part in os.environ.get("ISOZYME_PRINT_IR", "").split(",") if part.strip()}


def kernel(function: Callable | None = None, *, backend: str | None = None,
           boundscheck: bool | None = None) -> Kernel | Callable[[Callable], Kernel]:
    """Decorate a Python function as a kernel: `@iz.kernel` or `@iz.kernel(backend="interp")`."""
    if function is not None:
        return Kernel(function, backend, boundscheck)
    return lambda f: Kernel(f, backend, boundscheck)


def show_ir(kernel: Kernel, stage: str = "ssa", opt: str = "O2") -> str:
    """The IR of `kernel` (and its callees) at `stage`: "ssa" as lowered, "opt" after pipeline `opt`."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"show_ir needs an @iz.kernel, got {type(kernel).__name__}")
    if stage == "ssa":
        return print_module(kernel.lower()[0])
    if stage == "opt":
        return print_module(kernel.optimized(opt)[0])
    raise ValueError(f"unknown IR stage {stage!r} (available now: {', '.join(STAGES)})")
