"""scalarize-temporaries: a local array that loop fusion made private to one iteration becomes values.

A local array whose accesses
(loads and stores, and `dim`s) all lie in one block of a counted loop, at one index tuple that differs from
iteration to iteration (one index `a*v + s + c` with a != 0), holds in each element a value of one
iteration only. Walking the block, each load is replaced by the value last stored, and the array
disappears. A load before any store reads the element's value before the iteration: allowed only for
`iz.zeros` arrays (adjoints of temporaries) that each iteration leaves at +0.0, or that the loop reads only
once per allocation. So a layer's pre-activation array, written by one loop and read elementwise by the
next, becomes a value once the loops are fused, and so does its adjoint in the reverse sweep. As with
dce's unread arrays, the alloc's check of its extents goes with it.

Runs after the O2 that follows fusion (`enzyme_ad/gradient.py`); the counted loops and the affine index
forms are those of fusion (`loop_fusion_legality.py`). After it no scalarized array remains, and each load
it removed is replaced by the value the element held at that point of the iteration.
"""

from __future__ import annotations

from isozyme.optimize.fusion_dependence import indices_of
from isozyme.optimize.instcombine import is_constant
from isozyme.optimize.loop_canonicalization import insert_preheaders_and_latches
from isozyme.optimize.loop_fusion_legality import Candidate, affine_form, array_of, counted_loop
from isozyme.ssa.flags import ZEROED, accesses_element_of, is_growable_alloc
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Value
from isozyme.ssa.loops import LoopNest
from isozyme.ssa.ops import Op


def scalarize_private_arrays(function: Function) -> bool:
    """Replace each local array whose every access is in one block of a loop, at one index that differs
    from iteration to iteration, by the values stored into it; then the array disappears (module
    docstring). Loops with several latches get a single one first, as for fusion, so that
    their induction variables are known."""
    changed = False
    if any(len(loop.latches) > 1 for loop in LoopNest(function)):
        changed |= insert_preheaders_and_latches(function)
    nest = LoopNest(function)
    for alloc in [inst for inst in function.instructions() if inst.op is Op.ALLOC]:
        block = _private_block(alloc, nest)
        if block is not None:
            _scalarize(alloc, block)
            changed = True
    return changed


def _private_block(alloc: Instruction, nest: LoopNest) -> Block | None:
    """The block where the accesses of `alloc` can be replaced by values, or None."""
    if is_growable_alloc(alloc) or any(use.user.op is not Op.DIM
                                       and not accesses_element_of(use.user, alloc, (Op.LOAD, Op.STORE))
                                       for use in alloc.uses):
        return None
    accesses = [use.user for use in alloc.uses if use.user.op is not Op.DIM]
    if not accesses or len({inst.block for inst in accesses}) != 1:
        return None
    block = accesses[0].block
    loop = nest.loop_of(block)  # type: ignore[arg-type]
    if loop is None or len({indices_of(inst) for inst in accesses}) != 1:
        return None
    candidate = counted_loop(loop)
    if candidate is None or not any(_varies(index, candidate) for index in indices_of(accesses[0])):
        return None  # one element touched by several iterations: its value carries over
    ordered = [inst for inst in block.instructions if inst in set(accesses)]
    if ordered[0].op is Op.STORE:
        return block  # every iteration writes its element before reading it
    # the first access reads the element's value before the iteration: that of `iz.zeros`, if every
    # iteration leaves 0.0 behind or the loop runs once per execution of the alloc
    if ZEROED not in alloc.flags:
        return None
    last = [inst for inst in ordered if inst.op is Op.STORE][-1:]
    restores = bool(last) and is_constant(last[0].operands[0], 0.0)  # +0.0, not -0.0
    once = nest.loop_of(alloc.block) is loop.parent  # type: ignore[arg-type]
    return block if restores or once else None


def _varies(index: Value, candidate: Candidate) -> bool:
    """Is the index `a*k + s + c` with a != 0: a different element in each iteration?"""
    form = affine_form(index, candidate)
    return form is not None and form[0] != 0


def _scalarize(alloc: Instruction, block: Block) -> None:
    element = alloc.type.element  # type: ignore[attr-defined]
    current: Value | None = Constant(element, 0.0 if element.is_float else 0) if ZEROED in alloc.flags else None
    for inst in [i for i in block.instructions if i.op in (Op.LOAD, Op.STORE) and array_of(i) is alloc]:
        if inst.op is Op.STORE:
            current = inst.operands[0]
        else:
            assert current is not None, "checked: the first access stores, or the array is zeroed"
            inst.replace_all_uses_with(current)
        inst.erase()
    for use in list(alloc.uses):
        dim = use.user
        dim.replace_all_uses_with(alloc.operands[dim.attrs["axis"]])
        dim.erase()
    alloc.erase()
