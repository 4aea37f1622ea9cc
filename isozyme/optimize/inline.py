"""inline: replace calls of small functions of the module by a copy of the callee's body.

After inline, every `call` that was in a function when the pass reached it is gone unless `refusal` names
a reason to keep it (the rules are the table `REFUSALS`, checked in order):

- `noinline`: the callee has the `noinline` flag (a kernel with a custom derivative: AD must see the call,
  `enzyme_ad/custom.py`).
- `recursive`: the callee is on a cycle of the call graph (it calls itself, directly or through others).
  Inlining it would never end; the caller itself is never inlined into itself.
- `never returns`: the callee has no `ret`, so there is no continuation to branch back to.
- `too big`: the callee's cost, its number of instructions (phis and terminators included), is above the
  threshold: the pass parameter `threshold`, default 50, written `inline<threshold=100>` in a pass list.
- `hoistable`: the call is in a loop, its callee is `readnone` or `readonly` (func-attrs) and every
  argument is defined outside the innermost loop around it. LICM can hoist such a call, running the callee
  once instead of once per iteration; inlined, the callee's own loop would stay in the caller's loop. This
  keeps DESIGN 4's showcase: `mag(x, n)` in `norm`'s loop is hoisted, not inlined.

Functions are visited bottom-up over the call graph (callees first), so a callee's cost is its size after
the inlining into it, and call sites cloned from a callee are not revisited (they were refused there).

Inlining one call (`inline_call`) splits the caller's block after the call; the tail moves to a
continuation block, and the successors' phis name it as their predecessor. The callee's blocks are cloned
between the two (values, phis and branch targets remapped, constants copied, names and source locations
kept); each `ret` becomes a branch to the continuation, where a phi merges the returned values when there
are several. Requires verified IR; keeps it valid. The callee stays in the module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from isozyme.optimize.call_graph import bottom_up_components, call_sites, recursive_functions
from isozyme.ssa.flags import NOINLINE
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Module, Phi, Value
from isozyme.ssa.loops import LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.types import VOID

DEFAULT_THRESHOLD = 50
"""The largest callee (in instructions) that is inlined when the pass list gives no `threshold`."""


@dataclass
class InlineContext:
    """What the policy needs to know about the caller and the module."""

    threshold: int
    """The largest callee cost inlined."""
    recursive: set[Function]
    """The functions on a cycle of the call graph."""
    loops: LoopNest
    """The caller's loops, computed before any inlining into it."""


def cost(function: Function) -> int:
    """The inlining cost of a callee: its number of instructions."""
    return sum(len(block.instructions) for block in function.blocks)


def _hoistable(call: Instruction, context: InlineContext) -> bool:
    """Is `call` in a loop, with a callee that writes no memory, and loop-invariant arguments?"""
    loop = context.loops.loop_of(call.block)  # type: ignore[arg-type]
    if loop is None or not call.callee.flags & {"readnone", "readonly"}:
        return False
    return not any(isinstance(arg, Instruction) and arg.block in loop for arg in call.operands)


REFUSALS: tuple[tuple[str, Callable[[Instruction, InlineContext], bool]], ...] = (
    ("noinline", lambda call, context: NOINLINE in call.callee.flags),
    ("recursive", lambda call, context: call.callee in context.recursive),
    ("never returns", lambda call, context: not any(inst.op is Op.RET for inst in call.callee.instructions())),
    ("too big", lambda call, context: cost(call.callee) > context.threshold),
    ("hoistable", _hoistable),
)
"""Why a call is kept, as (reason, predicate) rows checked in order (module docstring)."""


def refusal(call: Instruction, context: InlineContext) -> str | None:
    """The first reason not to inline `call`, or None when it is inlined."""
    return next((reason for reason, applies in REFUSALS if applies(call, context)), None)


@dataclass
class _BodyCloner:
    """Copies a callee's instructions into the caller, mapping callee values and blocks to the copies."""

    values: dict[Value, Value]
    """Callee value -> caller value: parameters to call operands, instructions to their clones."""
    blocks: dict[Block, Block] = field(default_factory=dict)
    """Callee block -> its clone."""
    forward: dict[Value, Value] = field(default_factory=dict)
    """Placeholders for values used before their clone exists (phi operands, later blocks)."""

    def value(self, original: Value) -> Value:
        if isinstance(original, Constant):
            return Constant(original.type, original.value, name=original.name, loc=original.loc)
        if original in self.values:
            return self.values[original]
        return self.forward.setdefault(original, Value(original.type))

    def instruction(self, inst: Instruction) -> Instruction:
        operands = tuple(self.value(operand) for operand in inst.operands)
        common = dict(name=inst.name, loc=inst.loc, attrs=dict(inst.attrs), flags=set(inst.flags))
        if isinstance(inst, Phi):
            clone: Instruction = Phi(inst.type, operands=operands, blocks=tuple(self.blocks[b] for b in inst.blocks),
                                     **common)  # type: ignore[arg-type]
        else:
            clone = Instruction(inst.type, op=inst.op, operands=operands,
                                successors=tuple(self.blocks[b] for b in inst.successors), **common)  # type: ignore[arg-type]
        self.values[inst] = clone
        return clone

    def resolve_forward_references(self) -> None:
        for original, placeholder in self.forward.items():
            placeholder.replace_all_uses_with(self.values[original])
        self.forward.clear()


def split_block_after(inst: Instruction, name: str | None = None) -> Block:
    """Move everything after `inst` into a new block placed right after its block; the new block."""
    block = inst.block
    assert block is not None and block.function is not None
    tail = block.instructions[block.position(inst) + 1:]
    continuation = block.function.add_block(name, after=block)
    for moved in tail:
        moved.remove_from_block()
        continuation.append(moved)
    for successor in continuation.successors:
        for phi in successor.phis:
            phi.replace_incoming_block(block, continuation)
    return continuation


def _clone_blocks(callee: Function, cloner: _BodyCloner, after: Block,
                  continuation: Block) -> list[tuple[Block, Value | None]]:
    """Clone the callee's blocks after `after`, `ret`s branching to `continuation`; (block, returned value)."""
    function = after.function
    assert function is not None
    for original in callee.blocks:
        after = cloner.blocks[original] = function.add_block(f"{callee.name}.{original.name or 'bb'}", after=after)
    returns: list[tuple[Block, Value | None]] = []
    for original in callee.blocks:
        clone = cloner.blocks[original]
        for inst in original.instructions:
            if inst.op is Op.RET:
                returns.append((clone, inst.operands[0] if inst.operands else None))
                clone.append(Instruction(VOID, op=Op.BR, successors=(continuation,), loc=inst.loc))
            else:
                clone.append(cloner.instruction(inst))
    cloner.resolve_forward_references()
    return [(block, None if value is None else cloner.value(value)) for block, value in returns]


def _merge_returns(call: Instruction, continuation: Block, returns: list[tuple[Block, Value | None]]) -> None:
    """Make the call's users use the returned value: directly for one `ret`, through a phi for several."""
    if call.type.is_void:
        return
    if len(returns) == 1:
        result = returns[0][1]
    else:
        result = Phi(call.type, name=call.name, loc=call.loc)
        for block, value in returns:
            result.add_incoming(block, value)  # type: ignore[arg-type]
        continuation.insert(0, result)
    call.replace_all_uses_with(result)  # type: ignore[arg-type]


def inline_call(call: Instruction) -> None:
    """Replace `call` by a copy of its callee's body (module docstring); the callee must return."""
    block, callee = call.block, call.callee
    assert block is not None
    continuation = split_block_after(call, f"{callee.name}.exit")
    cloner = _BodyCloner(dict(zip(callee.args, call.operands)))
    returns = _clone_blocks(callee, cloner, block, continuation)
    _merge_returns(call, continuation, returns)
    call.erase()
    block.append(Instruction(VOID, op=Op.BR, successors=(cloner.blocks[callee.entry],), loc=call.loc))


def inline_into(function: Function, threshold: int, recursive: set[Function]) -> bool:
    """Inline the call sites of `function` that the policy accepts; True if any was inlined."""
    calls = call_sites(function)
    if not calls:
        return False
    context = InlineContext(threshold, recursive, LoopNest(function))
    chosen: Sequence[Instruction] = [call for call in calls if refusal(call, context) is None]
    for call in chosen:
        inline_call(call)
    return bool(chosen)


def inline(module: Module, threshold: int = DEFAULT_THRESHOLD) -> bool:
    """Inline calls in every function of `module`, callees first; True if any call was inlined."""
    recursive = recursive_functions(module)
    changed = False
    for component in bottom_up_components(module):
        for function in component:
            changed |= inline_into(function, threshold, recursive)
    return changed
