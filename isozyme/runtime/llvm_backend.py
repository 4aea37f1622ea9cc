"""The `llvm` backend: from a lowered SSA module to a callable, through the memory and disk caches.

    entry = compile_native(name, lowered_module, EntrySignature.of(entry_function), pipeline, optimize, options)
    entry(out, x, 1000)

The cache key is the SHA-256 of the lowered (unoptimized) SSA module as printed, the source locations of
its instructions (they end up in error messages), the pipeline and codegen options, the isozyme version
and `llvm_jit.host_description()` (llvmlite and LLVM versions, target, CPU name and features). Lowering
is cheap; the O2 pipeline, codegen and LLVM are what a hit skips. A key is compiled at most once per
process (`_loaded`), and its object code is stored on disk (`disk_cache.py`) with the metadata the call
path needs (error sites, writable parameters), so a fresh process loads it without optimizing anything.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.error_sites import ErrorSite
from isozyme.optimize.function_attributes import module_memory_effects
from isozyme.runtime import disk_cache, llvm_jit
from isozyme.runtime.arguments import Parameter
from isozyme.runtime.native_call import NativeSignature, make_entry
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.printer import print_module
from isozyme.ssa.types import Type
from isozyme.version import VERSION

_loaded: dict[str, Callable[..., object]] = {}
"""Entries compiled or loaded in this process, by cache key."""
_compiling = threading.RLock()
"""One compilation at a time: llvmlite releases the GIL, and a key must be loaded into the engine once."""



@dataclass(frozen=True)
class EntrySignature:
    """The compiled entry function's name and signature, known before the pipeline runs (for AD the
    pipeline creates the entry: `diffe_f` exists only on a cache miss)."""

    function: str
    """Name of the entry function in the optimized module."""
    params: tuple[Parameter, ...]
    return_type: Type

    @classmethod
    def of(cls, function: Function) -> EntrySignature:
        params = tuple(Parameter(arg.name or f"arg{arg.index}", arg.type) for arg in function.args)
        return cls(function.name, params, function.return_type)


def cache_key(module: Module, entry: EntrySignature, pipeline: str, options: CodegenOptions) -> str:
    locations = "\n".join(str(inst.loc) for function in module for inst in function.instructions())
    material = "\n".join(["isozyme llvm backend 1", VERSION, llvm_jit.host_description(), pipeline,
                          repr(options), repr(entry), print_module(module), locations])
    return hashlib.sha256(material.encode()).hexdigest()


def writable_parameters(module: Module, entry: Function) -> frozenset[int]:
    return frozenset(module_memory_effects(module)[entry].writes)


def symbols(prefix: str, entry: EntrySignature) -> tuple[str, str]:
    return f"{prefix}{entry.function}__fast", f"{prefix}{entry.function}__raw"


Optimize = Callable[[Module], Function]
"""Runs a pipeline on a module in place and returns the entry function (named as the signature says)."""


def compile_native(name: str, module: Module, entry: EntrySignature, pipeline: str, optimize: Optimize,
                   options: CodegenOptions, use_disk_cache: bool = True,
                   print_stages: frozenset[str] = frozenset()) -> Callable[..., object]:
    """The call entry of the function `entry` describes, compiled by LLVM (module docstring). `optimize`
    runs the SSA pipeline named `pipeline` on `module` in place and returns that function (only on a cache
    miss). `print_stages` ("llvm", "llvm-opt") are printed to stderr when they are made."""
    key = cache_key(module, entry, pipeline, options)
    with _compiling:
        if key not in _loaded:
            _loaded[key] = _compile_or_load(key, name, module, entry, optimize, options, use_disk_cache,
                                            print_stages)
    return _loaded[key]


def _compile_or_load(key: str, name: str, module: Module, entry: EntrySignature, optimize: Optimize,
                     options: CodegenOptions, use_disk_cache: bool,
                     print_stages: frozenset[str]) -> Callable[..., object]:
    prefix = f"iz_{key[:20]}_"
    cached = disk_cache.load(key, name) if use_disk_cache else None
    if cached is not None:
        meta, obj = cached
        sites = [ErrorSite.from_json(site) for site in meta["sites"]]  # type: ignore[union-attr]
        writable = frozenset(meta["writable"])  # type: ignore[arg-type]
    else:
        from isozyme.codegen.llvm import emit_llvm  # only on a miss: a hit needs no code generator

        function = optimize(module)
        assert function.name == entry.function, (function.name, entry.function)
        writable = writable_parameters(module, function)
        program = emit_llvm(module, function, options, prefix, writable)
        if "llvm" in print_stages:
            print(f"; *** LLVM IR of kernel {name} ***\n{program.ir_text}", file=sys.stderr)
        optimized = llvm_jit.optimize(llvm_jit.prepare(program.ir_text))
        if "llvm-opt" in print_stages:
            print(f"; *** LLVM IR of kernel {name} after O3 ***\n{optimized}", file=sys.stderr)
        obj = llvm_jit.emit_object(optimized)
        sites = program.sites
        if use_disk_cache:
            disk_cache.store(key, {"sites": [s.to_json() for s in sites], "writable": sorted(writable)}, obj, name)
    addresses = llvm_jit.load_object(obj, list(symbols(prefix, entry)))
    signature = NativeSignature(name, list(entry.params), entry.return_type, writable, sites)
    fast, raw = symbols(prefix, entry)
    return make_entry(signature, addresses[fast], addresses[raw])


def llvm_ir(module: Module, entry: Function, options: CodegenOptions, optimized: bool) -> str:
    """LLVM IR of an (SSA-optimized) module as emitted, or after LLVM's O3."""
    from isozyme.codegen.llvm import emit_llvm

    program = emit_llvm(module, entry, options, "iz_", writable_parameters(module, entry))
    return llvm_jit.optimized_ir(program.ir_text) if optimized else program.ir_text
