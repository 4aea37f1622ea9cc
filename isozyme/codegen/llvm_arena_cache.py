"""The arena's block is kept between calls: one cached block per compiled function.

`optimize/memory_reuse.place_in_arena` gives a function one `alloc` for all its placed local arrays, the
arena: for a gradient it holds the tapes, often megabytes (the GMM gradient's at d=64, K=100, n=1000:
200 MB). A `malloc` of that size is an `mmap` and its `free` an `munmap`, so every call took page faults
on all of it and the kernel cleared every page: a third of the GMM gradient's time at d=64. So the
arena's block is not freed at exit but put back in a cache, an internal global pointer per function, and
the next call takes it back when it is large enough (else frees it and allocates a new one).

Taking and putting back are atomic exchanges, so calls on several threads (and recursive calls) never
share a block: a call that finds the cache empty allocates its own, and of two blocks put back one is
freed. The cost: each compiled function keeps the block of its last call alive until the process exits
(its size is that call's arena, `iz.show_memory`). The block's 16-byte header holds its size in bytes in
its second word, as every block of a local array does (`llvm_block_pool.size_word`; the first, the chain
link of other local arrays, is unused: the arena is not chained).
The arena is never `zeroed` (its views clear themselves), so a reused block needs no clearing.
"""

from __future__ import annotations

from llvmlite import ir

from isozyme.codegen.llvm_block_pool import size_word
from isozyme.codegen.llvm_module import ModuleEmitter
from isozyme.codegen.llvm_types import I64, POINTER
from isozyme.ssa.ir import Instruction
from isozyme.ssa.ops import Op


def is_arena(alloc: Instruction) -> bool:
    """An alloc that only views use, as their arena (what `place_in_arena` makes), and not zeroed."""
    users = alloc.users
    return (alloc.op is Op.ALLOC and "zeroed" not in alloc.flags and bool(users)
            and all(user.op is Op.VIEW and user.operands[-2] is alloc for user in users))


class ArenaCache:
    """The cache of one function's arena block, and the stack slot holding the block this call took."""

    def __init__(self, module: ModuleEmitter, symbol: str, prologue: ir.Block) -> None:
        self.module = module
        self.symbol = symbol
        self.prologue = prologue
        self.slot: ir.Value | None = None
        self.cache: ir.GlobalVariable | None = None

    def take(self, builder: ir.IRBuilder, size: ir.Value) -> ir.Value:
        """A block of at least `size` bytes (null when out of memory), remembered for `release`."""
        if self.cache is None:
            self.cache = ir.GlobalVariable(self.module.llvm, POINTER, name=f"{self.symbol}.arena")
            self.cache.linkage = "internal"
            self.cache.initializer = ir.Constant(POINTER, None)
            start = ir.IRBuilder(self.prologue)
            start.position_at_start(self.prologue)
            self.slot = start.alloca(POINTER, name="arena.block")
            start.store(ir.Constant(POINTER, None), self.slot)
        block = builder.call(self._take_function(), [self.cache, size])
        builder.store(block, self.slot)
        return block

    def release(self, builder: ir.IRBuilder) -> None:
        """Put the block this call took (if any) back in the cache: at every exit."""
        if self.slot is not None:
            builder.call(self._release_function(), [self.cache, builder.load(self.slot, typ=POINTER)])

    def _take_function(self) -> ir.Function:
        """`ptr take_arena(ptr* cache, i64 size)`: the cached block if it has `size` bytes, else a new one."""
        name = f"{self.module.prefix}take_arena"
        fn, new = self._helper(name, POINTER, [I64])
        if not new:
            return fn
        # noalias like malloc's (the caller owns the block alone: the cache was emptied), which survives only
        # if the call is not inlined: the block is then an object of its own to LLVM's alias analysis
        fn.return_value.add_attribute("noalias")
        fn.attributes.add("noinline")
        cache, size = fn.args
        entry, check, reuse, discard, fresh, sized, failed = (
            fn.append_basic_block(n) for n in ("entry", "check", "reuse", "discard", "fresh", "sized", "failed"))
        b = ir.IRBuilder(entry)
        cached = b.atomic_rmw("xchg", cache, ir.Constant(POINTER, None), "seq_cst")
        b.cbranch(b.icmp_unsigned("==", cached, ir.Constant(POINTER, None)), fresh, check)
        b.position_at_end(check)
        capacity = b.load(size_word(b, cached), typ=I64)
        b.cbranch(b.icmp_unsigned(">=", capacity, size), reuse, discard)
        b.position_at_end(reuse)
        b.ret(cached)
        b.position_at_end(discard)
        b.call(self._free(), [cached])
        b.branch(fresh)
        b.position_at_end(fresh)
        block = b.call(self.module.declare("malloc", ir.FunctionType(POINTER, [I64])), [size])
        b.cbranch(b.icmp_unsigned("==", block, ir.Constant(POINTER, None)), failed, sized)
        b.position_at_end(sized)
        b.store(size, size_word(b, block))
        b.ret(block)
        b.position_at_end(failed)
        b.ret(ir.Constant(POINTER, None))
        return fn

    def _release_function(self) -> ir.Function:
        """`void release_arena(ptr* cache, ptr block)`: a non-null block goes in, the one it replaces is freed."""
        name = f"{self.module.prefix}release_arena"
        fn, new = self._helper(name, ir.VoidType(), [POINTER])
        if not new:
            return fn
        cache, block = fn.args
        entry, put, done = (fn.append_basic_block(n) for n in ("entry", "put", "done"))
        b = ir.IRBuilder(entry)
        b.cbranch(b.icmp_unsigned("==", block, ir.Constant(POINTER, None)), done, put)
        b.position_at_end(put)
        b.call(self._free(), [b.atomic_rmw("xchg", cache, block, "seq_cst")])
        b.branch(done)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def _helper(self, name: str, result: ir.Type, params: list[ir.Type]) -> tuple[ir.Function, bool]:
        """The module's helper `name` taking the cache and `params`; whether it was just declared (no body)."""
        fn = self.module.declare(name, ir.FunctionType(result, [ir.PointerType(POINTER), *params]))
        new = not fn.blocks
        fn.linkage = "internal"
        return fn, new

    def _free(self) -> ir.Function:
        return self.module.declare("free", ir.FunctionType(ir.VoidType(), [POINTER]))
