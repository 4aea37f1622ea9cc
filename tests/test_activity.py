"""Activity analysis (isozyme/enzyme_ad/activity.py) on hand-written IR and on optimized kernels.

Every expected activity below is reasoned from the program in the test: a value is active iff it depends
on an active input (varied) and influences the active return value or an array with a shadow (useful).
Kernels are looked at through the op and the operands of their instructions, not through printed names,
so the tests do not depend on how the optimizer names values.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.enzyme_ad.activity import Activity, ActivityError, ArgActivity, analyze_activity, format_activity
from isozyme.kernel_files import load_kernels
from isozyme.ssa.ir import Function, Instruction, Module, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.parser import parse_function, parse_module
from isozyme.ssa.printer import print_function


@iz.kernel
def poly(x: f64) -> f64:
    return 3.0 * x * x - 2.0 * x + 1.0


@iz.kernel
def relu3(out: Array[f64], x: Array[f64]):
    for i in range(len(x)):
        out[i] = x[i] ** 3 if x[i] > 0.0 else 0.0


@iz.kernel
def scale(out: Array[f64], x: Array[f64], n: i64):
    for i in range(n):
        out[i] = 2.0 * x[i]


@iz.kernel
def dot(x: Array[f64], y: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * y[i]
    return s


@iz.kernel
def through_local(x: Array[f64], n: i64) -> f64:
    t = iz.zeros(n, f64)
    for i in range(n):
        t[i] = x[i] * 2.0
    s = 0.0
    for i in range(n):
        s += t[i] * t[i]
    return s


norm = load_kernels(str(Path(__file__).parent.parent / "examples" / "norm.py"))["norm"]  # DESIGN 1's norm and mag


MAG = """
func @mag(%x: f64[?], %n: i64) -> f64 {
bb0:
  br bb1
bb1:
  %i = phi i64 [bb0: 0, bb2: %i.next]
  %s = phi f64 [bb0: 0.0, bb2: %s.next]
  %c = icmp.slt %i, %n
  cbr %c, bb2, bb3
bb2:
  %xi = load %x[%i]
  %sq = fmul %xi, %xi
  %s.next = fadd %s, %sq
  %i.next = iadd %i, 1
  br bb1
bb3:
  %r = sqrt %s
  ret %r
}
"""


def values(function: Function) -> dict[str, Value]:
    """The arguments and instruction results of a parsed function, by their names in the text."""
    found: dict[str, Value] = {arg.name: arg for arg in function.args}  # type: ignore[misc]
    found.update((inst.name, inst) for inst in function.instructions() if inst.name)
    return found


def active_names(function: Function, activity: Activity) -> set[str]:
    return {name for name, value in values(function).items() if activity.is_active(value)}


def of_op(function: Function, op: Op) -> list[Instruction]:
    return [inst for inst in function.instructions() if inst.op is op]


def float_results(function: Function) -> list[Instruction]:
    return [inst for inst in function.instructions() if inst.type.is_float]


# --- scalars, loops, branches -------------------------------------------------------------------------------


def test_every_float_op_of_a_polynomial_is_active() -> None:
    _, function = poly.optimized("O2")
    activity = analyze_activity(function, ["active"])
    # Each op of 3x^2 - 2x + 1 takes x or a value computed from x, and feeds the returned value.
    assert float_results(function) and all(activity.is_active(inst) for inst in float_results(function))
    assert activity.is_active(function.args[0]) and activity.returns_active


def test_a_const_argument_makes_the_polynomial_inactive() -> None:
    _, function = poly.optimized("O2")
    activity = analyze_activity(function, [ArgActivity.CONST])
    assert not activity.active_values and not activity.active_arrays


def test_loop_counter_is_inactive_and_accumulator_active() -> None:
    function = parse_function(MAG)
    activity = analyze_activity(function, ["dup", "const"])
    # %i, %i.next, %c and %n are integers or conditions; everything on the path x[i] -> s -> sqrt is active.
    assert active_names(function, activity) == {"x", "xi", "sq", "s", "s.next", "r"}
    assert activity.active_arrays == {function.args[0]}
    assert activity.is_active_memory(function.args[0])


def test_nothing_is_active_when_the_return_is_not() -> None:
    function = parse_function(MAG)
    activity = analyze_activity(function, ["dup", "const"], returns_active=False)
    # Every float is varied (it comes from x) but none reaches an output: @mag writes no array.
    assert not activity.active_values
    assert activity.varied == {v for v in values(function).values() if v.type.is_float}
    assert activity.active_arrays == {function.args[0]}  # a Duplicated array always has its shadow


def test_a_value_of_const_inputs_only_is_inactive() -> None:
    function = parse_function("""
func @f(%x: f64, %c: f64) -> f64 {
bb0:
  %t = fmul %c, %c
  %r = fmul %x, %t
  ret %r
}
""")
    activity = analyze_activity(function, ["active", "const"])
    v = values(function)
    assert active_names(function, activity) == {"x", "r"}
    assert v["t"] in activity.useful and v["t"] not in activity.varied


def test_varied_values_that_reach_no_output_are_inactive() -> None:
    function = parse_function("""
func @f(%out: f64[?], %x: f64) -> f64 {
bb0:
  %y = fmul %x, %x
  store %y, %out[0]
  %unused = fadd %x, 1.0
  %r = fmul %x, 2.0
  ret %r
}
""")
    activity = analyze_activity(function, ["const", "active"])
    v = values(function)
    # %y only goes into a Const array (no shadow, never read back); %unused goes nowhere.
    assert v["y"] in activity.varied and v["unused"] in activity.varied
    assert active_names(function, activity) == {"x", "r"}
    assert not activity.active_arrays


def test_relu3_condition_is_inactive_and_branch_values_active() -> None:
    _, function = relu3.optimized("O2")
    activity = analyze_activity(function, ["dup", "dup"])
    # out[i] = x[i]**3 if x[i] > 0 else 0: the load, the cube and the merge of the branches are active.
    assert of_op(function, Op.FCMP_OGT) and not any(map(activity.is_active, of_op(function, Op.FCMP_OGT)))
    assert of_op(function, Op.CBR) and not any(activity.is_active_instruction(i) for i in of_op(function, Op.CBR))
    assert all(activity.is_active(inst) for inst in float_results(function))
    assert activity.active_arrays == set(function.args)


def test_select_condition_is_inactive_and_selected_value_active() -> None:
    function = parse_function("""
func @relu(%x: f64, %lo: f64) -> f64 {
bb0:
  %c = fcmp.ogt %x, %lo
  %y = select %c, %x, %lo
  ret %y
}
""")
    activity = analyze_activity(function, ["active", "const"])
    assert active_names(function, activity) == {"x", "y"}


# --- memory -------------------------------------------------------------------------------------------------


def test_duplicated_output_of_a_const_input_has_no_active_value() -> None:
    _, function = scale.optimized("O2")
    out, x, _ = function.args
    activity = analyze_activity(function, ["dup", "const", "const"])
    # 2 * x[i] depends on nothing active; out keeps its shadow (the reverse pass zeroes what the store overwrote).
    assert not activity.active_values
    assert activity.active_arrays == {out} and not activity.is_active_memory(x)
    assert all(activity.is_active_instruction(store) for store in of_op(function, Op.STORE))


def test_a_load_from_a_const_array_is_inactive() -> None:
    _, function = dot.optimized("O2")
    x, y, _ = function.args
    activity = analyze_activity(function, ["dup", "const", "const"])
    loads = {inst.operands[0]: inst for inst in of_op(function, Op.LOAD)}
    assert activity.is_active(loads[x]) and not activity.is_active(loads[y])
    assert loads[y] in activity.useful  # it multiplies x[i]: useful, just never varied
    assert activity.active_arrays == {x}


def test_a_local_array_carrying_active_values_between_loops_is_active_memory() -> None:
    _, function = through_local.optimized("O2")
    (alloc,) = of_op(function, Op.ALLOC)
    activity = analyze_activity(function, ["dup", "const"])
    # t[i] = 2 x[i] makes t varied; s += t[i]^2 is returned, so what is loaded from t is useful.
    assert activity.is_active_memory(alloc) and activity.active_arrays == {function.args[0], alloc}
    assert all(activity.is_active(load) for load in of_op(function, Op.LOAD))
    assert all(activity.is_active_instruction(store) for store in of_op(function, Op.STORE))


def test_a_local_array_of_const_values_is_inactive_memory() -> None:
    _, function = through_local.optimized("O2")
    activity = analyze_activity(function, ["const", "const"])
    assert not activity.active_arrays and not activity.active_values


LOCAL_ARRAYS = """
func @f(%x: f64, %k: i1) -> f64 {
bb0:
  %a = alloc f64[1]
  %b = alloc f64[1]
  cbr %k, bb1, bb2
bb1:
  br bb2
bb2:
  %p = phi f64[?] [bb0: %a, bb1: %b]
  %y = fmul %x, 3.0
  store %y, %p[0]
  %junk = fadd %x, 1.0
  store %junk, %b[0]
  %r = load %a[0]
  ret %r
}
"""


def test_a_phi_of_arrays_stands_for_every_array_it_may_be() -> None:
    function = parse_function(LOCAL_ARRAYS)
    v = values(function)
    activity = analyze_activity(function, ["active", "const"])
    # %p may be %a or %b: the store through it makes both varied. Only %a is read (into the result), so
    # only %a's memory is useful; the store through %p is useful because %p may be %a, %junk's is not.
    assert activity.active_arrays == {v["a"], v["p"]}
    assert active_names(function, activity) == {"x", "y", "r", "a", "p"}
    assert v["junk"] in activity.varied and not activity.is_active(v["junk"])


def test_loop_carried_memory_reaches_a_fixed_point_in_any_layout() -> None:
    # The exit block comes first in layout and the store after the load it feeds on the next iteration.
    function = parse_function("""
func @f(%x: f64, %n: i64) -> f64 {
bb0:
  %t = alloc f64[1] zeroed
  br head
exit:
  %r = load %t[0]
  ret %r
head:
  %i = phi i64 [bb0: 0, body: %i.next]
  %c = icmp.slt %i, %n
  cbr %c, body, exit
body:
  %old = load %t[0]
  %new = fadd %old, %x
  store %new, %t[0]
  %i.next = iadd %i, 1
  br head
}
""")
    activity = analyze_activity(function, ["active", "const"])
    assert active_names(function, activity) == {"x", "t", "r", "old", "new"}


def test_active_values_in_a_const_array_read_back_are_an_error() -> None:
    function = parse_function("""
func @f(%scratch: f64[?], %x: f64) -> f64 {
bb0:
  store %x, %scratch[0]
  %r = load %scratch[0]
  ret %r
}
""")
    with pytest.raises(ActivityError, match="parameter 'scratch' of @f is const"):
        analyze_activity(function, ["const", "active"])
    assert analyze_activity(function, ["dup", "active"]).active_arrays == {function.args[0]}


# --- calls --------------------------------------------------------------------------------------------------


def test_a_call_to_a_helper_kernel_propagates_activity() -> None:
    module, function = norm.optimized("O0")  # O0: @mag stays a call, inside the loop
    out, x, _ = function.args
    activity = analyze_activity(function, ["dup", "dup", "const"])
    (call,) = of_op(function, Op.CALL)
    assert call.callee is module["mag"]
    # mag(x, n) reads the varied x and divides x[i], which is stored into the Duplicated out.
    assert activity.is_active(call) and all(activity.is_active(inst) for inst in float_results(function))
    assert activity.active_arrays == {out, x}


def test_a_call_on_const_arrays_only_is_inactive() -> None:
    _, function = norm.optimized("O0")
    activity = analyze_activity(function, ["dup", "const", "const"])
    assert not activity.active_values


CALLS = """
func @fill(%t: f64[?], %v: f64) {
bb0:
  store %v, %t[0]
  ret
}

func @first(%a: f64[?], %b: f64[?]) -> f64 {
bb0:
  %a0 = load %a[0]
  ret %a0
}

func @f(%x: f64, %c: f64[?], %d: f64[?]) -> f64 {
bb0:
  %t = alloc f64[1]
  call @fill(%t, %x)
  %y = load %t[0]
  %z = call @first(%c, %d)
  %r = fmul %y, %z
  ret %r
}
"""


def test_a_callee_that_writes_an_array_makes_its_memory_varied_and_its_arguments_useful() -> None:
    module = parse_module(CALLS)
    function = module["f"]
    v = values(function)
    activity = analyze_activity(function, ["active", "const", "dup"])
    # @fill writes x into t, read back into the result: t is active memory and the call must be differentiated.
    assert activity.is_active_memory(v["t"]) and activity.is_active(v["y"]) and activity.is_active(v["x"])
    (fill, first) = of_op(function, Op.CALL)
    assert activity.is_active_instruction(fill)
    # @first reads only its first parameter, here the const c: the Duplicated d does not make it varied.
    assert not activity.is_active(first) and not activity.is_active(v["z"])
    assert active_names(function, activity) == {"x", "t", "y", "r", "d"}


def test_a_call_without_a_summary_may_read_and_write_every_array_passed_to_it() -> None:
    function = parse_module(CALLS)["f"]
    function.module = None  # no module, no summaries
    # @first(c, d) might now read the varied d, and copy it into c, which it might read back: c would need
    # a shadow, which a const argument does not have.
    with pytest.raises(ActivityError, match="parameter 'c' of @f is const"):
        analyze_activity(function, ["active", "const", "dup"])
    activity = analyze_activity(function, ["active", "const", "const"])
    assert not activity.is_active(values(function)["z"]) and activity.is_active(values(function)["y"])


# --- arguments ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("activities", "error", "message"), [
    (["dup", "active"], TypeError, "parameter 'n' of @mag has type i64"),
    (["dup", "dup"], TypeError, "parameter 'n' of @mag has type i64"),
    (["active", "const"], TypeError, "parameter 'x' of @mag is an array"),
    (["dup"], TypeError, "@mag has 2 parameters, got 1 activities"),
    (["dup", "shadow"], ValueError, "unknown activity 'shadow' for parameter 'n'"),
])
def test_bad_activities_name_the_parameter(activities: list[str], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        analyze_activity(parse_function(MAG), activities)


def test_integer_arrays_are_never_active() -> None:
    function = parse_function("func @f(%idx: i64[?]) {\nbb0:\n  ret\n}\n")
    with pytest.raises(TypeError, match="parameter 'idx' of @f has type i64\\[\\?\\]"):
        analyze_activity(function, ["dup"])


def test_an_active_return_needs_a_float_return() -> None:
    function = parse_function("func @f(%x: f64) -> i64 {\nbb0:\n  ret 0\n}\n")
    with pytest.raises(TypeError, match="@f returns i64"):
        analyze_activity(function, ["active"], returns_active=True)
    assert analyze_activity(function, ["active"]).returns_active is False


def test_a_duplicated_float_scalar_is_varied() -> None:
    function = parse_function("func @f(%x: f64) -> f64 {\nbb0:\n  %y = sin %x\n  ret %y\n}\n")
    assert active_names(function, analyze_activity(function, ["dup"])) == {"x", "y"}


# --- printing -----------------------------------------------------------------------------------------------


def test_format_activity_annotates_every_instruction() -> None:
    function = parse_function("""
func @f(%out: f64[?], %x: f64, %c: f64, %n: i64) -> f64 {
bb0:
  %k = iadd %n, 1
  %t = fmul %c, %c
  %y = fmul %x, %x
  store %y, %out[%k]
  %r = fmul %x, %t
  ret %r
}
""")
    text = format_activity(function, analyze_activity(function, ["const", "active", "const", "const"]))
    lines = [line.split(";") for line in text.splitlines()]
    notes = {parts[0].strip(): parts[1].strip() for parts in lines if len(parts) == 2 and parts[0].strip()}
    assert text.splitlines()[:2] == ["; activity @f(%out: const, %x: active, %c: const, %n: const) -> active",
                                     "; active memory: none"]
    assert notes == {
        "%k = iadd %n, 1": "const",
        "%t = fmul %c, %c": "const: not varied",
        "%y = fmul %x, %x": "const: not useful",
        "store %y, %out[%k]": "const",
        "%r = fmul %x, %t": "active",
        "ret %r": "active",
    }


def test_format_activity_lists_active_arrays_and_still_parses() -> None:
    function = parse_function(LOCAL_ARRAYS)
    text = format_activity(function, analyze_activity(function, ["active", "const"]))
    assert "; active memory: %a, %p\n" in text
    assert "  br bb2\n" in text  # control flow carries no activity: no comment
    assert print_function(parse_function(text)) == print_function(function)


def test_format_activity_of_a_kernel_with_a_call() -> None:
    module, function = norm.optimized("O2")  # licm hoisted @mag(x, n) out of the loop
    assert isinstance(module, Module)
    text = format_activity(function, analyze_activity(function, ["dup", "dup", "const"]))
    assert text.startswith("; activity @norm(%out: dup, %x: dup, %n: const)\n; active memory: %out, %x\n")
    call_lines = [line for line in text.splitlines() if "call @mag" in line]
    assert len(call_lines) == 1 and call_lines[0].endswith("; active")
