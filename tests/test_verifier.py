"""The verifier rejects each kind of invalid IR with its own message, and accepts valid IR."""

from __future__ import annotations

from pathlib import Path

import pytest

from isozyme.ssa.builder import Builder, make_function
from isozyme.ssa.ir import Module
from isozyme.ssa.ops import Op
from isozyme.ssa.parser import parse_module
from isozyme.ssa.types import F64, I64, ArrayType
from isozyme.ssa.verifier import VerificationError, function_problems, verify

# (name, IR text, the one message it must produce)
TEXT_CASES = [
    ("use before def", """
func @f(%a: f64) -> f64 {
bb0:
  %y = fadd %x, %a
  %x = fadd %a, %a
  ret %y
}""", "@f: bb0: %x is used by %y (fadd) before it is defined"),
    ("def does not dominate use", """
func @f(%c: i1, %a: f64) -> f64 {
bb0:
  cbr %c, bb1, bb2
bb1:
  %x = fadd %a, %a
  br bb2
bb2:
  %y = fmul %x, %a
  ret %y
}""", "@f: bb2: definition of %x in bb1 does not dominate its use by %y (fmul)"),
    ("phi operand does not dominate its edge", """
func @f(%c: i1, %a: f64) -> f64 {
bb0:
  cbr %c, bb1, bb2
bb1:
  %x = fadd %a, %a
  br bb3
bb2:
  br bb3
bb3:
  %p = phi f64 [bb1: %x, bb2: %x]
  ret %p
}""", "@f: bb3: incoming value %x of phi %p from bb2 does not dominate the end of bb2"),
    ("phi misses a predecessor", """
func @f(%c: i1) -> f64 {
bb0:
  cbr %c, bb1, bb2
bb1:
  br bb2
bb2:
  %p = phi f64 [bb1: 1.0]
  ret %p
}""", "@f: bb2: phi %p has no incoming value for predecessor bb0"),
    ("phi names a non-predecessor", """
func @f() -> f64 {
bb0:
  br bb1
bb1:
  %p = phi f64 [bb0: 1.0, bb2: 2.0]
  ret %p
bb2:
  ret 0.0
}""", "@f: bb1: phi %p has an incoming value for bb2, which is not a predecessor"),
    ("phi names a predecessor twice", """
func @f() -> f64 {
bb0:
  br bb1
bb1:
  %p = phi f64 [bb0: 1.0, bb0: 2.0]
  ret %p
}""", "@f: bb1: phi %p lists predecessor bb0 more than once"),
    ("phi incoming type", """
func @f() -> f64 {
bb0:
  br bb1
bb1:
  %p = phi f64 [bb0: 1]
  ret %p
}""", "@f: bb1: phi %p of type f64 has an incoming value of type i64 from bb0"),
    ("phi after an instruction", """
func @f() -> f64 {
bb0:
  br bb1
bb1:
  %a = fadd 1.0, 2.0
  %p = phi f64 [bb0: 1.0]
  ret %p
}""", "@f: bb1: phi %p is not at the start of the block"),
    ("block without terminator", """
func @f(%a: f64) -> f64 {
bb0:
  %x = fadd %a, %a
}""", "@f: bb0: block does not end with a terminator"),
    ("terminator in the middle", """
func @f(%a: f64) {
bb0:
  ret
  %x = fadd %a, %a
  ret
}""", "@f: bb0: terminator ret is not the last instruction of the block"),
    ("entry block with a predecessor", """
func @f(%c: i1) {
bb0:
  cbr %c, bb0, bb1
bb1:
  ret
}""", "@f: bb0: entry block has predecessors: bb0"),
    ("cbr with one target twice", """
func @f(%c: i1) {
bb0:
  cbr %c, bb1, bb1
bb1:
  ret
}""", "@f: bb0: cbr has the same target bb1 twice (use br)"),
    ("mixed float types", """
func @f(%a: f64, %b: f32) -> f64 {
bb0:
  %x = fadd %a, %b
  ret %x
}""", "@f: bb0: %x (fadd): operands must have one type, got f32 and f64"),
    ("icmp on floats", """
func @f(%a: f64) -> i1 {
bb0:
  %x = icmp.slt %a, %a
  ret %x
}""", "@f: bb0: %x (icmp.slt): operand 0 must be an integer or i1 type, got f64"),
    ("fadd on integers", """
func @f(%a: i64) -> i64 {
bb0:
  %x = fadd %a, %a
  ret %x
}""", "@f: bb0: %x (fadd): operand 0 must be a float type, got i64"),
    ("wrong operand count", """
func @f(%a: f64) -> f64 {
bb0:
  %x = fadd %a, %a, %a
  ret %x
}""", "@f: bb0: %x (fadd): takes 2 operand(s), got 3"),
    ("cbr on an integer", """
func @f(%n: i64) {
bb0:
  cbr %n, bb1, bb2
bb1:
  ret
bb2:
  ret
}""", "@f: bb0: cbr: condition must be i1, got i64"),
    ("ret of the wrong type", """
func @f(%n: i64) -> f64 {
bb0:
  ret %n
}""", "@f: bb0: ret: returns a value of type i64, the function returns f64"),
    ("ret without a value", """
func @f() -> f64 {
bb0:
  ret
}""", "@f: bb0: ret: returns nothing from a function that returns f64"),
    ("ret of a value from a void function", """
func @f() {
bb0:
  ret 1.0
}""", "@f: bb0: ret: returns a value from a function that returns nothing"),
    ("too few indices", """
func @f(%m: f64[?,?]) -> f64 {
bb0:
  %x = load %m[0]
  ret %x
}""", "@f: bb0: %x (load): a 2-d array takes 2 index(es), got 1"),
    ("index of type i32", """
func @f(%v: f64[?]) -> f64 {
bb0:
  %x = load %v[0:i32]
  ret %x
}""", "@f: bb0: %x (load): index 0 must be i64, got i32"),
    ("store of the wrong type", """
func @f(%v: f64[?]) {
bb0:
  store 1, %v[0]
  ret
}""", "@f: bb0: store: stores a value of type i64 into an array of f64"),
    ("dim axis out of range", """
func @f(%v: f64[?]) -> i64 {
bb0:
  %n = dim %v, 1
  ret %n
}""", "@f: bb0: %n (dim): axis 1 is out of range for a 1-d array"),
    ("alloc extent of type f64", """
func @f() {
bb0:
  %a = alloc f64[2.0]
  ret
}""", "@f: bb0: %a (alloc): extent 0 must be i64, got f64"),
    ("fpext that narrows", """
func @f(%a: f64) -> f32 {
bb0:
  %x = fpext %a to f32
  ret %x
}""", "@f: bb0: %x (fpext): must widen, but f64 to f32 does not"),
    ("sitofp from a float", """
func @f(%a: f64) -> f64 {
bb0:
  %x = sitofp %a to f64
  ret %x
}""", "@f: bb0: %x (sitofp): converts from an integer type, got f64"),
    ("call with too few arguments", """
func @f(%a: f64) -> f64 {
bb0:
  %x = call @g(%a)
  ret %x
}

func @g(%a: f64, %n: i64) -> f64 {
bb0:
  ret %a
}""", "@f: bb0: %x (call): passes 1 argument(s), @g takes 2"),
    ("call with an argument of the wrong type", """
func @f(%a: f64) -> f64 {
bb0:
  %x = call @g(%a, %a)
  ret %x
}

func @g(%a: f64, %n: i64) -> f64 {
bb0:
  ret %a
}""", "@f: bb0: %x (call): argument 1 has type f64, @g expects i64"),
    ("assert on a float", """
func @f(%a: f64) {
bb0:
  assert %a, "positive"
  ret
}""", "@f: bb0: assert: operand 0 must be i1, got f64"),
    ("assert raising an unknown exception", """
func @f(%a: i1) {
bb0:
  assert %a, "positive", KeyError
  ret
}""", "@f: bb0: assert: an assert raises one of AssertionError, OverflowError, not 'KeyError'"),
]


@pytest.mark.parametrize("name, text, message", TEXT_CASES, ids=[c[0] for c in TEXT_CASES])
def test_invalid_text_is_rejected_with_its_message(name: str, text: str, message: str) -> None:
    module = parse_module(text)
    with pytest.raises(VerificationError) as error:
        verify(module)
    assert error.value.problems == [message]


def test_every_negative_case_has_its_own_message() -> None:
    messages = [message.split(": ", 2)[-1] for _, _, message in TEXT_CASES]
    assert len(set(messages)) == len(messages)


# --- cases the text form cannot express: built with the builder ------------------------------------------

def _function_with_block(module: Module | None = None, name: str = "f"):
    function = make_function(name, [("a", F64)], F64, module)
    return function, Builder(function.add_block())


def _problems(function) -> list[str]:
    with pytest.raises(VerificationError) as error:
        verify(function)
    return error.value.problems


def test_function_without_blocks() -> None:
    function = make_function("f", [], F64)
    assert _problems(function) == ["@f: function has no blocks"]


def test_instruction_listed_in_two_blocks() -> None:
    function, b = _function_with_block()
    x = b.fadd(function.args[0], 1.0, name="x")
    second = function.add_block()
    b.br(second)
    second.instructions.append(x)  # bypassing Block.append, as a buggy pass might
    Builder(second).ret(x)
    problems = _problems(function)
    assert "@f: bb1: %x (fadd) appears in more than one place (also in bb0)" in problems
    assert "@f: bb1: %x (fadd) is listed in this block but its .block is another" in problems


def test_operand_from_another_function() -> None:
    module = Module()
    other, ob = _function_with_block(module, "other")
    foreign = ob.fmul(other.args[0], 2.0, name="foreign")
    ob.ret(foreign)
    function, b = _function_with_block(module)
    b.ret(b.fadd(function.args[0], foreign, name="x"))
    assert _problems(function) == ["@f: bb0: operand 1 of %x (fadd) is not defined in this function"]


def test_argument_of_another_function() -> None:
    other, _ = _function_with_block(name="other")
    function, b = _function_with_block()
    b.ret(b.fadd(function.args[0], other.args[0], name="x"))
    assert _problems(function) == ["@f: bb0: %x (fadd) uses an argument of another function"]


def test_use_of_a_void_value() -> None:
    function = make_function("f", [("v", ArrayType(F64, 1))], F64)
    b = Builder(function.add_block())
    store = b.store(1.0, function.args[0], 0)
    b.ret(b.emit(Op.FADD, store, 1.0, name="x", type=F64))
    assert "@f: bb0: operand 0 of %x (fadd) is store, which has no value" in _problems(function)


def test_corrupt_use_list() -> None:
    function, b = _function_with_block()
    x = b.fadd(function.args[0], 1.0, name="x")
    b.ret(x)
    x.uses.clear()  # a pass that edited operands by hand
    assert _problems(function) == ["@f: bb0: use list of %x lacks its use by ret"]


def test_branch_to_a_block_of_another_function() -> None:
    other, ob = _function_with_block(name="other")
    ob.ret(1.0)
    function, b = _function_with_block()
    b.br(other.entry)
    assert _problems(function) == ["@f: bb0: br targets a block that is not in this function"]


def test_result_type_that_does_not_follow_from_the_operands() -> None:
    function = make_function("f", [("a", F64)], I64)
    b = Builder(function.add_block())
    b.ret(b.emit(Op.FADD, function.args[0], 1.0, name="x", type=I64))
    assert _problems(function) == ["@f: bb0: %x (fadd): result type i64 does not match the expected f64"]


def test_callee_outside_the_module() -> None:
    module = Module()
    stray, sb = _function_with_block(name="stray")
    sb.ret(stray.args[0])
    function, b = _function_with_block(module)
    b.ret(b.call(stray, function.args[0], name="x"))
    assert _problems(function) == ["@f: bb0: %x (call): callee @stray is not in the caller's module"]


def test_block_of_another_function_in_the_list() -> None:
    other, ob = _function_with_block(name="other")
    ob.ret(1.0)
    function, b = _function_with_block()
    b.ret(1.0)
    function.blocks.append(other.entry)
    assert "@f: bb1: block does not belong to this function (its .function is another)" in _problems(function)


def test_several_problems_are_all_reported() -> None:
    module = parse_module("""
func @f(%a: f64, %n: i64) -> f64 {
bb0:
  %x = fadd %a, %n
  %y = iadd %a, %n
  ret %x
}""")
    problems = function_problems(module["f"])
    assert len(problems) == 2


# --- valid IR is accepted ---------------------------------------------------------------------------------

VALID_FILES = sorted((Path(__file__).parent / "filecheck").glob("[io]*/*.ir"))


@pytest.mark.parametrize("path", VALID_FILES, ids=lambda p: p.name)
def test_valid_files_verify(path: Path) -> None:
    verify(parse_module(path.read_text(), str(path)))


def test_unreachable_block_may_use_anything_dominance_wise() -> None:
    module = parse_module("""
func @f(%a: f64) -> f64 {
bb0:
  ret %a
bb1:
  %y = fadd %x, %a
  br bb2
bb2:
  %x = fadd %a, %a
  br bb1
}""")
    verify(module)


def test_builder_mag_verifies() -> None:
    function = make_function("mag", [("x", ArrayType(F64, 1)), ("n", I64)], F64)
    entry, header, body, exit_ = (function.add_block() for _ in range(4))
    Builder(entry).br(header)
    b = Builder(header)
    i = b.phi(I64, [(entry, 0)], name="i")
    s = b.phi(F64, [(entry, 0.0)], name="s")
    b.cbr(b.icmp_slt(i, function.args[1], name="c"), body, exit_)
    b.at_end(body)
    xi = b.load(function.args[0], i, name="xi")
    s_next = b.fadd(s, b.fmul(xi, xi, name="sq"), name="s.next")
    i_next = b.iadd(i, 1, name="i.next")
    b.br(header)
    i.add_incoming(body, i_next)
    s.add_incoming(body, s_next)
    r = b.at_end(exit_).sqrt(s, name="r")
    b.ret(r)
    verify(function)
    assert s.users == [s_next, r]
