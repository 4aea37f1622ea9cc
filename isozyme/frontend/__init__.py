"""The frontend: a kernel's Python AST to SSA, through dispatch tables keyed by `ast` node type, with SSA
built directly by Braun et al. 2013 and Python's typing rules. Diagnostics are `CompileError`s pointing at
the source line with a caret. May import: `isozyme.ssa`.

Modules in layer order, highest first; each imports only modules on lines below it (`lint-imports` checks):
- `compiler`: a kernel and its callees into one module (signatures, type-inference rounds, static reads)
- `lowering`: statements and structured control flow (`KernelLowering`)
- `calls`: calls of intrinsics and of other kernels (`CallLowering`)
- `expressions`: expressions, operators, short-circuit control flow (`ExpressionLowering`)
- `lowering_state`: what lowering one kernel keeps: builder, blocks, variables, names outside the kernel
- `definitions`, `intrinsics`, `ssa_construction`, `type_rules`: the kernel before compilation and what its
  lowering asks of the module compiler; the functions kernels may call; SSA construction with phis;
  promotion and conversion rules
- `annotations`, `diagnostics`: the annotation types (`f64`, `Array[...]`); `CompileError` and source text
"""
