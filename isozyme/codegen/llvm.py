"""SSA to LLVM IR through `llvmlite.ir`: a walk over the blocks plus a lowering table keyed by op.

    program = emit_llvm(module, module["norm"], CodegenOptions(boundscheck=True), symbol_prefix="iz_1f2e_")
    program.ir_text        # textual LLVM IR, verified and optimized by the runtime (`runtime/llvm_jit.py`)

Per function, the walk creates every LLVM block first, then every phi, then the instructions of each
block in reverse post-order (so a definition is emitted before its uses) through `LOWERINGS`, and last the
phi incomings, from the LLVM block where each predecessor's terminator ended up (checks split blocks).
Unreachable blocks are not emitted.

Representation:
  - scalars are `i1 i32 i64 float double` in registers; in memory a boolean is one byte (`i8`, numpy's).
  - an array value is the struct `{element*, i64 extent_0, ..., i64 extent_r-1}`; functions take arrays
    flattened to the data pointer and the extents (`noalias` on the entry kernel's pointers: distinct
    array arguments never overlap, which the runtime checks at the call). Indexing is row-major.
  - every function takes a last parameter, the call's error record (`ERROR_RECORD`): `i64 status`
    then `PAYLOAD_WORDS` payload words. A failing check writes the site number (`error_sites.py`) and its
    payload there and returns; a caller checks the status after every call and passes failures up.
  - local arrays (`alloc`) are `malloc`/`calloc` blocks with a 16-byte header that chains them; every
    return and error exit frees the chain: they live until the kernel returns (DESIGN 1.2). After
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
unless `CodegenOptions.fastmath` asks for them. Bounds checks are emitted in checked mode only; the other
checks always (they cost a compare, and without them the hardware traps or the result is undefined).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llvmlite import ir

from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.error_sites import ErrorSite, register_site
from isozyme.ssa.cfg import reverse_post_order
from isozyme.ssa.flags import CHECKED, is_growable_alloc
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Module, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import ArrayType, ScalarType, Type

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
POINTER = ir.PointerType(I8)
RECORD_POINTER = ir.PointerType(I64)
"""The error record: `1 + PAYLOAD_WORDS` i64 words, the status (0: success, else the failing site's
number), then the payload words."""


class CodegenError(Exception):
    """The IR holds something the backend cannot emit (a function returning an array)."""


@dataclass
class LLVMProgram:
    """A module's LLVM IR and what the runtime needs to call it and to report its failures."""

    ir_text: str
    kernel_symbol: str
    """The entry kernel's internal function."""
    sites: list[ErrorSite] = field(default_factory=list)
    """The error sites, numbered from 1 in list order."""


def register_type(ty: Type) -> ir.Type:
    """The LLVM type of an SSA value of type `ty`."""
    if isinstance(ty, ArrayType):
        return ir.LiteralStructType([ir.PointerType(storage_type(ty.element)), *([I64] * ty.rank)])
    if isinstance(ty, ScalarType):
        return _SCALARS[str(ty)]
    raise CodegenError(f"no LLVM type for {ty}")


def storage_type(ty: ScalarType) -> ir.Type:
    """The LLVM type of one array element of `ty` in memory (a boolean is a byte, as in numpy)."""
    return I8 if ty.is_bool else _SCALARS[str(ty)]


def element_size(ty: ScalarType) -> int:
    """Bytes of one element of `ty` in memory."""
    return 1 if ty.is_bool else ty.bits // 8


_SCALARS: dict[str, ir.Type] = {"i1": I1, "i32": I32, "i64": I64, "f32": F32, "f64": F64}


def flat_parameter_types(ty: Type) -> list[ir.Type]:
    """The LLVM parameters one SSA parameter becomes: an array is its data pointer and its extents."""
    if isinstance(ty, ArrayType):
        return [ir.PointerType(storage_type(ty.element)), *([I64] * ty.rank)]
    return [register_type(ty)]


# --- the module ------------------------------------------------------------------------------------


class ModuleEmitter:
    """Emits the functions of one SSA module into one LLVM module; holds what they share."""

    def __init__(self, module: Module, options: CodegenOptions, symbol_prefix: str) -> None:
        self.ssa = module
        self.options = options
        self.prefix = symbol_prefix
        self.llvm = ir.Module(name=symbol_prefix.rstrip("_") or "isozyme")
        self.sites: list[ErrorSite] = []
        self.functions: dict[Function, ir.Function] = {}
        self._declared: dict[str, ir.Function] = {}

    def symbol(self, function: Function) -> str:
        return f"{self.prefix}{function.name}"

    def declare_all(self, entry: Function) -> None:
        for function in self.ssa:
            if function.return_type.is_array:
                raise CodegenError(f"@{function.name} returns an array, which compiled code cannot do")
            params = [t for arg in function.args for t in flat_parameter_types(arg.type)]
            return_type = ir.VoidType() if function.return_type.is_void else register_type(function.return_type)
            fn_type = ir.FunctionType(return_type, [*params, RECORD_POINTER])
            llvm_fn = ir.Function(self.llvm, fn_type, self.symbol(function))
            llvm_fn.linkage = "internal"
            if function is entry:  # distinct array arguments do not overlap (checked at the call)
                for arg in llvm_fn.args:
                    if isinstance(arg.type, ir.PointerType):
                        arg.add_attribute("noalias")
            self.functions[function] = llvm_fn

    def libm(self, name: str, arity: int = 1) -> ir.Function:
        """A C library function `double name(double, ...)`."""
        return self.declare(name, ir.FunctionType(F64, [F64] * arity))

    def intrinsic(self, name: str, ty: ir.Type, arity: int = 1) -> ir.Function:
        """The LLVM intrinsic `name` on `ty` (e.g. `llvm.floor.f64`), taking `arity` operands of `ty`."""
        suffix = "f32" if ty == F32 else "f64"
        return self.declare(f"{name}.{suffix}", ir.FunctionType(ty, [ty] * arity))

    def declare(self, name: str, fn_type: ir.FunctionType) -> ir.Function:
        if name not in self._declared:
            self._declared[name] = ir.Function(self.llvm, fn_type, name)
        return self._declared[name]

    def free_chain(self) -> ir.Function:
        """`void free_chain(ptr head)`: free a chain of local arrays (each block's header links the next)."""
        name = f"{self.prefix}free_chain"
        if name in self._declared:
            return self._declared[name]
        fn = self.declare(name, ir.FunctionType(ir.VoidType(), [POINTER]))
        fn.linkage = "internal"
        free = self.declare("free", ir.FunctionType(ir.VoidType(), [POINTER]))
        entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
        b = ir.IRBuilder(entry)
        b.cbranch(b.icmp_unsigned("==", fn.args[0], ir.Constant(POINTER, None)), done, loop)
        b.position_at_end(loop)
        head = b.phi(POINTER)
        head.add_incoming(fn.args[0], entry)
        following = b.load(b.bitcast(head, ir.PointerType(POINTER)), typ=POINTER)
        b.call(free, [head])
        head.add_incoming(following, loop)
        b.cbranch(b.icmp_unsigned("==", following, ir.Constant(POINTER, None)), done, loop)
        b.position_at_end(done)
        b.ret_void()
        return fn


def emit_llvm(module: Module, entry: Function, options: CodegenOptions, symbol_prefix: str,
              writable: frozenset[int] = frozenset()) -> LLVMProgram:
    """LLVM IR for `module`, plus the C entry points of `entry` (`llvm_entry.py`) for the runtime.

    `writable`: positions of the entry's array parameters that the kernel may write (the fast entry
    rejects read-only numpy arrays for those)."""
    from isozyme.codegen.llvm_entry import emit_entry_points

    emitter = ModuleEmitter(module, options, symbol_prefix)
    emitter.declare_all(entry)
    for function in module:
        FunctionEmitter(emitter, function).emit()
    emit_entry_points(emitter, entry, writable)
    return LLVMProgram(str(emitter.llvm), emitter.symbol(entry), emitter.sites)


# --- one function ----------------------------------------------------------------------------------


class FunctionEmitter:
    """The LLVM body of one SSA function (module docstring)."""

    def __init__(self, module: ModuleEmitter, function: Function) -> None:
        self.module = module
        self.function = function
        self.llvm_fn = module.functions[function]
        self.record = self.llvm_fn.args[-1]
        self.fmf = ("fast",) if module.options.fastmath else ()
        self.values: dict[Value, ir.Value] = {}
        self.blocks: dict[Block, ir.Block] = {}
        self.exits: dict[Block, ir.Block] = {}
        self.alloc_head: ir.Value | None = None
        self.descriptors: dict[Value, ir.Value] = {}
        """Each growable alloc's descriptor: a stack slot holding its array value (data, capacity)."""
        self._error_exit: ir.Block | None = None
        self.prologue = self.llvm_fn.append_basic_block("prologue")
        self.builder = ir.IRBuilder(self.prologue)

    def emit(self) -> None:
        order = reverse_post_order(self.function)
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
        for block in order:
            self.builder.position_at_start(self.blocks[block])
            for phi in block.phis:
                self.values[phi] = self.builder.phi(register_type(phi.type), name=phi.name or "")
        for block in order:
            self.builder.position_at_end(self.blocks[block])
            for inst in block.instructions[len(block.phis):]:
                self._emit_instruction(inst)
            self.exits[block] = self.builder.block
        for block in order:
            for phi in block.phis:
                for pred, value in phi.incoming:
                    if pred in self.exits:  # an unreachable predecessor has no LLVM block
                        self.values[phi].add_incoming(self.operand(value), self.exits[pred])

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
        lowering = LOWERINGS.get(inst.op)
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

    def check(self, ok: ir.Value, inst: Instruction, kind: str, payload: list[ir.Value],
              **details: object) -> None:
        """Continue when `ok`; otherwise record the failure of a new error site and leave the function."""
        site = register_site(self.module.sites, ErrorSite(kind, str(inst.loc) if inst.loc else None,
                                                          str(inst.op), details))
        failed = self.llvm_fn.append_basic_block(f"{kind}.failed")
        resume = self.llvm_fn.append_basic_block(f"{self.builder.block.name}.ok")
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
        if self.alloc_head is not None:
            self.builder.call(self.module.free_chain(), [self.builder.load(self.alloc_head, typ=POINTER)])

    # --- arrays ---

    def element_address(self, inst: Instruction, array: Value, indices: list[Value]) -> ir.Value:
        """The address of `array[indices]` (row-major), after the bounds check in checked mode or of an access
        flagged `checked`."""
        b = self.builder
        struct = self.operand(array)
        extents = [b.extract_value(struct, 1 + axis) for axis in range(len(indices))]
        index_values = [self.operand(i) for i in indices]
        if self.module.options.boundscheck or CHECKED in inst.flags:
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


# --- the lowering table ----------------------------------------------------------------------------

Lowering = Callable[[FunctionEmitter, Instruction], "ir.Value | None"]


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
    return em.builder.icmp_unsigned("!=", value, ir.Constant(I8, 0)) if element.is_bool else value


def _stored(em: FunctionEmitter, value: Value) -> ir.Value:
    stored = em.operand(value)
    return em.builder.zext(stored, I8) if stored.type == I1 else stored


def _lower_store(em: FunctionEmitter, inst: Instruction) -> None:
    value, array, *indices = inst.operands
    em.builder.store(_stored(em, value), em.element_address(inst, array, list(indices)))


def _lower_atomic_add(em: FunctionEmitter, inst: Instruction) -> None:
    """Compiled CPU code runs one thread, so the atomic add is a plain read-modify-write."""
    b = em.builder
    value, array, *indices = inst.operands
    address = em.element_address(inst, array, list(indices))
    element = storage_type(array.type.element)  # type: ignore[attr-defined]
    old = b.load(address, typ=element)
    add = b.fadd(old, em.operand(value)) if value.type.is_float else b.add(old, em.operand(value))
    b.store(add, address)


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
    array = em.make_array(inst.type, [_allocate_local(em, inst, inst, extents), *extents])  # type: ignore[arg-type]
    descriptor = em.descriptors.get(inst)
    if descriptor is None:
        return array
    b.store(array, descriptor)
    return None


def _allocate_local(em: FunctionEmitter, inst: Instruction, alloc: Instruction, extents: list[ir.Value]) -> ir.Value:
    """The data pointer of a new block for `extents` (non-negative) elements of `alloc`'s array, allocated
    as `alloc` says (calloc when `zeroed`) and chained for the frees at exit; out of memory fails `inst`."""
    b = em.builder
    element = alloc.type.element  # type: ignore[attr-defined]
    size, overflow = _byte_size(em, element, extents)
    total = b.add(size, ir.Constant(I64, _ALLOC_HEADER))
    if "zeroed" in alloc.flags:
        calloc = em.module.declare("calloc", ir.FunctionType(POINTER, [I64, I64]))
        block = b.call(calloc, [ir.Constant(I64, 1), total])
    else:
        block = b.call(em.module.declare("malloc", ir.FunctionType(POINTER, [I64])), [total])
    allocated = b.and_(b.not_(overflow), b.icmp_unsigned("!=", block, ir.Constant(POINTER, None)))
    em.check(allocated, inst, "out-of-memory", extents, **_allocation_details(alloc, extents))
    assert em.alloc_head is not None
    b.store(b.load(em.alloc_head, typ=POINTER), b.bitcast(block, ir.PointerType(POINTER)))
    b.store(block, em.alloc_head)
    return b.bitcast(b.gep(block, [ir.Constant(I64, _ALLOC_HEADER)], inbounds=True, source_etype=I8),
                     ir.PointerType(storage_type(element)))


_ALLOC_HEADER = 16
"""Bytes before a local array's data: the link to the previous block (16 keeps the data 16-aligned)."""


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
    """`grow %t, %n`: when n exceeds the capacity, a new chained block of max(n, 2 * capacity) elements
    takes a copy of the old ones and replaces the old block in %t's descriptor. The old block stays in the
    chain until the exit, so a grow frees nothing (the blocks sum to less than twice the last one plus the
    first). A capacity of 2**62 or more would wrap when doubled: n, which exceeds it, is taken instead."""
    b = em.builder
    alloc, count = inst.operands
    assert isinstance(alloc, Instruction)
    old = em.operand(alloc)
    data, capacity = b.extract_value(old, 0), b.extract_value(old, 1)
    wanted = em.operand(count)
    grow, done = em.llvm_fn.append_basic_block("grow"), em.llvm_fn.append_basic_block("grow.done")
    branch = b.cbranch(b.icmp_signed(">", wanted, capacity), grow, done)
    branch.set_weights([1, 1 << 10])
    b.position_at_end(grow)
    doubled = b.shl(capacity, ir.Constant(I64, 1))
    new_capacity = b.select(b.icmp_signed(">", wanted, doubled), wanted, doubled)
    new_data = _allocate_local(em, inst, alloc, [new_capacity])
    copied = b.mul(capacity, ir.Constant(I64, element_size(alloc.type.element)))  # type: ignore[attr-defined]
    memcpy = em.module.declare("llvm.memcpy.p0i8.p0i8.i64", ir.FunctionType(ir.VoidType(), [POINTER, POINTER, I64, I1]))
    b.call(memcpy, [b.bitcast(new_data, POINTER), b.bitcast(data, POINTER), copied, ir.Constant(I1, 0)])
    b.store(em.make_array(alloc.type, [new_data, new_capacity]), em.descriptors[alloc])  # type: ignore[arg-type]
    b.branch(done)
    b.position_at_end(done)


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
    resume = em.llvm_fn.append_basic_block(f"{b.block.name}.ret")
    branch = b.cbranch(b.icmp_signed("==", status, ir.Constant(I64, 0)), resume, em.error_exit())
    branch.set_weights([1 << 20, 1])
    b.position_at_end(resume)
    return None if inst.type.is_void else result


def _lower_assert(em: FunctionEmitter, inst: Instruction) -> None:
    em.check(em.operand(inst.operands[0]), inst, "assert", [], message=str(inst.attrs.get("message") or ""))


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

