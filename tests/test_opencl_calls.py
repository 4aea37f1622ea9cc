"""Local arrays passed to calls on OpenCL (`codegen/address_spaces.py`): one version of a called function per
address-space signature, so that a work item's private array reaches a callee as `__private double*`.

Skipped, with the reason, where pyopencl or an OpenCL device is missing (PoCL gives a CPU device).

- **Helpers** (`inline=False`, and the same kernels inlined) given local arrays: 1-D and 2-D, zeroed and
  uninitialized (`iz.empty`, filled by the callee), empty (extent 0), of constant extent (a private C
  array, or a view of the function's arena after `optimize/memory_reuse.py`) and of run-time extent (the
  device heap), passed on from helper to helper, and the same helper given a global array too (two
  versions). From the serial part of the kernel (whose local arrays are global buffers), from a helper, and
  from the body of a `prange` loop (a private C array per work item, or its slice of a scratch buffer),
  which must run in parallel: primal on opencl equal to the interpreter and llvm, gradients (`iz.autodiff`,
  opt "post" and "pre") equal to llvm.
- **ADBench BA** (`isozyme/benchmark_suite/ba.py`, helpers taking a local array): `ba_objective` and
  `ba_sum_of_squares`, their gradients, and the Jacobian blocks driver, on opencl equal to llvm.
"""

from __future__ import annotations

import re
import warnings
from types import SimpleNamespace
from typing import Any

import kernelgen
import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.codegen.address_spaces import c_name, version_name
from isozyme.ssa.parser import parse_module

pytest.importorskip("pyopencl", reason="the opencl backend needs pyopencl")
from isozyme.runtime.opencl_backend import SerialLoopWarning  # noqa: E402
from isozyme.runtime.opencl_device import OpenCLUnavailable, device  # noqa: E402

try:
    device()
except OpenCLUnavailable as error:  # pragma: no cover - depends on the machine
    pytest.skip(f"no OpenCL device: {error}", allow_module_level=True)

from isozyme.benchmark_suite import annotate, ba, run_gradient  # noqa: E402


def kernels(inline: bool) -> SimpleNamespace:
    """The helpers and kernels, the helpers `inline=False` or inlined (kernels find their callees through
    closures, so each call of this function makes a family of its own)."""

    @iz.kernel(inline=inline)
    def fill(a: Array[f64], x: Array[f64], i: i64):
        for j in range(len(a)):
            a[j] = iz.sin(x[i] + 0.5 * j)

    @iz.kernel(inline=inline)
    def fill_rows(b: Array[f64, 2], x: Array[f64], i: i64):
        for r in range(b.shape[0]):
            for c in range(b.shape[1]):
                b[r, c] = x[i] * (r + 1.0) - 0.25 * c

    @iz.kernel(inline=inline)
    def total(a: Array[f64]) -> f64:
        s = 0.0
        for j in range(len(a)):
            s += a[j] * a[j]
        return s

    @iz.kernel(inline=inline)
    def total_rows(b: Array[f64, 2]) -> f64:
        s = 0.0
        for r in range(b.shape[0]):
            for c in range(b.shape[1]):
                s += iz.cos(b[r, c]) * (r + 2.0)
        return s

    @iz.kernel(inline=inline)
    def fill_and_total(a: Array[f64], x: Array[f64], i: i64) -> f64:
        # passes its parameter on to two helpers (in a private array's version: private too)
        fill(a, x, i)
        return total(a) + a[0]

    @iz.kernel(inline=inline)
    def with_locals(x: Array[f64], i: i64) -> f64:
        a = iz.zeros(3, f64)  # constant extents: private arrays (or views of a private arena)
        b = iz.empty((2, 3), f64)
        e = iz.zeros(0, f64)
        h = iz.zeros(len(x) % 5 + 1, f64)  # run-time extent: the device heap, a global array
        s = fill_and_total(a, x, i)
        fill_rows(b, x, i)
        s += total_rows(b) + total(e) + fill_and_total(h, x, i)
        s += total(x)  # the same helper given an argument array
        for j in range(3):
            s += a[j] * b[1, j]
        return s

    @iz.kernel
    def serial_part(out: Array[f64], x: Array[f64]):
        # the kernel's own local arrays (global buffers) and helpers' private ones, outside any prange
        b = iz.zeros((3, 2), f64)
        a = iz.empty(4, f64)
        for i in range(len(out)):
            out[i] = fill_and_total(a, x, i) + with_locals(x, i)
            fill_rows(b, x, i)
            out[i] += total_rows(b)

    @iz.kernel
    def prange_private(out: Array[f64], x: Array[f64]):
        # a private C array per work item (constant extents, at most 64 elements), written by a helper
        for i in iz.prange(len(out)):
            a = iz.zeros(4, f64)
            b = iz.empty((2, 2), f64)
            fill_rows(b, x, i)
            out[i] = fill_and_total(a, x, i) + total_rows(b) + with_locals(x, i)

    @iz.kernel
    def prange_scratch(out: Array[f64], x: Array[f64], m: i64):
        # each work item's slice of a scratch buffer: run-time extent, and a constant one over 64 elements
        for i in iz.prange(len(out)):
            a = iz.zeros(m, f64)
            big = iz.empty(70, f64)
            out[i] = fill_and_total(a, x, i) + fill_and_total(big, x, i)

    return SimpleNamespace(**{name: value for name, value in locals().items() if isinstance(value, iz.Kernel)})


CALLED = kernels(inline=False)
INLINED = kernels(inline=True)
FAMILIES = {"called": CALLED, "inlined": INLINED}
N = 300
"""Work items: more than one work group."""


def make_args(kernel: iz.Kernel, rng: np.random.Generator) -> tuple:
    x = rng.uniform(-1.0, 1.0, N)
    return (np.zeros(N), x, 3) if kernel.py_func.__name__ == "prange_scratch" else (np.zeros(N), x)


def run(kernel: iz.Kernel, args: tuple, backend: str) -> tuple:
    """The kernel on `backend` (a SerialLoopWarning is an error): the arrays afterwards."""
    args = kernelgen.copy_args(args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SerialLoopWarning)
        kernel.compile(backend=backend)(*args)
    return args


def opencl_source(kernel: iz.Kernel) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("error", SerialLoopWarning)
        return iz.show_ir(kernel, stage="opencl")


KERNELS = ["serial_part", "prange_private", "prange_scratch"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", KERNELS)
def test_local_arrays_passed_to_calls_match_the_interpreter_and_llvm(family: str, name: str) -> None:
    kernel = getattr(FAMILIES[family], name)
    args = make_args(kernel, np.random.default_rng(7))
    expected = run(kernel, args, "interp")
    for backend in ("opencl", "llvm"):
        for got, want in zip(run(kernel, args, backend), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13, err_msg=f"{backend}")


def test_private_arrays_reach_callees_as_private_pointers() -> None:
    """The versions the calls need: a private array's helper takes `__private double*`, the same helper
    given argument arrays its plain `__global` version; the prange loops run as NDRange kernels."""
    source = opencl_source(CALLED.prange_private)
    assert re.search(r"^double f_fill_5f_and_5f_total_ASpg\(__private double\* a0, long a0_d0, __global double\* a1",
                     source, re.MULTILINE)
    assert re.search(r"^double f_total_ASp\(__private double\* a0", source, re.MULTILINE)
    assert re.search(r"^double f_total\(__global double\* a0", source, re.MULTILINE)  # total(x), total(h)
    assert re.search(r"^void f_fill_5f_rows_ASpg\(__private double\* a0, long a0_d0, long a0_d1, __global", source,
                     re.MULTILINE)
    assert re.search(r"^__kernel .*void iz_par0\(", source, re.MULTILINE)
    scratch = opencl_source(CALLED.prange_scratch)
    assert re.search(r"^__kernel .*void iz_par0\(", scratch, re.MULTILINE)
    assert "_AS" not in scratch  # scratch slices are global
    assert "_AS" not in opencl_source(INLINED.prange_private)  # no calls left


def gradient(kernel: iz.Kernel, args: tuple, opt: str, backend: str) -> list[np.ndarray]:
    """`iz.autodiff` with out Duplicated (a seed) and x Duplicated: out, x and their shadows afterwards."""
    out, x, *rest = kernelgen.copy_args(args)
    d_out, d_x = np.linspace(0.5, 1.5, len(out)), np.zeros_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SerialLoopWarning)  # a reverse loop may run serially: results count
        iz.autodiff(kernel, iz.Duplicated(out, d_out), iz.Duplicated(x, d_x), *rest, opt=opt, backend=backend)
    return [out, x, d_out, d_x]


@pytest.mark.parametrize("opt", ["post", "pre"])
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", KERNELS)
def test_gradients_with_local_arrays_passed_to_calls_match_llvm(family: str, name: str, opt: str) -> None:
    kernel = getattr(FAMILIES[family], name)
    args = make_args(kernel, np.random.default_rng(11))
    expected = gradient(kernel, args, opt, "llvm")
    assert np.any(expected[-1] != 0.0)
    for got, want, what in zip(gradient(kernel, args, opt, "opencl"), expected, ("out", "x", "d_out", "d_x"),
                               strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12, err_msg=what)


@iz.kernel(inline=False)
def smooth(u: Array[f64]):
    for i in range(1, len(u)):
        u[i] = 0.5 * (u[i] + u[i - 1])


@iz.kernel(inline=False)
def smoothed_energy(u: Array[f64]) -> f64:
    smooth(u)  # overwrites u, which the reverse needs: a growable tape of this called function
    s = 0.0
    for i in range(len(u)):
        s += iz.sin(u[i])
    return s


@iz.kernel
def energy_of(u: Array[f64]) -> f64:
    return smoothed_energy(u) * 2.0


def test_growable_tapes_of_called_functions_grow_on_the_device_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    """diffe_smoothed_energy tapes u before the call that overwrites it (a growable tape grown to len(u)):
    opencl equals llvm; with a 1 MB heap, a tape of 200_000 doubles is llvm's MemoryError."""
    u = np.cos(np.linspace(0.0, 2.0, 500))
    expected = iz.grad(energy_of, backend="llvm")(u.copy())
    np.testing.assert_allclose(iz.grad(energy_of, backend="opencl")(u.copy()), expected, rtol=1e-12)
    assert re.search(r"if \(\w+ > v\d+_d0\) \{", iz.show_ir(energy_of, stage="opencl", activity=("dup",)))
    monkeypatch.setenv("ISOZYME_OPENCL_HEAP_MB", "1")
    kernel = iz.kernel(energy_of.py_func)  # compiled afresh, with a 1 MB heap
    with pytest.raises(MemoryError, match=r"cannot allocate a local array of shape \(200000,\)"):
        iz.grad(kernel, backend="opencl")(np.zeros(200_000))


def test_version_names_are_distinct_from_function_names() -> None:
    """`c_name` writes `_` only before lower-case hex digits and `_`; `_AS` cannot occur in it."""
    (function,) = parse_module("func @g_ASp(%a: f64[?], %s: f64, %b: f64[?, ?]) -> f64 {\nbb0:\n  ret %s\n}\n")
    assert c_name(function) == "f_g_5f_ASp"
    assert version_name(function, (None, None, None)) == "f_g_5f_ASp"
    assert version_name(function, ("__private", None, None)) == "f_g_5f_ASp_ASpg"
    assert version_name(function, (None, None, "__private")) == "f_g_5f_ASp_ASgp"


# --- ADBench BA -----------------------------------------------------------------------------------------


def ba_args() -> tuple:
    return ba.make_args(n=3, m=4, p=9, seed=2, jitter=0.05)


@pytest.mark.parametrize("kernel", [ba.ba_objective, ba.ba_sum_of_squares], ids=["objective", "sum_of_squares"])
def test_ba_primal_on_opencl_matches_llvm(kernel: iz.Kernel) -> None:
    results = {}
    for backend in ("opencl", "llvm"):
        args = kernelgen.copy_args(ba_args())
        results[backend] = (kernel.compile(backend=backend)(*args), args)
    (value, args), (expected_value, expected_args) = results["opencl"], results["llvm"]
    assert (value is None) == (expected_value is None)
    if value is not None:
        assert value == pytest.approx(expected_value, rel=1e-12)
    for got, want in zip(args, expected_args, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def ba_gradient(bench: Any, opt: str, backend: str) -> dict[str, np.ndarray]:
    """One reverse sweep of the benchmark's kernel with its activities and seeds: the shadows afterwards."""
    args = kernelgen.copy_args(ba_args())
    annotated, shadows = annotate(bench, args)
    value, _ = iz.autodiff(bench.kernel, *annotated, opt=opt, backend=backend)
    return {"value": np.array([0.0 if value is None else value]), **{str(k): s for k, s in shadows.items()}}


@pytest.mark.parametrize("opt", ["post", "pre"])
@pytest.mark.parametrize("bench", [ba.BENCHMARK, ba.BENCHMARK_SUM_OF_SQUARES], ids=["objective", "sum_of_squares"])
def test_ba_gradients_on_opencl_match_llvm(bench: Any, opt: str) -> None:
    got, expected = ba_gradient(bench, opt, "opencl"), ba_gradient(bench, opt, "llvm")
    assert np.any(expected["0"] != 0.0)  # d cams
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-11, atol=1e-11, err_msg=key)


def test_ba_jacobian_blocks_on_opencl_match_llvm() -> None:
    got = run_gradient(ba.BENCHMARK, kernelgen.copy_args(ba_args()), "post", backend="opencl")
    expected = run_gradient(ba.BENCHMARK, kernelgen.copy_args(ba_args()), "post", backend="llvm")
    np.testing.assert_allclose(ba.sparse_values(got), ba.sparse_values(expected), rtol=1e-11, atol=1e-11)
    assert np.count_nonzero(ba.sparse_values(expected)) > 9 * 2 * 10
