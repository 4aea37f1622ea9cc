"""LLVM through llvmlite's binding layer: the host target, LLVM's O3, object code, and one MCJIT engine.

Imported only when the `llvm` backend compiles, or loads code that has no shared library (the OpenCL path
and warm starts from the disk cache never load llvmlite). The target machine is the host CPU with all its
features (`get_host_cpu_name`, `get_host_cpu_features`), so object code is only valid on this kind of
machine: `host_description()` says which, and `host_identity.host_description()` identifies the same
without LLVM for the cache keys.

Compiled modules are emitted as position-independent object code (`emit_object`), which
`shared_library.link` links into a shared library, or, where no library can be made or loaded, as object
code for the process-wide MCJIT engine (`load_object`), with static relocations: MCJIT's own linker gets
some position-independent relocations of the large code model wrong (`ffloordiv` of `f32` returned 0.0).
Symbols are unique per cache key (the codegen prefixes them), so any number of modules share the engine.
The C library's math functions (and glibc's vector ones, libmvec) and `malloc`/`free` are resolved in
the process. A function with a basic block of more than HUGE_BLOCK instructions (generated code: thousands
of terms in one expression) gets its machine code without optimization, after O3 optimized its IR, as
LLVM's code generation takes more than linear time in the size of a block.
"""

from __future__ import annotations

import ctypes.util
import functools
from dataclasses import dataclass
from itertools import islice

import llvmlite
import llvmlite.binding as llvm

from isozyme.codegen.llvm_vector_math import LIBMVEC, vector_variants


@dataclass
class LLVMHost:
    """The initialized LLVM state of the process."""

    target_machine: llvm.TargetMachine
    """For MCJIT: the large code model (sections may lie far apart), static relocations."""
    library_machine: llvm.TargetMachine
    """For shared libraries: the large code model too (measured on GMM: as fast as MCJIT code, and 10%
    faster than the small model), position-independent."""
    engine: llvm.ExecutionEngine
    objects: list[llvm.ObjectFileRef]
    """Loaded object files, kept alive with the engine."""


LLVM_OPTIONS = ("-hoist-runtime-checks=false",)
"""LLVM command-line options set once per process (process-wide: other llvmlite users in the process, such
as Numba, see them too). `-hoist-runtime-checks=false`: a vectorized inner loop's run-time overlap checks
stay at the inner loop's entry. Hoisted out of the loop around it, each pointer's range covers all of that
loop's iterations, so two rows of one array that the inner loop writes together (`d_W[o, i]` and
`d_W[o + 1, i]` in the reverse of a dense layer blocked by two outputs) always seem to overlap and the
scalar loop runs instead: the transformer's training step with dense layers blocked by two outputs took
33.6 ms with the checks hoisted and 18.1 ms without (2 layers, 2 threads; each figure measured in one
process beside the unblocked layers' 24.3 and 22.8 ms)."""


@functools.cache
def host() -> LLVMHost:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for option in LLVM_OPTIONS:
        llvm.set_option("isozyme", option)
    libm = ctypes.util.find_library("m")
    if libm:
        llvm.load_library_permanently(libm)
    if vector_variants("exp", 1):  # libmvec, found as the codegen finds it (it names its functions)
        llvm.load_library_permanently(LIBMVEC)
    target = llvm.Target.from_default_triple()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    machine = target.create_target_machine(cpu=cpu, features=features, opt=3, codemodel="jitdefault")
    library_machine = target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic",
                                                   codemodel="jitdefault")
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
    return LLVMHost(machine, library_machine, engine, [])


@functools.cache
def host_description() -> str:
    """Everything object code depends on besides its IR: versions, target triple, CPU and features."""
    features = llvm.get_host_cpu_features().flatten()
    version = ".".join(map(str, llvm.llvm_version_info))
    return (f"llvmlite {llvmlite.__version__}; LLVM {version}; {llvm.get_process_triple()}; "
            f"{llvm.get_host_cpu_name()}; {features}; {' '.join(LLVM_OPTIONS)}")


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


HUGE_BLOCK = 10_000
"""Instructions in one basic block beyond which a function's code is generated without optimization."""


def _generate_huge_blocks_fast(module: llvm.ModuleRef) -> None:
    """Mark `optnone` the functions with a block of more than HUGE_BLOCK instructions, so that their
    code is generated as at -O0 (fast instruction selection, no scheduling). Their IR went through O3
    already; code generation costs more than linear time in a block's size: the gradient of a
    10,000-term sum is one block of 78,000 instructions, 21 s to generate at -O3, 0.2 s so."""
    for function in module.functions:
        if function.is_declaration or any(b"alwaysinline" in attrs for attrs in function.attributes):
            continue
        if any(sum(1 for _ in islice(block.instructions, HUGE_BLOCK + 1)) > HUGE_BLOCK for block in function.blocks):
            function.add_function_attribute("noinline")  # optnone requires it
            function.add_function_attribute("optnone")


def emit_object(module: llvm.ModuleRef, position_independent: bool = False) -> bytes:
    """Object code for the host: for MCJIT (`load_object`), or position-independent for a shared library.
    Code generation may change `module`: emit it once."""
    state = host()
    _generate_huge_blocks_fast(module)
    return (state.library_machine if position_independent else state.target_machine).emit_object(module)


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
