"""The IR classes: values, instructions, phis, blocks, functions and modules.

Values compare by identity. Every value keeps the list of its uses; operand tuples are immutable and
change only through `Instruction.set_operand`, `Value.replace_all_uses_with`, the phi methods and
`Instruction.erase`, so use lists never go out of sync. Blocks hold phis first, then instructions, then
one terminator; the verifier (`verifier.py`) checks it. The text form is `printer.py`'s
(`print_function`, `print_module`), a layer above: the IR classes import nothing but the op table and types.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import KW_ONLY, dataclass, field

import numpy as np

from isozyme.ssa.ops import OP_INFO, Op, OpInfo
from isozyme.ssa.types import VOID, ScalarType, Type

_TERMINATORS = frozenset(op for op, info in OP_INFO.items() if info.terminator)
"""The ops that end a block: `Block.terminator` and `Block.successors` test the last instruction against it.
Passes ask for successors more than for anything else: through the property chain `instructions`,
`is_terminator` and `OP_INFO`, the two took 9% and 8% (one inside the other) of the first compile of the
transformer example's gradient."""


class IRError(Exception):
    """A misuse of the IR mutation API (erasing a used value, replacing with a value of another type)."""


@dataclass(frozen=True)
class SourceLoc:
    """Where a value came from: a kernel's Python source or an `.ir` file."""

    file: str
    """Path of the source file."""
    line: int
    """1-based line number."""
    col: int = 0
    """0-based column (as in Python's `ast`); printed 1-based."""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"


@dataclass(eq=False)
class Use:
    """One operand slot: `user.operands[index]` is the used value."""

    user: Instruction
    """The instruction holding the operand."""
    index: int
    """Position in the user's operand tuple."""


class UseList:
    """A value's uses in the order they were made: read like a list, but `remove` is O(1), since a value
    such as an array argument has thousands of uses, which passes drop one by one."""

    __slots__ = ("_uses",)

    def __init__(self, uses: Iterable[Use] = ()) -> None:
        self._uses: dict[Use, None] = dict.fromkeys(uses)

    def __iter__(self) -> Iterator[Use]:
        return iter(self._uses)

    def __len__(self) -> int:
        return len(self._uses)

    def __contains__(self, use: object) -> bool:
        return use in self._uses

    def __getitem__(self, index: int) -> Use:
        return list(self._uses)[index]

    def __eq__(self, other: object) -> bool:
        return list(self._uses) == list(other) if isinstance(other, list | UseList) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self._uses))

    def append(self, use: Use) -> None:
        self._uses[use] = None

    def remove(self, use: Use) -> None:
        try:
            del self._uses[use]
        except KeyError:
            raise ValueError("the use is not in the list") from None

    def clear(self) -> None:
        self._uses.clear()


@dataclass(eq=False, repr=False)
class Value:
    """Anything an instruction can use: an argument, a constant or an instruction's result."""

    type: Type
    """The value's IR type."""
    _: KW_ONLY
    name: str | None = None
    """Name hint for the printer (the source variable, e.g. `s.next`); not necessarily unique."""
    loc: SourceLoc | None = None
    """Source location, for diagnostics."""
    uses: UseList = field(default_factory=UseList)
    """Every operand slot that holds this value; maintained by the IR, never edited by hand."""

    @property
    def users(self) -> list[Instruction]:
        """The distinct instructions using this value, in use order."""
        return list(dict.fromkeys(use.user for use in self.uses))

    def replace_all_uses_with(self, new: Value) -> None:
        """Make every user of this value use `new` instead."""
        if new is self:
            return
        if new.type != self.type:
            raise IRError(f"cannot replace a value of type {self.type} with one of type {new.type}")
        for use in list(self.uses):
            use.user.set_operand(use.index, new)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name or hex(id(self))}: {self.type}>"


@dataclass(eq=False, repr=False)
class Constant(Value):
    """A scalar constant. Its value is canonical for its type: wrapped ints, f32-rounded floats, bools."""

    value: int | float | bool
    """The constant's value as a Python scalar."""

    def __post_init__(self) -> None:
        if not isinstance(self.type, ScalarType):
            raise IRError(f"constants must be scalars, not {self.type}")
        self.value = canonical_scalar(self.type, self.value)

    def __repr__(self) -> str:
        return f"<Constant {self.value!r}: {self.type}>"


def canonical_scalar(ty: ScalarType, value: int | float | bool) -> int | float | bool:
    """`value` as a Python scalar of type `ty`: ints wrap to the type's width, f32 values are rounded."""
    if ty.is_bool:
        return bool(value)
    if ty.is_int:
        if isinstance(value, float) and not value.is_integer():
            raise IRError(f"{value!r} is not a value of type {ty}")
        half = 1 << (ty.bits - 1)
        return (int(value) + half) % (1 << ty.bits) - half
    if ty.bits == 32:
        # Round once: an i64 goes straight to f32, not through f64; overflow gives inf quietly.
        exact = np.int64(value) if isinstance(value, int) and -2**63 <= value < 2**63 else value
        with np.errstate(over="ignore"):
            return float(np.float32(exact))
    return float(value)


@dataclass(eq=False, repr=False)
class Argument(Value):
    """A function parameter."""

    _: KW_ONLY
    function: Function | None = None
    """The function it belongs to (set by `Function`)."""
    index: int = -1
    """Position in the parameter list."""


@dataclass(eq=False, repr=False)
class Instruction(Value):
    """An operation in a block. A `VOID`-typed instruction produces no value (store, br, ...)."""

    _: KW_ONLY
    op: Op
    """What the instruction does; its properties are `OP_INFO[op]`."""
    operands: tuple[Value, ...] = ()
    """The used values; change them only with `set_operand` (use lists depend on it)."""
    successors: tuple[Block, ...] = ()
    """Branch targets of a terminator, in order (`cbr`: true target first)."""
    attrs: dict[str, object] = field(default_factory=dict)
    """Immediates: `callee` (Function) of a call, `axis` (int) of dim, `message` (str) and `error` (str, an
    `ops.ASSERT_ERRORS` key) of assert."""
    flags: set[str] = field(default_factory=set)
    """Word attributes printed after the instruction: `readonly`, `zeroed`, ..."""
    block: Block | None = None
    """The block holding the instruction, None while detached."""

    def __post_init__(self) -> None:
        initial = tuple(self.operands)
        self.operands = ()
        self._operand_uses: list[Use] = []
        for value in initial:
            self._append_operand(value)
        self.successors = tuple(self.successors)

    @property
    def info(self) -> OpInfo:
        """This op's row of the property table."""
        return OP_INFO[self.op]

    @property
    def is_terminator(self) -> bool:
        return OP_INFO[self.op].terminator

    @property
    def function(self) -> Function | None:
        return self.block.function if self.block is not None else None

    @property
    def callee(self) -> Function:
        """The called function of a `call`."""
        return self.attrs["callee"]  # type: ignore[return-value]

    def _append_operand(self, value: Value) -> None:
        use = Use(self, len(self.operands))
        self.operands = (*self.operands, value)
        self._operand_uses.append(use)
        value.uses.append(use)

    def set_operand(self, index: int, value: Value) -> None:
        """Replace operand `index` by `value`, keeping both use lists right."""
        use = self._operand_uses[index]
        old = self.operands[index]
        old.uses.remove(use)
        value.uses.append(use)
        self.operands = (*self.operands[:index], value, *self.operands[index + 1:])

    def remove_operand(self, index: int) -> None:
        """Remove operand `index` (the later ones move down by one), keeping the use lists right."""
        self._remove_operand(index)

    def _remove_operand(self, index: int) -> None:
        use = self._operand_uses.pop(index)
        self.operands[index].uses.remove(use)
        self.operands = (*self.operands[:index], *self.operands[index + 1:])
        for later in self._operand_uses[index:]:
            later.index -= 1

    def drop_operands(self) -> None:
        """Remove all operands (and this instruction from their use lists)."""
        while self.operands:
            self._remove_operand(len(self.operands) - 1)

    def replace_successor(self, old: Block, new: Block) -> None:
        """Retarget every edge of this terminator that goes to `old` so it goes to `new`."""
        self.successors = tuple(new if block is old else block for block in self.successors)

    def remove_from_block(self) -> None:
        """Detach from the block, keeping operands (to move the instruction elsewhere)."""
        if self.block is not None:
            self.block._detach(self)
            self.block = None

    def move_before(self, anchor: Instruction) -> None:
        """Move this instruction just before `anchor` (possibly in another block)."""
        self.remove_from_block()
        anchor.block.insert_before(anchor, self)  # type: ignore[union-attr]

    def erase(self) -> None:
        """Delete the instruction. Its result must be unused; its operands lose this use."""
        if self.uses:
            users = ", ".join(str(user.op) for user in self.users)
            raise IRError(f"cannot erase {self.op} {self.name or ''}: its result is still used by {users}")
        self.drop_operands()
        self.remove_from_block()

    def __repr__(self) -> str:
        return f"<Instruction {self.op} {self.name or hex(id(self))}: {self.type}>"


@dataclass(eq=False, repr=False)
class Phi(Instruction):
    """`%v = phi T [bb0: a, bb2: b]`: the value of `a` when control came from bb0, of `b` from bb2."""

    _: KW_ONLY
    op: Op = Op.PHI
    blocks: tuple[Block, ...] = ()
    """The incoming blocks, parallel to `operands`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.blocks = tuple(self.blocks)
        if len(self.blocks) != len(self.operands):
            raise IRError("a phi needs exactly one incoming block per incoming value")
        self._positions: dict[Block, int] | None = None
        """The index of each incoming block's first entry, made on first need (a phi of a join of
        thousands of branches is asked for each of its values); dropped when the blocks change."""

    @property
    def incoming(self) -> list[tuple[Block, Value]]:
        """(predecessor, value) pairs in order."""
        return list(zip(self.blocks, self.operands))

    def _position(self, block: Block) -> int:
        """The index of `block`'s entry; ValueError if there is none."""
        if self._positions is None:
            self._positions = {}
            for index, pred in enumerate(self.blocks):
                self._positions.setdefault(pred, index)
        index = self._positions.get(block)
        if index is None:
            raise ValueError(f"phi has no incoming value from {block.name or 'that block'}")
        return index

    def add_incoming(self, block: Block, value: Value) -> None:
        self.blocks = (*self.blocks, block)
        self._append_operand(value)
        if self._positions is not None:
            self._positions.setdefault(block, len(self.blocks) - 1)

    def incoming_value(self, block: Block) -> Value:
        """The value flowing in from `block`; KeyError if there is none."""
        try:
            return self.operands[self._position(block)]
        except ValueError as missing:
            raise KeyError(str(missing)) from None

    def set_incoming_value(self, block: Block, value: Value) -> None:
        self.set_operand(self._position(block), value)

    def remove_incoming(self, block: Block) -> None:
        """Drop the entry for `block` (when the edge from it goes away)."""
        index = self._position(block)
        self._remove_operand(index)
        self.blocks = (*self.blocks[:index], *self.blocks[index + 1:])
        self._positions = None

    def replace_incoming_block(self, old: Block, new: Block) -> None:
        """Key the entry of `old` by `new` (when an edge is redirected through a new block)."""
        self.blocks = tuple(new if block is old else block for block in self.blocks)
        self._positions = None


@dataclass(eq=False, repr=False)
class Block:
    """A basic block: phis, then instructions, then one terminator.

    Blocks hold thousands of instructions in generated code, and passes erase and insert many in a row,
    so these edits cost O(1) each: a detached instruction stays in the underlying list until the list is
    next read (then one pass drops all of them), inserting before the same instruction again, or before
    each instruction in turn, does not search the block (`_find_anchor`), and `position` numbers the
    instructions once until the block changes."""

    name: str | None = None
    """Label hint for the printer (`bb3`, `for.body`)."""
    _: KW_ONLY
    function: Function | None = None
    """The function holding the block."""

    def __post_init__(self) -> None:
        self._instructions: list[Instruction] = []
        """The instructions, and those detached since the list was last read."""
        self._detached: set[Instruction] = set()
        """The instructions detached since the list was last read (still in it)."""
        self._positions: dict[Instruction, int] | None = None
        """Index of each instruction, while no insertion or removal has happened since it was made."""
        self._anchor_index = 0
        """Where the anchor of the last `insert_before` is now in `_instructions` (a hint, checked first)."""

    @property
    def instructions(self) -> list[Instruction]:
        """Phis, body and terminator in order; edit through `append`, `insert_before` and `Instruction` methods."""
        self._compact()
        return self._instructions

    def _compact(self) -> None:
        if self._detached:
            # in place, so that a list held across the removal is right, as with `list.remove`
            self._instructions[:] = [inst for inst in self._instructions if inst.block is self]
            self._detached.clear()

    @property
    def phis(self) -> list[Phi]:
        """The leading phis."""
        result = []
        for inst in self.instructions:
            if not isinstance(inst, Phi):
                break
            result.append(inst)
        return result

    @property
    def terminator(self) -> Instruction | None:
        """The last instruction if it is a terminator, else None (while the block is being built)."""
        if self._detached:
            self._compact()
        instructions = self._instructions
        if instructions and instructions[-1].op in _TERMINATORS:
            return instructions[-1]
        return None

    @property
    def successors(self) -> tuple[Block, ...]:
        if self._detached:
            self._compact()
        instructions = self._instructions
        if instructions and instructions[-1].op in _TERMINATORS:
            return instructions[-1].successors
        return ()

    def first_non_phi_index(self) -> int:
        return len(self.phis)

    def position(self, inst: Instruction) -> int:
        """The index of `inst` in `instructions` (ValueError when it is not there)."""
        instructions = self.instructions
        index = self._positions.get(inst) if self._positions is not None else None
        if index is None or index >= len(instructions) or instructions[index] is not inst:
            self._positions = {each: index for index, each in enumerate(instructions)}  # changed: renumber
            index = self._positions.get(inst)
            if index is None:
                raise ValueError(f"{inst.op} is not in block {self.name}")
        return index

    def _check_free(self, inst: Instruction) -> None:
        """Raise unless `inst` may be adopted; drop its old entry if it was detached from this block."""
        if inst.block is not None:
            raise IRError(f"{inst.op} is already in a block; remove it first")
        if inst in self._detached:
            self._compact()

    def _detach(self, inst: Instruction) -> None:
        self._detached.add(inst)
        self._positions = None

    def append(self, inst: Instruction) -> Instruction:
        self._check_free(inst)
        inst.block = self
        self._instructions.append(inst)
        if self._positions is not None:  # (none while detached entries remain)
            self._positions[inst] = len(self._instructions) - 1
        return inst

    def insert(self, index: int, inst: Instruction) -> Instruction:
        """Insert `inst` at `index` of `instructions`."""
        self._check_free(inst)
        instructions = self.instructions
        inst.block = self
        instructions.insert(index, inst)
        self._positions = None
        return inst

    def insert_before(self, anchor: Instruction, inst: Instruction) -> Instruction:
        if anchor.block is not self:
            raise ValueError(f"the anchor {anchor.op} is not in block {self.name}")
        self._check_free(inst)
        listed = self._instructions  # detached entries may remain: they do not change where `anchor` is
        index = self._anchor_index
        if not (index < len(listed) and listed[index] is anchor):
            index = self._find_anchor(listed, anchor)
        inst.block = self
        listed.insert(index, inst)
        self._positions = None
        self._anchor_index = index + 1
        return inst

    def _find_anchor(self, listed: list[Instruction], anchor: Instruction) -> int:
        """Where `anchor` is: the terminator; or after the last anchor, as passes that visit a block in
        order insert before each instruction in turn; or else searched from the front, as anchors that
        move are near it (the first non-phi, which is each instruction inserted there). Numbering the
        block for each insertion would cost its size each time."""
        last = len(listed) - 1
        if last >= 0 and listed[last] is anchor:
            return last
        try:
            return listed.index(anchor, min(self._anchor_index, last + 1))
        except ValueError:
            return listed.index(anchor)

    def __repr__(self) -> str:
        return f"<Block {self.name or hex(id(self))}>"


@dataclass(eq=False, repr=False)
class Function:
    """A function: parameters, a return type (`VOID` for none) and blocks, the first being the entry."""

    name: str
    """Symbol name, printed `@name`."""
    args: list[Argument] = field(default_factory=list)
    """Parameters in order."""
    return_type: Type = VOID
    """Type of the `ret` operand, `VOID` when the function returns nothing."""
    _: KW_ONLY
    flags: set[str] = field(default_factory=set)
    """Function attributes: `readnone`, `readonly`, `argmemonly`."""
    module: Module | None = None
    """The module holding the function."""
    loc: SourceLoc | None = None
    """Where the function was defined."""

    def __post_init__(self) -> None:
        for index, arg in enumerate(self.args):
            arg.function = self
            arg.index = index
        self._blocks: list[Block] = []
        self._removed = 0
        """How many blocks of `_blocks` were removed since it was last read (they leave it then)."""
        self._added_at = -1
        """Where `add_block` put the last block it added (a hint, checked first: blocks are often added
        after the one added before, or after the same block)."""

    @property
    def blocks(self) -> list[Block]:
        """Blocks in layout order; `blocks[0]` is the entry. As with a block's instructions, removing many
        blocks in a row costs one pass over the list, when it is next read."""
        if self._removed:
            self._blocks[:] = [block for block in self._blocks if block.function is self]
            self._removed = 0
        return self._blocks

    @property
    def entry(self) -> Block:
        # the first block still in the function, without compacting the list (asked once per block)
        for block in self._blocks:
            if block.function is self:
                return block
        raise IndexError(f"@{self.name} has no blocks")

    def add_block(self, name: str | None = None, after: Block | None = None) -> Block:
        """A new empty block at the end, or right after `after`."""
        block = Block(name, function=self)
        blocks = self.blocks
        if after is None:
            position = len(blocks)
        else:  # after the block added last, or after the same block as it was
            hints = (self._added_at, self._added_at - 1)
            found = next((i for i in hints if 0 <= i < len(blocks) and blocks[i] is after), None)
            position = (blocks.index(after) if found is None else found) + 1
        blocks.insert(position, block)
        self._added_at = position
        return block

    def remove_block(self, block: Block) -> None:
        """Delete `block` and its instructions; its values must not be used outside it (checked first)."""
        if block.function is not self:
            raise ValueError(f"block {block.name} is not in @{self.name}")
        for inst in block.instructions:
            if any(use.user.block is not block for use in inst.uses):
                raise IRError(f"cannot remove block {block.name}: {inst.op} {inst.name or ''} is used "
                              f"in another block")
        for inst in block.instructions:
            inst.drop_operands()
        for inst in list(block.instructions):
            inst.block = None
        block.instructions.clear()
        block.function = None
        self._removed += 1

    def instructions(self) -> Iterator[Instruction]:
        """Every instruction, block by block."""
        for block in self.blocks:
            yield from block.instructions

    def __repr__(self) -> str:
        return f"<Function @{self.name}>"


@dataclass(eq=False, repr=False)
class Module:
    """A set of functions that may call each other."""

    functions: dict[str, Function] = field(default_factory=dict)
    """Functions by name, in definition order."""

    def add(self, function: Function) -> Function:
        if function.name in self.functions:
            raise IRError(f"module already has a function @{function.name}")
        function.module = self
        self.functions[function.name] = function
        return function

    def __getitem__(self, name: str) -> Function:
        return self.functions[name.lstrip("@")]

    def __contains__(self, name: str) -> bool:
        return name.lstrip("@") in self.functions

    def __iter__(self) -> Iterator[Function]:
        return iter(self.functions.values())
