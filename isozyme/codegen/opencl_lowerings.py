"""How each SSA op becomes C-style source: `LOWERINGS`, a table keyed by op, which the renderer of a
function (`opencl_function.py`) applies to every instruction (every op but `phi`, which `out_of_ssa`
removes, has an entry).

Local arrays: a local array of a called function or a parallel loop (constant extents) is a private C
array, its pointer `__private`; the entry function's local arrays are global buffers (`opencl_serial.py`),
and so are those of run-time extents and growable ones (tapes) in called functions (the device heap). A
`view` is a pointer into its arena (an alloc like the others) in the arena's address space.

Semantics are those of `ssa/semantics.py`, as in the LLVM backend (`codegen/llvm_lowerings.py`): Python floor
division and modulo (helpers in the prelude), wrapping integer arithmetic (done on unsigned types, since
signed overflow is undefined in C), Python's min/max, `pow(x, 2.0)` = `x*x`, `pow(x, 3.0)` = `(x*x)*x`,
f32 transcendental functions evaluated in double and rounded once, no floating-point contraction.
"""

from __future__ import annotations

import math

from isozyme.codegen import opencl_control
from isozyme.codegen.abi import CodegenError
from isozyme.codegen.opencl_function import FunctionRenderer, Lowering
from isozyme.ssa.flags import CHECKED
from isozyme.ssa.ir import Block, Constant, Instruction, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import LARGEST_SIZE, ArrayType, ScalarType, Type


def _ops(r: FunctionRenderer, inst: Instruction) -> list[str]:
    return [r.name(v) for v in inst.operands]


def _unsigned(r: FunctionRenderer, ty: Type) -> str:
    return r.lang.unsigned_types[str(ty)]


def _wrapping(symbol: str) -> Lowering:
    """Integer arithmetic that wraps: computed on the unsigned type (signed overflow is undefined in C)."""
    def lower(r: FunctionRenderer, inst: Instruction) -> str:
        a, b = _ops(r, inst)
        u = _unsigned(r, inst.type)
        return f"({r.lang.scalar(inst.type)})(({u}){a} {symbol} ({u}){b})"
    return lower


def _infix(symbol: str) -> Lowering:
    def lower(r: FunctionRenderer, inst: Instruction) -> str:
        a, b = _ops(r, inst)
        return f"({a} {symbol} {b})"
    return lower


def _int_divmod(helper: str) -> Lowering:
    def lower(r: FunctionRenderer, inst: Instruction) -> str:
        a, b = _ops(r, inst)
        r.check(f"{b} != 0", inst, "zero-division", [])
        return f"iz_{helper}_{r.lang.scalar(inst.type)}({a}, {b})"
    return lower


def _lower_udiv(r: FunctionRenderer, inst: Instruction) -> str:
    """Division of the operands as unsigned, after the check that raises ZeroDivisionError."""
    r.check(f"{r.name(inst.operands[1])} != 0", inst, "zero-division", [])
    return _wrapping("/")(r, inst)


def _float_helper(helper: str) -> Lowering:
    def lower(r: FunctionRenderer, inst: Instruction) -> str:
        a, b = _ops(r, inst)
        return f"iz_{helper}_{r.lang.scalar(inst.type)}({a}, {b})"
    return lower


def _lower_ineg(r: FunctionRenderer, inst: Instruction) -> str:
    (a,) = _ops(r, inst)
    u = _unsigned(r, inst.type)
    return f"({r.lang.scalar(inst.type)})(({u})0 - ({u}){a})"


def _lower_iabs(r: FunctionRenderer, inst: Instruction) -> str:
    (a,) = _ops(r, inst)
    return f"({a} < 0 ? {_lower_ineg(r, inst)} : {a})"


def _python_min(r: FunctionRenderer, inst: Instruction) -> str:
    a, b = _ops(r, inst)
    return f"({b} < {a} ? {b} : {a})"  # exactly Python's min(a, b)


def _python_max(r: FunctionRenderer, inst: Instruction) -> str:
    a, b = _ops(r, inst)
    return f"({b} > {a} ? {b} : {a})"  # exactly Python's max(a, b)


def _lower_shift(symbol: str) -> Lowering:
    def lower(r: FunctionRenderer, inst: Instruction) -> str:
        a, amount = _ops(r, inst)
        bits = inst.type.bits  # type: ignore[attr-defined]
        u = _unsigned(r, inst.type)
        r.check(f"({u}){amount} < {bits}", inst, "shift", [amount], bits=bits, type=str(inst.type))
        if symbol == "<<":
            return f"({r.lang.scalar(inst.type)})(({u}){a} << {amount})"
        return f"({a} >> {amount})"  # arithmetic on signed types in OpenCL C
    return lower


def _exact(function: str) -> Lowering:
    """A function exact in both precisions, in the operand's own type."""
    def lower(r: FunctionRenderer, inst: Instruction) -> str:
        return f"{function}({', '.join(_ops(r, inst))})"
    return lower


def _libm(function: str) -> Lowering:
    """A math function in double; f32 operands are widened and the result rounded once (semantics.py)."""
    def lower(r: FunctionRenderer, inst: Instruction) -> str:
        args = _ops(r, inst)
        if inst.type.bits == 32:  # type: ignore[attr-defined]
            return f"(float){function}({', '.join(f'(double){a}' for a in args)})"
        return f"{function}({', '.join(args)})"
    return lower


def _lower_pow(r: FunctionRenderer, inst: Instruction) -> str:
    """`pow(x, 2.0)` is `x*x`, `pow(x, 3.0)` is `(x*x)*x` (semantics.py); other exponents call pow."""
    x, y = _ops(r, inst)
    exponent = inst.operands[1]
    square, cube = f"({x} * {x})", f"(({x} * {x}) * {x})"
    general = _libm("pow")(r, inst)
    if isinstance(exponent, Constant):
        return {2.0: square, 3.0: cube}.get(float(exponent.value), general)  # type: ignore[return-value]
    return f"({y} == 2 ? {square} : ({y} == 3 ? {cube} : {general}))"


def _lower_fneg(r: FunctionRenderer, inst: Instruction) -> str:
    return f"(-{_ops(r, inst)[0]})"


def _lower_sigmoid(r: FunctionRenderer, inst: Instruction) -> str:
    """`1.0 / (1.0 + exp(-x))` as exactly those ops, each in the operand's type (semantics.py); the
    exp is `_libm`'s (computed in double, rounded once for f32)."""
    x = _ops(r, inst)[0]
    one = r.lang.float_literal(1.0, inst.type)
    exp = f"(float)exp((double)(-{x}))" if inst.type.bits == 32 else f"exp(-{x})"  # type: ignore[attr-defined]
    return f"({one} / ({one} + {exp}))"


def _lower_select(r: FunctionRenderer, inst: Instruction) -> str:
    c, a, b = _ops(r, inst)
    return f"({c} ? {a} : {b})"


def _cast(r: FunctionRenderer, inst: Instruction) -> str:
    return f"({r.lang.scalar(inst.type)}){_ops(r, inst)[0]}"


def _lower_fptosi(r: FunctionRenderer, inst: Instruction) -> str:
    """Truncation toward zero; nan raises ValueError, ±inf and out-of-range values OverflowError."""
    (x,) = _ops(r, inst)
    bits = inst.type.bits  # type: ignore[attr-defined]
    wide = f"(double){x}"
    upper = float(2 ** (bits - 1)).hex()
    lower = f"{wide} >= -{upper}" if bits == 64 else f"{wide} > {(-float(2 ** (bits - 1)) - 1.0).hex()}"
    r.check(f"{lower} && {wide} < {upper}", inst, "float-to-int", [f"as_long({wide})"], type=str(inst.type))
    return f"({r.lang.scalar(inst.type)}){x}"


def flat_index(r: FunctionRenderer, inst: Instruction, array: Value, indices: tuple[Value, ...]) -> str:
    """The row-major element offset (times the array's element stride, `FunctionRenderer.element_stride`);
    in checked mode, or for an access flagged `checked`, every index is checked first."""
    names = [r.name(i) for i in indices]
    extents = r.extents(array)
    if r.lang.options.boundscheck or CHECKED in inst.flags:
        ok = " && ".join(f"0 <= {i} && {i} < {d}" for i, d in zip(names, extents, strict=True))
        r.check(ok, inst, "index", [*names, *extents], rank=len(names))
    offset = names[0]
    for index, extent in zip(names[1:], extents[1:], strict=True):
        offset = f"({offset}) * {extent} + {index}"
    stride = r.element_stride(array)
    return offset if stride is None else f"({offset}) * {stride}"


def _lower_load(r: FunctionRenderer, inst: Instruction) -> str:
    array, *indices = inst.operands
    element = f"{r.name(array)}[{flat_index(r, inst, array, tuple(indices))}]"
    return f"({element} != 0)" if inst.type.is_bool else element  # type: ignore[union-attr]


def _lower_store(r: FunctionRenderer, inst: Instruction) -> None:
    value, array, *indices = inst.operands
    element_type: ScalarType = array.type.element  # type: ignore[attr-defined]
    stored = f"({r.lang.storage(element_type)}){r.name(value)}"
    r.emit(f"{r.name(array)}[{flat_index(r, inst, array, tuple(indices))}] = {stored};")


def _lower_atomic_add(r: FunctionRenderer, inst: Instruction) -> None:
    """Serial execution: a plain read-modify-write (wrapping for integers)."""
    value, array, *indices = inst.operands
    element = f"{r.name(array)}[{flat_index(r, inst, array, tuple(indices))}]"
    element_type: ScalarType = array.type.element  # type: ignore[attr-defined]
    if element_type.is_int:
        u = _unsigned(r, element_type)
        r.emit(f"{element} = ({r.lang.scalar(element_type)})(({u}){element} + ({u}){r.name(value)});")
    elif element_type.is_float:
        r.emit(f"{element} = {element} + {r.name(value)};")
    else:
        raise CodegenError(f"atomic_add on an array of {element_type}")


def _lower_dim(r: FunctionRenderer, inst: Instruction) -> str:
    return r.extents(inst.operands[0])[int(inst.attrs["axis"])]  # type: ignore[call-overload]


def uninitialized_fill(r: FunctionRenderer, element: ScalarType) -> str:
    if element.is_float:
        return r.lang.float_literal(math.nan, element)
    if element.is_int:
        return r.lang.constant(Constant(element, -(1 << (element.bits - 1))))
    return "1"


def check_shape(r: FunctionRenderer, inst: Instruction, extents: list[Value]) -> None:
    """ValueError (the interpreter's) for a negative extent of an `alloc` or `view`, then MemoryError for a
    size in bytes over `LARGEST_SIZE` (`check_size`)."""
    names = [r.name(v) for v in extents]
    if all(isinstance(v, Constant) for v in extents):  # decided here
        shape = [int(v.value) for v in extents]  # type: ignore[attr-defined]
        if any(extent < 0 for extent in shape):
            r.check("false", inst, "negative-extent", names, rank=len(names))
        elif inst.type.element.numpy_dtype.itemsize * math.prod(shape) > LARGEST_SIZE:  # type: ignore[attr-defined]
            r.check("false", inst, "out-of-memory", names, **size_details(inst, len(names)))
        return
    r.check(" && ".join(f"{e} >= 0" for e in names), inst, "negative-extent", names, rank=len(names))
    check_size(r, inst, names)


def check_size(r: FunctionRenderer, inst: Instruction, extents: list[str]) -> None:
    """MemoryError unless an array of `extents` (not negative) of `inst`'s element type has at most
    `LARGEST_SIZE` bytes, tested before any size is computed (it could wrap): they fit when one extent is
    0, or each is at most what the limit divided by the ones before it leaves."""
    itemsize = inst.type.element.numpy_dtype.itemsize  # type: ignore[attr-defined]
    r.emit(f"{{ long left = {LARGEST_SIZE // itemsize}L, fits = {' || '.join(f'{e} == 0' for e in extents)};")
    for extent in extents:
        r.emit(f"  if ({extent} > left) left = -1; else if ({extent} > 0) left /= {extent};")
    r.check("fits || left >= 0", inst, "out-of-memory", extents, **size_details(inst, len(extents)))
    r.emit("}")


def size_details(inst: Instruction, rank: int) -> dict[str, object]:
    """What an out-of-memory site of an array of `inst`'s type names (`error_sites.py`)."""
    element: ScalarType = inst.type.element  # type: ignore[attr-defined]
    return {"rank": rank, "element": str(element), "itemsize": element.numpy_dtype.itemsize}


def lower_alloc(r: FunctionRenderer, inst: Instruction) -> None:
    """A private C array sized by the constant extents, filled as the interpreter fills it; with run-time
    extents, or growable (a tape, `_lower_grow`), a block of the device heap (`_heap_alloc`). An alloc that
    nothing uses only checks its shape."""
    if not inst.uses:
        return check_shape(r, inst, inst.operands)
    if "growable" in inst.flags or not all(isinstance(v, Constant) for v in inst.operands):
        return _heap_alloc(r, inst)
    shape = [int(v.value) for v in inst.operands]  # type: ignore[attr-defined]
    name = r.names[inst]
    if any(extent < 0 for extent in shape) or inst.type.element.numpy_dtype.itemsize * math.prod(shape) > LARGEST_SIZE:  # type: ignore[attr-defined]
        return check_shape(r, inst, inst.operands)
    size = math.prod(shape)
    element: ScalarType = inst.type.element  # type: ignore[attr-defined]
    storage = r.lang.storage(element)
    r.decls.append(f"  {storage} {name}_data[{max(size, 1)}];")
    fill = "0" if "zeroed" in inst.flags else uninitialized_fill(r, element)
    r.emit(f"for (long k = 0; k < {size}; k++) {name}_data[k] = ({storage}){fill};")
    r.emit(f"{name} = {name}_data;")
    for k, extent in enumerate(shape):
        r.emit(f"{name}_d{k} = {extent};")


HEAP_TOP, HEAP_WORDS = -1, 9
"""Where functions find the device heap's top and size: the control words just before and just after the
error record (`err[-1]`, `err[9]`; `opencl_control.py` lays the control buffer out)."""
assert (opencl_control.ERROR + HEAP_TOP, opencl_control.ERROR + HEAP_WORDS) == (opencl_control.HEAP_TOP,
                                                                                opencl_control.HEAP_WORDS)


def _heap_alloc(r: FunctionRenderer, inst: Instruction) -> None:
    """A local array of run-time extents in a called function: the next block of the device heap `heap`
    (8-byte words; the top is bumped atomically, nothing is freed before the kernel's run ends, as the LLVM
    backend frees local arrays when the kernel returns), filled as the interpreter fills it. MemoryError
    when the heap (`ISOZYME_OPENCL_HEAP_MB`) is full."""
    r.lang.uses_heap = True
    name = r.names[inst]
    extents = [r.name(v) for v in inst.operands]
    check_shape(r, inst, inst.operands)
    element: ScalarType = inst.type.element  # type: ignore[attr-defined]
    storage = r.lang.storage(element)
    count = " * ".join(f"{name}_d{k}" for k in range(len(extents)))
    for k, extent in enumerate(extents):
        r.emit(f"{name}_d{k} = {extent};")
    r.emit(f"{{ long words = ({count} * (long)sizeof({storage}) + 7) / 8;")
    r.emit(f"  long at = atom_add((volatile __global long*)(err + ({HEAP_TOP})), words);")
    r.emit(f"  {name} = (__global {storage}*)(heap + at);")
    r.emit(f"  if (at + words > err[{HEAP_WORDS}]) {name} = 0; }}")
    r.check(f"{name} != 0", inst, "out-of-memory", extents, **size_details(inst, len(extents)))
    fill = "0" if "zeroed" in inst.flags else uninitialized_fill(r, element)
    r.emit(f"for (long k = 0; k < {count}; k++) {name}[k] = ({storage}){fill};")
    return None


def lower_view(r: FunctionRenderer, inst: Instruction, clear: bool = True) -> None:
    """A local array in its arena's words from the offset on (`optimize/memory_reuse.py`): extents checked,
    a check that it fits (it does unless the size overflowed: MemoryError, as the LLVM backend), zeros when
    `zeroed` (and `clear`: the serial kernel clears large ones through the host). In the entry function the
    arena is a host buffer, in a called one a private array or a block of the device heap, as any local
    array there."""
    *extent_values, arena, offset = inst.operands
    name = r.names[inst]
    extents = [r.name(v) for v in extent_values]
    check_shape(r, inst, extent_values)
    for k, extent in enumerate(extents):
        r.emit(f"{name}_d{k} = {extent};")
    element: ScalarType = inst.type.element  # type: ignore[attr-defined]
    storage = r.lang.storage(element)
    count = " * ".join(f"{name}_d{k}" for k in range(len(extents)))
    words = f"({count} * (long)sizeof({storage}) + 7) / 8"
    r.check(f"{r.name(offset)} + {words} <= {r.name(arena)}_d0", inst, "out-of-memory", extents,
            **size_details(inst, len(extents)))
    r.emit(f"{name} = ({r.lang.pointer(inst.type, r.spaces.get(arena))})({r.name(arena)} + {r.name(offset)});")  # type: ignore[arg-type]
    if "zeroed" in inst.flags and clear:
        r.emit(f"for (long k = 0; k < {count}; k++) {name}[k] = ({storage})0;")
    return None


def _lower_grow(r: FunctionRenderer, inst: Instruction) -> None:
    """`grow %t, %n` in a called function: when n exceeds the extent, a new block of the device heap of
    max(n, 2 * extent) elements (the interpreter's) takes the old elements, the rest filled as a fresh
    array, and replaces the old block, which stays until the run ends (as every heap block). The extent
    never exceeds the heap's size in words, so doubling it cannot wrap; more elements than that is a
    MemoryError before their size in words is computed (it could wrap)."""
    r.lang.uses_heap = True
    array, count = inst.operands
    name, wanted = r.name(array), r.name(count)
    element: ScalarType = array.type.element  # type: ignore[attr-defined]
    storage = r.lang.storage(element)
    size = f"(long)sizeof({storage})"
    r.emit(f"if ({wanted} > {name}_d0) {{")
    r.emit(f"  long grown = max({wanted}, 2 * {name}_d0), words = err[{HEAP_WORDS}] + 1;")
    r.emit(f"  if (grown <= err[{HEAP_WORDS}]) words = (grown * {size} + 7) / 8;")
    r.emit(f"  long at = atom_add((volatile __global long*)(err + ({HEAP_TOP})), words);")
    r.emit(f"  __global {storage}* fresh = at + words <= err[{HEAP_WORDS}] ? (__global {storage}*)(heap + at) : 0;")
    r.check("fresh != 0", inst, "out-of-memory", ["grown"], rank=1)
    fill = "0" if "zeroed" in array.flags else uninitialized_fill(r, element)  # type: ignore[attr-defined]
    r.emit(f"  for (long k = 0; k < grown; k++) fresh[k] = k < {name}_d0 ? {name}[k] : ({storage}){fill};")
    r.emit(f"  {name} = fresh; {name}_d0 = grown;")
    r.emit("}")


def _lower_call(r: FunctionRenderer, inst: Instruction) -> None:
    """A call of the callee's version for the address spaces of the arrays passed (`address_spaces.py`);
    an array is its data pointer and extents."""
    args: list[str] = []
    for value in inst.operands:
        if isinstance(value.type, ArrayType):
            args += [r.name(value), *r.extents(value)]
        else:
            args.append(r.name(value))
    spaces = tuple(r.spaces[v] if isinstance(v.type, ArrayType) else None for v in inst.operands)
    call = f"{r.lang.versions.request(inst.callee, spaces)}({', '.join([*args, 'err', 'heap'])})"
    r.emit(f"{call};" if inst.type.is_void else f"{r.names[inst]} = {call};")
    r.emit(f"if (err[0] != 0) {r.fail_return()}")


def _lower_assert(r: FunctionRenderer, inst: Instruction) -> None:
    r.check(r.name(inst.operands[0]), inst, "assert", [], message=str(inst.attrs.get("message") or "assertion failed"),
            error=str(inst.attrs.get("error", "AssertionError")))


def _lower_br(r: FunctionRenderer, inst: Instruction) -> None:
    r.emit(f"goto {r.target(inst.block, inst.successors[0])};")  # type: ignore[arg-type]


def _lower_cbr(r: FunctionRenderer, inst: Instruction) -> None:
    if_true, if_false = inst.successors
    source: Block = inst.block  # type: ignore[assignment]
    r.emit(f"if ({r.name(inst.operands[0])}) goto {r.target(source, if_true)}; "
           f"else goto {r.target(source, if_false)};")


def _lower_ret(r: FunctionRenderer, inst: Instruction) -> None:
    r.emit(f"return {r.name(inst.operands[0])};" if inst.operands else "return;")


_INT_COMPARE = {Op.ICMP_EQ: "==", Op.ICMP_NE: "!=", Op.ICMP_SLT: "<", Op.ICMP_SLE: "<=", Op.ICMP_SGT: ">",
                Op.ICMP_SGE: ">="}
_FLOAT_COMPARE = {Op.FCMP_OEQ: "==", Op.FCMP_UNE: "!=", Op.FCMP_OLT: "<", Op.FCMP_OLE: "<=",
                  Op.FCMP_OGT: ">", Op.FCMP_OGE: ">="}
"""C's comparisons are Python's: `!=` is true for nan, the others false (bools compare as 0 < 1)."""

_LIBM = {Op.EXP: "exp", Op.LOG: "log", Op.LOG1P: "log1p", Op.EXPM1: "expm1", Op.SIN: "sin", Op.COS: "cos",
         Op.TAN: "tan", Op.TANH: "tanh", Op.SINH: "sinh", Op.COSH: "cosh", Op.ASIN: "asin", Op.ACOS: "acos",
         Op.ATAN: "atan", Op.ATAN2: "atan2", Op.ERF: "erf"}

LOWERINGS: dict[Op, Lowering] = {
    Op.IADD: _wrapping("+"),
    Op.ISUB: _wrapping("-"),
    Op.IMUL: _wrapping("*"),
    Op.IFLOORDIV: _int_divmod("floordiv"),
    Op.IFLOORMOD: _int_divmod("floormod"),
    Op.UDIV: _lower_udiv,
    Op.INEG: _lower_ineg,
    Op.IABS: _lower_iabs,
    Op.IMIN: _python_min,
    Op.IMAX: _python_max,
    Op.SHL: _lower_shift("<<"),
    Op.ASHR: _lower_shift(">>"),
    Op.AND: _infix("&"),
    Op.OR: _infix("|"),
    Op.XOR: _infix("^"),
    Op.FADD: _infix("+"),
    Op.FSUB: _infix("-"),
    Op.FMUL: _infix("*"),
    Op.FDIV: _infix("/"),
    Op.FFLOORDIV: _float_helper("ffloordiv"),
    Op.FFLOORMOD: _float_helper("ffloormod"),
    Op.FNEG: _lower_fneg,
    Op.FMIN: _python_min,
    Op.FMAX: _python_max,
    Op.SQRT: _exact("sqrt"),
    Op.FABS: _exact("fabs"),
    Op.FLOOR: _exact("floor"),
    Op.CEIL: _exact("ceil"),
    **{op: _libm(name) for op, name in _LIBM.items()},
    Op.SIGMOID: _lower_sigmoid,
    Op.POW: _lower_pow,
    **{op: _infix(symbol) for op, symbol in _INT_COMPARE.items()},
    **{op: _infix(symbol) for op, symbol in _FLOAT_COMPARE.items()},
    Op.SELECT: _lower_select,
    Op.SITOFP: _cast,
    Op.FPTOSI: _lower_fptosi,
    Op.FPEXT: _cast,
    Op.FPTRUNC: _cast,
    Op.SEXT: _cast,
    Op.TRUNC: _cast,
    Op.ZEXT: _cast,
    Op.LOAD: _lower_load,
    Op.STORE: _lower_store,
    Op.ATOMIC_ADD: _lower_atomic_add,
    Op.DIM: _lower_dim,
    Op.ALLOC: lower_alloc,
    Op.VIEW: lower_view,
    Op.GROW: _lower_grow,
    Op.CALL: _lower_call,
    Op.ASSERT: _lower_assert,
    Op.BR: _lower_br,
    Op.CBR: _lower_cbr,
    Op.RET: _lower_ret,
}
"""How each op is rendered (every op but `phi`, which `out_of_ssa` removes)."""
