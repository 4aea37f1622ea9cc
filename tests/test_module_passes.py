"""inline, func-attrs, mem2reg, dce's dead local stores, and the pass manager around them.

Differential checks: each pass must leave verified IR whose functions compute, in the reference
interpreter, what they computed before, bit for bit (floats by their bit patterns, any nan equal to any
nan), with the same arrays afterwards. The pass manager is tested with stand-in passes registered for the
test: module passes, parameters, pipeline expansion, the fixed point, verification and `--time-passes`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from isozyme.__main__ import main
from isozyme.optimize import pass_manager
from isozyme.optimize.call_graph import bottom_up_components, recursive_functions
from isozyme.optimize.function_attributes import function_attributes
from isozyme.optimize.inline import InlineContext, inline, refusal
from isozyme.optimize.mem2reg import mem2reg
from isozyme.optimize.pass_manager import (
    PIPELINES,
    REGISTRY,
    FixedPoint,
    Pass,
    PassError,
    PassOptions,
    Scope,
    expand_pipeline,
    flatten,
    run_passes,
)
from isozyme.ssa.builder import Builder, make_function
from isozyme.ssa.interpreter import run_function
from isozyme.ssa.ir import Function, Module, Value
from isozyme.ssa.loops import LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.parser import parse_module
from isozyme.ssa.printer import print_function, print_module
from isozyme.ssa.types import F64, I64
from isozyme.ssa.verifier import verify

OPT = Path(__file__).parent / "filecheck" / "opt"


def _vector(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


# --- differential checks --------------------------------------------------------------------------------

DIFFERENTIAL_CASES: list[tuple[str, str, str, Callable[[], list[object]]]] = [
    ("inline", "inline.ir", "straight", lambda: [1.5]),
    ("inline", "inline.ir", "two_returns", lambda: [-2.0]),
    ("inline", "inline.ir", "two_returns", lambda: [2.5]),
    ("inline", "inline.ir", "scaled_mag", lambda: [_vector(3.0, -4.0, 12.0), 3, 0.5]),
    ("inline", "inline.ir", "squares", lambda: [np.zeros(6), 6]),
    ("inline", "inline.ir", "void_call", lambda: [np.zeros(2)]),
    ("inline", "inline.ir", "uses_recursion", lambda: [7]),
    ("inline", "inline.ir", "norm", lambda: [np.zeros(3), _vector(1.0, 2.0, 2.0), 3]),
    ("func-attrs", "func_attrs.ir", "fill_local", lambda: [2.5, True]),
    ("func-attrs", "func_attrs.ir", "sum", lambda: [_vector(0.1, 0.2, 0.3), 2]),
    ("mem2reg", "mem2reg.ir", "sum", lambda: [_vector(0.1, 0.2, 0.7, 1e-17), 4]),
    ("mem2reg", "mem2reg.ir", "elements", lambda: [1.25, True]),
    ("mem2reg", "mem2reg.ir", "elements", lambda: [1.25, False]),
    ("mem2reg", "mem2reg.ir", "counter", lambda: [5]),
    ("mem2reg", "mem2reg.ir", "fresh_each_iteration", lambda: [3]),
    ("mem2reg", "mem2reg.ir", "not_promoted", lambda: [1, 4]),  # an out-of-bounds store: the error stays
    ("dce", "dce.ir", "dead_local_stores", lambda: [_vector(1.0, -3.0), 2]),
    ("dce", "dce.ir", "read_local_stores", lambda: [0.75, False]),
    ("O2", "pipelines.ir", "norm", lambda: [np.zeros(4), _vector(3.0, 4.0, 12.0, 0.1), 4]),
    ("O2", "pipelines.ir", "norm", lambda: [np.zeros(1), _vector(2.0), 0]),
    ("O2", "pipelines.ir", "norm_clear", lambda: [np.zeros(3), _vector(3.0, 4.0, 12.0), 3]),
    ("O2", "pipelines.ir", "norm_in_place", lambda: [_vector(3.0, 4.0, 12.0), 3]),
    ("O2", "pipelines.ir", "sum_squares", lambda: [9]),
    ("O1", "pipelines.ir", "sum_squares", lambda: [9]),
]


def _float_bits(value: float) -> bytes:
    return struct.pack("<d", value)


def same_value(a: object, b: object) -> bool:
    """Equal as the IR sees it: floats bit for bit (any nan equal to any nan), arrays element by element."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and all(same_value(x, y) for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or _float_bits(a) == _float_bits(b)
    return type(a) is type(b) and a == b


def _run(module: Module, name: str, args: list[object]) -> list[object]:
    """The function's result followed by every argument after the run, or the error it raised."""
    try:
        return [run_function(module[name], *args, step_limit=100_000), *args]
    except (ArithmeticError, IndexError, ValueError, AssertionError) as error:
        return [type(error), str(error)]


@pytest.mark.parametrize(("pass_name", "file", "function", "make_args"), DIFFERENTIAL_CASES,
                         ids=[f"{p}-{f}" for p, _, f, _ in DIFFERENTIAL_CASES])
def test_pass_preserves_interpreted_results(pass_name: str, file: str, function: str,
                                            make_args: Callable[[], list[object]]) -> None:
    text = (OPT / file).read_text()
    before = _run(parse_module(text), function, make_args())
    module = parse_module(text)
    assert run_passes(module, [pass_name], PassOptions(verify_each=True))
    after = _run(module, function, make_args())
    assert len(before) == len(after) and all(same_value(a, b) for a, b in zip(before, after)), (before, after)


def _random_slot_program(seed: int, blocks: int = 6, limit: int = 25) -> Function:
    """A random CFG (loops, joins, possibly irreducible) that reads and writes a 3-element local array.

    Each block updates the array at constant indices, counts its visit in a second local array and
    leaves for the exit once `limit` blocks ran, else for one of two random successors picked by a bit of
    `%bits`. The exit returns a checksum of the array and the count, so every value the slots hold matters.
    """
    rng = np.random.default_rng(seed)
    function = make_function("f", [("bits", I64), ("v", F64)], F64)
    bits, v = function.args
    entry = function.add_block("entry")
    body = [function.add_block(f"b{i}") for i in range(blocks)]
    exit_block = function.add_block("exit")
    b = Builder(entry)
    slots = b.alloc(F64, 3, zeroed=bool(rng.integers(2)), name="t")
    count = b.alloc(I64, 1, zeroed=True, name="count")
    b.br(body[0])
    for index, block in enumerate(body):
        b.at_end(block)
        for _ in range(int(rng.integers(1, 4))):
            _random_slot_update(b, rng, slots, v)
        visits = b.iadd(b.load(count, 0), 1)
        b.store(visits, count, 0)
        dispatch = function.add_block(f"d{index}", after=block)
        b.cbr(b.icmp_slt(visits, limit), dispatch, exit_block)
        b.at_end(dispatch)
        bit = b.and_(b.ashr(bits, b.ifloormod(visits, 62)), 1)
        first, second = (body[int(i)] for i in rng.integers(1, blocks, size=2))
        if first is second:
            b.br(first)
        else:
            b.cbr(b.icmp_eq(bit, 0), first, second)
    b.at_end(exit_block)
    total = b.fadd(b.fadd(b.load(slots, 0), b.load(slots, 1)), b.load(slots, 2))
    b.ret(b.fadd(total, b.cast(Op.SITOFP, b.load(count, 0), F64)))
    verify(function)
    return function


def _random_slot_update(b: Builder, rng: np.random.Generator, slots: Value, v: Value) -> None:
    """One random access: a store of %v, a store of a loaded value plus one, or an atomic add."""
    target, source = (int(i) for i in rng.integers(0, 3, size=2))
    kind = int(rng.integers(3))
    if kind == 0:
        b.store(v, slots, target)
    elif kind == 1:
        b.store(b.fadd(b.load(slots, source), 1.0), slots, target)
    else:
        b.atomic_add(b.fmul(v, 0.5), slots, target)


@pytest.mark.parametrize("seed", range(40))
def test_mem2reg_on_random_control_flow(seed: int) -> None:
    function = _random_slot_program(seed)
    module = Module()
    module.add(function)
    inputs = [(int(bits), 0.75) for bits in np.random.default_rng(seed).integers(0, 2**62, size=4)]
    before = [run_function(function, *args) for args in inputs]
    assert mem2reg(function)
    verify(function)
    assert "alloc" not in print_function(function) and "load" not in print_function(function)
    after = [run_function(function, *args) for args in inputs]
    assert all(same_value(a, b) for a, b in zip(before, after)), (before, after)


def test_mem2reg_reads_the_fill_of_fresh_memory() -> None:
    """A promoted read before any store gives what the interpreter's alloc holds: nan, or 0 when zeroed."""
    module = parse_module("func @f(%z: i1) -> f64 {\nbb0:\n  %a = alloc f64[1]\n  %b = alloc f64[1] zeroed\n"
                          "  %x = load %a[0]\n  %y = load %b[0]\n  %r = select %z, %x, %y\n  ret %r\n}\n")
    assert mem2reg(module["f"]) and "alloc" not in print_module(module)
    assert math.isnan(run_function(module["f"], True)) and _float_bits(run_function(module["f"], False)) == \
        _float_bits(0.0)


# --- the call graph -------------------------------------------------------------------------------------


def _chain_module() -> Module:
    """@top calls @mid; @mid calls @leaf and @self_loop; @ping and @pong call each other; @a @b @c a cycle."""
    module = Module()
    calls = {"top": ["mid"], "mid": ["leaf", "self_loop"], "leaf": [], "self_loop": ["self_loop"],
             "ping": ["pong"], "pong": ["ping"], "a": ["b"], "b": ["c", "leaf"], "c": ["a"]}
    functions = {name: make_function(name, [("n", I64)], I64, module) for name in calls}
    for name, targets in calls.items():
        b = Builder(functions[name].add_block())
        value = functions[name].args[0]
        for target in targets:
            value = b.call(functions[target], value)
        b.ret(value)
    verify(module)
    return module


def test_components_come_callees_first() -> None:
    module = _chain_module()
    order = [[f.name for f in component] for component in bottom_up_components(module)]
    position = {name: index for index, component in enumerate(order) for name in component}
    assert ["ping", "pong"] in order and ["a", "b", "c"] in order and ["top"] in order
    assert position["leaf"] < position["mid"] < position["top"]
    assert position["self_loop"] < position["mid"] and position["leaf"] < position["a"]
    assert {f.name for f in recursive_functions(module)} == {"self_loop", "ping", "pong", "a", "b", "c"}


# --- inline ---------------------------------------------------------------------------------------------


def _inline_module() -> Module:
    return parse_module((OPT / "inline.ir").read_text(), "inline.ir")


def _refusal_of(module: Module, caller: str, threshold: int = 50) -> str | None:
    function = module[caller]
    call = next(inst for inst in function.instructions() if inst.op is Op.CALL)
    return refusal(call, InlineContext(threshold, recursive_functions(module), LoopNest(function)))


def test_inline_refusals_name_their_reason() -> None:
    module = _inline_module()
    assert _refusal_of(module, "straight") is None
    assert _refusal_of(module, "fact") == "recursive"
    assert _refusal_of(module, "uses_recursion") == "recursive"
    assert _refusal_of(module, "scaled_mag", threshold=11) == "too big"
    assert _refusal_of(module, "scaled_mag", threshold=12) is None  # @mag has 12 instructions
    assert _refusal_of(module, "norm") == "hoistable"
    module["mag"].flags.clear()  # not known to be read-only: inlining is the better deal
    assert _refusal_of(module, "norm") is None


def test_inline_keeps_source_locations_and_the_callee() -> None:
    module = _inline_module()
    original = next(inst for inst in module["square"].instructions() if inst.op is Op.FMUL)
    assert inline(module)
    cloned = next(inst for inst in module["straight"].instructions() if inst.op is Op.FMUL)
    assert cloned is not original and cloned.loc == original.loc and cloned.loc.file == "inline.ir"
    assert "square" in module and print_function(module["square"]).count("fmul") == 1
    verify(module)


def test_inline_threshold_reaches_the_worker_through_the_pass_list() -> None:
    module = _inline_module()
    run_passes(module, ["inline<threshold=3>"], PassOptions(verify_each=True))
    assert "call @mag" in print_function(module["scaled_mag"])
    assert "call @square" not in print_function(module["straight"])


# --- func-attrs -----------------------------------------------------------------------------------------


def test_func_attrs_recomputes_and_then_has_nothing_to_do() -> None:
    module = parse_module((OPT / "func_attrs.ir").read_text())
    assert module["mag"].flags == {"readnone"} and module["fill"].flags == {"readonly"}
    assert function_attributes(module)
    assert module["mag"].flags == {"readonly", "argmemonly"} and module["fill"].flags == {"argmemonly"}
    assert not function_attributes(module)


def test_func_attrs_follows_a_callee_that_starts_writing() -> None:
    module = parse_module("func @g(%a: f64[?]) -> f64 {\nbb0:\n  %v = load %a[0]\n  ret %v\n}\n\n"
                          "func @f(%a: f64[?]) -> f64 {\nbb0:\n  %v = call @g(%a)\n  ret %v\n}\n")
    function_attributes(module)
    assert "readonly" in module["f"].flags
    Builder().before(module["g"].entry.terminator).store(1.0, module["g"].args[0], 0)
    assert function_attributes(module)
    assert module["f"].flags == {"argmemonly"} and module["g"].flags == {"argmemonly"}


# --- the pass manager -----------------------------------------------------------------------------------


class Recorder:
    """A stand-in pass worker that records what it ran on and answers from a script of results."""

    def __init__(self, answers: list[bool] | None = None) -> None:
        self.targets: list[str] = []
        self.kwargs: list[dict[str, object]] = []
        self.answers = list(answers or [])

    def __call__(self, target: Function | Module, **kwargs: object) -> bool:
        self.targets.append(target.name if isinstance(target, Function) else "[module]")
        self.kwargs.append(kwargs)
        return self.answers.pop(0) if self.answers else False


def _register(monkeypatch: pytest.MonkeyPatch, name: str, worker: Recorder, scope: Scope = Scope.FUNCTION,
              parameters: dict[str, int | float | bool] | None = None) -> None:
    monkeypatch.setitem(REGISTRY, name, Pass(name, worker, "a test pass", scope, parameters or {}))


def _two_functions() -> Module:
    return parse_module("func @a() {\nbb0:\n  ret\n}\n\nfunc @b() {\nbb0:\n  ret\n}\n")


def test_function_and_module_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    per_function, whole = Recorder(), Recorder([True])
    _register(monkeypatch, "t-function", per_function)
    _register(monkeypatch, "t-module", whole, Scope.MODULE)
    assert run_passes(_two_functions(), ["t-function", "t-module"])
    assert per_function.targets == ["a", "b"] and whole.targets == ["[module]"]


def test_parameters_reach_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = Recorder()
    _register(monkeypatch, "t-param", worker, parameters={"size": 4, "scale": 1.5, "fast": False})
    run_passes(_two_functions(), ["t-param<size=7; fast=true>", "t-param"])
    assert worker.kwargs == [{"size": 7, "fast": True}] * 2 + [{}] * 2
    for bad, message in [("t-param<width=1>", "has no parameter 'width' \\(parameters: fast, scale, size\\)"),
                         ("t-param<size=big>", "'size' of pass 't-param' needs a int, got 'big'"),
                         ("dce<x=1>", "has no parameter 'x' \\(parameters: none\\)"),
                         ("O0<x=1>", "pipeline 'O0' takes no parameters"),
                         ("t-param<size=1", "unknown pass 't-param<size=1'")]:
        with pytest.raises(PassError, match=message):
            expand_pipeline([bad])


def _names(pipeline: str) -> list[str]:
    return [invocation.pass_.name for invocation in flatten(expand_pipeline([pipeline]))]


def test_pipelines_expand(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every pass present (stand-ins where another pass is not written yet), O0 O1 O2 expand in order."""
    for name in ("simplify-cfg", "const-fold", "instcombine", "cse", "licm", "loop-canon"):
        if name not in REGISTRY:
            _register(monkeypatch, name, Recorder())
    scalar = ["simplify-cfg", "const-fold", "instcombine", "cse", "licm", "dce"]
    assert _names("O0") == []
    assert _names("O1") == ["func-attrs", "loop-canon", "mem2reg", *scalar]
    assert _names("O2") == ["func-attrs", "inline", "loop-canon", "mem2reg", *scalar, "simplify-cfg"]
    rounds = expand_pipeline(["O2"])[4]
    assert isinstance(rounds, pass_manager.Rounds) and rounds.max_rounds == 10


def test_every_pipeline_pass_is_registered() -> None:
    """Each name the pipelines use is a registered pass (fails while one of them is missing)."""
    for pipeline in PIPELINES:
        expand_pipeline([pipeline])


def test_a_missing_pass_in_a_pipeline_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PIPELINES, "t-pipe", ["dce", FixedPoint(("dce", "no-such-pass"))])
    with pytest.raises(PassError, match="in pipeline t-pipe: unknown pass 'no-such-pass' \\(known: .*dce"):
        expand_pipeline(["t-pipe"])


def test_fixed_point_stops_when_a_round_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = Recorder([True, False, True, False])  # @a, @b; @a, @b; @a, @b ...
    _register(monkeypatch, "t-fix", worker)
    monkeypatch.setitem(PIPELINES, "t-pipe", [FixedPoint(("t-fix",), max_rounds=10)])
    assert run_passes(_two_functions(), ["t-pipe"])
    assert len(worker.targets) == 6  # two rounds that changed something, one that did not


def test_fixed_point_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = Recorder([True] * 100)  # a pass that always claims a change
    _register(monkeypatch, "t-fix", worker, Scope.MODULE)
    monkeypatch.setitem(PIPELINES, "t-pipe", [FixedPoint(("t-fix",), max_rounds=4)])
    assert run_passes(_two_functions(), ["t-pipe"])
    assert len(worker.targets) == 4


def _renaming_pass(function: Function) -> bool:
    function.entry.name = "renamed"
    return False


def _breaking_pass(function: Function) -> bool:
    function.entry.instructions[-1].erase()
    return True


def test_verify_each_catches_invalid_ir_and_unreported_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(REGISTRY, "t-lie", Pass("t-lie", _renaming_pass, "changes but says it did not"))
    monkeypatch.setitem(REGISTRY, "t-break", Pass("t-break", _breaking_pass, "leaves a block without terminator"))
    with pytest.raises(PassError, match="pass 't-lie' changed @a but reported no change"):
        run_passes(_two_functions(), ["t-lie"], PassOptions(verify_each=True))
    run_passes(_two_functions(), ["t-lie"])  # unchecked without verify_each
    with pytest.raises(PassError, match="IR invalid after pass 't-break' on @a"):
        run_passes(_two_functions(), ["t-break"], PassOptions(verify_each=True))


def test_print_after_a_module_pass_prints_the_module(capsys: pytest.CaptureFixture[str]) -> None:
    run_passes(_two_functions(), ["func-attrs", "dce"], PassOptions(print_after={"func-attrs"}))
    err = capsys.readouterr().err
    assert err.startswith("; *** IR Dump After func-attrs on [module] ***\nfunc @a() readnone {")
    assert "func @b() readnone {" in err and "After dce" not in err


def test_time_passes_prints_a_table_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(Path(__file__).parent.parent / "examples" / "norm.ir")
    status = main(["opt", path, "-p", "func-attrs,inline,mem2reg,dce", "--verify-each", "--time-passes"])
    captured = capsys.readouterr()
    assert status == 0 and captured.out.startswith("func @mag(")
    lines = captured.err.splitlines()
    assert "Pass execution timing report" in lines[1] and "Total Execution Time:" in lines[3]
    names = [line.split()[-1] for line in lines[6:]]
    assert sorted(names) == ["Total", "dce", "func-attrs", "inline", "mem2reg", "verify"]
    assert all(line.lstrip()[0].isdigit() and "%)" in line for line in lines[6:])


def test_stats_count_what_each_pass_changed() -> None:
    from isozyme.optimize.pass_manager import PassStatistics, ir_size

    module = parse_module("""
func @f(%x: f64) -> f64 {
bb0:
  %a = fmul %x, 1.0
  %dead = fadd %x, %x
  br bb1
bb1:
  ret %a
}
""")
    assert ir_size(module) == (4, 2)
    stats: dict[str, PassStatistics] = {}
    run_passes(module, ["instcombine", "dce", "simplify-cfg", "dce"], PassOptions(statistics=stats))
    assert ir_size(module) == (1, 1)
    assert (stats["instcombine"].runs, stats["instcombine"].changed, stats["instcombine"].instructions) == (1, 1, -1)
    assert (stats["dce"].runs, stats["dce"].changed, stats["dce"].instructions) == (2, 1, -1)
    assert (stats["simplify-cfg"].instructions, stats["simplify-cfg"].blocks) == (-1, -1)
