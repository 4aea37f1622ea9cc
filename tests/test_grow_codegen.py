"""How the LLVM backend grows a tape (`grow %t, %n`): it reallocates the tape's one block in place of the
old one in the chain of local arrays, so a tape that grows to m elements holds m elements' memory, not the
sum of every block it outgrew (a gradient's stack tapes at n = 2**20 touched twice their final size when
each grow took a new block and copied the old one into it). The results are checked against plain Python.
"""

from __future__ import annotations

import re

import pytest

from isozyme.codegen.abi import CodegenOptions
from isozyme.optimize.pass_manager import PassOptions, run_passes
from isozyme.runtime.llvm_backend import EntrySignature, compile_native, llvm_ir
from isozyme.ssa.ir import Module
from isozyme.ssa.parser import parse_module

INTERLEAVED = """
; Two tapes of capacity 1 grown in turns, with a fixed array allocated after them in every iteration (so
; the chain of local arrays holds other blocks before each tape's): pops a[j] * b[j] + c[0], last j first.
func @interleaved(%n: i64) -> i64 {
entry:
  %a = alloc i64[1] growable
  %b = alloc i64[1] growable
  br head
head:
  %i = phi i64 [entry: 0, body: %i.next]
  %more = icmp.slt %i, %n
  cbr %more, body, back
body:
  %i.next = iadd %i, 1
  grow %a, %i.next
  %c = alloc i64[1]
  store %i, %c[0]
  %i3 = imul %i, 3
  store %i3, %a[%i]
  grow %b, %i.next
  %held = load %c[0]
  %i1 = iadd %held, 1
  store %i1, %b[%i]
  br head
back:
  %j = phi i64 [head: %n, back.body: %j.next]
  %s = phi i64 [head: 0, back.body: %s.next]
  %left = icmp.sgt %j, 0
  cbr %left, back.body, exit
back.body:
  %j.next = isub %j, 1
  %x = load %a[%j.next]
  %y = load %b[%j.next]
  %xy = imul %x, %y
  %s.next = iadd %s, %xy
  br back
exit:
  ret %s
}
"""


def _module(pipeline: str) -> Module:
    module = parse_module(INTERLEAVED)
    run_passes(module, [pipeline], PassOptions(verify_each=True))
    return module


@pytest.mark.parametrize("boundscheck", [False, True], ids=["unchecked", "checked"])
@pytest.mark.parametrize("pipeline", ["O0", "O2"])
def test_interleaved_tapes_keep_their_elements(pipeline: str, boundscheck: bool) -> None:
    module = parse_module(INTERLEAVED)
    compiled = compile_native("grow_interleaved", module, EntrySignature.of(module["interleaved"]),
                              f"grow codegen {pipeline}", lambda m: _optimized(m, pipeline),
                              CodegenOptions(boundscheck=boundscheck), use_disk_cache=False)
    for n in (0, 1, 2, 3, 17, 1000, 70_000):
        assert compiled(n) == sum(3 * i * (i + 1) for i in range(n)), n  # type: ignore[operator]


def _optimized(module: Module, pipeline: str):  # type: ignore[no-untyped-def]
    run_passes(module, [pipeline], PassOptions(verify_each=True))
    return module["interleaved"]


def test_a_grow_reallocates_the_block_and_copies_nothing_itself() -> None:
    module = _module("O0")
    text = llvm_ir(module, module["interleaved"], CodegenOptions(), optimized=False)
    assert len(re.findall(r'call i8\* @"?realloc"?\(', text)) == 2, "one realloc per grow"
    assert "memcpy" not in text
