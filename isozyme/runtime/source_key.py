"""Source keys: finding a kernel's compiled code from its source, without lowering it.

The compiled code's cache key (`llvm_backend.cache_key`) hashes the lowered SSA module, and lowering a
kernel with its callees costs 5 to 15 ms, most of a warm start. Lowering is a deterministic function of

1. the source text of each kernel it lowers (read from the file, as `inspect` reads it), its file name and
   function name, and the Python version (the `ast` module) and isozyme's own code;
2. what each name and module attribute outside the kernels means when the lowering reads it: the
   frontend reads them all through `ModuleCompiler.read_global` / `read_attribute`, which record them as
   `StaticRead`s in order.

The source key hashes what is known before lowering: the root kernel's source identity (file name, the
file's lines as `linecache` has them, first line, function name), the pipeline and codegen options, the
Python and numpy versions, and `host_identity`'s compiler and host descriptions. Its index entry
(`disk_cache.SOURCE_INDEX`) holds the compiled code's key, the entry signature and the static reads, each
as a path (`n`, `iz.sqrt`) in the scope of one of the kernels and a fingerprint of its value. A warm start
replays the reads in order, in the current process, and uses the compiled key only if every fingerprint
matches: by induction over the reads, the lowering would then read the same names, find values it cannot
tell apart, and produce the same module, so the compiled code is the one it would get. A changed global
constant, callee or closure variable changes a fingerprint; a changed kernel source changes the key or a
callee's fingerprint. Anything else is a miss, and the kernel is lowered as before.

A fingerprint identifies a value as far as the lowering can observe it: kernels by their position among
the kernels met so far and their source identity (two names bound to one kernel stay one function), numbers
by exact type and bits, annotations by their types, intrinsics by role and name, classes of Python, numpy
and isozyme by qualified name (checked to be the very object found there), modules by name (their
attributes are reads of their own). A read of any other value (an array, a user's class or function)
makes the kernel unkeyable: it is lowered at every start, as before.
"""

from __future__ import annotations

import linecache
import struct
import sys
import types
from dataclasses import dataclass

import numpy as np

from isozyme.codegen.abi import CodegenOptions
from isozyme.frontend.annotations import ArrayAnnotation, ScalarAnnotation
from isozyme.frontend.definitions import MISSING, KernelDefinition, StaticRead, kernel_definition_of
from isozyme.frontend.intrinsics import intrinsic_role
from isozyme.runtime import disk_cache, host_identity
from isozyme.runtime.arguments import Parameter
from isozyme.runtime.disk_cache import sha256
from isozyme.ssa.types import SCALAR_TYPES, VOID, ArrayType, Type

SOURCE_KEY_FORMAT = "isozyme source key 1"
TRUSTED_MODULES = frozenset({"builtins", "numpy", "isozyme"})
"""Packages whose classes a qualified name identifies: their versions are in the key (a user's class may be
edited under the same name, so it makes a kernel unkeyable)."""


@dataclass(frozen=True)
class CompiledSignature:
    """What the call path needs that lowering would tell: the compiled key and the entry's signature."""

    key: str
    """The compiled code's cache key (`llvm_backend.cache_key`)."""
    function: str
    params: tuple[Parameter, ...]
    return_type: Type


def source_identity(definition: KernelDefinition) -> str | None:
    """A hash of everything `KernelSource.of` reads for this kernel; None when it reads something else (a
    wrapped function, a function whose source comes from no file)."""
    function = definition.py_func
    code = getattr(function, "__code__", None)
    if code is None or hasattr(function, "__wrapped__"):
        return None
    linecache.checkcache(code.co_filename)  # as `inspect.getsourcelines` does: a changed file is reread
    lines = linecache.getlines(code.co_filename, function.__globals__)
    if not lines:
        return None
    material = "\0".join([code.co_filename, str(code.co_firstlineno), function.__name__, "".join(lines)])
    return sha256(material.encode()).hexdigest()


def source_key(definition: KernelDefinition, pipeline: str, options: CodegenOptions) -> str | None:
    """The source key of the root kernel `definition` (module docstring); None when it has none."""
    identity = source_identity(definition)
    if identity is None:
        return None
    material = [SOURCE_KEY_FORMAT, host_identity.compiler_description(), host_identity.host_description(),
                sys.version, np.__version__, pipeline, repr(options), identity]
    return sha256("\n".join(material).encode()).hexdigest()


class Fingerprints:
    """Fingerprints of the values of static reads, and the kernels met so far (the root first)."""

    def __init__(self, root: KernelDefinition) -> None:
        self.kernels: list[KernelDefinition] = [root]
        self._identities: dict[int, str | None] = {}

    def of(self, value: object) -> str | None:
        """The fingerprint of `value` (module docstring); None for a value the lowering may observe more
        of than a fingerprint says."""
        definition = kernel_definition_of(value)
        if definition is not None:
            return self._kernel(definition) if isinstance(definition, KernelDefinition) else None
        role = intrinsic_role(value)
        if role is not None:
            detail = role[1].name if hasattr(role[1], "name") else _qualified_name(role[1])
            return f"intrinsic {role[0]} {detail} {_qualified_name(value)}"
        if value is MISSING:
            return "missing"
        kind = type(value)
        if kind in (bool, int, str) or value is None:
            return f"{kind.__name__} {value!r}"
        if kind is float:
            return f"float {struct.pack('<d', value).hex()}"
        if isinstance(value, np.generic) and kind.__module__ == "numpy":
            return f"numpy {value.dtype.str} {value.tobytes().hex()}"
        if kind is ScalarAnnotation:
            return f"scalar-annotation {value.name} {value.ssa}"  # type: ignore[attr-defined]
        if kind is ArrayAnnotation:
            return f"array-annotation {value.element.name} {value.element.ssa} {value.ndim}"  # type: ignore[attr-defined]
        if isinstance(value, types.ModuleType):
            return f"module {value.__name__}" if sys.modules.get(value.__name__) is value else None
        if isinstance(value, type) and value.__module__.partition(".")[0] in TRUSTED_MODULES and _named(value):
            return f"class {_qualified_name(value)}"
        return None

    def _kernel(self, definition: KernelDefinition) -> str | None:
        index = next((i for i, known in enumerate(self.kernels) if known is definition), None)
        if index is None:
            index = len(self.kernels)
            self.kernels.append(definition)
        if index not in self._identities:
            self._identities[index] = source_identity(definition)
        identity = self._identities[index]
        return None if identity is None else f"kernel {index} {identity}"


def _qualified_name(value: object) -> str:
    module = getattr(value, "__module__", None) or type(value).__module__
    return f"{module}.{getattr(value, '__qualname__', getattr(value, '__name__', type(value).__name__))}"


def _named(value: type) -> bool:
    """Is `value` the object its module and qualified name lead to (so the name identifies it)?"""
    found: object = sys.modules.get(value.__module__)
    for part in value.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is value


def resolve(definition: KernelDefinition, path: str) -> object:
    """What `path` (a name, or `name.attribute...`) means in `definition`'s scope now, as the lowering
    reads it; MISSING when it means nothing."""
    first, *attributes = path.split(".")
    value = definition.lookup(first)
    for attribute in attributes:
        value = getattr(value, attribute, MISSING)
    return value


def _is_dotted(path: str) -> bool:
    return all(part.isidentifier() for part in path.split("."))


def remember(key: str, root: KernelDefinition, reads: list[StaticRead], compiled: CompiledSignature) -> None:
    """Store the index entry of source key `key` after a compilation that made `reads`, unless some read
    cannot be fingerprinted (stats `source_unkeyable`)."""
    fingerprints = Fingerprints(root)
    records: list[list[object]] = []
    seen: set[tuple[int, str]] = set()
    for read in reads:
        index = next((i for i, known in enumerate(fingerprints.kernels) if known is read.definition), None)
        fingerprint = fingerprints.of(read.value) if index is not None and _is_dotted(read.path) else None
        if index is None or fingerprint is None:
            disk_cache.event("source_unkeyable", f"{root.name}: '{read.path}' ({type(read.value).__name__})")
            return
        if (index, read.path) not in seen:  # type inference lowers a kernel again: the same reads again
            seen.add((index, read.path))
            records.append([index, read.path, fingerprint])
    if any(kernel.source.filename != kernel.py_func.__code__.co_filename for kernel in fingerprints.kernels):
        disk_cache.event("source_unkeyable", f"{root.name}: source not read from its code's file")
        return
    metadata = {"compiled": compiled.key, "function": compiled.function, "return": str(compiled.return_type),
                "params": [[p.name, str(p.type)] for p in compiled.params], "reads": records}
    disk_cache.store(key, metadata, b"", root.name, kind=disk_cache.SOURCE_INDEX)


def recall(key: str, root: KernelDefinition) -> CompiledSignature | None:
    """The compiled key and signature stored for source key `key`, if every recorded read still finds
    what it found (stats `source_stale` otherwise)."""
    entry = disk_cache.load(key, root.name, kind=disk_cache.SOURCE_INDEX)
    if entry is None:
        return None
    metadata = entry.metadata
    fingerprints = Fingerprints(root)
    for index, path, fingerprint in metadata["reads"]:  # type: ignore[union-attr]
        if index >= len(fingerprints.kernels) or fingerprints.of(resolve(fingerprints.kernels[index], path)) \
                != fingerprint:
            disk_cache.event("source_stale", f"{root.name}: '{path}' changed; lowering")
            return None
    params = tuple(Parameter(name, parse_type(text)) for name, text in metadata["params"])  # type: ignore[union-attr]
    return CompiledSignature(metadata["compiled"], metadata["function"], params,  # type: ignore[arg-type]
                             parse_type(metadata["return"]))  # type: ignore[arg-type]


def parse_type(text: str) -> Type:
    """The type `str(type)` printed: `void`, `f64`, `f64[?,?]`."""
    if text == "void":
        return VOID
    element, bracket, rest = text.partition("[")
    return ArrayType(SCALAR_TYPES[element], rest.count("?")) if bracket else SCALAR_TYPES[text]
