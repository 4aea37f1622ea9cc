"""The runtime: kernels, their derivatives, the `llvm`, `interp` and `opencl` backends, and the compile caches.

Its modules in layer order, highest first, one line each. A module imports only modules of the layers
below its own, never one above it or a sibling (`|`) in its own layer, at the top of the module or deferred
alike (the deferred imports that remain keep optional or costly dependencies, pyopencl, llvmlite, ctypes
and the code generators, off the paths that do not need them, and all point down). An import-linter
`layers` contract with this order checks it.

    autodiff | inspection | memory_report
      autodiff.py              the differentiation API: iz.autodiff, grad, fwddiff, hvp; Const, Duplicated, Active
      inspection.py            iz.show_ir and iz.show_cache: IR and code of a kernel or derivative at each stage
      memory_report.py         iz.show_memory: the arena layout of a kernel's local arrays and tapes
    compiled_derivatives       diffe_f, fwddiffe_f, fwddiffe_diffe_f compiled per backend, cached on the kernel
    kernel                     the kernel object: @iz.kernel, compile per backend and pipeline, custom rules
    compile_log | race_detector | source_key | llvm_backend | opencl_backend
      compile_log.py           which kernels and derivatives a stretch of code used (the pytest plugin's record)
      race_detector.py         the interpreter running parallel loops as a GPU may (ISOZYME_CHECK_RACES)
      source_key.py            a kernel's key from its sources, to load compiled code without lowering
      llvm_backend.py          the llvm backend: cache keys, compilation, loading compiled kernels
      opencl_backend.py        the opencl backend: programs and the host's side of a kernel's run
    native_call | host_identity | opencl_counters
      native_call.py           calling compiled kernels from Python: one generated function per kernel
      host_identity.py         what compiled code depends on besides its IR, computed without LLVM
      opencl_counters.py       launch, allocation and bytes-moved counters of the opencl backend
    arguments | disk_cache | llvm_jit
      arguments.py             argument checking against a kernel's parameters
      disk_cache.py            the on-disk cache of compiled code (ISOZYME_CACHE_DIR)
      llvm_jit.py              LLVM and MCJIT through llvmlite (imported only where compiling needs it)
    device_array | private_files | shared_library | version
      device_array.py          iz.to_device and DeviceArray: arrays in OpenCL buffers
      private_files.py         a directory and files only this user may write
      shared_library.py        linking and loading compiled kernels as shared libraries
      version.py               isozyme's version (pyproject reads it; every cache key holds it)
    opencl_device              pyopencl, imported on first use, and the OpenCL device kernels run on

The package may import everything below it in DESIGN section 2 (ssa, frontend, optimize, enzyme_ad,
codegen) and none of the top-level modules (`isozyme/*.py`), which build on it.
"""
