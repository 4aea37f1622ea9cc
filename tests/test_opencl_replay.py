"""Replayed OpenCL calls (`runtime/opencl_runner.py`): a call enqueues the previous call's launches and clears
at once and waits for the device once; a call whose requests differ stops replaying at the first
difference and the host serves the rest. Every call is compared with numpy, whatever its requests; the
round trips (header reads) are counted by the profiler."""

from __future__ import annotations

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, Duplicated, f64, i64
from isozyme.codegen.opencl_serial import SERIAL_CLEAR_LIMIT
from isozyme.runtime.opencl_device import chained, device

pytest.importorskip("pyopencl")


def stepping(y: Array[f64], x: Array[f64], steps: i64) -> f64:
    """A serial loop of `steps` around two parallel loops, one with a sum: 2 launches per step."""
    s = 0.0
    for _ in range(steps):
        for i in iz.prange(len(x)):
            y[i] = y[i] * 0.5 + x[i]
        for i in iz.prange(len(x)):
            s += y[i]
    return s


def stepping_numpy(x: np.ndarray, steps: int) -> tuple[np.ndarray, float]:
    y, s = np.ones_like(x), 0.0
    for _ in range(steps):
        y = y * 0.5 + x
        s += float(y.sum())
    return y, s


def call_profiled(kernel: iz.Kernel, *args: object) -> tuple[object, iz.runtime.profiler.CallProfile]:
    with iz.profile() as prof:
        result = kernel(*args)
    [call] = prof.calls
    return result, call


def calls_against_numpy(kernel: iz.Kernel, numpy_model, x: np.ndarray, steps: tuple[int, ...],
                        rel: float) -> list[iz.runtime.profiler.CallProfile]:
    """Call `kernel(y, x, s)` for each s of `steps` on a fresh `y` of ones, each `y` and result against
    `numpy_model(x, s)`; each call's profile."""
    profiles = []
    for s in steps:
        y = np.ones_like(x)
        total, call = call_profiled(kernel, y, x, s)
        expected_y, expected_total = numpy_model(x, s)
        np.testing.assert_allclose(y, expected_y, rtol=1e-14, err_msg=f"{s} steps")
        assert total == pytest.approx(expected_total, rel=rel), s
        profiles.append(call)
    return profiles


def test_each_call_equals_numpy_whatever_its_steps_and_a_repeated_call_waits_once():
    kernel = iz.kernel(stepping, backend="opencl")
    x = np.linspace(0.0, 1.0, 1000)
    trips = [call.round_trips for call in calls_against_numpy(kernel, stepping_numpy, x, (3, 3, 5, 5, 2, 2, 0, 4, 4),
                                                              1e-12)]
    # the first call and those with more steps than the previous one serve what the script lacks (a header
    # read per request); the others replay their requests and read the header once
    assert trips[0] == 3 * 2 + 1 and trips[2] == (5 - 3) * 2 + 1
    assert trips[1] == trips[3] == trips[4] == trips[5] == trips[6] == trips[8] == 1
    assert trips[7] == 4 * 2 + 1  # after a call with no launch, nothing to replay


def test_a_replayed_call_copies_its_arrays_back_before_its_one_wait_and_again_when_its_requests_differ(
        monkeypatch: pytest.MonkeyPatch):
    """A numpy array the program writes is copied back before the header's read in a replayed call, which
    then waits for the device once in all (no `finish` after it); a call that makes requests its script
    lacks copies the array again after its last read, and `y` is numpy's in both."""
    from isozyme.runtime.opencl_runner import Runner

    waits = []
    wait = Runner._wait
    monkeypatch.setattr(Runner, "_wait", lambda self, block: (waits.append(block), wait(self, block)))
    kernel = iz.kernel(stepping, backend="opencl")
    x = np.linspace(0.0, 1.0, 500)
    for steps, replays in ((2, False), (2, True), (4, False), (4, True), (1, True)):
        waits.clear()
        [call] = calls_against_numpy(kernel, stepping_numpy, x, (steps,), 1e-12)
        kinds = [launch.kind for launch in call.launches if launch.kind in ("header", "copy-out")]
        if replays:
            assert kinds == ["copy-out", "header"] and not waits, (steps, kinds)
        else:
            assert kinds[-2:] == ["header", "copy-out"] and len(waits) == 1, (steps, kinds)


def two_loops(y: Array[f64], x: Array[f64], pattern: Array[i64]):
    """Per element of `pattern`, one of two parallel loops, neither idempotent: running one twice, or
    skipping one, changes `y`."""
    for p in range(len(pattern)):
        if pattern[p] == 0:
            for i in iz.prange(len(x)):
                y[i] = y[i] * 0.5 + x[i]
        else:
            for i in iz.prange(len(x)):
                y[i] = y[i] + 1.0


def test_a_call_whose_launches_differ_from_the_script_runs_each_launch_once():
    """After [A, B, A], a call of [A, A, A] replays A, then B and A in vain: the B skips (another loop), and
    the second A skips too although A is pending (its request number is the third, the pending one the
    second); the host launches the second and third A. Each call's `y` equals numpy's."""
    kernel = iz.kernel(two_loops, backend="opencl")
    x = np.linspace(0.0, 1.0, 300)
    for pattern in ([0, 1, 0], [0, 0, 0], [1, 0, 1, 1], [0, 1], [0, 1], [1, 1, 0], []):
        y = np.ones_like(x)
        kernel(y, x, np.array(pattern, dtype=np.int64))
        expected = np.ones_like(x)
        for p in pattern:
            expected = expected * 0.5 + x if p == 0 else expected + 1.0
        np.testing.assert_allclose(y, expected, rtol=1e-15, err_msg=str(pattern))


def test_without_replays_every_request_is_a_round_trip(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ISOZYME_OPENCL_REPLAY", "0")
    kernel = iz.kernel(stepping, backend="opencl")
    x = np.linspace(0.0, 1.0, 100)
    for _ in range(2):
        y = np.ones_like(x)
        total, call = call_profiled(kernel, y, x, 3)
        assert call.round_trips == 3 * 2 + 1 and total == pytest.approx(stepping_numpy(x, 3)[1], rel=1e-12)
    monkeypatch.setenv("ISOZYME_OPENCL_REPLAY", "sometimes")
    with pytest.raises(ValueError, match="ISOZYME_OPENCL_REPLAY"):
        kernel(np.ones_like(x), x, 3)


def histogram(out: Array[f64], x: Array[f64], m: i64):
    counts = iz.zeros(m, f64)  # zeroed in every call: cleared by a fill, replayed on the device
    for i in iz.prange(len(x)):
        counts[int(x[i] * m)] += 1.0
    for j in iz.prange(m):
        out[j] = counts[j] * float(j + 1)


def test_a_replayed_clear_zeroes_the_array_and_a_larger_one_is_allocated_by_the_host():
    kernel = iz.kernel(histogram, backend="opencl")
    rng = np.random.default_rng(5)
    trips = []
    for m in (SERIAL_CLEAR_LIMIT + 904, SERIAL_CLEAR_LIMIT + 904, SERIAL_CLEAR_LIMIT + 904, 3 * SERIAL_CLEAR_LIMIT,
              3 * SERIAL_CLEAR_LIMIT, SERIAL_CLEAR_LIMIT + 1):
        x = rng.random(20_000)
        out = np.zeros(m)
        _, call = call_profiled(kernel, out, x, m)
        np.testing.assert_array_equal(out, np.bincount((x * m).astype(int), minlength=m) * np.arange(1, m + 1))
        trips.append(call.round_trips)
    assert trips[1] == trips[2] == trips[4] == trips[5] == 1  # a clear and two launches, replayed
    assert trips[3] > 1  # a larger array: the replay stops at the ALLOC, the host serves it and the rest


def checked_gather(out: Array[f64], x: Array[f64], index: Array[i64]):
    for i in iz.prange(len(index)):
        out[i] = x[index[i]] * 2.0


def test_a_replayed_call_that_fails_raises_and_the_next_one_runs():
    kernel = iz.kernel(checked_gather, backend="opencl", boundscheck=True)
    x = np.arange(10.0)
    good = np.array([1, 2, 3, 9])
    for _ in range(2):
        out = np.zeros(4)
        kernel(out, x, good)
        np.testing.assert_array_equal(out, x[good] * 2.0)
    with pytest.raises(IndexError):
        kernel(np.zeros(4), x, np.array([1, 2, 10, 0]))
    for _ in range(2):
        out = np.zeros(4)
        _, call = call_profiled(kernel, out, x, good)
        np.testing.assert_array_equal(out, x[good] * 2.0)
    assert call.round_trips == 1


def loss(y: Array[f64], x: Array[f64], w: Array[f64]) -> f64:
    s = 0.0
    for i in iz.prange(len(x)):
        y[i] = iz.tanh(w[i % len(w)] * x[i])
        s += y[i] * y[i]
    return s


def test_replayed_gradients_on_device_arrays_equal_llvm():
    kernel = iz.kernel(loss)
    rng = np.random.default_rng(2)
    x, w = rng.normal(size=5000), rng.normal(size=7)
    d_w_llvm = np.zeros_like(w)
    iz.autodiff(kernel, Duplicated(np.zeros_like(x), np.zeros_like(x)), x, Duplicated(w, d_w_llvm), backend="llvm")
    x_dev, w_dev = iz.to_device(x), iz.to_device(w)
    for _ in range(4):
        d_w = iz.to_device(np.zeros_like(w))
        iz.autodiff(kernel, Duplicated(iz.to_device(np.zeros_like(x)), iz.to_device(np.zeros_like(x))), x_dev,
                    Duplicated(w_dev, d_w), backend="opencl")
        np.testing.assert_allclose(d_w.get(), d_w_llvm, rtol=1e-12)


def test_a_replayed_launch_is_not_sized_by_a_smaller_previous_call():
    """After a call on 4 elements, a call on 100k replays its launch with the device's full launch (a GPU's
    most work groups; at least four groups per core on a CPU), not one group of 256 work items."""
    from isozyme.runtime.opencl_device import device
    from isozyme.runtime.opencl_runner import GROUPS_PER_UNIT, REPLAYED_GROUPS_PER_CORE

    kernel = iz.kernel(loss, backend="opencl")
    kernel(np.zeros(4), np.ones(4), np.ones(7))
    x = np.linspace(0.0, 1.0, 100_000)
    y = np.zeros_like(x)
    total, call = call_profiled(kernel, y, x, np.ones(7))
    [launch] = [launch for launch in call.launches if launch.kind == "loop"]
    assert launch.name.endswith("(replayed)") and call.round_trips == 1
    where = device()
    groups = GROUPS_PER_UNIT * where.units if where.is_gpu else REPLAYED_GROUPS_PER_CORE * where.units
    assert launch.global_size[0] >= groups * launch.local_size[0] > 256
    np.testing.assert_allclose(y, np.tanh(x), rtol=1e-14)
    assert total == pytest.approx(float(np.sum(np.tanh(x) ** 2)), rel=1e-12)


def scaled(y: Array[f64], x: Array[f64], a: f64):
    for i in iz.prange(len(x)):
        y[i] = a * x[i]


def test_a_loop_without_sums_runs_one_work_item_per_iteration_replayed_or_not():
    """An elementwise loop (no sums to reduce per group) is launched with a work item per iteration, on a GPU
    too, also when replayed after a call of the same size; replayed after a smaller call (a script keeps
    the trip count of the call the host served), its work items take several iterations each. A chained
    launch (NVIDIA's OpenCL) has at most the device's `max_groups` groups, replayed after any call, each
    work item taking several iterations: each of its groups fences and takes a ticket. Every call's
    result is numpy's."""
    launches = []
    for sizes in ((300_000, 300_000), (10, 300_000)):
        kernel = iz.kernel(scaled, backend="opencl")
        for n in sizes:
            x = np.linspace(0.0, 1.0, n)
            y = np.zeros_like(x)
            _, call = call_profiled(kernel, y, x, 2.5)
            np.testing.assert_array_equal(y, 2.5 * x, err_msg=f"n={n}")
            [launch] = [launch for launch in call.launches if launch.kind == "loop"]
            launches.append((launch.name.endswith("(replayed)"), launch.global_size[0]))
    assert launches[0][0] is False and launches[0][1] >= 300_000
    assert launches[1][0] is True and (launches[1][1] < 300_000 if chained(device()) else launches[1][1] >= 300_000)
    assert launches[3][0] is True and launches[3][1] < 300_000


def shifted(y: Array[f64], x: Array[f64], z: Array[f64], a: f64, k: i64) -> f64:
    s = 0.0
    for i in iz.prange(len(x)):
        y[i] = a * x[i] + z[i] * float(k)
        s += y[i]
    return s


def test_a_replayed_call_sets_every_argument_that_changed_since_the_previous_call():
    """The runner keeps a call's kernel arguments for the next call when every array's buffer and shape and
    every scalar's bits are the same, and sets those that differ: other device arrays of the same shape, a
    numpy array in place of a device array, another length, 0.0 after -0.0 (equal, but not in bits: with
    k = 0, y[i] is -0.0 where z[i] is, or 0.0), a NaN twice, another integer. Each call is numpy's, and
    waits once."""
    kernel = iz.kernel(shifted, backend="opencl")
    rng = np.random.default_rng(7)
    xs = [rng.random(n) + 0.5 for n in (1000, 1000, 1000, 999)]
    z = np.where(np.arange(1000) % 2 == 0, -0.0, rng.random(1000))
    on_device = {name: iz.to_device(array) for name, array in
                 (("x0", xs[0]), ("x1", xs[1]), ("z", z), ("y0", np.zeros(1000)), ("y1", np.zeros(1000)))}
    calls = [("y0", "x0", 2.0, 0), ("y0", "x0", 2.0, 0), ("y1", "x0", 2.0, 0), ("y1", "x1", 2.0, 0),
             ("y1", "x1", -0.0, 0), ("y1", "x1", 0.0, 0), ("y1", "x1", -0.0, 0), ("y1", "x1", np.nan, 0),
             ("y1", "x1", np.nan, 0), ("y1", "x1", 3.0, 4), ("y1", "x1", 3.0, -4), ("y1", xs[2], 3.0, -4),
             ("y1", "x0", 3.0, -4)]
    for number, (y, x, a, k) in enumerate(calls):
        x_arg = on_device[x] if isinstance(x, str) else x
        total, call = call_profiled(kernel, on_device[y], x_arg, on_device["z"], a, k)
        expected = a * (x_arg.get() if isinstance(x_arg, iz.DeviceArray) else x_arg) + z * float(k)
        result = on_device[y].get()
        np.testing.assert_array_equal(result, expected, err_msg=f"call {number}")
        if not np.isnan(a):  # a NaN's sign bit is the device's choice
            np.testing.assert_array_equal(np.signbit(result), np.signbit(expected), err_msg=f"call {number}")
        assert total == pytest.approx(float(expected.sum()), rel=1e-12, nan_ok=True)
        assert number == 0 or call.round_trips == 1
    y = np.zeros(999)
    kernel(y, xs[3], np.ones(999), 1.5, 2)
    np.testing.assert_array_equal(y, 1.5 * xs[3] + 2.0)


def test_a_counted_call_after_others_counts_what_a_first_call_counts():
    """A counted call makes every local array ask the host (its buffer's capacity reads 0 on the device),
    also after calls that allocated them, and the call after it replays with the capacities back."""
    from isozyme.runtime import opencl_counters

    x = np.linspace(0.0, 1.0, 2 * SERIAL_CLEAR_LIMIT, endpoint=False)
    counts = []
    for warm in (False, True):
        kernel = iz.kernel(histogram, backend="opencl")
        if warm:
            kernel(np.zeros(3 * SERIAL_CLEAR_LIMIT), x, 3 * SERIAL_CLEAR_LIMIT)
        with opencl_counters.counting() as stats:
            out = np.zeros(3 * SERIAL_CLEAR_LIMIT)
            kernel(out, x, 3 * SERIAL_CLEAR_LIMIT)
        counts.append((stats.loop_bytes_read, stats.loop_bytes_written, stats.buffer_allocations > 0))
        _, call = call_profiled(kernel, out, x, 3 * SERIAL_CLEAR_LIMIT)
        m = 3 * SERIAL_CLEAR_LIMIT
        np.testing.assert_array_equal(out, np.bincount((x * m).astype(int), minlength=m) * np.arange(1, m + 1))
        assert call.round_trips == 1
    assert counts[0] == counts[1]


def test_loops_with_atomic_adds_are_marked_so_and_the_mark_survives_the_disk_cache():
    """The runner launches a loop with atomic adds (or sums) with at most its device's `max_groups` groups,
    others with a work item per iteration: the program says which loops make atomic adds."""
    from isozyme.codegen.opencl_program import emit_opencl
    from isozyme.runtime import disk_cache
    from isozyme.runtime.opencl_backend import _decoded, _metadata

    for function, expected in ((histogram, [True, False]), (scaled, [False])):
        module, entry = iz.kernel(function, backend="opencl").optimized("O2")
        program = emit_opencl(module, entry, iz.kernel(function).codegen_options(), frozenset())
        assert [loop.atomics for loop in program.loops] == expected, function.__name__
        decoded = _decoded(disk_cache.Entry(_metadata(program), program.source.encode(), None))
        assert decoded is not None and [loop.atomics for loop in decoded.loops] == expected


def reads_between_launches(y: Array[f64], x: Array[f64], steps: i64) -> f64:
    """Serial code between two parallel loops that reads elements the first loop's far work groups wrote, and
    feeds them to the second loop: chained, that code runs in the first loop kernel's last work group."""
    t = 0.0
    n = len(x)
    for _ in range(steps):
        for i in iz.prange(n):
            y[i] = y[i] * 0.5 + x[i]
        t += y[n - 1] + y[0] + y[n // 2] + y[n // 3]
        for i in iz.prange(n):
            y[i] = y[i] + t * 1e-3
    return t


def reads_between_launches_numpy(x: np.ndarray, steps: int) -> tuple[np.ndarray, float]:
    y, t, n = np.ones_like(x), 0.0, len(x)
    for _ in range(steps):
        y = y * 0.5 + x
        t += y[n - 1] + y[0] + y[n // 2] + y[n // 3]
        y = y + t * 1e-3
    return y, t


@pytest.mark.parametrize("chain", ["1", "0"])
def test_serial_code_between_replayed_launches_sees_every_work_group_s_stores(
        chain: str, monkeypatch: pytest.MonkeyPatch):
    """On NVIDIA's OpenCL with `ISOZYME_OPENCL_CHAIN=1` a replayed launch is chained
    (`opencl_device.chained`): its last work group runs the serial code that follows it, which must see
    what every other work group stored. Otherwise a resume runs it. A chained replay runs the serial
    kernel once (the first run) where the other runs it after every launch; on PoCL nothing is chained."""
    monkeypatch.setenv("ISOZYME_OPENCL_CHAIN", chain)
    kernel = iz.kernel(reads_between_launches, backend="opencl")
    x = np.random.default_rng(3).random(1 << 20)
    calls = calls_against_numpy(kernel, reads_between_launches_numpy, x, (4, 4, 4, 6, 6, 2), 1e-14)
    runs = [call.serial_runs for call in calls]
    chained = iz.runtime.opencl_device.chained(iz.runtime.opencl_device.device())
    assert chained == (chain == "1" and iz.runtime.opencl_device.device().ptx)
    # the second call replays 4 steps of 2 launches: a resume after each unless chained
    assert runs[1] == runs[2] == (1 if chained else 1 + 4 * 2)


@pytest.mark.parametrize("function", [reads_between_launches, histogram, two_loops])
def test_each_continuation_names_only_labels_it_defines_and_restores_only_what_it_uses(function):
    """The chained launches' continuations (`SerialRenderer.continuation`, built only with `IZ_CHAIN`, so
    PoCL never compiles them): each is the code after one launch, every label it jumps to is defined in it
    (the ones it cannot reach trap), it restores no more words than the serial kernel's resume at the
    same point, and only what it uses, and it declares only scalars that it uses, as plain ones (on the
    stack as `volatile`, they made the continuation run slower in a loop kernel than in the serial one)."""
    import re

    source = iz.show_ir(iz.kernel(function, backend="opencl"), "opencl")
    serial = source[source.index("__kernel void iz_serial("):]
    functions = re.findall(r"void iz_serial_run(\d+)\(.*?\n\}\n", source, flags=re.S)
    assert sorted(functions) == ["0", "1"]  # one per loop
    for number in functions:
        text = re.search(rf"void iz_serial_run{number}\(.*?\n\}}\n", source, flags=re.S).group(0)
        labels = set(re.findall(r"^(\w+):;", text, flags=re.M))
        targets = set(re.findall(r"goto (\w+);", text))
        assert targets <= labels, targets - labels
        resume = re.search(r"goto (R\d+);\n", text).group(1)
        prologue, code = text.split(f"goto {resume};", 1)
        restored = re.findall(r"(\w+) = [^;]*ctl\[\d+\]", prologue)
        case = re.search(rf"case {resume[1:]}:(.*?)goto {resume};", serial).group(1)
        every = serial[serial.index("RESTORE:;"):serial.index("switch (")]  # what every resume restores
        assert 0 < len(restored) <= len(re.findall(r"ctl\[\d+\]", every + case))
        assert all(re.search(rf"\b{name}\b", code) for name in restored)  # only what it uses
        declared = re.findall(r"^  (?:long|double|bool) (v\d+) = 0;", text, flags=re.M)
        assert declared and "volatile" not in prologue.split("if (err[0] != 0)")[0]
        assert all(len(re.findall(rf"\b{name}\b", text)) > 1 for name in declared)  # each one used
