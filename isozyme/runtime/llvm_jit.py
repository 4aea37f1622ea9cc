"""LLVM through llvmlite's binding layer: the host target, LLVM's O3, object code, and one MCJIT engine.

Imported only when the `llvm` backend is used (the OpenCL path never loads llvmlite). The target machine
is the host CPU with all its features (`get_host_cpu_name`, `get_host_cpu_features`), so object code is
only valid on this kind of machine: `host_description()` goes into every cache key.

Compiled modules are emitted as object code (`emit_object`), which is what the disk cache stores, and
loaded into the process-wide MCJIT engine (`load_object`); a warm start loads the object without parsing
or optimizing any IR. Symbols are unique per cache key (the codegen prefixes them), so any number of
modules share the engine. The C library's math functions and `malloc`/`free` are resolved in the process.
"""

from __future__ import annotations

import ctypes.util
import functools
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm


@dataclass
class LLVMHost:
    """The initialized LLVM state of the process."""

    target_machine: llvm.TargetMachine
    engine: llvm.ExecutionEngine
    objects: list[llvm.ObjectFileRef]
    """Loaded object files, kept alive with the engine."""


@functools.cache
def host() -> LLVMHost:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libm = ctypes.util.find_library("m")
    if libm:
        llvm.load_library_permanently(libm)
    target = llvm.Target.from_default_triple()
    machine = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                           features=llvm.get_host_cpu_features().flatten(),
                                           opt=3, codemodel="jitdefault")
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
    return LLVMHost(machine, engine, [])


@functools.cache
def host_description() -> str:
    """Everything object code depends on besides its IR: versions, target triple, CPU and features."""
    features = llvm.get_host_cpu_features().flatten()
    version = ".".join(map(str, llvm.llvm_version_info))
    return (f"llvmlite {llvmlite.__version__}; LLVM {version}; {llvm.get_process_triple()}; "
            f"{llvm.get_host_cpu_name()}; {features}")


def prepare(ir_text: str) -> llvm.ModuleRef:
    """Parse and verify LLVM IR for the host target."""
    machine = host().target_machine
    module = llvm.parse_assembly(ir_text)
    module.triple = llvm.get_process_triple()
    module.data_layout = str(machine.target_data)
    module.verify()
    return module


def optimize(module: llvm.ModuleRef) -> llvm.ModuleRef:
    """LLVM's O3 pipeline through the new pass manager."""
    machine = host().target_machine
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(module, builder)
    return module


def optimized_ir(ir_text: str) -> str:
    return str(optimize(prepare(ir_text)))


def emit_object(module: llvm.ModuleRef) -> bytes:
    """Object code for the host."""
    return host().target_machine.emit_object(module)


def load_object(data: bytes, symbols: list[str]) -> dict[str, int]:
    """Load object code into the engine; the addresses of `symbols`."""
    state = host()
    obj = llvm.ObjectFileRef.from_data(data)
    state.engine.add_object_file(obj)
    state.objects.append(obj)
    state.engine.finalize_object()
    addresses = {name: state.engine.get_function_address(name) for name in symbols}
    missing = [name for name, address in addresses.items() if not address]
    if missing:
        raise RuntimeError(f"symbols missing from loaded object code: {', '.join(missing)}")
    return addresses
