"""The optimizer (DESIGN section 4): one pass per file, the pass registry and the pipelines `O0`, `O1`, `O2`.

May import: `isozyme.ssa` (and no other isozyme package).

Modules in layer order, highest first: a `- ` line starts a layer, the lines under it are the other modules of
that layer, which import each other not at all; each module imports only modules of lower layers
(`lint-imports` checks it against the contracts in `pyproject.toml`).
- `pass_manager`: the registry of passes by short name, the pipelines, instrumentation
  `memory_peak`: the peak of a function's local memory with its calls' frames (`iz.show_memory`)
- `alloc_sinking`: sink-allocs, each alloc down to where its uses begin
  `array_privatization`: privatize-arrays, an array of which each prange iteration uses its own slice
  allocated in the loop, one slice large
  `common_subexpression_elimination`: cse, dominator-scoped value numbering of pure ops and loads
  `constant_folding`: const-fold, instructions with constant operands evaluated
  `dead_code_elimination`: dce, instructions whose results nothing live uses deleted
  `function_attributes`: func-attrs, readnone/readonly/argmemonly bottom-up over the call graph
  `inline`: inline, calls of small non-recursive functions of the module
  `jump_threading`: jump-threading, branches an earlier branch decided folded
  `loop_fusion`: loop-fusion, the rewrite fusing two adjacent loops into one
  `loop_invariant_code_motion`: licm, loop-invariant instructions hoisted into the preheader
  `mem2reg`: mem2reg, local arrays at constant indices promoted to SSA values
  `memory_reuse`: memory-reuse, local arrays as views of one arena per call; `plan_memory`
  `scalarize_temporaries`: scalarize-temporaries, arrays private to one loop iteration as values
- `loop_canonicalization`: loop-canon, preheaders, single latches, dedicated exits, 0-based IVs
  `loop_fusion_legality`: which adjacent loops may fuse: shape, guards, the dependence test
  `memory_extents`: buffer extents known at the start, evaluated for given arguments
  `memory_liveness`: where each local array's contents matter (aliases, liveness)
  `simplify_cfg`: simplify-cfg, constant branches folded, blocks dropped and merged
- `call_graph`: call sites and strongly connected components, callees first
  `fusion_dependence`: loop fusion's dependence test (affine indices, row-major tape positions)
  `instcombine`: instcombine, algebraic identities from a rule table keyed by op
  `memory_effects`: the memory model: array roots, aliasing, what calls read and write
  `memory_layout`: memory plans: buffers, slots by interval colouring, arena offsets
  `value_ranges`: bounds of the integers that size arrays
"""
