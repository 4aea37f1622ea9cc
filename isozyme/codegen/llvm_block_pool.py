"""Large blocks of local arrays are kept between calls: a pool of freed blocks per module.

Local arrays that `optimize/memory_reuse.place_in_arena` leaves out of the arena are a `malloc` per call:
those allocated in a `prange` body (once per task), a task's copy of an array its iterations add into
(`llvm_parallel.py`), arrays sized by a value computed late, growable tapes. In glibc a block of 128 KiB or
more is an `mmap` and its `free` an `munmap`, so every call took a page fault on each page it touched; worse,
`calloc` hands such a block over untouched, the first read of a page maps the shared zero page and the first
write copies it, which flushes the TLB of every core the process runs on. The transformer's training step
(`examples/transformer.py`, 4 layers, 2 threads) spent 15% of its time in the kernel there.

So a block of `SMALLEST` bytes or more goes back, at the end of the call (or of the task), into the module's
pool of `SLOTS` pointers, and an allocation takes from the pool a block that holds its bytes and at most
twice as many (`take`), else a new one. Every block of a local array starts with a 16-byte header (the chain
link of `llvm_lowerings.allocate_local`, then the block's size in bytes, which `take` writes and `put`
reads), pooled or not, so that `put` can tell a pooled size from a small one, which it frees.

Taking and putting are atomic exchanges on the slots, so the tasks of a loop and calls on several threads
never share a block; a race costs a hit, never a block: a block in a slot is owned by the pool, and one taken
out by its holder alone. A zeroed allocation clears a block from the pool (`memset`, as `calloc` does on
reused memory); a new one is a `calloc`. The cost: each module keeps up to `LIMIT` bytes of freed blocks
alive until the process exits (an `iz.show_memory` plan does not count them); a block that would exceed it
is freed, and when every slot is full a put evicts one (freed).
"""

from __future__ import annotations

from llvmlite import ir

from isozyme.codegen.llvm_module import ModuleEmitter
from isozyme.codegen.llvm_types import I1, I8, I64, POINTER

SLOTS = 64
"""Blocks the pool holds at most (a loop's tasks each hold their own)."""

SMALLEST = 64 << 10
"""Blocks smaller than this (glibc keeps them in its heap, without page faults) are freed, not pooled."""

LIMIT = 256 << 20
"""Bytes of freed blocks a module keeps at most."""

HEADER = 16
"""Bytes before a block's data: the chain link, then the block's size in bytes."""

SIZE_WORD = 1
"""The header word holding the block's size in bytes (the arena's block too, `llvm_arena_cache.py`)."""


def take(module: ModuleEmitter, b: ir.IRBuilder, total: ir.Value, zeroed: bool) -> ir.Value:
    """A block of at least `total` bytes, its header's size word written, its bytes after the header zero when
    `zeroed`; null when out of memory."""
    return b.call(_take_function(module), [total, ir.Constant(I1, int(zeroed))])


def put(module: ModuleEmitter, b: ir.IRBuilder, block: ir.Value) -> None:
    """Give back a block from `take` (or null): into the pool, or freed."""
    b.call(put_function(module), [block])


def size_word(b: ir.IRBuilder, block: ir.Value) -> ir.Value:
    """The address of a block's size in bytes."""
    return b.gep(b.bitcast(block, ir.PointerType(I64)), [ir.Constant(I64, SIZE_WORD)], inbounds=True,
                 source_etype=I64)


def _globals(module: ModuleEmitter) -> tuple[ir.GlobalVariable, ir.GlobalVariable]:
    """The module's slots and the bytes they hold."""
    names = (f"{module.prefix}pool.slots", f"{module.prefix}pool.bytes")
    existing = module.llvm.globals
    if names[0] in existing:
        return existing[names[0]], existing[names[1]]  # type: ignore[return-value]
    slots = ir.GlobalVariable(module.llvm, ir.ArrayType(POINTER, SLOTS), name=names[0])
    held = ir.GlobalVariable(module.llvm, I64, name=names[1])
    for variable, zero in ((slots, ir.Constant(ir.ArrayType(POINTER, SLOTS), None)), (held, ir.Constant(I64, 0))):
        variable.linkage = "internal"
        variable.initializer = zero
    return slots, held


def _helper(module: ModuleEmitter, name: str, result: ir.Type, params: list[ir.Type]) -> tuple[ir.Function, bool]:
    fn = module.declare(f"{module.prefix}{name}", ir.FunctionType(result, params))
    new = not fn.blocks
    fn.linkage = "internal"
    return fn, new


def _slot(b: ir.IRBuilder, slots: ir.GlobalVariable, index: ir.Value) -> ir.Value:
    return b.gep(slots, [ir.Constant(I64, 0), index], inbounds=True)


def _counted(fn: ir.Function, b: ir.IRBuilder, name: str) -> tuple[ir.Value, ir.Block, ir.Block]:
    """Open `for i in range(SLOTS)` at `b`: the counter, the block that steps to the next slot, the block after."""
    before = b.block
    head, step, after = (fn.append_basic_block(f"{name}.{part}") for part in ("head", "next", "done"))
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=name)
    i.add_incoming(ir.Constant(I64, 0), before)
    body = fn.append_basic_block(name)
    b.cbranch(b.icmp_unsigned("<", i, ir.Constant(I64, SLOTS)), body, after)
    step_builder = ir.IRBuilder(step)
    i.add_incoming(step_builder.add(i, ir.Constant(I64, 1)), step)
    step_builder.branch(head)
    b.position_at_end(body)
    return i, step, after


def _take_function(module: ModuleEmitter) -> ir.Function:
    """`ptr pool_take(i64 total, i1 zeroed)` (module docstring)."""
    fn, new = _helper(module, "pool_take", POINTER, [I64, I1])
    if not new:
        return fn
    fn.return_value.add_attribute("noalias")  # as malloc's: the caller owns the block alone
    total, zeroed = fn.args
    slots, held = _globals(module)
    free = module.declare("free", ir.FunctionType(ir.VoidType(), [POINTER]))
    null = ir.Constant(POINTER, None)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    small = b.icmp_unsigned("<", total, ir.Constant(I64, SMALLEST))
    search, fresh = fn.append_basic_block("search"), fn.append_basic_block("fresh")
    b.cbranch(small, fresh, search)
    b.position_at_end(search)
    i, step, after = _counted(fn, b, "slot")
    slot = _slot(b, slots, i)
    occupied, owned = fn.append_basic_block("occupied"), fn.append_basic_block("owned")
    b.cbranch(b.icmp_unsigned("==", b.load_atomic(slot, "monotonic", 8, typ=POINTER), null), step, occupied)
    b.position_at_end(occupied)
    block = b.atomic_rmw("xchg", slot, null, "seq_cst")
    b.cbranch(b.icmp_unsigned("==", block, null), step, owned)  # another thread took it first
    b.position_at_end(owned)
    capacity = b.load(size_word(b, block), typ=I64)
    fits = b.and_(b.icmp_unsigned(">=", capacity, total),
                  b.icmp_unsigned("<=", capacity, b.shl(total, ir.Constant(I64, 1))))
    hit, back = fn.append_basic_block("hit"), fn.append_basic_block("back")
    b.cbranch(fits, hit, back)
    b.position_at_end(back)  # not this one: into its slot again, or freed if the slot was filled meanwhile
    stored = b.extract_value(b.cmpxchg(slot, null, block, "seq_cst", "monotonic"), 1)
    lost = fn.append_basic_block("lost")
    b.cbranch(stored, step, lost)
    b.position_at_end(lost)
    b.atomic_rmw("sub", held, capacity, "seq_cst")
    b.call(free, [block])
    b.branch(step)
    b.position_at_end(hit)
    b.atomic_rmw("sub", held, capacity, "seq_cst")
    clear, done = fn.append_basic_block("clear"), fn.append_basic_block("done")
    b.cbranch(zeroed, clear, done)
    b.position_at_end(clear)
    memset = module.declare("llvm.memset.p0i8.i64", ir.FunctionType(ir.VoidType(), [POINTER, I8, I64, I1]))
    data = b.gep(block, [ir.Constant(I64, HEADER)], inbounds=True, source_etype=I8)
    b.call(memset, [data, ir.Constant(I8, 0), b.sub(total, ir.Constant(I64, HEADER)), ir.Constant(I1, 0)])
    b.branch(done)
    b.position_at_end(done)
    b.ret(block)
    b.position_at_end(after)
    b.branch(fresh)
    b.position_at_end(fresh)
    calloc = module.declare("calloc", ir.FunctionType(POINTER, [I64, I64]))
    malloc = module.declare("malloc", ir.FunctionType(POINTER, [I64]))
    cleared, plain, made = (fn.append_basic_block(n) for n in ("calloc", "malloc", "made"))
    b.cbranch(zeroed, cleared, plain)
    b.position_at_end(cleared)
    by_calloc = b.call(calloc, [ir.Constant(I64, 1), total])
    b.branch(made)
    b.position_at_end(plain)
    by_malloc = b.call(malloc, [total])
    b.branch(made)
    b.position_at_end(made)
    block = b.phi(POINTER)
    block.add_incoming(by_calloc, cleared)
    block.add_incoming(by_malloc, plain)
    sized, failed = fn.append_basic_block("sized"), fn.append_basic_block("failed")
    b.cbranch(b.icmp_unsigned("==", block, null), failed, sized)
    b.position_at_end(sized)
    b.store(total, size_word(b, block))
    b.ret(block)
    b.position_at_end(failed)
    b.ret(null)
    return fn


def put_function(module: ModuleEmitter) -> ir.Function:
    """`void pool_put(ptr block)` (module docstring)."""
    fn, new = _helper(module, "pool_put", ir.VoidType(), [POINTER])
    if not new:
        return fn
    (block,) = fn.args
    slots, held = _globals(module)
    free = module.declare("free", ir.FunctionType(ir.VoidType(), [POINTER]))
    null = ir.Constant(POINTER, None)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    given, done, release = (fn.append_basic_block(n) for n in ("given", "done", "free"))
    b.cbranch(b.icmp_unsigned("==", block, null), done, given)
    b.position_at_end(given)
    capacity = b.load(size_word(b, block), typ=I64)
    pooled, counted = fn.append_basic_block("pooled"), fn.append_basic_block("counted")
    b.cbranch(b.icmp_unsigned("<", capacity, ir.Constant(I64, SMALLEST)), release, pooled)
    b.position_at_end(pooled)
    before = b.atomic_rmw("add", held, capacity, "seq_cst")
    over = b.icmp_unsigned(">", b.add(before, capacity), ir.Constant(I64, LIMIT))
    uncount = fn.append_basic_block("uncount")
    b.cbranch(over, uncount, counted)
    b.position_at_end(uncount)
    b.atomic_rmw("sub", held, capacity, "seq_cst")
    b.branch(release)
    b.position_at_end(counted)
    i, step, after = _counted(fn, b, "slot")
    slot = _slot(b, slots, i)
    empty = fn.append_basic_block("empty")
    b.cbranch(b.icmp_unsigned("==", b.load_atomic(slot, "monotonic", 8, typ=POINTER), null), empty, step)
    b.position_at_end(empty)
    b.cbranch(b.extract_value(b.cmpxchg(slot, null, block, "seq_cst", "monotonic"), 1), done, step)
    b.position_at_end(after)  # every slot full: the block evicts the one in a slot picked by its address
    victim_slot = _slot(b, slots, b.urem(b.lshr(b.ptrtoint(block, I64), ir.Constant(I64, 12)),
                                         ir.Constant(I64, SLOTS)))
    victim = b.atomic_rmw("xchg", victim_slot, block, "seq_cst")
    evict = fn.append_basic_block("evict")
    b.cbranch(b.icmp_unsigned("==", victim, null), done, evict)
    b.position_at_end(evict)
    b.atomic_rmw("sub", held, b.load(size_word(b, victim), typ=I64), "seq_cst")
    b.call(free, [victim])
    b.branch(done)
    b.position_at_end(release)
    b.call(free, [block])
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    return fn


def free_chain(module: ModuleEmitter) -> ir.Function:
    """`void free_chain(ptr head)`: give back a chain of local arrays (each block's header links the next)."""
    fn, new = _helper(module, "free_chain", ir.VoidType(), [POINTER])
    if not new:
        return fn
    give_back = put_function(module)
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_unsigned("==", fn.args[0], ir.Constant(POINTER, None)), done, loop)
    b.position_at_end(loop)
    head = b.phi(POINTER)
    head.add_incoming(fn.args[0], entry)
    following = b.load(b.bitcast(head, ir.PointerType(POINTER)), typ=POINTER)
    b.call(give_back, [head])
    head.add_incoming(following, loop)
    b.cbranch(b.icmp_unsigned("==", following, ir.Constant(POINTER, None)), done, loop)
    b.position_at_end(done)
    b.ret_void()
    return fn
