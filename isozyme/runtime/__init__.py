"""The runtime: the kernel object and its compile cache (`kernel.py`), argument checking (`arguments.py`),
the `llvm` backend (`llvm_backend.py`: cache keys and compilation; `llvm_jit.py`: LLVM and MCJIT;
`shared_library.py`: linking and loading compiled kernels; `native_call.py`: the per-kernel call path;
`disk_cache.py`; `host_identity.py` and `source_key.py`: what the cache keys depend on, computed without
LLVM), and the interpreter backend. OpenCL arrives with its issue. May import everything above it in
DESIGN section 2."""
