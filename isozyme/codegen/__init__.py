"""Code generation: SSA to LLVM IR through `llvmlite.ir`, and SSA to OpenCL C, over what both backends share.

The modules in layer order, highest first. A module imports only modules of the layers below its own, and
the modules of one layer do not import each other (`lint-imports` checks it with a `layers` contract):

  1. llvm.py                 `emit_llvm`: a module's LLVM IR, entry points and error sites (drives the llvm_*)
     opencl_program.py       `emit_opencl`: a module's OpenCL program (drives the opencl_* modules)
  2. llvm_entry.py           the C entry points `__raw` and `__fast` of the entry kernel, called through ctypes
     llvm_lowerings.py       `LOWERINGS`: how each op becomes LLVM IR
     opencl_loop_kernels.py  a parallel loop as the body of one iteration and its NDRange kernel
  3. llvm_function.py        `FunctionEmitter`: the walk over one function's blocks; checks, element addresses
     opencl_serial.py        the entry function as the serial kernel, which yields to the host
  4. llvm_module.py          `ModuleEmitter`: the LLVM module, its declarations and shared helpers
     opencl_lowerings.py     `LOWERINGS`: how each op becomes C-style source
  5. llvm_types.py           the LLVM types of SSA values, `CodegenError`
     opencl_function.py      `FunctionRenderer`: the walk over one function after out-of-SSA
     opencl_control.py       what the host and the kernels agree on: control buffer words, requests, alloc sites
  6. opencl_language.py      C and OpenCL C details as class attributes (`CRenderer`, `OpenCLRenderer`)
     out_of_ssa.py           phis become copies, for the C-style renderers
     parallel_loops.py       which `prange` loops run as NDRange kernels, and how
  7. abi.py                  the contract with the runtime that needs no llvmlite (`CodegenOptions`, ...)
     address_spaces.py       the versions of a called function, one per address-space signature
     error_sites.py          where compiled code can fail, and the exception each failure becomes

May import: `isozyme.ssa`; `opencl_program.py` also imports `isozyme.optimize.function_attributes` (which
array parameters the entry writes). Only the llvm_* modules import llvmlite, and no other module here imports
them, so the OpenCL path (`opencl_program.py` and what it imports) never needs llvmlite. This file imports
no backend: the runtime imports `llvm.py` only when it generates code."""
