"""Putting a primal function in the shape reverse mode needs, and describing its loops.

After `prepare_for_differentiation(module, function)` the function

  1. calls nothing but the kernels whose calls AD keeps (`keep_custom`: those with a custom reverse rule
     or split-mode rule, `custom.py`; `keep_forward_rules`: those with a custom forward rule): every other
     call is inlined, at any depth (recursion is an error), and only after the caller's optimization
     pipeline ran (`opt="post"`), so that a call LICM hoisted (norm's `mag`) is inlined where it was
     hoisted to;
  2. has one `ret`, in a block of its own making when there were several (a phi merges the values);
  3. has canonical loops (`loop-canon`: preheaders, single latches, 0-based IVs, entry guards), loop-canon
     being run again after inlining even when `opt="none"`: it is a canonical form, not an optimization.

`loop_frames` then gives, for every loop, the counter the reverse pass counts down (0, 1, ... on the
header's successive runs) and how to know its last value:

- a counted loop (`ssa/trip_count.py`) has a trip count computed before it runs; one whose IV is not
  0-based with step 1 gets a counter of its own;
- a loop whose trip count is unknown (`while`, `break`, `return` inside it) gets a counter of its own, and
  each of its exit blocks a phi of that counter (`%<h>.count`): the counter's value when control left the
  loop into that block. The reverse pass looks it up like any primal value (it is taped: the loop records
  its trip count at run time, once per run of the loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from isozyme.enzyme_ad.custom import custom_forward_rule, custom_rule
from isozyme.enzyme_ad.errors import DifferentiationError, location_of
from isozyme.optimize.call_graph import call_sites, recursive_functions
from isozyme.optimize.inline import inline_call
from isozyme.optimize.loop_canonicalization import loop_canonicalization
from isozyme.optimize.pass_manager import REGISTRY, SCALAR_PASSES
from isozyme.ssa.builder import Builder
from isozyme.ssa.cfg import predecessors, reverse_post_order
from isozyme.ssa.ir import Block, Constant, Function, Module, Phi, SourceLoc, Value
from isozyme.ssa.loops import Loop, LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.trip_count import TripCount, analyze_trip_count, is_known_nonnegative
from isozyme.ssa.types import I64, VOID


@dataclass(eq=False)
class LoopFrame:
    """What the reverse pass needs to know about one loop."""

    loop: Loop
    """The natural loop."""
    counter: Phi
    """A header phi counting 0, 1, ... (the trip count on the header's last run)."""
    trip: Value | None
    """How many times the body runs (>= 0), defined before the loop; None when that is unknown before the
    loop runs (then `exit_counts` tells)."""
    exit_counts: dict[Block, Phi] = field(default_factory=dict)
    """For a loop of unknown trip count: per exit block, the counter's value when control left into it."""


def inline_all_calls(function: Function, keep_custom: bool = False, keep_forward_rules: bool = False) -> None:
    """Inline every call in `function`, and the calls those bring in, until none is left but, when
    `keep_custom`, the calls of kernels with a custom reverse rule (`custom.py`), and when
    `keep_forward_rules`, those of kernels with a custom forward rule."""
    module = function.module
    recursive = recursive_functions(module) if module is not None else set()

    def kept(callee: Function) -> bool:
        return (keep_custom and custom_rule(callee) is not None) or \
            (keep_forward_rules and custom_forward_rule(callee) is not None)
    while calls := [call for call in call_sites(function) if not kept(call.callee)]:  # type: ignore[arg-type]
        for call in calls:
            if call.callee in recursive or call.callee is function:
                raise DifferentiationError(f"cannot differentiate the recursive call of @{call.callee.name}",
                                           call.loc)
            inline_call(call)


def unify_returns(function: Function) -> Block:
    """Make the function return from one block (module docstring); that block."""
    returns = [block for block in function.blocks if block.terminator is not None
               and block.terminator.op is Op.RET]
    if len(returns) == 1:
        return returns[0]
    exit_block = function.add_block("return")
    builder = Builder(exit_block)
    merged = None if function.return_type is VOID else Phi(function.return_type, name="retval")
    for block in returns:
        ret = block.terminator
        assert ret is not None
        if merged is not None:
            merged.add_incoming(block, ret.operands[0])
        ret.erase()
        Builder(block, ret.loc).br(exit_block)
    if merged is not None:
        exit_block.insert(0, merged)
    builder.ret(merged)
    return exit_block


def prepare_for_differentiation(module: Module, function: Function, optimized: bool,
                                keep_custom: bool = False, keep_forward_rules: bool = False) -> Block:
    """Inline, unify the returns and canonicalize loops (module docstring); the return block.

    `optimized`: the module went through O2 (`opt="post"`), so the inlined code gets the scalar passes
    again before the loops are canonicalized. `keep_custom`, `keep_forward_rules`: the calls to keep
    (module docstring)."""
    del module  # the callees stay in the module
    inline_all_calls(function, keep_custom, keep_forward_rules)
    if optimized:
        clean_up(function)
    unify_returns(function)
    loop_canonicalization(function)
    return next(block for block in function.blocks
                if block.terminator is not None and block.terminator.op is Op.RET)


def clean_up(function: Function, max_rounds: int = 10) -> None:
    """The scalar passes of O2 to a fixed point, on `function` alone (not on the callees in its module)."""
    for _ in range(max_rounds):
        changed = False
        for name in SCALAR_PASSES:
            changed |= REGISTRY[name].run(function)
        if not changed:
            return


def loop_frames(function: Function, nest: LoopNest) -> dict[Loop, LoopFrame]:
    """The counter and trip count of every loop (module docstring); adds counters where needed."""
    frames = {}
    for loop in nest:
        if len(loop.latches) != 1 or loop.preheader is None:
            raise DifferentiationError("internal error: a loop not in canonical form", _loop_location(loop))
        count = analyze_trip_count(loop)
        frames[loop] = _frame(loop, count) if isinstance(count, TripCount) else _dynamic_frame(loop)
    return frames


def _frame(loop: Loop, count: TripCount) -> LoopFrame:
    if count.is_canonical:
        trip = count.bound
        if count.predicate is Op.ICMP_SLT and not is_known_nonnegative(trip):
            trip = _before_terminator(loop).imax(trip, 0, name="trip")
        return LoopFrame(loop, count.iv.phi, trip)
    trip = count.emit_in_preheader()
    return LoopFrame(loop, _add_counter(loop), trip)


def _dynamic_frame(loop: Loop) -> LoopFrame:
    """A loop of unknown trip count: a counter, and its value in every exit block (module docstring)."""
    counter = _add_counter(loop)
    frame = LoopFrame(loop, counter, None)
    function = loop.header.function
    assert function is not None
    preds, reachable = predecessors(function), set(reverse_post_order(function))
    for exit_block in loop.exit_blocks:
        if any(pred not in loop and pred in reachable for pred in preds[exit_block]):
            raise DifferentiationError("internal error: a loop exit that is not dedicated", _loop_location(loop))
        incoming = [(pred, counter if pred in loop else Constant(I64, 0)) for pred in preds[exit_block]]
        frame.exit_counts[exit_block] = Builder(exit_block).phi(I64, incoming,
                                                                name=f"{loop.header.name or 'loop'}.count")
    return frame


def _add_counter(loop: Loop) -> Phi:
    """A header phi counting the header's runs: 0, 1, ..."""
    header, preheader, latch = loop.header, loop.preheader, loop.latches[0]
    assert preheader is not None
    counter = Builder(header).phi(I64, [(preheader, 0)], name="ad.iter")
    increment = Builder().before(latch.terminator).iadd(counter, 1, name="ad.iter.next")  # type: ignore[arg-type]
    counter.add_incoming(latch, increment)
    return counter


def _before_terminator(loop: Loop) -> Builder:
    preheader = loop.preheader
    assert preheader is not None and preheader.terminator is not None
    return Builder().before(preheader.terminator)


def _loop_location(loop: Loop) -> SourceLoc | None:
    terminator = loop.header.terminator
    return location_of(terminator) if terminator is not None and terminator.loc else location_of(loop.header)
