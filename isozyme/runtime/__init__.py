"""The runtime: kernels and their derivatives, the `llvm`, `interp` and `opencl` backends, and the compile
caches.

May import: everything below it in DESIGN section 2, `isozyme.ssa`, `isozyme.frontend`, `isozyme.optimize`,
`isozyme.enzyme_ad`, `isozyme.codegen` (and none of the top-level modules, `isozyme/*.py`, which build on it).

Modules in layer order, highest first: a `- ` line starts a layer, the lines under it are the other modules of
that layer, which import each other not at all; each module imports only modules of lower layers, at the top
or deferred alike (`lint-imports` checks it against the contracts in `pyproject.toml`). The deferred imports
that remain keep optional or costly dependencies (pyopencl, llvmlite, ctypes, the code generators) off the
paths that do not need them, and all point down.
- `autodiff`: the differentiation API: `iz.autodiff`, `grad`, `fwddiff`, `hvp`; `Const`, `Duplicated`, `Active`
  `inspection`: `iz.show_ir` and `iz.show_cache`: the IR and code of a kernel or a derivative at each stage
  `memory_report`: `iz.show_memory`: the arena layout of a kernel's local arrays and tapes
- `compiled_derivatives`: `diffe_<f>`, `fwddiffe_<f>`, `fwddiffe_diffe_<f>` compiled per backend, cached on the kernel
- `kernel`: the kernel object: `@iz.kernel`, compiled per backend and pipeline; custom derivative rules
- `compile_log`: which kernels and derivatives a stretch of code used (what the pytest plugin prints)
  `race_detector`: the interpreter running parallel loops as a GPU may (`ISOZYME_CHECK_RACES`)
  `source_key`: a kernel's key from its sources, to load compiled code without lowering
  `llvm_backend`: the `llvm` backend: cache keys, compilation, loading compiled kernels
  `opencl_backend`: the `opencl` backend: programs, built and cached
- `opencl_runner`: the host's side of a kernel's run on OpenCL; replayed calls
- `native_call`: calling compiled kernels from Python: one generated function per kernel
  `host_identity`: what compiled code depends on besides its IR, described without loading LLVM
  `opencl_counters`: launch, allocation and bytes-moved counters of the `opencl` backend
  `profiler`: `iz.profile()` (`ISOZYME_PROFILE`): each OpenCL call's launches, copies and times
  `thread_pool`: the thread pool of `prange` loops on `llvm`; `iz.set_num_threads` (`ISOZYME_NUM_THREADS`)
  `opencl_launches`: enqueueing an OpenCL program's kernels, each argument set only where it changed
  `opencl_registers`: chained loop kernels held at the registers of unchained ones (`.maxnreg` in their PTX)
- `arguments`: checking a kernel's arguments at the call
  `disk_cache`: the on-disk cache of compiled code (`ISOZYME_CACHE_DIR`)
  `llvm_jit`: LLVM and MCJIT through llvmlite (imported only where compiling needs it)
- `device_array`: `iz.to_device` and `DeviceArray`: arrays in OpenCL buffers
  `private_files`: a directory and files only this user may write
  `shared_library`: compiled kernels linked and loaded as shared libraries
  `version`: isozyme's version (`pyproject.toml` reads it; every cache key holds it)
- `opencl_device`: pyopencl, imported on first use, and the OpenCL device kernels run on
  `environment`: the environment variables that choose compiled code, read fast enough for every call
"""
