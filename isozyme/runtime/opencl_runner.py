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

**Replayed calls.** Serving a request is a round trip: the host waits for the device to read the header, then
enqueues more work, and the GPU idles meanwhile (tens of microseconds each, more than a small loop kernel
takes). So the runner keeps the launches and clears of a call that went through (its script), and the next
call enqueues them all at once, each followed by a resume of the serial kernel, before it reads the header
(`Runner._replay`), and the copies back of the numpy arrays it may write too. The kernels check on the device
that the serial kernel's pending request is the step they replay (its number, kind and loop or site) and take
its trip count or byte range from it; a resume goes on only after a step that served its request. A call that
makes other requests (an ALLOC, a different number of time steps) stops at the first difference, and the host
serves the rest as usual; what ran and what the host served becomes the next script (and the arrays are copied
back again at the end). Results are the same either way; a call with no requests beyond its script waits for
the device once. `ISOZYME_OPENCL_REPLAY=0` turns replays off.

`with opencl_counters.counting() as stats:` counts what the calls in the block do: NDRange launches of loop
kernels, runs of the serial kernel (each resume one), buffer allocations and fills, and a model of the bytes
moved: per loop-kernel launch, the full size of every array it reads plus of every array it writes (from the
kernel's OpenCL C), the serial kernel's arrays once per call. A model, the same before and after fusion, not
a hardware counter. Outside such a block the runner counts nothing (and a counted call is not replayed).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from isozyme.codegen.opencl_control import (
    ALLOC,
    ARG0,
    ARG2,
    CHAINED_TRIP,
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
    REPLAYED_TRIP,
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
from isozyme.runtime.opencl_device import Device, chained, import_pyopencl
from isozyme.runtime.opencl_launches import (
    NO_ARGUMENTS,
    STAGED_BYTES,
    ZEROS_FILLED,
    Command,
    HostStage,
    KernelArguments,
    blocking_read,
    nonblocking_write,
    python_scalar,
    zero_fill,
)
from isozyme.ssa.types import ArrayType


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
        self.trace: profiler.CallTrace | None = None
        """The profile of the call in progress, when a profile is active."""
        self.arguments = KernelArguments()
        """What each kernel's arguments were last set to (`opencl_launches.py`)."""
        self.base: list[object] | None = None
        """The common arguments of the program's kernels in the call in progress (`_base_args`)."""
        self.entry_args: list[object] = []
        """The entry's arguments in the call in progress."""
        self.argument_keys: list[object] | None = None
        """What made `entry_args`: each array's buffer and shape, each scalar and its sign (`_entry_args`)."""
        self.argument_parts: list[list[object]] = []
        """`entry_args` by position: an array's buffer and extents, a scalar."""
        self.cl = cl = import_pyopencl()
        self.enqueue_kernel = cl.enqueue_nd_range_kernel
        self.read = blocking_read(cl)
        self.write = nonblocking_write(cl)
        self.zero = zero_fill(cl)
        self.serials = {mode: cl.Kernel(built, program.serial) for mode in (START, REPLAYED, SERVED_BY_HOST)}
        """The serial kernel, one kernel object per value of its `served` argument (so no launch sets it)."""
        self.loops = [cl.Kernel(built, loop.name) for loop in program.loops]
        self.clear = cl.Kernel(built, CLEAR_KERNEL)
        self.types = types
        self.scalar_types = [None if isinstance(ty, ArrayType) else _SCALAR_DTYPES[str(ty)] for ty in types]
        """The numpy scalar type of each scalar parameter; None for an array."""
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
        self.counted: opencl_counters.CountedCall | None = None
        """What the call in progress counts (`counting()` active), else None."""
        self.control_host = np.zeros(program.control_words, dtype=np.int64)
        self.control = cl.Buffer(where.context, cl.mem_flags.READ_WRITE, self.control_host.nbytes)
        """The control buffer (`codegen/opencl_control.py`). The first run of the serial kernel in a call
        zeroes it but for the words the host keeps there (the heap's size, the sites' capacities), which the
        host writes from `control_host` when they change."""
        self.stage = HostStage(cl, where.context, where.queue, HEADER_WORDS)
        self.header = self.stage.header
        """Where `_read_header` reads the control buffer's header into: pinned memory, as are the small
        arrays' copies back (`_copy_out`)."""
        self.kept: tuple[int, ...] | None = None
        """The words the host keeps in the control buffer, as last written there."""
        self.resumes = {mode: Command(kernel, (1,), (1,), True, [self.control, self.heap[0], np.int64(mode)],
                                       "serial", "iz_serial") for mode, kernel in self.serials.items()}
        """The runs of the serial kernel, by mode (`_resume`): their arguments never change."""
        self.chained = chained(where)  # as when the program was built (`opencl_backend.build_options`)
        self.argument_buffers: dict[int, Any] = {}
        """The buffer of each numpy array argument by position, reused by the next call whose array has as
        many bytes (allocating one costs a driver call, and freeing one waits for the GPU)."""
        self.script: list[Step] | None = None
        """The launches and clears of the previous call, which the next call replays (`_replay`); None
        after a call that failed."""
        self.plan: tuple[list[Step], list[Command]] | None = None
        """A script and the commands that replay it (`_replay`); None once a buffer they name is replaced."""

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
            self.queue = profiler.profiling_queue(self.where)
            self.trace = profiler.CallTrace(self.name, self.where.name)
        else:
            self.queue, self.trace = self.where.queue, None
        try:
            return self._run_call(values)
        finally:
            if self.trace is not None:
                self.trace.finish()
            self.queue, self.trace = self.where.queue, None

    def _run_call(self, values: Sequence[object]) -> object:
        uploads: list[np.ndarray] = []
        copies: list[tuple[Any, np.ndarray, int]] = []  # buffers to copy back: the arrays the program may write
        self.stage.discard()  # what a call that failed (in the driver) staged and did not land
        args = self._entry_args(values, uploads, copies)
        while len(self.sites) < len(self.program.allocs):
            self.sites.append((self._buffer(self.program.allocs[len(self.sites)], 1), 1))
        counting = opencl_counters.active()  # counting: every alloc asks the host, which counts its elements
        self._keep_words([0 if counting else capacity for _, capacity in self.sites])
        self.entry_args, self.base = args, self._base_args(args)
        queue, control = self.queue, self.control
        self.counted = opencl_counters.CountedCall.start(self.program, queue, self.types, values, uploads,
                                                         copies) if counting else None
        finished = False
        try:
            words = self._run(control, copies)
            finished = True
        finally:
            if not finished:  # an exception: the arrays are copied back as after any call
                self._copy_out(copies)
                self._wait(queue.finish)
                self.stage.land()
            if self.counted is not None:
                self.counted.finish(control)
                self.counted = None
        if words[ERROR] != 0:
            raise self.program.sites[words[ERROR] - 1].exception(words[ERROR + 1:])
        if self.return_type.is_void:
            return None
        return python_scalar(self.return_type, words[RETURN])

    def _entry_args(self, values: Sequence[object], uploads: list[np.ndarray],
                    copies: list[tuple[Any, np.ndarray, int]]) -> list[object]:
        """The entry's arguments: each array's buffer (a numpy array's copied in, `_upload`) and extents, each
        scalar as a numpy scalar. While every position has the same buffer and shape, or scalar, as at the
        previous call, that call's list, which `_base_args` and `_issue` then skip by its identity (making
        numpy scalars and comparing their bytes took a tenth of a small call); where some positions change,
        the others keep their objects (an array's extents too while its shape is the same), which
        `KernelArguments` then finds by identity. A scalar's key holds its sign: -0.0 == 0.0, but their bits
        differ; a NaN is never equal, so it is converted every time."""
        keys: list[object] = []
        for position, (scalar_type, value) in enumerate(zip(self.scalar_types, values, strict=True)):
            if isinstance(value, DeviceArray):
                keys.append((value.data, value.shape))
            elif scalar_type is None:
                keys.append((self._upload(position, value, uploads, copies), value.shape))  # type: ignore[arg-type]
            else:
                keys.append((value, math.copysign(1.0, value)))  # type: ignore[arg-type]
        previous = self.argument_keys
        if keys == previous:
            return self.entry_args
        args: list[object] = []
        parts = []
        for position, (scalar_type, value, key) in enumerate(zip(self.scalar_types, values, keys)):
            part = self.argument_parts[position] if previous is not None else None
            if part is not None and key == previous[position]:  # type: ignore[index]
                pass
            elif scalar_type is None:
                buffer, shape = key  # type: ignore[misc]
                same_shape = part is not None and shape == previous[position][1]  # type: ignore[index]
                part = [buffer, *(part[1:] if same_shape else map(np.int64, shape))]  # type: ignore[index]
            else:
                part = [scalar_type(value)]
            parts.append(part)
            args += part
        self.entry_args, self.argument_keys, self.argument_parts = args, keys, parts
        return args

    def _upload(self, position: int, array: np.ndarray, uploads: list[np.ndarray],
                copies: list[tuple[Any, np.ndarray, int]]) -> Any:
        """Copy numpy array argument `position` into its buffer, noting it in `uploads` and, where the program
        may write it, in `copies`; the buffer. A small array of zero bytes (the adjoint of an Active
        parameter, which `iz.autodiff` passes as a zero) is filled on the device instead: a write from the
        host cost a tenth of a small gradient call (`ZEROS_FILLED`)."""
        cl = self.cl
        host = array if array.size else np.zeros(1, dtype=array.dtype)  # no empty buffers in OpenCL
        buffer = self.argument_buffers.get(position)
        if buffer is None or buffer.size != host.nbytes:
            buffer = self.argument_buffers[position] = cl.Buffer(self.where.context, cl.mem_flags.READ_WRITE,
                                                                 host.nbytes)
        if host.nbytes <= ZEROS_FILLED and not host.view(np.uint8).any():
            self._note(self.zero(self.queue, buffer, host.nbytes), "fill", f"arg {position} (zeros)",
                       nbytes=host.nbytes)
        else:
            self._note(self.write(self.queue, buffer, host), "copy-in", f"arg {position}", nbytes=host.nbytes)
        uploads.append(array)
        if array.size and position in self.program.writable:
            copies.append((buffer, array, position))
        return buffer

    def _keep_words(self, capacities: list[int]) -> None:
        """Write the words the host keeps in the control buffer, the heap's size and the sites' `capacities`,
        where they differ from those written last."""
        kept = (self.heap[1], *capacities)
        if kept != self.kept:
            first = self.program.capacities
            self.control_host[HEAP_WORDS] = self.heap[1]
            self.control_host[first:first + len(capacities)] = capacities
            # done by the time the call's header read returns: the queue runs its commands in order
            self.cl.enqueue_copy(self.queue, self.control, self.control_host, is_blocking=False)
            self.kept = kept

    def _run(self, control: Any, copies: list[tuple[Any, np.ndarray, int]]) -> list[int]:
        """Run the serial kernel and serve its requests until it is done; the header's last words. A call of
        a program whose previous call went through replays that call's launches and clears first, without
        waiting (`_replay`), then the copies back of the numpy arrays it may write (`copies`); the host then
        reads the header and serves what is left, if anything, as it comes. A call that goes through its
        script thus waits for the device once: the header's blocking read comes after the copies in the
        queue, which runs its commands in order. When the call makes a request its script lacks, the first
        copies ran too early: the arrays are copied again at the end, as in a call with no script."""
        script = self.script if self.counted is None and replay_enabled() else None
        self._resume(START)
        copied = bool(script)
        if script:
            self._replay(script, control)
            self._copy_out(copies)
        steps: list[Step] | None = None  # the script's steps that ran, once the header says which
        while True:
            words = self._read_header()
            if steps is None:
                steps = _steps_that_ran(script or [], words[SEQUENCE], words[SERVED] == words[SEQUENCE])
            kind, (a, b, c) = words[KIND], words[ARG0:ARG2 + 1]
            if words[ERROR] != 0 or kind == DONE:
                break
            copied = False  # the copies ran before the host served this request: they are copied again
            if steps is script:
                steps = list(steps)  # the script stays as it is: `plan` replays it
            if kind == LAUNCH:
                steps.append((LAUNCH, words[SEQUENCE], a, b, 0))
                if b > 0:
                    self._launch(a, b, control)
                    if self.counted is not None:
                        self.counted.loop_launch(a, control)
            elif kind == ALLOC:
                self._alloc(a, b, fill=c == 0)
            elif kind == GROW:
                self._grow(a, b, c)
            elif kind == CLEAR:
                steps.append((CLEAR, words[SEQUENCE], a, b, c))
                self._clear(a, b, c)
            else:
                raise RuntimeError(f"the serial kernel made an unknown request {kind}")
            self._resume(SERVED_BY_HOST)
        self.script = steps if words[ERROR] == 0 and len(steps) <= MAX_REPLAYED else None
        if copies and not copied:
            self._copy_out(copies)
            self._wait(self.queue.finish)
            self.stage.land()
        return words

    def _copy_out(self, copies: list[tuple[Any, np.ndarray, int]]) -> None:
        """Enqueue the copies of the arrays the program may write back into the caller's numpy arrays, the
        small ones through the pinned stage (`HostStage`: they reach their arrays at `stage.land`)."""
        for buffer, array, position in copies:
            event = self.stage.stage(self.queue, buffer, array) if array.nbytes <= STAGED_BYTES else None
            if event is None:
                event = self.cl.enqueue_copy(self.queue, array, buffer, is_blocking=False)
            self._note(event, "copy-out", f"arg {position}", nbytes=array.nbytes)

    def _read_header(self) -> list[int]:
        """Read the control buffer's header (a blocking copy), counting the wait in the profile, and land the
        staged copies before it; its words."""
        header = self.header
        if self.trace is None:
            self.read(self.queue, self.control, header)
        else:
            start = time.perf_counter()
            event = self.read(self.queue, self.control, header)
            self.trace.call.wait_ms += (time.perf_counter() - start) * 1e3
            self.trace.add(event, profiler.Launch("header", "control", bytes=header.nbytes))
        self.stage.land()
        return header.tolist()  # type: ignore[no-any-return]

    def _resume(self, mode: int) -> None:
        """Run the serial kernel (`mode` START) or resume it: after the host served its request
        (SERVED_BY_HOST), or after a replayed step (REPLAYED: it goes on only if that step served it)."""
        self._issue(self.resumes[mode])
        if self.counted is not None:
            opencl_counters.add("serial_launches")

    def _replay(self, script: list[Step], control: Any) -> None:
        """Enqueue the launches and clears of the previous call, each clear followed by a resume of the
        serial kernel, and each launch too unless it is chained (`chained`: the loop kernel runs it on). A
        replayed kernel runs only if the serial kernel's pending request is that step (request number,
        kind, loop or site), taking the trip count or the bytes from the request, and the resume after it
        (in the kernel or not) goes on only if it ran. A call whose requests differ from the script stops at
        the first difference, and the host serves the rest. Any launch size is right (a work item takes every
        size-th iteration); `_groups` chooses one that suits a trip count larger than the script's. The
        commands are made once per script (`plan`), so that `_issue` finds their arguments set."""
        chained = self.chained
        if self.plan is None or self.plan[0] is not script:
            commands: list[Command] = []
            for kind, sequence, a, b, c in script:
                if kind == LAUNCH:
                    commands.append(self._loop_command(a, b, control, sequence, chained))
                    if chained:
                        continue  # its last work group resumes the serial kernel
                else:
                    size = (self._groups(c // 8, GROUP_SIZE, replayed=True, reduces=False) * GROUP_SIZE,)
                    commands.append(Command(self.clear, size, None, False,
                                             [self.sites[a][0], control, np.int64(a), np.int64(sequence)],
                                             "fill", f"site {a} (replayed)", c))
                commands.append(self.resumes[REPLAYED])
            self.plan = (script, commands)
        for command in self.plan[1]:
            self._issue(command)

    def _launch(self, number: int, trip: int, control: Any) -> None:
        """Launch loop `number` over `trip` iterations."""
        self._issue(self._loop_command(number, trip, control))

    def _loop_command(self, number: int, trip: int, control: Any, sequence: int = 0,
                      chained: bool = False) -> Command:
        """The launch of loop `number` over `trip` iterations, or (`sequence` > 0) its replay for that
        request, `trip` being the previous call's (`_groups` sizes both), `chained` if its last work group
        is to run the serial kernel on."""
        size, loop = self.program.group_size, self.program.loops[number]
        # a chained launch's groups each fence and take a ticket: at most `max_groups` of them, as for sums
        # (the elementwise primal over 2^26 elements, a work item per iteration: 0.82-0.94 ms a call against
        # 0.52-0.57, H200)
        groups = self._groups(trip, size, replayed=sequence > 0,
                              reduces=loop.accumulators > 0 or loop.atomics or chained)
        words = groups * loop.accumulators
        if words > self.partials[1]:
            self.partials, self.plan = (self._buffer(AllocSite("i64", 0), words), words), None
        replayed = CHAINED_TRIP if chained else REPLAYED_TRIP
        return Command(self.loops[number], (groups * size,), (size,) if words else None, True,
                        [control, self.partials[0], self.heap[0], np.int64(trip if not sequence else replayed),
                         np.int64(sequence)], "loop", loop.name + (" (replayed)" if sequence else ""))

    def _groups(self, count: int, size: int, replayed: bool, reduces: bool = True) -> int:
        """Work groups of `size` for a launch over `count` iterations: as many as it needs, at most
        `max_groups` for a loop that `reduces` (its groups reduce sums: the last group adds up one partial
        sum per group; or it makes atomic adds: on an H100 the reverse loop of GMM's 2.5M (component, point)
        pairs took 3.9 ms with a work item per pair against 2.0 with `max_groups`, its adds into one row
        of d_icf contending; or it is a chained launch: `_loop_command`) and `MAX_GROUPS` for the others
        (one work item per iteration runs an elementwise loop some 8% faster on an H100 than `max_groups`
        that take several each). A replayed
        launch's count is the previous call's, and the call's may be larger: on a GPU it takes at least
        `max_groups` (a work item takes every size-th iteration, so any count is covered, and a larger one
        at full speed; a work item with no iteration ends at once), on a CPU at least
        `REPLAYED_GROUPS_PER_CORE` per core."""
        groups = min(max(-(-count // size), 1), self.max_groups if reduces else MAX_GROUPS)
        if replayed:
            at_least = self.max_groups if self.where.is_gpu else REPLAYED_GROUPS_PER_CORE * self.where.units
            return self.max_groups if reduces and self.where.is_gpu else max(groups, at_least)
        return groups

    def _issue(self, command: Command) -> None:
        """Enqueue `command`, its arguments set where they differ from its kernel's previous launch
        (`opencl_launches.KernelArguments`), noting it in the profile. The arguments kept keep the previous
        call's argument buffers alive until the next call replaces them."""
        kernel = command.kernel
        self.arguments.set(kernel, self.base if command.common else NO_ARGUMENTS, command.rest)  # type: ignore[arg-type]
        event = self.enqueue_kernel(self.queue, kernel, command.global_size, command.local_size)
        if self.trace is not None:
            self.trace.add(event, profiler.Launch(command.kind, command.name, command.global_size,
                                                  command.local_size or (), command.nbytes))

    def _base_args(self, args: list[object]) -> list[object]:
        """The arguments every program kernel takes first: the entry's `args`, then each site's buffer; the
        list of the previous call (or request) when they are the same, so that `_issue` skips them."""
        return self.arguments.rebase(self.base, [*args, *(buffer for buffer, _ in self.sites)])

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
            self.sites[site], self.plan = (self._buffer(self.program.allocs[site], count), count), None
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
        self.sites[site], self.plan = (buffer, new), None
        self.base = self._base_args(self.entry_args)
        self._fill(site, old, new)


def _steps_that_ran(script: list[Step], last: int, served: bool) -> list[Step]:
    """The steps of `script` that ran in a call whose last request is number `last` (`served`: whether the
    host or a replayed step served it): those before it, and it if served; `script` itself when all did
    (its steps are in request order)."""
    if not script or script[-1][1] < last or (script[-1][1] == last and served):
        return script
    return [step for step in script if step[1] < last or (step[1] == last and served)]
