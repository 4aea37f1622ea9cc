"""The host's side of a kernel's run on OpenCL (`Runner`): what a call of a program
(`codegen/opencl_program.py`) does between its arguments and its result.

A call copies numpy arrays into buffers (device arrays are used in place; each position's buffer is kept
for the next call of the same size), then runs the serial kernel and serves its requests until it is
done: LAUNCH a parallel loop's kernel (as many work groups as the trip count needs; on a GPU, for a loop
with sums or atomic adds, at most `GROUPS_PER_UNIT` per compute unit, each work item then taking several
iterations), ALLOC or GROW a local array's buffer (kept from call to call, grown when a call needs more),
CLEAR bytes of one. It then copies back the numpy arrays the program may write (`OpenCLProgram.writable`;
the others, read-only ones too, are only copied in) and checks the error record: a failure raises the
exception the interpreter raises (`codegen/error_sites.py`).

**Replayed calls.** Serving a request is a round trip: the host waits for the device to read the header,
then enqueues more work, and the GPU idles meanwhile (tens of microseconds each, more than a small loop
kernel takes). So the runner keeps the launches and clears of a call that went through (its script), and
the next call enqueues them all at once, each followed by a resume of the serial kernel, before it reads
the header (`Runner._replay`). The kernels check on the device that the serial kernel's pending request is
the step they replay (its number, kind and loop or site) and take its trip count or byte range from it; a
resume goes on only after a step that served its request. A call that makes other requests (an ALLOC, a
different number of time steps) stops at the first difference, and the host serves the rest as usual;
what ran and what the host served becomes the next script. Results are the same either way; a call with no
requests beyond its script waits for the device once. `ISOZYME_OPENCL_REPLAY=0` turns replays off.

`with opencl_counters.counting() as stats:` counts what the calls in the block do: NDRange launches of loop
kernels, runs of the serial kernel (each resume one), buffer allocations and fills, and a model of the bytes
moved: per loop-kernel launch, the full size of every array it reads plus of every array it writes (from the
kernel's OpenCL C), the serial kernel's arrays once per call. A model, the same before and after fusion, not
a hardware counter. Outside such a block the runner counts nothing (and a counted call is not replayed).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from isozyme.codegen.opencl_control import (
    ALLOC,
    ARG0,
    ARG1,
    ARG2,
    CLEAR,
    DONE,
    ERROR,
    GROUP_SIZE,
    GROW,
    HEADER_WORDS,
    HEAP_WORDS,
    KIND,
    LAUNCH,
    REPLAYED,
    RETURN,
    SEQUENCE,
    SERVED,
    SERVED_BY_HOST,
    START,
    AllocSite,
)
from isozyme.codegen.opencl_program import CLEAR_KERNEL, OpenCLProgram
from isozyme.runtime import opencl_counters, profiler
from isozyme.runtime.device_array import DeviceArray
from isozyme.runtime.disk_cache import sha256
from isozyme.runtime.opencl_device import Device, import_pyopencl
from isozyme.ssa.types import ArrayType, ScalarType


def heap_megabytes() -> int:
    """`ISOZYME_OPENCL_HEAP_MB` (default 256): the device heap that functions a kernel calls allocate their
    local arrays of run-time extent from (a MemoryError when a run needs more)."""
    value = os.environ.get("ISOZYME_OPENCL_HEAP_MB", "256")
    if not value.isdigit() or int(value) == 0:
        raise ValueError(f"ISOZYME_OPENCL_HEAP_MB must be a positive number of megabytes, not {value!r}")
    return int(value)


MAX_REPLAYED = 4096
"""The most steps a call replays (`Runner._replay`): a longer run records none."""

Step = tuple[int, int, int, int, int]
"""A request of the serial kernel that a call replays: (LAUNCH, request number, loop, trip count, 0) or
(CLEAR, request number, site, first byte, bytes)."""


def replay_enabled() -> bool:
    """`ISOZYME_OPENCL_REPLAY`: "1" (default) replays a program's launches from its previous call without
    waiting for the serial kernel between them; "0" reads the header after every run of it."""
    value = os.environ.get("ISOZYME_OPENCL_REPLAY", "1")
    if value not in ("0", "1"):
        raise ValueError(f"ISOZYME_OPENCL_REPLAY must be 0 or 1, not {value!r}")
    return value == "1"


REPLAYED_GROUPS_PER_CORE = 4
"""Work groups per core, at least, of a replayed launch on a CPU device (`Runner._groups`)."""

GROUPS_PER_UNIT = 8
"""Work groups per compute unit that a parallel loop with sums asks for on a GPU."""

MAX_GROUPS = 1 << 22
"""The most work groups of a launch (each work item then takes every size-th iteration)."""


_SCALAR_DTYPES = {"i1": np.uint8, "i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}


class Runner:
    """Runs a program: the serial kernel, and what it asks the host for (`codegen/opencl_program.py`)."""

    def __init__(self, name: str, program: OpenCLProgram, built: Any, where: Device, types: Sequence[Any],
                 return_type: Any) -> None:
        self.name = name
        self.program = program
        self.where = where
        self.queue = where.queue
        """The queue of the call in progress: the device's, or its profiling queue (`profiler.py`)."""
        self.trace: _Trace | None = None
        """The profile of the call in progress, when a profile is active."""
        self.kernel_args: dict[Any, tuple[list[object], list[object]]] = {}
        """Each kernel's arguments as last set (`_enqueue`): the common ones, and the rest."""
        self.base: list[object] | None = None
        """The common arguments of the program's kernels in the call in progress (`_base_args`)."""
        self.entry_args: list[object] = []
        """The entry's arguments in the call in progress."""
        cl = import_pyopencl()
        self.serials = {mode: cl.Kernel(built, program.serial) for mode in (START, REPLAYED, SERVED_BY_HOST)}
        """The serial kernel, one kernel object per value of its `served` argument (so no launch sets it)."""
        self.loops = [cl.Kernel(built, loop.name) for loop in program.loops]
        self.clear = cl.Kernel(built, CLEAR_KERNEL)
        self.types = types
        self.return_type = return_type
        self.lock = threading.Lock()
        self.sites: list[tuple[Any, int]] = []
        """Each alloc site's buffer and its capacity in elements (kept from call to call)."""
        self.max_groups = GROUPS_PER_UNIT * where.units if where.is_gpu else 1 << 62
        """Work groups per parallel loop on a GPU (its work items then run several iterations each); a CPU
        device (PoCL vectorizes across work items) gets one work item per iteration."""
        self.partials: tuple[Any, int] = (self._buffer(AllocSite("i64", 0), 1), 1)
        """The buffer of partial sums of the work groups, and its size in words."""
        words = heap_megabytes() << 17 if program.uses_heap else 1
        self.heap: tuple[Any, int] = (self._buffer(AllocSite("i64", 0), words), words)
        """The device heap of called functions' local arrays, and its size in words."""
        self.counted: _CountedCall | None = None
        """What the call in progress counts (`counting()` active), else None."""
        self.control_host = np.zeros(program.control_words, dtype=np.int64)
        self.control = cl.Buffer(where.context, cl.mem_flags.READ_WRITE, self.control_host.nbytes)
        """The control buffer (`codegen/opencl_control.py`). The first run of the serial kernel in a call
        zeroes it but for the words the host keeps there (the heap's size, the sites' capacities), which the
        host writes from `control_host` when they change."""
        self.kept: tuple[int, ...] | None = None
        """The words the host keeps in the control buffer, as last written there."""
        self.argument_buffers: dict[int, Any] = {}
        """The buffer of each numpy array argument by position, reused by the next call whose array has as
        many bytes (allocating one costs a driver call, and freeing one waits for the GPU)."""
        self.script: list[Step] | None = None
        """The launches and clears of the previous call, which the next call replays (`_replay`); None
        after a call that failed."""

    @property
    def writable(self) -> frozenset[int]:
        """The positions of the array parameters the program may write (`arguments.check_arguments` refuses
        read-only numpy arrays there)."""
        return self.program.writable

    def __call__(self, *values: object) -> object:
        with self.lock:  # one call at a time: the site buffers and the queue are shared
            return self._call(values)

    def _call(self, values: Sequence[object]) -> object:
        if profiler.active():
            self.queue, self.trace = profiling_queue(self.where), _Trace(self.name, self.where.name)
        else:
            self.queue, self.trace = self.where.queue, None
        try:
            return self._run_call(values)
        finally:
            if self.trace is not None:
                self.trace.finish()
            self.queue, self.trace = self.where.queue, None

    def _run_call(self, values: Sequence[object]) -> object:
        cl = import_pyopencl()
        where, flags, queue = self.where, cl.mem_flags, self.queue
        args: list[object] = []
        uploads: list[np.ndarray] = []
        copies: list[tuple[Any, np.ndarray, int]] = []  # buffers to copy back: the arrays the program may write
        for position, (ty, value) in enumerate(zip(self.types, values, strict=True)):
            if isinstance(value, DeviceArray):
                args += [value.data, *(np.int64(extent) for extent in value.shape)]
            elif isinstance(ty, ArrayType):
                array: np.ndarray = value  # type: ignore[assignment]
                host = array if array.size else np.zeros(1, dtype=array.dtype)  # no empty buffers in OpenCL
                buffer = self.argument_buffers.get(position)
                if buffer is None or buffer.size != host.nbytes:
                    buffer = self.argument_buffers[position] = cl.Buffer(where.context, flags.READ_WRITE,
                                                                         host.nbytes)
                self._note(cl.enqueue_copy(queue, buffer, host, is_blocking=False), "copy-in", f"arg {position}",
                           nbytes=host.nbytes)
                args += [buffer, *(np.int64(extent) for extent in array.shape)]
                uploads.append(array)
                if array.size and position in self.program.writable:
                    copies.append((buffer, array, position))
            else:
                args.append(_SCALAR_DTYPES[str(ty)](value))
        while len(self.sites) < len(self.program.allocs):
            self.sites.append((self._buffer(self.program.allocs[len(self.sites)], 1), 1))
        control = self.control_host
        control[HEAP_WORDS] = self.heap[1]
        first = self.program.capacities
        counting = opencl_counters.active()  # counting: every alloc asks the host, which counts its elements
        control[first:first + len(self.sites)] = [0 if counting else capacity for _, capacity in self.sites]
        kept = (int(control[HEAP_WORDS]), *(int(word) for word in control[first:]))
        control_buffer = self.control
        if kept != self.kept:
            cl.enqueue_copy(queue, control_buffer, control, is_blocking=False)  # the call ends with a finish
            self.kept = kept
        self.entry_args, self.base = args, self._base_args(args)
        header = np.zeros(HEADER_WORDS, dtype=np.int64)
        self.counted = _CountedCall.start(self, values, uploads, copies) if opencl_counters.active() else None
        try:
            self._run(control_buffer, header)
        finally:
            for buffer, array, position in copies:
                self._note(cl.enqueue_copy(queue, array, buffer, is_blocking=False), "copy-out", f"arg {position}",
                           nbytes=array.nbytes)
            self._wait(queue.finish)
            if self.counted is not None:
                self.counted.finish(control_buffer)
                self.counted = None
        if header[ERROR] != 0:
            raise self.program.sites[int(header[ERROR]) - 1].exception([int(w) for w in header[ERROR + 1:]])
        if self.return_type.is_void:
            return None
        return _python_scalar(self.return_type, header[RETURN])

    def _run(self, control: Any, header: np.ndarray) -> None:
        """Run the serial kernel and serve its requests until it is done. A call of a program whose previous
        call went through replays that call's launches and clears first, without waiting (`_replay`); the
        host then reads the header and serves what is left, if anything, as it comes."""
        cl = import_pyopencl()
        queue = self.queue
        script = self.script if self.counted is None and replay_enabled() else None
        self._resume(control, START)
        if script:
            self._replay(script, control)
        steps: list[Step] | None = None  # the script's steps that ran, once the header says which
        while True:
            self._wait(lambda: self._note(cl.enqueue_copy(queue, header, control, is_blocking=True), "header",
                                          "control", nbytes=header.nbytes))
            if steps is None:
                last, served = int(header[SEQUENCE]), int(header[SERVED]) == int(header[SEQUENCE])
                steps = [step for step in script or () if step[1] < last or (step[1] == last and served)]
            kind = int(header[KIND])
            if header[ERROR] != 0 or kind == DONE:
                break
            if kind == LAUNCH:
                number, trip = int(header[ARG0]), int(header[ARG1])
                steps.append((LAUNCH, int(header[SEQUENCE]), number, trip, 0))
                if trip > 0:
                    self._launch(number, trip, control)
                    if self.counted is not None:
                        self.counted.loop_launch(number, control)
            elif kind == ALLOC:
                self._alloc(int(header[ARG0]), int(header[ARG1]), fill=header[ARG2] == 0)
            elif kind == GROW:
                self._grow(int(header[ARG0]), int(header[ARG1]), int(header[ARG2]))
            elif kind == CLEAR:
                steps.append((CLEAR, int(header[SEQUENCE]), int(header[ARG0]), int(header[ARG1]), int(header[ARG2])))
                self._clear(int(header[ARG0]), int(header[ARG1]), int(header[ARG2]))
            else:
                raise RuntimeError(f"the serial kernel made an unknown request {kind}")
            self._resume(control, SERVED_BY_HOST)
        self.script = steps if header[ERROR] == 0 and len(steps) <= MAX_REPLAYED else None

    def _resume(self, control: Any, mode: int) -> None:
        """Run the serial kernel (`mode` START) or resume it: after the host served its request
        (SERVED_BY_HOST), or after a replayed step (REPLAYED: it goes on only if that step served it)."""
        self._note(self._enqueue(self.serials[mode], (1,), (1,), self.base, [control, self.heap[0], np.int64(mode)]),
                   "serial", "iz_serial", (1,), (1,))
        if self.counted is not None:
            opencl_counters.add("serial_launches")

    def _replay(self, script: list[Step], control: Any) -> None:
        """Enqueue the launches and clears of the previous call, each followed by a resume of the serial
        kernel. A replayed kernel runs only if the serial kernel's pending request is that step (request
        number, kind, loop or site), taking the trip count or the bytes from the request, and the resume
        after it goes on only if it ran. A call whose requests differ from the script stops at the first
        difference, and the host serves the rest. Any launch size is right (a work item takes every
        size-th iteration); `_groups` chooses one that suits a trip count larger than the script's."""
        for kind, sequence, a, b, c in script:
            if kind == LAUNCH:
                self._launch(a, b, control, sequence=sequence)
            else:
                groups = self._groups(c // 8, GROUP_SIZE, replayed=True, reduces=False)
                self._note(self._enqueue(self.clear, (groups * GROUP_SIZE,), None, NO_ARGUMENTS,
                                         [self.sites[a][0], control, np.int64(a), np.int64(sequence)]),
                           "fill", f"site {a} (replayed)", (groups * GROUP_SIZE,), (), c)
            self._resume(control, REPLAYED)

    def _launch(self, number: int, trip: int, control: Any, sequence: int = 0) -> None:
        """Launch loop `number` over `trip` iterations, or (`sequence` > 0) replay it for that request, `trip`
        being the previous call's (`_groups` sizes both)."""
        size, loop = self.program.group_size, self.program.loops[number]
        groups = self._groups(trip, size, replayed=sequence > 0, reduces=loop.accumulators > 0 or loop.atomics)
        words = groups * loop.accumulators
        if words > self.partials[1]:
            self.partials = (self._buffer(AllocSite("i64", 0), words), words)
        local = (size,) if words else None
        name = self.program.loops[number].name + (" (replayed)" if sequence else "")
        self._note(self._enqueue(self.loops[number], (groups * size,), local, self.base,
                                 [control, self.partials[0], self.heap[0], np.int64(trip if not sequence else -1),
                                  np.int64(sequence)]),
                   "loop", name, (groups * size,), local or ())

    def _groups(self, count: int, size: int, replayed: bool, reduces: bool = True) -> int:
        """Work groups of `size` for a launch over `count` iterations: as many as it needs, at most
        `max_groups` for a loop that `reduces` (its groups reduce sums: the last group adds up one partial
        sum per group; or it makes atomic adds: on an H100 the reverse loop of GMM's 2.5M (component, point)
        pairs took 3.9 ms with a work item per pair against 2.0 with `max_groups`, its adds into one row
        of d_icf contending) and `MAX_GROUPS` for the others (one work item per iteration runs an
        elementwise loop some 8% faster on an H100 than `max_groups` that take several each). A replayed
        launch's count is the previous call's, and the call's may be larger: on a GPU it takes at least
        `max_groups` (a work item takes every size-th iteration, so any count is covered, and a larger one
        at full speed; a work item with no iteration ends at once), on a CPU at least
        `REPLAYED_GROUPS_PER_CORE` per core."""
        groups = min(max(-(-count // size), 1), self.max_groups if reduces else MAX_GROUPS)
        if replayed:
            at_least = self.max_groups if self.where.is_gpu else REPLAYED_GROUPS_PER_CORE * self.where.units
            return self.max_groups if reduces and self.where.is_gpu else max(groups, at_least)
        return groups

    def _enqueue(self, kernel: Any, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
                 base: list[object], rest: list[object]) -> Any:
        """Launch `kernel` on the arguments `base` then `rest`, setting only those that differ from its
        previous launch: a serial kernel is launched again after every request, with the same arguments, and
        setting some forty of them costs more than the launch on a GPU. `base` (the entry's arguments and
        the sites' buffers, `_base_args`) is one list object as long as it does not change, so only `rest`
        is compared then. Buffers are compared by identity, scalars by type and bits (-0.0 is not 0.0). The
        arguments kept keep the previous call's argument buffers alive until the next call replaces them."""
        previous = self.kernel_args.get(kernel)
        if previous is None or len(previous[0]) + len(previous[1]) != len(base) + len(rest):
            for index, new in enumerate([*base, *rest]):
                _set_arg(kernel, index, new)
        elif previous[0] is base:
            for index, (old, new) in enumerate(zip(previous[1], rest)):
                if not _same(old, new):
                    _set_arg(kernel, len(base) + index, new)
        else:
            for index, (old, new) in enumerate(zip([*previous[0], *previous[1]], [*base, *rest])):
                if not _same(old, new):
                    _set_arg(kernel, index, new)
        self.kernel_args[kernel] = (base, rest)
        return import_pyopencl().enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size)

    def _base_args(self, args: list[object]) -> list[object]:
        """The arguments every program kernel takes first: the entry's `args`, then each site's buffer; the
        list of the previous call (or request) when they are the same, so that `_enqueue` skips them."""
        base = [*args, *(buffer for buffer, _ in self.sites)]
        previous = self.base
        if previous is not None and len(previous) == len(base) and all(map(_same, previous, base)):
            return previous
        return base

    def _note(self, event: Any, kind: str, name: str, global_size: tuple[int, ...] = (),
              local_size: tuple[int, ...] = (), nbytes: int = 0) -> None:
        """Record a command in the profile of the call (`profiler.py`), when one is active."""
        if self.trace is not None:
            self.trace.add(event, profiler.Launch(kind, name, global_size, local_size, nbytes))

    def _wait(self, block: Callable[[], object]) -> None:
        """Run `block`, which waits for the device, counting the wait in the profile."""
        if self.trace is None:
            block()
            return
        start = time.perf_counter()
        block()
        self.trace.call.wait_ms += (time.perf_counter() - start) * 1e3

    def _buffer(self, site: AllocSite, count: int) -> Any:
        """A device buffer of `count` elements for the local arrays of `site`; MemoryError naming the
        alloc's line when the device cannot hold it in one buffer."""
        cl = import_pyopencl()
        size = max(count, 1) * np.dtype(_SCALAR_DTYPES[site.element]).itemsize
        opencl_counters.add("buffer_allocations")
        problem = None
        if size > self.where.largest_buffer:
            problem = f"the device's largest buffer is {self.where.largest_buffer} bytes (CL_DEVICE_MAX_MEM_ALLOC_SIZE)"
        else:
            try:
                return cl.Buffer(self.where.context, cl.mem_flags.READ_WRITE, size)
            except cl.Error as error:
                problem = str(error)
        where = f"{site.location}: alloc: " if site.location else ""
        raise MemoryError(f"{where}cannot allocate {size} bytes of local arrays on {self.where.name}: {problem}")

    def _fill(self, site: int, start: int, stop: int) -> None:
        if stop <= start:
            return
        info = self.program.allocs[site]
        dtype = np.dtype(_SCALAR_DTYPES[info.element])
        pattern = np.array([info.fill], dtype=dtype)
        opencl_counters.add("fills")
        self._fill_bytes(site, pattern, start * dtype.itemsize, (stop - start) * dtype.itemsize)

    def _clear(self, site: int, start: int, size: int) -> None:
        """Zero `size` bytes of the site's buffer from byte `start` on (a zeroed view into an arena), with the
        widest pattern that divides both (fewer pieces: `_fill_bytes`)."""
        if size <= 0:
            return
        opencl_counters.add("fills")
        width = next(w for w in (8, 4, 2, 1) if start % w == 0 and size % w == 0)
        self._fill_bytes(site, np.zeros(1, dtype=f"u{width}"), start, size)

    def _fill_bytes(self, site: int, pattern: np.ndarray, start: int, size: int) -> None:
        """Fill bytes start..start+size of the site's buffer with `pattern`, in pieces of fewer than 2**31
        patterns (NVIDIA's fill counts them in 32 bits: a larger fill faults the GPU)."""
        cl = import_pyopencl()
        piece = ((1 << 31) - 1) * pattern.itemsize
        for offset in range(start, start + size, piece):
            length = min(piece, start + size - offset)
            self._note(cl.enqueue_fill_buffer(self.queue, self.sites[site][0], pattern, offset, length), "fill",
                       f"site {site}", nbytes=length)

    def _alloc(self, site: int, count: int, fill: bool) -> None:
        if self.counted is not None:
            self.counted.site_elements[site] = count
        if self.sites[site][1] < count:
            self.sites[site] = (self._buffer(self.program.allocs[site], count), count)
            self.base = self._base_args(self.entry_args)
        if fill:
            self._fill(site, 0, count)

    def _grow(self, site: int, new: int, old: int) -> None:
        if self.counted is not None:
            self.counted.site_elements[site] = new
        cl = import_pyopencl()
        buffer = self._buffer(self.program.allocs[site], new)
        itemsize = np.dtype(_SCALAR_DTYPES[self.program.allocs[site].element]).itemsize
        if old:
            self._note(cl.enqueue_copy(self.queue, buffer, self.sites[site][0], byte_count=old * itemsize), "grow",
                       f"site {site}", nbytes=old * itemsize)
        self.sites[site] = (buffer, new)
        self.base = self._base_args(self.entry_args)
        self._fill(site, old, new)


_profiling_queues: dict[str, Any] = {}


def profiling_queue(where: Device) -> Any:
    """A second queue of `where`'s context with profiling enabled, made once (`profiler.py`)."""
    if where.name not in _profiling_queues:
        cl = import_pyopencl()
        _profiling_queues[where.name] = cl.CommandQueue(
            where.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    return _profiling_queues[where.name]


class _Trace:
    """The profile of one call being made: its commands' events, read when the call has finished."""

    def __init__(self, name: str, device_name: str) -> None:
        self.call = profiler.CallProfile(name, device_name)
        self.events: list[tuple[Any, profiler.Launch]] = []
        self.start = time.perf_counter()

    def add(self, event: Any, launch: profiler.Launch) -> None:
        self.events.append((event, launch))
        self.call.launches.append(launch)

    def finish(self) -> None:
        """Read the events' times (every command has completed: the call ended with `finish`) and record."""
        self.call.wall_ms = (time.perf_counter() - self.start) * 1e3
        for event, launch in self.events:
            event.wait()
            launch.device_ms = (event.profile.end - event.profile.start) * 1e-6
        profiler.record(self.call)


@functools.cache
def _access_sets(source: str, loops: int) -> tuple[list[opencl_counters.AccessSet], opencl_counters.AccessSet]:
    return opencl_counters.access_sets(source, loops)


@dataclass
class _CountedCall:
    """What one call's counters need: the arguments' bytes, each local array site's elements so far, and
    the control buffer (the extents of views into arenas are saved there)."""

    runner: Runner
    argument_bytes: list[int]
    site_elements: dict[int, int]
    control: Any = None

    @staticmethod
    def start(runner: Runner, values: Sequence[object], uploads: list[np.ndarray],
              copies: list[tuple[Any, np.ndarray, int]]) -> _CountedCall:
        program = runner.program
        opencl_counters.add("calls")
        opencl_counters.add("buffer_allocations", len(uploads))
        opencl_counters.add("host_copy_bytes", sum(array.nbytes for array in uploads)
                            + sum(array.nbytes for _, array, _ in copies))
        key = f"{program.serial}:{sha256(program.source.encode()).hexdigest()[:12]}"
        for stats in opencl_counters.active():
            stats.programs[key] = len(program.loops)
            stats.serial_prange_loops[key] = len(program.serial_loops)
        sizes = [int(getattr(value, "nbytes", 0)) if isinstance(ty, ArrayType) else 0
                 for ty, value in zip(runner.types, values, strict=True)]
        return _CountedCall(runner, sizes, {})

    def bytes_of(self, arrays: frozenset[opencl_counters.ArrayRef], words: np.ndarray) -> int:
        total = 0
        for array in arrays:
            if array.kind == "argument":
                total += self.argument_bytes[array.index]
            elif array.kind == "view":
                total += int(np.prod([max(int(words[w]), 0) for w in array.words])) * array.itemsize
            else:
                itemsize = np.dtype(_SCALAR_DTYPES[self.runner.program.allocs[array.index].element]).itemsize
                total += self.site_elements.get(array.index, 0) * itemsize
        return total

    def control_words(self, control: Any) -> np.ndarray:
        """The control buffer's words now (a blocking copy: only while counting)."""
        words = np.zeros(self.runner.program.control_words, dtype=np.int64)
        import_pyopencl().enqueue_copy(self.runner.queue, words, control, is_blocking=True)
        return words

    def loop_launch(self, number: int, control: Any) -> None:
        program = self.runner.program
        access = _access_sets(program.source, len(program.loops))[0][number]
        words = self.control_words(control)
        opencl_counters.add("loop_launches")
        opencl_counters.add("loop_bytes_read", self.bytes_of(access.reads, words))
        opencl_counters.add("loop_bytes_written", self.bytes_of(access.writes, words))
        for stats in opencl_counters.active():
            stats.launches_by_kernel[program.loops[number].name] += 1

    def finish(self, control: Any) -> None:
        program = self.runner.program
        access = _access_sets(program.source, len(program.loops))[1]
        words = self.control_words(control)
        opencl_counters.add("serial_bytes_read", self.bytes_of(access.reads, words))
        opencl_counters.add("serial_bytes_written", self.bytes_of(access.writes, words))


NO_ARGUMENTS: list[object] = []
"""The `base` of a kernel that takes none of the program's common arguments (`iz_clear`)."""


def _set_arg(kernel: Any, index: int, value: object) -> None:
    """Set a kernel argument: a numpy scalar by its bytes (pyopencl's `set_arg` takes some 15 us to find
    out what a numpy scalar is, as long as a kernel launch on a GPU; a buffer, 0.3 us), else `set_arg`."""
    set_bytes = getattr(kernel, "_set_arg_buf", None)
    if set_bytes is not None and isinstance(value, np.generic):
        set_bytes(index, value)
    else:
        kernel.set_arg(index, value)


def _same(old: object, new: object) -> bool:
    """Is kernel argument `new` the one already set, `old`: the same buffer, or a scalar of the same type
    and bits?"""
    return old is new or (type(old) is type(new) and isinstance(new, np.generic)
                          and old.tobytes() == new.tobytes())  # type: ignore[attr-defined]


def _python_scalar(ty: ScalarType, word: np.int64) -> object:
    """The return value from its control word (the bits of a float; f32 in the low half)."""
    if ty.is_bool:
        return bool(word)
    if ty.is_int:
        return int(word)
    if ty.bits == 32:
        return float(np.array([word], dtype=np.int64).view(np.float32)[0])
    return float(np.array([word], dtype=np.int64).view(np.float64)[0])
