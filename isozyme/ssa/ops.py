"""The ops of the SSA IR and their property table.

Every op is a member of `Op` whose value is its mnemonic in the text form (`Op("icmp.slt")`). `OP_INFO`
holds, per op, the data that passes, the verifier, the printer and the parser read: its syntax, the types
its operands must have, how its result type follows from them, and its effects (pure, commutative, reads
or writes memory, may trap, terminator). What an op computes is defined once, in `interpreter.py`.

Operand type patterns (`OpInfo.operands`) are strings with one letter per operand. All operands whose
letter is one of `f i n s` must have one and the same type T; the result of a `SAME` op has type T.

    f  a float type (f32, f64)          i  an integer type (i32, i64)
    n  an integer type or i1            s  any scalar type
    b  exactly i1
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from isozyme.ssa.types import I1, I64, VOID, Type


class Op(Enum):
    """An IR operation; the value is the mnemonic of the text form."""

    # Members are singletons compared by identity: hash them so too. Enum's own `__hash__` is a Python
    # function (hash of the name), and every pass looks ops up in `OP_INFO` and sets of ops.
    __hash__ = object.__hash__

    # integers (i32, i64: two's complement, wrapping)
    IADD = "iadd"
    ISUB = "isub"
    IMUL = "imul"
    IFLOORDIV = "ifloordiv"
    IFLOORMOD = "ifloormod"
    UDIV = "udiv"
    INEG = "ineg"
    IABS = "iabs"
    IMIN = "imin"
    IMAX = "imax"
    SHL = "shl"
    ASHR = "ashr"
    # integers and booleans
    AND = "and"
    OR = "or"
    XOR = "xor"
    # floats (IEEE 754)
    FADD = "fadd"
    FSUB = "fsub"
    FMUL = "fmul"
    FDIV = "fdiv"
    FFLOORDIV = "ffloordiv"
    FFLOORMOD = "ffloormod"
    FNEG = "fneg"
    FMIN = "fmin"
    FMAX = "fmax"
    # math functions of DESIGN 1.2
    SQRT = "sqrt"
    EXP = "exp"
    LOG = "log"
    LOG1P = "log1p"
    EXPM1 = "expm1"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    SINH = "sinh"
    COSH = "cosh"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    ATAN2 = "atan2"
    POW = "pow"
    FABS = "fabs"
    FLOOR = "floor"
    CEIL = "ceil"
    ERF = "erf"
    # comparisons (Python's: `!=` on floats is true for NaN, the others are ordered)
    ICMP_EQ = "icmp.eq"
    ICMP_NE = "icmp.ne"
    ICMP_SLT = "icmp.slt"
    ICMP_SLE = "icmp.sle"
    ICMP_SGT = "icmp.sgt"
    ICMP_SGE = "icmp.sge"
    FCMP_OEQ = "fcmp.oeq"
    FCMP_UNE = "fcmp.une"
    FCMP_OLT = "fcmp.olt"
    FCMP_OLE = "fcmp.ole"
    FCMP_OGT = "fcmp.ogt"
    FCMP_OGE = "fcmp.oge"
    SELECT = "select"
    # conversions: `%y = sitofp %i to f64`
    SITOFP = "sitofp"
    FPTOSI = "fptosi"
    FPEXT = "fpext"
    FPTRUNC = "fptrunc"
    SEXT = "sext"
    TRUNC = "trunc"
    ZEXT = "zext"
    # memory
    LOAD = "load"
    STORE = "store"
    ATOMIC_ADD = "atomic_add"
    DIM = "dim"
    ALLOC = "alloc"
    VIEW = "view"
    GROW = "grow"
    # calls, checks, control flow
    CALL = "call"
    ASSERT = "assert"
    PHI = "phi"
    BR = "br"
    CBR = "cbr"
    RET = "ret"

    def __str__(self) -> str:
        return self.value


class Syntax(Enum):
    """How an op is written in the text form."""

    OPERANDS = "op a, b, ..."
    CAST = "op a to T"
    LOAD = "load %x[%i, ...]"
    STORE = "op v, %x[%i, ...]"
    DIM = "dim %x, AXIS"
    ALLOC = "alloc T[%n, ...]"
    VIEW = "view T[%n, ...] %arena, %offset"
    GROW = "grow %x, %n"
    CALL = "call @f(a, ...)"
    ASSERT = 'assert %c, "message"[, Error]'
    PHI = "phi T [bb: v, ...]"
    BR = "br bb"
    CBR = "cbr %c, bbT, bbF"
    RET = "ret [v]"


class ResultRule(Enum):
    """How an op's result type follows from its operands."""

    SAME = "the common operand type T"
    BOOL = "i1"
    INDEX = "i64"
    ELEMENT = "the element type of the array operand"
    EXPLICIT = "written in the instruction (cast target, alloc type, phi type)"
    CALLEE = "the callee's return type"
    VOID = "no value"


@dataclass(frozen=True)
class OpInfo:
    """One row of the property table."""

    syntax: Syntax
    """How the op is printed and parsed."""
    operands: str
    """Operand type pattern (module docstring); casts: source and target class; '' where checked by syntax."""
    result: ResultRule
    """How the result type is derived."""
    pure: bool = False
    """No memory effects, no traps, result depends on operands only: may be moved, merged or deleted."""
    commutative: bool = False
    """The two operands may be swapped."""
    reads_memory: bool = False
    writes_memory: bool = False
    may_trap: bool = False
    """May raise at run time (bounds, division by zero, failed assert, invalid conversion)."""
    terminator: bool = False
    cast_width: str = ""
    """For casts between types of one class: 'widen' or 'narrow'."""


def _arith(pattern: str, commutative: bool = False, may_trap: bool = False) -> OpInfo:
    pure = not may_trap
    return OpInfo(Syntax.OPERANDS, pattern, ResultRule.SAME, pure=pure, commutative=commutative,
                  may_trap=may_trap)


def _compare(pattern: str, commutative: bool = False) -> OpInfo:
    return OpInfo(Syntax.OPERANDS, pattern, ResultRule.BOOL, pure=True, commutative=commutative)


def _cast(source: str, target: str, width: str = "", may_trap: bool = False) -> OpInfo:
    return OpInfo(Syntax.CAST, source + target, ResultRule.EXPLICIT, pure=not may_trap, may_trap=may_trap,
                  cast_width=width)


_UNARY_MATH = (Op.SQRT, Op.EXP, Op.LOG, Op.LOG1P, Op.EXPM1, Op.SIN, Op.COS, Op.TAN, Op.TANH, Op.SIGMOID,
               Op.SINH, Op.COSH, Op.ASIN, Op.ACOS, Op.ATAN, Op.FABS, Op.FLOOR, Op.CEIL, Op.ERF, Op.FNEG)

OP_INFO: dict[Op, OpInfo] = {
    Op.IADD: _arith("ii", commutative=True),
    Op.ISUB: _arith("ii"),
    Op.IMUL: _arith("ii", commutative=True),
    Op.IFLOORDIV: _arith("ii", may_trap=True),
    Op.IFLOORMOD: _arith("ii", may_trap=True),
    Op.UDIV: _arith("ii", may_trap=True),
    Op.INEG: _arith("i"),
    Op.IABS: _arith("i"),
    Op.IMIN: _arith("ii", commutative=True),
    Op.IMAX: _arith("ii", commutative=True),
    Op.SHL: _arith("ii", may_trap=True),
    Op.ASHR: _arith("ii", may_trap=True),
    Op.AND: _arith("nn", commutative=True),
    Op.OR: _arith("nn", commutative=True),
    Op.XOR: _arith("nn", commutative=True),
    Op.FADD: _arith("ff", commutative=True),
    Op.FSUB: _arith("ff"),
    Op.FMUL: _arith("ff", commutative=True),
    Op.FDIV: _arith("ff"),
    Op.FFLOORDIV: _arith("ff"),
    Op.FFLOORMOD: _arith("ff"),
    # Python's min/max: not commutative for NaN and signed zeros.
    Op.FMIN: _arith("ff"),
    Op.FMAX: _arith("ff"),
    **{op: _arith("f") for op in _UNARY_MATH},
    Op.ATAN2: _arith("ff"),
    Op.POW: _arith("ff"),
    Op.ICMP_EQ: _compare("nn", commutative=True),
    Op.ICMP_NE: _compare("nn", commutative=True),
    Op.ICMP_SLT: _compare("nn"),
    Op.ICMP_SLE: _compare("nn"),
    Op.ICMP_SGT: _compare("nn"),
    Op.ICMP_SGE: _compare("nn"),
    Op.FCMP_OEQ: _compare("ff", commutative=True),
    Op.FCMP_UNE: _compare("ff", commutative=True),
    Op.FCMP_OLT: _compare("ff"),
    Op.FCMP_OLE: _compare("ff"),
    Op.FCMP_OGT: _compare("ff"),
    Op.FCMP_OGE: _compare("ff"),
    Op.SELECT: OpInfo(Syntax.OPERANDS, "bss", ResultRule.SAME, pure=True),
    Op.SITOFP: _cast("i", "f"),
    Op.FPTOSI: _cast("f", "i", may_trap=True),
    Op.FPEXT: _cast("f", "f", "widen"),
    Op.FPTRUNC: _cast("f", "f", "narrow"),
    Op.SEXT: _cast("i", "i", "widen"),
    Op.TRUNC: _cast("i", "i", "narrow"),
    Op.ZEXT: _cast("b", "i"),
    Op.LOAD: OpInfo(Syntax.LOAD, "", ResultRule.ELEMENT, reads_memory=True, may_trap=True),
    Op.STORE: OpInfo(Syntax.STORE, "", ResultRule.VOID, writes_memory=True, may_trap=True),
    Op.ATOMIC_ADD: OpInfo(Syntax.STORE, "", ResultRule.VOID, reads_memory=True, writes_memory=True,
                          may_trap=True),
    Op.DIM: OpInfo(Syntax.DIM, "", ResultRule.INDEX, pure=True),
    Op.ALLOC: OpInfo(Syntax.ALLOC, "", ResultRule.EXPLICIT, may_trap=True),  # a negative extent raises
    # `%t = view f64[%n] %arena, %offset`: a local array whose storage is the i64 words of the alloc %arena
    # from word %offset on (optimize/memory_reuse.py places allocs so); `zeroed` clears it at every run.
    # Operands: the extents, then the arena and the offset.
    Op.VIEW: OpInfo(Syntax.VIEW, "", ResultRule.EXPLICIT, writes_memory=True, may_trap=True),
    # `grow %t, %n`: the growable local array %t gets at least n elements (interpreter.py); it copies the
    # old elements into a new block, which may fail for want of memory.
    Op.GROW: OpInfo(Syntax.GROW, "", ResultRule.VOID, reads_memory=True, writes_memory=True, may_trap=True),
    # A call's effects come from its callee's attributes (readnone, readonly, argmemonly).
    Op.CALL: OpInfo(Syntax.CALL, "", ResultRule.CALLEE, reads_memory=True, writes_memory=True, may_trap=True),
    Op.ASSERT: OpInfo(Syntax.ASSERT, "b", ResultRule.VOID, may_trap=True),
    Op.PHI: OpInfo(Syntax.PHI, "", ResultRule.EXPLICIT, pure=True),
    Op.BR: OpInfo(Syntax.BR, "", ResultRule.VOID, terminator=True),
    Op.CBR: OpInfo(Syntax.CBR, "b", ResultRule.VOID, terminator=True),
    Op.RET: OpInfo(Syntax.RET, "", ResultRule.VOID, terminator=True),
}

ASSERT_ERRORS: dict[str, type[Exception]] = {"AssertionError": AssertionError, "OverflowError": OverflowError}
"""What a failed `assert` raises: the exception its `error` attribute names (`assert %ok, "message",
OverflowError`: the frontend's check that a loop's trip count fits in i64), AssertionError without one."""

_missing = set(Op) - set(OP_INFO)
assert not _missing, f"ops without a row in OP_INFO: {sorted(map(str, _missing))}"


def type_in_class(ty: Type, letter: str) -> bool:
    """Does `ty` belong to the operand class `letter` of the pattern language (module docstring)?"""
    if letter == "f":
        return ty.is_float
    if letter == "i":
        return ty.is_int
    if letter == "n":
        return ty.is_int or ty.is_bool
    if letter == "s":
        return ty.is_scalar
    if letter == "b":
        return ty == I1
    raise KeyError(f"unknown operand class {letter!r}")


CLASS_NAMES = {"f": "a float type", "i": "an integer type", "n": "an integer or i1 type",
               "s": "a scalar type", "b": "i1"}
"""What each operand class letter means, for error messages."""

SHARED_CLASSES = frozenset("fins")
"""Operand classes whose operands must all have one type."""


def common_operand_type(op: Op, operand_types: list[Type]) -> Type | None:
    """The shared type T of an `OPERANDS` op: the type of its first operand of a shared class."""
    pattern = OP_INFO[op].operands
    for letter, ty in zip(pattern, operand_types):
        if letter in SHARED_CLASSES:
            return ty
    return None


def result_type(op: Op, operand_types: list[Type]) -> Type | None:
    """The result type of `op` on operands of `operand_types`.

    None when the operands do not determine it: a load from a non-array, and the ops whose result type
    is written in the instruction (`EXPLICIT`: phi, cast, alloc) or is the callee's (`CALLEE`)."""
    rule = OP_INFO[op].result
    if rule is ResultRule.SAME:
        return common_operand_type(op, operand_types)
    if rule is ResultRule.BOOL:
        return I1
    if rule is ResultRule.INDEX:
        return I64
    if rule is ResultRule.ELEMENT:
        array = operand_types[0] if operand_types else None
        return array.element if array is not None and array.is_array else None
    if rule is ResultRule.VOID:
        return VOID
    return None
