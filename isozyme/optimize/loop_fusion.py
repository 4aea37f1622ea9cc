"""loop-fusion: two adjacent loops over the same iteration space become one (DESIGN 4 and 6).

Fewer loops are fewer passes over memory on the CPU and fewer kernel launches on OpenCL, where a fused pair
of `prange` loops is one NDRange kernel. The pass runs after AD (`enzyme_ad/gradient.py`), where the
forward and reverse sweeps of a derivative put many loops side by side: layers written as helper kernels
and their epilogues, and the reverses of those, in the opposite order. The temporaries that fusion leaves
private to one iteration become values in the next pass, `scalarize_temporaries.py`.

Two loops L1 and L2 fuse when every condition of `loop_fusion_legality.py` holds (the iterations, the
shape, the values and the memory); anything it cannot prove, it leaves alone.

The fused loop runs L1's body, then L2's, per iteration: L2's header phis move to L1's header, its
induction variable becomes L1's, L1's back edge goes to L2's body and L2's back edge to L1's header (L1's
latch may belong to an inner loop: the edge redirected is the one towards L1's header), and L1's exit goes
to E2 (or to E1, which then goes to E2, when E1 keeps an epilogue); simplify-cfg merges the blocks that
can be merged. Inner loops that become adjacent fuse in turn.
One difference from running them apart: when an iteration of L2 raises an error, L1's later iterations
have not run, so what the error leaves in memory differs.
"""

from __future__ import annotations

import os

from isozyme.optimize.loop_canonicalization import insert_preheaders_and_latches
from isozyme.optimize.loop_fusion_legality import (
    Pair,
    adjacent_pair,
    body_entry,
    chain_top,
    fusible,
    header_computations,
)
from isozyme.ssa.builder import Builder
from isozyme.ssa.ir import Block, Function, Phi
from isozyme.ssa.loops import LoopNest


def fusion_enabled() -> bool:
    """Does loop fusion run after AD? Yes unless `ISOZYME_LOOP_FUSION` is 0, off, false or no (benchmarks
    turn it off to measure launches and bytes without it; the setting is part of every cache key)."""
    return os.environ.get("ISOZYME_LOOP_FUSION", "1").lower() not in ("0", "off", "false", "no")


def loop_fusion(function: Function) -> bool:
    """Fuse adjacent loops until no pair fuses (module docstring). When a loop has several latches
    (simplify-cfg folds empty ones away), loops get preheaders and single latches first, so the IR may
    change even when nothing fuses."""
    changed = False
    while True:
        if any(len(loop.latches) > 1 for loop in LoopNest(function)):
            changed |= insert_preheaders_and_latches(function)
        if not _fuse_one_pair(function):
            return changed
        changed = True


def _fuse_one_pair(function: Function) -> bool:
    nest = LoopNest(function)
    for first in nest:
        pair = adjacent_pair(first, nest)
        if pair is not None and fusible(pair):
            _fuse(pair)
            return True
    return False


def _fuse(pair: Pair) -> None:
    one, two = pair.one, pair.two
    loop_one, loop_two = one.loop, two.loop
    header_one, header_two = loop_one.header, loop_two.header
    latch_one, latch_two = loop_one.latches[0], loop_two.latches[0]
    body_two = body_entry(two)
    assert body_two is not None
    iv_one, iv_two = one.trip.iv.phi, two.trip.iv.phi
    function = header_one.function
    assert function is not None
    start = body_two.instructions[0]
    if pair.mirrored:  # L2 runs counting up: beside L1's counter v, its counter is v + 1
        iv_two.replace_all_uses_with(Builder().before(start).iadd(iv_one, 1))
    else:
        iv_two.replace_all_uses_with(iv_one)
    top_end = chain_top(one, pair.skips_one).terminator
    assert top_end is not None
    for inst in pair.hoisted:  # allocs and values E1 held: before L1
        inst.move_before(top_end)
    for inst in header_computations(two):
        inst.move_before(start)
    anchor = one.entering.terminator
    assert anchor is not None
    for block in pair.chain_two:  # L2's invariants now run before L1
        for inst in list(block.instructions[:-1]):
            inst.move_before(anchor)
    # L1's back edge now runs L2's body (L1's latch may also be an inner loop's block: the edge redirected
    # is the one towards L1's header), and L2's back edge returns to L1's header
    latch_one.terminator.replace_successor(header_one, body_two)  # type: ignore[union-attr]
    latch_two.terminator.replace_successor(header_two, header_one)  # type: ignore[union-attr]
    for phi in header_one.phis:
        phi.replace_incoming_block(latch_one, latch_two)
    for phi in header_two.phis:
        if phi is iv_two:
            continue
        moved = Phi(phi.type, name=phi.name, loc=phi.loc)
        moved.flags |= phi.flags
        header_one.insert(header_one.first_non_phi_index(), moved)
        moved.add_incoming(one.entering, phi.incoming_value(two.entering))
        moved.add_incoming(latch_two, phi.incoming_value(latch_two))
        phi.replace_all_uses_with(moved)
    if pair.sunk:
        _exit_through_e1(pair)
    else:
        _exit_to_e2(pair)


def _exit_to_e2(pair: Pair) -> None:
    """The fused loop leaves to E2, and E1 goes (when L1 can be skipped, then L2 is skipped too)."""
    one, two = pair.one, pair.two
    header_one, header_two = one.loop.header, two.loop.header
    # E2 is now reached from L1's header, and from E1 when L1 can be skipped (then L2 is skipped too)
    for phi in two.exit.phis:
        skipped = phi.incoming_value(pair.skips_two[0]) if pair.skips_two else None
        for block in pair.skips_two:
            phi.remove_incoming(block)
        phi.replace_incoming_block(header_two, header_one)
        if pair.skips_one:
            assert skipped is not None, "E1 is reached by a skip, so E2 has a skip edge too"
            phi.add_incoming(one.exit, skipped)
    header_one.terminator.replace_successor(one.exit, two.exit)  # type: ignore[union-attr]
    one.exit.terminator.erase()  # type: ignore[union-attr]
    dead = [header_two, *pair.chain_two]
    if pair.skips_one:
        Builder(one.exit).br(two.exit)
    else:
        dead.append(one.exit)
    _delete_blocks(dead)


def _exit_through_e1(pair: Pair) -> None:
    """The fused loop leaves to E1, which keeps L1's exit phis and the epilogue after them and then goes
    to E2: E2's values from L2 come through E1 (merged there with their values for a skipped L1)."""
    one, two = pair.one, pair.two
    header_one, header_two = one.loop.header, two.loop.header
    for phi in two.exit.phis:
        skipped = phi.incoming_value(pair.skips_two[0]) if pair.skips_two else None
        value = phi.incoming_value(header_two)
        for block in {*pair.skips_two, header_two}:
            phi.remove_incoming(block)
        if pair.skips_one:
            assert skipped is not None, "E1 is reached by a skip, so E2 has a skip edge too"
            merged = Phi(phi.type, name=phi.name, loc=phi.loc)
            one.exit.insert(0, merged)
            merged.add_incoming(header_one, value)
            for block in pair.skips_one:
                merged.add_incoming(block, skipped)
            value = merged
        phi.add_incoming(one.exit, value)
    one.exit.terminator.erase()  # type: ignore[union-attr]
    Builder(one.exit).br(two.exit)
    _delete_blocks([header_two, *pair.chain_two])


def _delete_blocks(dead: list[Block]) -> None:
    for block in dead:
        function = block.function
        assert function is not None
        for inst in list(block.instructions)[::-1]:
            inst.drop_operands()
        function.remove_block(block)
