"""`prange` loops of LLVM code on every core: each one runs as tasks over chunks of its iterations.

    threaded, serial = plan_threaded_loops(emitter, function)   # before the function's body is emitted
    outline(function_emitter, threaded)                         # the dispatch replaces each loop
    emit_workers(emitter, function, threaded)                   # the tasks' code (`llvm_worker.py`)

The loops are those that OpenCL runs as NDRange kernels (`parallel_loops.plan_parallel_loops`: counted,
every header phi an induction variable, a reduction or a constant, accumulations rewritten as `atomic_add`
with a mode), less those whose header has effects (a store, an add, a call: a chunk runs its last header
once more) or whose values other than the header's phis are used after the loop.

A loop becomes three pieces:

  - the *worker*, `void loop.N(inputs..., i64 lo, i64 hi, ptr partials, ptr record)`: the loop's blocks
    for iterations [lo, hi), in a function of their own (its inputs are the values the loop uses that are
    defined before it; an array argument of the entry kernel stays `noalias`). Each reduction starts at its
    identity (-0.0, or 0), but in task 0 at the loop's starting value, and the worker writes its sum into
    `partials` at the end. An `atomic_add` in mode `group` (every index loop-invariant: a parameter that
    every iteration reads, in the reverse pass) adds into a register, written out with a flag saying that
    it ran; in task 0 into the element itself (no other task writes that array but through registers or
    copies: an array with a group add has no element owned by an iteration). A local array flagged `private`
    (a shadow that is zero at the start and end of every iteration) is a zeroed copy per task.
  - the *task*, `void loop.N.task(ptr context, i64 t)`: reads the inputs from the context the dispatch
    filled and calls the worker on chunk t of `tasks` (contiguous, sizes differing by at most one), with
    its own partials, error record and copies: an array that the loop adds to at indices that are neither
    invariant nor one per iteration (mode `atomic`: the adjoint of `means[k, j]` in GMM's reverse loop)
    is the array itself in task 0 and a zeroed copy in every other task.
  - the *dispatch*, where the loop was: `tasks` is the pool's thread count, at most `MAX_TASKS` and at most
    one per `task_work` units of estimated work (the pool's, `llvm_thread_pool.TASK_WORK` by default; the
    cost of an iteration is `iteration_cost`, a constant of the loop), so that a loop of a thousand cheap
    iterations stays on the caller; the pool runs the tasks (`llvm_thread_pool.py`); without a pool (a
    module not attached to one) the one task runs here. Then, in task order: the first failed task's error
    record becomes this function's failure; a reduction is task 0's sum plus each other task's; each group
    add adds each other task's sum (if it ran); each copy is added into its array and given back (copies come
    from the module's pool of large blocks, `llvm_block_pool.py`). The header's
    phis after the loop are those sums, the induction variables' final values (`start + trip * step`) and
    the constants.

Task 0 does what the serial loop does (its sums start where the loop starts, it adds into the arrays
themselves), and the other tasks' sums are added after it in order: with one task the result is the
serial loop's bit for bit. So a result depends on the thread count (how the sums are grouped), never on
timing. Errors: a task stops at its first failing iteration; the failure reported is that
of the first failing task, which is the first failing iteration of the loop (other tasks may have
written results the serial loop would not have reached).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from isozyme.codegen import llvm_block_pool as block_pool
from isozyme.codegen.abi import MAX_TASKS
from isozyme.codegen.error_sites import PAYLOAD_WORDS
from isozyme.codegen.llvm_function import FunctionEmitter
from isozyme.codegen.llvm_module import ModuleEmitter
from isozyme.codegen.llvm_types import (
    F32,
    F64,
    I1,
    I8,
    I32,
    I64,
    POINTER,
    RECORD_POINTER,
    element_size,
    flat_parameter_types,
    register_type,
    storage_type,
)
from isozyme.codegen.parallel_loops import ParallelLoop, constant_phis, plan_parallel_loops
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.loops import Loop, LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.types import ArrayType

RECORD_WORDS = 1 + PAYLOAD_WORDS
SIDE_EFFECTS = (Op.STORE, Op.ATOMIC_ADD, Op.CALL, Op.GROW)

INNER_TRIPS = 16
"""What an inner loop of unknown trip count is assumed to multiply its body's cost by."""
EXPENSIVE = {Op.EXP: 20, Op.LOG: 20, Op.LOG1P: 20, Op.EXPM1: 20, Op.SIN: 20, Op.COS: 20, Op.TAN: 30,
             Op.TANH: 20, Op.SINH: 20, Op.COSH: 20, Op.ASIN: 30, Op.ACOS: 30, Op.ATAN: 30, Op.ATAN2: 40,
             Op.ERF: 20, Op.POW: 40, Op.SIGMOID: 20, Op.SQRT: 10, Op.FDIV: 5, Op.ALLOC: 50, Op.GROW: 50}
"""Costlier ops, in `iteration_cost` units."""


@dataclass(eq=False)
class ThreadedLoop:
    """A `prange` loop that runs as tasks (module docstring)."""

    plan: ParallelLoop
    inputs: list[Value]
    """What the worker takes: arguments and values defined before the loop, in first-use order."""
    constants: dict[Phi, Constant]
    """The header phis that hold one constant."""
    group_adds: list[Instruction] = field(default_factory=list)
    privatized: list[Value] = field(default_factory=list)
    """Arrays added to in mode `atomic`: a zeroed copy per task but the first."""
    scratch: list[Value] = field(default_factory=list)
    """Local arrays flagged `private`: a zeroed copy per task, made by the worker."""
    worker: ir.Function | None = None
    task: ir.Function | None = None
    context: ir.LiteralStructType | None = None

    @property
    def loop_blocks(self) -> set[Block]:
        return set(self.plan.loop.blocks)

    @property
    def header(self) -> Block:
        return self.plan.header

    @property
    def words(self) -> int:
        """Words of partial results per task: one per reduction, a sum and a flag per group add."""
        return len(self.plan.reductions) + 2 * len(self.group_adds)

    def inside(self) -> Block:
        """The header's successor in the loop."""
        return next(s for s in self.header.terminator.successors if s in self.plan.loop)  # type: ignore[union-attr]

    def exit(self) -> Block:
        return next(s for s in self.header.terminator.successors if s not in self.plan.loop)  # type: ignore[union-attr]


def plan_threaded_loops(emitter: ModuleEmitter, function: Function) -> tuple[list[ThreadedLoop], list[str]]:
    """The loops of `function` that run as tasks, their workers and tasks declared; why others run serially."""
    plans, serial = plan_parallel_loops(function)
    constants = constant_phis(function)
    threaded: list[ThreadedLoop] = []
    for plan in plans:
        reason = _refusal(plan)
        if reason is not None:
            serial.append(f"the prange loop at {plan.location} runs serially: {reason}")
            continue
        loop = ThreadedLoop(plan, _inputs(plan), {p: c for p, c in constants.items() if p.block is plan.header})
        for inst, mode in plan.modes.items():
            if mode == "group":
                loop.group_adds.append(inst)
            elif mode == "atomic" and inst.operands[1] not in loop.privatized:
                loop.privatized.append(inst.operands[1])
        loop.scratch = [array for array, kind in plan.scratch.items() if kind == "private"]
        _declare(emitter, function, loop)
        threaded.append(loop)
    return threaded, serial


def iteration_cost(loop: Loop, depth: int = 0) -> int:
    """A static estimate of one iteration's work: an instruction is 1 (`EXPENSIVE` ones more, a call the
    cost of its callee's body), and an inner loop's body counts `INNER_TRIPS` times."""
    inner = {block for child in loop.children for block in child.blocks}
    cost = sum(_instruction_cost(inst, depth) for block in loop.blocks if block not in inner
               for inst in block.instructions)
    return cost + sum(INNER_TRIPS * iteration_cost(child, depth) for child in loop.children)


def _instruction_cost(inst: Instruction, depth: int) -> int:
    if inst.op is Op.CALL:
        callee = inst.callee
        if depth > 2 or callee is None:
            return 100
        nest = LoopNest(callee)
        top = sum(_instruction_cost(i, depth + 1) for block in callee.blocks
                  if not any(loop.contains(block) for loop in nest.top_level) for i in block.instructions)
        return top + sum(INNER_TRIPS * iteration_cost(loop, depth + 1) for loop in nest.top_level)
    return EXPENSIVE.get(inst.op, 1)


def _refusal(plan: ParallelLoop) -> str | None:
    loop, header = plan.loop, plan.header
    terminator = header.terminator
    if terminator is None or terminator.op is not Op.CBR or \
            sum(s in loop for s in terminator.successors) != 1:
        return "its header does not decide between the body and the exit"
    if any(inst.op in SIDE_EFFECTS for inst in header.instructions):
        return "its header writes memory or calls a function"
    for block in loop.blocks:
        for inst in block.instructions:
            if isinstance(inst, Phi) and inst.block is header:
                continue
            if any(u.block is None or u.block not in loop for u in inst.users):
                return f"%{inst.name or 'value'}, computed in it, is used after it"
    return None


def _inputs(plan: ParallelLoop) -> list[Value]:
    loop, header = plan.loop, plan.header
    found: dict[Value, None] = {}

    def need(value: Value) -> None:
        if isinstance(value, Argument) or (isinstance(value, Instruction) and value.block not in loop):
            found[value] = None
    for block in loop.blocks:
        for inst in block.instructions:
            if isinstance(inst, Phi) and block is header:
                for latch in loop.latches:
                    need(inst.incoming_value(latch))
                continue
            for operand in inst.operands:
                need(operand)
    for iv in plan.inductions:
        need(iv.start)
        need(iv.step)
    for reduction in plan.reductions:  # task 0 starts from it
        need(reduction.phi.incoming_value(loop.entering_blocks[0]))
    return list(found)


def _declare(emitter: ModuleEmitter, function: Function, loop: ThreadedLoop) -> None:
    name = f"{emitter.symbol(function)}.loop{loop.plan.number}"
    flat = [t for value in loop.inputs for t in flat_parameter_types(value.type)]
    worker_type = ir.FunctionType(ir.VoidType(), [*flat, I64, I64, ir.PointerType(I64), RECORD_POINTER])
    loop.worker = ir.Function(emitter.llvm, worker_type, name)
    loop.worker.linkage = "internal"
    position = 0
    for value in loop.inputs:
        parts = flat_parameter_types(value.type)
        if isinstance(value, Argument) and function is emitter.entry and isinstance(value.type, ArrayType):
            loop.worker.args[position].add_attribute("noalias")  # distinct arrays, or a task's own copy
        position += len(parts)
    loop.context = ir.LiteralStructType([*flat, I64, I64, POINTER, POINTER, POINTER])
    loop.task = ir.Function(emitter.llvm, ir.FunctionType(ir.VoidType(), [POINTER, I64]), f"{name}.task")
    loop.task.linkage = "internal"


def outline(em: FunctionEmitter, threaded: list[ThreadedLoop]) -> None:
    """Emit each loop's dispatch in place of the loop when `em` walks the function."""
    for loop in threaded:
        em.outlined[loop.header] = (loop.loop_blocks, lambda loop=loop: _Dispatch(em, loop).emit())


def identity(ty: ir.Type) -> ir.Constant:
    """The additive identity of a reduction: -0.0 for floats (x + -0.0 is x, also for x = -0.0), else 0."""
    return ir.Constant(ty, -0.0) if ty in (F32, F64) else ir.Constant(ty, 0)


def add(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.fadd(x, y) if x.type in (F32, F64) else b.add(x, y)


def word(b: ir.IRBuilder, base: ir.Value, index: ir.Value, ty: ir.Type) -> ir.Value:
    """The address of word `index` of `base` (an `i64*`), as a pointer to `ty`."""
    address = b.gep(base, [index], inbounds=True, source_etype=I64)
    return address if ty == I64 else b.bitcast(address, ir.PointerType(ty))


class _Dispatch:
    """The code that replaces a loop in its function (module docstring)."""

    def __init__(self, em: FunctionEmitter, loop: ThreadedLoop) -> None:
        self.em, self.loop, self.b = em, loop, em.builder
        self.entry_builder = ir.IRBuilder(em.prologue)
        self.entry_builder.position_at_start(em.prologue)
        self._open: list[tuple[ir.PhiInstr, ir.Block, ir.Block]] = []
        self.sums: dict[Phi, ir.Value] = {}

    def block(self, suffix: str) -> ir.Block:
        return self.em.llvm_fn.append_basic_block(f"loop{self.loop.plan.number}.{suffix}")

    def counted(self, count: ir.Value, name: str, start: int = 0) -> tuple[ir.Value, ir.Block]:
        """Open a loop `for i in range(start, count)` here: its counter and the block after it; the body is
        what is emitted until `close`."""
        b = self.b
        before = b.block
        head, body = self.block(f"{name}.head"), self.block(name)
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name=name)
        i.add_incoming(ir.Constant(I64, start), before)
        after = self.block(f"{name}.done")
        b.cbranch(b.icmp_signed("<", i, count), body, after)
        b.position_at_end(body)
        self._open.append((i, head, after))
        return i, after

    def close(self) -> None:
        i, head, after = self._open.pop()
        b = self.b
        i.add_incoming(b.add(i, ir.Constant(I64, 1)), b.block)
        b.branch(head)
        b.position_at_end(after)

    def emit(self) -> None:
        em, loop, b = self.em, self.loop, self.b
        plan = loop.plan
        trip = em.operand(plan.trip)
        tasks = self._task_count(trip)
        words = max(loop.words, 1)
        partials = self.entry_builder.alloca(I64, size=MAX_TASKS * words, name="partials")
        records = self.entry_builder.alloca(I64, size=MAX_TASKS * RECORD_WORDS, name="task.records")
        copies = self.entry_builder.alloca(POINTER, size=MAX_TASKS * max(len(loop.privatized), 1), name="copies")
        memset = em.module.declare("llvm.memset.p0i8.i64", ir.FunctionType(ir.VoidType(), [POINTER, I8, I64, I1]))
        b.call(memset, [b.bitcast(records, POINTER), ir.Constant(I8, 0),
                        b.mul(tasks, ir.Constant(I64, 8 * RECORD_WORDS)), ir.Constant(I1, 0)])
        self._make_copies(tasks, copies)
        context = self._context(trip, tasks, partials, records, copies)
        several, one, ran = self.block("threads"), self.block("here"), self.block("ran")
        b.cbranch(b.icmp_signed(">", tasks, ir.Constant(I64, 1)), several, one)
        b.position_at_end(several)
        state = b.load(self._slot(), typ=POINTER)
        run_type = ir.FunctionType(ir.VoidType(), [POINTER, POINTER, POINTER, I64])
        run = b.load(b.bitcast(state, ir.PointerType(ir.PointerType(run_type))), typ=ir.PointerType(run_type))
        b.call(run, [state, b.bitcast(loop.task, POINTER), context, tasks])
        b.branch(ran)
        b.position_at_end(one)
        b.call(loop.task, [context, ir.Constant(I64, 0)])
        b.branch(ran)
        b.position_at_end(ran)
        self._raise_first_failure(tasks, records, copies)
        self._combine(tasks, partials, copies)
        self._bind_header_phis(trip)
        em.exits[loop.header] = b.block
        b.branch(em.blocks[loop.exit()])

    def _slot(self) -> ir.Value:
        return self.em.module.parallel_slot()

    def _task_count(self, trip: ir.Value) -> ir.Value:
        """The pool's thread count (1 without a pool), at most MAX_TASKS and one per `task_work` units of
        estimated work, at least 1."""
        b = self.b
        state = b.load(self._slot(), typ=POINTER)
        pooled, merge = self.block("pool"), self.block("tasks")
        before = b.block
        b.cbranch(b.icmp_unsigned("!=", state, ir.Constant(POINTER, None)), pooled, merge)
        b.position_at_end(pooled)
        words = b.bitcast(state, ir.PointerType(I64))
        threads = b.load(b.gep(words, [ir.Constant(I64, 1)], inbounds=True, source_etype=I64), typ=I64)
        task_work = b.load(b.gep(words, [ir.Constant(I64, 2)], inbounds=True, source_etype=I64), typ=I64)
        b.branch(merge)
        b.position_at_end(merge)
        count = b.phi(I64, name="threads")
        count.add_incoming(ir.Constant(I64, 1), before)
        count.add_incoming(threads, pooled)
        work = b.phi(I64, name="task.work")
        work.add_incoming(ir.Constant(I64, 1), before)
        work.add_incoming(task_work, pooled)
        cost = ir.Constant(I64, iteration_cost(self.loop.plan.loop))
        per_task = b.sdiv(b.add(work, ir.Constant(I64, cost.constant - 1)), cost)  # iterations, rounded up
        per_task = b.select(b.icmp_signed("<", per_task, ir.Constant(I64, 1)), ir.Constant(I64, 1), per_task)
        worth = b.sdiv(trip, per_task)
        smaller = b.select(b.icmp_signed("<", count, worth), count, worth)
        clamped = b.select(b.icmp_signed(">", smaller, ir.Constant(I64, MAX_TASKS)), ir.Constant(I64, MAX_TASKS),
                           smaller)
        return b.select(b.icmp_signed("<", clamped, ir.Constant(I64, 1)), ir.Constant(I64, 1), clamped)

    def _elements(self, array: ir.Value, rank: int) -> ir.Value:
        b = self.b
        count: ir.Value = ir.Constant(I64, 1)
        for axis in range(rank):
            count = b.mul(count, b.extract_value(array, 1 + axis))
        return count

    def _make_copies(self, tasks: ir.Value, copies: ir.Value) -> None:
        """Task 0 adds into each privatized array itself, every other task into a zeroed copy."""
        em, b = self.em, self.b
        count = max(len(self.loop.privatized), 1)
        for p, array in enumerate(self.loop.privatized):
            value = em.operand(array)
            b.store(b.bitcast(b.extract_value(value, 0), POINTER),
                    b.gep(copies, [ir.Constant(I64, p)], inbounds=True, source_etype=POINTER))
            elements = self._elements(value, array.type.rank)  # type: ignore[attr-defined]
            size = ir.Constant(I64, element_size(array.type.element))  # type: ignore[attr-defined]
            t, _ = self.counted(tasks, "copy", start=1)
            total = b.add(b.mul(elements, size), ir.Constant(I64, block_pool.HEADER))
            block = block_pool.take(em.module, b, total, zeroed=True)
            site = next(inst for inst in self.loop.plan.modes if inst.operands[1] is array)
            em.check(b.icmp_unsigned("!=", block, ir.Constant(POINTER, None)), site, "out-of-memory", [elements],
                     rank=1, element=str(array.type.element), itemsize=size.constant)  # type: ignore[attr-defined]
            slot = b.add(b.mul(t, ir.Constant(I64, count)), ir.Constant(I64, p))
            data = b.gep(block, [ir.Constant(I64, block_pool.HEADER)], inbounds=True, source_etype=I8)
            b.store(data, b.gep(copies, [slot], inbounds=True, source_etype=POINTER))
            self.close()

    def _context(self, trip: ir.Value, tasks: ir.Value, partials: ir.Value, records: ir.Value,
                 copies: ir.Value) -> ir.Value:
        em, b, loop = self.em, self.b, self.loop
        assert loop.context is not None
        context = self.entry_builder.alloca(loop.context, name="context")
        values: list[ir.Value] = []
        for value in loop.inputs:
            operand = em.operand(value)
            if isinstance(value.type, ArrayType):
                values += [b.extract_value(operand, k) for k in range(1 + value.type.rank)]
            else:
                values.append(operand)
        values += [trip, tasks, b.bitcast(partials, POINTER), b.bitcast(records, POINTER), b.bitcast(copies, POINTER)]
        for index, value in enumerate(values):
            b.store(value, b.gep(context, [ir.Constant(I32, 0), ir.Constant(I32, index)], inbounds=True))
        return b.bitcast(context, POINTER)

    def _raise_first_failure(self, tasks: ir.Value, records: ir.Value, copies: ir.Value) -> None:
        """The first failed task's record becomes this function's; the copies are freed either way."""
        em, b = self.em, self.b
        t, _ = self.counted(tasks, "failed")
        base = b.mul(t, ir.Constant(I64, RECORD_WORDS))
        failed, fine = self.block("failure"), self.block("fine")
        status = b.load(word(b, records, base, I64), typ=I64)
        b.cbranch(b.icmp_signed("!=", status, ir.Constant(I64, 0)), failed, fine)
        b.position_at_end(failed)
        for k in range(RECORD_WORDS):
            b.store(b.load(word(b, records, b.add(base, ir.Constant(I64, k)), I64), typ=I64), em.record_slot(k))
        self._free_copies(tasks, copies)
        b.branch(em.error_exit())
        b.position_at_end(fine)
        self.close()

    def _free_copies(self, tasks: ir.Value, copies: ir.Value) -> None:
        if not self.loop.privatized:
            return
        em, b = self.em, self.b
        count = len(self.loop.privatized)
        t, _ = self.counted(tasks, "free", start=1)
        for p in range(count):
            slot = b.add(b.mul(t, ir.Constant(I64, count)), ir.Constant(I64, p))
            data = b.load(b.gep(copies, [slot], inbounds=True, source_etype=POINTER), typ=POINTER)
            block_pool.put(em.module, b, b.gep(data, [ir.Constant(I64, -block_pool.HEADER)], inbounds=True,
                                                 source_etype=I8))
        self.close()

    def _combine(self, tasks: ir.Value, partials: ir.Value, copies: ir.Value) -> None:
        """Each task's sums, in task order (module docstring)."""
        em, b, loop = self.em, self.b, self.loop
        words = max(loop.words, 1)
        for r, reduction in enumerate(loop.plan.reductions):
            ty = register_type(reduction.phi.type)
            total = self.entry_builder.alloca(ty, name=f"{reduction.phi.name or 'sum'}.total")
            b.store(b.load(word(b, partials, ir.Constant(I64, r), ty), typ=ty), total)  # task 0's, from the start
            t, _ = self.counted(tasks, "sum", start=1)
            slot = b.add(b.mul(t, ir.Constant(I64, words)), ir.Constant(I64, r))
            b.store(add(b, b.load(total, typ=ty), b.load(word(b, partials, slot, ty), typ=ty)), total)
            self.close()
            self.sums[reduction.phi] = b.load(total, typ=ty)
        first_group = len(loop.plan.reductions)
        for g, inst in enumerate(loop.group_adds):
            value, array, *indices = inst.operands
            ty = register_type(value.type)
            t, _ = self.counted(tasks, "group", start=1)  # task 0 added into the element itself
            slot = b.add(b.mul(t, ir.Constant(I64, words)), ir.Constant(I64, first_group + 2 * g))
            ran_flag = b.load(word(b, partials, b.add(slot, ir.Constant(I64, 1)), I64), typ=I64)
            adds, skip = self.block("group.add"), self.block("group.next")
            b.cbranch(b.icmp_signed("!=", ran_flag, ir.Constant(I64, 0)), adds, skip)
            b.position_at_end(adds)
            address = em.element_address(inst, array, list(indices), check=False)
            element = storage_type(array.type.element)  # type: ignore[attr-defined]
            b.store(add(b, b.load(address, typ=element), b.load(word(b, partials, slot, ty), typ=ty)), address)
            b.branch(skip)
            b.position_at_end(skip)
            self.close()
        count = len(loop.privatized)
        for p, array in enumerate(loop.privatized):
            value = em.operand(array)
            element = storage_type(array.type.element)  # type: ignore[attr-defined]
            target = b.extract_value(value, 0)
            elements = self._elements(value, array.type.rank)  # type: ignore[attr-defined]
            t, _ = self.counted(tasks, "merge", start=1)
            copy = b.bitcast(b.load(b.gep(copies, [b.add(b.mul(t, ir.Constant(I64, count)), ir.Constant(I64, p))],
                                          inbounds=True, source_etype=POINTER), typ=POINTER),
                             ir.PointerType(element))
            e, _ = self.counted(elements, "element")
            into = b.gep(target, [e], inbounds=True, source_etype=element)
            b.store(add(b, b.load(into, typ=element),
                        b.load(b.gep(copy, [e], inbounds=True, source_etype=element), typ=element)), into)
            self.close()
            self.close()
        self._free_copies(tasks, copies)

    def _bind_header_phis(self, trip: ir.Value) -> None:
        em, b, loop = self.em, self.b, self.loop
        for iv in loop.plan.inductions:
            em.values[iv.phi] = b.add(em.operand(iv.start), b.mul(trip, em.operand(iv.step)))
        for phi, constant in loop.constants.items():
            em.values[phi] = em.operand(constant)
        em.values.update(self.sums)

