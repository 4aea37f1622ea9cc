"""The profiler of OpenCL calls: where a kernel's call spends its time (`iz.profile()`, `ISOZYME_PROFILE=1`).

    with iz.profile() as prof:
        iz.grad(kernel, ...)          # kernels and derivatives running on the opencl backend
    print(prof.table())               # one block per call: its launches and copies, then totals
    prof.calls[0].launches[0].device_ms, prof.as_dict()

`ISOZYME_PROFILE=1` profiles every OpenCL call of the process and prints the table to stderr at exit
(`ISOZYME_PROFILE=all` prints every call, `1` the last call of each kernel and the totals).

Per call (`CallProfile`), everything the runner (`opencl_runner.Runner`) asked the device to do, in order
(`Launch`): each run of the serial kernel (`serial`; a resume after a request is one more: a host round trip),
each NDRange launch of a parallel loop's kernel (`loop`, with its global and local sizes), each copy of a
numpy argument to the device and back (`copy-in`, `copy-out`, with its bytes), each buffer fill (`fill`: a
small numpy argument of zero bytes is one, not a copy), each copy of a local array's buffer into a larger one
(`grow`) and each read of the control header after a serial run (`header`). Device times come from the queue's
profiling events (the end minus the start of each command, in ms). Host times: `wall_ms`, the call inside the
runner, from its first enqueue to its return; `wait_ms`, the part of it the host spent blocked on the device
(reading the header, and the `finish` after copies back that come after the last read); `python_ms = wall_ms -
wait_ms`, the host's own work (Python, pyopencl, the driver's enqueue). The argument checks before the runner
are not included.

While a profile is active the runner uses a second queue of the device with profiling enabled; commands
and their order are the same, so what is measured is the code that runs unprofiled. Calls of the `llvm`
and `interp` backends are not recorded (they make no launches: time them with `time.perf_counter`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import statistics
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from isozyme.runtime.opencl_device import Device, import_pyopencl


@dataclass
class Launch:
    """One command of a call on the device (module docstring)."""

    kind: str
    """"serial", "loop", "copy-in", "copy-out", "fill", "grow" or "header"."""
    name: str
    """The kernel's name (`iz_serial`, `iz_par<k>`), or the argument's position for a copy."""
    global_size: tuple[int, ...] = ()
    local_size: tuple[int, ...] = ()
    """Empty when the driver chooses it (or for commands that are no kernels)."""
    bytes: int = 0
    device_ms: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "name": self.name, "global_size": list(self.global_size),
                "local_size": list(self.local_size), "bytes": self.bytes, "device_ms": self.device_ms}


@dataclass
class CallProfile:
    """One call of an OpenCL program (module docstring)."""

    kernel: str
    """The program's name (the kernel's, `diffe_<f>` for a gradient)."""
    device: str
    launches: list[Launch] = field(default_factory=list)
    wall_ms: float = 0.0
    wait_ms: float = 0.0

    @property
    def python_ms(self) -> float:
        return self.wall_ms - self.wait_ms

    @property
    def device_ms(self) -> float:
        """The sum of the device times of the call's commands (they run one after another on one queue)."""
        return sum(launch.device_ms for launch in self.launches)

    @property
    def round_trips(self) -> int:
        """Reads of the header, each a wait for the device: one per request the host serves, and one at the
        end (a replayed call makes one in all when its requests are the previous call's)."""
        return sum(launch.kind == "header" for launch in self.launches)

    @property
    def serial_runs(self) -> int:
        """Runs of the serial kernel: each after the first resumes it after a request."""
        return sum(launch.kind == "serial" for launch in self.launches)

    @property
    def host_to_device_bytes(self) -> int:
        return sum(launch.bytes for launch in self.launches if launch.kind == "copy-in")

    @property
    def device_to_host_bytes(self) -> int:
        return sum(launch.bytes for launch in self.launches if launch.kind in ("copy-out", "header"))

    def by_kind(self) -> dict[str, float]:
        """Device ms per kind of command."""
        totals: dict[str, float] = {}
        for launch in self.launches:
            totals[launch.kind] = totals.get(launch.kind, 0.0) + launch.device_ms
        return totals

    def summary(self) -> str:
        return (f"{self.kernel} on {self.device}: {self.wall_ms:.3f} ms in the runner ({self.python_ms:.3f} ms on "
                f"the host, {self.wait_ms:.3f} ms waiting), device busy {self.device_ms:.3f} ms, "
                f"{len(self.launches)} commands, {self.serial_runs} serial runs, {self.round_trips} round trips, "
                f"{self.host_to_device_bytes} B to the device, {self.device_to_host_bytes} B back")

    def table(self) -> str:
        rows = [self.summary(), f"  {'kind':<9}{'name':<14}{'global':>12}{'local':>8}{'bytes':>12}{'device ms':>12}"]
        for launch in self.launches:
            sizes = [",".join(map(str, size)) or "-" for size in (launch.global_size, launch.local_size)]
            rows.append(f"  {launch.kind:<9}{launch.name:<14}{sizes[0]:>12}{sizes[1]:>8}"
                        f"{launch.bytes or '-':>12}{launch.device_ms:>12.4f}")
        return "\n".join(rows)

    def as_dict(self) -> dict[str, object]:
        return {"kernel": self.kernel, "device": self.device, "wall_ms": self.wall_ms, "wait_ms": self.wait_ms,
                "python_ms": self.python_ms, "device_ms": self.device_ms, "round_trips": self.round_trips,
                "serial_runs": self.serial_runs,
                "host_to_device_bytes": self.host_to_device_bytes,
                "device_to_host_bytes": self.device_to_host_bytes, "device_ms_by_kind": self.by_kind(),
                "launches": [launch.as_dict() for launch in self.launches]}


@dataclass(eq=False)  # profiles are told apart by identity (`profile()` removes its own)
class Profile:
    """The calls made while a profile was active."""

    calls: list[CallProfile] = field(default_factory=list)

    def kernels(self) -> dict[str, list[CallProfile]]:
        grouped: dict[str, list[CallProfile]] = {}
        for call in self.calls:
            grouped.setdefault(call.kernel, []).append(call)
        return grouped

    def table(self, every_call: bool = False) -> str:
        """Per kernel: its last call (every call with `every_call`) in detail, then the medians over its calls."""
        if not self.calls:
            return "isozyme profile: no OpenCL calls"
        blocks = [f"isozyme profile: {len(self.calls)} OpenCL calls"]
        for kernel, calls in self.kernels().items():
            shown = calls if every_call else calls[-1:]
            for number, call in enumerate(shown, start=len(calls) - len(shown) + 1):
                blocks.append(f"call {number} of {len(calls)}: {call.table()}")
            blocks.append(f"{kernel}: {len(calls)} calls, median {_median(c.wall_ms for c in calls):.3f} ms in the "
                          f"runner, {_median(c.device_ms for c in calls):.3f} ms device busy, "
                          f"{_median(c.python_ms for c in calls):.3f} ms on the host")
        return "\n".join(blocks)

    def as_dict(self) -> dict[str, object]:
        return {"calls": [call.as_dict() for call in self.calls]}


def _median(values: Iterator[float]) -> float:
    return statistics.median(list(values))


_active: list[Profile] = []


@contextlib.contextmanager
def profile() -> Iterator[Profile]:
    """Record the OpenCL calls made in the block (module docstring); profiles nest, each sees every call."""
    recorded = Profile()
    _active.append(recorded)
    try:
        yield recorded
    finally:
        _active.remove(recorded)


def active() -> bool:
    """Is any profile recording (the runner then profiles the call)?"""
    return bool(_active)


def record(call: CallProfile) -> None:
    for recorded in _active:
        recorded.calls.append(call)


_profiling_queues: dict[str, Any] = {}


def profiling_queue(where: Device) -> Any:
    """A second queue of `where`'s context with profiling enabled, made once: the runner's while a profile is
    active (module docstring)."""
    if where.name not in _profiling_queues:
        cl = import_pyopencl()
        _profiling_queues[where.name] = cl.CommandQueue(
            where.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    return _profiling_queues[where.name]


class CallTrace:
    """The profile of one call being made: its commands' events, read when the call has finished."""

    def __init__(self, name: str, device_name: str) -> None:
        self.call = CallProfile(name, device_name)
        self.events: list[tuple[Any, Launch]] = []
        self.start = time.perf_counter()

    def add(self, event: Any, launch: Launch) -> None:
        self.events.append((event, launch))
        self.call.launches.append(launch)

    def finish(self) -> None:
        """Read the events' times (every command has completed: the call ended with `finish`) and record."""
        self.call.wall_ms = (time.perf_counter() - self.start) * 1e3
        for event, launch in self.events:
            event.wait()
            launch.device_ms = (event.profile.end - event.profile.start) * 1e-6
        record(self.call)


def _start_from_environment() -> None:
    """`ISOZYME_PROFILE`: "1" (or "true", "yes", "on") or "all" profiles the whole process, printed at exit
    (another value is a warning, and no profile)."""
    value = os.environ.get("ISOZYME_PROFILE", "").lower()
    if value in ("", "0", "false", "no", "off"):
        return
    if value not in ("1", "true", "yes", "on", "all"):
        warnings.warn(f"ISOZYME_PROFILE must be 1 or all, not {value!r}: not profiling", stacklevel=2)
        return
    whole = Profile()
    _active.append(whole)
    atexit.register(lambda: print(whole.table(every_call=value == "all"), file=sys.stderr))


_start_from_environment()
