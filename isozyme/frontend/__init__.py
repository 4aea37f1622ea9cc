"""The frontend (not built yet): annotation types, `@iz.kernel`, and the lowering of a kernel's Python AST
to SSA through a dispatch table keyed by `ast` node type, with SSA built directly by Braun et al. 2013.
Diagnostics are `CompileError`s pointing at the source line with a caret. May import: `isozyme.ssa`."""
