"""The optimizer: one pass per file, the pass registry and the pipelines `O0`, `O1`, `O2`.

Built so far: the pass manager (`pass_manager.py`) and `dce`. The scalar passes of DESIGN section 4
(simplify-cfg, const-fold, instcombine, cse, licm, inline, func-attrs, loop-canon, mem2reg) and loop
fusion and memory reuse come with their issues. May import: `isozyme.ssa`."""
