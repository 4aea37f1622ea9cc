"""The code of a threaded `prange` loop's tasks: its worker and its task (`llvm_parallel.py` says what each
does).

The worker is the loop's blocks walked by a `FunctionEmitter` into a function of their own, with four
changes: its inputs are its parameters; the header counts its own iterations from `lo` to `hi` (the SSA
exit test, which counts to the trip count, is left to LLVM to delete) and leaves to a block that writes the
partial results; an `atomic_add` in mode `group` adds into a stack slot, which LLVM keeps in a register
(but in task 0, into the element); a
local array allocated in the loop (its extents are loop-invariant, the plan checks it) is allocated by the
first iteration of the task that reaches it, checks included, and reused by the later ones (zeroed again
when it is `zeroed`): one malloc per task instead of one per iteration. No execution of the alloc can see
the array of an earlier one, in an earlier iteration or an earlier round of an inner loop: the frontend
binds every array variable to one array (a CompileError otherwise), and the plan refuses accesses through
array phis.
"""

from __future__ import annotations

from llvmlite import ir

from isozyme.codegen.llvm_function import FunctionEmitter
from isozyme.codegen.llvm_lowerings import LOWERINGS, allocate_local
from isozyme.codegen.llvm_module import ModuleEmitter
from isozyme.codegen.llvm_parallel import RECORD_WORDS, ThreadedLoop, add, identity, word
from isozyme.codegen.llvm_types import (
    I1,
    I8,
    I32,
    I64,
    POINTER,
    element_size,
    flat_parameter_types,
    register_type,
    storage_type,
)
from isozyme.ssa.cfg import reverse_post_order
from isozyme.ssa.flags import CHECKED
from isozyme.ssa.ir import Function, Instruction, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import ArrayType


class WorkerEmitter(FunctionEmitter):
    """The worker of one threaded loop (module docstring)."""

    def __init__(self, module: ModuleEmitter, function: Function, loop: ThreadedLoop) -> None:
        super().__init__(module, function, {**LOWERINGS, Op.ATOMIC_ADD: _lower_atomic_add, Op.ALLOC: _lower_alloc},
                         loop.worker)
        self.loop = loop
        self.accumulators: dict[Instruction, tuple[ir.Value, ir.Value]] = {}
        """Each group add's stack slots: its sum and whether it ran."""
        self.reused: dict[Instruction, ir.Value] = {}
        """Each local array allocated in the loop: a stack slot holding its block once allocated (else null)."""

    def emit(self) -> None:
        loop, b = self.loop, self.builder
        header = loop.header
        lo, hi, partials = self._bind_inputs()
        blocks = loop.loop_blocks
        if any(inst.op is Op.ALLOC for block in blocks for inst in block.instructions) or loop.scratch:
            self.alloc_head = b.alloca(POINTER, name="local_arrays")
            b.store(ir.Constant(POINTER, None), self.alloc_head)
        for inst in loop.group_adds:
            ty = register_type(inst.operands[0].type)
            total, ran = b.alloca(ty, name="group.sum"), b.alloca(I64, name="group.ran")
            b.store(identity(ty), total)
            b.store(ir.Constant(I64, 0), ran)
            self.accumulators[inst] = (total, ran)
        for array in loop.scratch:
            self._private_copy(array)
        in_layout = [block for block in self.function.blocks if block in blocks]  # not set order: the same IR each time
        for inst in (i for block in in_layout for i in block.instructions):
            if inst.op is Op.ALLOC and inst.uses:
                self.reused[inst] = b.alloca(POINTER, name=f"{inst.name or 'array'}.block")
                b.store(ir.Constant(POINTER, None), self.reused[inst])
        order = [block for block in reverse_post_order(self.function) if block in blocks]
        for block in order:
            self.blocks[block] = self.llvm_fn.append_basic_block(block.name or "bb")
        self.done = self.llvm_fn.append_basic_block("chunk.done")
        entered = b.block
        b.position_at_start(self.blocks[header])
        self.counter = b.phi(I64, name="iteration")
        self.emit_blocks(order)
        for latch in loop.plan.loop.latches:
            self.counter.add_incoming(self.next_iteration, self.exits[latch])
        b.position_at_end(entered)
        self._enter_header(lo)
        b.position_at_end(self.done)
        self._write_partials(partials)
        self.free_local_arrays()
        b.ret_void()

    def _bind_inputs(self) -> tuple[ir.Value, ir.Value, ir.Value]:
        params = iter(self.llvm_fn.args)
        for value in self.loop.inputs:
            parts = [next(params) for _ in flat_parameter_types(value.type)]
            for part in parts:
                part.name = value.name or "input"
            self.values[value] = parts[0] if len(parts) == 1 else self.make_array(value.type, parts)  # type: ignore
        lo, hi, partials = next(params), next(params), next(params)
        lo.name, hi.name, partials.name = "lo", "hi", "partials"
        self.hi = hi
        self.first = self.builder.icmp_signed("==", lo, ir.Constant(I64, 0), name="task0")
        """Is this task 0 (every task has an iteration, and task 0 the first)?"""
        return lo, hi, partials

    def _private_copy(self, array: Value) -> None:
        """This task's zeroed copy of a local array flagged `private` (its shape is the array's)."""
        b = self.builder
        original = self.operand(array)
        assert isinstance(array, Instruction) and isinstance(array.type, ArrayType)
        extents = [b.extract_value(original, 1 + axis) for axis in range(array.type.rank)]
        data = allocate_local(self, array, array, extents, zeroed=True)
        self.values[array] = self.make_array(array.type, [data, *extents])

    def _emit_instruction(self, inst: Instruction) -> None:
        if inst is not self.loop.header.terminator:
            super()._emit_instruction(inst)
            return
        b = self.builder
        self.next_iteration = b.add(self.counter, ir.Constant(I64, 1), name="iteration.next")
        b.cbranch(b.icmp_signed("<", self.counter, self.hi), self.blocks[self.loop.inside()], self.done)

    def _enter_header(self, lo: ir.Value) -> None:
        """Branch to the header, its phis entered with: induction variables at iteration `lo`, reductions at
        their identity, constants."""
        b, loop = self.builder, self.loop
        starts: dict[Value, ir.Value] = {}
        for iv in loop.plan.inductions:
            starts[iv.phi] = b.add(self.operand(iv.start), b.mul(lo, self.operand(iv.step)))
        entering = loop.plan.loop.entering_blocks[0]
        for reduction in loop.plan.reductions:  # task 0 from the loop's starting value, the others from 0
            start = self.operand(reduction.phi.incoming_value(entering))
            starts[reduction.phi] = b.select(self.first, start, identity(start.type))
        for phi, constant in loop.constants.items():
            starts[phi] = self.operand(constant)
        for phi in loop.header.phis:
            self.values[phi].add_incoming(starts[phi], b.block)  # type: ignore[attr-defined]
        self.counter.add_incoming(lo, b.block)
        b.branch(self.blocks[loop.header])

    def _write_partials(self, partials: ir.Value) -> None:
        b, loop = self.builder, self.loop
        slot = 0
        for reduction in loop.plan.reductions:
            value = self.values[reduction.phi]
            b.store(value, word(b, partials, ir.Constant(I64, slot), value.type))
            slot += 1
        for inst in loop.group_adds:
            total, ran = self.accumulators[inst]
            ty = register_type(inst.operands[0].type)
            b.store(b.load(total, typ=ty), word(b, partials, ir.Constant(I64, slot), ty))
            b.store(b.load(ran, typ=I64), word(b, partials, ir.Constant(I64, slot + 1), I64))
            slot += 2


def _lower_atomic_add(em: WorkerEmitter, inst: Instruction) -> None:
    """A group add into its stack slot (after its bounds check, where checked); any other, as everywhere
    (a plain add: into the task's own element, or its own copy of the array)."""
    slots = em.accumulators.get(inst)
    if slots is None:
        LOWERINGS[Op.ATOMIC_ADD](em, inst)
        return
    b = em.builder
    value, array, *indices = inst.operands
    direct, held, done = (em.continuation(name) for name in ("group.direct", "group.held", "group.done"))
    b.cbranch(em.first, direct, held)
    b.position_at_end(direct)  # task 0: into the element, as the serial loop does
    LOWERINGS[Op.ATOMIC_ADD](em, inst)
    b.branch(done)
    b.position_at_end(held)
    if em.module.options.boundscheck or CHECKED in inst.flags:
        em.element_address(inst, array, list(indices))
    total, ran = slots
    b.store(add(b, b.load(total, typ=total.type.pointee), em.operand(value)), total)
    b.store(ir.Constant(I64, 1), ran)
    b.branch(done)
    b.position_at_end(done)


def _lower_alloc(em: WorkerEmitter, inst: Instruction) -> ir.Value | None:
    """A local array of the loop: allocated (and checked) the first time, reused after (module docstring)."""
    slot = em.reused.get(inst)
    if slot is None:
        return LOWERINGS[Op.ALLOC](em, inst)
    b = em.builder
    element = storage_type(inst.type.element)  # type: ignore[attr-defined]
    reused = b.load(slot, typ=POINTER)
    first, again, ready = (em.continuation(name) for name in ("alloc.first", "alloc.again", "alloc.ready"))
    b.cbranch(b.icmp_unsigned("==", reused, ir.Constant(POINTER, None)), first, again)
    b.position_at_end(first)
    array = LOWERINGS[Op.ALLOC](em, inst)
    assert array is not None  # not growable: the plan refuses growable arrays in a parallel loop
    fresh = b.bitcast(b.extract_value(array, 0), POINTER)
    b.store(fresh, slot)
    allocated = b.block
    b.branch(ready)
    b.position_at_end(again)
    extents = em.operands(inst)
    if "zeroed" in inst.flags:
        size: ir.Value = ir.Constant(I64, element_size(inst.type.element))  # type: ignore[attr-defined]
        for extent in extents:
            size = b.mul(size, extent)
        memset = em.module.declare("llvm.memset.p0i8.i64", ir.FunctionType(ir.VoidType(), [POINTER, I8, I64, I1]))
        b.call(memset, [reused, ir.Constant(I8, 0), size, ir.Constant(I1, 0)])
    b.branch(ready)
    b.position_at_end(ready)
    data = b.phi(POINTER, name=inst.name or "array")
    data.add_incoming(fresh, allocated)
    data.add_incoming(reused, again)
    return em.make_array(inst.type, [b.bitcast(data, ir.PointerType(element)), *extents])  # type: ignore[arg-type]


def emit_workers(emitter: ModuleEmitter, function: Function, threaded: list[ThreadedLoop]) -> None:
    """The worker and the task of each threaded loop of `function`, after its body was emitted."""
    for loop in threaded:
        WorkerEmitter(emitter, function, loop).emit()
        emit_task(loop)


def emit_task(loop: ThreadedLoop) -> None:
    """`void task(ptr context, i64 t)`: chunk t of the context's trip count, with task t's partial results,
    error record and copies."""
    assert loop.task is not None and loop.worker is not None and loop.context is not None
    fn = loop.task
    context, t = fn.args
    context.name, t.name = "context", "t"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    typed = b.bitcast(context, ir.PointerType(loop.context))
    fields = [b.load(b.gep(typed, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True), typ=ty)
              for k, ty in enumerate(loop.context.elements)]
    flat, (trip, tasks, partials, records, copies) = fields[:-5], fields[-5:]
    share, rest = b.sdiv(trip, tasks), b.srem(trip, tasks)
    before = b.select(b.icmp_signed("<", t, rest), t, rest)
    lo = b.add(b.mul(t, share), before)
    hi = b.add(b.add(lo, share), b.zext(b.icmp_signed("<", t, rest), I64))
    count = max(len(loop.privatized), 1)
    for p, array in enumerate(loop.privatized):
        position = _flat_position(loop, array)
        address = b.gep(b.bitcast(copies, ir.PointerType(POINTER)), [b.add(b.mul(t, ir.Constant(I64, count)),
                                                                            ir.Constant(I64, p))],
                        inbounds=True, source_etype=POINTER)
        flat[position] = b.bitcast(b.load(address, typ=POINTER), flat[position].type)
    words = max(loop.words, 1)
    own_partials = b.gep(b.bitcast(partials, ir.PointerType(I64)), [b.mul(t, ir.Constant(I64, words))],
                         inbounds=True, source_etype=I64)
    own_record = b.gep(b.bitcast(records, ir.PointerType(I64)), [b.mul(t, ir.Constant(I64, RECORD_WORDS))],
                       inbounds=True, source_etype=I64)
    b.call(loop.worker, [*flat, lo, hi, own_partials, own_record])
    b.ret_void()


def _flat_position(loop: ThreadedLoop, array: Value) -> int:
    """The index of `array`'s data pointer among the worker's flattened inputs."""
    position = 0
    for value in loop.inputs:
        if value is array:
            return position
        position += len(flat_parameter_types(value.type))
    raise AssertionError(f"%{array.name} is not an input of the loop")
