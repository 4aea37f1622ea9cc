"""Buffer liveness: the aliases of a local array, a linear order of the blocks, and where each buffer's
contents matter (`memory_reuse.py`'s docstring: "Liveness").

An analysis: it changes no IR. Invariant: a buffer's live interval (`Liveness.interval`) is the hull of the
positions, in `linear_order`, where one of its aliases is live and the buffer may already have been
touched; an over-approximation, so two buffers live at one point of some execution always have meeting
intervals.
"""

from __future__ import annotations

from isozyme.ssa.cfg import post_order, predecessors, reverse_post_order
from isozyme.ssa.flags import ZEROED
from isozyme.ssa.ir import Block, Function, Instruction, Phi, Value
from isozyme.ssa.loops import LoopNest


def aliases(alloc: Instruction) -> set[Value]:
    """The alloc and every value that may hold its array: the phis (and calls returning an array) it reaches."""
    found: set[Value] = {alloc}
    work: list[Value] = [alloc]
    while work:
        for user in work.pop().users:
            if (isinstance(user, Phi) or user.type.is_array) and user not in found:
                found.add(user)
                work.append(user)
    return found


def linear_order(function: Function) -> list[Block]:
    """The reachable blocks in reverse post-order, but each loop's blocks together, right after its header
    (RPO alone may put a loop's body after the code that follows the loop, stretching every interval
    across the loop). Sorting by the RPO numbers of the enclosing headers keeps every edge that is not a
    back edge pointing forward."""
    rpo = reverse_post_order(function)
    index = {block: number for number, block in enumerate(rpo)}
    nest = LoopNest(function)

    def key(block: Block) -> tuple[int, ...]:
        headers, loop = [], nest.loop_of(block)
        while loop is not None:
            headers.append(index[loop.header])
            loop = loop.parent
        return (*reversed(headers), index[block])
    return sorted(rpo, key=key)


class Liveness:
    """Where each buffer's contents matter, on the instructions numbered in `linear_order`.

    A buffer is live at an instruction when one of its aliases is (SSA liveness, the backward dataflow;
    a phi operand is used at the end of its incoming block) and the buffer may already have been touched
    there (a forward dataflow: a `zeroed` alloc touches its array, a use of an alias touches it, a plain
    alloc starts a fresh untouched one). An `iz.empty` array holds nothing worth keeping until it is used,
    so its storage may still serve a buffer that dies before its first use."""

    def __init__(self, function: Function, buffers: dict[Instruction, set[Value]]) -> None:
        self.order = linear_order(function)
        self.position: dict[Instruction, int] = {}
        """Each reachable instruction's number."""
        self.span: dict[Block, tuple[int, int]] = {}
        """First and last position of each reachable block."""
        for block in self.order:
            first = len(self.position)
            for inst in block.instructions:
                self.position[inst] = len(self.position)
            self.span[block] = (first, len(self.position) - 1)
        self.buffers = buffers
        self.values: set[Value] = set().union(*buffers.values()) if buffers else set()
        self.live_in: dict[Block, set[Value]] = {block: set() for block in self.order}
        self.live_out: dict[Block, set[Value]] = {block: set() for block in self.order}
        self._solve_ssa_liveness(post_order(function))
        self.owners: dict[Value, list[Instruction]] = {}
        """The buffers each alias may hold."""
        for alloc, alias_set in buffers.items():
            for alias in alias_set:
                self.owners.setdefault(alias, []).append(alloc)
        self.touched: dict[Instruction, set[Instruction]] = {}
        """The buffers possibly touched once each instruction has run."""
        self._solve_touched()

    def _solve_ssa_liveness(self, order: list[Block]) -> None:
        defined = {block: set(block.instructions) for block in order}
        exposed = {block: {operand for inst in block.instructions if not isinstance(inst, Phi)
                           for operand in inst.operands if operand in self.values} - defined[block]
                   for block in order}
        changed = True
        while changed:
            changed = False
            for block in order:
                out: set[Value] = set()
                for succ in block.successors:
                    phis = succ.phis
                    out |= self.live_in[succ].difference(phis)
                    out |= {phi.incoming_value(block) for phi in phis} & self.values
                live_in = exposed[block] | (out - defined[block])
                if out != self.live_out[block] or live_in != self.live_in[block]:
                    self.live_out[block], self.live_in[block] = out, live_in
                    changed = True

    def _touch(self, inst: Instruction, state: set[Instruction]) -> set[Instruction]:
        if inst in self.buffers:
            state = state | {inst} if ZEROED in inst.flags else state - {inst}
        if not isinstance(inst, Phi):
            state = state.union(*(self.owners.get(operand, ()) for operand in inst.operands))
        return state

    def _solve_touched(self) -> None:
        touched_out: dict[Block, set[Instruction]] = {block: set() for block in self.order}
        preds = predecessors(self.order[0].function) if self.order else {}  # type: ignore[arg-type]
        changed = True
        while changed:
            changed = False
            for block in self.order:
                state = set().union(*(touched_out[p] for p in preds[block] if p in touched_out))
                for inst in block.instructions:
                    state = self.touched[inst] = self._touch(inst, state)
                if state != touched_out[block]:
                    touched_out[block], changed = state, True

    def ranges(self, value: Value) -> list[tuple[int, int]]:
        """Per block where the SSA value is live, the first and last position where it is, in block order."""
        result = []
        for block, (first, last) in self.span.items():
            defined_here = isinstance(value, Instruction) and value.block is block
            if not defined_here and value not in self.live_in[block]:
                continue
            start = first if value in self.live_in[block] else self.position[value]  # type: ignore[index]
            uses = [self.position[use.user] for use in value.uses
                    if use.user.block is block and not isinstance(use.user, Phi)]
            end = last if value in self.live_out[block] else max(uses, default=start)
            result.append((start, max(start, end)))
        return result

    def live_at(self, value: Value, inst: Instruction) -> bool:
        """Is the SSA value live when `inst` is about to run?"""
        here = self.position[inst]
        first, last = self.span[inst.block]  # type: ignore[index]
        return any(start <= here <= end for start, end in self.ranges(value) if first <= start <= last)

    def interval(self, alloc: Instruction) -> tuple[int, int]:
        """The hull of the positions where the buffer is live; just its alloc's when it never is."""
        instructions = list(self.position)
        live = [position for alias in self.buffers[alloc] for start, end in self.ranges(alias)
                for position in range(start, end + 1) if alloc in self.touched[instructions[position]]]
        if not live:
            return self.position[alloc], self.position[alloc]
        return min(live), max(live)
