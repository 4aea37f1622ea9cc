"""The OpenCL backend's first slice (serial, one work item): results equal the interpreter's.

Skipped, with the reason, where pyopencl or an OpenCL device is missing (PoCL gives a CPU device).
Compares every example kernel the slice supports and every construct of `kernels/constructs.py` with the
interpreter (f64 within 1e-12, ints and booleans exactly), the Python floor division, modulo, min and max
edge cases, the out-of-SSA parallel copy (a phi swap), and the run-time errors against the llvm backend.
"""

from __future__ import annotations

import math
from typing import Any

import kernelgen
import numpy as np
import pytest
from example_modules import load_example
from kernels.constructs import CONSTRUCTS, Construct

import isozyme as iz
from isozyme import Array, f32, f64, i32, i64
from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.out_of_ssa import out_of_ssa
from isozyme.ssa.interpreter import run_function
from isozyme.ssa.parser import parse_module
from isozyme.ssa.verifier import verify

pytest.importorskip("pyopencl", reason="the opencl backend needs pyopencl")
from isozyme.runtime.opencl_backend import compile_opencl  # noqa: E402
from isozyme.runtime.opencl_device import OpenCLUnavailable, device  # noqa: E402

try:
    device()
except OpenCLUnavailable as error:  # pragma: no cover - depends on the machine
    pytest.skip(f"no OpenCL device: {error}", allow_module_level=True)

def same(expected: Any, actual: Any, rtol: float = 1e-12) -> bool:
    if isinstance(expected, float):
        return (math.isnan(expected) and math.isnan(actual)) or expected == actual \
            or abs(expected - actual) <= rtol * abs(expected)
    return type(expected) is type(actual) and expected == actual


def compare(kernel: Any, args: tuple, rtol: float = 1e-12) -> None:
    """The kernel on opencl and on the interpreter: same return value, same arrays afterwards."""
    reference, tested = kernelgen.copy_args(args), kernelgen.copy_args(args)
    expected = kernel.compile(backend="interp")(*reference)
    actual = kernel.compile(backend="opencl")(*tested)
    assert same(expected, actual, rtol), (expected, actual)
    for ref, out in zip(reference, tested, strict=True):
        if isinstance(ref, np.ndarray):
            np.testing.assert_allclose(out, ref, rtol=rtol, atol=0, equal_nan=True)


@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda construct: construct.name)
def test_construct_matches_interpreter(construct: Construct) -> None:
    for seed in range(3):
        compare(construct.kernel, construct.make_args(np.random.default_rng(seed)), rtol=max(construct.rtol, 1e-12))


def _example_cases() -> list[tuple[str, str, Any]]:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=7), rng.normal(size=7)
    m, d = 4, 3
    gmm_module = load_example("gmm")
    gmm = gmm_module.gmm_data(d, 4, 6, seed=1)
    qdiag = np.exp(gmm.icf[:, :d])
    log_gamma = gmm_module.log_gamma_distrib(0.5 * (d + gmm.m + 1), d)
    y0 = np.concatenate((0.5 * np.sin(np.pi * np.arange(1, m + 1) / (m + 1)), np.zeros(m)))
    return [
        ("dot", "dot", (x, y)),
        ("dot", "idot", (np.arange(6, dtype=np.int64) - 2, np.arange(6, dtype=np.int64) * 3)),
        ("norm", "mag", (x, 7)),
        ("norm", "norm", (np.zeros(7), x, 7)),
        ("relu3", "relu3", (np.zeros(7), x)),
        ("relu3", "relu3_sum", (x,)),
        ("matvec", "matvec", (np.zeros(3), rng.normal(size=(3, 5)), rng.normal(size=5))),
        ("euler", "chain_energy", (y0, m, 1.0)),
        ("gmm", "sqnorm", (x,)),
        ("gmm", "logsumexp", (x,)),
        ("heat", "heat", (np.sin(np.linspace(0.0, 3.0, 9)), 0.25, 5)),
        ("euler", "euler", (y0.copy(), 0.02, 7, 1.0, 0.1)),
        ("euler", "spring_force", (0.3, 1.0)),
        ("euler", "fput_rhs", (np.zeros(2 * m), y0.copy(), m, 1.0, 0.1)),
        ("gmm", "qtimesx", (np.zeros(d), qdiag, gmm.icf, 2, x[:d].copy())),
        ("gmm", "log_wishart_prior", (qdiag, gmm.icf[:, :d].sum(axis=1), gmm.icf, gmm.gamma, gmm.m, log_gamma)),
        ("gmm", "gmm_objective", (gmm.alphas, gmm.means, gmm.icf, gmm.x, gmm.gamma, gmm.m, log_gamma)),
    ]


@pytest.mark.parametrize(("example", "name", "args"), _example_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_example_matches_interpreter(example: str, name: str, args: tuple) -> None:
    compare(getattr(load_example(example), name), args)


# --- Python's arithmetic ----------------------------------------------------------------------------


@iz.kernel
def int_floor(a: i64, b: i64) -> i64:
    return (a // b) * 1000003 + a % b


@iz.kernel
def int32_floor(a: i32, b: i32) -> i32:
    return (a // b) ^ (a % b)


@iz.kernel
def float_floordiv(a: f64, b: f64) -> f64:
    return a // b


@iz.kernel
def float_mod(a: f64, b: f64) -> f64:
    return a % b


@iz.kernel
def float32_mod(a: f32, b: f32) -> f32:
    return a % b + a // b


@iz.kernel
def python_min(a: f64, b: f64) -> f64:
    return min(a, b)


@iz.kernel
def python_max(a: f64, b: f64) -> f64:
    return max(a, b)


INT_EDGES = [-(2**63), -(2**63) + 1, -7, -1, 0, 1, 7, 2**63 - 1]
INT32_EDGES = [-(2**31), -7, -1, 1, 7, 2**31 - 1]
FLOAT_EDGES = [0.0, -0.0, 1.0, -1.0, 7.5, -7.5, 1e300, -1e-300, math.inf, -math.inf, math.nan, 3.0, -2.0]


def _bits(value: Any) -> Any:
    """A float's bits (signed zeros and nans compare as such), other values unchanged."""
    return np.float64(value).view(np.int64) if isinstance(value, float) and not math.isnan(value) else \
        ("nan" if isinstance(value, float) else value)


def _exact_pairs(kernel: Any, values: list, skip_zero: bool = False) -> None:
    interp, opencl = kernel.compile(backend="interp"), kernel.compile(backend="opencl")
    for a in values:
        for b in values:
            if skip_zero and b == 0:
                continue
            assert _bits(opencl(a, b)) == _bits(interp(a, b)), (kernel, a, b)


@pytest.mark.parametrize("kernel", [int_floor, int32_floor])
def test_integer_floor_division_and_modulo_edges(kernel: Any) -> None:
    _exact_pairs(kernel, INT_EDGES if kernel is int_floor else INT32_EDGES, skip_zero=True)


@pytest.mark.parametrize("kernel", [float_floordiv, float_mod, python_min, python_max])
def test_float_floor_division_modulo_min_max_edges(kernel: Any) -> None:
    _exact_pairs(kernel, FLOAT_EDGES)


def test_f32_modulo_edges() -> None:
    values = [0.0, -0.0, 1.5, -2.25, 7.0, -3.0, math.inf]
    interp, opencl = float32_mod.compile(backend="interp"), float32_mod.compile(backend="opencl")
    for a in values:
        for b in values:
            expected, actual = interp(a, b), opencl(a, b)
            assert (math.isnan(expected) and math.isnan(actual)) or expected == actual, (a, b)


# --- out-of-SSA -------------------------------------------------------------------------------------

SWAP = """
func @swap(%n: i64) -> i64 {
bb0:
  br bb1
bb1:
  %i = phi i64 [bb0: 0, bb1: %i.next]
  %a = phi i64 [bb0: 1, bb1: %b]
  %b = phi i64 [bb0: 2, bb1: %a]
  %i.next = iadd %i, 1
  %c = icmp.slt %i.next, %n
  cbr %c, bb1, bb2
bb2:
  %r = imul %a, 10
  %s = iadd %r, %b
  ret %s
}
"""


def test_out_of_ssa_splits_edges_and_swaps_through_a_temporary() -> None:
    module = parse_module(SWAP)
    function = module["swap"]
    plan = out_of_ssa(function)
    verify(module)
    assert len(function.blocks) == 4  # the latch edge bb1 -> bb1 got its own block
    assert len(plan.temporaries) == 1
    run = compile_opencl(module, function, CodegenOptions())
    for n in range(1, 6):
        assert run(n) == run_function(parse_module(SWAP)["swap"], n)


GROWN = """
func @g(%n: i64) -> f64 {
bb0:
  %t = alloc f64[4] growable
  store 1.5, %t[3]
  grow %t, %n
  %last = isub %n, 1
  store 2.0, %t[%last]
  %a = load %t[3]
  %b = load %t[%last]
  %c = dim %t, 0
  %d = sitofp %c to f64
  %s = fadd %a, %b
  %r = fadd %s, %d
  ret %r
}
"""


def test_show_ir_opencl_and_grow() -> None:
    source = iz.show_ir(load_example("dot").dot, stage="opencl")
    assert "__kernel void iz_serial" in source and "cl_khr_fp64" in source and "goto" in source
    for n in (4, 5, 9, 100):
        module = parse_module(GROWN)
        run = compile_opencl(module, module["g"], CodegenOptions())
        assert run(n) == run_function(parse_module(GROWN)["g"], n)


# --- run-time errors --------------------------------------------------------------------------------


@iz.kernel
def divide(a: i64, b: i64) -> i64:
    return a // b


@iz.kernel
def truncate(x: f64) -> i64:
    return int(x)


@iz.kernel
def checked_read(x: Array[f64], i: i64) -> f64:
    return x[i]


@pytest.mark.parametrize(("kernel", "args"), [(divide, (7, 0)), (truncate, (math.nan,)), (truncate, (1e300,)),
                                              (load_example("dot").dot, (np.ones(3), np.ones(4)))])
def test_run_time_errors_match_the_llvm_backend(kernel: Any, args: tuple) -> None:
    with pytest.raises(Exception) as on_llvm:
        kernel.compile(backend="llvm")(*args)
    with pytest.raises(on_llvm.type) as on_opencl:
        kernel.compile(backend="opencl")(*args)
    assert str(on_opencl.value) == str(on_llvm.value)


def test_checked_mode_index_error() -> None:
    kernel = iz.kernel(checked_read.py_func, boundscheck=True)
    with pytest.raises(IndexError, match=r"index \(3,\) is out of bounds for an array of shape \(3,\)"):
        kernel.compile(backend="opencl")(np.ones(3), 3)
    assert kernel.compile(backend="opencl")(np.arange(3.0), 2) == 2.0


def test_every_derivative_api_runs_on_opencl() -> None:
    @iz.kernel
    def square(x: Array[f64]) -> f64:
        return x[0] * x[0] * x[1]

    x = np.array([3.0, 2.0])
    assert np.allclose(iz.grad(square, backend="opencl")(x), [2 * 3.0 * 2.0, 9.0], rtol=1e-14)
    _, tangent = iz.fwddiff(square, iz.Duplicated(x, np.array([1.0, 0.0])), backend="opencl")
    assert tangent == 12.0
    assert np.allclose(iz.hvp(square, backend="opencl")(x, np.array([0.0, 1.0])), [6.0, 0.0], rtol=1e-14)


# --- functions that allocate: the device heap --------------------------------------------------------


@iz.kernel(inline=False)
def relax(u: Array[f64]):
    n = len(u)
    prev = iz.empty(n, f64)  # run-time extent, in a called function: the device heap
    for i in range(n):
        prev[i] = u[i]
    for i in range(1, n - 1):
        u[i] = 0.5 * prev[i] + 0.25 * (prev[i - 1] + prev[i + 1])


@iz.kernel(inline=False)
def relaxed_energy(u: Array[f64], steps: i64) -> f64:
    for _ in range(steps):
        relax(u)
    s = 0.0
    for i in range(len(u)):
        s += u[i] * u[i]
    return s


def test_called_functions_allocate_on_the_device_heap_and_split_mode_gradients_run() -> None:
    u = np.sin(np.linspace(0.0, 3.0, 40))
    compare(relaxed_energy, (u, 6))
    expected = iz.grad(relaxed_energy, backend="llvm")(u.copy(), 6)
    np.testing.assert_allclose(iz.grad(relaxed_energy, backend="opencl")(u.copy(), 6), expected, rtol=1e-12)


def test_a_full_device_heap_is_a_memory_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISOZYME_OPENCL_HEAP_MB", "1")
    kernel = iz.kernel(relaxed_energy.definition.py_func, inline=False)  # compiled afresh, with a 1 MB heap
    with pytest.raises(MemoryError, match="cannot allocate a local array of shape \\(200000,\\)"):
        kernel.compile(backend="opencl")(np.zeros(200_000), 1)


# --- the disk cache -------------------------------------------------------------------------------------

CACHED_PROGRAM = '''
import json, sys
import numpy as np
import isozyme as iz
from isozyme import Array, f64
from isozyme.runtime import disk_cache


@iz.kernel(backend="opencl")
def scaled_sum(y: Array[f64], x: Array[f64], a: f64) -> f64:
    s = 0.0
    for i in iz.prange(len(x)):
        y[i] = a * x[i]
        s += y[i]
    return s


x = np.arange(300.0)
y = np.zeros(300)
total = scaled_sum(y, x, 2.0)
gradient = iz.grad(scaled_sum, argnums=(1,), backend="opencl")(np.zeros(300), x, 2.0)
print(json.dumps({"total": total, "y": float(y.sum()), "gradient": float(np.sum(gradient)),
                  "stats": dict(disk_cache.stats)}))
'''


def test_programs_and_gradients_are_cached_on_disk(tmp_path: Any) -> None:
    """A second process finds the OpenCL programs of a kernel and of its gradient on disk, and computes the same."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "cached.py"
    script.write_text(CACHED_PROGRAM)
    env = {**os.environ, "ISOZYME_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("ISOZYME_CACHE", None)
    runs = [json.loads(subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                                      check=True, timeout=300).stdout) for _ in range(2)]
    cold, warm = runs
    assert cold["stats"].get("misses", 0) >= 2 and cold["stats"].get("stores", 0) >= 2
    assert warm["stats"].get("hits", 0) >= 2 and warm["stats"].get("stores", 0) == 0
    assert cold["total"] == warm["total"] == 2.0 * sum(range(300)) and cold["y"] == warm["y"]
    assert cold["gradient"] == warm["gradient"] == 300 * 2.0  # the return value sum(a x): a per element


# --- sigmoid ----------------------------------------------------------------------------------------


@iz.kernel
def sigmoid64(a: f64) -> f64:
    return iz.sigmoid(a)


@iz.kernel
def sigmoid32(a: f32) -> f32:
    return iz.sigmoid(a)


@pytest.mark.parametrize("kernel", [sigmoid64, sigmoid32])
def test_sigmoid_is_the_textbook_formula_bit_for_bit(kernel: Any) -> None:
    """`iz.sigmoid` on OpenCL and on the interpreter has the bits of numpy's 1/(1+exp(-x)) (f32: exp in
    f64 rounded once, as the IR's math functions), with x = ±1000, ±0, ±inf and nan."""
    from test_llvm_ops import SIGMOID_INPUTS, numpy_sigmoid

    from isozyme.ssa.types import F32, F64
    ty = F32 if kernel is sigmoid32 else F64
    interp, opencl = kernel.compile(backend="interp"), kernel.compile(backend="opencl")
    for x in SIGMOID_INPUTS:
        x = float(np.float32(x)) if ty == F32 else x
        expected = _bits(numpy_sigmoid(x, ty))
        assert _bits(float(interp(x))) == expected, x
        assert _bits(float(opencl(x))) == expected, x


def test_build_options_choose_the_atomic_adds(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVIDIA's OpenCL (inline PTX) gets its native atomic adds with warp sums before them, unless
    ISOZYME_OPENCL_WARP_SUMS=0; another device gets neither; a bad value is refused by name."""
    from dataclasses import replace

    from isozyme.runtime.opencl_backend import build_options

    nvidia = replace(device(), name="NVIDIA CUDA: a GPU", ptx=True)
    monkeypatch.delenv("ISOZYME_OPENCL_WARP_SUMS", raising=False)
    assert "-D IZ_PTX_ATOMICS" in build_options(nvidia) and "IZ_NO_WARP_SUMS" not in build_options(nvidia)
    monkeypatch.setenv("ISOZYME_OPENCL_WARP_SUMS", "0")
    assert "-D IZ_PTX_ATOMICS" in build_options(nvidia) and "-D IZ_NO_WARP_SUMS" in build_options(nvidia)
    assert "IZ_PTX_ATOMICS" not in build_options(replace(nvidia, ptx=False))
    monkeypatch.setenv("ISOZYME_OPENCL_WARP_SUMS", "yes")
    with pytest.raises(ValueError, match="ISOZYME_OPENCL_WARP_SUMS"):
        build_options(nvidia)


def test_the_warp_sums_are_in_the_program_source() -> None:
    """Every program carries the warp sums behind the macros that select them (NVIDIA's compiler sees them)."""
    source = iz.show_ir(iz.kernel(copy_kernel), "opencl")
    assert "#if defined(IZ_PTX_ATOMICS) && !defined(IZ_NO_WARP_SUMS)" in source
    assert "vote.sync.all.pred" in source and "shfl.sync.bfly.b32" in source and "activemask.b32" in source


def copy_kernel(y: Array[f64], x: Array[f64]):
    for i in iz.prange(len(x)):
        y[i] = x[i]
