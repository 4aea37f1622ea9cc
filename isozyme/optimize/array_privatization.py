"""privatize-arrays: a local array of which each iteration of a `prange` loop uses a slice of its own becomes
an array of the iteration (array contraction).

After AD, the adjoint of an activation `act[layer, b, s, f]` that a transformer layer's `prange` over the
batch (`b`) computes is `d_act = alloc f64[L, B, S, F] zeroed`, allocated for the whole call, though each
iteration of the reverse loop over the batch, in each iteration of the reverse loop over the layers, only
ever touches its own slice `d_act[layer, b]`. Allocated inside the `prange` loop as
`alloc f64[S, F] zeroed`, the adjoint is one slice per work item: on the CPU a task allocates it once and
zeroes it again per iteration (`codegen/llvm_worker.py`), so the call holds one slice per thread where it
held L * B of them, and the slice that the iteration works on stays in the core's cache.

The array `A` contracts into loop `P` (a loop whose header has a phi flagged `parallel`) when:

  - A is an `alloc` (not growable) outside P, whose uses are `dim`s and accesses (loads, stores, atomic
    adds of A's elements) and every access lies in P, outside the header of P and of the loops between;
  - for P and for each loop between P and the alloc (the loops that contain P but not the alloc: they run
    P again with the same A), some index position holds, in every access, one value that is that loop's
    counter (`fusion_dependence.counts_iterations`: `0, 1, ... < t` or a reverse loop's `v - 1`) with its
    trip count at most the extent there. Those positions pin one slice per iteration of the loops: no
    iteration sees an element that another one touched, and the indices there are in bounds (the accesses
    lose those indices, and their checks with them);
  - some position is left.

Each iteration then finds its slice as the alloc left it (zeros for a `zeroed` alloc, undefined ones for
an `iz.empty`), which is what a fresh alloc of the remaining extents, with the same flags, gives it; after the
iteration nothing reads the slice again. The new alloc goes to the nearest common dominator of the accesses
that lies in P outside its inner loops (so it runs once per iteration); a `dim` of A becomes A's extent.

Where codegen runs P serially after all (a loop it cannot run in parallel, `codegen/parallel_loops.py`),
the slice is allocated at each execution of its alloc, as any alloc in a loop that the arena does not hold
(`memory_reuse.py`): slower, and on LLVM held until the call returns, but the same result.

Runs after fusion, on derivatives (`enzyme_ad/gradient.py`), before `sink-allocs`. Requires verified SSA and
reducible control flow (it does nothing otherwise); keeps the SSA valid. Loops with several latches (O2's
simplify-cfg folds empty latches away) get a single one first, as for fusion, so that their trip counts
are known.
"""

from __future__ import annotations

import functools

from isozyme.optimize.fusion_dependence import affine_form, counts_iterations, indices_of
from isozyme.optimize.loop_canonicalization import insert_preheaders_and_latches
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.flags import GROWABLE, PARALLEL, accesses_element_of
from isozyme.ssa.ir import Block, Function, Instruction, Value
from isozyme.ssa.loops import Loop, LoopNest, has_irreducible_control_flow
from isozyme.ssa.ops import Op
from isozyme.ssa.trip_count import TripCount, analyze_trip_count, bounded_by, same_value
from isozyme.ssa.types import ArrayType

KEPT_FLAGS = frozenset({"zeroed"})
"""The alloc flags the contracted array keeps: how it starts. (`tape` and `private` describe how an array
allocated before a parallel loop is shared by its iterations, which no longer applies.)"""


def privatize_arrays(function: Function) -> bool:
    """Contract every local array that the iterations of a `prange` loop use one slice each of (module
    docstring); True if any was."""
    tree = DominatorTree(function)
    if has_irreducible_control_flow(function, tree):
        return False
    changed = False
    if any(len(loop.latches) > 1 for loop in LoopNest(function, tree)):  # their trip counts, as for fusion
        changed = insert_preheaders_and_latches(function)
        tree = DominatorTree(function)
    nest = LoopNest(function, tree)
    for alloc in [inst for inst in function.instructions() if inst.op is Op.ALLOC]:
        found = _contraction(alloc, nest, tree)
        if found is not None:
            _contract(alloc, *found)
            changed = True
    return changed


def _contraction(alloc: Instruction, nest: LoopNest, tree: DominatorTree
                 ) -> tuple[list[int], list[Instruction], Block] | None:
    """The index positions the array loses, its accesses, and the block of the `prange` loop where the slice
    is allocated; or None."""
    rank = alloc.type.rank  # type: ignore[attr-defined]
    if GROWABLE in alloc.flags or rank < 2:
        return None
    accesses = [use.user for use in alloc.uses if use.user.op is not Op.DIM]
    if not accesses or not all(accesses_element_of(inst, alloc) for inst in accesses):
        return None
    loop = _parallel_loop_around(accesses, nest)
    home = nest.loop_of(alloc.block)  # type: ignore[arg-type]
    if loop is None or loop.contains(alloc.block) or (home is not None and not home.contains(loop)):  # type: ignore[arg-type]
        return None
    positions: list[int] = []
    current: Loop | None = loop
    while current is not None and current is not home:
        position = _counter_position(alloc, accesses, current, positions)
        if position is None:
            return None
        positions.append(position)
        current = current.parent
    home_block = _home_block(accesses, loop, nest, tree)
    return (positions, accesses, home_block) if len(positions) < rank and home_block is not None else None


def _parallel_loop_around(accesses: list[Instruction], nest: LoopNest) -> Loop | None:
    """The innermost `prange` loop that holds every access."""
    loop = nest.loop_of(accesses[0].block)  # type: ignore[arg-type]
    while loop is not None:
        if any(PARALLEL in phi.flags for phi in loop.header.phis) and all(inst.block in loop for inst in accesses):
            return loop
        loop = loop.parent
    return None


def _counter_position(alloc: Instruction, accesses: list[Instruction], loop: Loop, taken: list[int]) -> int | None:
    """A position (not `taken`) where every access indexes with one value, `loop`'s counter, within the
    extent there; None if there is none, or if an access lies in the loop's header."""
    trip = analyze_trip_count(loop)
    if not isinstance(trip, TripCount) or any(inst.block is loop.header for inst in accesses):
        return None
    first = indices_of(accesses[0])
    for position, counter in enumerate(first):
        if position in taken or any(indices_of(inst)[position] is not counter for inst in accesses):
            continue
        if _numbers_iterations(counter, loop, trip, alloc.operands[position]):
            return position
    return None


def _numbers_iterations(index: Value, loop: Loop, trip: TripCount, extent: Value) -> bool:
    """Is `index` in [0, extent), and different in each iteration of `loop`: its counter
    (`counts_iterations`), or, for a loop counting k = 0, 1, ... < t with t at most the extent, k itself or
    t - 1 - k (the index of a reverse loop, which loop canonicalization made count up)?"""
    if counts_iterations(index, trip, False, extent):
        return True
    if not trip.is_canonical or not bounded_by(trip.bound, extent):
        return False
    form = affine_form(index, loop, trip.iv.phi)
    if form == (1, None, 0):
        return True
    return form is not None and form[0] == -1 and form[2] == -1 and same_value(form[1], trip.bound)


def _contract(alloc: Instruction, positions: list[int], accesses: list[Instruction], home: Block) -> None:
    """Allocate the slice in `home`, index it without `positions`, and delete `alloc`."""
    kept = [extent for position, extent in enumerate(alloc.operands) if position not in positions]
    slice_ = Instruction(ArrayType(alloc.type.element, len(kept)), op=Op.ALLOC, operands=tuple(kept),  # type: ignore[attr-defined]
                         flags=alloc.flags & KEPT_FLAGS, name=alloc.name, loc=alloc.loc)
    anchor = next((inst for inst in home.instructions if inst in set(accesses)), home.terminator)
    home.insert_before(anchor, slice_)  # type: ignore[arg-type]
    for inst in accesses:
        start = 1 if inst.op is Op.LOAD else 2  # the first index: after the array (and a stored value)
        for position in sorted(positions, reverse=True):
            inst.remove_operand(start + position)
        inst.set_operand(start - 1, slice_)
    for use in list(alloc.uses):
        dim = use.user
        dim.replace_all_uses_with(alloc.operands[dim.attrs["axis"]])  # type: ignore[index]
        dim.erase()
    alloc.erase()


def _home_block(accesses: list[Instruction], loop: Loop, nest: LoopNest, tree: DominatorTree) -> Block | None:
    """The nearest common dominator of the accesses, or the nearest block above it in `loop` itself (not in
    an inner loop): it runs once per iteration, before every access. Not the header, which runs once more
    (to leave): its only successor in the loop instead; None if it has several."""
    block: Block = functools.reduce(tree.nearest_common_dominator, [inst.block for inst in accesses])  # type: ignore[arg-type]
    while nest.loop_of(block) is not loop:
        block = tree.idom[block]  # type: ignore[assignment]
    if block is loop.header:
        inside = [successor for successor in block.successors if successor in loop]
        return inside[0] if len(inside) == 1 and nest.loop_of(inside[0]) is loop else None
    return block
