"""Trip counts, loop-canon, licm and cse on parsed and builder-made IR.

The trip count analysis is checked against Python's `len(range(...))` and against the number of iterations the
interpreter counts; loop-canon's structural invariants on random CFGs against their definitions; and each
pass (and the three together) by running the interpreter before and after it on small loop kernels, which
must give bit-identical results, the same arrays, or the same kind of error.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isozyme.optimize.loop_canonicalization import loop_canonicalization
from isozyme.optimize.loop_invariant_code_motion import may_trap
from isozyme.optimize.pass_manager import PassOptions, run_passes
from isozyme.ssa import (
    Builder,
    Constant,
    Function,
    Instruction,
    Loop,
    LoopNest,
    Module,
    TripCount,
    UnknownTripCount,
    analyze_trip_count,
    loop_runs_at_least_once,
    make_function,
    parse_module,
    run_function,
    verify,
)
from isozyme.ssa.cfg import predecessors
from isozyme.ssa.ops import Op
from isozyme.ssa.printer import print_function, print_module
from isozyme.ssa.trip_count import loop_entry_test_value
from isozyme.ssa.types import I1, I64

EXAMPLES = Path(__file__).parent.parent / "examples"

# --- the trip count analysis ----------------------------------------------------------------------------------

COUNTED = """
func @count(%a: i64, %b: i64, %out: i64[?]) -> i64 {{
entry:
  br header
header:
  %i = phi i64 [entry: {start}, latch: %i.next]
  %n = phi i64 [entry: 0, latch: %n.next]
  %c = icmp.{predicate} %i, {bound}
  cbr %c, latch, exit
latch:
  %n.next = iadd %n, 1
  %i.next = {increment}
  br header
exit:
  ret %n
}}
"""
"""A loop from `start` stepping while `i predicate bound`, counting its iterations in %n."""


def counted(start: str, predicate: str, bound: str, step: int) -> Function:
    increment = f"iadd %i, {step}" if step > 0 else f"isub %i, {-step}"
    text = COUNTED.format(start=start, predicate=predicate, bound=bound, increment=increment)
    return parse_module(text)["count"]


def only_loop(function: Function) -> Loop:
    (loop,) = LoopNest(function).loops
    return loop


def python_trip_count(predicate: str, a: int, b: int, step: int) -> int:
    """How often Python's `for` runs for the loop `i = a; while i PRED b: i += step`."""
    exclusive = {"slt": b, "sgt": b, "sle": b + 1, "sge": b - 1}[predicate]
    return len(range(a, exclusive, step))


DIRECTIONS = [("slt", 1), ("slt", 3), ("sle", 1), ("sle", 2), ("sgt", -1), ("sgt", -3), ("sge", -1), ("sge", -2)]
BOUNDS = [(0, 0), (0, 7), (7, 0), (-5, 4), (4, -5), (3, 3), (-2, -9), (10, 11)]


@pytest.mark.parametrize("predicate,step", DIRECTIONS)
def test_constant_trip_counts_match_python_range(predicate: str, step: int) -> None:
    for a, b in BOUNDS:
        count = analyze_trip_count(only_loop(counted(str(a), predicate, str(b), step)))
        assert isinstance(count, TripCount)
        assert count.constant() == python_trip_count(predicate, a, b, step), (a, b)


@pytest.mark.parametrize("predicate,step", DIRECTIONS)
def test_emitted_trip_count_matches_the_iterations_the_interpreter_counts(predicate: str, step: int) -> None:
    function = counted("%a", predicate, "%b", step)
    loop = only_loop(function)
    count = analyze_trip_count(loop)
    assert isinstance(count, TripCount) and count.constant() is None
    trip = count.emit_in_preheader()
    Builder().before(loop.preheader.terminator).store(trip, function.args[2], 0)
    verify(function)
    for a, b in BOUNDS:
        out = np.zeros(1, dtype=np.int64)
        iterations = run_function(function, a, b, out, step_limit=10_000)
        assert iterations == out[0] == python_trip_count(predicate, a, b, step), (a, b)


@pytest.mark.parametrize("step", [1, -1])
def test_ne_loops_count_the_distance(step: int) -> None:
    function = counted("%a", "ne", "%b", step)
    count = analyze_trip_count(only_loop(function))
    assert isinstance(count, TripCount) and count.predicate is Op.ICMP_NE
    assert count.is_canonical is False  # starts at %a
    trip = count.emit_in_preheader()
    Builder().before(only_loop(function).preheader.terminator).store(trip, function.args[2], 0)
    for distance in (0, 1, 5):
        a, b = (3, 3 + distance) if step == 1 else (3, 3 - distance)
        out = np.zeros(1, dtype=np.int64)
        assert run_function(function, a, b, out, step_limit=10_000) == out[0] == distance


def test_swapped_operands_and_exit_on_true() -> None:
    # `cbr (n <= i), exit, body` stays while i < n: the same loop as the frontend's.
    text = COUNTED.format(start="0", predicate="sge", bound="%b", increment="iadd %i, 1")
    text = text.replace("%c = icmp.sge %i, %b", "%c = icmp.sle %b, %i").replace("cbr %c, latch, exit",
                                                                                   "cbr %c, exit, latch")
    count = analyze_trip_count(only_loop(parse_module(text)["count"]))
    assert isinstance(count, TripCount)
    assert count.predicate is Op.ICMP_SLT and count.is_canonical


FRONTEND_FORM = """
func @sum(%x: f64[?], %n: i64) -> f64 {
entry:
  %trip = imax %n, 0
  br header
header:
  %k = phi i64 [entry: 0, latch: %k.next]
  %s = phi f64 [entry: 0.0, latch: %s.next]
  %c = icmp.slt %k, %trip
  cbr %c, latch, exit
latch:
  %v = load %x[%k]
  %s.next = fadd %s, %v
  %k.next = iadd %k, 1
  br header
exit:
  ret %s
}
"""


def test_the_frontend_form_has_its_trip_value_as_trip_count() -> None:
    function = parse_module(FRONTEND_FORM)["sum"]
    loop = only_loop(function)
    count = analyze_trip_count(loop)
    assert isinstance(count, TripCount) and count.is_canonical
    trip = function.entry.instructions[0]
    size = len(function.entry.instructions)
    assert count.emit_in_preheader() is trip
    assert len(function.entry.instructions) == size  # nothing emitted
    assert count.iv.phi.name == "k" and count.bound is trip


def test_a_bound_not_known_nonnegative_is_clamped() -> None:
    function = counted("0", "slt", "%b", 1)
    count = analyze_trip_count(only_loop(function))
    assert isinstance(count, TripCount) and count.is_canonical
    trip = count.emit_in_preheader()
    assert isinstance(trip, Instruction) and trip.op is Op.IMAX


UNKNOWN = {
    "data-dependent": """
func @f(%x: f64[?], %n: i64) -> i64 {
entry:
  br header
header:
  %i = phi i64 [entry: 0, latch: %i.next]
  %v = load %x[%i]
  %c = fcmp.olt %v, 1.0
  cbr %c, latch, exit
latch:
  %i.next = iadd %i, 1
  br header
exit:
  ret %i
}""",
    "break": """
func @f(%x: f64[?], %n: i64) -> i64 {
entry:
  br header
header:
  %i = phi i64 [entry: 0, latch: %i.next]
  %c = icmp.slt %i, %n
  cbr %c, body, exit
body:
  %v = load %x[%i]
  %stop = fcmp.olt %v, 0.0
  cbr %stop, exit, latch
latch:
  %i.next = iadd %i, 1
  br header
exit:
  ret %i
}""",
}


@pytest.mark.parametrize("shape", sorted(UNKNOWN))
def test_loops_with_data_dependent_exits_have_unknown_trip_counts(shape: str) -> None:
    result = analyze_trip_count(only_loop(parse_module(UNKNOWN[shape])["f"]))
    assert isinstance(result, UnknownTripCount)
    assert str(result).startswith("unknown trip count: ")


@pytest.mark.parametrize("predicate,bound,increment", [
    ("slt", "%b", "isub %i, 1"),      # moves away from the bound
    ("sgt", "%b", "iadd %i, 2"),
    ("eq", "%b", "iadd %i, 1"),       # runs at most once
    ("ne", "%b", "iadd %i, 2"),       # may step over the bound
    ("slt", "%b", "iadd %i, %i"),     # the step varies
    ("slt", "%n", "iadd %i, 1"),      # the bound varies
])
def test_loops_that_are_not_counted(predicate: str, bound: str, increment: str) -> None:
    text = COUNTED.format(start="%a", predicate=predicate, bound=bound, increment=increment)
    assert isinstance(analyze_trip_count(only_loop(parse_module(text)["count"])), UnknownTripCount)


def test_an_invariant_step_is_assumed_to_go_towards_the_bound() -> None:
    text = COUNTED.format(start="%a", predicate="slt", bound="%b", increment="iadd %i, %s")
    text = text.replace("(%a: i64, %b: i64,", "(%a: i64, %b: i64, %s: i64,")
    function = parse_module(text)["count"]
    count = analyze_trip_count(only_loop(function))
    assert isinstance(count, TripCount) and count.iv.step is function.args[2]
    trip = count.emit_in_preheader()
    Builder().before(only_loop(function).preheader.terminator).store(trip, function.args[3], 0)
    for a, b, s in [(0, 10, 3), (5, 6, 4), (9, 2, 1), (-7, 7, 7)]:
        out = np.zeros(1, dtype=np.int64)
        assert run_function(function, a, b, s, out, step_limit=10_000) == out[0] == len(range(a, b, s))


# --- does the loop run at least once? --------------------------------------------------------------------------

GUARDED = """
func @f(%x: f64[?], %n: i64, %m: i64) -> f64 {{
entry:
  %trip = imax %n, 0
  %g = {guard}
  cbr %g, {targets}
pre:
  br header
header:
  %k = phi i64 [pre: 0, latch: %k.next]
  %s = phi f64 [pre: 0.0, latch: %s.next]
  %c = icmp.slt %k, %trip
  cbr %c, latch, exit
latch:
  %v = load %x[%k]
  %s.next = fadd %s, %v
  %k.next = iadd %k, 1
  br header
exit:
  ret 0.0
}}
"""


@pytest.mark.parametrize("guard,targets,expected", [
    ("icmp.slt 0, %trip", "pre, exit", True),          # loop-canon's guard
    ("icmp.sgt %trip, 0", "pre, exit", True),          # swapped
    ("icmp.sle %trip, 0", "exit, pre", True),          # negated, with the targets swapped
    ("icmp.sgt %n, 0", "pre, exit", True),             # 0 < imax(n, 0) iff 0 < n
    ("icmp.slt 0, %m", "pre, exit", False),            # another variable
    ("icmp.slt 0, %trip", "exit, pre", False),         # the wrong edge
    ("icmp.sgt %n, 1", "pre, exit", False),            # implies it, but licm does not do arithmetic
])
def test_a_dominating_guard_proves_the_loop_runs(guard: str, targets: str, expected: bool) -> None:
    function = parse_module(GUARDED.format(guard=guard, targets=targets))["f"]
    nest = LoopNest(function)
    assert loop_runs_at_least_once(nest.loops[0], nest.tree) is expected


def test_a_guard_conjunction_proves_each_part() -> None:
    text = GUARDED.format(guard="icmp.slt 0, %trip", targets="pre, exit").replace(
        "  cbr %g, pre, exit", "  %h = icmp.slt 0, %m\n  %both = and %h, %g\n  cbr %both, pre, exit")
    nest = LoopNest(parse_module(text)["f"])
    assert loop_runs_at_least_once(nest.loops[0], nest.tree)


@pytest.mark.parametrize("bound,expected", [("10", True), ("0", False), ("-3", False), ("%b", None)])
def test_a_constant_entry_test_decides(bound: str, expected: bool | None) -> None:
    function = counted("0", "slt", bound, 1)
    nest = LoopNest(function)
    assert loop_entry_test_value(nest.loops[0]) is expected
    assert loop_runs_at_least_once(nest.loops[0], nest.tree) is bool(expected)


def test_a_header_that_does_not_exit_always_enters_the_loop() -> None:
    nest = LoopNest(parse_module(DIFFERENTIAL_MODULE)["skip_negatives"])
    loop = nest.loops[0]
    assert loop_runs_at_least_once(loop, nest.tree) is True


# --- loop-canon's structure on random CFGs ---------------------------------------------------------------------


@st.composite
def random_cfgs(draw: st.DrawFn, max_size: int = 8) -> Function:
    """`@f(%c: i1)`: 2 to `max_size` blocks with random edges (none into the entry), each joined block with
    a phi whose value from a predecessor is that predecessor's own phi (or a constant), so edge splits must
    carry real values."""
    size = draw(st.integers(2, max_size))
    targets = [draw(st.lists(st.integers(1, size - 1), max_size=2, unique=True)) for _ in range(size)]
    function = make_function("f", [("c", I1)])
    blocks = [function.add_block(f"b{index}") for index in range(size)]
    for block, succs in zip(blocks, targets):
        builder = Builder(block)
        if not succs:
            builder.ret()
        elif len(succs) == 1:
            builder.br(blocks[succs[0]])
        else:
            builder.cbr(function.args[0], blocks[succs[0]], blocks[succs[1]])
    preds = predecessors(function)
    phis = {block: Builder(block).phi(I64, name=f"p{index}") for index, block in enumerate(blocks) if preds[block]}
    for block, phi in phis.items():
        for pred in preds[block]:
            phi.add_incoming(pred, phis.get(pred, Constant(I64, blocks.index(pred))))
    verify(function)
    return function


def assert_canonical_structure(function: Function) -> None:
    preds = predecessors(function)
    for loop in LoopNest(function):
        assert loop.preheader is not None, loop
        assert len(loop.latches) == 1, loop
        for exit_block in loop.exit_blocks:
            assert all(pred in loop for pred in preds[exit_block]), (loop, exit_block)


def assert_loop_canon_makes_canonical_and_is_idempotent(function: Function) -> None:
    loop_canonicalization(function)
    verify(function)
    assert_canonical_structure(function)
    printed = print_function(function)
    assert loop_canonicalization(function) is False
    assert print_function(function) == printed


@settings(max_examples=150, deadline=None)
@given(random_cfgs())
def test_loop_canon_makes_every_loop_canonical_and_is_idempotent(function: Function) -> None:
    assert_loop_canon_makes_canonical_and_is_idempotent(function)


@settings(max_examples=150, deadline=None)
@given(random_cfgs(max_size=24))
def test_loop_canon_on_larger_cfgs_where_one_round_fixes_several_loops(function: Function) -> None:
    # A round goes on past a change with the loops the change cannot have reached (`_fix_until_stable`):
    # with many loops, some of them nested, siblings and neighbours are fixed on a stale nest
    assert_loop_canon_makes_canonical_and_is_idempotent(function)


def loop_chain(count: int) -> Function:
    """`count` loops one after the other, each header's exit the next header: every loop after the first
    lacks a preheader and a dedicated exit."""
    function = make_function("chain", [("c", I1)])
    entry = function.add_block("entry")
    headers = [function.add_block(f"h{index}") for index in range(count)]
    bodies = [function.add_block(f"b{index}") for index in range(count)]
    done = function.add_block("done")
    Builder(entry).br(headers[0])
    for index, (header, body) in enumerate(zip(headers, bodies)):
        after = headers[index + 1] if index + 1 < count else done
        Builder(header).cbr(function.args[0], body, after)
        Builder(body).br(header)
    Builder(done).ret()
    verify(function)
    return function


def test_loop_canon_fixes_a_chain_of_loops_in_a_few_rounds_not_one_round_per_fix(monkeypatch) -> None:
    import isozyme.optimize.loop_canonicalization as canon

    nests = []

    class CountedNest(LoopNest):
        def __init__(self, function: Function) -> None:
            super().__init__(function)
            nests.append(self)

    monkeypatch.setattr(canon, "LoopNest", CountedNest)
    function = loop_chain(40)
    assert canon.canonicalize_loop_structure(function) is True
    verify(function)
    assert_canonical_structure(function)
    # 39 fixes (each exit split, which also gives the next loop its preheader): one nest per fix took 40
    # nests; now a round fixes every other loop or so
    assert len(function.blocks) == 2 + 2 * 40 + 39
    assert len(nests) <= 5, len(nests)


# --- licm details -----------------------------------------------------------------------------------------------


def test_division_by_a_nonzero_constant_cannot_trap() -> None:
    function = make_function("f", [("a", I64), ("d", I64)], I64)
    b = Builder(function.add_block("entry"))
    a, d = function.args
    assert not may_trap(b.ifloordiv(a, 2)) and not may_trap(b.ifloordiv(a, -1))
    assert may_trap(b.ifloordiv(a, 0)) and may_trap(b.ifloordiv(a, d)) and may_trap(b.ifloormod(a, d))
    assert not may_trap(b.shl(a, 63)) and may_trap(b.shl(a, 64)) and may_trap(b.ashr(a, -1))
    assert not may_trap(b.fdiv(1.0, 0.0)) and may_trap(b.cast(Op.FPTOSI, 1.0, I64))


def test_the_showcase_call_leaves_the_loop_after_loop_canon() -> None:
    module = parse_module((EXAMPLES / "norm.ir").read_text())
    run_passes(module, ["loop-canon", "licm"], PassOptions(verify_each=True))
    norm = module["norm"]
    (call,) = [inst for inst in norm.instructions() if inst.op is Op.CALL]
    assert LoopNest(norm).loop_of(call.block) is None
    module = parse_module((EXAMPLES / "norm.ir").read_text())
    run_passes(module, ["licm"], PassOptions(verify_each=True))  # no guard: the loop may run zero times
    (call,) = [inst for inst in module["norm"].instructions() if inst.op is Op.CALL]
    assert LoopNest(module["norm"]).loop_of(call.block) is not None


# --- differential: the interpreter before and after each pass ---------------------------------------------------

DIFFERENTIAL_MODULE = (EXAMPLES / "norm.ir").read_text() + (Path(__file__).parent / "loop_kernels.ir").read_text()
"""The kernels of the differential test: DESIGN's norm and the loop shapes of tests/loop_kernels.ir."""


def f64s(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def i64s(size: int) -> np.ndarray:
    return np.zeros(size, dtype=np.int64)


CASES: dict[str, list[tuple]] = {
    "norm": [(f64s(0, 0, 0, 0), f64s(3, 4, 12, 0.1), 4), (f64s(0), f64s(2), 0), (f64s(0, 0, 0), f64s(3, 4, 12), 5)],
    "down": [(i64s(8), 0), (i64s(8), 1), (i64s(8), 7), (i64s(8), -3), (i64s(8), 20)],
    "up_sle": [(0, 10), (-5, 5), (4, 2), (7, 7)],
    "ne_down": [(5, 1), (3, 3), (0, -4)],
    "divide": [(i64s(4), 7, 2, 4), (i64s(4), 7, 0, 0), (i64s(4), 7, 0, 3), (i64s(4), -7, 2, -1)],
    "search": [(f64s(0.5, 2.0, 3.0), 3, 1.0), (f64s(0.5, 0.2), 2, 1.0), (f64s(), 0, 1.0), (f64s(1.0), 4, 5.0)],
    "skip_negatives": [(f64s(1.0, -2.0, 3.0), 3, 0.5), (f64s(-1.0), 1, 2.0), (f64s(1.0, 2.0), 5, 1.0)],
    "matvec": [(f64s(0, 0), np.arange(6.0).reshape(2, 3), f64s(1, 2, 3), f64s(0.5), 2, 3),
               (f64s(0, 0), np.zeros((2, 0)), f64s(), f64s(), 2, 0),
               (f64s(), np.zeros((0, 3)), f64s(1, 2, 3), f64s(), 0, 3)],
    "square_in_place": [(f64s(1.5, -2.0, 3.0), f64s(0, 0, 0), 3), (f64s(), f64s(), 0), (f64s(1.0), f64s(), 1)],
    "accumulate": [(f64s(1, 2, 3), 3), (f64s(), 0)],
    "exit_shared": [(f64s(0.5, 0.7, 2.0), True), (f64s(0.5), False), (f64s(0.5, 0.7), True)],
    "guard_without_preheader": [(i64s(3), 7, 2, 3), (i64s(3), 7, 0, 0), (i64s(3), 7, 0, 2), (i64s(1), 7, 3, 2)],
    "header_with_effect": [(i64s(1), 0), (i64s(1), 3), (i64s(0), 0)],
    "diamond_loads": [(f64s(1.0, 2.0), True, 0), (f64s(1.0, 2.0), True, 1), (f64s(1.0, 2.0), False, 1)],
}
"""Arguments for each kernel: zero-trip loops, loops that trap (out of bounds, division by zero) included."""

PIPELINES = [["loop-canon"], ["licm"], ["cse"], ["loop-canon", "licm", "cse", "dce"], ["loop-canon", "licm"]]

KERNEL_ERRORS = (ArithmeticError, IndexError, ValueError, AssertionError)
"""The errors a kernel raises (an interpreter bug, a step limit or a type error still fails the test)."""


def _bits(value: object) -> object:
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    return value


def outcome(function: Function, args: tuple) -> tuple:
    """What running `function` on copies of `args` gives: the result and the arrays, bit for bit, or the
    kind of error."""
    copies = [arg.copy() if isinstance(arg, np.ndarray) else arg for arg in args]
    try:
        result = run_function(function, *copies, step_limit=200_000)
    except KERNEL_ERRORS as error:
        return ("raised", type(error).__name__)
    return ("returned", _bits(result), tuple(_bits(arg) for arg in copies if isinstance(arg, np.ndarray)))


def outcomes(module: Module) -> dict[str, list[tuple]]:
    return {name: [outcome(module[name], args) for args in cases] for name, cases in CASES.items()}


EXPECTED = outcomes(parse_module(DIFFERENTIAL_MODULE))


def test_the_differential_cases_cover_zero_trips_and_traps() -> None:
    kinds = {result[0] for results in EXPECTED.values() for result in results}
    assert kinds == {"raised", "returned"}
    assert ("raised", "ZeroDivisionError") in EXPECTED["divide"] and ("raised", "IndexError") in EXPECTED["norm"]


@pytest.mark.parametrize("passes", PIPELINES, ids=",".join)
def test_passes_keep_interpreter_results_bit_identical(passes: list[str]) -> None:
    module = parse_module(DIFFERENTIAL_MODULE)
    run_passes(module, passes, PassOptions(verify_each=True))
    assert outcomes(module) == EXPECTED
    printed = print_module(module)
    assert run_passes(module, passes, PassOptions(verify_each=True)) is False, "a second run changed the IR"
    assert print_module(module) == printed


def test_the_pipeline_moves_what_the_kernels_hold_invariant() -> None:
    """The differential cases are not vacuous: the passes really do move and merge instructions there."""
    module = parse_module(DIFFERENTIAL_MODULE)
    assert run_passes(module, ["loop-canon", "licm", "cse", "dce"], PassOptions(verify_each=True))

    def loop_depth_of(function_name: str, op: Op) -> list[int]:
        nest = LoopNest(module[function_name])
        return sorted(nest.depth(inst.block) for inst in module[function_name].instructions() if inst.op is op)

    assert loop_depth_of("norm", Op.CALL) == [0]
    assert loop_depth_of("divide", Op.IFLOORDIV) == [0]
    assert loop_depth_of("guard_without_preheader", Op.IFLOORDIV) == [0]
    assert loop_depth_of("matvec", Op.LOAD) == [1, 2, 2]        # %scale[0] left the inner loop
    assert loop_depth_of("accumulate", Op.CALL) == [1]          # the callee reads what the loop writes
    assert loop_depth_of("square_in_place", Op.LOAD) == [1, 1]  # x[i] once, y[i] forwarded, y[0] kept
    assert loop_depth_of("skip_negatives", Op.FMUL) == [0, 1]
