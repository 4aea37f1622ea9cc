"""The optimizer: one pass per file, the pass registry and the pipelines `O0`, `O1`, `O2` (DESIGN section
4). `pass_manager.py` holds the registry; the passes are simplify-cfg, const-fold, instcombine, cse, licm,
dce, inline, func-attrs, loop-canon and mem2reg. Loop fusion and memory reuse come with their issue. May
import: `isozyme.ssa`."""
