"""A kernel as the frontend sees it before compilation (`KernelDefinition`), the reads of names outside
the kernels that compiling it records (`StaticRead`), and what lowering one kernel asks of the module being
compiled (`Compilation`). The base of the lowering: it knows the Python function, not the SSA built from it.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from isozyme.frontend.diagnostics import KernelSource
from isozyme.ssa.ir import Function

MISSING = object()
"""`lookup_global` found nothing."""


@dataclass(eq=False)
class KernelDefinition:
    """A Python function decorated as a kernel, before compilation."""

    py_func: Callable
    """The undecorated function."""
    options: dict[str, object] = field(default_factory=dict)
    """Options given to the decorator (`backend`, `boundscheck`)."""

    @property
    def name(self) -> str:
        return self.py_func.__name__

    @cached_property
    def source(self) -> KernelSource:
        return KernelSource.of(self.py_func)

    def parameter_names(self) -> list[str]:
        return [arg.arg for arg in self.source.tree.args.args]

    def lookup(self, name: str) -> object:
        """What `name` means outside the kernel at compile time: closure, then globals, then builtins."""
        code = self.py_func.__code__
        if name in code.co_freevars and self.py_func.__closure__:
            cell = self.py_func.__closure__[code.co_freevars.index(name)]
            try:
                return cell.cell_contents
            except ValueError:
                return MISSING  # the closed-over variable is not assigned yet
        if name in self.py_func.__globals__:
            return self.py_func.__globals__[name]
        return getattr(builtins, name, MISSING)


def kernel_definition_of(obj: object) -> KernelDefinition | None:
    """The frontend definition behind a kernel object (duck-typed: the runtime owns the class)."""
    return getattr(obj, "__isozyme_definition__", None)


@dataclass(frozen=True, eq=False)
class StaticRead:
    """A name or module attribute outside the kernels that the lowering read, and what it found."""

    definition: KernelDefinition
    """The kernel whose scope the name was looked up in."""
    path: str
    """The name, or `base.attribute` with the source text of the base expression (a dotted name, unless an
    annotation reads an attribute of something else, such as `Array[f64].ndim`)."""
    value: object
    """What it found (`MISSING` for nothing)."""


class Compilation(Protocol):
    """What lowering one kernel asks of the module being compiled (`compiler.ModuleCompiler`)."""

    def read_global(self, definition: KernelDefinition, name: str) -> object:
        """What `name` means in `definition`'s scope (MISSING for nothing), recorded."""
        ...

    def read_attribute(self, definition: KernelDefinition, base_path: str, base: object, attribute: str) -> object:
        """`base.attribute` (MISSING when absent), recorded under `base_path.attribute`."""
        ...

    def function_for(self, definition: KernelDefinition, caller: KernelSource | None = None,
                     call: ast.AST | None = None) -> Function:
        """The SSA function of a callee, lowered on first use."""
        ...
