"""The LLVM body of one SSA function: a walk over its blocks, each instruction lowered through a table.

Per function, the walk creates every LLVM block first, then every phi, then the instructions of each
block in reverse post-order (so a definition is emitted before its uses) through the lowering table it is
given (`llvm_lowerings.LOWERINGS`), and last the phi incomings, from the LLVM block where each
predecessor's terminator ended up (checks split blocks). Unreachable blocks are not emitted.

The emitter also keeps what the lowerings share: the LLVM value of each SSA value (`operand`; a growable
array's is reloaded from its descriptor at each use), the failure checks (`check`: every failing check
writes its site and payload into the error record, frees the local arrays and returns) and the address of
an array element, bounds-checked in checked mode (`element_address`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property

from llvmlite import ir

from isozyme.codegen.abi import CodegenError, instruction_flags
from isozyme.codegen.error_sites import ErrorSite, register_site
from isozyme.codegen.llvm_alias_scopes import ArenaScopes
from isozyme.codegen.llvm_arena_cache import ArenaCache
from isozyme.codegen.llvm_block_pool import free_chain
from isozyme.codegen.llvm_module import ModuleEmitter
from isozyme.codegen.llvm_types import F32, F64, I1, I64, POINTER, flat_parameter_types, register_type, storage_type
from isozyme.ssa.cfg import reverse_post_order
from isozyme.ssa.flags import CHECKED, is_growable_alloc
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Value
from isozyme.ssa.loops import LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.types import ArrayType


class FunctionEmitter:
    """The LLVM body of one SSA function (module docstring)."""

    def __init__(self, module: ModuleEmitter, function: Function, lowerings: Mapping[Op, Lowering],
                 llvm_fn: ir.Function | None = None) -> None:
        """`lowerings`: how each op but phi becomes LLVM IR (`llvm_lowerings.LOWERINGS`). `llvm_fn`: the LLVM
        function to emit into (a loop's worker, `llvm_parallel.py`), else the function's own."""
        self.module = module
        self.function = function
        self.lowerings = lowerings
        self.llvm_fn = llvm_fn or module.functions[function]
        self.record = self.llvm_fn.args[-1]
        self.fmf = instruction_flags(module.options.fastmath)
        self.arena_scopes = ArenaScopes(module.llvm, function, module.symbol(function))
        """Alias scopes that tell the arena's slots apart (`llvm_alias_scopes.py`): `tag` each access."""
        self.values: dict[Value, ir.Value] = {}
        self.blocks: dict[Block, ir.Block] = {}
        self.exits: dict[Block, ir.Block] = {}
        self.alloc_head: ir.Value | None = None
        self.descriptors: dict[Value, ir.Value] = {}
        """Each growable alloc's descriptor: a stack slot holding its array value (data, capacity)."""
        self._error_exit: ir.Block | None = None
        self.prologue = self.llvm_fn.append_basic_block("prologue")
        self.builder = ir.IRBuilder(self.prologue)
        self.arena_cache = ArenaCache(module, module.symbol(function), self.prologue)
        """The arena's block, kept between calls (`llvm_arena_cache.py`): taken by its alloc, released at exit."""
        self.emitting: ir.Block = self.prologue
        """The LLVM block of the SSA block being emitted (its checks continue in blocks named after it)."""
        self.outlined: dict[Block, tuple[set[Block], Callable[[], None]]] = {}
        """Loops that run elsewhere (`llvm_parallel.py`), by header: their blocks, which are not emitted, and
        what to emit instead where the header would be (it must bind the header's phis, end by branching to
        the loop's exit and record its last block in `exits[header]`)."""

    def emit(self) -> None:
        skipped = {block for header, (blocks, _) in self.outlined.items() for block in blocks if block is not header}
        order = [block for block in reverse_post_order(self.function) if block not in skipped]
        self._bind_arguments()
        if any(inst.op is Op.ALLOC for inst in self.function.instructions()):
            self.alloc_head = self.builder.alloca(POINTER, name="local_arrays")
            self.builder.store(ir.Constant(POINTER, None), self.alloc_head)
        for inst in self.function.instructions():
            if is_growable_alloc(inst):
                slot = self.builder.alloca(register_type(inst.type), name=f"{inst.name or 'tape'}.descriptor")
                self.descriptors[inst] = slot
        for block in order:
            self.blocks[block] = self.llvm_fn.append_basic_block(block.name or "bb")
        self.builder.branch(self.blocks[self.function.entry])
        self.emit_blocks(order)

    def emit_blocks(self, order: list[Block]) -> None:
        """The phis, instructions and phi incomings of `order`'s blocks, whose LLVM blocks exist."""
        walked = [block for block in order if block not in self.outlined]
        for block in walked:
            self.builder.position_at_start(self.blocks[block])
            for phi in block.phis:
                self.values[phi] = self.builder.phi(register_type(phi.type), name=phi.name or "")
        for block in order:
            self.builder.position_at_end(self.blocks[block])
            self.emitting = self.blocks[block]
            if block in self.outlined:
                self.outlined[block][1]()
                continue
            for inst in block.instructions[len(block.phis):]:
                self._emit_instruction(inst)
            self.exits[block] = self.builder.block
        for block in walked:
            for phi in block.phis:
                for pred, value in phi.incoming:
                    if pred in self.exits:  # an unreachable predecessor has no LLVM block
                        self.values[phi].add_incoming(self.operand(value), self.exits[pred])

    @cached_property
    def loops(self) -> LoopNest:
        """The function's loops, for lowerings that ask which loop an instruction is in."""
        return LoopNest(self.function)

    def _bind_arguments(self) -> None:
        params = iter(self.llvm_fn.args)
        for arg in self.function.args:
            parts = [next(params) for _ in flat_parameter_types(arg.type)]
            for part in parts:
                part.name = arg.name or "arg"
            self.values[arg] = parts[0] if len(parts) == 1 else self.make_array(arg.type, parts)

    def make_array(self, ty: ArrayType, parts: list[ir.Value]) -> ir.Value:
        value: ir.Value = ir.Constant(register_type(ty), ir.Undefined)
        for index, part in enumerate(parts):
            value = self.builder.insert_value(value, part, index)
        return value

    def _emit_instruction(self, inst: Instruction) -> None:
        lowering = self.lowerings.get(inst.op)
        if lowering is None:
            raise CodegenError(f"no LLVM lowering for op '{inst.op}'" + (f" at {inst.loc}" if inst.loc else ""))
        result = lowering(self, inst)
        if result is not None:
            self.values[inst] = result

    def operand(self, value: Value) -> ir.Value:
        """The LLVM value of `value` here; a growable array's current data and capacity, from its descriptor."""
        if isinstance(value, Constant):
            return ir.Constant(register_type(value.type), value.value)
        descriptor = self.descriptors.get(value)
        if descriptor is not None:
            return self.builder.load(descriptor, typ=register_type(value.type))
        try:
            return self.values[value]
        except KeyError:
            raise CodegenError(f"value %{value.name} is used before it is emitted in @{self.function.name}") \
                from None

    def operands(self, inst: Instruction) -> list[ir.Value]:
        return [self.operand(v) for v in inst.operands]

    # --- failures ---

    def error_exit(self) -> ir.Block:
        """The block every failure branches to: free the local arrays and return (the status is set)."""
        if self._error_exit is None:
            self._error_exit = self.llvm_fn.append_basic_block("error.exit")
            saved = self.builder.block
            self.builder.position_at_end(self._error_exit)
            self.free_local_arrays()
            return_type = self.llvm_fn.function_type.return_type
            if isinstance(return_type, ir.VoidType):
                self.builder.ret_void()
            else:
                self.builder.ret(ir.Constant(return_type, ir.Undefined))
            self.builder.position_at_end(saved)
        return self._error_exit

    def continuation(self, suffix: str) -> ir.Block:
        """A new block for what follows a check or a call in the SSA block being emitted, named after that
        block and one suffix (`body.ok`, which llvmlite numbers `body.ok.1`, ...). A name grown by a suffix
        per check (`body.ok.ok...`) passed LLVM's limit of 1,024 characters at a few hundred checks."""
        return self.llvm_fn.append_basic_block(f"{self.emitting.name}.{suffix}")

    def check(self, ok: ir.Value, inst: Instruction, kind: str, payload: list[ir.Value],
              **details: object) -> None:
        """Continue when `ok`; otherwise record the failure of a new error site and leave the function."""
        site = register_site(self.module.sites, ErrorSite(kind, str(inst.loc) if inst.loc else None,
                                                          str(inst.op), details))
        failed = self.llvm_fn.append_basic_block(f"{kind}.failed")
        resume = self.continuation("ok")
        branch = self.builder.cbranch(ok, resume, failed)
        branch.set_weights([1 << 20, 1])
        self.builder.position_at_end(failed)
        for index, word in enumerate(payload, start=1):
            self.builder.store(self.payload_word(word), self.record_slot(index))
        self.builder.store(ir.Constant(I64, site), self.record_slot(0))
        self.builder.branch(self.error_exit())
        self.builder.position_at_end(resume)

    def record_slot(self, index: int) -> ir.Value:
        return self.builder.gep(self.record, [ir.Constant(I64, index)], inbounds=True, source_etype=I64)

    def payload_word(self, value: ir.Value) -> ir.Value:
        """`value` as one i64 payload word: integers sign-extended, floats as the bits of their f64."""
        b = self.builder
        if value.type == F32:
            value = b.fpext(value, F64)
        if value.type == F64:
            return b.bitcast(value, I64)
        if value.type == I1:
            return b.zext(value, I64)
        return b.sext(value, I64) if value.type.width < 64 else value

    def free_local_arrays(self) -> None:
        self.arena_cache.release(self.builder)
        if self.alloc_head is not None:
            self.builder.call(free_chain(self.module), [self.builder.load(self.alloc_head, typ=POINTER)])

    # --- arrays ---

    def element_address(self, inst: Instruction, array: Value, indices: list[Value], check: bool = True) -> ir.Value:
        """The address of `array[indices]` (row-major), after the bounds check in checked mode or of an access
        flagged `checked` (unless `check` is false: the access was checked where it ran)."""
        b = self.builder
        struct = self.operand(array)
        extents = [b.extract_value(struct, 1 + axis) for axis in range(len(indices))]
        index_values = [self.operand(i) for i in indices]
        if check and (self.module.options.boundscheck or CHECKED in inst.flags):
            in_bounds = [b.icmp_unsigned("<", i, n) for i, n in zip(index_values, extents)]
            ok = in_bounds[0]
            for condition in in_bounds[1:]:
                ok = b.and_(ok, condition)
            self.check(ok, inst, "index", [*index_values, *extents], rank=len(indices))
        linear = index_values[0]
        for index, extent in zip(index_values[1:], extents[1:]):
            linear = b.add(b.mul(linear, extent), index)
        element = storage_type(array.type.element)  # type: ignore[attr-defined]
        return b.gep(b.extract_value(struct, 0), [linear], inbounds=True, source_etype=element)


Lowering = Callable[[FunctionEmitter, Instruction], "ir.Value | None"]
"""Lowers one instruction: the LLVM value of its result, or None when it has none to bind."""
