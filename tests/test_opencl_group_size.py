"""The work-group size of OpenCL loop kernels with work-group sums: 256 (or the device's largest group if
smaller), `ISOZYME_OPENCL_GROUP_SIZE` to choose another (`runtime/opencl_backend.group_size`)."""

from __future__ import annotations

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, Const, Duplicated, f64

pytest.importorskip("pyopencl")


def weighted(x: Array[f64], p: Array[f64]) -> f64:
    s = 0.0
    for i in iz.prange(len(x)):
        s += p[0] * x[i] * x[i]
    return s


@pytest.mark.parametrize("size", ["32", "64", "1024"])
def test_a_chosen_group_size_is_what_the_kernels_use(monkeypatch, size):
    monkeypatch.setenv("ISOZYME_OPENCL_GROUP_SIZE", size)
    kernel = iz.kernel(weighted, backend="opencl")
    x = np.random.default_rng(1).random(10_000)
    p = np.array([1.5])
    assert f"reqd_work_group_size({size}, 1, 1)" in iz.show_ir(kernel, stage="opencl")
    with iz.profile() as prof:
        value = kernel(x, p)
        dp = np.zeros(1)
        iz.autodiff(kernel, Const(x), Duplicated(p, dp))
    assert value == pytest.approx(1.5 * np.sum(x * x), rel=1e-12)
    assert dp[0] == pytest.approx(np.sum(x * x), rel=1e-12)  # a group-mode adjoint: the work-group tree
    grouped = [launch for call in prof.calls for launch in call.launches if launch.kind == "loop" and launch.local_size]
    assert grouped and all(launch.local_size == (int(size),) for launch in grouped)


def test_the_default_is_256_or_the_devices_largest_group(monkeypatch):
    from isozyme.runtime.opencl_backend import group_size
    from isozyme.runtime.opencl_device import device

    monkeypatch.delenv("ISOZYME_OPENCL_GROUP_SIZE", raising=False)
    assert group_size(device()) == min(256, device().largest_group)


@pytest.mark.parametrize("value", ["0", "48", "x", str(1 << 20)])
def test_a_bad_group_size_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("ISOZYME_OPENCL_GROUP_SIZE", value)
    kernel = iz.kernel(weighted, backend="opencl")
    with pytest.raises(ValueError, match="ISOZYME_OPENCL_GROUP_SIZE must be a power of two"):
        kernel(np.ones(4), np.ones(1))
