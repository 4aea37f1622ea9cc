"""How each SSA op becomes LLVM IR: `LOWERINGS`, a table keyed by op, which the walk (`llvm_function.py`)
applies to every instruction but the phis. Every other op has an entry (checked when the module loads).

Local arrays:
  - local arrays (`alloc`) are blocks with a 16-byte header that chains them; every return and error exit
    gives the chain back: they live until the kernel returns (DESIGN 1.2). A block of 64 KiB or more comes
    from, and goes back to, the module's pool (`llvm_block_pool.py`), a smaller one is a malloc or calloc. After
    `optimize/memory_reuse.place_in_arena` most are a `view`: a pointer into the one such block that holds
    the function's arena (a malloc per call, not per alloc execution), cleared by a memset when `zeroed`.
  - a `growable` local array lives behind a descriptor, a stack slot per alloc holding its array value
    (data pointer and capacity, its extent). The alloc and each `grow` store into it, and every use (the
    address and bounds check of load, store, atomic_add) loads it where it is: after a grow, the data
    moved. One slot per alloc instruction is enough, since only the alloc's own value reaches the array
    (no phi, call or dim: verifier.py), and LLVM's SROA keeps the slot in registers.

Semantics are those of `ssa/semantics.py`: Python floor division and modulo, integer division by zero and
invalid shifts and conversions raise, `fmin`/`fmax` are Python's `min`/`max`, `pow(x, 2.0)` and
`pow(x, 3.0)` are products, f32 transcendental functions are evaluated in f64 and rounded once (as the
interpreter does; `sqrt fabs floor ceil` are exact in f32). Floating-point code gets no fast-math flags
unless `CodegenOptions.fastmath` names some (the kernel's `fastmath=`). Bounds checks are emitted in
checked mode only; the other checks always (they cost a compare, and without them the hardware traps or
the result is undefined).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from isozyme.codegen import llvm_block_pool as block_pool
from isozyme.codegen.llvm_accumulation import address_varies, fused_sum, fuses, is_product, summands
from isozyme.codegen.llvm_arena_cache import is_arena
from isozyme.codegen.llvm_function import FunctionEmitter, Lowering
from isozyme.codegen.llvm_types import F32, F64, I1, I8, I64, POINTER, element_size, register_type, storage_type
from isozyme.ssa.ir import Constant, Instruction, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import ScalarType


def _binary(method: str, fast: bool = False) -> Lowering:
    def lower(em: FunctionEmitter, inst: Instruction) -> ir.Value:
        a, b = em.operands(inst)
        if fast:
            return getattr(em.builder, method)(a, b, flags=em.fmf)
        return getattr(em.builder, method)(a, b)
    return lower


def _icmp(predicate: str) -> Lowering:
    """Integer comparison: signed on i32/i64, unsigned on i1 (False < True, where LLVM's signed i1 has
    true = -1)."""
    def lower(em: FunctionEmitter, inst: Instruction) -> ir.Value:
        a, b = em.operands(inst)
        if a.type == I1:
            return em.builder.icmp_unsigned(predicate, a, b)
        return em.builder.icmp_signed(predicate, a, b)
    return lower


def _fcmp(predicate: str, ordered: bool) -> Lowering:
    def lower(em: FunctionEmitter, inst: Instruction) -> ir.Value:
        a, b = em.operands(inst)
        compare = em.builder.fcmp_ordered if ordered else em.builder.fcmp_unordered
        return compare(predicate, a, b)
    return lower


def _select_of(predicate: str, signed: bool | None) -> Lowering:
    """Python's `min(a, b)` / `max(a, b)`: `b if b < a else a` (`>` for max), for ints and floats."""
    def lower(em: FunctionEmitter, inst: Instruction) -> ir.Value:
        a, b = em.operands(inst)
        if signed is None:
            take_b = em.builder.fcmp_ordered(predicate, b, a)
        else:
            take_b = em.builder.icmp_signed(predicate, b, a)
        return em.builder.select(take_b, b, a)
    return lower


def _lower_ineg(em: FunctionEmitter, inst: Instruction) -> ir.Value:
    return em.builder.neg(em.operand(inst.operands[0]))


def _lower_iabs(em: FunctionEmitter, inst: Instruction) -> ir.Value:
    a = em.operand(inst.operands[0])
    negative = em.builder.icmp_signed("<", a, ir.Constant(a.type, 0))
    return em.builder.select(negative, em.builder.neg(a), a)


def _integer_divmod(em: FunctionEmitter, inst: Instruction) -> tuple[ir.Value, ir.Value]:
    """Python's (a // b, a % b) on wrapping integers; a zero divisor raises ZeroDivisionError.

    LLVM's sdiv/srem truncate and are undefined for b = 0 and for INT_MIN / -1 (x86 traps): divide by 1
    where b = -1 and negate instead (INT_MIN // -1 wraps to INT_MIN), then floor."""
    b_ = em.builder
    a, b = em.operands(inst)
    zero = ir.Constant(a.type, 0)
    em.check(b_.icmp_signed("!=", b, zero), inst, "zero-division", [])
    minus_one = b_.icmp_signed("==", b, ir.Constant(a.type, -1))
    divisor = b_.select(minus_one, ir.Constant(a.type, 1), b)
    quotient = b_.select(minus_one, b_.neg(a), b_.sdiv(a, divisor))
    remainder = b_.srem(a, divisor)
    signs_differ = b_.icmp_signed("<", b_.xor(remainder, b), zero)
    adjust = b_.and_(b_.icmp_signed("!=", remainder, zero), signs_differ)
    floor_quotient = b_.sub(quotient, b_.zext(adjust, a.type))
    floor_remainder = b_.add(remainder, b_.select(adjust, b, zero))
    return floor_quotient, floor_remainder


def _lower_udiv(em: FunctionEmitter, inst: Instruction) -> ir.Value:
    """LLVM's udiv, after the check that raises ZeroDivisionError (udiv by zero is undefined)."""
    a, b = em.operands(inst)
    em.check(em.builder.icmp_signed("!=", b, ir.Constant(a.type, 0)), inst, "zero-division", [])
    return em.builder.udiv(a, b)


def _lower_shift(method: str) -> Lowering:
    def lower(em: FunctionEmitter, inst: Instruction) -> ir.Value:
        a, amount = em.operands(inst)
        bits = a.type.width
        em.check(em.builder.icmp_unsigned("<", amount, ir.Constant(a.type, bits)), inst, "shift", [amount],
                 bits=bits, type=str(inst.type))
        return getattr(em.builder, method)(a, amount)
    return lower


def _float_divmod(em: FunctionEmitter, inst: Instruction) -> tuple[ir.Value, ir.Value]:
    """Python's float (x // y, x % y): CPython's float_floor_div and float_rem, step by step in the
    operands' precision (as `semantics._float_divmod`); a zero divisor gives nan for both."""
    b = em.builder
    x, y = em.operands(inst)
    ty = x.type
    zero, one = ir.Constant(ty, 0.0), ir.Constant(ty, 1.0)
    copysign = em.module.intrinsic("llvm.copysign", ty, arity=2)
    mod = b.frem(x, y)
    div = b.fdiv(b.fsub(x, mod), y)
    mod_nonzero = b.fcmp_unordered("!=", mod, zero)
    adjust = b.and_(mod_nonzero, b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", mod, zero)))
    mod = b.select(adjust, b.fadd(mod, y), mod)
    div = b.select(adjust, b.fsub(div, one), div)
    mod = b.select(mod_nonzero, mod, b.call(copysign, [zero, y]))
    floor_div = b.call(em.module.intrinsic("llvm.floor", ty), [div])
    floor_div = b.select(b.fcmp_ordered(">", b.fsub(div, floor_div), ir.Constant(ty, 0.5)),
                         b.fadd(floor_div, one), floor_div)
    quotient = b.select(b.fcmp_unordered("!=", div, zero), floor_div, b.call(copysign, [zero, b.fdiv(x, y)]))
    nan = ir.Constant(ty, float("nan"))
    zero_divisor = b.fcmp_ordered("==", y, zero)
    return b.select(zero_divisor, nan, quotient), b.select(zero_divisor, nan, mod)


def _first(divmod_fn: Callable[[FunctionEmitter, Instruction], tuple[ir.Value, ir.Value]]) -> Lowering:
    return lambda em, inst: divmod_fn(em, inst)[0]


def _second(divmod_fn: Callable[[FunctionEmitter, Instruction], tuple[ir.Value, ir.Value]]) -> Lowering:
    return lambda em, inst: divmod_fn(em, inst)[1]


def _exact_intrinsic(name: str) -> Lowering:
    """An operation exact in both precisions, through an LLVM intrinsic of the operand's own type."""
    def lower(em: FunctionEmitter, inst: Instruction) -> ir.Value:
        (a,) = em.operands(inst)
        return em.builder.call(em.module.intrinsic(name, a.type), [a])
    return lower


def _libm(name: str) -> Lowering:
    """A C library function of f64; f32 operands are widened and the result rounded once (module doc)."""
    def lower(em: FunctionEmitter, inst: Instruction) -> ir.Value:
        return call_libm(em, name, em.operands(inst))
    return lower


def call_libm(em: FunctionEmitter, name: str, args: list[ir.Value]) -> ir.Value:
    b = em.builder
    narrow = args[0].type == F32
    wide = [b.fpext(a, F64) if narrow else a for a in args]
    result = b.call(em.module.libm(name, len(args)), wide)
    return b.fptrunc(result, F32) if narrow else result


def _lower_pow(em: FunctionEmitter, inst: Instruction) -> ir.Value:
    """`pow(x, 2.0)` is `x*x` and `pow(x, 3.0)` is `(x*x)*x` (semantics.py); other exponents call pow.
    A constant exponent picks one form; a run-time one selects among the three."""
    b = em.builder
    x, y = em.operands(inst)
    exponent = inst.operands[1]
    square = b.fmul(x, x, flags=em.fmf)
    if isinstance(exponent, Constant) and exponent.value == 2.0:
        return square
    cube = b.fmul(square, x, flags=em.fmf)
    if isinstance(exponent, Constant) and exponent.value == 3.0:
        return cube
    general = call_libm(em, "pow", [x, y])
    if isinstance(exponent, Constant):
        return general
    result = b.select(b.fcmp_ordered("==", y, ir.Constant(y.type, 3.0)), cube, general)
    return b.select(b.fcmp_ordered("==", y, ir.Constant(y.type, 2.0)), square, result)


def _lower_fneg(em: FunctionEmitter, inst: Instruction) -> ir.Value:
    return em.builder.fneg(em.operand(inst.operands[0]))


def _lower_sigmoid(em: FunctionEmitter, inst: Instruction) -> ir.Value:
    """`1.0 / (1.0 + exp(-x))` as exactly those ops, so it is bit-for-bit the textbook formula (semantics.py)."""
    b = em.builder
    x = em.operand(inst.operands[0])
    one = ir.Constant(x.type, 1.0)
    denominator = b.fadd(one, call_libm(em, "exp", [b.fneg(x)]), flags=em.fmf)
    return b.fdiv(one, denominator, flags=em.fmf)


def _lower_select(em: FunctionEmitter, inst: Instruction) -> ir.Value:
    return em.builder.select(*em.operands(inst))


def _cast(method: str) -> Lowering:
    def lower(em: FunctionEmitter, inst: Instruction) -> ir.Value:
        return getattr(em.builder, method)(em.operand(inst.operands[0]), register_type(inst.type))
    return lower


def _lower_fptosi(em: FunctionEmitter, inst: Instruction) -> ir.Value:
    """Truncation toward zero; nan raises ValueError, ±inf and out-of-range values OverflowError."""
    b = em.builder
    x = em.operand(inst.operands[0])
    wide = b.fpext(x, F64) if x.type == F32 else x
    bits = inst.type.bits  # type: ignore[attr-defined]
    upper = ir.Constant(F64, float(2 ** (bits - 1)))
    if bits == 64:  # -2**63 - 1 is not a double: the smallest valid value is -2**63 itself
        above = b.fcmp_ordered(">=", wide, ir.Constant(F64, -float(2 ** 63)))
    else:
        above = b.fcmp_ordered(">", wide, ir.Constant(F64, -float(2 ** (bits - 1)) - 1.0))
    in_range = b.and_(above, b.fcmp_ordered("<", wide, upper))
    em.check(in_range, inst, "float-to-int", [wide], type=str(inst.type))
    return b.fptosi(x, register_type(inst.type))


def _lower_load(em: FunctionEmitter, inst: Instruction) -> ir.Value:
    array, *indices = inst.operands
    element = array.type.element  # type: ignore[attr-defined]
    value = em.builder.load(em.element_address(inst, array, list(indices)), typ=storage_type(element))
    em.arena_scopes.tag(value, array)
    return em.builder.icmp_unsigned("!=", value, ir.Constant(I8, 0)) if element.is_bool else value


def _stored(em: FunctionEmitter, value: Value) -> ir.Value:
    stored = em.operand(value)
    return em.builder.zext(stored, I8) if stored.type == I1 else stored


def _lower_store(em: FunctionEmitter, inst: Instruction) -> None:
    value, array, *indices = inst.operands
    stored = _stored(em, value)
    em.arena_scopes.tag(em.builder.store(stored, em.element_address(inst, array, list(indices))), array)


def _lower_atomic_add(em: FunctionEmitter, inst: Instruction) -> None:
    """Compiled CPU code runs one thread, so the atomic add is a plain read-modify-write; a float product or
    sum of products, with "reassoc" and "contract", one chain of fused multiply-adds from the old value
    (`llvm_accumulation.py`)."""
    b = em.builder
    value, array, *indices = inst.operands
    address = em.element_address(inst, array, list(indices))
    element = storage_type(array.type.element)  # type: ignore[attr-defined]
    old = b.load(address, typ=element)
    terms = summands(value, inst.block) if value.type.is_float and fuses(em.fmf) else []
    if any(is_product(term, inst.block) for term in terms) and address_varies(inst, list(indices), em.loops):
        add = fused_sum(b, old, terms, inst.block, em.operand, em.fmf)
    else:
        add = b.fadd(old, em.operand(value)) if value.type.is_float else b.add(old, em.operand(value))
    em.arena_scopes.tag(old, array)
    em.arena_scopes.tag(b.store(add, address), array)


def _lower_dim(em: FunctionEmitter, inst: Instruction) -> ir.Value:
    return em.builder.extract_value(em.operand(inst.operands[0]), 1 + int(inst.attrs["axis"]))  # type: ignore


def _check_extents(em: FunctionEmitter, inst: Instruction, extents: list[ir.Value]) -> None:
    """ValueError (the interpreter's) unless every extent of the alloc or view is non-negative."""
    b = em.builder
    zero = ir.Constant(I64, 0)
    valid = b.icmp_signed(">=", extents[0], zero)
    for extent in extents[1:]:
        valid = b.and_(valid, b.icmp_signed(">=", extent, zero))
    em.check(valid, inst, "negative-extent", extents, rank=len(extents))


def _byte_size(em: FunctionEmitter, element: ScalarType, extents: list[ir.Value]) -> tuple[ir.Value, ir.Value]:
    """Bytes of an array of `extents` (non-negative) elements, and whether computing them overflowed."""
    b = em.builder
    size: ir.Value = ir.Constant(I64, element_size(element))
    overflow: ir.Value = ir.Constant(I1, 0)
    for extent in extents:
        product = b.smul_with_overflow(size, extent)
        size, overflow = b.extract_value(product, 0), b.or_(overflow, b.extract_value(product, 1))
    return size, overflow


def _allocation_details(alloc: Instruction, extents: list[ir.Value]) -> dict[str, object]:
    """What an out-of-memory site of `alloc` names: the shape's rank, the element type and its size."""
    element = alloc.type.element  # type: ignore[attr-defined]
    return {"rank": len(extents), "element": str(element), "itemsize": element_size(element)}


def _lower_alloc(em: FunctionEmitter, inst: Instruction) -> ir.Value | None:
    """A local array: checked extents, one malloc (calloc when `zeroed`) chained for the frees at exit. A
    growable one is stored in its descriptor, which its uses read (`FunctionEmitter.operand`)."""
    b = em.builder
    extents = em.operands(inst)
    _check_extents(em, inst, extents)
    if not inst.uses:  # kept by the optimizer for its checks only (`optimize/dead_code_elimination.py`)
        _, overflow = _byte_size(em, inst.type.element, extents)  # type: ignore[attr-defined]
        em.check(b.not_(overflow), inst, "out-of-memory", extents, **_allocation_details(inst, extents))
        return None
    array = em.make_array(inst.type, [allocate_local(em, inst, inst, extents), *extents])  # type: ignore[arg-type]
    descriptor = em.descriptors.get(inst)
    if descriptor is None:
        return array
    b.store(array, descriptor)
    return None


def allocate_local(em: FunctionEmitter, inst: Instruction, alloc: Instruction, extents: list[ir.Value],
                   zeroed: bool = False) -> ir.Value:
    """The data pointer of a new block for `extents` (non-negative) elements of `alloc`'s array, allocated
    as `alloc` says (calloc when `zeroed`, or when `zeroed` is passed) and chained for the frees at exit;
    out of memory fails `inst`."""
    b = em.builder
    element = alloc.type.element  # type: ignore[attr-defined]
    size, overflow = _byte_size(em, element, extents)
    total = b.add(size, ir.Constant(I64, _ALLOC_HEADER))
    arena = is_arena(alloc)  # its block is kept between calls, not chained (`llvm_arena_cache.py`)
    if arena:
        block = em.arena_cache.take(b, total)
    else:  # a large block from the module's pool (`llvm_block_pool.py`)
        block = block_pool.take(em.module, b, total, zeroed or "zeroed" in alloc.flags)
    allocated = b.and_(b.not_(overflow), b.icmp_unsigned("!=", block, ir.Constant(POINTER, None)))
    em.check(allocated, inst, "out-of-memory", extents, **_allocation_details(alloc, extents))
    assert em.alloc_head is not None
    if not arena:
        b.store(b.load(em.alloc_head, typ=POINTER), b.bitcast(block, ir.PointerType(POINTER)))
        b.store(block, em.alloc_head)
    return b.bitcast(b.gep(block, [ir.Constant(I64, _ALLOC_HEADER)], inbounds=True, source_etype=I8),
                     ir.PointerType(storage_type(element)))


_ALLOC_HEADER = block_pool.HEADER
"""Bytes before a local array's data: the link to the previous block, then the block's size in bytes
(`llvm_block_pool.py`; 16 keeps the data 16-aligned)."""


def _lower_view(em: FunctionEmitter, inst: Instruction) -> ir.Value:
    """A local array in the arena's words from the offset on: checked extents, a check that its bytes fit
    (they do, as `place_in_arena` sizes the arena, unless the size overflowed: then it fails as the alloc's
    malloc would), a memset when `zeroed`. No allocation: the arena is the call's one block."""
    b = em.builder
    *extents, arena, offset = em.operands(inst)
    _check_extents(em, inst, extents)
    element = inst.type.element  # type: ignore[attr-defined]
    size, overflow = _byte_size(em, element, extents)
    room = b.mul(b.sub(b.extract_value(arena, 1), offset), ir.Constant(I64, 8))
    fits = b.and_(b.not_(overflow), b.icmp_signed("<=", size, room))
    em.check(fits, inst, "out-of-memory", extents, **_allocation_details(inst, extents))
    words = b.gep(b.extract_value(arena, 0), [offset], inbounds=True, source_etype=I64)
    if "zeroed" in inst.flags:
        memset = em.module.declare("llvm.memset.p0i8.i64", ir.FunctionType(ir.VoidType(), [POINTER, I8, I64, I1]))
        b.call(memset, [b.bitcast(words, POINTER), ir.Constant(I8, 0), size, ir.Constant(I1, 0)])
    return em.make_array(inst.type, [b.bitcast(words, ir.PointerType(storage_type(element))), *extents])  # type: ignore[arg-type]


def _lower_grow(em: FunctionEmitter, inst: Instruction) -> None:
    """`grow %t, %n`: when n exceeds the capacity, %t's block is reallocated to max(n, 2 * capacity)
    elements and replaces the old one in %t's descriptor and in the chain of local arrays (the link that
    pointed at the old block, found before the realloc, points at the new one). A realloc keeps the pages
    already written (glibc moves a large block with mremap, without a copy), so a tape that grows to m
    elements touches m elements' memory, not the sum of every block it outgrew. A failed realloc leaves the
    old block in the chain, freed at the exit. A capacity of 2**62 or more would wrap when doubled: n, which
    exceeds it, is taken instead."""
    b = em.builder
    alloc, count = inst.operands
    assert isinstance(alloc, Instruction)
    element = alloc.type.element  # type: ignore[attr-defined]
    old = em.operand(alloc)
    data, capacity = b.extract_value(old, 0), b.extract_value(old, 1)
    wanted = em.operand(count)
    grow, done = em.llvm_fn.append_basic_block("grow"), em.llvm_fn.append_basic_block("grow.done")
    branch = b.cbranch(b.icmp_signed(">", wanted, capacity), grow, done)
    branch.set_weights([1, 1 << 10])
    b.position_at_end(grow)
    doubled = b.shl(capacity, ir.Constant(I64, 1))
    new_capacity = b.select(b.icmp_signed(">", wanted, doubled), wanted, doubled)
    old_block = b.gep(b.bitcast(data, POINTER), [ir.Constant(I64, -_ALLOC_HEADER)], inbounds=True, source_etype=I8)
    link = _chain_link_to(em, old_block)
    size, overflow = _byte_size(em, element, [new_capacity])
    realloc = em.module.declare("realloc", ir.FunctionType(POINTER, [POINTER, I64]))
    block = b.call(realloc, [old_block, b.add(size, ir.Constant(I64, _ALLOC_HEADER))])
    allocated = b.and_(b.not_(overflow), b.icmp_unsigned("!=", block, ir.Constant(POINTER, None)))
    em.check(allocated, inst, "out-of-memory", [new_capacity], **_allocation_details(alloc, [new_capacity]))
    b.store(block, link)
    b.store(b.add(size, ir.Constant(I64, _ALLOC_HEADER)), block_pool.size_word(b, block))
    new_data = b.bitcast(b.gep(block, [ir.Constant(I64, _ALLOC_HEADER)], inbounds=True, source_etype=I8),
                         ir.PointerType(storage_type(element)))
    if "zeroed" in alloc.flags:  # calloc zeroed the old block; the realloc leaves the new elements undefined
        memset = em.module.declare("llvm.memset.p0i8.i64", ir.FunctionType(ir.VoidType(), [POINTER, I8, I64, I1]))
        tail = b.bitcast(b.gep(new_data, [capacity], inbounds=True, source_etype=storage_type(element)), POINTER)
        kept = b.mul(capacity, ir.Constant(I64, element_size(element)))
        b.call(memset, [tail, ir.Constant(I8, 0), b.sub(size, kept), ir.Constant(I1, 0)])
    b.store(em.make_array(alloc.type, [new_data, new_capacity]), em.descriptors[alloc])  # type: ignore[arg-type]
    b.branch(done)
    b.position_at_end(done)


def _chain_link_to(em: FunctionEmitter, block: ir.Value) -> ir.Value:
    """The slot that holds `block` in the chain of local arrays: the chain's head, or the header of the block
    allocated after it (the chain runs newest first; `block` is in it, as its alloc put it there)."""
    b = em.builder
    assert em.alloc_head is not None
    entry = b.block
    walk, found = em.llvm_fn.append_basic_block("grow.find"), em.llvm_fn.append_basic_block("grow.found")
    b.branch(walk)
    b.position_at_end(walk)
    slot = b.phi(ir.PointerType(POINTER))
    slot.add_incoming(em.alloc_head, entry)
    held = b.load(slot, typ=POINTER)
    slot.add_incoming(b.bitcast(held, ir.PointerType(POINTER)), walk)
    b.cbranch(b.icmp_unsigned("==", held, block), found, walk)
    b.position_at_end(found)
    return slot


def _lower_call(em: FunctionEmitter, inst: Instruction) -> ir.Value | None:
    """A call of another kernel; a failure inside it leaves this function too."""
    b = em.builder
    args: list[ir.Value] = []
    for value in inst.operands:
        operand = em.operand(value)
        if value.type.is_array:
            args.extend(b.extract_value(operand, i) for i in range(1 + value.type.rank))  # type: ignore
        else:
            args.append(operand)
    result = b.call(em.module.functions[inst.callee], [*args, em.record])
    status = b.load(em.record_slot(0), typ=I64)
    resume = em.continuation("ret")
    branch = b.cbranch(b.icmp_signed("==", status, ir.Constant(I64, 0)), resume, em.error_exit())
    branch.set_weights([1 << 20, 1])
    b.position_at_end(resume)
    return None if inst.type.is_void else result


def _lower_assert(em: FunctionEmitter, inst: Instruction) -> None:
    em.check(em.operand(inst.operands[0]), inst, "assert", [], message=str(inst.attrs.get("message") or ""),
             error=str(inst.attrs.get("error", "AssertionError")))


def _lower_br(em: FunctionEmitter, inst: Instruction) -> None:
    em.builder.branch(em.blocks[inst.successors[0]])


def _lower_cbr(em: FunctionEmitter, inst: Instruction) -> None:
    if_true, if_false = inst.successors
    em.builder.cbranch(em.operand(inst.operands[0]), em.blocks[if_true], em.blocks[if_false])


def _lower_ret(em: FunctionEmitter, inst: Instruction) -> None:
    value = em.operand(inst.operands[0]) if inst.operands else None
    em.free_local_arrays()
    if value is None:
        em.builder.ret_void()
    else:
        em.builder.ret(value)


LOWERINGS: dict[Op, Lowering] = {
    Op.IADD: _binary("add"),
    Op.ISUB: _binary("sub"),
    Op.IMUL: _binary("mul"),
    Op.IFLOORDIV: _first(_integer_divmod),
    Op.IFLOORMOD: _second(_integer_divmod),
    Op.UDIV: _lower_udiv,
    Op.INEG: _lower_ineg,
    Op.IABS: _lower_iabs,
    Op.IMIN: _select_of("<", signed=True),
    Op.IMAX: _select_of(">", signed=True),
    Op.SHL: _lower_shift("shl"),
    Op.ASHR: _lower_shift("ashr"),
    Op.AND: _binary("and_"),
    Op.OR: _binary("or_"),
    Op.XOR: _binary("xor"),
    Op.FADD: _binary("fadd", fast=True),
    Op.FSUB: _binary("fsub", fast=True),
    Op.FMUL: _binary("fmul", fast=True),
    Op.FDIV: _binary("fdiv", fast=True),
    Op.FFLOORDIV: _first(_float_divmod),
    Op.FFLOORMOD: _second(_float_divmod),
    Op.FNEG: _lower_fneg,
    Op.FMIN: _select_of("<", signed=None),
    Op.FMAX: _select_of(">", signed=None),
    Op.SQRT: _exact_intrinsic("llvm.sqrt"),
    Op.FABS: _exact_intrinsic("llvm.fabs"),
    Op.FLOOR: _exact_intrinsic("llvm.floor"),
    Op.CEIL: _exact_intrinsic("llvm.ceil"),
    **{op: _libm(op.value) for op in (Op.EXP, Op.LOG, Op.LOG1P, Op.EXPM1, Op.SIN, Op.COS, Op.TAN, Op.TANH,
                                      Op.SINH, Op.COSH, Op.ASIN, Op.ACOS, Op.ATAN, Op.ATAN2, Op.ERF)},
    Op.SIGMOID: _lower_sigmoid,
    Op.POW: _lower_pow,
    Op.ICMP_EQ: _icmp("=="),
    Op.ICMP_NE: _icmp("!="),
    Op.ICMP_SLT: _icmp("<"),
    Op.ICMP_SLE: _icmp("<="),
    Op.ICMP_SGT: _icmp(">"),
    Op.ICMP_SGE: _icmp(">="),
    Op.FCMP_OEQ: _fcmp("==", ordered=True),
    Op.FCMP_UNE: _fcmp("!=", ordered=False),
    Op.FCMP_OLT: _fcmp("<", ordered=True),
    Op.FCMP_OLE: _fcmp("<=", ordered=True),
    Op.FCMP_OGT: _fcmp(">", ordered=True),
    Op.FCMP_OGE: _fcmp(">=", ordered=True),
    Op.SELECT: _lower_select,
    Op.SITOFP: _cast("sitofp"),
    Op.FPTOSI: _lower_fptosi,
    Op.FPEXT: _cast("fpext"),
    Op.FPTRUNC: _cast("fptrunc"),
    Op.SEXT: _cast("sext"),
    Op.TRUNC: _cast("trunc"),
    Op.ZEXT: _cast("zext"),
    Op.LOAD: _lower_load,
    Op.STORE: _lower_store,
    Op.ATOMIC_ADD: _lower_atomic_add,
    Op.DIM: _lower_dim,
    Op.ALLOC: _lower_alloc,
    Op.VIEW: _lower_view,
    Op.GROW: _lower_grow,
    Op.CALL: _lower_call,
    Op.ASSERT: _lower_assert,
    Op.BR: _lower_br,
    Op.CBR: _lower_cbr,
    Op.RET: _lower_ret,
}
"""How each op becomes LLVM IR; phis are made by the walk. A missing op is a CodegenError naming it."""

_unlowered = set(Op) - set(LOWERINGS) - {Op.PHI}
assert not _unlowered, f"ops without an LLVM lowering: {sorted(map(str, _unlowered))}"
