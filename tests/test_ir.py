"""The IR mutation API keeps use lists right and refuses unsafe edits; the builder derives types."""

from __future__ import annotations

import numpy as np
import pytest

from isozyme.ssa.builder import Builder, make_function
from isozyme.ssa.ir import Constant, IRError, Module, Phi
from isozyme.ssa.ops import OP_INFO, Op, Syntax
from isozyme.ssa.parser import parse_module
from isozyme.ssa.printer import print_function
from isozyme.ssa.types import F32, F64, I1, I32, I64, ArrayType
from isozyme.ssa.verifier import verify


def _straight_line():
    function = make_function("f", [("a", F64), ("b", F64)], F64)
    b = Builder(function.add_block())
    x = b.fadd(function.args[0], function.args[1], name="x")
    y = b.fmul(x, x, name="y")
    b.ret(y)
    return function, b, x, y


def test_use_lists_follow_operands() -> None:
    function, _, x, y = _straight_line()
    a = function.args[0]
    assert [(u.user, u.index) for u in a.uses] == [(x, 0)]
    assert [(u.user, u.index) for u in x.uses] == [(y, 0), (y, 1)]
    assert x.users == [y]


def test_replace_all_uses_with() -> None:
    function, _, x, y = _straight_line()
    b_arg = function.args[1]
    x.replace_all_uses_with(b_arg)
    assert y.operands == (b_arg, b_arg)
    assert x.uses == [] and len(b_arg.uses) == 3
    verify(function)


def test_replace_with_another_type_is_refused() -> None:
    _, _, x, _ = _straight_line()
    with pytest.raises(IRError, match="type f64 with one of type i64"):
        x.replace_all_uses_with(Constant(I64, 1))


def test_erase_of_a_used_value_is_refused() -> None:
    _, _, x, _ = _straight_line()
    with pytest.raises(IRError, match="still used by fmul"):
        x.erase()


def test_erase_drops_operand_uses() -> None:
    function, b, x, y = _straight_line()
    ret = function.entry.terminator
    ret.set_operand(0, x)
    y.erase()
    assert y.block is None and y not in function.entry.instructions
    assert len(x.uses) == 1 and x.users == [ret]
    verify(function)


def test_set_operand_moves_the_use() -> None:
    function, _, x, y = _straight_line()
    y.set_operand(1, function.args[0])
    assert [u.index for u in x.uses] == [0]
    assert [(u.user, u.index) for u in function.args[0].uses] == [(x, 0), (y, 1)]


def test_phi_incoming_edits_reindex_uses() -> None:
    module = parse_module("""
func @f(%c: i1, %a: f64, %b: f64) -> f64 {
bb0:
  cbr %c, bb1, bb2
bb1:
  br bb2
bb2:
  %p = phi f64 [bb0: %a, bb1: %b]
  ret %p
}""")
    function = module["f"]
    bb0, bb1, bb2 = function.blocks
    phi = bb2.phis[0]
    a, b = function.args[1], function.args[2]
    phi.remove_incoming(bb0)
    assert phi.incoming == [(bb1, b)] and a.uses == []
    assert [(u.user, u.index) for u in b.uses] == [(phi, 0)]
    phi.add_incoming(bb0, a)
    phi.set_incoming_value(bb1, a)
    assert phi.incoming_value(bb1) is a and phi.incoming_value(bb0) is a
    assert sorted(u.index for u in a.uses) == [0, 1]
    verify(function)


def test_move_before_keeps_operands() -> None:
    function, b, x, y = _straight_line()
    z = b.before(function.entry.terminator).fsub(x, 1.0, name="z")
    z.move_before(y)
    assert function.entry.instructions.index(z) == 1
    assert z.operands[0] is x
    verify(function)


def test_append_of_an_instruction_already_in_a_block_is_refused() -> None:
    function, _, x, _ = _straight_line()
    with pytest.raises(IRError, match="already in a block"):
        function.add_block().append(x)


def test_remove_block_refuses_values_used_elsewhere() -> None:
    module = parse_module("""
func @f(%a: f64) -> f64 {
bb0:
  %x = fadd %a, %a
  br bb1
bb1:
  ret %x
}""")
    function = module["f"]
    before = print_function(function)
    with pytest.raises(IRError, match="used in another block"):
        function.remove_block(function.blocks[0])
    assert print_function(function) == before  # refused before anything was taken apart
    verify(function)


def test_remove_dead_block() -> None:
    module = parse_module("""
func @f(%a: f64) -> f64 {
bb0:
  ret %a
bb1:
  %x = fadd %a, %a
  %y = fmul %x, %a
  ret %y
}""")
    function = module["f"]
    function.remove_block(function.blocks[1])
    assert len(function.blocks) == 1 and len(function.args[0].uses) == 1
    verify(function)


def test_builder_derives_types_and_constants() -> None:
    function = make_function("f", [("v", ArrayType(F32, 2)), ("k", I32)], F32)
    b = Builder(function.add_block())
    v, k = function.args
    e = b.load(v, 0, 1)
    s = b.fadd(e, 0.5)
    k2 = b.imul(k, 3)
    c = b.icmp_slt(k2, 7)
    sel = b.select(c, s, e)
    wide = b.cast(Op.SEXT, k2, I64)
    b.store(sel, v, wide, 0)
    b.ret(sel)
    assert e.type == F32 and s.operands[1].type == F32
    assert k2.operands[1].type == I32 and c.type == I1 and sel.type == F32
    assert [i.type for i in e.operands[1:]] == [I64, I64]
    verify(function)


def test_builder_knows_every_operands_op() -> None:
    b = Builder()
    for op, info in OP_INFO.items():
        if info.syntax is Syntax.OPERANDS:
            method = op.value.replace(".", "_") + ("_" if op.value in ("and", "or") else "")
            assert callable(getattr(b, method))
    with pytest.raises(AttributeError):
        b.frobnicate  # noqa: B018


def test_phi_builder_places_phis_first() -> None:
    function = make_function("f", [], F64)
    entry, loop = function.add_block(), function.add_block()
    Builder(entry).br(loop)
    b = Builder(loop)
    first = b.phi(F64, [(entry, 0.0)], name="p")
    b.br(loop)
    second = b.phi(F64, [(entry, 1.0)], name="q")
    assert loop.instructions[:2] == [first, second] and isinstance(second, Phi)


def test_constants_are_canonical() -> None:
    assert Constant(I32, 2**31).value == -(2**31)
    assert Constant(I64, 2**64 + 5).value == 5
    assert Constant(F32, 0.1).value == float(np.float32(0.1))
    assert Constant(I1, 2).value is True
    with pytest.raises(IRError):
        Constant(ArrayType(F64, 1), 0)
    with pytest.raises(IRError, match="not a value of type i64"):
        Constant(I64, 2.7)
    big = 2**60 + 2**36 + 1  # rounding through f64 first would lose the 2**36 and round down
    assert Constant(F32, big).value == float(np.float32(np.int64(big)))
    assert Constant(F32, big).value == 2**60 + 2**37


def test_module_rejects_duplicate_names() -> None:
    module = Module()
    make_function("f", [], F64, module)
    with pytest.raises(IRError, match="already has a function @f"):
        make_function("f", [], F64, module)
