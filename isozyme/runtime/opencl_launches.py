"""Launching a program's OpenCL kernels from the host (`opencl_runner.Runner`): the commands it enqueues
again and again (`Command`), setting their arguments (`KernelArguments`), and the reads and writes it makes
through pyopencl's own functions (`blocking_read`, `nonblocking_read`, `nonblocking_write`, `zero_fill`), and
the pinned host memory its small reads land in (`HostStage`).

Setting a kernel argument is a driver call, and on a GPU setting some forty of them costs more than the
launch: a serial kernel is launched again after every request with the same arguments, and a program's
kernels all take the entry's arguments first (`Runner.base`). So each kernel's arguments are set only where
they differ from what that kernel was last launched with. Lists are compared by identity first: the entry's
arguments are one list object for as long as they do not change, and so is the rest of a command made
once. When a call's arguments do change (another output array, as in a loop over batches), the runner
notes which positions changed once (`KernelArguments.rebase`), and each kernel that was last launched with
the list before sets those positions only, instead of comparing every argument again: in a call of an
elementwise gradient on arrays of its own, comparing took more of the host's time than the launches.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from isozyme.ssa.types import ScalarType

NO_ARGUMENTS: list[object] = []
"""The `base` of a kernel that takes none of the program's common arguments (`iz_clear`)."""


@dataclass(frozen=True, slots=True)
class Command:
    """A launch the runner may make again with the same arguments (`Runner._issue`)."""

    kernel: Any
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    common: bool
    """Whether the kernel takes the program's common arguments (`Runner.base`) before `rest`."""
    rest: list[object]
    """Its other arguments: one list, never changed, so that `KernelArguments.set` skips it by identity."""
    kind: str
    name: str
    """What the profile calls it (`profiler.Launch`)."""
    nbytes: int = 0


class KernelArguments:
    """The arguments each kernel of a program was last launched with, and the change of the common list
    from the previous one to the current one (module docstring)."""

    def __init__(self) -> None:
        self.last: dict[Any, tuple[list[object], list[object]]] = {}
        """Each kernel's arguments as last set: the common ones, and the rest."""
        self.change: tuple[list[object], list[object], list[int]] | None = None
        """The last change of the common list (`rebase`): the list before, the list after, and the positions
        where they differ."""

    def rebase(self, previous: list[object] | None, common: list[object]) -> list[object]:
        """The common arguments of the kernels from now on: `previous` when `common` has the same arguments
        (so that `set` skips them by identity), else `common`, noting where it differs from `previous`."""
        if previous is None or len(previous) != len(common):
            return common
        if all(map(operator.is_, previous, common)):
            return previous
        changed = self._changed(previous, common)
        if not changed:
            return previous
        self.change = (previous, common, changed)
        return common

    def set(self, kernel: Any, common: list[object], rest: list[object]) -> None:
        """Set `kernel`'s arguments, `common` then `rest`, where they differ from its previous launch (no list
        given here is changed afterwards)."""
        previous = self.last.get(kernel)
        if previous is not None and previous[0] is common and previous[1] is rest:
            return
        if previous is None or len(previous[0]) != len(common) or len(previous[1]) != len(rest):
            for index, new in enumerate([*common, *rest]):
                set_argument(kernel, index, new)
        else:
            if previous[0] is not common:
                for index in self._changed(previous[0], common):
                    set_argument(kernel, index, common[index])
            if previous[1] is not rest:
                for index, (old, new) in enumerate(zip(previous[1], rest), len(common)):
                    if not same(old, new):
                        set_argument(kernel, index, new)
        self.last[kernel] = (common, rest)

    def _changed(self, before: list[object], common: list[object]) -> list[int]:
        """The positions where `common` differs from `before`: the last change's when it is this one, else
        found by comparing."""
        change = self.change
        if change is not None and change[0] is before and change[1] is common:
            return change[2]
        return [index for index, (old, new) in enumerate(zip(before, common)) if not same(old, new)]


def _own(cl: Any, name: str) -> Callable[..., Any] | None:
    """pyopencl's own function `name` (`_cl._enqueue_read_buffer`, ...), the one its `enqueue_copy` and
    `enqueue_fill_buffer` call after sorting their arguments out (4 of a small call's 80 us on PoCL), where
    this pyopencl has it; else None."""
    return getattr(getattr(cl, "_cl", None), name, None)


def blocking_read(cl: Any) -> Callable[[Any, Any, np.ndarray], Any]:
    """`read(queue, buffer, host)`: a blocking copy of `host.nbytes` bytes from the start of `buffer`."""
    read = _own(cl, "_enqueue_read_buffer")
    if read is None:
        return lambda queue, buffer, host: cl.enqueue_copy(queue, host, buffer, is_blocking=True)
    return functools.partial(read, is_blocking=True)


def nonblocking_read(cl: Any) -> Callable[[Any, Any, np.ndarray], Any]:
    """`read(queue, buffer, host)`: a copy of `host.nbytes` bytes from the start of `buffer` that returns at
    once (its bytes are in `host` once a later blocking command of the same in-order queue returns)."""
    read = _own(cl, "_enqueue_read_buffer")
    if read is None:
        return lambda queue, buffer, host: cl.enqueue_copy(queue, host, buffer, is_blocking=False)
    return functools.partial(read, is_blocking=False)


STAGED_BYTES = 4096
"""The pinned bytes of `HostStage` for a call's copies back of small arrays."""


class HostStage:
    """Pinned host memory (a `CL_MEM_ALLOC_HOST_PTR` buffer, mapped once and for good) that a call's small
    reads land in: the control buffer's header (`header`) and the copies back of numpy arguments of up to
    `STAGED_BYTES` together (`stage`; an Active parameter's adjoint, which `iz.autodiff` passes as a
    one-element array). Into pageable memory a read from the GPU is staged by the driver: on an H200
    (NVIDIA's OpenCL) the header's read started 83-92 us after an 8-byte copy back into a numpy array had
    ended, some 100 us after the loop kernel before them, and 55-71 us after it when both landed here;
    the elementwise gradient's call (2^26 elements, device arrays, the same arrays again and again) took
    1.43-1.45 ms against 1.62-1.69 in one run of both (other runs of the pageable reads: 1.46-1.68), its
    loop kernel 1.29. The staged bytes reach their arrays in `land`, once the queue has run the copies
    (after a blocking read or a `finish`)."""

    def __init__(self, cl: Any, context: Any, queue: Any, header_words: int) -> None:
        size = 8 * header_words + STAGED_BYTES
        self._buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, size)
        memory, _ = cl.enqueue_map_buffer(queue, self._buffer, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                          (size,), np.uint8, is_blocking=True)
        self.header: np.ndarray = memory[:8 * header_words].view(np.int64)
        self._area = memory[8 * header_words:]
        self._used = 0
        self._pending: list[tuple[Any, np.ndarray, np.ndarray]] = []
        self._read = nonblocking_read(cl)

    def stage(self, queue: Any, buffer: Any, array: np.ndarray) -> Any | None:
        """Enqueue the copy of `buffer`'s first `array.nbytes` bytes into the stage for C-contiguous `array`
        (`land` moves them there); its event, or None (nothing enqueued) where they do not fit."""
        start = -(-self._used // 8) * 8  # each at a multiple of 8 bytes
        stop = start + array.nbytes
        if stop > len(self._area):
            return None
        view = self._area[start:stop]
        event = self._read(queue, buffer, view)
        self._pending.append((event, view, array))
        self._used = stop
        return event

    def land(self) -> None:
        """Copy the staged bytes into their arrays, each once its copy has run (called after a blocking read
        or a `finish` of the queue, when every one has: the wait makes that no assumption). On PoCL a land
        moved before the header's read still passed every test, and on an H200 a staged copy's enqueue
        returned only once the loop kernel before it had ended (a probe's timeline), so no test sees a land
        too early: the wait is what keeps one from moving stale bytes."""
        for event, view, array in self._pending:
            event.wait()
            np.copyto(array, view.view(array.dtype).reshape(array.shape))
        self.discard()

    def discard(self) -> None:
        """Forget the staged copies (a call that failed before they ran)."""
        self._pending.clear()
        self._used = 0


def nonblocking_write(cl: Any) -> Callable[[Any, Any, np.ndarray], Any]:
    """`write(queue, buffer, host)`: a copy of `host` to the start of `buffer` that returns at once."""
    write = _own(cl, "_enqueue_write_buffer")
    if write is None:
        return lambda queue, buffer, host: cl.enqueue_copy(queue, buffer, host, is_blocking=False)
    return functools.partial(write, is_blocking=False)


ZEROS_FILLED = 64
"""The most bytes of a numpy argument that the runner fills with zeros on the device, rather than copies,
when they are all zero (`Runner._upload`): on PoCL a fill took 3 us, a write from the host 35 to 67."""


def zero_fill(cl: Any) -> Callable[[Any, Any, int], Any]:
    """`zero(queue, buffer, nbytes)`: fill the first `nbytes` bytes of `buffer` with zeros on the device."""
    fill = _own(cl, "_enqueue_fill_buffer") or cl.enqueue_fill_buffer
    zero = np.zeros(1, dtype=np.uint8)
    return lambda queue, buffer, nbytes: fill(queue, buffer, zero, 0, nbytes)


def set_argument(kernel: Any, index: int, value: object) -> None:
    """Set a kernel argument: a numpy scalar by its bytes (pyopencl's `set_arg` takes some 15 us to find
    out what a numpy scalar is, as long as a kernel launch on a GPU; a buffer, 0.3 us), else `set_arg`."""
    set_bytes = getattr(kernel, "_set_arg_buf", None)
    if set_bytes is not None and isinstance(value, np.generic):
        set_bytes(index, value)
    else:
        kernel.set_arg(index, value)


def same(old: object, new: object) -> bool:
    """Is kernel argument `new` the one already set, `old`: the same buffer, or a scalar of the same type
    and bits?"""
    return old is new or (type(old) is type(new) and isinstance(new, np.generic)
                          and old.tobytes() == new.tobytes())  # type: ignore[attr-defined]


def python_scalar(ty: ScalarType, word: int) -> object:
    """The return value from its control word (the bits of a float; f32 in the low half)."""
    if ty.is_bool:
        return bool(word)
    if ty.is_int:
        return int(word)
    if ty.bits == 32:
        return float(np.array([word], dtype=np.int64).view(np.float32)[0])
    return float(np.array([word], dtype=np.int64).view(np.float64)[0])
