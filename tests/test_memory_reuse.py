"""Memory reuse (`optimize/memory_reuse.py`): buffers (`memory_extents.py`), liveness (`memory_liveness.py`),
the slot layout (`memory_layout.py`), `iz.show_memory`, the `view` op and the arena placement codegen runs.

Every plan is checked by `validate_plan`, a pairwise check written apart from the layout. The liveness is
checked by running: `run_in_arena` executes a function in the reference interpreter with its planned
allocs placed at their offsets of one shared byte arena, so a plan that lets two live buffers overlap
corrupts a value and the result differs from the plain run. The placement itself (`place_in_arena`, allocs
become `view`s) is checked the same way: the placed function must compute exactly what the unplaced one
computes, in the interpreter and on the llvm and opencl backends. The arenas are not zeroed, so a buffer
that is read after another one overwrote its bytes shows up.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gradgen
import kernelgen
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.llvm import emit_llvm
from isozyme.optimize.memory_layout import (
    ARENA_ALIGNMENT,
    Buffer,
    BufferStatus,
    MemoryPlan,
    MemoryPlanError,
    lay_out_slots,
    pack,
    plan_buffers,
    validate_plan,
)
from isozyme.optimize.memory_reuse import place_in_arena, place_module_in_arena, plan_memory
from isozyme.runtime.compiled_derivatives import differentiate, parse_activity
from isozyme.runtime.llvm_backend import llvm_ir
from isozyme.ssa import interpreter
from isozyme.ssa.interpreter import run_function
from isozyme.ssa.ir import Function
from isozyme.ssa.ops import Op
from isozyme.ssa.parser import ParseError, parse_module
from isozyme.ssa.printer import print_module
from isozyme.ssa.verifier import VerificationError, verify
from tests.example_modules import load_example

FUNCTIONS = """
; %a dies before %b is first touched: they share.
func @disjoint(%x: f64) -> f64 {
entry:
  %a = alloc f64[16]
  store %x, %a[3]
  %y = load %a[3]
  %b = alloc f64[16]
  store %y, %b[5]
  %z = load %b[5]
  ret %z
}

; %acc is read at the top of every iteration and %tmp is written after that read: in the linear order
; %acc's last use comes before %tmp's first, but the back edge makes %acc live again, so they must not share.
func @loop_carried(%n: i64) -> f64 {
entry:
  %acc = alloc f64[8] zeroed
  %tmp = alloc f64[8]
  br header
header:
  %i = phi i64 [entry: 0, body: %i.next]
  %c = icmp.slt %i, %n
  cbr %c, body, exit
body:
  %old = load %acc[0]
  %f = sitofp %i to f64
  %new = fadd %old, %f
  store %new, %acc[0]
  %big = fmul %f, 100.0
  store %big, %tmp[0]
  %t = load %tmp[0]
  %i.next = iadd %i, 1
  br header
exit:
  %r = load %acc[0]
  ret %r
}

; A scratch array allocated in the loop: one slot, reused by every iteration.
func @per_iteration(%n: i64) -> f64 {
entry:
  br header
header:
  %i = phi i64 [entry: 0, body: %i.next]
  %s = phi f64 [entry: 0.0, body: %s.next]
  %c = icmp.slt %i, %n
  cbr %c, body, exit
body:
  %scratch = alloc f64[4]
  %f = sitofp %i to f64
  store %f, %scratch[2]
  %v = load %scratch[2]
  %s.next = fadd %s, %v
  %i.next = iadd %i, 1
  br header
exit:
  ret %s
}

; The previous iteration's array stays reachable through %prev when the alloc runs again.
func @carried_array(%n: i64) -> f64 {
entry:
  %first = alloc f64[4] zeroed
  br header
header:
  %prev = phi f64[?] [entry: %first, body: %next]
  %i = phi i64 [entry: 0, body: %i.next]
  %c = icmp.slt %i, %n
  cbr %c, body, exit
body:
  %next = alloc f64[4]
  %v = load %prev[0]
  %w = fadd %v, 1.0
  store %w, %next[0]
  %i.next = iadd %i, 1
  br header
exit:
  %r = load %prev[0]
  ret %r
}

; Sizes: symbolic (an argument), dynamic (a loaded value), growable.
func @sizes(%x: f64[?], %k: i64[?], %n: i64) -> f64 {
entry:
  %m = dim %x, 0
  %two_m = imul %m, 2
  %sym = alloc f64[%n, %two_m]
  %count = load %k[0]
  %dyn = alloc i32[%count]
  %grown = alloc f64[1] growable
  grow %grown, %n
  %v = load %x[0]
  store %v, %sym[0, 0]
  store %v, %grown[0]
  %a = load %sym[0, 0]
  %b = load %grown[0]
  store 7:i32, %dyn[0]
  %s = fadd %a, %b
  ret %s
}
"""


def module_functions() -> dict[str, Function]:
    module = parse_module(FUNCTIONS, "memory_reuse")
    verify(module)
    return {function.name: function for function in module}


def buffer_named(plan: MemoryPlan, name: str) -> Buffer:
    return next(buffer for buffer in plan.buffers if buffer.name == name)


@contextmanager
def arena_allocs(plan: MemoryPlan) -> Iterator[None]:
    """While active, the interpreter places the planned allocs in one byte arena filled with 0xff (NaN as
    f64): a plain alloc leaves its bytes as they are (another buffer may have used them), a zeroed one
    clears them."""
    arena = np.full(plan.used, 0xFF, dtype=np.uint8)
    slots = {buffer.alloc: buffer for buffer in plan.planned}
    original = interpreter._HANDLERS[Op.ALLOC]

    def alloc(interp: object, inst, env) -> np.ndarray:  # type: ignore[no-untyped-def]
        if inst not in slots:
            return original(interp, inst, env)
        shape = tuple(interpreter._operands(inst, env))
        buffer = slots[inst]
        view = arena[buffer.offset:buffer.offset + buffer.size].view(inst.type.element.numpy_dtype).reshape(shape)
        if "zeroed" in inst.flags:
            view[...] = 0
        return view
    interpreter._HANDLERS[Op.ALLOC] = alloc
    try:
        yield
    finally:
        interpreter._HANDLERS[Op.ALLOC] = original


def run_in_arena(function: Function, plan: MemoryPlan, *args: object) -> object:
    with arena_allocs(plan):
        return run_function(function, *args)


# --- hand-written SSA --------------------------------------------------------------------------------------


def test_disjoint_lifetimes_share_memory() -> None:
    function = module_functions()["disjoint"]
    plan = plan_memory(function)
    validate_plan(plan)
    a, b = buffer_named(plan, "%a"), buffer_named(plan, "%b")
    assert a.live[1] < b.live[0] and a.offset == b.offset
    assert (plan.requested, plan.used, plan.saved) == (256, 128, 0.5)
    assert run_in_arena(function, plan, 2.5) == 2.5


def test_lifetimes_overlapping_through_a_back_edge_do_not_share() -> None:
    function = module_functions()["loop_carried"]
    plan = plan_memory(function)
    validate_plan(plan)
    acc, tmp = buffer_named(plan, "%acc"), buffer_named(plan, "%tmp")
    assert acc.live[0] <= tmp.live[1] and tmp.live[0] <= acc.live[1]
    assert acc.offset != tmp.offset and plan.saved == 0.0
    assert run_in_arena(function, plan, 5) == run_function(function, 5) == 10.0


def test_a_sharing_plan_that_ignores_the_back_edge_is_caught() -> None:
    """The naive interval (alloc to last use in the linear order) lets the two share; the validator and the
    arena run both reject that."""
    function = module_functions()["loop_carried"]
    plan = plan_memory(function)
    acc, tmp = buffer_named(plan, "%acc"), buffer_named(plan, "%tmp")
    acc.offset = tmp.offset = 0
    plan.used = 64
    with pytest.raises(MemoryPlanError, match="live together"):
        validate_plan(plan)
    assert run_in_arena(function, plan, 5) != 10.0


def test_an_alloc_in_a_loop_counts_once() -> None:
    function = module_functions()["per_iteration"]
    plan = plan_memory(function)
    validate_plan(plan)
    (scratch,) = plan.buffers
    assert scratch.status is BufferStatus.PLANNED and plan.requested == plan.used == 64
    assert run_in_arena(function, plan, 4) == 6.0


def test_an_array_carried_into_the_next_iteration_is_not_planned() -> None:
    function = module_functions()["carried_array"]
    plan = plan_memory(function)
    validate_plan(plan)
    assert buffer_named(plan, "%next").status is BufferStatus.MULTI_INSTANCE
    assert buffer_named(plan, "%first").status is BufferStatus.PLANNED
    assert run_in_arena(function, plan, 3) == 3.0


def test_sizes_symbolic_dynamic_growable() -> None:
    function = module_functions()["sizes"]
    unsized = plan_memory(function)
    statuses = {buffer.name: buffer.status for buffer in unsized.buffers}
    assert statuses == {"%sym": BufferStatus.SYMBOLIC, "%dyn": BufferStatus.DYNAMIC,
                        "%grown": BufferStatus.GROWABLE}
    assert buffer_named(unsized, "%sym").size_text == "8*%n*%two_m" and unsized.used == 0
    for sizes in ({"x": (5,), "n": 3}, {"x": np.zeros(5), "n": 3}, [np.zeros(5), np.zeros(1, np.int64), 3]):
        sized = plan_memory(function, sizes)
        validate_plan(sized)
        assert buffer_named(sized, "%sym").size == 8 * 3 * 10 and sized.used == 256
    text = sized.format()
    assert "requested 256 B, used 256 B" in text and "symbolic" not in text and "growable" in text


def test_validator_rejects_misplaced_buffers() -> None:
    plan = MemoryPlan("f", [Buffer("%a", 64, (0, 3), offset=32)], used=128)
    with pytest.raises(MemoryPlanError, match="misaligned"):
        validate_plan(plan)
    plan = MemoryPlan("f", [Buffer("%a", 128, (0, 3), offset=0)], used=64)
    with pytest.raises(MemoryPlanError, match="outside the arena"):
        validate_plan(plan)


# --- examples and their gradients --------------------------------------------------------------------------


def heat_gradient() -> Function:
    heat = load_example("heat").heat
    return differentiate(heat, parse_activity(heat, ("dup", "active", "const")), "post").function


def gmm_gradient() -> Function:
    gmm = load_example("gmm")
    activity = ("dup", "dup", "dup", "const", "const", "const", "const")
    return differentiate(gmm.gmm_objective, parse_activity(gmm.gmm_objective, activity), "post").function


def test_heat_gradient_plan() -> None:
    function = heat_gradient()
    n, steps = 12, 3
    u = np.sin(np.linspace(0.0, 3.0, n))
    args = [u, np.zeros(n), 0.3, np.zeros(1), steps, 1.0]
    plan = plan_memory(function, args)
    validate_plan(plan)
    # prev, its shadow d_prev and the tape of the update's values; the energy loop's u[i] needs no tape
    # (nothing writes u after it, so the reverse pass reads u again)
    assert sorted(b.name for b in plan.planned) == ["%d_prev", "%prev", "%tape.v"]
    assert 0 < plan.used < plan.requested
    plain = [u.copy(), np.zeros(n), 0.3, np.zeros(1), steps, 1.0]
    arena = [u.copy(), np.zeros(n), 0.3, np.zeros(1), steps, 1.0]
    assert run_in_arena(function, plan, *arena) == run_function(function, *plain)
    assert np.array_equal(plain[1], arena[1]) and np.array_equal(plain[3], arena[3])


def test_gmm_gradient_plan() -> None:
    gmm = load_example("gmm")
    data = gmm.gmm_data(d=2, K=3, n=4, seed=1)
    function = gmm_gradient()

    def arguments() -> list[object]:
        return [data.alphas.copy(), np.zeros(3), data.means.copy(), np.zeros((3, 2)), data.icf.copy(),
                np.zeros_like(data.icf), data.x.copy(), data.gamma, data.m, 0.5, 1.0]
    plan = plan_memory(function, arguments())
    validate_plan(plan)
    assert len(plan.planned) == len(plan.buffers) and plan.used < plan.requested
    plain, arena = arguments(), arguments()
    assert run_in_arena(function, plan, *arena) == run_function(function, *plain)
    for expected, got in zip(plain, arena):
        assert np.array_equal(expected, got)


def test_show_memory_primal_and_gradient() -> None:
    heat = load_example("heat").heat
    primal = iz.show_memory(heat, u=np.zeros(100), steps=3)
    assert primal.startswith("; memory plan of @heat: 1 buffer(s) (1 planned)")
    assert "requested 832 B, used 832 B" in primal
    gradient = iz.show_memory(heat, activity=("dup", "active", "const"), u=(1000,), steps=50)
    assert "@diffe_heat" in gradient and "%tape.v" in gradient and "symbolic" not in gradient
    assert "symbolic" in iz.show_memory(heat, activity=("dup", "active", "const"))
    assert "show_memory" in iz.__all__


# --- the packer on random interval sets --------------------------------------------------------------------


@st.composite
def buffer_sets(draw: st.DrawFn) -> list[Buffer]:
    count = draw(st.integers(0, 14))
    buffers = []
    for index in range(count):
        start = draw(st.integers(0, 40))
        end = draw(st.integers(start, start + 20))
        size = draw(st.one_of(st.integers(0, 300), st.sampled_from([64, 128, 4096])))
        buffers.append(Buffer(f"%b{index}", size, (start, end)))
    return buffers


@settings(max_examples=300, deadline=None)
@given(buffer_sets())
def test_packing_is_valid_and_never_worse_than_no_reuse(buffers: list[Buffer]) -> None:
    plan = plan_buffers("random", buffers)
    validate_plan(plan)
    assert plan.used <= plan.requested
    assert all(buffer.offset % ARENA_ALIGNMENT == 0 for buffer in plan.planned)  # type: ignore[operator]
    disjoint = all(a is b or a.live[1] < b.live[0] or b.live[1] < a.live[0] for a in buffers for b in buffers)
    if disjoint:
        assert plan.used == max((buffer.aligned_size for buffer in buffers), default=0)


def test_best_fit_offsets_are_valid_too() -> None:
    """`pack` is only the comparison figure; its offsets must still respect liveness."""
    function = gmm_gradient()
    gmm = load_example("gmm")
    data = gmm.gmm_data(d=3, K=4, n=5, seed=2)
    plan = plan_memory(function, {"alphas": (4,), "means": (4, 3), "icf": data.icf, "x": (5, 3)})
    assert plan.best_fit <= plan.used <= plan.requested and f"best fit would use {plan.best_fit} B" in plan.format()
    for buffer, offset in pack(plan.planned).items():
        buffer.offset = offset
    plan.used = plan.best_fit
    validate_plan(plan)


def test_a_slot_shared_by_buffers_live_together_is_caught() -> None:
    """The validator checks the slot layout at concrete sizes: forcing %acc and %tmp, which a back edge
    keeps live together, into one slot is rejected, and so is its run."""
    function = module_functions()["loop_carried"]
    plan = plan_memory(function)
    for buffer in plan.buffers:
        buffer.slot = 0
    plan.used = lay_out_slots(plan.planned, 1)
    with pytest.raises(MemoryPlanError, match="live together"):
        validate_plan(plan)
    assert run_in_arena(function, plan, 5) != 10.0


# --- the view op -------------------------------------------------------------------------------------------

VIEWS = """func @views(%n: i64, %x: f64) -> f64 {
entry:
  %arena = alloc i64[24]
  %a = view f64[%n, 2] %arena, 8 zeroed
  %b = view i32[3] %arena, 0
  store %x, %a[1, 1]
  store 7:i32, %b[2]
  %v = load %a[1, 1]
  %w = load %a[0, 0]
  %s = fadd %v, %w
  ret %s
}
"""


def test_view_round_trips_verifies_and_runs() -> None:
    module = parse_module(VIEWS, "views")
    verify(module)
    assert print_module(module) == VIEWS
    assert run_function(module["views"], 4, 2.5) == 2.5
    with pytest.raises(ValueError, match="negative extent"):
        run_function(module["views"], -1, 2.5)
    with pytest.raises(MemoryError, match=r"cannot allocate a local array of shape \(9, 2\) of f64: 144 bytes"):
        run_function(module["views"], 9, 2.5)


def test_a_view_shares_its_arenas_bytes() -> None:
    """Two views at one offset are one memory: an f64 stored through one is its bits through the other."""
    module = parse_module("""func @alias(%x: f64) -> i64 {
entry:
  %arena = alloc i64[8]
  %a = view f64[1] %arena, 0
  %b = view i64[1] %arena, 0
  store %x, %a[0]
  %bits = load %b[0]
  ret %bits
}
""", "alias")
    verify(module)
    assert run_function(module["alias"], 1.5) == int(np.float64(1.5).view(np.int64))


@pytest.mark.parametrize(("body", "message"), [
    ("%arena = alloc f64[8]\n  %v = view f64[2] %arena, 0", "arena must be a plain alloc of i64"),
    ("%arena = alloc i64[8] growable\n  %v = view f64[2] %arena, 0", "arena must be a plain alloc of i64"),
    ("%arena = alloc i64[8]\n  %v = view f64[2] %arena, 4", "not a multiple of 8 words"),
    ("%arena = alloc i64[8]\n  %v = view f64[2] %arena, %x", "offset must be i64"),
    ("%arena = alloc i64[8]\n  %v = view f64[%x] %arena, 0", "extent 0 must be i64"),
    ("%arena = alloc i64[8]\n  %v = view f64[2] %y, 0", "arena must be a plain alloc of i64"),
])
def test_view_verifier_errors(body: str, message: str) -> None:
    text = f"func @bad(%x: f64, %y: i64[?]) {{\nentry:\n  {body}\n  ret\n}}\n"
    with pytest.raises(VerificationError, match=message):
        verify(parse_module(text, "bad"))


def test_a_view_without_offset_does_not_parse() -> None:
    with pytest.raises(ParseError):
        parse_module("func @f() {\nentry:\n  %a = alloc i64[8]\n  %v = view f64[2] %a\n  ret\n}\n", "f")


# --- placement: interpreter ---------------------------------------------------------------------------------


def placed_copy(function: Function) -> Function:
    """`function` in a copy of its module (printed and parsed) whose functions are placed in arenas."""
    module = parse_module(print_module(function.module), "placed")  # type: ignore[arg-type]
    place_module_in_arena(module)
    verify(module)
    return module[function.name]


def run_copied(function: Function, args: list[Any]) -> tuple[Any, list[Any]]:
    """The result (or the exception's type) and the arguments after a run on copies of `args`."""
    copies = kernelgen.copy_args(args)
    try:
        return run_function(function, *copies), copies
    except (ArithmeticError, ValueError, IndexError, AssertionError, MemoryError) as error:
        return type(error), copies


def assert_placement_keeps_results(function: Function, args: list[Any]) -> Function:
    """The placed copy computes bit for bit what `function` computes (its return value and every array)."""
    placed = placed_copy(function)
    expected, got = run_copied(function, args), run_copied(placed, args)
    if isinstance(expected[0], type):
        assert got[0] is expected[0]
    else:
        kernelgen.assert_bit_identical(expected, got)
    return placed


def views_and_arenas(function: Function) -> tuple[int, int]:
    views = [inst for inst in function.instructions() if inst.op is Op.VIEW]
    return len(views), len({view.operands[-2] for view in views})


@pytest.mark.parametrize(("name", "args", "views"), [
    ("disjoint", [2.5], 2), ("loop_carried", [5], 2), ("per_iteration", [4], 1), ("carried_array", [3], 1)])
def test_placement_of_hand_written_functions(name: str, args: list[Any], views: int) -> None:
    placed = assert_placement_keeps_results(module_functions()[name], args)
    assert views_and_arenas(placed) == (views, 1)


def test_placement_leaves_growable_dynamic_and_multi_instance_allocs() -> None:
    functions = module_functions()
    placed = placed_copy(functions["sizes"])
    allocs = sorted(inst.name for inst in placed.instructions() if inst.op is Op.ALLOC)
    assert allocs == ["arena", "dyn", "grown"] and views_and_arenas(placed) == (1, 1)
    carried = placed_copy(functions["carried_array"])
    assert [inst.name for inst in carried.instructions() if inst.op is Op.ALLOC] == ["arena", "next"]
    assert not place_in_arena(carried)  # placed already: left as it is


def test_placement_clones_extents_into_the_entry_and_shares_slots() -> None:
    """Extents known at the start (an argument's dim and pure ops of it) are computed again at the start;
    the two buffers of one formula with disjoint lifetimes get one slot, so one view offset."""
    module = parse_module("""func @f(%x: f64[?]) -> f64 {
entry:
  %n = dim %x, 0
  br next
next:
  %m = imul %n, 2
  %a = alloc f64[%m]
  store 1.0, %a[0]
  %u = load %a[0]
  %b = alloc f64[%m] zeroed
  store %u, %b[1]
  %v = load %b[1]
  %w = load %b[0]
  %s = fadd %v, %w
  ret %s
}
""", "f")
    function = module["f"]
    placed = assert_placement_keeps_results(function, [np.ones(3)])
    views = [inst for inst in placed.instructions() if inst.op is Op.VIEW]
    assert len(views) == 2 and views[0].operands[-1] is views[1].operands[-1]
    assert "zeroed" in views[1].flags and "zeroed" not in views[0].flags
    arena = views[0].operands[-2]
    before = placed.entry.instructions[:placed.entry.instructions.index(arena)]
    assert arena.block is placed.entry and {inst.op for inst in before} == {Op.DIM, Op.IMUL, Op.IMAX, Op.IADD,
                                                                           Op.IFLOORDIV}
    assert run_function(placed, np.ones(3)) == 1.0


def test_a_zeroed_array_in_a_serial_loop_is_zeroed_every_iteration() -> None:
    module = parse_module("""func @f(%x: f64[?], %out: f64[?]) {
entry:
  %n = dim %x, 0
  br header
header:
  %i = phi i64 [entry: 0, body: %i.next]
  %c = icmp.slt %i, %n
  cbr %c, body, exit
body:
  %t = alloc f64[4] zeroed
  %old = load %t[1]
  %xi = load %x[%i]
  %new = fadd %old, %xi
  store %new, %t[1]
  %r = load %t[1]
  store %r, %out[%i]
  %i.next = iadd %i, 1
  br header
exit:
  ret
}
""", "f")
    x = np.arange(1.0, 6.0)
    placed = assert_placement_keeps_results(module["f"], [x, np.zeros(5)])
    assert views_and_arenas(placed) == (1, 1)
    out = np.zeros(5)
    run_function(placed, x, out)
    assert np.array_equal(out, x)


@iz.kernel
def zeros_in_a_loop(out: Array[f64], x: Array[f64], n: i64):
    for i in range(n):
        t = iz.zeros(4, f64)  # without the re-zeroing, t[k] and t[j] would hold earlier iterations' values
        k = i % 4
        j = (i + 1) % 4
        t[k] += x[i]
        out[i] = t[k] + t[j]


def test_a_zeroed_array_in_a_serial_loop_on_llvm() -> None:
    x, n = np.arange(1.0, 8.0), 7
    expected, got = np.zeros(n), np.zeros(n)
    zeros_in_a_loop.compile("interp").entry(expected, x, n)
    zeros_in_a_loop.compile("llvm").entry(got, x, n)
    assert np.array_equal(got, expected) and np.array_equal(got, x)
    emitted = iz.show_ir(zeros_in_a_loop, stage="llvm")
    assert len(re.findall(r'call i8\* @"malloc"', emitted)) == 1 and "calloc" not in emitted
    assert "llvm.memset" in emitted


@iz.kernel
def zeros_sized_by_a_carried_value(x: Array[f64], n: i64) -> f64:
    """Issue 23: the extent `n + m` (an argument, then a loop-carried value) was taken as known at the
    start, and cloning it into the entry block followed the phi around the loop forever."""
    s = 0.0
    m = 1
    for i in range(n):
        a = iz.zeros(n + m, iz.f64)
        b = iz.zeros(m + n, iz.f64)
        a[i] = x[i]
        b[n + m - 1] = x[i] * 2.0
        s += a[i] + a[n + m - 1] + b[n + m - 1]
        m = m + 1
    return s


@pytest.mark.parametrize("pipeline", ["O0", "O2"])
@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_an_extent_with_a_loop_carried_operand_is_dynamic(backend: str, pipeline: str) -> None:
    x = np.arange(1.0, 6.0)
    got = zeros_sized_by_a_carried_value.compile(backend, pipeline).entry(x, 5)
    assert got == zeros_sized_by_a_carried_value.py_func(x, 5) == 3.0 * x.sum()


def test_an_extent_is_dynamic_whichever_operand_is_unknown() -> None:
    """An extent with one operand not known at the start is dynamic (not placed), also when an earlier
    operand is an argument whose value was not given (symbolic) or fails (invalid)."""
    module = parse_module("""func @f(%n: i64) -> f64 {
entry:
  br loop
loop:
  %m = phi i64 [entry: 1, loop: %m.next]
  %e1 = iadd %n, %m
  %a = alloc f64[%e1]
  %e2 = iadd %m, %n
  %b = alloc f64[%e2]
  %q = ifloordiv %n, 0
  %e3 = iadd %q, %m
  %c = alloc f64[%e3]
  store 1.0, %a[0]
  store 1.0, %b[0]
  store 1.0, %c[0]
  %m.next = iadd %m, 1
  %more = icmp.slt %m.next, 3
  cbr %more, loop, done
done:
  ret 0.0
}
""", "f")
    function = module["f"]
    for sizes in (None, {"n": 2}):
        plan = plan_memory(function, sizes)
        assert {buffer.name: buffer.status for buffer in plan.buffers} == {
            "%a": BufferStatus.DYNAMIC, "%b": BufferStatus.DYNAMIC, "%c": BufferStatus.DYNAMIC}
    assert not place_in_arena(function)


@iz.kernel
def split_rows(x: Array[f64], parts: i64) -> f64:
    """Its local array's extents are an argument's length, then a division by an argument (which may trap,
    so it is not known at the start): the array is dynamic, not placed."""
    n = x.shape[0]
    a = iz.zeros((n, n // parts), f64)
    s = 0.0
    for i in range(n):
        a[i, 0] = x[i]
    for i in range(n):
        s += a[n - 1 - i, 0]
    return s


def test_a_later_extent_not_known_at_the_start_makes_the_buffer_dynamic() -> None:
    """An alloc whose first extent is only missing from `sizes` (symbolic) and whose second is not known at
    the start (a division) is dynamic: placement, which gives no sizes, once took it as placeable and then
    failed cloning the division into the entry block."""
    _, function = split_rows.optimized("O2")
    for sizes in (None, {"x": (4,), "parts": 2}):
        assert [buffer.status for buffer in plan_memory(function, sizes).buffers] == [BufferStatus.DYNAMIC]
    x = np.arange(1.0, 5.0)
    assert split_rows(x, 2) == split_rows.py_func(x, 2) == 10.0


def test_placement_clones_a_long_chain_of_extent_ops() -> None:
    """An extent computed by 3,000 ops in a row (deeper than Python's recursion limit) is sized, and
    computed again at the start, without recursion."""
    depth = 3000
    chain = "\n".join(f"  %e{k + 1} = iadd %e{k}, 1" for k in range(depth))
    module = parse_module(f"""func @f(%n: i64) -> f64 {{
entry:
  %e0 = iadd %n, 0
  br body
body:
{chain}
  %a = alloc f64[%e{depth}] zeroed
  store 2.0, %a[%n]
  %v = load %a[%n]
  ret %v
}}
""", "f")
    function = module["f"]
    plan = plan_memory(function, {"n": 5})
    assert plan.buffers[0].status is BufferStatus.PLANNED and plan.buffers[0].size == 8 * (5 + depth)
    placed = assert_placement_keeps_results(function, [5])
    assert views_and_arenas(placed) == (1, 1) and run_function(placed, 5) == 2.0


# --- placement: the examples' gradients ---------------------------------------------------------------------


def gradient_arguments(function: Function, values: dict[str, Any], seed: int = 0) -> list[Any]:
    """Arguments of a `diffe_<f>`: `values` by name, shadows `d_<x>` random (an active scalar's 1-element
    adjoint array zero), the return seed 1."""
    rng = np.random.default_rng(seed)
    args: list[Any] = []
    for arg in function.args:
        if arg.name == "differet":
            args.append(1.0)
        elif arg.name in values:
            args.append(values[arg.name])
        else:
            primal = values[arg.name[2:]]  # type: ignore[index]
            args.append(rng.standard_normal(np.shape(primal)) if isinstance(primal, np.ndarray) else np.zeros(1))
    return args


def example_gradient(example: str, kernel: str, activity: tuple[str, ...]) -> Function:
    source = getattr(load_example(example), kernel)
    return differentiate(source, parse_activity(source, activity), "post").function


def _gmm_values() -> dict[str, Any]:
    data = load_example("gmm").gmm_data(d=2, K=3, n=4, seed=1)
    return {"alphas": data.alphas, "means": data.means, "icf": data.icf, "x": data.x,
            "wishart_gamma": data.gamma, "wishart_m": data.m, "log_gamma_d": 0.5}


def _mlp_values() -> dict[str, Any]:
    return dict(load_example("mlp").mlp_data(d=3, hidden=4, out=2, batch=5, seed=1)._asdict())


EXAMPLE_GRADIENTS = {
    "heat": (("heat", "heat", ("dup", "active", "const")),
             lambda: {"u": np.sin(np.linspace(0.0, 3.0, 12)), "r": 0.3, "steps": 3}),
    "gmm": (("gmm", "gmm_objective", ("dup", "dup", "dup", "const", "const", "const", "const")), _gmm_values),
    "euler": (("euler", "euler", ("dup", "active", "const", "active", "active")),
              lambda: {"y": np.linspace(-0.5, 0.5, 8), "dt": 0.01, "steps": 4, "beta": 0.3, "damping": 0.1}),
    "norm": (("norm", "norm", ("dup", "dup", "const")),
             lambda: {"out": np.zeros(6), "x": np.linspace(0.5, 2.0, 6), "n": 6}),
    "mlp": (("mlp", "mlp_loss", ("dup", "dup", "dup", "dup", "const", "const")), _mlp_values),
}


@pytest.mark.parametrize("name", list(EXAMPLE_GRADIENTS))
def test_placement_keeps_the_examples_gradients(name: str) -> None:
    (example, kernel, activity), values = EXAMPLE_GRADIENTS[name]
    function = example_gradient(example, kernel, activity)
    allocs = sum(inst.op is Op.ALLOC for fn in function.module for inst in fn.instructions())  # type: ignore[union-attr]
    placed = assert_placement_keeps_results(function, gradient_arguments(function, values()))
    assert views_and_arenas(placed)[1] == (1 if allocs else 0)


LOCAL_ARRAY_FEATURES = frozenset({"loss", "local_arrays", "local_arrays_in_loops", "nested_loops", "branches",
                                  "helper_calls", "accumulators", "overwrites", "while_loops", "break"})


@pytest.mark.parametrize("seed", range(6))
def test_placement_keeps_random_gradients(seed: int, tmp_path: Path) -> None:
    """Random differentiable programs with local arrays (`gradgen.py`), their gradients run unplaced and
    placed. The seeds are fixed: the same programs every run."""
    entropy = np.random.default_rng(seed).bytes(gradgen.ENTROPY_BYTES)
    program = gradgen.generate_program(entropy, LOCAL_ARRAY_FEATURES)
    kernel = kernelgen.load_module(program.source, tmp_path).entry
    activity = tuple("dup" if kind == "farray" else "active" if kind == "f" else "const" for _, kind in program.params)
    function = differentiate(kernel, parse_activity(kernel, activity), "post").function
    values = dict(zip([name for name, _ in program.params], gradgen.arguments(program, np.random.default_rng(seed))))
    assert_placement_keeps_results(function, gradient_arguments(function, values, seed))


@settings(max_examples=12, deadline=None)
@given(case=kernelgen.cases().filter(lambda case: "iz.zeros" in case[0].source or "iz.empty" in case[0].source))
def test_placement_keeps_random_kernels(case: tuple[kernelgen.Program, tuple[Any, ...]],
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Random primal programs with local arrays (`kernelgen.py`), unoptimized (where mem2reg has promoted
    none) and optimized, run unplaced and placed (derandomized by the test profile)."""
    program, args = case
    kernel = kernelgen.load_module(program.source, tmp_path_factory.mktemp("kernels")).entry
    for pipeline in ("O0", "O2"):
        assert_placement_keeps_results(kernel.optimized(pipeline)[1], list(args))


# --- placement: the backends --------------------------------------------------------------------------------


def _opencl_missing() -> str:
    try:
        from isozyme.runtime.opencl_device import device
        device()
    except Exception as error:  # noqa: BLE001 - any reason the device cannot be had
        return f"no OpenCL device: {error}"
    return ""


def test_llvm_makes_one_malloc_per_call_for_placed_arrays() -> None:
    """diffe_heat's three local arrays (prev, its zeroed shadow and the tape) are three blocks unplaced, one
    arena placed; the runtime's `llvm_ir` (and `_compile`) place them."""
    function = example_gradient("heat", "heat", ("dup", "active", "const"))
    serial = CodegenOptions(threads=False)  # on the thread pool, each task has its own copy of the shadow
    unplaced = emit_llvm(function.module, function, serial, "iz_").ir_text  # type: ignore[arg-type]
    allocations = re.compile(r'call i8\* @"iz_pool_take"\(i64 %"[.0-9]+", i1 ([01])\)')  # zeroed: 1
    assert sorted(allocations.findall(unplaced)) == ["0", "0", "1"]
    emitted = llvm_ir(function.module, function, serial, False)  # type: ignore[arg-type]
    assert not allocations.findall(emitted) and "llvm.memset" in emitted
    assert re.findall(r'call i8\* @"(\w+)"', emitted) == ["iz_take_arena", "malloc"]  # the helper's malloc


def autodiff_results(name: str, backend: str) -> tuple[Any, list[np.ndarray]]:
    """`iz.autodiff` of an example on `backend`: the return value, adjoints and every array after the call."""
    (example, kernel_name, activity), values_of = EXAMPLE_GRADIENTS[name]
    kernel = getattr(load_example(example), kernel_name)
    values = values_of()
    rng = np.random.default_rng(3)
    call: list[Any] = []
    for value, kind in zip(values.values(), activity):
        if kind == "dup":
            call.append(iz.Duplicated(value.copy(), rng.standard_normal(value.shape)))
        elif kind == "active":
            call.append(iz.Active(value))
        else:
            call.append(value)
    result, adjoints = iz.autodiff(kernel, *call, backend=backend)
    arrays = [array for a in call if isinstance(a, iz.Duplicated) for array in (a.value, a.shadow)]
    return (result, adjoints), arrays


@pytest.mark.parametrize("name", ["heat", "gmm"])
@pytest.mark.parametrize("backend", ["llvm", "opencl"])
def test_backends_keep_the_gradients(name: str, backend: str) -> None:
    """Compiled (placed) gradients against the interpreter's (unplaced): bit-identical on llvm with one
    thread, to rounding on opencl and on llvm's thread pool, whose parallel reductions add in another
    order."""
    if backend == "opencl" and _opencl_missing():
        pytest.skip(_opencl_missing())
    (result, adjoints), arrays = autodiff_results(name, "interp")
    threads = iz.get_num_threads()
    for count in ((1, 4) if backend == "llvm" else (threads,)):
        iz.set_num_threads(count)
        try:
            compiled = autodiff_results(name, backend)
        finally:
            iz.set_num_threads(threads)
        check_same_gradients(compiled, (result, adjoints), arrays, 0.0 if backend == "llvm" and count == 1 else 1e-12)


def check_same_gradients(got: tuple, expected: tuple, arrays: list[np.ndarray], rtol: float) -> None:
    (got_result, got_adjoints), got_arrays = got
    result, adjoints = expected
    assert np.allclose(got_result, result, rtol=rtol, atol=0.0)
    assert np.allclose(got_adjoints, adjoints, rtol=rtol, atol=1e-15 if rtol else 0.0)
    for expected, got in zip(arrays, got_arrays, strict=True):
        assert np.allclose(got, expected, rtol=rtol, atol=1e-15 if rtol else 0.0)


@iz.kernel(inline=False)
def running_sums(out: Array[f64], x: Array[f64], n: i64):
    window = iz.zeros(4, f64)  # constant extent: a private array unplaced, in the heap arena placed
    sums = iz.empty(n, f64)
    for i in range(n):
        k = i % 4
        window[k] += x[i]
        sums[i] = window[k]
    for i in range(n):
        out[i] = sums[i] + sums[n - 1 - i]


@iz.kernel
def running_sums_twice(out: Array[f64], x: Array[f64], n: i64):
    middle = iz.empty(n, f64)
    running_sums(middle, x, n)
    running_sums(out, middle, n)


@pytest.mark.parametrize("backend", ["llvm", "opencl"])
def test_called_functions_with_placed_arrays(backend: str) -> None:
    """A called function's arena is a local array of run-time size (the device heap on opencl), the entry's
    is a host buffer; `middle`, a view, is passed to the calls."""
    if backend == "opencl" and _opencl_missing():
        pytest.skip(_opencl_missing())
    x, n = np.linspace(-1.0, 2.0, 11), 11
    expected, got = np.zeros(n), np.zeros(n)
    running_sums_twice.compile("interp").entry(expected, x, n)
    running_sums_twice.compile(backend).entry(got, x, n)
    assert np.array_equal(got, expected)
    module = running_sums_twice.optimized("O2")[0]
    assert place_module_in_arena(module) and all(views_and_arenas(function)[1] == 1 for function in module)
