"""An IR builder: creates instructions with derived result types at an insertion point.

    fn = make_function("mag", [("x", ArrayType(F64, 1)), ("n", I64)], F64)
    b = Builder(fn.add_block())
    s = b.fadd(x, 1.0)                     # any op of the OPERANDS syntax is a method
    c = b.icmp_slt(i, n)                   # `icmp.slt` is spelled icmp_slt

Python numbers and bools given as operands become constants of the type the operand needs (the type of
the op's other operands, the array element, the index type i64, the callee's parameter).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from isozyme.ssa.flags import ACCESS_OPS
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, IRError, Module, Phi, SourceLoc, Value
from isozyme.ssa.ops import OP_INFO, SHARED_CLASSES, Op, Syntax, result_type
from isozyme.ssa.types import F64, I1, I64, VOID, ArrayType, ScalarType, Type

Operand = Value | int | float | bool


def make_function(name: str, params: Sequence[tuple[str, Type]], return_type: Type = VOID,
                  module: Module | None = None) -> Function:
    """A new function without blocks, added to `module` when given."""
    function = Function(name, [Argument(ty, name=arg_name) for arg_name, ty in params], return_type)
    if module is not None:
        module.add(function)
    return function


def default_type(value: int | float | bool) -> ScalarType:
    """The type a Python scalar gets when nothing else decides: i1, i64 or f64."""
    if isinstance(value, bool):
        return I1
    return I64 if isinstance(value, int) else F64


class Builder:
    """Inserts new instructions at the end of a block, or before a given instruction."""

    def __init__(self, block: Block | None = None, loc: SourceLoc | None = None) -> None:
        self.block = block
        """The block receiving new instructions."""
        self.anchor: Instruction | None = None
        """When set, new instructions go just before it."""
        self.loc = loc
        """Source location stamped on new instructions."""
        self.access_flags: frozenset[str] = frozenset()
        """Flags stamped on new loads, stores and atomic adds (AD stamps `flags.CHECKED` while it differentiates
        a checked access, so that the shadow's access is checked too)."""

    def at_end(self, block: Block) -> Builder:
        self.block, self.anchor = block, None
        return self

    def before(self, anchor: Instruction) -> Builder:
        self.block, self.anchor = anchor.block, anchor
        return self

    def insert(self, inst: Instruction) -> Instruction:
        if self.block is None:
            raise IRError("the builder has no insertion block")
        if inst.loc is None:
            inst.loc = self.loc
        if inst.op in ACCESS_OPS:
            inst.flags |= self.access_flags
        if self.anchor is not None:
            return self.block.insert_before(self.anchor, inst)
        return self.block.append(inst)

    def const(self, ty: ScalarType, value: int | float | bool) -> Constant:
        return Constant(ty, value, loc=self.loc)

    def _as_value(self, operand: Operand, ty: Type | None) -> Value:
        if isinstance(operand, Value):
            return operand
        target = ty if isinstance(ty, ScalarType) else default_type(operand)
        return Constant(target, operand, loc=self.loc)

    def emit(self, op: Op, *operands: Operand, name: str | None = None, type: Type | None = None,
             attrs: dict[str, object] | None = None, flags: Iterable[str] = ()) -> Instruction:
        """Create an `OPERANDS`-syntax instruction (or any op when `type` is given) and insert it."""
        values = self._operand_values(op, operands)
        ty = type if type is not None else result_type(op, [v.type for v in values])
        if ty is None:
            raise IRError(f"cannot derive the result type of {op} from {[str(v.type) for v in values]}")
        inst = Instruction(ty, op=op, operands=tuple(values), attrs=dict(attrs or {}), flags=set(flags),
                           name=name)
        return self.insert(inst)

    def _operand_values(self, op: Op, operands: Sequence[Operand]) -> list[Value]:
        pattern = OP_INFO[op].operands
        shared = next((v.type for letter, v in zip(pattern, operands)
                       if letter in SHARED_CLASSES and isinstance(v, Value)), None)
        values = []
        for index, operand in enumerate(operands):
            letter = pattern[index] if index < len(pattern) else ""
            values.append(self._as_value(operand, I1 if letter == "b" else shared))
        return values

    def __getattr__(self, name: str) -> Callable[..., Instruction]:
        key = name.rstrip("_")  # b.and_(x, y): `and` is a Python keyword
        try:
            op = Op(key.replace("_", "."))
        except ValueError:
            try:
                op = Op(key)
            except ValueError:
                raise AttributeError(f"Builder has no attribute or op {name!r}") from None
        if OP_INFO[op].syntax is not Syntax.OPERANDS:
            raise AttributeError(f"{op} has its own builder method")
        return lambda *operands, name=None: self.emit(op, *operands, name=name)

    def phi(self, ty: Type, incoming: Iterable[tuple[Block, Operand]] = (), name: str | None = None) -> Phi:
        """A phi placed after the block's existing phis."""
        phi = Phi(ty, name=name, loc=self.loc)
        for block, value in incoming:
            phi.add_incoming(block, self._as_value(value, ty))
        assert self.block is not None
        return self.block.insert(self.block.first_non_phi_index(), phi)  # type: ignore[return-value]

    def cast(self, op: Op, value: Operand, to: ScalarType, name: str | None = None) -> Instruction:
        return self.emit(op, self._as_value(value, None), name=name, type=to)

    def load(self, array: Value, *indices: Operand, name: str | None = None) -> Instruction:
        element = array.type.element if isinstance(array.type, ArrayType) else None
        values = [array, *(self._as_value(i, I64) for i in indices)]
        return self.emit(Op.LOAD, *values, name=name, type=element)

    def _memory_write(self, op: Op, value: Operand, array: Value, indices: Sequence[Operand]) -> Instruction:
        element = array.type.element if isinstance(array.type, ArrayType) else None
        values = [self._as_value(value, element), array, *(self._as_value(i, I64) for i in indices)]
        return self.emit(op, *values, type=VOID)

    def store(self, value: Operand, array: Value, *indices: Operand) -> Instruction:
        return self._memory_write(Op.STORE, value, array, indices)

    def atomic_add(self, value: Operand, array: Value, *indices: Operand) -> Instruction:
        return self._memory_write(Op.ATOMIC_ADD, value, array, indices)

    def dim(self, array: Value, axis: int, name: str | None = None) -> Instruction:
        return self.emit(Op.DIM, array, name=name, type=I64, attrs={"axis": axis})

    def alloc(self, element: ScalarType, *extents: Operand, zeroed: bool = False, growable: bool = False,
              name: str | None = None) -> Instruction:
        """A local array; `growable` (1-D only) lets `grow` enlarge it (interpreter.py)."""
        values = [self._as_value(e, I64) for e in extents]
        flags = {flag for flag, wanted in (("zeroed", zeroed), ("growable", growable)) if wanted}
        return self.emit(Op.ALLOC, *values, name=name, type=ArrayType(element, len(values)), flags=flags)

    def view(self, element: ScalarType, extents: Sequence[Operand], arena: Value, offset: Operand,
             zeroed: bool = False, name: str | None = None) -> Instruction:
        """A local array in the words of `arena` from word `offset` on (ops.py, optimize/memory_reuse.py)."""
        values = [*(self._as_value(e, I64) for e in extents), arena, self._as_value(offset, I64)]
        return self.emit(Op.VIEW, *values, name=name, type=ArrayType(element, len(extents)),
                         flags={"zeroed"} if zeroed else set())

    def loop_nest(self, extents: Sequence[Value], body: Callable[[Builder, list[Value]], None],
                  name: str = "loop") -> None:
        """Emit `for i0 in range(e0): for i1 in range(e1): ... body(builder, [i0, i1, ...])` at the end of
        the current block, in new blocks placed after it (named `<block>.<name><depth>`); the builder then
        continues in the block after the nest. The body may emit code but no control flow of its own."""
        start = self.block
        assert start is not None and start.function is not None
        function = start.function
        indices: list[Value] = []
        headers: list[tuple[Block, Phi, Instruction]] = []
        after = start
        for depth, extent in enumerate(extents):
            header = function.add_block(f"{start.name}.{name}{depth}", after=after)
            inner = function.add_block(f"{start.name}.{name}{depth}.body", after=header)
            entering = self.block
            self.br(header)
            self.at_end(header)
            index = self.phi(I64, [(entering, 0)], name=f"{name}.i{depth}")  # type: ignore[list-item]
            branch = self.cbr(self.icmp_slt(index, extent), inner, inner)  # the exit is patched below
            headers.append((header, index, branch))
            indices.append(index)
            after = inner
            self.at_end(inner)
        body(self, indices)
        for header, index, branch in reversed(headers):
            index.add_incoming(self.block, self.iadd(index, 1))  # type: ignore[arg-type]
            self.br(header)
            done = function.add_block(f"{header.name}.done", after=self.block)
            branch.successors = (branch.successors[0], done)
            self.at_end(done)

    def grow(self, array: Value, count: Operand) -> Instruction:
        """`grow %array, %count`: the growable `array` (an alloc's result) gets at least `count` elements."""
        return self.emit(Op.GROW, array, self._as_value(count, I64), type=VOID)

    def call(self, callee: Function, *args: Operand, name: str | None = None) -> Instruction:
        params = [a.type for a in callee.args]
        values = [self._as_value(a, params[i] if i < len(params) else None) for i, a in enumerate(args)]
        return self.emit(Op.CALL, *values, name=name, type=callee.return_type, attrs={"callee": callee})

    def assert_(self, condition: Operand, message: str = "", error: str | None = None) -> Instruction:
        """`assert condition, message`: raises AssertionError, or the `ops.ASSERT_ERRORS` entry `error`."""
        attrs: dict[str, object] = {"message": message}
        if error is not None:
            attrs["error"] = error
        return self.emit(Op.ASSERT, self._as_value(condition, I1), type=VOID, attrs=attrs)

    def br(self, target: Block) -> Instruction:
        return self.insert(Instruction(VOID, op=Op.BR, successors=(target,)))

    def cbr(self, condition: Operand, if_true: Block, if_false: Block) -> Instruction:
        cond = self._as_value(condition, I1)
        return self.insert(Instruction(VOID, op=Op.CBR, operands=(cond,), successors=(if_true, if_false)))

    def ret(self, value: Operand | None = None) -> Instruction:
        ret_type = self.block.function.return_type if self.block and self.block.function else None
        operands = () if value is None else (self._as_value(value, ret_type),)
        return self.insert(Instruction(VOID, op=Op.RET, operands=operands))
