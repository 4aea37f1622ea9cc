"""Memory plans (`optimize/memory_reuse.py`): buffers, liveness, packing and `iz.show_memory`.

Every plan is checked by `validate_plan`, a pairwise check written apart from the packer. The liveness is
checked by running: `run_in_arena` executes a function in the reference interpreter with its planned
allocs placed at their offsets of one shared byte arena (what codegen will do), so a plan that lets two
live buffers overlap corrupts a value and the result differs from the plain run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isozyme as iz
from isozyme.optimize.memory_reuse import (
    ARENA_ALIGNMENT,
    Buffer,
    BufferStatus,
    MemoryPlan,
    MemoryPlanError,
    plan_buffers,
    plan_memory,
    validate_plan,
)
from isozyme.runtime.autodiff import differentiate, parse_activity
from isozyme.ssa import interpreter
from isozyme.ssa.interpreter import run_function
from isozyme.ssa.ir import Function
from isozyme.ssa.ops import Op
from isozyme.ssa.parser import parse_module
from isozyme.ssa.verifier import verify
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
    assert len(plan.planned) == 4 and 0 < plan.used < plan.requested
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
