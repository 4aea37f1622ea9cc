"""The runtime: the kernel object and its compile cache (`kernel.py`), argument checking (`arguments.py`),
the `llvm` backend (`llvm_backend.py`: cache keys and compilation; `llvm_jit.py`: LLVM and MCJIT;
`shared_library.py`: linking and loading compiled kernels; `native_call.py`: the per-kernel call path;
`disk_cache.py`, over `private_files.py`: a directory and files only this user may write; `host_identity.py`
and `source_key.py`: what the cache keys depend on, computed without LLVM), the interpreter backend, and
the `opencl` backend (`opencl_backend.py`: devices, programs and the host's side of a kernel's run;
`device_array.py`: `iz.to_device`). May import everything above it in DESIGN section 2."""
