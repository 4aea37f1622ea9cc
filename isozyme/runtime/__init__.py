"""The runtime (not built yet): argument checking, the JIT engine, OpenCL contexts and buffers, the
compile cache and dispatch. May import everything above it in DESIGN section 2."""
