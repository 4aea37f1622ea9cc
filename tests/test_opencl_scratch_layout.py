"""The layout of a `prange` loop's scratch arrays on OpenCL (`opencl_loop_kernels._body_alloc`).

A local array of run-time extent allocated in a `prange` body gets one copy per iteration in a scratch
buffer. Where the body only loads, stores and adds into it, the copies are interleaved (element k of
iteration g at `k * trip + g`: neighbouring work items, neighbouring addresses); where it passes the array
to a call, each copy is contiguous. Both compute what the llvm backend computes, primal and gradient.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64, i64

pytest.importorskip("pyopencl", reason="the opencl backend needs pyopencl")
from isozyme.runtime.opencl_device import OpenCLUnavailable, device  # noqa: E402

try:
    device()
except OpenCLUnavailable as error:  # pragma: no cover - depends on the machine
    pytest.skip(f"no OpenCL device: {error}", allow_module_level=True)


@iz.kernel
def powers(out: Array[f64], x: Array[f64], m: i64):
    # out[i] = sum_j v[j] * v[m - 1 - j] with v[j] = x[i] ** (j + 1), v a scratch array per iteration
    for i in iz.prange(x.shape[0]):
        v = iz.empty(m, f64)
        v[0] = x[i]
        for j in range(1, m):
            v[j] = v[j - 1] * x[i]
        t = 0.0
        for j in range(m):
            t += v[j] * v[m - 1 - j]
        out[i] = t


@iz.kernel(inline=False)
def fill_powers(v: Array[f64], a: f64):
    v[0] = a
    for j in range(1, v.shape[0]):
        v[j] = v[j - 1] * a


@iz.kernel
def powers_by_call(out: Array[f64], x: Array[f64], m: i64):
    for i in iz.prange(x.shape[0]):
        v = iz.empty(m, f64)
        fill_powers(v, x[i])
        t = 0.0
        for j in range(m):
            t += v[j] * v[m - 1 - j]
        out[i] = t


def scratch_pointers(source: str) -> list[str]:
    """How each loop kernel's body points at its copy of a scratch array (`vN = sK + ...;`)."""
    return re.findall(r"\bv\d+ = (s\d+ \+ gid[^;]*);", source)


def test_an_array_used_only_element_by_element_is_interleaved() -> None:
    pointers = scratch_pointers(iz.show_ir(powers, stage="opencl"))
    assert pointers and all(p.endswith("+ gid") for p in pointers), pointers
    gradient = scratch_pointers(iz.show_ir(powers, stage="opencl", activity=("dup", "dup", "const")))
    assert gradient and all(p.endswith("+ gid") for p in gradient), gradient


def test_an_array_passed_to_a_call_is_contiguous() -> None:
    pointers = scratch_pointers(iz.show_ir(powers_by_call, stage="opencl"))
    assert pointers and all(re.fullmatch(r"s\d+ \+ gid \* \(.*\)", p) for p in pointers), pointers


@pytest.mark.parametrize("kernel", [powers, powers_by_call], ids=["interleaved", "contiguous"])
@pytest.mark.parametrize("n", [1, 33, 1000])
def test_scratch_copies_compute_what_llvm_computes(kernel: iz.Kernel, n: int) -> None:
    rng = np.random.default_rng(n)
    x, seed, m = rng.uniform(-1.0, 1.0, n), rng.standard_normal(n), 5
    expected = np.array([sum(v ** (j + 1) * v ** (m - j) for j in range(m)) for v in x])
    results = {}
    for backend in ("llvm", "opencl"):
        out = np.zeros(n)
        kernel.compile(backend=backend).entry(out, x, m)
        d_x = np.zeros(n)
        iz.autodiff(kernel, iz.Duplicated(np.zeros(n), seed.copy()), iz.Duplicated(x, d_x), m, backend=backend)
        results[backend] = (out, d_x)
    np.testing.assert_allclose(results["llvm"][0], expected, rtol=1e-13)
    np.testing.assert_allclose(results["llvm"][1], seed * (m + 1) * m * x ** m, rtol=1e-12, atol=1e-14)
    for cpu, gpu in zip(results["llvm"], results["opencl"]):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-12, atol=1e-14)
