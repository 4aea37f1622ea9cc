"""Growable local arrays (`alloc ... growable`, `grow %t, %n`): the tapes of loops with unknown trip counts.

The text form round-trips; the verifier keeps a growable array to load, store, atomic_add and grow; the
interpreter grows by doubling and keeps the elements; every pass and O2 keep the interpreter's results
bit-identical; compiled code (unchecked and checked) computes what the interpreter does. Expected values
come from plain Python and numpy, never from the code under test.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from isozyme.codegen.abi import CodegenOptions
from isozyme.optimize.dead_code_elimination import dead_code_elimination
from isozyme.optimize.pass_manager import REGISTRY, PassOptions, run_passes
from isozyme.runtime.llvm_backend import EntrySignature, compile_native
from isozyme.ssa.builder import Builder, make_function
from isozyme.ssa.interpreter import run_function
from isozyme.ssa.ir import Module
from isozyme.ssa.ops import Op
from isozyme.ssa.parser import ParseError, parse_module
from isozyme.ssa.printer import print_function, print_module
from isozyme.ssa.types import F64, I64, ArrayType
from isozyme.ssa.verifier import VerificationError, verify

TAPES = """
; x[0..n) pushed onto a tape of capacity 1, popped in reverse: the sum of x[j] * (j + 1), last j first.
func @push_pop(%x: f64[?], %n: i64) -> f64 {
entry:
  %t = alloc f64[1] growable
  br head
head:
  %i = phi i64 [entry: 0, body: %i.next]
  %c = icmp.slt %i, %n
  cbr %c, body, back
body:
  %i.next = iadd %i, 1
  grow %t, %i.next
  %xi = load %x[%i]
  store %xi, %t[%i]
  br head
back:
  %j = phi i64 [head: %n, back.body: %j.next]
  %s = phi f64 [head: 0.0, back.body: %s.next]
  %more = icmp.sgt %j, 0
  cbr %more, back.body, exit
back.body:
  %j.next = isub %j, 1
  %v = load %t[%j.next]
  %w = sitofp %j to f64
  %vw = fmul %v, %w
  %s.next = fadd %s, %vw
  br back
exit:
  ret %s
}

; A zeroed i64 tape of capacity 0 counting i // 3 for i < n with atomic adds into freshly grown slots;
; the sum of count[p] * (p + 1).
func @counts(%n: i64) -> i64 {
entry:
  %t = alloc i64[0] growable zeroed
  br head
head:
  %i = phi i64 [entry: 0, body: %i.next]
  %c = icmp.slt %i, %n
  cbr %c, body, sum.entry
body:
  %k = ifloordiv %i, 3
  %k1 = iadd %k, 1
  grow %t, %k1
  atomic_add 1, %t[%k]
  %i.next = iadd %i, 1
  br head
sum.entry:
  %m.1 = iadd %n, 2
  %m = ifloordiv %m.1, 3
  br sum
sum:
  %p = phi i64 [sum.entry: 0, sum.body: %p.next]
  %s = phi i64 [sum.entry: 0, sum.body: %s.next]
  %go = icmp.slt %p, %m
  cbr %go, sum.body, exit
sum.body:
  %count = load %t[%p]
  %p.next = iadd %p, 1
  %weighted = imul %count, %p.next
  %s.next = iadd %s, %weighted
  br sum
exit:
  ret %s
}

; A while loop: the Collatz sequence of %v pushed until it reaches 1, then popped with weights.
func @collatz(%v: i64) -> i64 {
entry:
  %t = alloc i64[1] growable
  br head
head:
  %a = phi i64 [entry: %v, body.join: %a.next]
  %n = phi i64 [entry: 0, body.join: %n.next]
  %c = icmp.sgt %a, 1
  cbr %c, body, back
body:
  %n.next = iadd %n, 1
  grow %t, %n.next
  store %a, %t[%n]
  %r = ifloormod %a, 2
  %even = icmp.eq %r, 0
  cbr %even, halve, triple
halve:
  %h = ifloordiv %a, 2
  br body.join
triple:
  %a3 = imul %a, 3
  %a31 = iadd %a3, 1
  br body.join
body.join:
  %a.next = phi i64 [halve: %h, triple: %a31]
  br head
back:
  %j = phi i64 [head: %n, back.body: %j.next]
  %s = phi i64 [head: 0, back.body: %s.next]
  %more = icmp.sgt %j, 0
  cbr %more, back.body, exit
back.body:
  %j.next = isub %j, 1
  %e = load %t[%j.next]
  %ej = imul %e, %j
  %s.next = iadd %s, %ej
  br back
exit:
  ret %s
}

; In a loop that grows the tape, the load of %t[0] has invariant operands but must stay after each grow,
; and the stored value is read back after the grow that follows the store of the previous iteration.
func @first_times_last(%x: f64[?], %n: i64) -> f64 {
entry:
  %t = alloc f64[1] growable
  store 0.5, %t[0]
  br head
head:
  %i = phi i64 [entry: 0, body: %i.next]
  %s = phi f64 [entry: 0.0, body: %s.next]
  %c = icmp.slt %i, %n
  cbr %c, body, exit
body:
  %i.next = iadd %i, 1
  %want = iadd %i, 2
  grow %t, %want
  %xi = load %x[%i]
  store %xi, %t[%i.next]
  %before = load %t[%i]
  %want.more = iadd %i, 3
  grow %t, %want.more
  %first = load %t[0]
  %last = load %t[%i.next]
  %p = fmul %first, %last
  %q = fadd %p, %before
  %s.next = fadd %s, %q
  br head
exit:
  ret %s
}

; @push_pop called: inline copies its tape into the caller.
func @caller(%x: f64[?], %n: i64) -> f64 {
entry:
  %r = call @push_pop(%x, %n)
  %r2 = fmul %r, 2.0
  ret %r2
}
"""

PEEK = """
; A zeroed tape of capacity %c grown to %n, read at %k: the bounds check sees the current extent.
func @peek(%c: i64, %n: i64, %k: i64) -> f64 {
entry:
  %t = alloc f64[%c] growable zeroed
  grow %t, %n
  %v = load %t[%k]
  ret %v
}

func @peek_fill(%c: i64, %n: i64, %k: i64) -> f64 {
entry:
  %t = alloc f64[%c] growable
  store 1.5, %t[0]
  grow %t, %n
  %v = load %t[%k]
  ret %v
}
"""

SIZES = [0, 1, 2, 1000, 100000]


# --- independent oracles: plain Python over numpy arrays ---------------------------------------------------

def expected_push_pop(x: np.ndarray) -> float:
    total = 0.0
    for j in reversed(range(len(x))):
        total += float(x[j]) * float(j + 1)
    return total


def expected_counts(n: int) -> int:
    counts = np.bincount(np.arange(n) // 3) if n else np.zeros(0, dtype=np.int64)
    return int(np.sum(counts * np.arange(1, len(counts) + 1)))


def expected_collatz(v: int) -> int:
    sequence = []
    while v > 1:
        sequence.append(v)
        v = v // 2 if v % 2 == 0 else 3 * v + 1
    return sum(value * (j + 1) for j, value in enumerate(sequence))


def expected_first_times_last(x: np.ndarray) -> float:
    total, previous = 0.0, 0.5
    for xi in x:
        total += (0.5 * float(xi) + previous)
        previous = float(xi)
    return total


def expected_extent(capacity: int, n: int) -> int:
    return capacity if n <= capacity else max(n, 2 * capacity)


def _bits(value: object) -> object:
    return struct.pack("<d", value) if isinstance(value, float) else value


def _inputs(name: str, sizes: list[int]) -> list[tuple]:
    rng = np.random.default_rng(7)
    if name == "counts":
        return [(n,) for n in sizes]
    if name == "collatz":
        return [(v,) for v in (1, 2, 3, 6, 7, 27, 97)]
    return [(rng.standard_normal(n), n) for n in sizes]


ORACLES = {
    "push_pop": lambda x, n: expected_push_pop(x),
    "counts": expected_counts,
    "collatz": expected_collatz,
    "first_times_last": lambda x, n: expected_first_times_last(x),
    "caller": lambda x, n: expected_push_pop(x) * 2.0,
}


def tapes() -> Module:
    module = parse_module(TAPES, "tapes.ir")
    verify(module)
    return module


def peeks() -> Module:
    return parse_module(PEEK, "peek.ir")


# --- text form and builder ---------------------------------------------------------------------------------

def test_text_round_trips_with_the_flags_and_grow() -> None:
    printed = print_module(tapes())
    assert print_module(parse_module(printed)) == printed
    assert "  %t = alloc i64[0] growable zeroed\n" in printed
    assert "  grow %t, %i.next\n" in printed


def test_builder_makes_what_the_parser_reads() -> None:
    function = make_function("tape", [("n", I64)], F64)
    b = Builder(function.add_block("entry"))
    tape = b.alloc(F64, 16, growable=True, name="t")
    b.grow(tape, function.args[0])
    b.store(2.0, tape, 20)
    b.ret(b.load(tape, 20, name="v"))
    verify(function)
    text = print_function(function)
    assert text == ("func @tape(%n: i64) -> f64 {\nentry:\n  %t = alloc f64[16] growable\n  grow %t, %n\n"
                    "  store 2.0, %t[20]\n  %v = load %t[20]\n  ret %v\n}")
    assert print_module(parse_module(text)) == text + "\n"
    assert run_function(function, 21) == 2.0


@pytest.mark.parametrize(("text", "message"), [
    ("func @f() {\nbb0:\n  %t = alloc f64[1] growable\n  grow %t\n  ret\n}", "expected ','"),
    ("func @f() {\nbb0:\n  %t = alloc f64[1] growable\n  %g = grow %t, 1\n  ret\n}",
     "cannot derive a result type for grow"),
])
def test_malformed_grow_is_a_parse_error(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_module(text)


# --- the verifier ------------------------------------------------------------------------------------------

INVALID = [
    ("dim of a growable array", """
func @f() -> i64 {
bb0:
  %t = alloc f64[1] growable
  %d = dim %t, 0
  ret %d
}""", "@f: bb0: %t (alloc): a growable array may only be the array operand of load, store, atomic_add or "
       "grow, or an argument of a call; it is operand 0 of %d (dim)"),
    ("grow of a non-growable alloc", """
func @f() {
bb0:
  %t = alloc f64[1]
  grow %t, 4
  ret
}""", "@f: bb0: grow: operand 0 %t is an alloc without the growable flag"),
    ("phi of a growable array", """
func @f(%c: i1) -> f64 {
bb0:
  %t = alloc f64[1] growable
  %u = alloc f64[1]
  cbr %c, bb1, bb2
bb1:
  br bb2
bb2:
  %p = phi f64[?] [bb0: %t, bb1: %u]
  %v = load %p[0]
  ret %v
}""", "@f: bb0: %t (alloc): a growable array may only be the array operand of load, store, atomic_add or "
       "grow, or an argument of a call; it is operand 0 of %p (phi)"),
    ("grow of an argument", """
func @f(%x: f64[?]) {
bb0:
  grow %x, 4
  ret
}""", "@f: bb0: grow: operand 0 must be a growable alloc, got %x of type f64[?]"),
    ("2-d growable array", """
func @f() {
bb0:
  %t = alloc f64[1, 2] growable
  ret
}""", "@f: bb0: %t (alloc): a growable array must be 1-d, got a 2-d one"),
    ("grow by a float", """
func @f() {
bb0:
  %t = alloc f64[1] growable
  grow %t, 4.0
  ret
}""", "@f: bb0: grow: operand 1 must be i64, got f64"),
]


@pytest.mark.parametrize(("name", "text", "message"), INVALID, ids=[case[0] for case in INVALID])
def test_invalid_growable_ir_is_rejected(name: str, text: str, message: str) -> None:
    with pytest.raises(VerificationError) as error:
        verify(parse_module(text))
    assert error.value.problems == [message]


def test_a_tape_may_be_loaded_stored_added_to_and_grown() -> None:
    verify(tapes())
    verify(parse_module(PEEK))


# --- the interpreter ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("capacity", "n"), [(1, 5), (3, 4), (4, 4), (4, 2), (0, 0), (0, 3), (2, -5), (5, 11)])
def test_grow_doubles_or_takes_n_and_never_shrinks(capacity: int, n: int) -> None:
    peek = peeks()["peek"]
    extent = expected_extent(capacity, n)
    if extent:
        assert run_function(peek, capacity, n, extent - 1) == 0.0
    with pytest.raises(IndexError, match=rf"index \({extent},\) is out of bounds for an array of shape \({extent},\)"):
        run_function(peek, capacity, n, extent)


def test_grow_keeps_the_elements_and_fills_new_ones_like_fresh_memory() -> None:
    peek_fill = peeks()["peek_fill"]
    assert run_function(peek_fill, 1, 10, 0) == 1.5
    assert math.isnan(run_function(peek_fill, 1, 10, 9))  # type: ignore[arg-type]
    assert math.isnan(run_function(peek_fill, 2, 3, 3))  # type: ignore[arg-type]


def test_a_grow_that_cannot_be_allocated_raises_memory_error() -> None:
    message = r"peek.ir:6:3: grow: cannot allocate a local array of shape \(4611686018427387904,\)"
    with pytest.raises(MemoryError, match=message):
        run_function(peeks()["peek"], 1, 2 ** 62, 0)


@pytest.mark.parametrize("name", ["push_pop", "counts", "collatz", "first_times_last", "caller"])
def test_interpreter_against_python(name: str) -> None:
    function = tapes()[name]
    for args in _inputs(name, SIZES if name == "push_pop" else SIZES[:4]):
        assert _bits(run_function(function, *args)) == _bits(ORACLES[name](*args)), (name, args[-1])


# --- optimization ------------------------------------------------------------------------------------------

PIPELINES = [*REGISTRY, "O1", "O2"]


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_passes_keep_the_interpreters_results_bit_identical(pipeline: str) -> None:
    module = tapes()
    run_passes(module, [pipeline], PassOptions(verify_each=True))
    reference = tapes()
    for name in ORACLES:
        for args in _inputs(name, [0, 1, 2, 3, 37]):
            optimized = run_function(module[name], *args)
            assert _bits(optimized) == _bits(run_function(reference[name], *args)), (pipeline, name, args[-1])
            assert _bits(optimized) == _bits(ORACLES[name](*args)), (pipeline, name, args[-1])


def test_o2_keeps_every_grow_of_a_tape_that_is_read() -> None:
    module = tapes()
    run_passes(module, ["O2"], PassOptions(verify_each=True))
    for name in ("push_pop", "counts", "collatz", "first_times_last", "caller"):
        ops = [inst.op for inst in module[name].instructions()]
        assert Op.GROW in ops and Op.ALLOC in ops, name
    assert sum(inst.op is Op.GROW for inst in module["first_times_last"].instructions()) == 2


def test_func_attrs_counts_a_grow_as_a_write_of_local_memory_only() -> None:
    module = tapes()
    run_passes(module, ["func-attrs"])
    assert module["push_pop"].flags == {"readonly", "argmemonly"}
    assert module["collatz"].flags == {"readnone"}


DEAD_TAPE = """
func @f(%x: f64[?], %n: i64) -> f64 {
entry:
  %t = alloc f64[1] growable
  %u = alloc f64[1] growable zeroed
  br head
head:
  %i = phi i64 [entry: 0, body: %i.next]
  %c = icmp.slt %i, %n
  cbr %c, body, exit
body:
  %i.next = iadd %i, 1
  grow %t, %i.next
  %xi = load %x[%i]
  %sq = fmul %xi, %xi
  store %sq, %t[%i]
  atomic_add %xi, %t[0]
  grow %u, %i.next
  store %xi, %u[%i]
  br head
exit:
  %r = load %u[0]
  ret %r
}
"""


def test_dce_deletes_an_unread_tape_with_its_grows_and_stores_and_keeps_a_read_one() -> None:
    function = parse_module(DEAD_TAPE)["f"]
    assert dead_code_elimination(function)
    verify(function)
    remaining = [(inst.op, inst.operands[0].name if inst.operands else None) for inst in function.instructions()
                 if inst.op in (Op.ALLOC, Op.GROW, Op.STORE, Op.ATOMIC_ADD, Op.FMUL)]
    assert remaining == [(Op.ALLOC, None), (Op.GROW, "u"), (Op.STORE, "xi")]
    assert run_function(function, np.array([3.0, 4.0]), 2) == 3.0


def test_mem2reg_never_promotes_a_tape() -> None:
    module = parse_module("func @f(%v: f64) -> f64 {\nbb0:\n  %t = alloc f64[2] growable\n  store %v, %t[0]\n"
                          "  %r = load %t[0]\n  ret %r\n}\n")
    run_passes(module, ["mem2reg"], PassOptions(verify_each=True))
    assert [inst.op for inst in module["f"].instructions()] == [Op.ALLOC, Op.STORE, Op.LOAD, Op.RET]


# --- compiled code -----------------------------------------------------------------------------------------

def _compiled(name: str, pipeline: str, boundscheck: bool, peek: bool = False) -> object:
    module = peeks() if peek else tapes()

    def optimize(m: Module):  # type: ignore[no-untyped-def]
        run_passes(m, [pipeline], PassOptions(verify_each=True))
        return m[name]

    return compile_native(f"tape_{name}", module, EntrySignature.of(module[name]), f"growable {pipeline}",
                          optimize, CodegenOptions(boundscheck=boundscheck), use_disk_cache=False)


@pytest.mark.parametrize("boundscheck", [False, True], ids=["unchecked", "checked"])
@pytest.mark.parametrize("pipeline", ["O0", "O2"])
@pytest.mark.parametrize("name", ["push_pop", "counts", "collatz", "first_times_last", "caller"])
def test_compiled_tapes_against_python(name: str, pipeline: str, boundscheck: bool) -> None:
    compiled = _compiled(name, pipeline, boundscheck)
    for args in _inputs(name, SIZES):
        assert _bits(compiled(*args)) == _bits(ORACLES[name](*args)), (name, args[-1])  # type: ignore[operator]


@pytest.mark.parametrize(("capacity", "n"), [(1, 5), (3, 4), (4, 4), (4, 2), (0, 0), (0, 3), (2, -5), (5, 11)])
def test_compiled_bounds_checks_see_the_current_extent(capacity: int, n: int) -> None:
    interpreted = peeks()["peek"]
    compiled = _compiled("peek", "O0", True, peek=True)
    extent = expected_extent(capacity, n)
    for k in (extent - 1, extent):
        if k < 0:
            continue
        try:
            expected: object = run_function(interpreted, capacity, n, k)
        except IndexError as error:
            assert k == extent
            with pytest.raises(IndexError) as compiled_error:
                compiled(capacity, n, k)  # type: ignore[operator]
            assert str(compiled_error.value) == str(error)
            assert f"shape ({extent},)" in str(error)
        else:
            assert k == extent - 1
            assert compiled(capacity, n, k) == expected == 0.0  # type: ignore[operator]


def test_compiled_grow_keeps_the_elements() -> None:
    compiled = _compiled("peek_fill", "O0", True, peek=True)
    assert compiled(1, 10, 0) == 1.5  # type: ignore[operator]
    assert compiled(1, 1000, 0) == 1.5  # type: ignore[operator]


def test_compiled_grow_out_of_memory_is_the_interpreters_memory_error() -> None:
    compiled = _compiled("peek", "O0", False, peek=True)
    for n in (2 ** 62, 2 ** 53):
        with pytest.raises(MemoryError) as interpreted:
            run_function(peeks()["peek"], 1, n, 0)
        with pytest.raises(MemoryError) as native:
            compiled(1, n, 0)  # type: ignore[operator]
        assert str(native.value) == str(interpreted.value)
        assert f"shape ({n},)" in str(native.value)


def test_a_tape_built_with_the_builder_compiles() -> None:
    module = Module()
    function = make_function("squares", [("x", ArrayType(F64, 1)), ("n", I64)], F64, module)
    b = Builder(function.add_block("entry"))
    tape = b.alloc(F64, 0, growable=True, zeroed=True, name="t")
    b.grow(tape, function.args[1])
    b.grow(tape, -1)
    b.store(b.load(function.args[0], 0), tape, b.isub(function.args[1], 1))
    b.ret(b.load(tape, b.isub(function.args[1], 1)))
    verify(module)
    compiled = compile_native("squares", module, EntrySignature.of(function), "builder", lambda m: function,
                              CodegenOptions(boundscheck=True), use_disk_cache=False)
    assert compiled(np.array([4.25]), 3) == 4.25


PASSED_TO_A_CALL = """
func @fill_then_sum(%n: i64) -> f64 {
entry:
  %t = alloc f64[1] growable
  br header
header:
  %i = phi i64 [entry: 0, body: %i.next]
  %c = icmp.slt %i, %n
  cbr %c, body, done
body:
  %i.next = iadd %i, 1
  grow %t, %i.next
  %v = sitofp %i.next to f64
  call @put(%t, %i, %v)
  br header
done:
  %s = call @weighted(%t, %n)
  ret %s
}

func @put(%a: f64[?], %k: i64, %v: f64) {
entry:
  store %v, %a[%k]
  ret
}

func @weighted(%a: f64[?], %n: i64) -> f64 {
entry:
  br header
header:
  %i = phi i64 [entry: 0, body: %i.next]
  %s = phi f64 [entry: 0.0, body: %s.next]
  %c = icmp.slt %i, %n
  cbr %c, body, done
body:
  %x = load %a[%i]
  %w = sitofp %i to f64
  %p = fmul %x, %w
  %s.next = fadd %s, %p
  %i.next = iadd %i, 1
  br header
done:
  ret %s
}
"""


@pytest.mark.parametrize("pipeline", ["O0", "O2"])
@pytest.mark.parametrize("n", [0, 1, 2, 1000])
def test_a_growable_array_passed_to_calls_is_seen_as_it_is_then(pipeline: str, n: int) -> None:
    """Callees write and read a tape that grows between the calls (split-mode tapes do this)."""
    expected = float(sum((i + 1) * i for i in range(n)))
    module = parse_module(PASSED_TO_A_CALL)
    verify(module)
    assert run_function(module["fill_then_sum"], n) == expected
    compiled = compile_native(f"passed_{pipeline}", module, EntrySignature.of(module["fill_then_sum"]),
                              f"growable-call {pipeline}", lambda m: (run_passes(m, [pipeline]), m["fill_then_sum"])[1],
                              CodegenOptions(boundscheck=True), use_disk_cache=False)
    assert compiled(n) == expected  # type: ignore[operator]
