"""Code generation: SSA to LLVM IR through `llvmlite.ir`, and SSA to OpenCL C, over what both backends share.

May import: `isozyme.ssa`. Only the llvm_* modules import llvmlite, and no other module here imports them, so
the OpenCL path (`opencl_program.py` and what it imports) never needs llvmlite (`lint-imports` checks it).
This file imports no backend: the runtime imports `llvm.py` only when it generates code.

Modules in layer order, highest first: a `- ` line starts a layer, the lines under it are the other modules of
that layer, which import each other not at all; each module imports only modules of lower layers
(`lint-imports` checks it against the contracts in `pyproject.toml`).
- `llvm`: `emit_llvm`: a module's LLVM IR, entry points and error sites (drives the llvm_*)
  `opencl_program`: `emit_opencl`: a module's OpenCL program (drives the opencl_* modules)
- `llvm_worker`: a threaded `prange` loop's worker and task functions
- `llvm_entry`: the C entry points `__raw` and `__fast` of the entry kernel, called through ctypes
  `llvm_lowerings`: `LOWERINGS`: how each op becomes LLVM IR
  `llvm_parallel`: `prange` loops on the thread pool: which, and the dispatch that replaces each
  `opencl_loop_kernels`: a parallel loop as the body of one iteration and its NDRange kernel
- `llvm_function`: `FunctionEmitter`: the walk over one function's blocks; checks, element addresses
  `opencl_serial`: the entry function as the serial kernel, which yields to the host
- `llvm_arena_cache`: the arena's block, kept between calls
  `opencl_lowerings`: `LOWERINGS`: how each op becomes C-style source
- `llvm_block_pool`: other large blocks of local arrays, kept between calls in a pool per module
- `llvm_module`: `ModuleEmitter`: the LLVM module, its declarations and shared helpers
- `llvm_types`: the LLVM types of SSA values
  `llvm_alias_scopes`: alias scopes that tell the arena's slots apart
  `llvm_vector_math`: "afn" math functions with their vector versions (glibc's libmvec)
  `llvm_accumulation`: an adjoint's add of products into memory as one chain of fused multiply-adds
  `opencl_function`: `FunctionRenderer`: the walk over one function after out-of-SSA
  `opencl_control`: what the host and the kernels agree on: control buffer words, requests, alloc sites
  `serial_liveness`: which scalars the serial kernel saves and restores across each yield to the host
- `opencl_language`: C and OpenCL C details as class attributes (`CRenderer`, `OpenCLRenderer`)
  `out_of_ssa`: phis become copies, for the C-style renderers
  `parallel_loops`: which `prange` loops run as NDRange kernels, and how
- `abi`: the contract with the runtime that needs no llvmlite (`CodegenOptions`, ...)
  `address_spaces`: the versions of a called function, one per address-space signature
  `error_sites`: where compiled code can fail, and the exception each failure becomes
  `llvm_thread_pool`: the thread pool's LLVM IR (POSIX threads), compiled once per process
  `injective_indices`: which index values tell a parallel loop's work items apart
"""
