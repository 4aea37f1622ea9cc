"""The OpenCL backend: a kernel's program (`codegen/opencl_program.py`), built, cached, and run by the host
(`opencl_runner.Runner`).

    entry = compile_opencl(module, function, CodegenOptions())
    entry(out, x, 1000)             # checked arguments: numpy arrays copied in and out, device arrays not

The device is `opencl_device.device()` (`ISOZYME_OPENCL_DEVICE` chooses it). Programs are built once per
source, device and build options (in memory; pyopencl and the drivers keep the binaries on disk). Before
emitting, every loop gets a preheader and one latch (`canonicalize_loop_structure`), which the parallel-loop
analysis needs. A `prange` loop that runs serially gives a `SerialLoopWarning` saying why. pyopencl is
imported on first use only (`opencl_device.import_pyopencl`), and this path never imports llvmlite."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.error_sites import ErrorSite
from isozyme.codegen.opencl_control import (
    CHAIN_MACRO,
    GROUP_SIZE,
    AllocSite,
)
from isozyme.codegen.opencl_program import LoopKernel, OpenCLProgram, emit_opencl
from isozyme.optimize.function_attributes import module_memory_effects
from isozyme.optimize.loop_canonicalization import canonicalize_loop_structure
from isozyme.optimize.memory_reuse import place_module_in_arena
from isozyme.runtime import disk_cache, host_identity
from isozyme.runtime.disk_cache import sha256
from isozyme.runtime.opencl_device import Device, OpenCLUnavailable, chained, device, import_pyopencl
from isozyme.runtime.opencl_registers import build_chained
from isozyme.runtime.opencl_runner import Runner
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.printer import print_module

BUILD_OPTIONS = "-cl-fp32-correctly-rounded-divide-sqrt"
"""f32 division and sqrt correctly rounded, as in IEEE arithmetic (the interpreter's)."""


_PROGRAMS: dict[tuple[str, str, str], Any] = {}


def build(source: str, where: Device) -> Any:
    """The program built from `source` for `where`, cached per source and device; a chained build's loop
    kernels held at the registers of an unchained build (`opencl_registers.build_chained`)."""
    options = build_options(where)
    key = (source, where.name, options)
    if key not in _PROGRAMS:
        cl = import_pyopencl()
        with warnings.catch_warnings():  # drivers' notes on generated code (PYOPENCL_COMPILER_OUTPUT=1 shows them)
            warnings.simplefilter("ignore", cl.CompilerWarning)
            if chained(where):
                _PROGRAMS[key] = build_chained(cl, where, source, options)
            else:
                _PROGRAMS[key] = cl.Program(where.context, source).build(options=options)
    return _PROGRAMS[key]


def build_options(where: Device) -> str:
    """`BUILD_OPTIONS`, and OpenCL C 3.0 on a device with `cl_ext_float_atomics`, whose feature macros then
    select native float atomic adds in `ATOMIC_HELPERS` (`codegen/opencl_language.py`); on NVIDIA's
    OpenCL, `IZ_PTX_ATOMICS` selects the GPU's own float reductions in inline PTX there, with warp sums
    before them unless `ISOZYME_OPENCL_WARP_SUMS=0` (`codegen/opencl_language.WARP_HELPERS`). There,
    `IZ_CHAIN` builds the loop kernels' chained launches unless `ISOZYME_OPENCL_CHAIN=0`
    (`opencl_device.chained`)."""
    options = f"{BUILD_OPTIONS} -cl-std=CL3.0" if where.float_atomics else BUILD_OPTIONS
    if chained(where):
        options += f" -D {CHAIN_MACRO}"
    if not where.ptx:
        return options
    return f"{options} -D IZ_PTX_ATOMICS" + ("" if warp_sums() else " -D IZ_NO_WARP_SUMS")


def warp_sums() -> bool:
    """`ISOZYME_OPENCL_WARP_SUMS`: "1" (default) sums a warp's atomic adds into one address before adding
    on NVIDIA's OpenCL, "0" adds each work item's value on its own (the baseline `benchmarks/` compare)."""
    value = os.environ.get("ISOZYME_OPENCL_WARP_SUMS", "1")
    if value not in ("0", "1"):
        raise ValueError(f"ISOZYME_OPENCL_WARP_SUMS must be 0 or 1, not {value!r}")
    return value == "1"


def opencl_source(module: Module, function: Function, options: CodegenOptions) -> str:
    """The OpenCL C of `module` with `function` as the kernel (`iz.show_ir(kernel, stage="opencl")`)."""
    try:
        size = group_size(device())
    except OpenCLUnavailable:  # the source as a device with 256-item groups gets it
        size = GROUP_SIZE
    program = _emit(module, function, options, size)
    notes = [f"// {reason}" for reason in program.serial_loops]
    return "\n".join([*notes, program.source]) if notes else program.source


def _emit(module: Module, function: Function, options: CodegenOptions, size: int) -> OpenCLProgram:
    """The program, after giving every loop one latch and a preheader (a derivative's reverse loops may
    have several latches), as the parallel-loop analysis needs; `size` is its work-group size."""
    canonicalize_loop_structure(function)
    place_module_in_arena(module)  # after every SSA pass, right before codegen (optimize/memory_reuse.py)
    writable = frozenset(module_memory_effects(module)[function].writes)
    return emit_opencl(module, function, options, writable, reduction_mode(), size)


def reduction_mode() -> str:
    """`ISOZYME_OPENCL_REDUCTION`: "group" (default: work-group reductions) or "atomic" (one atomic add per
    work item, the naive baseline that `benchmarks/` compares with)."""
    mode = os.environ.get("ISOZYME_OPENCL_REDUCTION", "group")
    if mode not in ("group", "atomic"):
        raise ValueError(f"ISOZYME_OPENCL_REDUCTION must be 'group' or 'atomic', not {mode!r}")
    return mode


def group_size(where: Device) -> int:
    """The work-group size of loop kernels with work-group sums on `where`: `ISOZYME_OPENCL_GROUP_SIZE` (a
    power of two the device allows), else 256, or the device's largest work group if smaller."""
    value = os.environ.get("ISOZYME_OPENCL_GROUP_SIZE", "")
    if not value:
        return min(GROUP_SIZE, where.largest_group)
    size = int(value) if value.isdigit() else 0
    if size < 1 or size & (size - 1) or size > where.largest_group:
        raise ValueError(f"ISOZYME_OPENCL_GROUP_SIZE must be a power of two of at most {where.largest_group} (the "
                         f"largest work group of {where.name}), not {value!r}")
    return size


class SerialLoopWarning(UserWarning):
    """A `prange` loop runs serially on OpenCL (the message says why)."""


def compile_opencl(module: Module, function: Function, options: CodegenOptions) -> Callable[..., object]:
    """A function running `function` on the OpenCL device on checked argument values (module docstring)."""
    program = _emit(module, function, options, group_size(device()))
    return _runner(function.name, program, [arg.type for arg in function.args],
                   function.return_type)


def _runner(name: str, program: OpenCLProgram, types: Sequence[Any], return_type: Any) -> Runner:
    for reason in program.serial_loops:
        warnings.warn(f"OpenCL: {reason}", SerialLoopWarning, stacklevel=5)
    where = device()
    return Runner(name, program, build(program.source, where), where, types, return_type)


CACHE_FORMAT = "isozyme opencl backend 6"
"""Changes when what the backend stores changes (2: the writable parameters; 3: the capacity words; 4: the
work-group size; 5: whether a loop makes atomic adds; 6: the continuations of chained launches in the
source)."""
_programs: dict[str, OpenCLProgram] = {}
"""Programs made or loaded in this process, by cache key."""


def compile_cached(name: str, module: Module, entry: str, pipeline: str, optimize: Callable[[Module], Function],
                   options: CodegenOptions, types: Sequence[Any], return_type: Any,
                   use_disk_cache: bool = True) -> Callable[..., object]:
    """`compile_opencl` through the memory and disk caches, as the llvm backend's `compile_native`: the key
    is the SHA-256 of the lowered module (and its source locations), the entry's name, the pipeline, the
    codegen options, the reduction mode and isozyme's version and modules; `optimize` runs the pipeline on
    `module` in place and returns the entry (on a miss only). An entry holds the OpenCL C and what the
    runner needs; pyopencl and the driver cache the device binaries themselves."""
    locations = "\n".join(str(inst.loc) for function in module for inst in function.instructions())
    material = "\n".join([CACHE_FORMAT, host_identity.compiler_description(), pipeline, repr(options),
                          reduction_mode(), str(group_size(device())), entry, print_module(module), locations])
    key = sha256(material.encode()).hexdigest()
    if key not in _programs:
        cached = disk_cache.load(key, name) if use_disk_cache else None
        program = _decoded(cached) if cached is not None else None
        if program is None:
            function = optimize(module)
            assert function.name == entry, (function.name, entry)
            program = _emit(module, function, options, group_size(device()))
            if use_disk_cache:
                disk_cache.store(key, _metadata(program), program.source.encode(), name)
        _programs[key] = program
    return _runner(name, _programs[key], types, return_type)


def _metadata(program: OpenCLProgram) -> dict[str, object]:
    return {"serial": program.serial, "loops": [[k.name, k.location, k.accumulators, k.atomics] for k in program.loops],
            "allocs": [[a.element, a.fill, a.location] for a in program.allocs], "control_words": program.control_words,
            "sites": [site.to_json() for site in program.sites], "serial_loops": program.serial_loops,
            "uses_heap": program.uses_heap, "writable": sorted(program.writable), "capacities": program.capacities,
            "group_size": program.group_size}


def _decoded(entry: disk_cache.Entry) -> OpenCLProgram | None:
    meta = entry.metadata
    try:
        return OpenCLProgram(entry.payload.decode(), str(meta["serial"]),
                             [LoopKernel(str(n), str(at), int(a), bool(t)) for n, at, a, t in meta["loops"]],  # type: ignore
                             [AllocSite(str(e), f, at) for e, f, at in meta["allocs"]],  # type: ignore
                             int(meta["control_words"]),  # type: ignore[call-overload]
                             [ErrorSite.from_json(site) for site in meta["sites"]],  # type: ignore
                             [str(reason) for reason in meta["serial_loops"]],  # type: ignore
                             bool(meta["uses_heap"]), frozenset(int(p) for p in meta["writable"]),  # type: ignore
                             int(meta["capacities"]), int(meta["group_size"]))  # type: ignore[call-overload]
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as error:
        disk_cache.event("corrupt", f"OpenCL program ({error}); compiling again")
        return None


