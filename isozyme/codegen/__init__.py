"""Code generation (not built yet): out-of-SSA, SSA to LLVM IR through llvmlite, SSA to OpenCL C.
May import: `isozyme.ssa`. Backends are imported lazily so the OpenCL path never needs llvmlite."""
