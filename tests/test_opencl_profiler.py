"""The OpenCL profiler (`runtime/profiler.py`): `iz.profile()` and `ISOZYME_PROFILE`.

What a profile records is checked against what the call must have done: the copies of the numpy arguments
(their bytes), one serial run more than the parallel loops it launched, a loop launch covering the trip count,
and results equal to the unprofiled call's (numpy's)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, Duplicated, f64
from isozyme.runtime.opencl_device import chained, device

pytest.importorskip("pyopencl")


@iz.kernel(backend="opencl")
def squares(y: Array[f64], x: Array[f64]) -> f64:
    s = 0.0
    for i in iz.prange(len(x)):
        y[i] = x[i] * x[i]
        s += x[i]
    return s


@iz.kernel(backend="llvm")
def squares_llvm(y: Array[f64], x: Array[f64]):
    for i in range(len(x)):
        y[i] = x[i] * x[i]


def test_a_profiled_call_records_its_copies_runs_and_launches():
    x = np.random.default_rng(0).random(3000)
    y = np.zeros_like(x)
    squares(y, x)  # compiled and run once unprofiled
    y[:] = 0
    with iz.profile() as prof:
        total = squares(y, x)
    np.testing.assert_allclose(total, x.sum(), rtol=1e-12)
    np.testing.assert_array_equal(y, x * x)
    [call] = prof.calls
    assert call.kernel == "squares"
    kinds = [launch.kind for launch in call.launches]
    assert kinds.count("copy-in") == 2 and call.host_to_device_bytes == 2 * x.nbytes
    assert [launch.bytes for launch in call.launches if launch.kind == "copy-out"] == [y.nbytes]  # x is read only
    loops = [launch for launch in call.launches if launch.kind == "loop"]
    assert len(loops) == 1 and loops[0].global_size[0] >= len(x)  # 3000 iterations: fewer groups than the cap
    # the second call replays the first one's launch: one wait for the header, at the end; a run of the serial
    # kernel before the launch and one after it, unless the launch is chained (its last work group runs on)
    chain = chained(device())
    assert call.serial_runs == (1 if chain else len(loops) + 1) and call.round_trips == kinds.count("header") == 1
    serial_after_loop = kinds.index("loop") < len(kinds) - 1 - kinds[::-1].index("serial")
    assert kinds.index("serial") < kinds.index("loop") and serial_after_loop != chain
    assert all(launch.device_ms >= 0 for launch in call.launches) and call.device_ms > 0
    assert 0 <= call.wait_ms <= call.wall_ms and call.python_ms >= 0
    assert "iz_par0" in prof.table() and "squares" in prof.table()
    data = prof.as_dict()["calls"][0]
    assert data["round_trips"] == call.round_trips and data["serial_runs"] == call.serial_runs
    assert len(data["launches"]) == len(call.launches)


def test_a_gradient_is_profiled_and_unchanged_by_profiling():
    x = np.random.default_rng(1).random(500)
    plain = [np.zeros(500), np.ones(500), np.zeros(500)]  # y, d_y, d_x
    iz.autodiff(squares, Duplicated(plain[0], plain[1]), Duplicated(x, plain[2]))
    profiled = [np.zeros(500), np.ones(500), np.zeros(500)]
    with iz.profile() as prof:
        iz.autodiff(squares, Duplicated(profiled[0], profiled[1]), Duplicated(x, profiled[2]))
    for a, b in zip(plain, profiled):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(profiled[2], 2 * x + 1, rtol=1e-12)
    [call] = prof.calls
    assert call.kernel == "diffe_squares"
    # the forward loop and its reverse, one kernel once fused (a prange loop beside its reverse)
    assert sum(launch.kind == "loop" for launch in call.launches) >= 1


def test_device_arrays_are_not_copied_and_only_active_profiles_record():
    x = iz.to_device(np.arange(64, dtype=np.float64))
    y = iz.to_device(np.zeros(64))
    squares(y, x)
    with iz.profile() as outer:
        with iz.profile() as inner:
            squares(y, x)
        squares(y, x)
    assert len(inner.calls) == 1 and len(outer.calls) == 2
    assert all(call.host_to_device_bytes == 0 for call in outer.calls)
    np.testing.assert_array_equal(y.get(), np.arange(64.0) ** 2)


def test_llvm_calls_are_not_recorded():
    x = np.ones(10)
    with iz.profile() as prof:
        squares_llvm(np.zeros(10), x)
    assert prof.calls == [] and "no OpenCL calls" in prof.table()


@pytest.mark.parametrize("value, shown", [("1", "call 2 of 2"), ("all", "call 1 of 2")])
def test_environment_variable_prints_the_table_at_exit(tmp_path, value, shown):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import isozyme as iz
        from isozyme import Array, f64

        @iz.kernel(backend="opencl")
        def double(y: Array[f64], x: Array[f64]):
            for i in iz.prange(len(x)):
                y[i] = 2.0 * x[i]

        x = np.ones(100)
        y = np.zeros(100)
        double(y, x)
        double(y, x)
        assert (y == 2).all()
    """))
    env = {**os.environ, "ISOZYME_PROFILE": value}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "isozyme profile: 2 OpenCL calls" in done.stderr and shown in done.stderr
    assert "double: 2 calls, median" in done.stderr


def test_a_bad_environment_value_warns_and_does_not_profile(tmp_path):
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", "import isozyme"],
                          env={**os.environ, "ISOZYME_PROFILE": "sometimes"}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and "ISOZYME_PROFILE must be 1 or all, not 'sometimes'" in done.stderr
