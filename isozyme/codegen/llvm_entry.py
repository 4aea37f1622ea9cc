"""The C entry points of a compiled kernel, which the runtime calls through ctypes.

Two external functions wrap the entry kernel's internal function (`llvm_module.py`):

    <ret> {kernel}__raw(record*, for each parameter: an array as (data, extent_0, ...), a scalar as itself)
    <ret> {kernel}__fast(record*, constants*, for each parameter: an array as its numpy object, a scalar)

A boolean is a byte in C (ctypes `c_bool`), also as the return value. `__raw` runs the kernel on checked
arguments. `__fast` is the per-call fast path: it reads each numpy array's data pointer and shape straight
from the `PyArrayObject` (the `ARRAY_OBJECT` field offsets, which the runtime verifies against the running
numpy before it uses this entry) and accepts the call only when every array is an exact `numpy.ndarray`
with the parameter's canonical dtype object, rank and flags (C-contiguous, aligned, writeable when the
kernel may write it) and no two arrays overlap. Otherwise it writes `NEEDS_CHECKED_CALL` into the record's
status and returns without running anything: the runtime then checks the arguments in Python (raising
the error that names the parameter, or accepting e.g. an array subclass) and calls `__raw`. So the fast
path only ever decides "certainly valid", never an error.

With "ftz" in the kernel's `fastmath=` (`abi.FP_MODE_FLAGS`), both set the x86-64 MXCSR's FTZ and DAZ bits
around the kernel's call and put the caller's MXCSR back after it (the thread pool's threads take the
caller's MXCSR for the tasks of a call: `llvm_thread_pool.py`).

`constants` is a table the runtime builds once per process: `ndarray`'s type object, then the canonical
dtype object of each scalar type in `DTYPE_SLOTS` order (process addresses, so they are not baked into
object code that the disk cache keeps).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from isozyme.codegen.abi import ALIGNED, ARRAY_OBJECT, C_CONTIGUOUS, DTYPE_SLOTS, NEEDS_CHECKED_CALL, WRITEABLE, X86_64
from isozyme.codegen.llvm_module import ModuleEmitter
from isozyme.codegen.llvm_types import I1, I8, I32, I64, POINTER, RECORD_POINTER, element_size, register_type
from isozyme.ssa.ir import Argument, Function
from isozyme.ssa.types import ArrayType, ScalarType, Type

MXCSR_FLUSH = 0x8040
"""MXCSR's FTZ (bit 15: subnormal results become zero) and DAZ (bit 6: subnormal operands read as zero)."""


def c_type(ty: Type) -> ir.Type:
    """The C ABI type of a scalar parameter or return value (a boolean is a byte)."""
    return I8 if ty.is_bool else register_type(ty)


def emit_entry_points(emitter: ModuleEmitter, entry: Function, writable: frozenset[int]) -> None:
    kernel = emitter.functions[entry]
    record_type = RECORD_POINTER
    return_type = ir.VoidType() if entry.return_type.is_void else c_type(entry.return_type)
    raw_params: list[ir.Type] = []
    for arg in entry.args:
        raw_params += [POINTER, *([I64] * arg.type.rank)] if isinstance(arg.type, ArrayType) else [c_type(arg.type)]
    raw = ir.Function(emitter.llvm, ir.FunctionType(return_type, [record_type, *raw_params]),
                      f"{emitter.symbol(entry)}__raw")
    _name_arguments(raw, entry, ["record"], lambda arg: [arg.name, *(f"{arg.name}.extent{k}" for k in
                                                                   range(arg.type.rank))])
    builder = ir.IRBuilder(raw.append_basic_block("entry"))
    _call_kernel(emitter, builder, kernel, entry, raw.args[0], list(raw.args[1:]), return_type)

    fast_params = [POINTER if isinstance(arg.type, ArrayType) else c_type(arg.type) for arg in entry.args]
    fast = ir.Function(emitter.llvm, ir.FunctionType(return_type, [record_type, POINTER, *fast_params]),
                       f"{emitter.symbol(entry)}__fast")
    _name_arguments(fast, entry, ["record", "constants"], lambda arg: [f"{arg.name}.object"])
    _FastEntry(emitter, fast, entry, writable, return_type).emit(kernel)


def _name_arguments(fn: ir.Function, entry: Function, leading: list[str],
                    array_names: Callable[[Argument], list[str]]) -> None:
    """Readable LLVM argument names: the record (and table), then the kernel's parameter names."""
    names = list(leading)
    for arg in entry.args:
        names += array_names(arg) if isinstance(arg.type, ArrayType) else [arg.name]
    for llvm_arg, name in zip(fn.args, names):
        llvm_arg.name = name or "arg"


def _call_kernel(emitter: ModuleEmitter, b: ir.IRBuilder, kernel: ir.Function, entry: Function, record: ir.Value,
                 flat_args: list[ir.Value], return_type: ir.Type) -> None:
    """Call the kernel on C-typed flat arguments (in the floating-point mode of its options) and return its
    result as a C value."""
    args: list[ir.Value] = []
    for value, param in zip(flat_args, kernel.args):
        if isinstance(param.type, ir.PointerType) and value.type != param.type:
            value = b.bitcast(value, param.type)
        elif param.type == I1:
            value = b.icmp_unsigned("!=", value, ir.Constant(I8, 0))
        args.append(value)
    saved = _enter_fp_mode(emitter, b)
    result = b.call(kernel, [*args, record])
    if saved is not None:
        b.call(_mxcsr_intrinsic(emitter, "ldmxcsr"), [saved])
    if isinstance(return_type, ir.VoidType):
        b.ret_void()
    else:
        b.ret(b.zext(result, I8) if result.type == I1 else result)


def _enter_fp_mode(emitter: ModuleEmitter, b: ir.IRBuilder) -> ir.Value | None:
    """With "ftz" on x86-64: save the caller's MXCSR in a stack slot (returned), then set FTZ and DAZ."""
    if "ftz" not in emitter.options.fastmath or not X86_64:
        return None
    saved, flushing = b.alloca(I32, name="mxcsr.caller"), b.alloca(I32, name="mxcsr.flush")
    b.call(_mxcsr_intrinsic(emitter, "stmxcsr"), [b.bitcast(saved, POINTER)])
    b.store(b.or_(b.load(saved), ir.Constant(I32, MXCSR_FLUSH)), flushing)
    b.call(_mxcsr_intrinsic(emitter, "ldmxcsr"), [b.bitcast(flushing, POINTER)])
    return b.bitcast(saved, POINTER)


def _mxcsr_intrinsic(emitter: ModuleEmitter, name: str) -> ir.Function:
    return emitter.declare(f"llvm.x86.sse.{name}", ir.FunctionType(ir.VoidType(), [POINTER]))


class _FastEntry:
    """The body of `__fast` (module docstring)."""

    def __init__(self, emitter: ModuleEmitter, fn: ir.Function, entry: Function, writable: frozenset[int],
                 return_type: ir.Type) -> None:
        self.emitter = emitter
        self.fn, self.entry, self.writable, self.return_type = fn, entry, writable, return_type
        self.record, self.constants = fn.args[0], fn.args[1]
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.slow = fn.append_basic_block("needs.checked.call")

    def emit(self, kernel: ir.Function) -> None:
        flat: list[ir.Value] = []
        arrays: list[tuple[ir.Value, ir.Value]] = []  # (first byte, end byte) of every array
        for index, (arg, value) in enumerate(zip(self.entry.args, self.fn.args[2:])):
            if isinstance(arg.type, ArrayType):
                data, extents = self._unpack(value, arg.type, index in self.writable)
                flat += [data, *extents]
                arrays.append(self._byte_range(data, extents, arg.type.element))
            else:
                flat.append(value)
        for i, (start_a, end_a) in enumerate(arrays):
            for start_b, end_b in arrays[i + 1:]:
                overlap = self.b.and_(self.b.icmp_unsigned("<", start_a, end_b),
                                      self.b.icmp_unsigned("<", start_b, end_a))
                self._continue_if(self.b.not_(overlap), "disjoint")
        _call_kernel(self.emitter, self.b, kernel, self.entry, self.record, flat, self.return_type)
        self.b.position_at_end(self.slow)
        self.b.store(ir.Constant(I64, NEEDS_CHECKED_CALL), self.record)
        if isinstance(self.return_type, ir.VoidType):
            self.b.ret_void()
        else:
            self.b.ret(ir.Constant(self.return_type, ir.Undefined))

    def _continue_if(self, condition: ir.Value, name: str) -> None:
        resume = self.fn.append_basic_block(name)
        self.b.cbranch(condition, resume, self.slow)
        self.b.position_at_end(resume)

    def _field(self, obj: ir.Value, name: str, ty: ir.Type) -> ir.Value:
        address = self.b.gep(obj, [ir.Constant(I64, ARRAY_OBJECT[name])], inbounds=True, source_etype=I8)
        return self.b.load(self.b.bitcast(address, ir.PointerType(ty)), typ=ty)

    def _constant(self, slot: int) -> ir.Value:
        address = self.b.gep(self.constants, [ir.Constant(I64, 8 * slot)], inbounds=True, source_etype=I8)
        return self.b.load(self.b.bitcast(address, ir.PointerType(POINTER)), typ=POINTER)

    def _unpack(self, obj: ir.Value, ty: ArrayType, writable: bool) -> tuple[ir.Value, list[ir.Value]]:
        """Data pointer and extents of a numpy array object, after the checks of the module docstring."""
        b = self.b
        is_ndarray = b.icmp_unsigned("==", self._field(obj, "type", POINTER), self._constant(0))
        self._continue_if(is_ndarray, "is.ndarray")  # only then are the other fields there to read
        required = C_CONTIGUOUS | ALIGNED | (WRITEABLE if writable else 0)
        flags = self._field(obj, "flags", I32)
        valid = b.and_(b.icmp_unsigned("==", self._field(obj, "ndim", I32), ir.Constant(I32, ty.rank)),
                       b.icmp_unsigned("==", b.and_(flags, ir.Constant(I32, required)), ir.Constant(I32, required)))
        dtype = self._constant(1 + DTYPE_SLOTS.index(str(ty.element)))
        valid = b.and_(valid, b.icmp_unsigned("==", self._field(obj, "descr", POINTER), dtype))
        self._continue_if(valid, "valid.array")
        shape = self._field(obj, "shape", ir.PointerType(I64))
        extents = [b.load(b.gep(shape, [ir.Constant(I64, axis)], inbounds=True, source_etype=I64), typ=I64)
                   for axis in range(ty.rank)]
        return self._field(obj, "data", POINTER), extents

    def _byte_range(self, data: ir.Value, extents: list[ir.Value], element: ScalarType) -> tuple[ir.Value, ir.Value]:
        """[first byte, end byte) of a C-contiguous array; empty (end = start) when it has no elements."""
        b = self.b
        size: ir.Value = ir.Constant(I64, element_size(element))
        for extent in extents:
            size = b.mul(size, extent)
        start = b.ptrtoint(data, I64)
        return start, b.add(start, size)

