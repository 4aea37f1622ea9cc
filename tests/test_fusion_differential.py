"""Loop fusion after AD (`optimize/loop_fusion.py`) changes no result: every gradient computed with
`ISOZYME_LOOP_FUSION=0` equals the one computed with fusion on, and the OpenCL counters the fusion
benchmark (`benchmarks/fusion.py`) relies on count what they should.

- **Examples.** Every example kernel of `test_examples.O2_CASES` (examples/, the MLP included) with float
  inputs, through `iz.autodiff` (float arrays Duplicated with random shadows, float scalars Active, the rest
  Const) on interp, llvm and opencl, fusion off and on: the return value, every array afterwards, every
  shadow and adjoint to 1e-12 relative to the largest entry of each (OpenCL's atomic adds run in any order,
  so two runs of one program differ in the last bits; on interp and llvm the two settings agree as well).
- **Random programs.** 20 derandomized programs of `gradgen` (the features `test_gradient_fuzz` enables),
  reverse mode off and on, on interp and llvm, to 1e-12.
- **Fusion happens.** The MLP gradient on OpenCL runs fewer loop kernels with fusion on, none of them
  serially, and matches central differences of the numpy model either way.
- **Counters.** The heat stencil on OpenCL: launches, serial runs and the bytes-moved model by hand; the
  arrays a kernel reads and writes, found in hand-written C of the renderer's forms; and
  `benchmarks/fusion.py --quick` runs and writes its JSON.

`ISOZYME_LOOP_FUSION` is read at every call and is part of the cache keys, so one kernel object holds both
variants. Budget (2 cores): ~35 s of CPU with a cold disk cache, a third of it the 20 random programs, a
fifth the GMM gradient on llvm.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import gradgen
import numpy as np
import pytest
import test_gradient_fuzz as fuzz  # its problem builder and reverse-mode runner
from example_modules import load_example
from hypothesis import given, settings
from opencl_conformance import needs_opencl
from test_examples import O2_CASES

import isozyme as iz
from isozyme import Array, f64
from isozyme.benchmark_suite.results import validate

RTOL = 1e-12
BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "fusion.py"
SETTINGS = ("0", "1")
"""`ISOZYME_LOOP_FUSION` off, then on."""


BACKENDS = ["interp", "llvm", pytest.param("opencl", marks=needs_opencl)]


def assert_close(actual: Any, expected: Any, what: str) -> None:
    """Within RTOL of the largest entry of `expected` (elementwise where it is exact)."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    scale = float(np.max(np.abs(expected), initial=0.0))
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=RTOL * scale, err_msg=what)


# --- the examples ----------------------------------------------------------------------------------------------


def differentiable(name: str) -> bool:
    """Does the example kernel have a float input to differentiate?"""
    _, make_args = O2_CASES[name]
    return any(isinstance(a, float) or (isinstance(a, np.ndarray) and a.dtype.kind == "f")
               for a in make_args(np.random.default_rng(0)))


EXAMPLES = [name for name in O2_CASES if differentiable(name)]


def example_gradient(name: str, backend: str) -> list[Any]:
    """`iz.autodiff` of the example on seeded arguments: return value, arrays, shadows, adjoints."""
    kernel, make_args = O2_CASES[name]
    rng = np.random.default_rng(17)
    call: list[Any] = []
    for value in make_args(rng):
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            call.append(iz.Duplicated(value.copy(), rng.standard_normal(value.shape)))
        elif isinstance(value, float):
            call.append(iz.Active(value))
        else:
            call.append(value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a SerialLoopWarning on OpenCL changes nothing here
        result, adjoints = iz.autodiff(kernel, *call, backend=backend)
    arrays = [part for a in call if isinstance(a, iz.Duplicated) for part in (a.value, a.shadow)]
    return [np.nan_to_num(np.float64(result or 0.0)), *arrays, np.array(adjoints, dtype=np.float64)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_gradients_do_not_change(name: str, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    outcomes = []
    for setting in SETTINGS:
        monkeypatch.setenv("ISOZYME_LOOP_FUSION", setting)
        outcomes.append(example_gradient(name, backend))
    for k, (on, off) in enumerate(zip(outcomes[1], outcomes[0], strict=True)):
        assert_close(on, off, f"{name} on {backend}: part {k} with fusion on against off")


# --- random programs -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fusion_differential")


@settings(max_examples=20)
@given(program=gradgen.programs(fuzz.ENABLED_FEATURES), seed=fuzz.seeds)
def test_random_gradients_do_not_change(kernel_dir: Path, program: gradgen.Program, seed: int) -> None:
    problem = fuzz.make_problem(program, seed, kernel_dir)
    opt = fuzz.forward_opt(seed)
    with pytest.MonkeyPatch.context() as patch:
        for backend in ("interp", "llvm"):
            results = []
            for setting in SETTINGS:
                patch.setenv("ISOZYME_LOOP_FUSION", setting)
                results.append(fuzz.reverse_mode(problem, opt, backend))
            off, on = results
            assert_close(on.gradient, off.gradient, f"{backend} gradient")
            (on_return, on_args), (off_return, off_args) = on.result, off.result
            assert (on_return is None) == (off_return is None)
            if off_return is not None:
                assert_close(on_return, off_return, f"{backend} return value")
            for got, expected in zip(on_args, off_args, strict=True):
                if isinstance(expected, np.ndarray):
                    assert_close(got, expected, f"{backend} array after the call")


# --- fusion fuses the MLP's loops, and the counters ----------------------------------------------------------


@needs_opencl
def test_fusion_merges_the_mlp_loop_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer loop kernels and launches with fusion on, and no `prange` loop that runs serially instead."""
    from isozyme.runtime.opencl_counters import counting

    mlp = load_example("mlp")
    problem = mlp.mlp_data(d=6, hidden=5, out=4, batch=3, seed=1)
    kernels, launches, serial = {}, {}, {}
    for setting in SETTINGS:
        monkeypatch.setenv("ISOZYME_LOOP_FUSION", setting)
        with counting() as stats, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mlp.mlp_gradient("opencl")(*problem)
        kernels[setting], launches[setting] = sum(stats.programs.values()), stats.loop_launches
        serial[setting] = sum(stats.serial_prange_loops.values())
    assert serial == {"0": 0, "1": 0}, f"prange loops that run serially: {serial}"
    # unfused: the forward sweep's five prange loops (dense, bias_sigmoid, dense, bias_sigmoid, the loss)
    # and their five reverses; fused: [dense1 bias1], [dense2 bias2 loss] (dense2 reads all of h1, so it
    # cannot join the first), and in reverse [loss bias2 dense2], [bias1 dense1]; the last forward loop
    # and the first reverse loop are adjacent and run over the same j (mirrored), so
    # [dense2 bias2 loss | loss bias2 dense2] is one kernel
    assert kernels == {"0": 10, "1": 3}, kernels
    assert launches["1"] < launches["0"], launches


def test_fusion_turns_the_mlp_temporaries_into_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """With fusion, the MLP gradient's pre-activations z1, z2 and the adjoints of the temporaries inside
    each fused reverse stage (d_h2, d_z2, d_z1: written and read by inner loops over the batch that fuse
    once the guards AD repeats are threaded and the bias gradient's epilogue stays after them) leave the
    memory plan; the adjoint d_h1, accumulated over every output feature, stays."""
    mlp = load_example("mlp")
    problem = mlp.mlp_data(d=6, hidden=5, out=4, batch=3, seed=1)
    buffers = {}
    for setting in SETTINGS:
        monkeypatch.setenv("ISOZYME_LOOP_FUSION", setting)
        plan = iz.show_memory(mlp.mlp_loss, activity=("dup",) * 4 + ("const",) * 2, **problem._asdict())
        buffers[setting] = set(re.findall(r"^%([a-z_0-9.]+)\s", plan, flags=re.MULTILINE))
    temporaries = {"z1", "z2", "d_h2", "d_z2", "d_z1"}
    assert temporaries <= buffers["0"], buffers["0"]
    assert not temporaries & buffers["1"], buffers["1"]
    assert {"h1", "d_h1"} <= buffers["1"], buffers["1"]


@needs_opencl
@pytest.mark.parametrize("setting", SETTINGS)
def test_mlp_gradient_on_opencl_matches_finite_differences(setting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's gradient on OpenCL against central differences of its numpy loss, fusion off and on."""
    monkeypatch.setenv("ISOZYME_LOOP_FUSION", setting)
    mlp = load_example("mlp")
    problem = mlp.mlp_data(d=6, hidden=5, out=4, batch=3, seed=1)
    assert mlp.finite_difference_check(problem, mlp.mlp_gradient("opencl")(*problem), samples=4) < 1e-6


@needs_opencl
def test_counters_of_the_heat_stencil() -> None:
    """Each step launches the copy (reads u, writes prev) and the update (reads prev, writes u): 32 n bytes
    a step in the model; the serial kernel reads u for the energy; a step is one resume per launch."""
    from isozyme.runtime.opencl_counters import counting

    heat = load_example("heat")
    n, steps = 300, 4
    u = np.random.default_rng(3).standard_normal(n)
    compiled = heat.heat.compile(backend="opencl")
    compiled(u.copy(), 0.4, steps)  # compiles
    with counting() as stats:
        energy = compiled(u.copy(), 0.4, steps)
    assert energy == pytest.approx(heat.heat_numpy(u.copy(), 0.4, steps), rel=1e-12)
    assert (stats.calls, stats.loop_launches, dict(stats.launches_by_kernel)) == \
        (1, 2 * steps, {"iz_par0": steps, "iz_par1": steps})
    assert stats.serial_launches == 1 + 1 + 2 * steps  # the start, the ALLOC of prev, each launch
    assert (stats.loop_bytes_read, stats.loop_bytes_written) == (16 * n * steps, 16 * n * steps)
    assert (stats.serial_bytes_read, stats.serial_bytes_written) == (8 * n, 0)
    assert stats.fills == 1 and list(stats.programs.values()) == [2]


@needs_opencl
def test_fusion_benchmark_runs(tmp_path: Path) -> None:
    """`benchmarks/fusion.py --quick`: the table, and the JSON with both settings of every case."""
    output = tmp_path / "fusion.json"
    done = subprocess.run([sys.executable, str(BENCHMARK), "--quick", "--repeats", "1", "--json", str(output)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "loop fusion off -> on" in done.stdout
    results = json.loads(output.read_text())  # the results schema (isozyme/benchmark_suite/results.py)
    assert validate(results) == [] and results["passed"] is True  # every call's gradient against llvm's
    rows = {(row["problem"], row["variant"]): row for row in results["rows"]}
    assert [problem for problem, variant in rows if variant == "fusion off"] == ["mlp gradient", "heat gradient"]
    for problem in ("mlp gradient", "heat gradient"):
        off, on = rows[problem, "fusion off"], rows[problem, "fusion on"]
        assert off["details"]["loop_kernels"] >= on["details"]["loop_kernels"] > 0
        assert off["details"]["loop_bytes_read"] > 0 and on["median_ms"] > 0
        assert off["check"]["calls"] == on["check"]["checks"]["gradient"]["calls"] == 3  # every call checked
        assert on["check"]["checks"]["fusion on against off"]["passed"]
    assert set(results["extra"]["gradient_differences"]) == {"mlp", "heat 200"}


ACCESS_SOURCE = """\
__attribute__((always_inline)) void iz_body0(long gid, __global double* restrict a0, long a0_d0) {
  __global double* v8 = 0;
  long v8_d0 = 0;
  __global double* v9 = 0;
  v8_d0 = in1;
  v8 = (__global double*)(in0 + ((long)0L));
  v9 = v8;
  v5 = a1[gid];
  a0[gid] = (a0[gid] + v5);
  iz_atomic_add_double(&a2[gid], v5);
  if (v5 == a1[0]) v9[gid] = v5;
}

__kernel void iz_par0(__global double* restrict p0, long p0_d0, __global long* ctl, long trip) {
  __global double* a0 = p0;
  __global long* in0 = s0;
  long in1 = ctl[40];
  for (long g = (long)get_global_id(0); g < trip; g += size) iz_body0(g, a0, a0_d0, in0, in1);
}

__kernel void iz_serial(__global double* restrict p0, long p0_d0, __global long* ctl) {
  v3 = s0;
  helper(a2, a2_d0, v3);
  v4 = a1[0];
}
"""


def test_access_sets_of_generated_c() -> None:
    """Loads, stores, in-place and atomic adds, pointer copies and views into an arena; an array passed to a
    function counts as read and written."""
    from isozyme.runtime.opencl_counters import ArrayRef, access_sets

    (loop,), serial = access_sets(ACCESS_SOURCE, 1)
    a = [ArrayRef("argument", i) for i in range(3)]
    view = ArrayRef("view", 0, (40,), 8)
    assert (loop.reads, loop.writes) == ({a[0], a[1], a[2]}, {a[0], a[2], view})
    site = ArrayRef("site", 0)
    assert (serial.reads, serial.writes) == ({a[1], a[2], site}, {a[2], site})


# --- a prange loop and its reverse, fused: the tape of an inner loop's values --------------------------------


@iz.kernel
def _rows_logsumexp(x: Array[f64, 2]) -> f64:
    # per row a value computed in an inner loop (AD tapes it at row i, column k) and its sum, then the log
    total = 0.0
    for i in iz.prange(x.shape[0]):
        s = 0.0
        for k in range(x.shape[1]):
            s += iz.exp(x[i, k] * x[i, k])
        total += iz.log(s)
    return total


@needs_opencl
def test_a_prange_loop_and_its_reverse_fuse_over_an_inner_loops_tape(monkeypatch: pytest.MonkeyPatch) -> None:
    """The forward loop and its reverse are one kernel with fusion on (two without); the gradient agrees
    with fusion off and with central differences of the same function in numpy."""
    from isozyme.runtime.opencl_counters import counting

    x = np.random.default_rng(3).uniform(-1.0, 1.0, (37, 5))
    kernels, gradients = {}, {}
    for setting in SETTINGS:
        monkeypatch.setenv("ISOZYME_LOOP_FUSION", setting)
        for backend in ("llvm", "opencl"):
            with counting() as stats:
                gradients[setting, backend] = iz.grad(_rows_logsumexp, backend=backend)(x)
            if backend == "opencl":
                kernels[setting] = sum(stats.programs.values())
    assert kernels == {"0": 2, "1": 1}, kernels
    for key, gradient in gradients.items():
        assert_close(gradient, gradients["0", "llvm"], f"gradient {key}")

    def numpy_loss(a: np.ndarray) -> float:
        return float(np.sum(np.log(np.sum(np.exp(a * a), axis=1))))
    h, estimate = 1e-6, np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[index] += h
        down[index] -= h
        estimate[index] = (numpy_loss(up) - numpy_loss(down)) / (2 * h)
    np.testing.assert_allclose(gradients["1", "opencl"], estimate, rtol=1e-6, atol=1e-8)


@iz.kernel
def _centred_layers(x: Array[f64, 2], w: Array[f64, 2]) -> f64:
    # layers over a batch: per layer a prange over the rows, each centring its row of t = w * input (two
    # inner loops read t, so it stays an array) before a sine; the adjoint of t is each row's own
    n, d, layers = x.shape[0], x.shape[1], w.shape[0]
    h = iz.empty((layers, n, d), f64)
    t = iz.empty((layers, n, d), f64)
    for layer in range(layers):
        for b in iz.prange(n):
            m = 0.0
            for j in range(d):
                if layer == 0:
                    t[layer, b, j] = w[layer, j] * x[b, j]
                else:
                    t[layer, b, j] = w[layer, j] * h[layer - 1, b, j]
                m += t[layer, b, j]
            for j in range(d):
                h[layer, b, j] = iz.sin(t[layer, b, j] - m / d)
    total = 0.0
    for b in range(n):
        for j in range(d):
            total += h[layers - 1, b, j] * h[layers - 1, b, j]
    return total


def _centred_layers_numpy(x: np.ndarray, w: np.ndarray) -> float:
    h = x
    for layer in range(w.shape[0]):
        t = w[layer] * h
        h = np.sin(t - t.mean(axis=1, keepdims=True))
    return float(np.sum(h * h))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_adjoint_of_a_layers_temporary_is_allocated_per_iteration(backend: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`privatize-arrays` allocates d_t in the prange loop, one row per iteration (with fusion on; off, it
    stays whole); the gradient agrees with fusion off and with central differences of the numpy model."""
    rng = np.random.default_rng(5)
    x, w = rng.uniform(-1.0, 1.0, (6, 4)), rng.uniform(-1.0, 1.0, (3, 4))
    gradients = {}
    for setting in SETTINGS:
        monkeypatch.setenv("ISOZYME_LOOP_FUSION", setting)
        plan = iz.show_memory(_centred_layers, activity=("dup", "dup"), x=x, w=w)
        row = next(line for line in plan.splitlines() if line.startswith("%d_t "))
        assert ("f64[%d]" in row and row.endswith("per-work-item")) == (setting == "1"), row
        gradients[setting] = iz.grad(_centred_layers, argnums=(0, 1), backend=backend)(x, w)
    for got, expected in zip(gradients["1"], gradients["0"], strict=True):
        assert_close(got, expected, f"{backend}: fusion on against off")
    h = 1e-6
    for argument, got in enumerate(gradients["1"]):
        estimate = np.zeros_like(got)
        for index in np.ndindex(*got.shape):
            up, down = [x.copy(), w.copy()], [x.copy(), w.copy()]
            up[argument][index] += h
            down[argument][index] -= h
            estimate[index] = (_centred_layers_numpy(*up) - _centred_layers_numpy(*down)) / (2 * h)
        np.testing.assert_allclose(got, estimate, rtol=1e-6, atol=1e-8)
