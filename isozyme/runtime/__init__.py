"""The runtime: the kernel object and its compile cache (`kernel.py`), argument checking (`arguments.py`)
and dispatch to a backend (the interpreter for now; the LLVM JIT and OpenCL arrive with their issues).
May import everything above it in DESIGN section 2."""
