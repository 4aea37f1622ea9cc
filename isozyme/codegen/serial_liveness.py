"""Which scalars the serial kernel needs across each of its yields to the host (`opencl_serial.py`): a yield
saves only those in the control buffer and the resume after it restores only those, where both used to
handle every variable (on an H100 a run of the serial kernel of the GPU transformer's gradient, 630 words
saved and 470 restored, took 22 us, most of it in that copying).

The serial kernel's control flow is the entry function's without the blocks of its parallel loops but the
headers: an edge into a loop's header from outside the loop goes to the loop's launch (`launch`, a node of
its own here), which yields, resumes with the induction variables advanced and the reductions added, and
jumps to the header; the header's edge into the loop is never taken. Liveness is SSA liveness over that
graph: a phi's incoming value is used at the end of its predecessor, where out-of-SSA's copy assigns the
phi's variable; the launch uses the header's phis (it advances them, or the header reads them), the trip
count, the steps and whatever the loop's kernel reads from the control buffer (its live-ins, `live_ins`).

Only scalars are tracked. A local array's extents and a view's offset are saved at every yield and
restored at every resume, as before: they are few, and the host's counters read them too.
"""

from __future__ import annotations

from isozyme.codegen.parallel_loops import ParallelLoop, live_ins
from isozyme.ssa.ir import Block, Function, Instruction, Phi, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import ArrayType


class SerialLiveness:
    """Liveness of the serial kernel's scalars (module docstring): `after(inst)`, the scalars live right
    after an instruction of a block the serial kernel runs; `at_launch(loop)`, those live at the loop's
    launch, which its kernel reads included."""

    def __init__(self, function: Function, loops: list[ParallelLoop], hidden: set[Block]) -> None:
        self.hidden = hidden
        self.blocks = [block for block in function.blocks if block not in hidden]
        self.loops = {loop.header: loop for loop in loops}
        self.launch_uses = {loop.number: self._launch_uses(loop) for loop in loops}
        self.live_in: dict[Block | int, set[Value]] = {block: set() for block in self.blocks}
        self.live_in.update({loop.number: set() for loop in loops})
        self._solve()

    def tracked(self, value: object) -> bool:
        """A scalar the serial kernel computes (not a constant, an argument or a value of a loop's body)."""
        return isinstance(value, Instruction) and value.block not in self.hidden \
            and not isinstance(value.type, ArrayType) and not value.type.is_void

    def after(self, inst: Instruction) -> set[Value]:
        block = inst.block
        assert block is not None and block not in self.hidden
        live = self._end(block)
        for later in reversed(block.instructions[block.position(inst) + 1:]):
            if not isinstance(later, Phi):
                live = self._step(later, live)
        return live

    def at_launch(self, loop: ParallelLoop) -> set[Value]:
        return self.live_in[loop.number]

    def _launch_uses(self, loop: ParallelLoop) -> set[Value]:
        values: list[object] = [loop.trip, *loop.header.phis]
        values += [iv.step for iv in loop.inductions]
        for value in live_ins(loop):
            values.append(value)
            if isinstance(value, Instruction) and value.op is Op.VIEW:
                values.append(value.operands[-1])  # its offset
        for alloc, kind in loop.scratch.items():
            if kind == "inner":
                values += alloc.operands  # its extents, counted before the launch
        return {value for value in values if self.tracked(value)}  # type: ignore[misc]

    def _successors(self, block: Block) -> list[tuple[Block | int, Block]]:
        """Each successor in the serial kernel's graph (a block, or a loop's launch by number) and the block
        whose phis the edge assigns."""
        found: list[tuple[Block | int, Block]] = []
        for successor in block.successors:
            loop = self.loops.get(successor)
            if loop is not None and block not in loop.loop:
                found.append((loop.number, successor))
            elif successor not in self.hidden:
                found.append((successor, successor))
        return found

    def _end(self, block: Block) -> set[Value]:
        """Live before the copies at the end of `block` and its terminator's operands are read."""
        live: set[Value] = set()
        for node, target in self._successors(block):
            phis = target.phis
            live |= self.live_in[node] - set(phis)
            live |= {value for phi in phis for source, value in phi.incoming if source is block and self.tracked(value)}
        terminator = block.terminator
        if terminator is not None:
            live |= {value for value in terminator.operands if self.tracked(value)}
        return live

    def _step(self, inst: Instruction, live: set[Value]) -> set[Value]:
        """Live before `inst`, given what is live after it."""
        if inst.is_terminator:
            return live
        return (live - {inst}) | {value for value in inst.operands if self.tracked(value)}

    def _solve(self) -> None:
        changed = True
        while changed:
            changed = False
            for block in reversed(self.blocks):
                live = self._end(block)
                for inst in reversed(block.instructions):
                    live = live - {inst} if isinstance(inst, Phi) else self._step(inst, live)
                if live != self.live_in[block]:
                    self.live_in[block], changed = live, True
            for header, loop in self.loops.items():
                live = self.launch_uses[loop.number] | self.live_in[header]
                if live != self.live_in[loop.number]:
                    self.live_in[loop.number], changed = live, True
