"""The verifier: the contract every pass must keep (STYLE item 3).

`verify(function_or_module)` raises `VerificationError` listing every problem found, each as
`@f: bbN: message`. It checks, in order:

1. structure: the function has blocks; each block ends in exactly one terminator and has no other; phis
   come first; instructions and blocks point back to their containers; an instruction sits in one block
   only; the entry block has no predecessors; branch targets are blocks of the function; a `cbr` has two
   distinct targets;
2. operands: each is a constant, an argument of this function or an instruction placed in it, has a value
   (not void), and its use list records the use;
3. dominance: every use is dominated by its definition (a phi's operand at the end of its incoming block);
4. phis: incoming blocks are exactly the predecessors, each once, with values of the phi's type;
5. types: per-op rules from the op table (operand classes, one shared type, derived result type), memory
   ops (array operand, index count and type, stored value type, dim axis), casts, calls (callee in the
   module, argument count and types, result type), `ret` against the function's return type; growable
   allocs (1-d, used only as the array of load, store, atomic_add and grow, or a call argument) and
   `grow` (its array is a growable alloc itself, never a phi or an argument; its count is i64); views
   (i64 extents, an arena that is a plain `alloc i64[...]`, an i64 offset, a constant one a multiple of 8).

Structural problems stop the check before dominance, which needs well-formed terminators.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import cached_property

from isozyme.ssa.cfg import predecessors
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.flags import is_growable_alloc
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Module, Phi, Value
from isozyme.ssa.ops import (
    ASSERT_ERRORS,
    CLASS_NAMES,
    OP_INFO,
    SHARED_CLASSES,
    Op,
    Syntax,
    result_type,
    type_in_class,
)
from isozyme.ssa.printer import Namer
from isozyme.ssa.types import I1, I64, VOID, ArrayType, Type


class VerificationError(Exception):
    """Invalid IR. `problems` holds one message per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid IR:\n" + "\n".join(f"  {p}" for p in problems))


class _FunctionVerifier:
    def __init__(self, function: Function) -> None:
        self.function = function
        self.problems: list[str] = []
        self.block_set = set(function.blocks)
        # Sets and counts made once, so that no check scans a list per item: blocks and phis have
        # thousands of entries in generated code.
        self.block_counts = Counter(function.blocks)
        self.listed = {(inst, block) for block in function.blocks for inst in block.instructions}

    # --- reporting ----------------------------------------------------------------------------------------

    @cached_property
    def namer(self) -> Namer:
        """The printed names, made only when there is a problem to report (naming costs more than checking)."""
        return Namer(self.function)

    def report(self, block: Block | None, message: str) -> None:
        where = f"@{self.function.name}"
        if block is not None:
            where += f": {self.namer.block(block)}"
        self.problems.append(f"{where}: {message}")

    def name(self, value: Value) -> str:
        return self.namer.value(value)

    def describe(self, inst: Instruction) -> str:
        """`%x (fadd)` for a value, `store` for a void instruction."""
        return str(inst.op) if inst.type.is_void else f"{self.name(inst)} ({inst.op})"

    # --- 1. structure -------------------------------------------------------------------------------------

    def check_structure(self) -> bool:
        count = len(self.problems)
        if not self.function.blocks:
            self.report(None, "function has no blocks")
            return False
        seen: dict[Instruction, Block] = {}
        for block in self.function.blocks:
            self._check_block(block, seen)
        if not self.problems[count:]:
            preds = predecessors(self.function)[self.function.entry]
            if preds:
                names = " ".join(self.namer.block(p) for p in preds)
                self.report(self.function.entry, f"entry block has predecessors: {names}")
        return len(self.problems) == count

    def _check_block(self, block: Block, seen: dict[Instruction, Block]) -> None:
        if block.function is not self.function:
            self.report(block, "block does not belong to this function (its .function is another)")
        if self.block_counts[block] > 1:
            self.report(block, "block is listed twice in the function")
        instructions = block.instructions
        if not instructions or not instructions[-1].is_terminator:
            self.report(block, "block does not end with a terminator")
        after_non_phi = False
        for position, inst in enumerate(instructions):
            if inst in seen:
                self.report(block, f"{self.describe(inst)} appears in more than one place "
                                   f"(also in {self.namer.block(seen[inst])})")
            seen[inst] = block
            if inst.block is not block:
                self.report(block, f"{self.describe(inst)} is listed in this block but its .block is another")
            if isinstance(inst, Phi) and after_non_phi:
                self.report(block, f"phi {self.name(inst)} is not at the start of the block")
            after_non_phi = after_non_phi or not isinstance(inst, Phi)
            if inst.is_terminator and position != len(instructions) - 1:
                self.report(block, f"terminator {inst.op} is not the last instruction of the block")
            self._check_successors(block, inst)

    def _check_successors(self, block: Block, inst: Instruction) -> None:
        expected = {Op.BR: 1, Op.CBR: 2, Op.RET: 0}.get(inst.op, 0)
        if len(inst.successors) != expected:
            self.report(block, f"{inst.op} must have {expected} target(s), has {len(inst.successors)}")
        for target in inst.successors:
            if target not in self.block_set:
                self.report(block, f"{inst.op} targets a block that is not in this function")
        if inst.op is Op.CBR and len(inst.successors) == 2 and inst.successors[0] is inst.successors[1]:
            self.report(block, f"cbr has the same target {self.namer.block(inst.successors[0])} twice "
                               f"(use br)")

    # --- 2. operands --------------------------------------------------------------------------------------

    def check_operands(self) -> None:
        for block in self.function.blocks:
            for inst in block.instructions:
                for index, operand in enumerate(inst.operands):
                    self._check_operand(block, inst, index, operand)

    def _check_operand(self, block: Block, inst: Instruction, index: int, operand: Value) -> None:
        slots = inst._operand_uses  # the IR's own record of each operand slot
        use = slots[index] if index < len(slots) else None
        if use is None or use.user is not inst or use.index != index or use not in operand.uses:
            self.report(block, f"use list of {self.name(operand)} lacks its use by {self.describe(inst)}")
        if isinstance(operand, Constant):
            return
        if isinstance(operand, Argument):
            if operand.function is not self.function:
                self.report(block, f"{self.describe(inst)} uses an argument of another function")
            return
        if not isinstance(operand, Instruction) or operand.block not in self.block_set \
                or (operand, operand.block) not in self.listed:
            self.report(block, f"operand {index} of {self.describe(inst)} is not defined in this function")
        elif operand.type.is_void:
            self.report(block, f"operand {index} of {self.describe(inst)} is {operand.op}, which has no value")

    # --- 3. dominance -------------------------------------------------------------------------------------

    def check_dominance(self) -> None:
        tree = DominatorTree(self.function)
        for block in self.function.blocks:
            for inst in block.instructions:
                for use in inst.uses:
                    if use.user.block in self.block_set and not tree.dominates_use(inst, use):
                        self._report_dominance(inst, use.user, use.index)

    def _report_dominance(self, definition: Instruction, user: Instruction, index: int) -> None:
        if isinstance(user, Phi):
            incoming = self.namer.block(user.blocks[index])
            self.report(user.block, f"incoming value {self.name(definition)} of phi {self.name(user)} from "
                                    f"{incoming} does not dominate the end of {incoming}")
        elif definition.block is user.block:
            self.report(user.block, f"{self.name(definition)} is used by {self.describe(user)} before it is "
                                    f"defined")
        else:
            self.report(user.block, f"definition of {self.name(definition)} in "
                                    f"{self.namer.block(definition.block)} does not dominate its use by "
                                    f"{self.describe(user)}")

    # --- 4. phis ------------------------------------------------------------------------------------------

    def check_phis(self) -> None:
        preds = predecessors(self.function)
        for block in self.function.blocks:
            for phi in block.phis:
                self._check_phi(block, phi, preds[block])

    def _check_phi(self, block: Block, phi: Phi, preds: list[Block]) -> None:
        counts, pred_set = Counter(phi.blocks), set(preds)
        if all(count == 1 and pred in pred_set for pred, count in counts.items()) and len(counts) == len(pred_set) \
                and all(value.type == phi.type for value in phi.operands):
            return  # valid: no name to make
        name = self.name(phi)
        for pred, count in counts.items():
            if count > 1:
                self.report(block, f"phi {name} lists predecessor {self.namer.block(pred)} more than once")
            if pred not in pred_set:
                self.report(block, f"phi {name} has an incoming value for {self.namer.block(pred)}, which is "
                                   f"not a predecessor")
        for pred in preds:
            if pred not in counts:
                self.report(block, f"phi {name} has no incoming value for predecessor {self.namer.block(pred)}")
        for pred, value in phi.incoming:
            if value.type != phi.type:
                self.report(block, f"phi {name} of type {phi.type} has an incoming value of type {value.type} "
                                   f"from {self.namer.block(pred)}")

    # --- 5. types -----------------------------------------------------------------------------------------

    def check_types(self) -> None:
        for block in self.function.blocks:
            for inst in block.instructions:
                message = TYPE_CHECKS[OP_INFO[inst.op].syntax](self, inst)
                if message:
                    self.report(block, f"{self.describe(inst)}: {message}")

    def check_result(self, inst: Instruction, expected: Type | None) -> str | None:
        if expected is not None and inst.type != expected:
            return f"result type {inst.type} does not match the expected {expected}"
        return None


def _check_pattern(inst: Instruction) -> str | None:
    """Operand count, classes and the shared type T of an op's pattern."""
    pattern = OP_INFO[inst.op].operands
    types = [v.type for v in inst.operands]
    if len(types) != len(pattern):
        return f"takes {len(pattern)} operand(s), got {len(types)}"
    for index, (letter, ty) in enumerate(zip(pattern, types)):
        if not type_in_class(ty, letter):
            return f"operand {index} must be {CLASS_NAMES[letter]}, got {ty}"
    shared = {str(ty) for letter, ty in zip(pattern, types) if letter in SHARED_CLASSES}
    if len(shared) > 1:
        return f"operands must have one type, got {' and '.join(sorted(shared))}"
    return None


def _check_operands_syntax(v: _FunctionVerifier, inst: Instruction) -> str | None:
    problem = _check_pattern(inst)
    if problem:
        return problem
    return v.check_result(inst, result_type(inst.op, [o.type for o in inst.operands]))


def _check_cast(v: _FunctionVerifier, inst: Instruction) -> str | None:
    info = OP_INFO[inst.op]
    source_class, target_class = info.operands
    if len(inst.operands) != 1:
        return f"takes 1 operand, got {len(inst.operands)}"
    source, target = inst.operands[0].type, inst.type
    if not type_in_class(source, source_class):
        return f"converts from {CLASS_NAMES[source_class]}, got {source}"
    if not type_in_class(target, target_class):
        return f"converts to {CLASS_NAMES[target_class]}, got {target}"
    widens = source.bits < target.bits  # type: ignore[attr-defined]
    if info.cast_width == "widen" and not widens:
        return f"must widen, but {source} to {target} does not"
    if info.cast_width == "narrow" and (widens or source == target):
        return f"must narrow, but {source} to {target} does not"
    return None


def _check_indices(inst: Instruction, array_index: int) -> str | None:
    array = inst.operands[array_index] if len(inst.operands) > array_index else None
    if array is None or not isinstance(array.type, ArrayType):
        return f"operand {array_index} must be an array, got {array.type if array else 'nothing'}"
    indices = inst.operands[array_index + 1:]
    if len(indices) != array.type.rank:
        return f"a {array.type.rank}-d array takes {array.type.rank} index(es), got {len(indices)}"
    for position, index in enumerate(indices):
        if index.type != I64:
            return f"index {position} must be i64, got {index.type}"
    return None


def _check_load(v: _FunctionVerifier, inst: Instruction) -> str | None:
    problem = _check_indices(inst, 0)
    return problem or v.check_result(inst, inst.operands[0].type.element)  # type: ignore[attr-defined]


def _check_store(v: _FunctionVerifier, inst: Instruction) -> str | None:
    problem = _check_indices(inst, 1)
    if problem:
        return problem
    element = inst.operands[1].type.element  # type: ignore[attr-defined]
    if inst.operands[0].type != element:
        return f"stores a value of type {inst.operands[0].type} into an array of {element}"
    if inst.op is Op.ATOMIC_ADD and not element.is_float and not element.is_int:
        return f"atomic_add needs a numeric element type, got {element}"
    return v.check_result(inst, VOID)


def _check_dim(v: _FunctionVerifier, inst: Instruction) -> str | None:
    if len(inst.operands) != 1 or not isinstance(inst.operands[0].type, ArrayType):
        return "takes one array operand"
    axis, rank = inst.attrs.get("axis"), inst.operands[0].type.rank
    if not isinstance(axis, int) or not 0 <= axis < rank:
        return f"axis {axis} is out of range for a {rank}-d array"
    return v.check_result(inst, I64)


def _check_extents(inst: Instruction, extents: tuple[Value, ...]) -> str | None:
    if not isinstance(inst.type, ArrayType):
        return f"result must be an array type, got {inst.type}"
    if len(extents) != inst.type.rank:
        return f"a {inst.type.rank}-d array needs {inst.type.rank} extent(s), got {len(extents)}"
    for position, extent in enumerate(extents):
        if extent.type != I64:
            return f"extent {position} must be i64, got {extent.type}"
    return None


def _check_alloc(v: _FunctionVerifier, inst: Instruction) -> str | None:
    problem = _check_extents(inst, inst.operands)
    if problem:
        return problem
    return _check_growable_uses(v, inst) if is_growable_alloc(inst) else None


VIEW_ALIGNMENT_WORDS = 8
"""A view's offset is a multiple of this many i64 words (64 bytes: any element type is aligned there)."""


def _check_view(v: _FunctionVerifier, inst: Instruction) -> str | None:
    if len(inst.operands) < 2:
        return f"takes its extents, an arena and an offset, got {len(inst.operands)} operand(s)"
    *extents, arena, offset = inst.operands
    problem = _check_extents(inst, tuple(extents))
    if problem:
        return problem
    if not (isinstance(arena, Instruction) and arena.op is Op.ALLOC and not is_growable_alloc(arena)
            and arena.type == ArrayType(I64, 1)):
        what = v.describe(arena) if isinstance(arena, Instruction) else f"{v.name(arena)} of type {arena.type}"
        return f"its arena must be a plain alloc of i64[?], got {what}"
    if offset.type != I64:
        return f"its offset must be i64, got {offset.type}"
    if isinstance(offset, Constant) and offset.value % VIEW_ALIGNMENT_WORDS:  # type: ignore[operator]
        return f"its offset {offset.value} is not a multiple of {VIEW_ALIGNMENT_WORDS} words"
    return None


GROWABLE_ARRAY_OPERAND: dict[Op, int] = {Op.LOAD: 0, Op.STORE: 1, Op.ATOMIC_ADD: 1, Op.GROW: 0}
"""The uses a growable alloc may have: the array operand (at this position) of these ops, and an argument of
a call (the callee sees the array as it is then, and cannot grow it: its parameter is no alloc). Not `dim`
(pure, so cse would merge dims across a `grow`), nor phis or `ret` (backends keep the array behind a
descriptor that only the alloc's own value reaches)."""


def _check_growable_uses(v: _FunctionVerifier, inst: Instruction) -> str | None:
    if inst.type.rank != 1:  # type: ignore[attr-defined]
        return f"a growable array must be 1-d, got a {inst.type.rank}-d one"  # type: ignore[attr-defined]
    for use in inst.uses:
        if GROWABLE_ARRAY_OPERAND.get(use.user.op) != use.index and use.user.op is not Op.CALL:
            return (f"a growable array may only be the array operand of load, store, atomic_add or grow, or "
                    f"an argument of a call; it is operand {use.index} of {v.describe(use.user)}")
    return None


def _check_grow(v: _FunctionVerifier, inst: Instruction) -> str | None:
    if len(inst.operands) != 2:
        return f"takes 2 operands, got {len(inst.operands)}"
    array, count = inst.operands
    if isinstance(array, Instruction) and array.op is Op.ALLOC and not is_growable_alloc(array):
        return f"operand 0 {v.name(array)} is an alloc without the growable flag"
    if not is_growable_alloc(array):
        what = v.describe(array) if isinstance(array, Instruction) else f"{v.name(array)} of type {array.type}"
        return f"operand 0 must be a growable alloc, got {what}"
    if count.type != I64:
        return f"operand 1 must be i64, got {count.type}"
    return v.check_result(inst, VOID)


def _check_call(v: _FunctionVerifier, inst: Instruction) -> str | None:
    callee = inst.attrs.get("callee")
    if not isinstance(callee, Function):
        return "call without a callee function"
    module = v.function.module
    if module is None or module.functions.get(callee.name) is not callee:
        return f"callee @{callee.name} is not in the caller's module"
    if len(inst.operands) != len(callee.args):
        return f"passes {len(inst.operands)} argument(s), @{callee.name} takes {len(callee.args)}"
    for position, (arg, param) in enumerate(zip(inst.operands, callee.args)):
        if arg.type != param.type:
            return f"argument {position} has type {arg.type}, @{callee.name} expects {param.type}"
    if inst.type != callee.return_type:
        return f"result type {inst.type} differs from @{callee.name}'s return type {callee.return_type}"
    return None


def _check_assert(v: _FunctionVerifier, inst: Instruction) -> str | None:
    problem = _check_pattern(inst)
    if problem:
        return problem
    if not isinstance(inst.attrs.get("message", ""), str):
        return "message must be a string"
    if inst.attrs.get("error", "AssertionError") not in ASSERT_ERRORS:
        return f"an assert raises one of {', '.join(ASSERT_ERRORS)}, not {inst.attrs['error']!r}"
    return v.check_result(inst, VOID)


def _check_phi_type(v: _FunctionVerifier, inst: Instruction) -> str | None:
    if not inst.type.is_scalar and not inst.type.is_array:
        return f"phi type must be a scalar or array type, got {inst.type}"
    return None  # incoming values are checked with the phis


def _check_branch(v: _FunctionVerifier, inst: Instruction) -> str | None:
    if inst.op is Op.CBR:
        if len(inst.operands) != 1 or inst.operands[0].type != I1:
            got = inst.operands[0].type if inst.operands else "nothing"
            return f"condition must be i1, got {got}"
    elif inst.operands:
        return "br takes no operands"
    return None


def _check_ret(v: _FunctionVerifier, inst: Instruction) -> str | None:
    expected = v.function.return_type
    if len(inst.operands) > 1:
        return "ret takes at most one operand"
    if expected == VOID:
        return "returns a value from a function that returns nothing" if inst.operands else None
    if not inst.operands:
        return f"returns nothing from a function that returns {expected}"
    if inst.operands[0].type != expected:
        return f"returns a value of type {inst.operands[0].type}, the function returns {expected}"
    return None


TYPE_CHECKS: dict[Syntax, Callable[[_FunctionVerifier, Instruction], str | None]] = {
    Syntax.OPERANDS: _check_operands_syntax,
    Syntax.CAST: _check_cast,
    Syntax.LOAD: _check_load,
    Syntax.STORE: _check_store,
    Syntax.DIM: _check_dim,
    Syntax.ALLOC: _check_alloc,
    Syntax.VIEW: _check_view,
    Syntax.GROW: _check_grow,
    Syntax.CALL: _check_call,
    Syntax.ASSERT: _check_assert,
    Syntax.PHI: _check_phi_type,
    Syntax.BR: _check_branch,
    Syntax.CBR: _check_branch,
    Syntax.RET: _check_ret,
}


def function_problems(function: Function) -> list[str]:
    """Every problem of `function`, empty when it is valid."""
    verifier = _FunctionVerifier(function)
    if verifier.check_structure():
        verifier.check_operands()
        if not verifier.problems:
            verifier.check_dominance()
        verifier.check_phis()
        verifier.check_types()
    return verifier.problems


def verify(ir: Function | Module) -> None:
    """Raise `VerificationError` if `ir` (a function or every function of a module) is invalid."""
    functions = list(ir) if isinstance(ir, Module) else [ir]
    problems = [problem for function in functions for problem in function_problems(function)]
    if problems:
        raise VerificationError(problems)
