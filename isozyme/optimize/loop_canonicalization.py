"""loop-canon: put every natural loop in the canonical form that licm and the AD rely on (DESIGN 4 and 5).

After loop-canon every natural loop (`ssa/loops.py`) has

  1. a preheader: the header's only entering block, outside the loop, whose only successor is the header;
  2. a single latch: several back edges are merged into one new latch block;
  3. dedicated exits: every exit block has all its predecessors (reachable or not) inside the loop;

and, where it is cheap,

  4. a 0-based step-1 induction variable: a counted loop (`ssa/trip_count.py`) with a constant step that is
     not of that form gets `%k = phi [pre: 0, latch: %k.next]`, `%k.next = iadd %k, 1` and the exit test
     `icmp.slt %k, %trip` (`icmp.ne` for an `ne` loop), `%trip` computed in the preheader; the old IV
     becomes `a + k*s` at the top of the header. This assumes the old IV does not wrap, as the trip count
     does (trip_count.py); a loop that relied on wrapping runs another number of times afterwards.
  5. an entry guard: a loop that may run zero times (`loop_runs_at_least_once` cannot prove otherwise),
     whose header is its only exiting block, computes its exit test with scalar ops and has no other
     effect (no store, call, load or trap besides that test), is put behind a copy of that test: the old
     preheader evaluates it on the header phis' entry values and branches to the exit block when it
     fails, or to a new, empty preheader. Header values used after the loop meet their entry values in a
     phi at the exit block. Code in the preheader then runs only when the loop body does, so licm may
     hoist a trapping instruction (a call, a division) there without speculating it (LLVM gets the same
     from loop rotation). Each loop is guarded once: the guard is what `loop_runs_at_least_once`
     recognizes.

New blocks take name hints from the header (`bb1.preheader`, `bb1.latch`, `bb3.loopexit`). Requires
verified SSA; keeps it verified. Irreducible cycles are not natural loops and are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from isozyme.ssa.builder import Builder
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.loops import Loop, LoopNest
from isozyme.ssa.ops import OP_INFO, Op
from isozyme.ssa.trip_count import (
    NEGATED_PREDICATE,
    IntegerArithmetic,
    TripCount,
    analyze_trip_count,
    constant_key,
    header_exit_test,
    is_scalar_op,
    loop_entry_test_value,
    loop_runs_at_least_once,
)
from isozyme.ssa.types import I64

LoopFix = Callable[[Loop, LoopNest], bool]
"""Fixes one loop of a fresh loop nest; returns whether it changed the function (the nest is then stale)."""


# --- splitting edges --------------------------------------------------------------------------------------


def _name(block: Block, suffix: str) -> str:
    return f"{block.name}.{suffix}" if block.name else suffix


def _same_value(a: Value, b: Value) -> bool:
    if isinstance(a, Constant) and isinstance(b, Constant):
        return a.type == b.type and constant_key(a.type, a.value) == constant_key(b.type, b.value)
    return a is b


def split_edges(sources: list[Block], target: Block, name: str, after: Block) -> Block:
    """Route the edges from `sources` to `target` through a new block placed after `after`.

    Each phi of `target` gets one entry for the new block: the sources' common value, or a new phi in the
    new block that merges them."""
    block = target.function.add_block(name, after=after)  # type: ignore[union-attr]
    for source in sources:
        source.terminator.replace_successor(target, block)  # type: ignore[union-attr]
    builder = Builder(block)
    for phi in target.phis:
        values = [phi.incoming_value(source) for source in sources]
        merged = values[0] if all(_same_value(v, values[0]) for v in values) else \
            builder.phi(phi.type, zip(sources, values), name=phi.name)
        # The first source's entry becomes the new block's, so incoming lists keep their order.
        for source in sources[1:]:
            phi.remove_incoming(source)
        phi.set_incoming_value(sources[0], merged)
        phi.replace_incoming_block(sources[0], block)
    builder.br(target)
    return block


def _block_before(block: Block) -> Block:
    blocks = block.function.blocks  # type: ignore[union-attr]
    return blocks[blocks.index(block) - 1]


# --- 1-3: structure ----------------------------------------------------------------------------------------


def make_preheader(loop: Loop) -> Block:
    """A new preheader for `loop`, placed just before the header: its entering edges now go through it."""
    return split_edges(loop.entering_blocks, loop.header, _name(loop.header, "preheader"),
                       _block_before(loop.header))


def _insert_preheader(loop: Loop, nest: LoopNest) -> bool:
    if loop.preheader is not None:
        return False
    make_preheader(loop)
    return True


def _merge_latches(loop: Loop, nest: LoopNest) -> bool:
    if len(loop.latches) < 2:
        return False
    split_edges(loop.latches, loop.header, _name(loop.header, "latch"), loop.latches[-1])
    return True


def _dedicate_exits(loop: Loop, nest: LoopNest) -> bool:
    preds = nest.tree.preds
    changed = False
    for exit_block in loop.exit_blocks:
        inside = [pred for pred in preds[exit_block] if pred in loop]
        if len(inside) < len(preds[exit_block]):
            split_edges(inside, exit_block, _name(exit_block, "loopexit"), _block_before(exit_block))
            changed = True
    return changed


def _fix_until_stable(function: Function, fixes: Iterable[LoopFix], dominance: bool = False) -> bool:
    """Apply `fixes` to the loops of fresh loop nests until none changes anything.

    A round goes on past a change, with the loops the change cannot have reached. A fix of loop A edits
    only edges between A's blocks, its entering blocks and its exit blocks (its `_neighbourhood`), and
    places new blocks on those edges only. So a loop none of whose blocks, entering blocks or exit blocks
    is in a changed loop's neighbourhood sees in the round's nest what a fresh one would show it; the
    others wait for the next round. Fixes that read the dominator tree beyond that (`dominance`: the
    branch conditions known on entry, which `_guard_loop` asks for) also wait when one of the loop
    header's dominators is in a changed neighbourhood: a guard adds an edge, and the exit block it enters
    gets another immediate dominator. One round per change instead cost the transformer's gradient 2,700
    rounds over functions of about 700 blocks: two thirds of its compile time."""
    fixes = tuple(fixes)
    changed = False
    # Every fix removes a defect and adds at most a few blocks; this bound is far above what that allows.
    for _ in range(8 * (len(function.blocks) + 1)):
        nest = LoopNest(function)
        touched: set[Block] = set()
        for loop in nest:
            if touched and _reaches(loop, nest, touched, dominance):
                continue
            neighbourhood = _neighbourhood(loop)  # before the fix moves its edges
            if any(fix(loop, nest) for fix in fixes):
                touched |= neighbourhood
        if not touched:
            return changed
        changed = True
    raise RuntimeError(f"loop-canon did not converge on @{function.name}")


def _neighbourhood(loop: Loop) -> set[Block]:
    """The blocks whose edges a fix of `loop` may change: its own, its entering and its exit blocks."""
    return {*loop.blocks, *loop.entering_blocks, *loop.exit_blocks}


def _reaches(loop: Loop, nest: LoopNest, touched: set[Block], dominance: bool) -> bool:
    """Does what the fixes read about `loop` involve a block of `touched`: one of its blocks, entering or
    exit blocks (edges, phis, predecessors), or with `dominance` a dominator of its header? Its exit blocks
    are read after its blocks, whose successors are then as the nest saw them."""
    if any(block in touched for block in loop.blocks) or any(block in touched for block in loop.entering_blocks):
        return True
    if any(block in touched for block in loop.exit_blocks):
        return True
    if not dominance:
        return False
    block: Block | None = loop.header
    while block is not None:
        if block in touched:
            return True
        block = nest.tree.idom.get(block)
    return False


def canonicalize_loop_structure(function: Function) -> bool:
    """Preheaders, single latches and dedicated exits for every loop (items 1-3 of the module docstring)."""
    return _fix_until_stable(function, [_insert_preheader, _merge_latches, _dedicate_exits])


def insert_preheaders_and_latches(function: Function) -> bool:
    """Items 1 and 2 only: simplify-cfg, the last pass of O2, may have folded empty latches away, leaving
    loops with several back edges; loop fusion wants one latch and leaves exits as they are."""
    return _fix_until_stable(function, [_insert_preheader, _merge_latches])


# --- 4: the induction variable -----------------------------------------------------------------------------


def _rewrite_induction_variable(loop: Loop, nest: LoopNest) -> bool:
    count = analyze_trip_count(loop)
    if not isinstance(count, TripCount) or count.is_canonical or count.iv.constant_step is None:
        return False
    if loop.preheader is None:
        return False
    header, latch = loop.header, loop.latches[0]
    trip = count.emit_in_preheader()
    k = Builder(header).phi(I64, name="k")
    k.flags |= count.iv.phi.flags & {"parallel"}  # a prange loop stays one (its header phi says so)
    k_next = Builder().before(latch.terminator).iadd(k, 1, name="k.next")  # type: ignore[union-attr]
    for pred in nest.tree.preds[header]:
        k.add_incoming(pred, k_next if pred is latch else Constant(I64, 0))
    _replace_exit_test(loop, count, k, trip)
    _replace_induction_variable(count, k)
    return True


def _replace_exit_test(loop: Loop, count: TripCount, k: Phi, trip: Value) -> None:
    """Make the header branch on `k < trip` (`k != trip` for an `ne` loop), keeping its polarity."""
    terminator = loop.header.terminator
    old = terminator.operands[0]  # type: ignore[union-attr]
    stays = Op.ICMP_NE if count.predicate is Op.ICMP_NE else Op.ICMP_SLT
    predicate = stays if header_exit_test(loop).stays_when else NEGATED_PREDICATE[stays]  # type: ignore[union-attr]
    condition = Builder().before(terminator).emit(predicate, k, trip, name=old.name)  # type: ignore[arg-type]
    terminator.set_operand(0, condition)  # type: ignore[union-attr]
    if isinstance(old, Instruction) and not old.uses:
        old.erase()


def _replace_induction_variable(count: TripCount, k: Phi) -> None:
    """Replace the old IV by `start + k*step` at the top of the header; delete what that leaves unused."""
    header = count.loop.header
    old, increment = count.iv.phi, count.iv.increment
    arith = IntegerArithmetic(Builder().before(header.instructions[header.first_non_phi_index()]))
    value = arith(Op.IADD, count.iv.start, arith(Op.IMUL, k, count.iv.step))
    if value is not k and isinstance(value, Instruction):
        value.name = old.name
    old.replace_all_uses_with(value)
    old.erase()
    if not increment.uses:
        increment.erase()


# --- 5: the entry guard ------------------------------------------------------------------------------------


def _values_used_after(loop: Loop) -> list[Instruction]:
    """Header values with a use outside the loop."""
    return [inst for inst in loop.header.instructions if not inst.type.is_void
            and any(use.user.block not in loop for use in inst.uses)]


def _entry_computation(loop: Loop, roots: list[Value]) -> list[Instruction] | None:
    """The header's non-phi instructions that `roots` need, in header order; None if one is not a scalar op
    (those are the only ones the guard may evaluate ahead of the header)."""
    header = loop.header
    needed: set[Instruction] = set()
    worklist = [v for v in roots if isinstance(v, Instruction) and v.block is header and not isinstance(v, Phi)]
    while worklist:
        inst = worklist.pop()
        if inst in needed:
            continue
        if not is_scalar_op(inst):
            return None
        needed.add(inst)
        worklist.extend(v for v in inst.operands
                        if isinstance(v, Instruction) and v.block is header and not isinstance(v, Phi))
    return [inst for inst in header.instructions if inst in needed]


def _header_may_be_skipped(loop: Loop, computation: list[Instruction]) -> bool:
    """When the guard fails, control skips the header that the program ran once: only right if the header
    does nothing else than compute values, pure ones or those the guard computes in its place."""
    cloned = set(computation)
    header = loop.header.instructions[loop.header.first_non_phi_index():-1]
    return all(inst in cloned or OP_INFO[inst.op].pure for inst in header)


def _guard_loop(loop: Loop, nest: LoopNest) -> bool:
    test, preheader = header_exit_test(loop), loop.preheader
    if test is None or preheader is None or loop.exiting_blocks != [loop.header]:
        return False
    exit_block = next(succ for succ in loop.header.successors if succ not in loop)
    if nest.tree.preds[exit_block] != [loop.header] or nest.loop_of(exit_block) is not loop.parent:
        return False
    if loop_entry_test_value(loop) is not None or loop_runs_at_least_once(loop, nest.tree):
        return False
    used_after = _values_used_after(loop)
    computation = _entry_computation(loop, [test.condition, *used_after])
    if computation is None or not _header_may_be_skipped(loop, computation):
        return False
    entry = _clone_on_entry(loop, preheader, computation)
    _route_exit(loop, preheader, exit_block, entry, used_after)
    new_preheader = split_edges([preheader], loop.header, _name(loop.header, "preheader"), preheader)
    preheader.terminator.erase()  # type: ignore[union-attr]
    condition = entry.get(test.condition, test.condition)
    targets = (new_preheader, exit_block) if test.stays_when else (exit_block, new_preheader)
    Builder(preheader).cbr(condition, *targets)
    return True


def _clone_on_entry(loop: Loop, preheader: Block, computation: list[Instruction]) -> dict[Value, Value]:
    """Evaluate `computation` at the end of the preheader on the phis' entry values: the map from each
    header value to its value on entry."""
    entry: dict[Value, Value] = {phi: phi.incoming_value(preheader) for phi in loop.header.phis}
    builder = Builder().before(preheader.terminator)  # type: ignore[arg-type]
    for inst in computation:
        operands = tuple(entry.get(operand, operand) for operand in inst.operands)
        clone = Instruction(inst.type, op=inst.op, operands=operands, attrs=dict(inst.attrs),
                            flags=set(inst.flags), name=f"{inst.name}.entry" if inst.name else None,
                            loc=inst.loc)
        entry[inst] = builder.insert(clone)
    return entry


def _route_exit(loop: Loop, preheader: Block, exit_block: Block, entry: dict[Value, Value],
                used_after: list[Instruction]) -> None:
    """Make room for the guard's edge preheader -> exit: a new dedicated exit block, and phis at the old
    one that merge each header value used after the loop with its entry value.

    The header is the loop's only exiting block, so the old exit block dominates every use outside the
    loop; its own phis read their operands on the edges, which get one entry per edge instead."""
    loop_exit = split_edges([loop.header], exit_block, _name(exit_block, "loopexit"), _block_before(exit_block))
    for phi in exit_block.phis:
        value = phi.incoming_value(loop_exit)
        phi.add_incoming(preheader, entry.get(value, value))
    builder = Builder(exit_block)
    for value in used_after:
        uses = [use for use in value.uses if use.user.block not in loop
                and not (isinstance(use.user, Phi) and use.user.block is exit_block)]
        if not uses:
            continue
        merged = builder.phi(value.type, [(loop_exit, value), (preheader, entry[value])], name=value.name)
        for use in uses:
            use.user.set_operand(use.index, merged)


# --- the pass ------------------------------------------------------------------------------------------------


def loop_canonicalization(function: Function) -> bool:
    """Put every loop of `function` in canonical form (module docstring); True if anything changed."""
    changed = canonicalize_loop_structure(function)
    changed |= _fix_until_stable(function, [_rewrite_induction_variable])
    changed |= _fix_until_stable(function, [_guard_loop], dominance=True)
    return changed
