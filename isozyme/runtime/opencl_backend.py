"""The OpenCL backend: the host's side of running a kernel's program (`codegen/opencl_program.py`).

    entry = compile_opencl(module, function, CodegenOptions())
    entry(out, x, 1000)             # checked arguments: numpy arrays copied in and out, device arrays not

The device is `opencl_device.device()` (`ISOZYME_OPENCL_DEVICE` chooses it). Programs are built once per
source and device (in memory; pyopencl and the drivers keep the binaries on disk). Before emitting, every loop gets
a preheader and one latch (`canonicalize_loop_structure`), which the parallel-loop analysis needs. A call
(`Runner`) copies numpy arrays into buffers, then runs the serial kernel and serves its requests until it
is done: LAUNCH a parallel loop's kernel (as many work groups as the trip count needs; on a GPU at most
`GROUPS_PER_UNIT` per compute unit, each work item then taking several iterations), ALLOC or GROW a local
array's buffer (kept from call to call, grown when a call needs more). It then copies back the numpy arrays
the program may write (`OpenCLProgram.writable`; the others, read-only ones too, are only copied in) and
checks the error record: a failure raises the exception the interpreter raises
(`codegen/error_sites.py`). A `prange` loop that runs serially gives a `SerialLoopWarning` saying why.
pyopencl is imported on first use only (`opencl_device.import_pyopencl`), and this path never imports
llvmlite.

`with opencl_counters.counting() as stats:` counts what the calls in the block do: NDRange
launches of loop kernels, runs of the serial kernel (each resume one), buffer allocations and fills, and a
model of the bytes moved: per loop-kernel launch, the full size of every array it reads plus of every
array it writes (from the kernel's OpenCL C), the serial kernel's arrays once per call. A model, the same
before and after fusion, not a hardware counter. Outside such a block the runner counts nothing.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.error_sites import ErrorSite
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
    RETURN,
    AllocSite,
)
from isozyme.codegen.opencl_program import LoopKernel, OpenCLProgram, emit_opencl
from isozyme.optimize.function_attributes import module_memory_effects
from isozyme.optimize.loop_canonicalization import canonicalize_loop_structure
from isozyme.optimize.memory_reuse import place_module_in_arena
from isozyme.runtime import disk_cache, host_identity, opencl_counters, profiler
from isozyme.runtime.device_array import DeviceArray
from isozyme.runtime.disk_cache import sha256
from isozyme.runtime.opencl_device import Device, OpenCLUnavailable, device, import_pyopencl
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.printer import print_module
from isozyme.ssa.types import ArrayType, ScalarType

BUILD_OPTIONS = "-cl-fp32-correctly-rounded-divide-sqrt"
"""f32 division and sqrt correctly rounded, as in IEEE arithmetic (the interpreter's)."""


_PROGRAMS: dict[tuple[str, str, str], Any] = {}


def build(source: str, where: Device) -> Any:
    """The program built from `source` for `where`, cached per source and device."""
    options = build_options(where)
    key = (source, where.name, options)
    if key not in _PROGRAMS:
        cl = import_pyopencl()
        with warnings.catch_warnings():  # drivers' notes on generated code (PYOPENCL_COMPILER_OUTPUT=1 shows them)
            warnings.simplefilter("ignore", cl.CompilerWarning)
            _PROGRAMS[key] = cl.Program(where.context, source).build(options=options)
    return _PROGRAMS[key]


def build_options(where: Device) -> str:
    """`BUILD_OPTIONS`, and OpenCL C 3.0 on a device with `cl_ext_float_atomics`, whose feature macros then
    select native float atomic adds in `ATOMIC_HELPERS` (`codegen/opencl_language.py`); on NVIDIA's
    OpenCL, `IZ_PTX_ATOMICS` selects the GPU's own float reductions in inline PTX there, with warp sums
    before them unless `ISOZYME_OPENCL_WARP_SUMS=0` (`codegen/opencl_language.WARP_HELPERS`)."""
    options = f"{BUILD_OPTIONS} -cl-std=CL3.0" if where.float_atomics else BUILD_OPTIONS
    if not where.ptx:
        return options
    return f"{options} -D IZ_PTX_ATOMICS" + ("" if warp_sums() else " -D IZ_NO_WARP_SUMS")


def warp_sums() -> bool:
    """`ISOZYME_OPENCL_WARP_SUMS`: "1" (default) sums a warp's atomic adds into one address before adding
    on NVIDIA's OpenCL, "0" adds each work item's value on its own (the baseline `benchmarks/` compare)."""
    value = os.environ.get("ISOZYME_OPENCL_WARP_SUMS", "1")
    if value not in ("0", "1"):
        raise ValueError(f"ISOZYME_OPENCL_WARP_SUMS must be 0 or 1, not {value!r}")
    return value == "1"


def opencl_source(module: Module, function: Function, options: CodegenOptions) -> str:
    """The OpenCL C of `module` with `function` as the kernel (`iz.show_ir(kernel, stage="opencl")`)."""
    try:
        size = group_size(device())
    except OpenCLUnavailable:  # the source as a device with 256-item groups gets it
        size = GROUP_SIZE
    program = _emit(module, function, options, size)
    notes = [f"// {reason}" for reason in program.serial_loops]
    return "\n".join([*notes, program.source]) if notes else program.source


def _emit(module: Module, function: Function, options: CodegenOptions, size: int) -> OpenCLProgram:
    """The program, after giving every loop one latch and a preheader (a derivative's reverse loops may
    have several latches), as the parallel-loop analysis needs; `size` is its work-group size."""
    canonicalize_loop_structure(function)
    place_module_in_arena(module)  # after every SSA pass, right before codegen (optimize/memory_reuse.py)
    writable = frozenset(module_memory_effects(module)[function].writes)
    return emit_opencl(module, function, options, writable, reduction_mode(), size)


def heap_megabytes() -> int:
    """`ISOZYME_OPENCL_HEAP_MB` (default 256): the device heap that functions a kernel calls allocate their
    local arrays of run-time extent from (a MemoryError when a run needs more)."""
    value = os.environ.get("ISOZYME_OPENCL_HEAP_MB", "256")
    if not value.isdigit() or int(value) == 0:
        raise ValueError(f"ISOZYME_OPENCL_HEAP_MB must be a positive number of megabytes, not {value!r}")
    return int(value)


def reduction_mode() -> str:
    """`ISOZYME_OPENCL_REDUCTION`: "group" (default: work-group reductions) or "atomic" (one atomic add per
    work item, the naive baseline that `benchmarks/` compares with)."""
    mode = os.environ.get("ISOZYME_OPENCL_REDUCTION", "group")
    if mode not in ("group", "atomic"):
        raise ValueError(f"ISOZYME_OPENCL_REDUCTION must be 'group' or 'atomic', not {mode!r}")
    return mode


def group_size(where: Device) -> int:
    """The work-group size of loop kernels with work-group sums on `where`: `ISOZYME_OPENCL_GROUP_SIZE` (a
    power of two the device allows), else 256, or the device's largest work group if smaller."""
    value = os.environ.get("ISOZYME_OPENCL_GROUP_SIZE", "")
    if not value:
        return min(GROUP_SIZE, where.largest_group)
    size = int(value) if value.isdigit() else 0
    if size < 1 or size & (size - 1) or size > where.largest_group:
        raise ValueError(f"ISOZYME_OPENCL_GROUP_SIZE must be a power of two of at most {where.largest_group} (the "
                         f"largest work group of {where.name}), not {value!r}")
    return size


GROUPS_PER_UNIT = 8
"""Work groups per compute unit that a parallel loop's launch asks for."""


class SerialLoopWarning(UserWarning):
    """A `prange` loop runs serially on OpenCL (the message says why)."""


_SCALAR_DTYPES = {"i1": np.uint8, "i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}


def compile_opencl(module: Module, function: Function, options: CodegenOptions) -> Callable[..., object]:
    """A function running `function` on the OpenCL device on checked argument values (module docstring)."""
    program = _emit(module, function, options, group_size(device()))
    return _runner(function.name, program, [arg.type for arg in function.args],
                   function.return_type)


def _runner(name: str, program: OpenCLProgram, types: Sequence[Any], return_type: Any) -> Runner:
    for reason in program.serial_loops:
        warnings.warn(f"OpenCL: {reason}", SerialLoopWarning, stacklevel=5)
    return Runner(name, program, device(), types, return_type)


CACHE_FORMAT = "isozyme opencl backend 4"
"""Changes when what the backend stores changes (2: the writable parameters; 3: the capacity words; 4: the
work-group size)."""
_programs: dict[str, OpenCLProgram] = {}
"""Programs made or loaded in this process, by cache key."""


def compile_cached(name: str, module: Module, entry: str, pipeline: str, optimize: Callable[[Module], Function],
                   options: CodegenOptions, types: Sequence[Any], return_type: Any,
                   use_disk_cache: bool = True) -> Callable[..., object]:
    """`compile_opencl` through the memory and disk caches, as the llvm backend's `compile_native`: the key
    is the SHA-256 of the lowered module (and its source locations), the entry's name, the pipeline, the
    codegen options, the reduction mode and isozyme's version and modules; `optimize` runs the pipeline on
    `module` in place and returns the entry (on a miss only). An entry holds the OpenCL C and what the
    runner needs; pyopencl and the driver cache the device binaries themselves."""
    locations = "\n".join(str(inst.loc) for function in module for inst in function.instructions())
    material = "\n".join([CACHE_FORMAT, host_identity.compiler_description(), pipeline, repr(options),
                          reduction_mode(), str(group_size(device())), entry, print_module(module), locations])
    key = sha256(material.encode()).hexdigest()
    if key not in _programs:
        cached = disk_cache.load(key, name) if use_disk_cache else None
        program = _decoded(cached) if cached is not None else None
        if program is None:
            function = optimize(module)
            assert function.name == entry, (function.name, entry)
            program = _emit(module, function, options, group_size(device()))
            if use_disk_cache:
                disk_cache.store(key, _metadata(program), program.source.encode(), name)
        _programs[key] = program
    return _runner(name, _programs[key], types, return_type)


def _metadata(program: OpenCLProgram) -> dict[str, object]:
    return {"serial": program.serial, "loops": [[k.name, k.location, k.accumulators] for k in program.loops],
            "allocs": [[a.element, a.fill, a.location] for a in program.allocs], "control_words": program.control_words,
            "sites": [site.to_json() for site in program.sites], "serial_loops": program.serial_loops,
            "uses_heap": program.uses_heap, "writable": sorted(program.writable), "capacities": program.capacities,
            "group_size": program.group_size}


def _decoded(entry: disk_cache.Entry) -> OpenCLProgram | None:
    meta = entry.metadata
    try:
        return OpenCLProgram(entry.payload.decode(), str(meta["serial"]),
                             [LoopKernel(str(n), str(at), int(a)) for n, at, a in meta["loops"]],  # type: ignore
                             [AllocSite(str(e), f, at) for e, f, at in meta["allocs"]],  # type: ignore
                             int(meta["control_words"]),  # type: ignore[call-overload]
                             [ErrorSite.from_json(site) for site in meta["sites"]],  # type: ignore
                             [str(reason) for reason in meta["serial_loops"]],  # type: ignore
                             bool(meta["uses_heap"]), frozenset(int(p) for p in meta["writable"]),  # type: ignore
                             int(meta["capacities"]), int(meta["group_size"]))  # type: ignore[call-overload]
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as error:
        disk_cache.event("corrupt", f"OpenCL program ({error}); compiling again")
        return None


class Runner:
    """Runs a program: the serial kernel, and what it asks the host for (`codegen/opencl_program.py`)."""

    def __init__(self, name: str, program: OpenCLProgram, where: Device, types: Sequence[Any],
                 return_type: Any) -> None:
        built = build(program.source, where)
        self.name = name
        self.program = program
        self.where = where
        self.queue = where.queue
        """The queue of the call in progress: the device's, or its profiling queue (`profiler.py`)."""
        self.trace: _Trace | None = None
        """The profile of the call in progress, when a profile is active."""
        self.kernel_args: dict[Any, list[object]] = {}
        """Each kernel's arguments as last set (`_enqueue`)."""
        cl = import_pyopencl()
        self.serial = cl.Kernel(built, program.serial)
        self.loops = [cl.Kernel(built, loop.name) for loop in program.loops]
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
                buffer = cl.Buffer(where.context, flags.READ_WRITE, host.nbytes)
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
        control = np.zeros(self.program.control_words, dtype=np.int64)
        control[HEAP_WORDS] = self.heap[1]
        if not opencl_counters.active():  # counting: every alloc asks the host, which counts its elements
            first = self.program.capacities
            control[first:first + len(self.sites)] = [capacity for _, capacity in self.sites]
        control_buffer = cl.Buffer(where.context, flags.READ_WRITE | flags.COPY_HOST_PTR, hostbuf=control)
        header = np.zeros(HEADER_WORDS, dtype=np.int64)
        self.counted = _CountedCall.start(self, values, uploads, copies) if opencl_counters.active() else None
        try:
            self._run(args, control_buffer, header)
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

    def _run(self, args: list[object], control: Any, header: np.ndarray) -> None:
        cl = import_pyopencl()
        queue = self.queue
        while True:
            self._note(self._enqueue(self.serial, (1,), (1,), [*args, *(buffer for buffer, _ in self.sites), control,
                                                               self.heap[0]]), "serial", "iz_serial", (1,), (1,))
            if self.counted is not None:
                opencl_counters.add("serial_launches")
            self._wait(lambda: self._note(cl.enqueue_copy(queue, header, control, is_blocking=True), "header",
                                          "control", nbytes=header.nbytes))
            kind = int(header[KIND])
            if header[ERROR] != 0 or kind == DONE:
                return
            if kind == LAUNCH:
                number, trip = int(header[ARG0]), int(header[ARG1])
                if trip > 0:
                    size = self.program.group_size
                    groups = min(-(-trip // size), self.max_groups)
                    words = groups * self.program.loops[number].accumulators
                    if words > self.partials[1]:
                        self.partials = (self._buffer(AllocSite("i64", 0), words), words)
                    local = (size,) if words else None
                    self._note(self._enqueue(self.loops[number], (groups * size,), local,
                                             [*args, *(buffer for buffer, _ in self.sites), control, self.partials[0],
                                              self.heap[0], np.int64(trip)]),
                               "loop", self.program.loops[number].name, (groups * size,), local or ())
                    if self.counted is not None:
                        self.counted.loop_launch(number, control)
            elif kind == ALLOC:
                self._alloc(int(header[ARG0]), int(header[ARG1]), fill=header[ARG2] == 0)
            elif kind == GROW:
                self._grow(int(header[ARG0]), int(header[ARG1]), int(header[ARG2]))
            elif kind == CLEAR:
                self._clear(int(header[ARG0]), int(header[ARG1]), int(header[ARG2]))
            else:
                raise RuntimeError(f"the serial kernel made an unknown request {kind}")

    def _enqueue(self, kernel: Any, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
                 args: list[object]) -> Any:
        """Launch `kernel`, setting only the arguments that differ from its previous launch: a serial kernel
        is launched again after every request, with the same arguments, and setting some forty of them
        costs more than the launch on a GPU. Buffers are compared by identity, scalars by type and bits (-0.0
        is not 0.0). The arguments kept keep the previous call's argument buffers alive until the next call
        replaces them."""
        previous = self.kernel_args.get(kernel)
        if previous is None or len(previous) != len(args):
            kernel.set_args(*args)
            self.kernel_args[kernel] = list(args)
        else:
            for index, (old, new) in enumerate(zip(previous, args)):
                if old is new or (type(old) is type(new) and isinstance(new, np.generic)
                                  and old.tobytes() == new.tobytes()):  # type: ignore[attr-defined]
                    continue
                kernel.set_arg(index, new)
                previous[index] = new
        return import_pyopencl().enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size)

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


def _python_scalar(ty: ScalarType, word: np.int64) -> object:
    """The return value from its control word (the bits of a float; f32 in the low half)."""
    if ty.is_bool:
        return bool(word)
    if ty.is_int:
        return int(word)
    if ty.bits == 32:
        return float(np.array([word], dtype=np.int64).view(np.float32)[0])
    return float(np.array([word], dtype=np.int64).view(np.float64)[0])
