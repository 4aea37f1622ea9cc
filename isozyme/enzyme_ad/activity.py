"""Activity analysis (DESIGN 5): which values and which arrays' memory the derivative must carry.

Invariant: a value is active iff it is *varied* (it depends, through data flow and through memory, on an
active input) and *useful* (it influences the active return value or the contents of an array whose
shadow is an output). The reverse and forward passes differentiate exactly the active values and give a
shadow to exactly the arrays whose memory is active; every other value is a constant to them. Requires
verified IR; reads the IR and changes nothing.

Inputs: one activity per argument, `const`, `dup` (Duplicated: an array with a shadow, or a float scalar
with a tangent in forward mode) or `active` (Active: a float scalar whose adjoint is returned), and whether
the return value is active (by default: the function returns a float; its adjoint is the seed).
Integers, booleans and integer arrays are never active: `dup`/`active` on one is a `TypeError` naming
the parameter, and so is `active` on an array (an array is Duplicated or Const).

Rules, the same two for every op (the op table and `memory_accesses` of func-attrs supply the data):
- Only float scalars can be active values. Integers, indices, `i1` conditions, `dim` results and
  constants never are; control flow carries no activity (derivatives are taken branch by branch).
- Memory is tracked per *root*: an array argument, an `alloc`, or a call returning an array. An array
  value (a phi of arrays) stands for every root it may be (`ARRAY_SOURCES`, as in `array_provenance`);
  distinct arguments never alias (DESIGN 1.1). A root holds varied / useful memory as a whole, whatever
  the index and wherever the access is (flow-insensitive, so conservative: never too few active values).
- Varied, forward: an instruction's inputs are its float operands and the memory of the arrays it reads.
  If an input is varied, so are its float result and the memory of every array it writes (stores, atomic
  adds, and the arrays a callee writes by its `module_memory_effects` summary). A `dup`/`active` float
  argument is varied, and so is the memory of a `dup` array.
- Useful, backward: an instruction's outputs are its float result and the memory of the arrays it writes
  (and, for `ret`, the returned value when the return is active). If an output is useful, so are its
  float operands and the memory of every array it reads. The memory of a `dup` array is useful (its
  shadow is an output); that of an `alloc` or a `const` argument is useful when a useful value is loaded
  from it, directly or through a call.
- A call is a black box with its callee's summary: its float result is varied if any float operand or any
  array it reads is varied, and so is the memory it writes; its operands (and the arrays it reads) are
  useful if its result or the memory it writes is useful. A call without a summary reads and writes every
  array passed to it.
An instruction must be differentiated (`is_active_instruction`) when its result is active, when it writes
active memory (a store of a constant into a shadowed array still zeroes the shadow in reverse mode), or
when it returns an active value (where the seed enters).
Varied and useful are independent monotone problems, each solved by iterating to its fixed point (phis
and loop-carried memory form cycles). A `const` array whose memory ends up active would need a shadow it
does not have: that is an `ActivityError` naming the parameter, never a silently wrong derivative.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from isozyme.optimize.function_attributes import (
    ARRAY_SOURCES,
    MemoryEffects,
    memory_accesses,
    module_memory_effects,
)
from isozyme.optimize.memory_effects import array_root
from isozyme.ssa.ir import Argument, Function, Instruction, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.printer import PREDS_COMMENT_COLUMN, Namer, print_function


class ArgActivity(Enum):
    """How an argument takes part in differentiation (Enzyme's `Const`, `Duplicated`, `Active`)."""

    CONST = "const"
    DUP = "dup"
    ACTIVE = "active"

    def __str__(self) -> str:
        return self.value


class ActivityError(TypeError):
    """The argument activities cannot give a correct derivative (a Const array that carries one)."""


Roots = dict[Value, frozenset[Value]]
"""For each array value, the memory roots it may point into."""


@dataclass(eq=False)
class Activity:
    """The result of `analyze_activity` for one function and one activity pattern."""

    function: Function
    """The analyzed function."""
    arg_activities: tuple[ArgActivity, ...]
    """The activity of each parameter, in order."""
    returns_active: bool
    """Whether the return value is active (its adjoint is the seed)."""
    varied: frozenset[Value]
    """Float values depending on an active input."""
    useful: frozenset[Value]
    """Float values influencing an active output."""
    active_memory: frozenset[Value]
    """Memory roots (array arguments, allocs, calls returning arrays) whose memory is active."""
    roots: Roots = field(repr=False)
    """For each array value of the function, the roots it may point into."""
    summaries: dict[Function, MemoryEffects] = field(repr=False)
    """The memory effects of the callees, by which calls read and write their array arguments."""

    @property
    def active_values(self) -> frozenset[Value]:
        """The float values the derivative carries: varied and useful."""
        return self.varied & self.useful

    @property
    def active_arrays(self) -> frozenset[Value]:
        """The array values (arguments, allocs, phis of arrays) whose memory is active: they need a shadow."""
        return frozenset(array for array, roots in self.roots.items() if roots & self.active_memory)

    def is_active_memory(self, array: Value) -> bool:
        """Does (some memory `array` may point into) need a shadow?"""
        return bool(self.roots.get(array, frozenset()) & self.active_memory)

    def is_active(self, value: Value) -> bool:
        """Is `value` active? An array value is active when its memory is; a constant never is."""
        if value.type.is_array:
            return self.is_active_memory(value)
        return value in self.varied and value in self.useful

    def is_active_instruction(self, inst: Instruction) -> bool:
        """Must a derivative pass differentiate `inst`: is its result active, does it write active memory, or
        does it return an active value (where the seed enters)?"""
        if not inst.type.is_void and self.is_active(inst):
            return True
        if inst.op is Op.RET and inst.operands:
            return self.returns_active and self.is_active(inst.operands[0])
        return bool(set(accessed_roots(inst, self.roots, self.summaries, writing=True)) & self.active_memory)


# --- inputs -------------------------------------------------------------------------------------------------


def _can_be_active(value: Value) -> bool:
    """Floats and float arrays; integers, booleans, integer arrays and void never are."""
    ty = value.type
    return ty.is_float or (ty.is_array and ty.element.is_float)  # type: ignore[attr-defined]


def _check_argument(arg: Argument, activity: ArgActivity) -> None:
    if activity is ArgActivity.CONST:
        return
    where = f"parameter '{arg.name}' of @{arg.function.name if arg.function else '?'}"
    if not _can_be_active(arg):
        raise TypeError(f"{where} has type {arg.type}, which is never active: it must be const, not {activity}")
    if arg.type.is_array and activity is ArgActivity.ACTIVE:
        raise TypeError(f"{where} is an array: it is dup (Duplicated, with a shadow) or const, not active")


def _parse_activities(function: Function, activities: Sequence[ArgActivity | str]) -> tuple[ArgActivity, ...]:
    if len(activities) != len(function.args):
        raise TypeError(f"@{function.name} has {len(function.args)} parameters, got {len(activities)} activities")
    parsed = []
    for arg, activity in zip(function.args, activities):
        try:
            kind = ArgActivity(activity)
        except ValueError:
            names = ", ".join(a.value for a in ArgActivity)
            raise ValueError(f"unknown activity {activity!r} for parameter '{arg.name}' ({names})") from None
        _check_argument(arg, kind)
        parsed.append(kind)
    return tuple(parsed)


def memory_roots(function: Function) -> Roots:
    """For every array value of `function`, the roots it may be: arguments, allocs, calls returning arrays."""
    roots: Roots = {arg: frozenset({arg}) for arg in function.args if arg.type.is_array}
    arrays = [inst for inst in function.instructions() if inst.type.is_array]
    changed = True
    while changed:  # phis of arrays in loops may see each other
        changed = False
        for inst in arrays:
            if inst.op not in ARRAY_SOURCES:
                raise KeyError(f"activity: no provenance rule for {inst.op}, which produces an array")
            own = {inst} if array_root(inst) is not None or inst.op is Op.CALL else set()
            merged = frozenset(own).union(*(roots.get(v, frozenset()) for v in ARRAY_SOURCES[inst.op](inst)))
            if merged != roots.get(inst):
                roots[inst] = merged
                changed = True
    return roots


# --- the two data-flow problems -----------------------------------------------------------------------------


@dataclass
class _Facts:
    """A growing set of float values and of memory roots with some property (varied, or useful)."""

    values: set[Value] = field(default_factory=set)
    memory: set[Value] = field(default_factory=set)
    changed: bool = False

    def add_value(self, value: Value) -> None:
        if value.type.is_float and value not in self.values:
            self.values.add(value)
            self.changed = True

    def add_memory(self, roots: Iterable[Value]) -> None:
        for root in roots:
            if _can_be_active(root) and root not in self.memory:
                self.memory.add(root)
                self.changed = True


def accessed_roots(inst: Instruction, roots: Roots, summaries: dict[Function, MemoryEffects],
                   writing: bool) -> list[Value]:
    """The roots `inst` may write (`writing`) or read; a call returning an array writes that new array."""
    found = [root for array, reads, writes in memory_accesses(inst, summaries)
             if (writes if writing else reads) for root in roots.get(array, frozenset())]
    if writing and inst.op is Op.CALL and inst.type.is_array:
        found.append(inst)
    return found


def _solve(facts: _Facts, step: Callable[[Instruction, _Facts], None], instructions: list[Instruction]) -> None:
    """Apply `step` to every instruction, in the given order, until nothing changes."""
    facts.changed = True
    while facts.changed:
        facts.changed = False
        for inst in instructions:
            step(inst, facts)


@dataclass
class _Problem:
    """What the transfer functions of both directions read: memory roots, callee summaries, the seed."""

    roots: Roots
    summaries: dict[Function, MemoryEffects]
    returns_active: bool

    def arrays(self, inst: Instruction, writing: bool) -> list[Value]:
        return accessed_roots(inst, self.roots, self.summaries, writing)

    def varied_step(self, inst: Instruction, varied: _Facts) -> None:
        inputs = any(v in varied.values for v in inst.operands) or \
            any(root in varied.memory for root in self.arrays(inst, writing=False))
        if inputs:
            varied.add_value(inst)
            varied.add_memory(self.arrays(inst, writing=True))

    def useful_step(self, inst: Instruction, useful: _Facts) -> None:
        outputs = inst in useful.values or (inst.op is Op.RET and self.returns_active) or \
            any(root in useful.memory for root in self.arrays(inst, writing=True))
        if outputs:
            for operand in inst.operands:
                useful.add_value(operand)
            useful.add_memory(self.arrays(inst, writing=False))


def _summaries(function: Function) -> dict[Function, MemoryEffects]:
    """The callees' memory summaries; without a module, none (every call reads and writes its arrays)."""
    return module_memory_effects(function.module) if function.module is not None else {}


def _check_const_arrays(function: Function, activities: tuple[ArgActivity, ...], active: set[Value]) -> None:
    for arg, activity in zip(function.args, activities):
        if arg in active and activity is ArgActivity.CONST:
            raise ActivityError(f"parameter '{arg.name}' of @{function.name} is const, but active values are "
                                f"stored into it and loaded back into the result: make it dup (Duplicated)")


def analyze_activity(function: Function, arg_activities: Sequence[ArgActivity | str],
                     returns_active: bool | None = None) -> Activity:
    """The activity of every value and array of `function` (module docstring) for `arg_activities`."""
    activities = _parse_activities(function, arg_activities)
    if returns_active is None:
        returns_active = function.return_type.is_float
    elif returns_active and not function.return_type.is_float:
        raise TypeError(f"@{function.name} returns {function.return_type}, which cannot be active")
    problem = _Problem(memory_roots(function), _summaries(function), returns_active)
    varied, useful = _Facts(), _Facts()
    for arg, activity in zip(function.args, activities):
        if activity is not ArgActivity.CONST:
            varied.add_value(arg)
            varied.add_memory([arg] if arg.type.is_array else [])
        if activity is ArgActivity.DUP and arg.type.is_array:
            useful.add_memory([arg])
    instructions = list(function.instructions())
    _solve(varied, problem.varied_step, instructions)
    _solve(useful, problem.useful_step, instructions[::-1])
    active_memory = varied.memory & useful.memory
    _check_const_arrays(function, activities, active_memory)
    return Activity(function, activities, returns_active, frozenset(varied.values), frozenset(useful.values),
                    frozenset(active_memory), problem.roots, problem.summaries)


# --- printing -----------------------------------------------------------------------------------------------


def _annotation(activity: Activity, inst: Instruction) -> str:
    """The trailing comment of one instruction; empty for control flow that carries no data."""
    if activity.is_active_instruction(inst):
        return "active"
    if inst.type.is_float and inst in activity.varied:
        return "const: not useful"
    if inst.type.is_float and inst in activity.useful:
        return "const: not varied"
    returns_value = inst.op is Op.RET and bool(inst.operands)
    return "" if inst.op in (Op.BR, Op.CBR, Op.RET, Op.ASSERT) and not returns_value else "const"


def _header(function: Function, activity: Activity, namer: Namer) -> list[str]:
    params = ", ".join(f"{namer.value(arg)}: {kind}" for arg, kind in zip(function.args, activity.arg_activities))
    returns = "" if function.return_type.is_void else f" -> {'active' if activity.returns_active else 'const'}"
    in_order = [*function.args, *function.instructions()]
    listed = ", ".join(namer.value(v) for v in in_order if v in activity.active_arrays) or "none"
    return [f"; activity @{function.name}({params}){returns}", f"; active memory: {listed}"]


def format_activity(function: Function, activity: Activity) -> str:
    """`function`'s text IR with a header of argument activities and active arrays, and each instruction
    followed by `; active` or `; const` (with why, for a float that is only varied or only useful). The
    annotations are comments, so the text still parses to the same function."""
    namer = Namer(function)
    printed = iter(print_function(function).split("\n"))
    lines = _header(function, activity, namer) + [next(printed)]
    for block in function.blocks:
        lines.append(next(printed))  # the label
        for inst in block.instructions:
            text, note = next(printed), _annotation(activity, inst)
            lines.append(f"{text.ljust(PREDS_COMMENT_COLUMN - 1)} ; {note}" if note else text)
    lines.extend(printed)
    return "\n".join(lines)
