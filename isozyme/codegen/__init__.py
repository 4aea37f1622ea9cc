"""Code generation: SSA to LLVM IR through `llvmlite.ir` (`llvm.py`, entry points in `llvm_entry.py`) and the
run-time error sites both backends share (`error_sites.py`); out-of-SSA and OpenCL C arrive with their issue.
May import: `isozyme.ssa`. Backends are imported lazily so the OpenCL path never needs llvmlite."""
