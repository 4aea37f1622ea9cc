"""simplify-cfg, const-fold and instcombine: differential tests against the reference interpreter.

Each pass must leave verified IR that computes what the input computed, bit for bit: floats are compared by
their bit patterns (so -0.0 is not 0.0), except that any nan equals any nan (no op can observe a payload).
A run that raises must raise the same error type afterwards (`pow(x, 2.0) -> x * x` is exact too: the IR
defines those powers as the products, see semantics.py). The structural
invariants each pass promises are checked by oracles written here, not by the passes' own predicates.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isozyme.optimize.constant_folding import constant_folding
from isozyme.optimize.dead_code_elimination import dead_code_elimination
from isozyme.optimize.instcombine import FASTMATH_RULES, RULES, constant_to_right, instcombine, swap_ordering
from isozyme.optimize.pass_manager import REGISTRY
from isozyme.optimize.simplify_cfg import simplify_cfg
from isozyme.ssa.builder import Builder, make_function
from isozyme.ssa.cfg import predecessors, reachable_blocks
from isozyme.ssa.interpreter import StepLimitExceeded, run_function
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Phi, Value, canonical_scalar
from isozyme.ssa.ops import OP_INFO, SHARED_CLASSES, Op, Syntax, result_type
from isozyme.ssa.parser import parse_function
from isozyme.ssa.printer import print_function
from isozyme.ssa.semantics import SEMANTICS
from isozyme.ssa.types import F32, F64, I1, I32, I64, ScalarType
from isozyme.ssa.verifier import verify

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 3.0, 4.0, 0.25, math.inf, -math.inf, math.nan,
                  5e-324, 1e-310, 1.7976931348623157e308, -1.7976931348623157e308, 2.0**-1022, 1e16]
SPECIAL_INTS = {64: [0, 1, -1, 2, 3, -2, 7, 8, -8, 63, 64, 2**62, INT64_MIN, INT64_MAX, INT64_MIN + 1],
                32: [0, 1, -1, 2, 3, -2, 7, 8, -8, 31, 32, 2**30, INT32_MIN, INT32_MAX, INT32_MIN + 1]}

Outcome = tuple[str, object]
"""('value', result and the arrays after the run) or ('raise', the exception type)."""


# --- comparing runs ---------------------------------------------------------------------------------------


def float_bits(value: float) -> bytes:
    return struct.pack("<d", value)


def same_scalar(a: object, b: object) -> bool:
    """Equal as the IR sees it: floats bit for bit, any nan equal to any nan; ints and bools by value."""
    if isinstance(a, float) or isinstance(b, float):
        if not (isinstance(a, float) and isinstance(b, float)):
            return False
        return (math.isnan(a) and math.isnan(b)) or float_bits(a) == float_bits(b)
    return type(a) is type(b) and a == b


def ordered_bits(value: float) -> int:
    """The float's position on the number line, in ulps: adjacent floats differ by one."""
    (bits,) = struct.unpack("<q", float_bits(value))
    return bits if bits >= 0 else -(bits & 0x7FFF_FFFF_FFFF_FFFF)


def within_ulps(a: object, b: object, ulps: int) -> bool:
    if isinstance(a, float) and isinstance(b, float) and not (math.isnan(a) or math.isnan(b)):
        return abs(ordered_bits(a) - ordered_bits(b)) <= ulps
    return same_scalar(a, b)


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and all(same_scalar(x, y) for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))


def run(function: Function, args: Sequence[object], step_limit: int | None = None) -> Outcome:
    """Run on fresh copies of array arguments; the result and those arrays, or the error's type."""
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    try:
        result = run_function(function, *copies, step_limit=step_limit)
    except (ArithmeticError, ValueError, IndexError, AssertionError, StepLimitExceeded) as error:
        return ("raise", type(error))
    return ("value", (result, [a for a in copies if isinstance(a, np.ndarray)]))


def same_outcome(before: Outcome, after: Outcome, ulps: int = 0) -> bool:
    if before[0] != after[0] or before[0] == "raise":
        return before == after
    (r1, arrays1), (r2, arrays2) = before[1], after[1]  # type: ignore[misc]
    scalar_ok = within_ulps(r1, r2, ulps) if ulps else same_scalar(r1, r2)
    return scalar_ok and all(same_array(x, y) for x, y in zip(arrays1, arrays2))


def check_pass(function: Function, worker: Callable[[Function], bool], inputs: Sequence[Sequence[object]],
               ulps: int = 0) -> bool:
    """Run `worker` on `function`; assert it verifies and agrees with the input on every input tuple."""
    before = [run(function, args) for args in inputs]
    changed = worker(function)
    verify(function)
    for args, expected in zip(inputs, before):
        actual = run(function, args)
        assert same_outcome(expected, actual, ulps), (args, expected, actual, print_function(function))
    return changed


# --- the registry -----------------------------------------------------------------------------------------


def test_passes_are_registered() -> None:
    assert REGISTRY["simplify-cfg"].run is simplify_cfg
    assert REGISTRY["const-fold"].run is constant_folding
    assert REGISTRY["instcombine"].run is instcombine


# --- const-fold -------------------------------------------------------------------------------------------


def as_type(ty: ScalarType, values: Sequence[float]) -> list[float]:
    """`values` rounded to `ty` (f32 overflows to inf quietly)."""
    return [canonical_scalar(ty, v) for v in values]  # type: ignore[misc]


def float_values(ty: ScalarType) -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(as_type(ty, SPECIAL_FLOATS)), st.floats(width=ty.bits))


def values_of(ty: ScalarType) -> st.SearchStrategy[object]:
    """Constants of `ty`, biased to the edge cases: nan, infinities, signed zeros, extreme integers."""
    if ty.is_bool:
        return st.booleans()
    if ty.is_int:
        low, high = (INT64_MIN, INT64_MAX) if ty.bits == 64 else (INT32_MIN, INT32_MAX)
        return st.one_of(st.sampled_from(SPECIAL_INTS[ty.bits]), st.integers(low, high))
    return float_values(ty)


CLASS_TYPES = {"f": [F32, F64], "i": [I32, I64], "n": [I1, I32, I64], "s": [I1, I32, I64, F32, F64], "b": [I1]}
"""The types an operand class of the op table may take."""

CAST_TYPES: dict[Op, list[tuple[ScalarType, ScalarType]]] = {
    Op.SITOFP: [(I32, F32), (I32, F64), (I64, F32), (I64, F64)],
    Op.FPTOSI: [(F32, I32), (F32, I64), (F64, I32), (F64, I64)],
    Op.FPEXT: [(F32, F64)],
    Op.FPTRUNC: [(F64, F32)],
    Op.SEXT: [(I32, I64)],
    Op.TRUNC: [(I64, I32)],
    Op.ZEXT: [(I1, I32), (I1, I64)],
}
"""(source, target) types of each cast; a cast missing here fails the test by name."""


@st.composite
def operand_types(draw: st.DrawFn, op: Op) -> tuple[list[ScalarType], ScalarType]:
    """Operand types and the result type of a well-typed instance of the scalar `op`."""
    info = OP_INFO[op]
    if info.syntax is Syntax.CAST:
        source, target = draw(st.sampled_from(CAST_TYPES[op]))
        return [source], target
    shared = draw(st.sampled_from(CLASS_TYPES[next(c for c in info.operands if c in SHARED_CLASSES)]))
    types = [shared if letter in SHARED_CLASSES else I1 for letter in info.operands]
    return types, result_type(op, types)  # type: ignore[return-value]


@st.composite
def constant_instructions(draw: st.DrawFn) -> tuple[Function, Instruction]:
    """`f() { %r = op c1, c2; ret %r }` for a scalar op and edge-case constants."""
    op = draw(st.sampled_from(sorted(SEMANTICS, key=str)))
    types, result = draw(operand_types(op))
    function = make_function("f", [], result)
    builder = Builder(function.add_block())
    operands = [Constant(ty, draw(values_of(ty))) for ty in types]
    inst = builder.emit(op, *operands, type=result)
    builder.ret(inst)
    return function, inst


@settings(max_examples=400, deadline=None)
@given(constant_instructions())
def test_const_fold_agrees_with_the_interpreter(case: tuple[Function, Instruction]) -> None:
    function, inst = case
    before = run(function, [])
    changed = check_pass(function, constant_folding, [[]])
    if before[0] == "raise":  # a trap must stay where it was
        assert not changed and inst.block is function.entry
    else:
        assert changed and isinstance(function.entry.terminator.operands[0], Constant)  # type: ignore[union-attr]


def test_const_fold_folds_chains_and_keeps_what_traps() -> None:
    function = parse_function("""
func @f(%x: f64) -> f64 {
bb0:
  %a = fmul 2.0, 3.0
  %b = fadd %a, 0.5
  %d = ifloordiv 1, 0
  %z = fmul 0.0, %x
  %s = fadd %b, %z
  ret %s
}""")
    assert constant_folding(function)
    assert [inst.op for inst in function.entry.instructions] == [Op.IFLOORDIV, Op.FMUL, Op.FADD, Op.RET]
    assert function.entry.instructions[2].operands[0].value == 6.5  # type: ignore[attr-defined]
    assert not constant_folding(function)


def test_const_fold_select_on_a_constant_condition() -> None:
    function = make_function("f", [("x", F64), ("y", F64)], F64)
    b = Builder(function.add_block())
    x, y = function.args
    b.ret(b.select(b.icmp_sgt(2, 1), x, y))
    assert check_pass(function, constant_folding, [[1.0, 2.0]])
    assert function.entry.terminator.operands[0] is x  # type: ignore[union-attr]


# --- instcombine ------------------------------------------------------------------------------------------

COMBINED_OPS = sorted(set(RULES) - {Op.DIM}, key=str)
"""The scalar ops with rules (`dim` of an `alloc` has its own test: its operand is an array)."""
NEGATE = {"f": Op.FNEG, "i": Op.INEG}

RULE_CONSTANTS = {"f": [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 4.0, 3.0, 2.0**-1074, 2.0**1023, math.inf, math.nan],
                  "i": [0, 1, -1, 2, 8, -8, 3, 2**30, INT32_MIN, INT64_MIN], "b": [False, True]}
"""The constants instcombine's rules look for, and their near misses."""


def type_class(ty: ScalarType) -> str:
    return "f" if ty.is_float else "i" if ty.is_int else "b"


def rule_constants(ty: ScalarType) -> list[object]:
    """RULE_CONSTANTS of `ty`'s class as values of `ty`, without repeats (0.0 and -0.0 both kept)."""
    values = [canonical_scalar(ty, v) for v in RULE_CONSTANTS[type_class(ty)]]
    return list({repr(v): v for v in values}.values())


def constants_for(ty: ScalarType) -> st.SearchStrategy[object]:
    return st.one_of(st.sampled_from(rule_constants(ty)), values_of(ty))


@st.composite
def leaves(draw: st.DrawFn, function: Function, builder: Builder, ty: ScalarType, op: Op, depth: int) -> Value:
    """An operand of type `ty`: an argument, a constant, a negated argument, or `op` of such operands."""
    x, y = (a for a in function.args if a.type == ty) if ty != I1 else function.args[-2:]
    kinds = ["x", "x", "y", "constant", "constant"]
    if type_class(ty) in NEGATE:
        kinds.append("negated")
    if depth and result_type(op, [ty] * len(OP_INFO[op].operands)) == ty and op is not Op.SELECT:
        kinds.append("nested")
    kind = draw(st.sampled_from(kinds))
    if kind == "constant":
        return Constant(ty, draw(constants_for(ty)))
    if kind == "negated":
        return builder.emit(NEGATE[type_class(ty)], draw(st.sampled_from([x, y])))
    if kind == "nested":
        return builder.emit(op, *[draw(leaves(function, builder, ty, op, 0)) for _ in OP_INFO[op].operands])
    return x if kind == "x" else y


def shared_type(op: Op, types: list[ScalarType]) -> ScalarType:
    """The type T of the op's shared operands (i1 for ops with none)."""
    return next((t for t, letter in zip(types, OP_INFO[op].operands) if letter in SHARED_CLASSES), I1)


def combine_function(op: Op, types: list[ScalarType]) -> tuple[Function, Builder]:
    """An empty `f(%x, %y: T, %c, %d: i1) -> result of op`, and a builder at its entry."""
    ty = shared_type(op, types)
    function = make_function("f", [("x", ty), ("y", ty), ("c", I1), ("d", I1)], result_type(op, types))
    return function, Builder(function.add_block())


@st.composite
def combinable_functions(draw: st.DrawFn) -> tuple[Function, list[list[object]]]:
    """One op of instcombine's table over random nested operands, and inputs for it."""
    op = draw(st.sampled_from(COMBINED_OPS))
    types, _ = draw(operand_types(op))
    function, builder = combine_function(op, types)
    operands = [draw(st.sampled_from(function.args[2:])) if letter == "b"
                else draw(leaves(function, builder, ty, op, 1)) for letter, ty in zip(OP_INFO[op].operands, types)]
    builder.ret(builder.emit(op, *operands))
    ty = shared_type(op, types)
    inputs = [[draw(values_of(ty)), draw(values_of(ty)), draw(st.booleans()), draw(st.booleans())]
              for _ in range(4)]
    return function, inputs


@settings(max_examples=200, deadline=None)
@given(combinable_functions())
def test_instcombine_agrees_with_the_interpreter(case: tuple[Function, list[list[object]]]) -> None:
    function, inputs = case
    check_pass(function, instcombine, inputs)
    assert not instcombine(function), "instcombine must reach its fixed point in one run"


def operand_forms(op: Op, types: list[ScalarType]) -> list[Callable[[Function, Builder], list[Value]]]:
    """Operand lists for `op`: x and y, constants left and right, x twice, nested, negated."""
    ty, cls = shared_type(op, types), type_class(shared_type(op, types))
    x_, y_ = (lambda f: f.args[0]), (lambda f: f.args[1])
    if op is Op.SELECT:
        pairs = [(x_, x_), (x_, y_)] + [(lambda f, a=a: Constant(ty, a), lambda f, b=b: Constant(ty, b))
                                        for a in rule_constants(ty) for b in rule_constants(ty)][:16]
        return [lambda f, b, p=p: [f.args[2], p[0](f), p[1](f)] for p in pairs]
    if len(types) == 1:
        return [lambda f, b: [b.emit(op, f.args[0])]]
    forms: list[Callable[[Function, Builder], list[Value]]] = [lambda f, b: [f.args[0], f.args[0]]]
    for c in rule_constants(ty):
        forms.append(lambda f, b, c=c: [f.args[0], Constant(ty, c)])
        forms.append(lambda f, b, c=c: [Constant(ty, c), f.args[0]])
    if result_type(op, types) == ty:
        for c1, c2 in NESTED_CONSTANTS[cls]:
            forms.append(lambda f, b, c1=c1, c2=c2: [b.emit(op, f.args[0], Constant(ty, c1)), Constant(ty, c2)])
    if cls in NEGATE:
        forms.append(lambda f, b: [f.args[0], b.emit(NEGATE[cls], f.args[1])])
    if op is Op.ISUB:  # (x + c1) - c2, as a fused mirrored loop's counter reads: cancelling, wrapping
        for c1, c2 in ((1, 1), (3, 5), (INT64_MAX, -1)):
            forms.append(lambda f, b, c1=c1, c2=c2: [b.iadd(f.args[0], Constant(ty, canonical_scalar(ty, c1))),
                                                     Constant(ty, canonical_scalar(ty, c2))])
    if op is Op.FDIV:  # the textbook sigmoid 1 / (1 + exp(-x)), both fadd orders, fneg and fsub -0.0
        forms.append(lambda f, b: [Constant(ty, 1.0), b.fadd(b.exp(b.fneg(f.args[0])), 1.0)])
        forms.append(lambda f, b: [Constant(ty, 1.0), b.fadd(1.0, b.exp(b.fsub(-0.0, f.args[0])))])
    return forms


NESTED_CONSTANTS = {"f": [(3.0, 0.5)], "i": [(3, 5), (-5, 6)], "b": [(True, True), (False, True)]}
"""(c1, c2) for `(x op c1) op c2`: constants that no single-constant rule removes first."""

EDGE_INPUTS = {"f": [-0.0, 1.5, -math.inf, math.nan, 3.0, 1e-310],
               "i": [0, -7, 5, INT64_MIN, INT64_MAX, INT32_MIN, INT32_MAX], "b": [False, True]}
"""Argument values for the deterministic instcombine check (x takes them in order, y in reverse)."""


def test_every_instcombine_rule_fires_and_agrees_with_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rule of the table, on deterministic operand forms and edge-case inputs (extreme ints, nan,
    infinities, signed zeros): each fires somewhere and changes no result."""
    import isozyme.optimize.instcombine as module
    fired: set[tuple[Op, int]] = set()

    def recording(op: Op, index: int, rule: Callable) -> Callable:
        def wrapper(inst: Instruction, b: Builder) -> Value | None:
            result = rule(inst, b)
            if result is not None:
                fired.add((op, index))
            return result
        return wrapper

    for op, rules in RULES.items():
        monkeypatch.setitem(module.RULES, op, tuple(recording(op, i, r) for i, r in enumerate(rules)))
    for op in COMBINED_OPS:
        for types in all_operand_types(op):
            ty = shared_type(op, types)
            values = [canonical_scalar(ty, v) for v in EDGE_INPUTS[type_class(ty)]]
            inputs = [[x, y, i % 2 == 0, True] for i, (x, y) in enumerate(zip(values, values[::-1]))]
            for form in operand_forms(op, types):
                function, builder = combine_function(op, types)
                builder.ret(builder.emit(op, *form(function, builder)))
                check_pass(function, instcombine, inputs)
    never = [(str(op), index) for op, rules in RULES.items() for index in range(len(rules))
             if (op, index) not in fired and op in COMBINED_OPS]
    assert not never, f"rules that never fired: {never}"


def test_dim_of_an_alloc_is_its_extent_and_keeps_results() -> None:
    """`dim` of an alloc folds to the extent operand (filecheck: instcombine.ir); the interpreter agrees on
    every axis, and a negative extent still raises at the alloc."""
    function = parse_function("""
func @f(%n: i64, %m: i64) -> i64 {
entry:
  %a = alloc f64[%n, %m]
  %d0 = dim %a, 0
  %d1 = dim %a, 1
  %t = imul %d0, 1000
  %s = iadd %t, %d1
  ret %s
}
""")
    inputs = [[n, m] for n in (0, 1, 7) for m in (0, 3, 1000)] + [[-1, 2]]
    check_pass(function, instcombine, inputs)
    assert not any(inst.op is Op.DIM for inst in function.instructions())


def all_operand_types(op: Op) -> list[list[ScalarType]]:
    """Every well-typed operand type list of `op` (one per choice of its shared type)."""
    pattern = OP_INFO[op].operands
    shared = next(letter for letter in pattern if letter in SHARED_CLASSES)
    return [[ty if letter in SHARED_CLASSES else I1 for letter in pattern] for ty in CLASS_TYPES[shared]]


@pytest.mark.parametrize("exponent", [1.0, 0.0, -0.0])
@pytest.mark.parametrize("ty", [F32, F64])
def test_pow_rewrites_are_exact(exponent: float, ty: ScalarType) -> None:
    function = make_function("f", [("x", ty)], ty)
    b = Builder(function.add_block())
    b.ret(b.pow(function.args[0], Constant(ty, exponent)))
    values = as_type(ty, SPECIAL_FLOATS + [math.pi, -7.25, 1e300, -1e-300])
    assert check_pass(function, instcombine, [[v] for v in values])
    assert not any(inst.op is Op.POW for inst in function.instructions())


@pytest.mark.parametrize("exponent", [2.0, 3.0])
def test_squares_and_cubes_stay_powers(exponent: float) -> None:
    """The code generators emit `pow(x, 2.0)` and `pow(x, 3.0)` as products; expanded before AD, the
    product rule would make their derivative cost more (instcombine's docstring)."""
    function = make_function("f", [("x", F64)], F64)
    b = Builder(function.add_block())
    b.ret(b.pow(function.args[0], Constant(F64, exponent)))
    instcombine(function)
    assert [inst.op for inst in function.instructions()] == [Op.POW, Op.RET]


def test_commutative_ops_canonicalize_first_and_orderings_swap() -> None:
    for op, rules in RULES.items():
        if OP_INFO[op].commutative:
            assert rules[0] is constant_to_right, op
    assert {op for op, rules in RULES.items() if swap_ordering in rules} == {
        op for op in Op if str(op).split(".")[-1] in ("slt", "sle", "sgt", "sge", "olt", "ole", "ogt", "oge")}


def fastmath_function(flag: bool) -> Function:
    text = """
func @f(%x: f64, %out: f64[?]) FLAG {
bb0:
  %a = fadd %x, 0.0
  store %a, %out[0]
  %m = fmul %x, 0.0
  store %m, %out[1]
  %s = fsub %x, %x
  store %s, %out[2]
  ret
}"""
    return parse_function(text.replace("FLAG", "fastmath" if flag else ""))


def test_inexact_float_rules_need_the_fastmath_flag() -> None:
    strict = fastmath_function(False)
    assert not instcombine(strict)
    fast = fastmath_function(True)
    assert instcombine(fast)
    verify(fast)
    assert [inst.op for inst in fast.instructions()].count(Op.STORE) == 3
    assert {inst.op for inst in fast.instructions()} == {Op.STORE, Op.RET}
    assert set(FASTMATH_RULES) <= set(Op)


def test_commutative_constant_moves_right_and_orderings_flip() -> None:
    function = parse_function("""
func @f(%x: i64, %y: f64) -> i1 {
bb0:
  %a = iadd 5, %x
  %b = fmul 3.0, %y
  %c = icmp.slt 10, %a
  %d = fcmp.oge 1.5, %b
  %e = and %c, %d
  ret %e
}""")
    assert check_pass(function, instcombine, [[x, y] for x in (-6, 4, 6) for y in (0.0, 0.5, math.nan)])
    ops = [(inst.op, isinstance(inst.operands[1], Constant)) for inst in function.instructions() if inst.operands
           and inst.op is not Op.RET]
    assert ops == [(Op.IADD, True), (Op.FMUL, True), (Op.ICMP_SGT, True), (Op.FCMP_OLE, True), (Op.AND, False)]


# --- simplify-cfg -----------------------------------------------------------------------------------------


@st.composite
def random_programs(draw: st.DrawFn) -> Function:
    """`f(%c0, %c1: i1, %n: i64) -> i64` over a random CFG of up to 8 blocks.

    Each block but the entry may be empty (just `br`); the others carry an accumulator phi, one integer op
    and a terminator branching on an argument, a constant or a comparison of the accumulator. Phi inputs
    are the predecessor's value or a constant, so trivial phis and conflicting forwards both occur."""
    count = draw(st.integers(1, 8))
    function = make_function("f", [("c0", I1), ("c1", I1), ("n", I64)], I64)
    c0, c1, n = function.args
    blocks = [function.add_block(f"b{i}") for i in range(count)]
    shapes = [draw(st.sampled_from(["ret", "br", "cbr", "cbr"] + ["empty"] * 3 * (i > 0))) for i in range(count)]
    successor_counts = {"ret": 0, "br": 1, "empty": 1, "cbr": 2}
    targets = [draw(st.lists(st.integers(1, count - 1), min_size=min(successor_counts[shape], count - 1),
                             max_size=successor_counts[shape], unique=True)) if count > 1 else []
               for shape in shapes]
    preds = {i: [p for p in range(count) if i in targets[p]] for i in range(count)}
    empty = [shape == "empty" and len(targets[i]) == 1 for i, shape in enumerate(shapes)]
    phis: dict[int, Phi] = {}
    outs: dict[int, Value] = {}
    for i, block in enumerate(blocks):
        b = Builder(block)
        if empty[i]:
            b.br(blocks[targets[i][0]])
            continue
        acc: Value = n
        if preds[i]:
            acc = phis[i] = b.phi(I64)
        op = draw(st.sampled_from([Op.IADD, Op.IMUL, Op.ISUB, Op.XOR]))
        outs[i] = out = b.emit(op, acc, draw(st.sampled_from([0, 1, 2, 3, -1])))
        if not targets[i]:
            b.ret(out)
        elif len(targets[i]) == 1:
            b.br(blocks[targets[i][0]])
        else:
            kind = draw(st.sampled_from(["c0", "c1", "true", "false", "compare"]))
            condition = {"c0": c0, "c1": c1, "true": True, "false": False}.get(kind)
            if condition is None:
                condition = b.icmp_slt(out, draw(st.integers(-3, 20)))
            b.cbr(condition, *(blocks[t] for t in targets[i]))
    for i, phi in phis.items():
        for p in preds[i]:
            choices: list[Value | int] = [1, 2] + ([outs[p]] * 2 if p in outs else [n])
            value = draw(st.sampled_from(choices))
            phi.add_incoming(blocks[p], value if isinstance(value, Value) else Constant(I64, value))
    verify(function)
    return function


PROGRAM_INPUTS = [[c0, c1, n] for c0 in (False, True) for c1 in (False, True) for n in (0, 5, -3)]
STEP_LIMIT = 300


def check_program(function: Function, worker: Callable[[Function], bool]) -> None:
    """Like `check_pass`, skipping inputs on which the input program does not finish (passes only ever
    remove executed steps, so what finished before finishes after)."""
    before = [run(function, args, STEP_LIMIT) for args in PROGRAM_INPUTS]
    worker(function)
    verify(function)
    for args, expected in zip(PROGRAM_INPUTS, before):
        if expected != ("raise", StepLimitExceeded):
            actual = run(function, args, STEP_LIMIT)
            assert same_outcome(expected, actual), (args, expected, actual, print_function(function))


def block_is_forwarding(block: Block) -> bool:
    return len(block.instructions) == 1 and block.instructions[0].op is Op.BR


def assert_cfg_is_simplified(function: Function, entry: Block) -> None:
    """The invariants simplify-cfg promises, checked from their definitions."""
    assert function.blocks[0] is entry
    assert reachable_blocks(function) == set(function.blocks)
    preds = predecessors(function)
    for block in function.blocks:
        terminator = block.terminator
        assert terminator is not None
        if terminator.op is Op.CBR:
            assert not isinstance(terminator.operands[0], Constant), "constant branch left"
        if terminator.op is Op.BR and terminator.successors[0] is not block:
            assert preds[terminator.successors[0]] != [block], "straight-line pair left unmerged"
        for phi in block.phis:
            others = [v for v in phi.operands if v is not phi]
            assert not all(same_scalar_value(v, others[0]) for v in others), "trivial phi left"
        if block is not entry and block_is_forwarding(block) and block.successors[0] is not block:
            target = block.successors[0]
            # Kept only if some predecessor already reaches the target with a different phi value.
            assert any(p in preds[target] and any(not same_scalar_value(phi.incoming_value(p),
                                                                        phi.incoming_value(block))
                                                  for phi in target.phis)
                       for p in preds[block]), "forwarding block left without a phi conflict"


def same_scalar_value(a: Value, b: Value) -> bool:
    if a is b:
        return True
    return isinstance(a, Constant) and isinstance(b, Constant) and a.type == b.type and same_scalar(a.value, b.value)


@settings(max_examples=150, deadline=None)
@given(random_programs())
def test_simplify_cfg_keeps_semantics_and_reaches_its_invariants(function: Function) -> None:
    entry = function.entry
    check_program(function, simplify_cfg)
    assert_cfg_is_simplified(function, entry)
    assert not simplify_cfg(function), "simplify-cfg must reach its fixed point in one run"


def scalar_pipeline(function: Function) -> bool:
    """The three passes and dce until nothing changes, as O2's fixed point does."""
    changed = False
    while any([p(function) for p in (const_fold_then_verify, instcombine, simplify_cfg, dead_code_elimination)]):
        changed = True
    return changed


def const_fold_then_verify(function: Function) -> bool:
    changed = constant_folding(function)
    verify(function)
    return changed


@settings(max_examples=100, deadline=None)
@given(random_programs())
def test_scalar_passes_together_keep_semantics(function: Function) -> None:
    check_program(function, scalar_pipeline)


def test_simplify_cfg_on_a_loop_keeps_the_header_and_drops_the_empty_latch() -> None:
    function = parse_function("""
func @sum(%n: i64) -> i64 {
bb0:
  br bb1
bb1:
  %i = phi i64 [bb0: 0, bb3: %i.next]
  %s = phi i64 [bb0: 0, bb3: %s.next]
  %c = icmp.slt %i, %n
  cbr %c, bb2, bb4
bb2:
  %s.next = iadd %s, %i
  %i.next = iadd %i, 1
  br bb3
bb3:
  br bb1
bb4:
  ret %s
}""")
    assert check_pass(function, simplify_cfg, [[0], [1], [10]])
    assert [b.name for b in function.blocks] == ["bb0", "bb1", "bb2", "bb4"]
    assert function.blocks[1].phis[0].blocks[1].name == "bb2"  # type: ignore[union-attr]


def test_simplify_cfg_merges_a_chain_into_the_entry_and_reports_no_change_after() -> None:
    function = make_function("f", [("x", F64)], F64)
    entry, middle, last = (function.add_block(name) for name in ("entry", "middle", "last"))
    Builder(entry).br(middle)
    b = Builder(middle)
    y = b.fmul(function.args[0], 2.0)
    b.br(last)
    b = Builder(last)
    b.ret(b.fadd(y, 1.0))
    assert check_pass(function, simplify_cfg, [[1.5], [-0.0], [math.nan]])
    assert function.blocks == [entry]
    assert [inst.op for inst in entry.instructions] == [Op.FMUL, Op.FADD, Op.RET]
    assert not simplify_cfg(function)


def test_simplify_cfg_collapses_a_phi_of_equal_constants() -> None:
    function = parse_function("""
func @f(%c: i1) -> f64 {
bb0:
  cbr %c, bb1, bb2
bb1:
  %a = fadd 1.0, 1.0
  br bb2
bb2:
  %p = phi f64 [bb0: -0.0, bb1: -0.0]
  ret %p
}""")
    assert check_pass(function, simplify_cfg, [[True], [False]])
    assert not function.blocks[-1].phis


def test_simplify_cfg_never_merges_zero_and_minus_zero() -> None:
    function = parse_function("""
func @f(%c: i1) -> f64 {
bb0:
  cbr %c, bb1, bb2
bb1:
  br bb2
bb2:
  %p = phi f64 [bb0: 0.0, bb1: -0.0]
  ret %p
}""")
    assert not check_pass(function, simplify_cfg, [[True], [False]])
    assert len(function.blocks) == 3
