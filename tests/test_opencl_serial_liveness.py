"""The serial kernel saves and restores only what is live across each yield (`codegen/serial_liveness.py`).

Scalars that cross a launch in the serial code, scalars only the loop kernel reads, scalars carried by a
serial loop around launches (time stepping) and a gradient's: each result against the Python function (or
the `llvm` backend); the generated code restores fewer words than it has; and a loop kernel that reads a
word its launch does not save is a CodegenError, not a stale value."""

from __future__ import annotations

import re

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, Duplicated, f64, i64
from isozyme.codegen import serial_liveness
from isozyme.codegen.abi import CodegenError

pytest.importorskip("pyopencl")


def across(y: Array[f64], x: Array[f64], steps: i64) -> f64:
    n = len(x)
    before = x[0] * 3.0 + 1.0  # used after the loops only: must survive every yield
    scale = x[n - 1] - 0.5     # read by the loop kernels only
    buffer = iz.empty(n, f64)  # its buffer is asked for in the middle of a block, once `before` is live
    total = 0.0
    for step in range(steps):  # a serial loop around launches: step, total and the shift carried
        shift = float(step) * 0.25
        for i in iz.prange(n):
            buffer[i] = x[i] + shift
            y[i] = y[i] * scale + buffer[i]
        total += y[step % n] + shift
    return total + before


@pytest.mark.parametrize("steps", [0, 1, 5])
def test_scalars_live_across_launches_survive_them(steps: int) -> None:
    x = np.linspace(-1.0, 2.0, 37)
    expected_y, got_y = np.ones_like(x), np.ones_like(x)
    expected = across(expected_y, x, steps)
    kernel = iz.kernel(across, backend="opencl")
    for _ in range(3):  # the first call serves every request, later ones replay
        got_y[:] = 1.0
        assert kernel(got_y, x, steps) == pytest.approx(expected, rel=1e-12)
        np.testing.assert_allclose(got_y, expected_y, rtol=1e-12)


def test_a_gradient_through_launches_matches_llvm() -> None:
    x = np.linspace(-1.0, 2.0, 37)

    def gradient(backend: str) -> tuple[float, np.ndarray, np.ndarray]:
        y, dy, dx = np.ones_like(x), np.zeros_like(x), np.zeros_like(x)
        value, _ = iz.autodiff(iz.kernel(across), Duplicated(y, dy), Duplicated(x, dx), 4, backend=backend)
        return value, y, dx
    for got, expected in zip(gradient("opencl"), gradient("llvm"), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_a_resume_restores_fewer_words_than_the_kernel_has() -> None:
    source = iz.show_ir(iz.kernel(across), "opencl")
    serial = source[source.index("__kernel void iz_serial"):]
    saved = set(re.findall(r"ctl\[(\d+)\] = v\d+", serial))  # the words any yield saves
    for case in re.findall(r"case \d+:[^\n]*", serial):
        assert len(re.findall(r"= ctl\[", case)) < len(saved), case


def test_a_loop_kernel_read_that_its_launch_does_not_save_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serial_liveness.SerialLiveness, "at_launch", lambda self, loop: set())
    with pytest.raises(CodegenError, match="which its launch does not save"):
        iz.show_ir(iz.kernel(across), "opencl")


def mid_block(y: Array[f64], x: Array[f64]) -> f64:
    before = x[0] * 3.0 + 1.0  # live across the request for `half`'s buffer, used after it
    m = int(x[len(x) - 1]) * 5  # an extent from the data: the buffer is asked for here, mid-block
    half = iz.empty(m, f64)
    for i in iz.prange(m):
        half[i] = x[2 * i] + x[2 * i + 1]
    for i in iz.prange(m):
        y[i] = half[i] * before
    return before + half[0]


def test_a_scalar_live_across_a_request_in_the_middle_of_a_block_survives_it() -> None:
    x = np.linspace(-1.0, 2.0, 38)
    expected_y, got_y = np.zeros_like(x), np.zeros_like(x)
    expected = mid_block(expected_y, x)
    kernel = iz.kernel(mid_block, backend="opencl")
    for _ in range(2):
        got_y[:] = 0.0
        assert kernel(got_y, x) == pytest.approx(expected, rel=1e-12)
        np.testing.assert_allclose(got_y, expected_y, rtol=1e-12)
