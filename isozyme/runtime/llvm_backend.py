"""The `llvm` backend: from a lowered SSA module to a callable, through the memory and disk caches.

    entry = compile_native(name, lowered_module, EntrySignature.of(entry_function), pipeline, optimize, options)
    entry(out, x, 1000)

The cache key is the SHA-256 of the lowered (unoptimized) SSA module as printed, the source locations of
its instructions (they end up in error messages), the entry signature, the pipeline and codegen options,
and `host_identity`'s descriptions of the compiler (isozyme's version and modules) and of the host
(llvmlite's installation, target, CPU), which are computed without importing llvmlite. Lowering is cheap;
the O2 pipeline, codegen and LLVM are what a hit skips. A key is compiled at most once per process
(`_loaded`).

On a miss the module is emitted as position-independent object code, linked into a shared library
(`shared_library.py`), stored on disk (`disk_cache.py`) with the metadata the call path needs (error
sites, writable parameters) and loaded with `dlopen`; a hit loads the library: no LLVM, no llvmlite, no
code generator. Either way what loads is the library's bytes as linked or as the cache checked them,
through a private copy (`disk_cache.load_library`), never the cache's file by name. Without a library (no
linker, the disk cache off, or a library that does not load) the module is emitted for MCJIT, stored so
and loaded through `llvm_jit.load_object`, which imports llvmlite; a cached library that no longer loads
removes its entry, and the module is compiled again.
`load_compiled` loads a key compiled before without compiling anything: `kernel.py` finds the key from
the kernel's source (`source_key.py`), so a warm start does not even lower the kernel.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.error_sites import ErrorSite
from isozyme.runtime import disk_cache, host_identity, shared_library, thread_pool
from isozyme.runtime.arguments import Parameter, writable_parameters
from isozyme.runtime.disk_cache import sha256
from isozyme.runtime.native_call import NativeSignature, make_entry
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.printer import print_module
from isozyme.ssa.types import Type

_loaded: dict[str, Callable[..., object]] = {}
"""Entries compiled or loaded in this process, by cache key."""
_compiling = threading.RLock()
"""One compilation at a time: llvmlite releases the GIL, and a key must be loaded into the engine once."""
_libraries: list[object] = []
"""Shared libraries loaded in this process: a library stays loaded while a handle to it lives."""
CACHE_FORMAT = "isozyme llvm backend 3"
"""Changes when what the backend stores changes (2: position-independent code, shared libraries)."""


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
    material = "\n".join([CACHE_FORMAT, host_identity.compiler_description(), host_identity.host_description(),
                          pipeline, repr(options), repr(entry), print_module(module), locations])
    return sha256(material.encode()).hexdigest()


def symbols(prefix: str, entry: EntrySignature, metadata: dict[str, object]) -> list[str]:
    """The entry points' symbols, then the thread pool slot's where the module has one."""
    names = [f"{prefix}{entry.function}__fast", f"{prefix}{entry.function}__raw"]
    if metadata.get("parallel"):
        names.append(f"{prefix}parallel_slot")
    return names


Optimize = Callable[[Module], Function]
"""Runs a pipeline on a module in place and returns the entry function (named as the signature says)."""


def compile_native(name: str, module: Module, entry: EntrySignature, pipeline: str, optimize: Optimize,
                   options: CodegenOptions, use_disk_cache: bool = True,
                   print_stages: frozenset[str] = frozenset(), key: str | None = None) -> Callable[..., object]:
    """The call entry of the function `entry` describes, compiled by LLVM (module docstring). `optimize`
    runs the SSA pipeline named `pipeline` on `module` in place and returns that function (only on a cache
    miss). `print_stages` ("llvm", "llvm-opt") are printed to stderr when they are made. `key` is the
    module's `cache_key`, when the caller has computed it."""
    key = key or cache_key(module, entry, pipeline, options)
    with _compiling:
        if key not in _loaded:
            cached = disk_cache.load(key, name) if use_disk_cache else None
            loaded = _load(key, name, entry, cached) if cached is not None else None
            if loaded is None:
                loaded = _compile(key, name, module, entry, optimize, options, use_disk_cache, print_stages)
            _loaded[key] = _call_entry(name, entry, *loaded)
    return _loaded[key]


def load_compiled(key: str, name: str, entry: EntrySignature) -> Callable[..., object] | None:
    """The call entry of the code compiled under `key` before, in this process or on disk; None when there
    is none (nothing is compiled here)."""
    with _compiling:
        if key not in _loaded:
            cached = disk_cache.load(key, name)
            loaded = _load(key, name, entry, cached) if cached is not None else None
            if loaded is None:
                return None
            _loaded[key] = _call_entry(name, entry, *loaded)
    return _loaded[key]


Loaded = tuple[dict[str, object], dict[str, int]]
"""A compiled module in this process: its metadata (error sites, writable parameters) and the addresses of
its entry points."""


def _compile(key: str, name: str, module: Module, entry: EntrySignature, optimize: Optimize,
             options: CodegenOptions, use_disk_cache: bool, print_stages: frozenset[str]) -> Loaded:
    """Optimize and generate `module`; link, store and load its shared library, or else load its object
    code through MCJIT (and store that)."""
    from isozyme.codegen.llvm import emit_llvm  # only on a miss: a hit needs no code generator
    from isozyme.runtime import llvm_jit

    function = optimize(module)
    assert function.name == entry.function, (function.name, entry.function)
    prepare_for_codegen(module, options)
    writable = writable_parameters(module, function)
    program = emit_llvm(module, function, options, _prefix(key), writable)
    if "llvm" in print_stages:
        print(f"; *** LLVM IR of kernel {name} ***\n{program.ir_text}", file=sys.stderr)
    optimized = llvm_jit.optimize(llvm_jit.prepare(program.ir_text))
    if "llvm-opt" in print_stages:
        print(f"; *** LLVM IR of kernel {name} after O3 ***\n{optimized}", file=sys.stderr)
    metadata: dict[str, object] = {"sites": [site.to_json() for site in program.sites], "writable": sorted(writable),
                                   "parallel": program.slot_symbol is not None}
    if use_disk_cache and disk_cache.cache_directory() is not None:
        library = None
        if shared_library.linker() is not None:
            library = shared_library.link(llvm_jit.emit_object(optimized, position_independent=True), name)
            optimized = None  # code generation may have changed it
        stored = library is not None and disk_cache.store(key, metadata, b"", name, library)
        addresses = _open_library(library, name, entry, key, metadata) if stored else None  # the bytes linked
        if addresses is not None:
            return metadata, addresses
        if library is None:
            disk_cache.event("link_errors", f"{name}: no shared library (no linker on PATH, or it failed)")
    if optimized is None:
        optimized = llvm_jit.optimize(llvm_jit.prepare(program.ir_text))
    obj = llvm_jit.emit_object(optimized)
    if use_disk_cache:
        disk_cache.store(key, metadata, obj, name)  # replaces an entry whose library could not be loaded
    return metadata, _load_object(obj, name, entry, key, metadata)


def _load(key: str, name: str, entry: EntrySignature, cached: disk_cache.Entry) -> Loaded | None:
    """A cached module loaded: its shared library, or its object code through MCJIT. None when its library
    does not load: the entry is removed, and the caller compiles it again."""
    if cached.library is None:
        return cached.metadata, _load_object(cached.payload, name, entry, key, cached.metadata)
    addresses = _open_library(cached.library, name, entry, key, cached.metadata)
    if addresses is None:
        disk_cache.remove(key)
        return None
    return cached.metadata, addresses


def _open_library(image: bytes, name: str, entry: EntrySignature, key: str,
                  metadata: dict[str, object]) -> dict[str, int] | None:
    """The entry points' addresses in the shared library `image` (checked or just linked), loaded from a
    private copy (`disk_cache.load_library`); None when it does not load."""
    try:
        library, addresses = disk_cache.load_library(image, symbols(_prefix(key), entry, metadata))
    except OSError as error:
        disk_cache.event("library_errors", f"{name} {key[:16]}: {error}")
        return None
    _libraries.append(library)
    disk_cache.event("library_loads", f"{name} {key[:16]}")
    return addresses


def _load_object(obj: bytes, name: str, entry: EntrySignature, key: str,
                 metadata: dict[str, object]) -> dict[str, int]:
    from isozyme.runtime import llvm_jit  # loads LLVM: only for code without a shared library

    disk_cache.event("object_loads", f"{name} through MCJIT")
    return llvm_jit.load_object(obj, symbols(_prefix(key), entry, metadata))


def _call_entry(name: str, entry: EntrySignature, metadata: dict[str, object],
                addresses: dict[str, int]) -> Callable[..., object]:
    fast, raw, *slot = addresses.values()  # in the order of `symbols`
    if slot:
        thread_pool.attach(slot[0])  # compiles the pool on first use
    sites = [ErrorSite.from_json(site) for site in metadata["sites"]]  # type: ignore[union-attr]
    writable = frozenset(metadata["writable"])  # type: ignore[arg-type]
    signature = NativeSignature(name, list(entry.params), entry.return_type, writable, sites)
    return make_entry(signature, fast, raw)


def prepare_for_codegen(module: Module, options: CodegenOptions) -> None:
    """After every SSA pass: one latch and a preheader per loop where loops may run on the thread pool (a
    derivative's reverse loops may have several latches; the parallel-loop analysis needs one), then the
    local arrays placed in arenas (`optimize/memory_reuse.py`)."""
    from isozyme.optimize.loop_canonicalization import canonicalize_loop_structure
    from isozyme.optimize.memory_reuse import place_module_in_arena

    if options.threads:
        for function in module:
            canonicalize_loop_structure(function)
    place_module_in_arena(module)


def _prefix(key: str) -> str:
    """The prefix of the module's symbols: unique per key, so any number of modules share one process."""
    return f"iz_{key[:20]}_"


def llvm_ir(module: Module, entry: Function, options: CodegenOptions, optimized: bool) -> str:
    """LLVM IR of an (SSA-optimized) module as emitted, or after LLVM's O3; its local arrays are placed in
    arenas first, as `_compile` does."""
    from isozyme.codegen.llvm import emit_llvm
    from isozyme.runtime import llvm_jit

    prepare_for_codegen(module, options)
    program = emit_llvm(module, entry, options, "iz_", writable_parameters(module, entry))
    return llvm_jit.optimized_ir(program.ir_text) if optimized else program.ir_text
