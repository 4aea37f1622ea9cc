"""The runtime: the kernel object and its compile cache (`kernel.py`), argument checking (`arguments.py`),
the `llvm` backend (`llvm_backend.py`: cache keys and compilation; `llvm_jit.py`: LLVM and MCJIT;
`native_call.py`: the per-kernel call path; `disk_cache.py`), and the interpreter backend. OpenCL arrives
with its issue. May import everything above it in DESIGN section 2."""
