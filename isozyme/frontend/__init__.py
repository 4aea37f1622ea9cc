"""The frontend: a kernel's Python AST to SSA, through dispatch tables keyed by `ast` node type, with SSA
built directly by Braun et al. 2013 and Python's typing rules. Diagnostics are `CompileError`s pointing at
the source line with a caret. May import: `isozyme.ssa`.

Modules in layer order, highest first: a `- ` line starts a layer, the lines under it are the other modules of
that layer, which import each other not at all; each module imports only modules of lower layers
(`lint-imports` checks it against the contracts in `pyproject.toml`).
- `compiler`: a kernel and its callees into one module (signatures, type-inference rounds, static reads)
- `lowering`: statements and structured control flow (`KernelLowering`)
- `calls`: calls of intrinsics and of other kernels (`CallLowering`)
- `expressions`: expressions, operators and short-circuit control flow (`ExpressionLowering`)
- `lowering_state`: what lowering one kernel keeps: builder, blocks, variables, names outside the kernel
- `definitions`: the kernel before compilation, and what its lowering asks of the module compiler
  `intrinsics`: the functions kernels may call (math, `min`/`max`, `iz.zeros`, ...)
  `ssa_construction`: SSA built directly with phis (Braun et al. 2013)
  `type_rules`: promotion, conversions and weak constants
- `annotations`: the annotation types (`f64`, `Array[f64, 2]`)
  `diagnostics`: `CompileError` and the kernel's source text
"""
