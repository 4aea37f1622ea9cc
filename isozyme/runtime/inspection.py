"""Inspection: the IR and code of a kernel or of its derivatives at every stage (`iz.show_ir`), and what a
reverse pass tapes (`iz.show_cache`).

Nothing here compiles code or fills a cache: each call lowers the kernel afresh and builds what it shows
the way the kernel's call (`kernel.py`) or its derivative's (`compiled_derivatives.py`) builds it, up to the
stage asked for, so that what is shown is what runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from isozyme.enzyme_ad.activity import ArgActivity
from isozyme.runtime.compiled_derivatives import differentiate, forward_build, parse_activity, run_build
from isozyme.runtime.kernel import DEFAULT_PIPELINE, Kernel
from isozyme.ssa.printer import print_module

STAGES = ("ssa", "opt", "grad", "grad-opt", "fwd", "fwd-opt", "llvm", "llvm-opt", "opencl")
"""The stages `show_ir` shows."""


def show_ir(kernel: Kernel, stage: str = "ssa", opt: str | None = None,
            activity: Sequence[str] | None = None) -> str:
    """The IR of `kernel` (and its callees) at `stage`: "ssa" as lowered, "opt" after pipeline `opt`
    (default "O2"), "llvm" the LLVM IR emitted from that, "llvm-opt" the LLVM IR after LLVM's O3, "opencl" the
    OpenCL C emitted from it; "grad"
    and "grad-opt": `diffe_<f>` for `activity` (one of "const", "dup", "active" per parameter) right after
    AD and after the optimization that follows, with `opt` one of "post" (default), "pre", "none"; "fwd"
    and "fwd-opt" likewise for the forward-mode `fwddiffe_<f>` ("const" or "dup" per parameter).
    "llvm", "llvm-opt" and "opencl" with an `activity` show the code of the reverse-mode gradient
    `diffe_<f>` instead of the primal's (then `opt` is "post", "pre" or "none", as for "grad-opt")."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"show_ir needs an @iz.kernel, got {type(kernel).__name__}")
    if stage in ("llvm", "llvm-opt", "opencl") and activity is not None:
        return gradient_code(kernel, stage, activity, opt or "post")
    if stage in ("grad", "grad-opt"):
        if activity is None:
            raise ValueError(f"stage {stage!r} needs activity=(...): 'const', 'dup' or 'active' per parameter")
        return gradient_ir(kernel, stage, activity, opt or "post")
    if stage in ("fwd", "fwd-opt"):
        if activity is None:
            raise ValueError(f"stage {stage!r} needs activity=(...): 'const' or 'dup' per parameter")
        return forward_ir(kernel, stage, activity, opt or "post")
    opt = opt or DEFAULT_PIPELINE
    if stage == "ssa":
        return print_module(kernel.lower()[0])
    if stage == "opt":
        return print_module(kernel.optimized(opt)[0])
    if stage in ("llvm", "llvm-opt"):
        from isozyme.runtime.llvm_backend import llvm_ir
        module, function = kernel.optimized(opt)
        return llvm_ir(module, function, kernel.codegen_options(), optimized=stage == "llvm-opt")
    if stage == "opencl":
        from isozyme.runtime.opencl_backend import opencl_source
        module, function = kernel.optimized(opt)
        return opencl_source(module, function, kernel.codegen_options())
    raise ValueError(f"unknown IR stage {stage!r} (available now: {', '.join(STAGES)})")


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


def forward_ir(kernel: Kernel, stage: str, activity: Sequence[str | ArgActivity], opt: str = "post") -> str:
    """The IR of `fwddiffe_<f>`: "fwd" right after AD, "fwd-opt" after the optimization that follows."""
    activities = parse_activity(kernel, activity)
    captured: dict[str, str] = {}
    module, function = kernel.lower()
    derivative = run_build(kernel, forward_build(activities, opt), module, function, opt,
                            on_stage=lambda name, module: captured.setdefault(name, print_module(module)))
    return captured["fwd"] if stage == "fwd" else print_module(derivative.module)
