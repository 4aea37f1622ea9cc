"""The frontend: annotation types (`annotations.py`), the intrinsics kernels may call (`intrinsics.py`),
and the lowering of a kernel's Python AST to SSA (`lowering.py` for statements, `expressions.py`,
`calls.py`) through dispatch tables keyed by `ast` node type, with SSA built directly by Braun et al. 2013
(`ssa_construction.py`) and Python's typing rules (`type_rules.py`). `compiler.py` turns a kernel and its
callees into one module. Diagnostics are `CompileError`s pointing at the source line with a caret
(`diagnostics.py`). May import: `isozyme.ssa`."""
