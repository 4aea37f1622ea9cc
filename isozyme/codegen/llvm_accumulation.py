"""An adjoint's add into memory as one chain of fused multiply-adds, where the fast-math flags allow it.

Reverse mode accumulates products into memory: in the reverse of `a00 += w0 * x0; a01 += w0 * x1; ...`,
the weight's adjoint gets `d_W[o, i] += da00 * x0 + da01 * x1 + da02 * x2 + da03 * x3` (an SSA `atomic_add`
of a tree of `fadd`s over `fmul`s), and in the reverse of `y[i] = s * x[i]`, `d_x[i] += s * d_y[i]`. Lowered
as written, the four-product sum is a multiply, three fused multiply-adds (with "contract") and one more add
for the element's old value, five floating-point operations for four products; the one product a multiply
and an add (the add into memory carries no flags, so LLVM may not contract it). With "reassoc" and
"contract" the sum may be reordered and contracted, so it becomes a chain that starts from the old value,
`fmuladd(da03, x3, fmuladd(..., fmuladd(da00, x0, old)))`: one operation per product. LLVM's reassociation
would put the old value last again (it ranks a load after arithmetic), so the chain is made of
`llvm.fmuladd` calls, which it leaves as they are and the code generator makes FMA instructions.

Measured on the reverse of the transformer's blocked dense layers (2-core AVX-512 Xeon, `dense_part` of
`benchmarks/transformer_parts.py` alone, 200 calls, before and after in alternating processes, twice): the
inner loop went from 40 to 32 vector operations per 32 products, and the gradients of qkv and fc1 from
1.31-1.36 to 1.28-1.33 ms and 1.68-1.75 to 1.62-1.68 ms; fc2's moved within its noise, and so did the
whole training step's. The loop is bound by its loads and stores as much as by its arithmetic.

Only where the chain costs nothing more and needs nothing the add does not have at hand:
- the tree's inner `fadd`s and the fused products are used only by the tree and are in the add's own
  block (a sum or product computed once outside a loop is not recomputed per iteration, and its operands
  need not be at hand in a `prange` loop's worker);
- the element's address changes with the innermost loop around the add (an index is computed in that
  loop). An address the loop does not change is a sum that LLVM can keep in a register across the
  iterations, and a chain through it would put every product on the loop-carried path instead of one add.
  An add in no loop has no carried path.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from isozyme.ssa.ir import Instruction, Value
from isozyme.ssa.loops import LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.trip_count import is_loop_invariant

FUSING_FLAGS = ("reassoc", "contract")
"""Fast-math flags that allow the chain (each one, or "fast")."""


def fuses(fmf: tuple[str, ...]) -> bool:
    """Whether the kernel's fast-math flags allow reordering the sum and contracting its products."""
    return "fast" in fmf or all(flag in fmf for flag in FUSING_FLAGS)


def summands(value: Value, block: object) -> list[Value]:
    """The terms of the tree of single-use `fadd`s in `block` rooted at `value`, left to right."""
    if isinstance(value, Instruction) and value.op == Op.FADD and value.block is block and len(value.uses) == 1:
        return [term for operand in value.operands for term in summands(operand, block)]
    return [value]


def is_product(term: Value, block: object) -> bool:
    """A multiply in `block` used only by the sum: it becomes the multiply of a fused multiply-add. One in
    another block stays a term (its factors need not be at hand where the add is: a product computed
    before a `prange` loop reaches the loop's worker function as a value, without its factors)."""
    return isinstance(term, Instruction) and term.op == Op.FMUL and term.block is block and len(term.uses) == 1


def address_varies(inst: Instruction, indices: list[Value], loops: LoopNest) -> bool:
    """Whether an index of `inst`'s element is computed in the innermost loop around `inst` (True outside
    loops: no iteration carries the sum)."""
    loop = loops.loop_of(inst.block)
    if loop is None:
        return True
    return not all(is_loop_invariant(index, loop) for index in indices)


def fused_sum(builder: ir.IRBuilder, old: ir.Value, terms: list[Value], block: object,
              operand: Callable[[Value], ir.Value], fmf: tuple[str, ...]) -> ir.Value:
    """`old` plus every term, in order: a product of `block` used only here as an `llvm.fmuladd` into the
    running sum, any other term as an `fadd` with the kernel's flags."""
    module = builder.module
    fmuladd = module.declare_intrinsic("llvm.fmuladd", [old.type], ir.FunctionType(old.type, [old.type] * 3))
    total = old
    for term in terms:
        if is_product(term, block):
            left, right = (operand(factor) for factor in term.operands)
            total = builder.call(fmuladd, [left, right, total])
        else:
            total = builder.fadd(total, operand(term), flags=fmf)
    return total
