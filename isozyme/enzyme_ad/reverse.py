"""Reverse mode: `diffe_<f>`, Enzyme's combined augmented-forward and reverse pass, as one SSA function.

Input: a function prepared by `prepare.py` (no calls but those of kernels with a custom reverse rule, one
`ret`, canonical loops, each with a counter and a trip count or recorded exit counts) and its activity
(`activity.py`). The function is rewritten in place into `diffe_<f>`:

- **Signature.** Each parameter, followed by its shadow `%d_<x>` when it is a Duplicated array, or by a
  one-element array `%d_<x>` receiving its adjoint when it is an Active scalar; then `%differet`, the
  seed, when the kernel returns a float (`gradient_parameters`). It returns the primal return value.
- **Forward pass.** The primal blocks, unchanged except for what the reverse pass needs: stores into tapes
  (`cache.py`), zeroed shadows of active local arrays next to their `alloc`, and, where a merge block's
  predecessor cannot be told from a branch condition, a phi recording it. The `ret` becomes a branch to
  the reverse of the return block.
- **Reverse pass.** One block `<B>.rev` per reachable primal block B, placed in reverse order: the rules
  (`rules.py`) of B's active instructions, last to first, then B's phis: their adjoints flow along the
  reversed edges, each edge a block `<B>.rev.<P>` that adds a phi's adjoint to the adjoint of the value
  coming from P. The reverse of B continues at the reverse of the predecessor that control came from:
  * a loop header: its reverse counts the loop's counter down and goes back to the preheader's reverse
    at 0, to the latch's otherwise, with the counter one less. The reverse counter is a slot
    (`%<h>.rev.iter`, promoted by mem2reg like the adjoints) that every reverse block of the loop reads
    at its start: the iteration it reverses. Control enters a loop's reverse on the reversed edge of any
    primal edge that left the loop (from the header, or a `break`/`return` in the body), which sets the
    counter to the value it had when the loop was left: the trip count of a counted loop, the recorded
    count (`LoopFrame.exit_counts`, taped) of a loop of unknown trip count;
  * a merge block whose immediate dominator ends in a `cbr` with one predecessor on each side: a `cbr`
    on that condition (looked up like any primal value: recomputed if cheap, else taped);
  * any other merge block: a `cbr` chain on the recorded predecessor phi.
  The reverse of the entry block goes to `exit`, which stores the Active adjoints and returns.
- **Adjoints.** Each active value's adjoint is a local slot (`alloc T[1]` in the entry block) holding
  -0.0 at first: a use adds to it, its definition's rule reads it and resets it (a loop's next reversed
  iteration starts from nothing). -0.0, not 0.0, because `x + -0.0` is `x` exactly (so instcombine drops
  the first addition) while `x + 0.0` is not when x is -0.0. `mem2reg` promotes the slots to SSA values
  afterwards, as Enzyme's allocas are.

Memory (DESIGN 5): a Duplicated array and an active local array have a shadow; the memory rules of
`rules.py` read and write it in the reverse pass with plain loads and stores (the pass is serial). A call
of a kernel with a custom reverse rule (or one that is not inlined) is reversed by a call of its rule
(`custom.py`). A local
array allocated once (outside loops, on every path) gets its zeroed shadow next to it. One allocated in a
loop or a branch gets one shadow in the entry block, as large as its largest run (extents known at entry,
or bounded over the loops' iterations as tape extents are, else a `DifferentiationError`), and the reverse
of its `alloc` zeroes the run's extent of it: the adjoint left there belongs to the fresh array's initial
contents, and must not leak into the previous run's reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from isozyme.enzyme_ad.activity import Activity, ArgActivity
from isozyme.enzyme_ad.cache import STACK_CAPACITY, PrimalValues, Tape
from isozyme.enzyme_ad.custom import (
    NOT_READ,
    SPLIT_RULE,
    array_size,
    augmented_function,
    check_custom_call,
    custom_rule,
    reverse_function,
    slab_size,
    snapshot_slabs,
    split_snapshots,
)
from isozyme.enzyme_ad.errors import DifferentiationError, unsupported
from isozyme.enzyme_ad.prepare import LoopFrame, loop_frames
from isozyme.enzyme_ad.primal_availability import ReverseContext, loops_around
from isozyme.enzyme_ad.rules import REVERSE_RULES
from isozyme.optimize.mem2reg import ARRAY_OPERAND
from isozyme.ssa.builder import Builder
from isozyme.ssa.cfg import predecessors
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.flags import CHECKED
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.loops import Loop, LoopNest, has_irreducible_control_flow
from isozyme.ssa.ops import Op
from isozyme.ssa.types import I64, ArrayType, Type


@dataclass(eq=False)
class ReverseResult:
    """`diffe_<f>` and what the cache planner decided for it."""

    function: Function
    """The rewritten function, `diffe_<f>`."""
    tapes: list[Tape] = field(default_factory=list)
    """Every taped value (`iz.show_cache`)."""


@dataclass(frozen=True)
class GradientParameter:
    """One parameter of `diffe_<f>`."""

    name: str
    type: Type
    role: str
    """"primal", "shadow" (of the primal parameter before it), "adjoint" (the Active scalar's output) or
    "seed" (`%differet`)."""


def gradient_parameters(params: Sequence[tuple[str, Type]], activities: Sequence[ArgActivity],
                        return_type: Type) -> list[GradientParameter]:
    """The parameters of `diffe_<f>` (module docstring), from the primal's and the activities: the
    runtime builds its call from this before `diffe_<f>` exists (a disk-cache hit never builds it)."""
    result: list[GradientParameter] = []
    for (name, ty), kind in zip(params, activities, strict=True):
        result.append(GradientParameter(name, ty, "primal"))
        if kind is ArgActivity.DUP and ty.is_array:
            result.append(GradientParameter(f"d_{name}", ty, "shadow"))
        elif kind is ArgActivity.ACTIVE:
            result.append(GradientParameter(f"d_{name}", ArrayType(ty, 1), "adjoint"))  # type: ignore[arg-type]
    if return_type.is_float:
        result.append(GradientParameter("differet", return_type, "seed"))
    return result


def reverse_mode(function: Function, activity: Activity, return_block: Block) -> ReverseResult:
    """Rewrite the prepared `function` into `diffe_<f>` (module docstring)."""
    synthesis = _ReverseSynthesis(function, activity, return_block)
    synthesis.run()
    return ReverseResult(function, list(synthesis.primal.tapes.values()))


class _RuleContext:
    """The `rules.RuleContext` of one active instruction."""

    def __init__(self, synthesis: _ReverseSynthesis, inst: Instruction, context: ReverseContext,
                 builder: Builder) -> None:
        self.synthesis, self.inst, self.context, self.b = synthesis, inst, context, builder

    def operand(self, index: int) -> Value:
        return self.synthesis.primal.lookup(self.inst.operands[index], self.context, self.b)

    def result(self) -> Value:
        return self.synthesis.primal.lookup(self.inst, self.context, self.b)

    def active(self, index: int) -> bool:
        return self.synthesis.is_active(self.inst.operands[index])

    def add(self, index: int, contribution: Value) -> None:
        if self.active(index):
            self.synthesis.add_adjoint(self.b, self.inst.operands[index], contribution)

    def shadow_element(self) -> tuple[Value, list[Value]]:
        position = ARRAY_OPERAND[self.inst.op]
        shadow = self.synthesis.shadow_of(self.inst, self.inst.operands[position])
        indices = [self.synthesis.primal.lookup(i, self.context, self.b) for i in self.inst.operands[position + 1:]]
        return shadow, indices


class _ReverseSynthesis:
    def __init__(self, function: Function, activity: Activity, return_block: Block) -> None:
        self.function, self.activity, self.return_block = function, activity, return_block
        self.tree = DominatorTree(function)
        if has_irreducible_control_flow(function, self.tree):
            raise DifferentiationError(f"cannot differentiate @{function.name}: irreducible control flow")
        self.nest = LoopNest(function, self.tree)
        self.frames: dict[Loop, LoopFrame] = loop_frames(function, self.nest)
        self.headers = {frame.loop.header: frame for frame in self.frames.values()}
        self.preds = {block: [p for p in ps if self.tree.is_reachable(p)]
                      for block, ps in predecessors(function).items()}
        self.blocks = list(self.tree.rpo)
        self.primal = PrimalValues(function, self.tree, self.nest, self.frames, return_block)
        self.slots: dict[Value, Instruction] = {}
        self.shadows: dict[Value, Value] = {}
        self.reused_shadows: set[Instruction] = set()
        """Local arrays allocated in a loop or a branch: one shadow for all runs, zeroed in the reverse."""
        self.active_outputs: list[tuple[Argument, Argument]] = []
        self.seed: Argument | None = None
        self.reverse: dict[Block, Block] = {}
        self.counter_slots: dict[Loop, Instruction] = {}
        self.contexts: dict[Block, ReverseContext] = {}
        self.branch_point: dict[Block, Block] = {}
        """For each primal block, the reverse block ending in the branch back (where its pops go)."""

    # --- adjoint slots and shadows -------------------------------------------------------------------------

    def is_active(self, value: Value) -> bool:
        return not isinstance(value, Constant) and self.activity.is_active(value)

    def slot(self, value: Value) -> Instruction:
        if value not in self.slots:
            builder = self.primal.entry_builder()
            slot = builder.alloc(value.type, 1, name=f"d.{value.name or 'v'}")  # type: ignore[arg-type]
            builder.store(-0.0, slot, 0)
            self.slots[value] = slot
        return self.slots[value]

    def add_adjoint(self, builder: Builder, value: Value, contribution: Value) -> None:
        slot = self.slot(value)
        builder.store(builder.fadd(builder.load(slot, 0), contribution), slot, 0)

    def take_adjoint(self, builder: Builder, value: Value) -> Value:
        """The adjoint accumulated for `value`, leaving 0 in its slot."""
        slot = self.slot(value)
        adjoint = builder.load(slot, 0, name=f"d.{value.name}" if value.name else None)
        builder.store(-0.0, slot, 0)
        return adjoint

    def shadow_of(self, inst: Instruction, array: Value) -> Value:
        if array not in self.shadows:
            raise unsupported(inst, "the array has no shadow here (an array that is not an argument or a "
                              "local array allocated outside loops and branches)")
        return self.shadows[array]

    # --- the signature and the forward pass ----------------------------------------------------------------

    def run(self) -> None:
        self._rewrite_signature()
        self._shadow_local_arrays()
        for block in reversed(self.blocks):
            self.reverse[block] = self.function.add_block(f"{block.name or 'bb'}.rev")
        self._make_reverse_counters()
        exit_block = self.function.add_block("exit")
        self._branch_to_reverse(exit_block)
        for block in reversed(self.blocks):
            self._fill_reverse_block(block, exit_block)
        for block in self.primal.stack_pointers:
            terminator = self.branch_point[block].terminator
            assert terminator is not None
            self.primal.pop(block, Builder(loc=terminator.loc).before(terminator))
        self._finish(exit_block)

    def _rewrite_signature(self) -> None:
        function = self.function
        function.name = f"diffe_{function.name}"
        primal = iter(function.args)
        signature = gradient_parameters([(arg.name or "", arg.type) for arg in function.args],
                                        self.activity.arg_activities, function.return_type)
        args: list[Argument] = []
        for param in signature:
            if param.role == "primal":
                args.append(next(primal))
                continue
            new, owner = Argument(param.type, name=param.name), args[-1]
            args.append(new)
            if param.role == "seed":
                self.seed = new
            elif param.role == "shadow":
                self.shadows[owner] = new
            else:
                self.active_outputs.append((owner, new))
        function.args = args
        for index, arg in enumerate(args):
            arg.function, arg.index = function, index

    def _shadow_local_arrays(self) -> None:
        """A zeroed shadow for each active local array: next to it when it runs once (outside loops, on
        every path), else one in the entry block as large as the largest of its runs, which the reverse of
        each run zeroes again (`_differentiate`)."""
        for inst in list(self.function.instructions()):
            if inst.op is not Op.ALLOC or not self.activity.is_active_memory(inst):
                continue
            element = inst.type.element  # type: ignore[attr-defined]
            name = f"d_{inst.name or 'local'}"
            if self.primal.is_direct(inst):
                builder = Builder(loc=inst.loc).before(inst.block.instructions[inst.block.position(inst) + 1])
                self.shadows[inst] = builder.alloc(element, *inst.operands, zeroed=True, name=name)
                continue
            shadow = self._zeroed_in_entry(inst, name)
            if shadow is None or "growable" in inst.flags:
                raise unsupported(inst, "an active local array allocated in a loop or a branch needs extents "
                                  "known when the kernel starts, or bounded by the loops' trip counts")
            shadow.flags.add("private")  # zero at the start and end of each run: runs share nothing through it
            self.shadows[inst] = shadow
            self.reused_shadows.add(inst)

    def _zeroed_in_entry(self, array: Value, name: str) -> Instruction | None:
        """A zeroed array allocated in the entry block, at least as large as `array` (an argument, or a local
        array in any of its runs: its extents bounded over the loops' iterations as tape extents are); None
        when no such size is known when the kernel starts."""
        entry = self.primal.entry_builder()
        entry.loc = array.loc if isinstance(array, Instruction) else None
        if isinstance(array, Argument):
            extents: list[Value | None] = [entry.dim(array, axis) for axis in range(array.type.rank)]  # type: ignore[attr-defined]
        elif isinstance(array, Instruction) and array.op is Op.ALLOC:
            extents = [self.primal.bound_in_entry(extent, array.block) for extent in array.operands]  # type: ignore[arg-type]
        else:
            return None
        if any(extent is None for extent in extents):
            return None
        return entry.alloc(array.type.element, *[entry.imax(e, 0) for e in extents],  # type: ignore[attr-defined, misc]
                           zeroed=True, name=name)

    def _make_reverse_counters(self) -> None:
        for loop in self.frames:
            builder = self.primal.entry_builder()
            slot = builder.alloc(I64, 1, name=f"{loop.header.name or 'loop'}.rev.iter")
            builder.store(0, slot, 0)
            self.counter_slots[loop] = slot

    def _branch_to_reverse(self, exit_block: Block) -> None:
        """The primal `ret` becomes a branch to the reverse pass, and `exit` returns the value at once: the
        `ret` is a use of it, so that where the synthesis replaces the returned value (a split call becomes
        a call of `augmented_<g>`) the `ret` returns the replacement."""
        ret = self.return_block.terminator
        assert ret is not None
        self.return_value = ret.operands[0] if ret.operands else None
        ret.erase()
        Builder(self.return_block, ret.loc).br(self.reverse[self.return_block])
        Builder(exit_block, ret.loc).ret(self.return_value)

    # --- the reverse blocks --------------------------------------------------------------------------------

    def _context(self, block: Block, builder: Builder) -> ReverseContext:
        """The iteration of each loop around `block` that its reverse is in: the loop's reverse counter
        (the value the primal counter had), read at the start of the reverse block."""
        counters: dict[Loop, Value] = {}
        loop = self.nest.loop_of(block)
        while loop is not None:
            counters[loop] = builder.load(self.counter_slots[loop], 0,
                                          name=f"{loop.header.name or 'loop'}.rev.iter")
            if block is loop.header and any("parallel" in phi.flags for phi in block.phis):
                counters[loop].flags.add("parallel")  # mem2reg flags the phi it reads: a parallel reverse loop
            loop = loop.parent
        self.contexts[block] = ReverseContext(block, counters)
        return self.contexts[block]

    def _fill_reverse_block(self, block: Block, exit_block: Block) -> None:
        builder = Builder(self.reverse[block])
        context = self._context(block, builder)
        if block is self.return_block and self.seed is not None and self.return_value is not None \
                and self.is_active(self.return_value):
            self.add_adjoint(builder, self.return_value, self.seed)
        for inst in reversed(list(block.instructions)):  # a copy: tape stores go into the forward block
            if isinstance(inst, Phi) or inst.is_terminator or not self.activity.is_active_instruction(inst):
                continue
            self._differentiate(inst, context, builder)
        phi_adjoints = [(phi, self.take_adjoint(builder, phi)) for phi in block.phis if self.is_active(phi)]
        self._branch_back(block, context, builder, phi_adjoints, exit_block)

    def _differentiate(self, inst: Instruction, context: ReverseContext, builder: Builder) -> None:
        builder.loc = inst.loc
        builder.access_flags = frozenset(inst.flags & {CHECKED})  # the shadow of a checked access is checked
        if inst.op is Op.CALL and custom_rule(inst.callee) is not None:
            self._custom_call(inst, custom_rule(inst.callee), context, builder)  # type: ignore[arg-type]
            return
        rule = REVERSE_RULES.get(inst.op)
        if rule is None:
            what = "calls must be inlined first" if inst.op is Op.CALL else "no derivative rule for this op"
            raise unsupported(inst, what)
        if inst in self.reused_shadows:  # the run being reversed began here: its adjoints end here
            extents = [self.primal.lookup(extent, context, builder) for extent in inst.operands]
            self._zero_shadow(builder, self.shadows[inst], extents)
            return
        adjoint = None if inst.type.is_void or inst.type.is_array else self.take_adjoint(builder, inst)
        rule(_RuleContext(self, inst, context, builder), adjoint)

    def _custom_call(self, call: Instruction, rule: Function, context: ReverseContext, builder: Builder) -> None:
        """The reverse of a call of a kernel with a custom reverse rule: a call of the rule (`custom.py`)."""
        check_custom_call(call, rule, self.primal.written_roots)
        callee: Function = call.callee  # type: ignore[assignment]
        split = SPLIT_RULE in rule.flags
        snapshots = split_snapshots(call, self.primal.written_roots, self.primal.array_available) if split else []
        operands: list[Value | list[Value]] = []
        adjoints: list[tuple[Value, Instruction]] = []
        scratch: list[tuple[Value, list[Value]]] = []
        for position, (param, value) in enumerate(zip(callee.args, call.operands)):
            if param.type.is_array:
                available = self.primal.array_available(value)
                if not available and position not in snapshots:
                    raise unsupported(call, "an array passed to a kernel with a custom derivative must be an "
                                      "argument or a local array allocated once")
                extents = self._extents_at_call(call, value, context, builder)
                operands.append(extents if position in snapshots else value)  # reverse_<g> takes the extents
                if param.type.element.is_float:  # type: ignore[attr-defined]
                    shadow = self.shadows.get(value) if self.activity.is_active_memory(value) else None
                    if shadow is None:  # a Const array: scratch for the rule to write, zeroed after it
                        shadow = self._zeroed_in_entry(value, f"d_{value.name or 'local'}.scratch")
                        if shadow is None:
                            raise unsupported(call, "a Const array passed to a kernel with a custom derivative "
                                              "needs extents known when the kernel starts")
                        scratch.append((shadow, extents))
                    operands.append(shadow)
                continue
            operands.append(self.primal.lookup(value, context, builder))
            if param.type.is_float:
                entry = self.primal.entry_builder()
                slot = entry.alloc(param.type, 1, name=f"d.{param.name or 'arg'}.rule")  # type: ignore[arg-type]
                builder.store(0.0, slot, 0)
                operands.append(slot)
                adjoints.append((value, slot))
        if callee.return_type.is_float:
            active = self.is_active(call)
            operands.append(self.take_adjoint(builder, call) if active else Constant(callee.return_type, 0.0))
        if snapshots:
            rule, taped = self._tape_split_call(call, rule, snapshots, builder)
            operands += taped
        builder.call(rule, *[v for operand in operands for v in (operand if isinstance(operand, list) else [operand])])
        for value, slot in adjoints:
            if self.is_active(value):
                self.add_adjoint(builder, value, builder.load(slot, 0))
        for shadow, extents in scratch:
            self._zero_shadow(builder, shadow, extents)

    def _extents_at_call(self, call: Instruction, array: Value, context: ReverseContext,
                         builder: Builder) -> list[Value]:
        """The extents `array` had at `call`, usable in the reverse: its dims when the array is, else dims
        taken in the forward pass before the call and looked up (taped when needed)."""
        rank = array.type.rank  # type: ignore[attr-defined]
        if self.primal.array_available(array):
            return [builder.dim(array, axis) for axis in range(rank)]
        forward = Builder(loc=call.loc).before(call)
        dims = [forward.dim(array, axis) for axis in range(rank)]
        return [self.primal.lookup(dim, context, builder) for dim in dims]

    def _tape_split_call(self, call: Instruction, rule: Function, snapshots: list[int],
                         builder: Builder) -> tuple[Function, list[Value]]:
        """Split mode with a tape (custom.py): the forward call becomes a call of `augmented_<g>`, which
        tapes the arrays at `snapshots` into growable tapes of this kernel, one slice per run of the call's
        block; the reverse calls `reverse_<g>` with the tapes and the run being reversed."""
        callee: Function = call.callee  # type: ignore[assignment]
        module = self.function.module
        assert module is not None and call.block is not None
        slabs = snapshot_slabs(callee, snapshots)
        augmented = augmented_function(module, callee, snapshots, slabs)
        reverse = reverse_function(module, callee, rule, snapshots, slabs)
        pointer = self.primal.stack_pointer(call.block)
        entry = self.primal.entry_start_builder()
        tapes = [entry.alloc(call.operands[p].type.element, STACK_CAPACITY, growable=True,  # type: ignore[attr-defined]
                             name=f"tape.{callee.args[p].name or p}") for p in snapshots]
        loops = loops_around(self.nest, call.block)
        for tape, position in zip(tapes, snapshots):  # for show_cache: a slice of the array per run
            array = call.operands[position]
            what = "nothing of " if slabs.get(position) == NOT_READ else "a slab of " if position in slabs else ""
            self.primal.tapes[tape] = Tape(array, tape, loops, [],
                                           f"size({what}{array.name or 'array'}) per run of {call.block.name} (grows)",
                                           pointer, call.loc)
        forward = Builder(loc=call.loc).before(call)
        run = forward.load(pointer, 0)
        for tape, position in zip(tapes, snapshots):
            array = call.operands[position]
            size = slab_size(forward, array, slabs[position]) if position in slabs else array_size(forward, array)
            forward.grow(tape, forward.imul(forward.iadd(run, 1), size))
        replacement = forward.call(augmented, *call.operands, *tapes, run, name=call.name)
        call.replace_all_uses_with(replacement)
        call.erase()
        return reverse, [*tapes, builder.isub(builder.load(pointer, 0), 1)]

    def _zero_shadow(self, builder: Builder, shadow: Value, extents: list[Value]) -> None:
        """Zero shadow[0:e0, 0:e1, ...]: a loop nest emitted at `builder`, which continues after it."""
        zero = 0.0 if shadow.type.element.is_float else 0  # type: ignore[attr-defined]
        builder.loop_nest(extents, lambda b, indices: b.store(zero, shadow, *indices), name="zero")

    def _edge(self, block: Block, pred: Block, phi_adjoints: list[tuple[Phi, Value]],
              counters: list[tuple[Loop, Value]]) -> Block:
        """The block on the reversed edge pred -> block: phi adjoints flow to pred's incoming values, and
        `counters` are the reverse counters of the loops the reverse pass enters (or goes round again)."""
        edge = self.function.add_block(f"{self.reverse[block].name}.{pred.name or 'bb'}",
                                       after=self.reverse[block])
        builder = Builder(edge)
        for phi, adjoint in phi_adjoints:
            incoming = phi.incoming_value(pred)
            if self.is_active(incoming):
                self.add_adjoint(builder, incoming, adjoint)
        for loop, counter in counters:
            builder.store(counter, self.counter_slots[loop], 0)
        builder.br(self.reverse[pred])
        return edge

    def _loops_entered(self, block: Block, pred: Block, context: ReverseContext,
                       builder: Builder) -> list[tuple[Loop, Value]]:
        """The loops that the primal edge pred -> block leaves, each with the value its counter had then:
        a counted loop leaves from its header when the counter equals the trip count; a loop of unknown
        trip count recorded it in the exit block (`LoopFrame.exit_counts`)."""
        entered = []
        loop = self.nest.loop_of(pred)
        while loop is not None and block not in loop:
            frame = self.frames[loop]
            count = frame.trip if frame.trip is not None else frame.exit_counts[block]
            entered.append((loop, self.primal.lookup(count, context, builder)))
            loop = loop.parent
        return entered

    def _branch_back(self, block: Block, context: ReverseContext, builder: Builder,
                     phi_adjoints: list[tuple[Phi, Value]], exit_block: Block) -> None:
        preds = self.preds[block]
        entered = {pred: self._loops_entered(block, pred, context, builder) for pred in preds}
        self.branch_point[block] = builder.block  # type: ignore[assignment]
        if block is self.function.entry:
            builder.br(exit_block)
        elif block in self.headers:
            loop = self.headers[block].loop
            iteration = context.counters[loop]
            first_run = builder.icmp_eq(iteration, 0)
            previous = builder.isub(iteration, 1, name=f"{block.name or 'loop'}.rev.index")
            preheader, latch = loop.preheader, loop.latches[0]
            assert preheader is not None
            builder.cbr(first_run, self._edge(block, preheader, phi_adjoints, entered[preheader]),
                        self._edge(block, latch, phi_adjoints, [(loop, previous), *entered[latch]]))
        elif len(preds) == 1:
            builder.br(self._edge(block, preds[0], phi_adjoints, entered[preds[0]]))
        else:
            self._branch_to_predecessor(block, context, builder, phi_adjoints, preds, entered)

    def _branch_to_predecessor(self, block: Block, context: ReverseContext, builder: Builder,
                               phi_adjoints: list[tuple[Phi, Value]], preds: list[Block],
                               entered: dict[Block, list[tuple[Loop, Value]]]) -> None:
        sides = self._branch_sides(block, preds)
        if sides is not None:
            condition, if_true, if_false = sides
            builder.cbr(self.primal.lookup(condition, context, builder),
                        self._edge(block, if_true, phi_adjoints, entered[if_true]),
                        self._edge(block, if_false, phi_adjoints, entered[if_false]))
            return
        came_from = self.primal.lookup(self._record_predecessor(block, preds), context, builder)
        for index, pred in enumerate(preds[:-1]):
            test = builder.icmp_eq(came_from, index)
            otherwise = self.function.add_block(f"{self.reverse[block].name}.not{index}", after=builder.block)
            builder.cbr(test, self._edge(block, pred, phi_adjoints, entered[pred]), otherwise)
            builder.at_end(otherwise)
        builder.br(self._edge(block, preds[-1], phi_adjoints, entered[preds[-1]]))

    def _branch_sides(self, block: Block, preds: list[Block]) -> tuple[Value, Block, Block] | None:
        """The immediate dominator's condition and the predecessor on its true and false side, if that
        condition tells the two predecessors apart (module docstring)."""
        dominator = self.tree.idom[block]
        terminator = dominator.terminator if dominator is not None else None
        if len(preds) != 2 or terminator is None or terminator.op is not Op.CBR:
            return None
        sides = [self._side(dominator, terminator, block, pred) for pred in preds]  # type: ignore[arg-type]
        if sorted(sides, key=str) != [False, True]:  # type: ignore[type-var]
            return None
        if_true = preds[sides.index(True)]
        if_false = preds[sides.index(False)]
        return terminator.operands[0], if_true, if_false

    def _side(self, dominator: Block, terminator: Instruction, block: Block, pred: Block) -> bool | None:
        """Which side of the dominator's `cbr` every path into `block` through `pred` took, if one."""
        true_target, false_target = terminator.successors
        if true_target is false_target:
            return None
        if pred is dominator:
            return true_target is block
        for side, target in ((True, true_target), (False, false_target)):
            if self.preds[target] == [dominator] and self.tree.dominates(target, pred):
                return side
        return None

    def _record_predecessor(self, block: Block, preds: list[Block]) -> Phi:
        """A phi of `block` numbering the predecessor control came from (in the forward pass)."""
        return Builder(block).phi(I64, [(pred, index) for index, pred in enumerate(preds)],
                                  name=f"{block.name or 'bb'}.from")

    def _finish(self, exit_block: Block) -> None:
        assert exit_block.terminator is not None
        builder = Builder().before(exit_block.terminator)
        for arg, output in self.active_outputs:
            adjoint = builder.load(self.slot(arg), 0) if arg in self.slots else Constant(arg.type, 0.0)
            builder.store(adjoint, output, 0)
        _order_blocks(self.function, self.blocks, self.reverse, exit_block)


def _order_blocks(function: Function, forward: list[Block], reverse: dict[Block, Block], exit_block: Block) -> None:
    """Lay the blocks out as forward pass, reverse pass (edges after their block), exit."""
    placed = set(forward) | set(reverse.values()) | {exit_block}
    extra: dict[Block, list[Block]] = {}
    for block in function.blocks:
        if block not in placed:
            owner = next((r for r in reverse.values() if block.name and block.name.startswith(f"{r.name}.")), None)
            extra.setdefault(owner, []).append(block)  # type: ignore[arg-type]
    forward_set = set(forward)
    order = [block for block in function.blocks if block in forward_set]
    for primal in reversed(forward):
        order.append(reverse[primal])
        order.extend(extra.pop(reverse[primal], []))
    for leftovers in extra.values():
        order.extend(leftovers)
    order.append(exit_block)
    function.blocks[:] = order

