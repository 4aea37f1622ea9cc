"""SSA to LLVM IR through `llvmlite.ir`: a walk over the blocks plus a lowering table keyed by op.

    program = emit_llvm(module, module["norm"], CodegenOptions(boundscheck=True), symbol_prefix="iz_1f2e_")
    program.ir_text        # textual LLVM IR, verified and optimized by the runtime (`runtime/llvm_jit.py`)

This module drives the backend: it declares every function of the module (`llvm_module.py`), emits each
body (the walk of `llvm_function.py` through the table of `llvm_lowerings.py`, in the representation of
`llvm_types.py`; its `prange` loops as tasks for the thread pool, `llvm_parallel.py` and `llvm_worker.py`),
then the C entry points of the entry kernel (`llvm_entry.py`). The result holds every
function of the module, internal, and the two external entry points; the error sites are numbered from 1
in the order the checks were emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.error_sites import ErrorSite
from isozyme.codegen.llvm_entry import emit_entry_points
from isozyme.codegen.llvm_function import FunctionEmitter
from isozyme.codegen.llvm_lowerings import LOWERINGS
from isozyme.codegen.llvm_module import ModuleEmitter
from isozyme.codegen.llvm_parallel import outline, plan_threaded_loops
from isozyme.codegen.llvm_worker import emit_workers
from isozyme.ssa.ir import Function, Module


@dataclass
class LLVMProgram:
    """A module's LLVM IR and what the runtime needs to call it and to report its failures."""

    ir_text: str
    kernel_symbol: str
    """The entry kernel's internal function."""
    sites: list[ErrorSite] = field(default_factory=list)
    """The error sites, numbered from 1 in list order."""
    slot_symbol: str | None = None
    """`ptr slot()`, the address of the module's pointer to the thread pool (`llvm_parallel.py`), when a
    loop runs on the pool; the runtime sets that pointer before the first call."""
    serial_loops: list[str] = field(default_factory=list)
    """Why each `prange` loop that runs serially does."""


def emit_llvm(module: Module, entry: Function, options: CodegenOptions, symbol_prefix: str,
              writable: frozenset[int] = frozenset()) -> LLVMProgram:
    """LLVM IR for `module`, plus the C entry points of `entry` (`llvm_entry.py`) for the runtime.

    `writable`: positions of the entry's array parameters that the kernel may write (the fast entry
    rejects read-only numpy arrays for those)."""
    emitter = ModuleEmitter(module, options, symbol_prefix)
    emitter.declare_all(entry)
    serial: list[str] = []
    for function in module:
        threaded, reasons = plan_threaded_loops(emitter, function) if options.threads else ([], [])
        serial += reasons
        body = FunctionEmitter(emitter, function, LOWERINGS)
        outline(body, threaded)
        body.emit()
        emit_workers(emitter, function, threaded)
    emit_entry_points(emitter, entry, writable)
    slot = emitter.slot_symbol if emitter.threaded else None
    return LLVMProgram(emitter.finish(), emitter.symbol(entry), emitter.sites, slot, serial)
