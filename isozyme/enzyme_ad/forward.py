"""Forward mode: `fwddiffe_<f>`, the primal with a tangent computed right after every active value (Enzyme's
`fwddiff`, DESIGN 5).

Input: a function without calls (inlined by `prepare.py`) but those of kernels with a custom forward rule
(`custom.py`: each becomes a call of its rule), and its
activity (`activity.py`, with `dup` for every differentiated argument: forward mode has no Active). The
function is rewritten in place into `fwddiffe_<f>`; unlike reverse mode it needs no loop counters, tapes or
reversed control flow, so any reducible or irreducible CFG, `while` loops and `break` included, is fine.

- **Signature** (`forward_parameters`). Each parameter, followed by its tangent `%d_<x>` when it is
  Duplicated: the shadow array of an array (its tangent on entry; on exit the tangent of what the kernel
  left in the array), a scalar of the same type for a float scalar. Then, when the kernel returns a float
  and its return is active, `%d_return: T[?]`, a one-element array that receives the tangent of the return
  value. It returns the primal return value, as `diffe_<f>` does. A tangent name already taken by a
  parameter (forward mode over `diffe_<f>`, whose shadows are named `d_<x>` too) gets the first free suffix
  `_1`, `_2`, ...
- **Tangents.** The blocks are visited in reverse post-order, so an operand's tangent exists before its
  use; each active instruction's rule (`TANGENT_RULES` of `rules.py`) emits its tangent right after it. A
  constant, or a value that is not active, has tangent 0 (no code). An active phi gets a tangent phi in
  its block, its incoming tangents filled in once every block is done (loops carry tangents around).
- **Memory.** A Duplicated array, an active local array (`alloc`: a shadow `alloc` of the same extents and
  flags, zeroed, right after it) and an active phi of arrays have a shadow: `load` loads the tangent from
  the shadow, `store` stores the stored value's tangent into it (0 for a constant), `atomic_add` adds it.
  An op that changes an array's extent (`grow` of a growable array, `rules.MIRRORED_OPS`) is repeated on
  the shadow.
- **Return.** Before each `ret` of an active return value, its tangent is stored into `%d_return[0]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from isozyme.enzyme_ad.activity import Activity, ArgActivity
from isozyme.enzyme_ad.custom import custom_forward_rule
from isozyme.enzyme_ad.errors import unsupported
from isozyme.enzyme_ad.rules import MIRRORED_OPS, TANGENT_RULES
from isozyme.ssa.builder import Builder
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.flags import CHECKED
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import ArrayType, Type

RETURN_TANGENT = "d_return"
"""The name of the output parameter receiving the return value's tangent."""


@dataclass(frozen=True)
class ForwardParameter:
    """One parameter of `fwddiffe_<f>`."""

    name: str
    type: Type
    role: str
    """"primal", "tangent" (of the primal parameter before it) or "return" (`%d_return`)."""


def _free_name(wanted: str, taken: set[str]) -> str:
    name, suffix = wanted, 0
    while name in taken:
        suffix += 1
        name = f"{wanted}_{suffix}"
    taken.add(name)
    return name


def forward_parameters(params: Sequence[tuple[str, Type]], activities: Sequence[ArgActivity], return_type: Type,
                       returns_active: bool = True) -> list[ForwardParameter]:
    """The parameters of `fwddiffe_<f>` (module docstring), from the primal's and the activities: the runtime
    builds its call from this before `fwddiffe_<f>` exists."""
    taken = {name for name, _ in params}
    result: list[ForwardParameter] = []
    for (name, ty), kind in zip(params, activities, strict=True):
        result.append(ForwardParameter(name, ty, "primal"))
        if kind is ArgActivity.ACTIVE:
            raise TypeError(f"parameter '{name}' is Active: forward mode takes Duplicated(value, tangent)")
        if kind is ArgActivity.DUP:
            result.append(ForwardParameter(_free_name(f"d_{name}", taken), ty, "tangent"))
    if returns_active and return_type.is_float:
        result.append(ForwardParameter(_free_name(RETURN_TANGENT, taken), ArrayType(return_type, 1), "return"))  # type: ignore[arg-type]
    return result


def check_forward_activities(function: Function, activities: Sequence[ArgActivity | str]) -> None:
    """Forward mode has no Active: a TypeError naming the first parameter that is."""
    for arg, activity in zip(function.args, activities):
        if activity in (ArgActivity.ACTIVE, ArgActivity.ACTIVE.value):
            raise TypeError(f"parameter '{arg.name}' of @{function.name} is active: forward mode takes dup "
                            "(Duplicated(value, tangent)) or const")


def forward_mode(function: Function, activity: Activity) -> Function:
    """Rewrite `function`, which calls nothing, into `fwddiffe_<f>` (module docstring)."""
    _ForwardSynthesis(function, activity).run()
    return function


class _TangentContext:
    """The `rules.TangentContext` of one active instruction."""

    def __init__(self, synthesis: _ForwardSynthesis, inst: Instruction, builder: Builder) -> None:
        self.synthesis, self.inst, self.b = synthesis, inst, builder

    def operand(self, index: int) -> Value:
        return self.inst.operands[index]

    def active(self, index: int) -> bool:
        return self.synthesis.is_active(self.inst.operands[index])

    def tangent(self, index: int) -> Value | None:
        return self.synthesis.tangent_of(self.inst.operands[index])

    def shadow(self, index: int) -> Value:
        return self.synthesis.shadow_of(self.inst, self.inst.operands[index])


class _ForwardSynthesis:
    def __init__(self, function: Function, activity: Activity) -> None:
        self.function, self.activity = function, activity
        self.tangents: dict[Value, Value] = {}
        """The tangent of each active scalar value, the shadow of each active array value."""
        self.made: set[Value] = set()
        """The tangents made so far (a rule may pass an operand's tangent on: it keeps its name)."""
        self.tangent_phis: list[tuple[Phi, Phi]] = []
        self.return_tangent: Argument | None = None
        self.replaced: dict[Value, Value] = {}
        """Calls of custom forward rules, each to the primal call it replaced (whose activity it has)."""

    def is_active(self, value: Value) -> bool:
        value = self.replaced.get(value, value)
        return not isinstance(value, Constant) and self.activity.is_active(value)

    def tangent_of(self, value: Value) -> Value | None:
        """The tangent of a scalar operand; None when it is zero (not active)."""
        if not self.is_active(value):
            return None
        return self.tangents[value]

    def shadow_of(self, inst: Instruction, array: Value) -> Value:
        if array not in self.tangents:
            raise unsupported(inst, "the array has no shadow (it is not a Duplicated argument, nor a local array "
                              "or a phi of arrays that all have one)")
        return self.tangents[array]

    def run(self) -> None:
        self._rewrite_signature()
        blocks = DominatorTree(self.function).rpo
        for block in blocks:
            self._differentiate_block(block)
        reachable = set(blocks)
        for primal, tangent in self.tangent_phis:
            for pred, value in primal.incoming:
                tangent.add_incoming(pred, self._incoming_tangent(primal, value, pred in reachable))

    def _rewrite_signature(self) -> None:
        function = self.function
        function.name = f"fwddiffe_{function.name}"
        signature = forward_parameters([(arg.name or f"arg{arg.index}", arg.type) for arg in function.args],
                                       self.activity.arg_activities, function.return_type,
                                       self.activity.returns_active)
        primal = iter(function.args)
        args: list[Argument] = []
        for param in signature:
            if param.role == "primal":
                args.append(next(primal))
                continue
            new = Argument(param.type, name=param.name)
            if param.role == "tangent":
                self.tangents[args[-1]] = new
            else:
                self.return_tangent = new
            args.append(new)
        function.args = args
        for index, arg in enumerate(args):
            arg.function, arg.index = function, index

    def _differentiate_block(self, block: Block) -> None:
        for phi in block.phis:
            if self.is_active(phi):
                tangent = Builder(block, phi.loc).phi(phi.type, name=f"d.{phi.name}" if phi.name else None)
                self.tangents[phi] = tangent
                self.made.add(tangent)
                self.tangent_phis.append((phi, tangent))
        body = block.instructions[block.first_non_phi_index():]
        for inst, after in zip(body, body[1:]):
            if self.activity.is_active_instruction(inst) or self._mirrored(inst):
                builder = Builder(loc=inst.loc).before(after)
                builder.access_flags = frozenset(inst.flags & {CHECKED})  # the tangent of a checked access too
                self._differentiate(inst, builder)
        terminator = block.terminator
        if terminator is not None and terminator.op is Op.RET:
            self._store_return_tangent(terminator)

    def _mirrored(self, inst: Instruction) -> bool:
        """An extent-changing op on an array with a shadow (rules.MIRRORED_OPS), whatever its activity."""
        return inst.op in MIRRORED_OPS and any(v in self.tangents for v in inst.operands if v.type.is_array)

    def _differentiate(self, inst: Instruction, builder: Builder) -> None:
        if inst.op is Op.CALL and custom_forward_rule(inst.callee) is not None:
            self._custom_call(inst, custom_forward_rule(inst.callee), builder)  # type: ignore[arg-type]
            return
        rule = TANGENT_RULES.get(inst.op)
        if rule is None:
            what = "calls must be inlined first" if inst.op is Op.CALL else "no tangent rule for this op"
            raise unsupported(inst, what)
        tangent = rule(_TangentContext(self, inst, builder))
        if inst.type.is_void:
            return
        if tangent is None:
            if inst.type.is_array:
                raise unsupported(inst, "the array result has no shadow")
            tangent = Constant(inst.type, 0.0)
        elif isinstance(tangent, Instruction) and tangent.name is None and tangent not in self.made:
            tangent.name = f"d.{inst.name}" if inst.name else None
        self.tangents[inst] = tangent
        self.made.add(tangent)

    def _custom_call(self, call: Instruction, rule: Function, builder: Builder) -> None:
        """A call of a kernel with a custom forward rule becomes a call of the rule (custom.py), which runs
        the kernel and writes the tangents."""
        callee: Function = call.callee  # type: ignore[assignment]
        operands: list[Value] = []
        for value in call.operands:
            operands.append(value)
            ty = value.type
            if ty.is_array and ty.element.is_float:  # type: ignore[attr-defined]
                if self.is_active(value):
                    operands.append(self.shadow_of(call, value))
                else:
                    extents = [builder.dim(value, axis) for axis in range(ty.rank)]  # type: ignore[attr-defined]
                    operands.append(builder.alloc(ty.element, *extents, zeroed=True))  # type: ignore[attr-defined]
            elif ty.is_float:
                operands.append(self.tangent_of(value) or Constant(ty, 0.0))
        slot = None
        if callee.return_type.is_float:
            slot = builder.alloc(callee.return_type, 1, name=f"d.{call.name or 'call'}")  # type: ignore[arg-type]
            operands.append(slot)
        result = builder.call(rule, *operands, name=call.name)
        call.replace_all_uses_with(result)
        call.erase()
        self.replaced[result] = call
        if slot is not None:
            tangent = builder.load(slot, 0)
            self.tangents[result] = tangent
            self.made.add(tangent)

    def _incoming_tangent(self, phi: Phi, value: Value, reachable: bool) -> Value:
        """The tangent flowing in with `value`; 0 from a block that never runs (its values have none)."""
        if phi.type.is_array:
            return self.shadow_of(phi, value)
        tangent = self.tangent_of(value) if reachable else None
        return Constant(phi.type, 0.0) if tangent is None else tangent

    def _store_return_tangent(self, ret: Instruction) -> None:
        if self.return_tangent is None or not ret.operands:
            return
        tangent = self.tangent_of(ret.operands[0])
        Builder(loc=ret.loc).before(ret).store(0.0 if tangent is None else tangent, self.return_tangent, 0)
