"""Launch, allocation and bytes-moved counters of the OpenCL backend (`opencl_runner.Runner`).

    with opencl_counters.counting() as stats:
        gradient(*args)
    stats.loop_launches, stats.serial_launches, stats.loop_bytes, stats.as_dict()

While a `counting()` block is active, every call of an OpenCL program counts:

  - `loop_launches`: NDRange launches of parallel-loop kernels (`iz_par<k>`; a loop of trip count 0 is not
    launched), by kernel in `launches_by_kernel`; `serial_launches`: runs of the serial kernel, each resume
    after a request (LAUNCH, ALLOC, GROW) one more;
  - `buffer_allocations`: device buffers the host creates for local arrays, tapes, partial sums and argument
    copies; `fills`: buffer fills (a fresh local array's nan or zero); `host_copy_bytes`: numpy arguments
    copied to the device, and back when the program may write them;
  - `programs`: per program run, its number of loop kernels (what fusion changes), and
    `serial_prange_loops`: its `prange` loops that run serially in the serial kernel (each a
    `SerialLoopWarning`): fewer loop kernels are a gain only when this stays the same.

**The bytes-moved model.** It is a model, not a hardware counter: it counts no caches, no re-reads within a
launch and no partial accesses, and its rules are the same with and without fusion, so that only what
fusion changes (the launches, and the arrays each launch touches) changes the figure. For each loop-kernel
launch: the full size of every array the kernel reads, plus the full size of every array it writes (an
array read and written counts twice), each once per launch and direction, whatever the trip count. An
array is an argument (its size at this call), a view into an arena (`optimize/memory_reuse.py`: the
product of its extents, which the serial kernel saved in the control buffer before the launch), or
another local array of the entry (its buffer's size at its latest ALLOC or GROW; a parallel loop's scratch
array is one copy per work item). Which arrays a kernel reads and writes comes from its OpenCL C
(`access_sets`, below): the loads `x[...]`, the stores `x[...] = ...` and atomic adds `&x[...]`, following
the pointer copies the renderer makes (`v8 = in5`, `in5 = s0`) and its views (`v12 = (__global
double*)(in1 + off)`); an array passed to a called function counts as read and written. The serial
kernel's arrays are counted the same way once per call (`serial_bytes_*`), not per resume: which part of
its code ran between two requests is not known to the host (so a `prange` loop that runs serially, or a
serial loop run many times, is undercounted). The partial-sum buffer, the control buffer and the device
heap of called functions are not counted. Counting reads the control buffer back at every launch, so it
costs time: time calls outside the block.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from isozyme.codegen.opencl_control import CHAIN_MACRO
from isozyme.codegen.opencl_program import OpenCLProgram
from isozyme.runtime.disk_cache import sha256
from isozyme.runtime.opencl_device import import_pyopencl
from isozyme.ssa.types import SCALAR_TYPES, ArrayType


@dataclass
class OpenCLStats:
    """What the calls inside one `counting()` block did (module docstring)."""

    calls: int = 0
    loop_launches: int = 0
    serial_launches: int = 0
    buffer_allocations: int = 0
    fills: int = 0
    host_copy_bytes: int = 0
    loop_bytes_read: int = 0
    loop_bytes_written: int = 0
    serial_bytes_read: int = 0
    serial_bytes_written: int = 0
    launches_by_kernel: Counter[str] = field(default_factory=Counter)
    programs: dict[str, int] = field(default_factory=dict)
    """Loop kernels of each program run, keyed by the program's serial kernel and a hash of its source."""
    serial_prange_loops: dict[str, int] = field(default_factory=dict)
    """`prange` loops of each program run that run serially, keyed as `programs`."""

    @property
    def loop_bytes(self) -> int:
        return self.loop_bytes_read + self.loop_bytes_written

    @property
    def modelled_bytes(self) -> int:
        """Loop kernels' and the serial kernel's modelled bytes together."""
        return self.loop_bytes + self.serial_bytes_read + self.serial_bytes_written

    def as_dict(self) -> dict[str, object]:
        return {"calls": self.calls, "loop_launches": self.loop_launches, "serial_launches": self.serial_launches,
                "buffer_allocations": self.buffer_allocations, "fills": self.fills,
                "host_copy_bytes": self.host_copy_bytes, "loop_bytes_read": self.loop_bytes_read,
                "loop_bytes_written": self.loop_bytes_written, "serial_bytes_read": self.serial_bytes_read,
                "serial_bytes_written": self.serial_bytes_written, "modelled_bytes": self.modelled_bytes,
                "launches_by_kernel": dict(self.launches_by_kernel), "programs": dict(self.programs),
                "serial_prange_loops": dict(self.serial_prange_loops)}


_active: list[OpenCLStats] = []
"""The stats of every open `counting()` block (nested blocks all count)."""


@contextlib.contextmanager
def counting() -> Iterator[OpenCLStats]:
    """Count what OpenCL calls do until the block ends (module docstring)."""
    stats = OpenCLStats()
    _active.append(stats)
    try:
        yield stats
    finally:
        _active.remove(stats)


def active() -> list[OpenCLStats]:
    """The open blocks' stats: empty when nothing counts (the runner then does no counting work)."""
    return _active


def add(name: str, amount: int = 1) -> None:
    """Add `amount` to the counter `name` of every open block."""
    for stats in _active:
        setattr(stats, name, getattr(stats, name) + amount)


# --- which arrays a kernel touches, from its OpenCL C ---------------------------------------------------------


@dataclass(frozen=True)
class ArrayRef:
    """An array a kernel touches: argument `index`, the whole buffer of local-array site `index`, or a view
    into site `index` (an arena, `optimize/memory_reuse.py`) whose extents are the control words `words`."""

    kind: str
    """"argument", "site" or "view"."""
    index: int
    words: tuple[int, ...] = ()
    itemsize: int = 0


@dataclass
class AccessSet:
    """The arrays a kernel reads and writes."""

    reads: frozenset[ArrayRef] = frozenset()
    writes: frozenset[ArrayRef] = frozenset()


_ALIAS = re.compile(r"\b(v\d+|in\d+) = (a\d+|s\d+|in\d+|v\d+)\b(?![\[(])")
_VIEW = re.compile(r"\b(v\d+) = \((?:__global )?(\w+)\*\)\((\w+) \+[^;]*;")
_NAME = re.compile(r"\b(a\d+|s\d+|in\d+|v\d+)\b")
_ITEMSIZE = {"double": 8, "float": 4, "long": 8, "int": 4, "uchar": 1, "char": 1, "bool": 1}


def function_text(source: str, name: str) -> str:
    """The body of the C function or kernel `name` in `source`: from the line declaring it to the first line
    that is just `}` (how `codegen/opencl_program.py` renders functions); empty when it is not there."""
    match = re.search(rf"^[^\n]*\b{re.escape(name)}\([^\n]*\{{\n", source, re.MULTILINE)
    if match is None:
        return ""
    end = source.find("\n}\n", match.end())
    return source[match.end():end if end >= 0 else len(source)]


def access_sets(source: str, loops: int) -> tuple[list[AccessSet], AccessSet]:
    """The access sets of loop kernels 0..loops-1 (`iz_body<k>` and the group sums of `iz_par<k>`) and of
    the serial kernel `iz_serial`. The chained launches' code (`CHAIN_MACRO`) is left out: it is the
    serial kernel's, run by one work item, and counted calls are never replayed, so never chained."""
    source = re.sub(rf"^#ifdef {CHAIN_MACRO}\n.*?^#endif\n", "", source, flags=re.MULTILINE | re.DOTALL)
    sets = []
    for k in range(loops):
        kernel = re.sub(rf"\biz_body{k}\([^;]*\);", "", function_text(source, f"iz_par{k}"))
        inputs = {f"in{i}": int(word) for i, word in re.findall(r"\bin(\d+) = ctl\[(\d+)\];", kernel)}
        roots = _roots(kernel, {})
        body = _accesses(function_text(source, f"iz_body{k}"), roots, inputs)
        group = _accesses(kernel, roots, inputs)
        sets.append(AccessSet(body.reads | group.reads, body.writes | group.writes))
    return sets, _accesses(function_text(source, "iz_serial"), {}, {})


def _roots(text: str, known: dict[str, ArrayRef]) -> dict[str, ArrayRef]:
    """Each pointer variable of `text` that copies an array (`v8 = in5;`, `__global double* in5 = s0;`),
    mapped to the array, starting from `known`."""
    roots = dict(known)
    changed = True
    while changed:
        changed = False
        for target, source in _ALIAS.findall(text):
            root = _root(source, roots)
            if root is not None and roots.get(target) != root:
                roots[target] = root
                changed = True
    return roots


def _root(name: str, roots: dict[str, ArrayRef]) -> ArrayRef | None:
    if re.fullmatch(r"a\d+", name):
        return ArrayRef("argument", int(name[1:]))
    if re.fullmatch(r"s\d+", name):
        return ArrayRef("site", int(name[1:]))
    return roots.get(name)


def _views(text: str, roots: dict[str, ArrayRef], inputs: dict[str, int]) -> dict[str, ArrayRef]:
    """The views of `text` (`v12 = (__global double*)(in1 + off);`), with the control words of their extents
    (`v12_d0 = in2;` with `in2 = ctl[33]` in the kernel, or `v12_d0 = ctl[33];` in the serial kernel); a
    view whose extents are not found stands for its whole site."""
    views = {}
    for name, ctype, base in _VIEW.findall(text):
        arena = _root(base, roots)
        if arena is None:
            continue
        words = []
        for _, value in sorted(re.findall(rf"\b{name}_d(\d+) = (ctl\[\d+\]|in\d+);", text)):
            words.append(int(value[4:-1]) if value.startswith("ctl") else inputs.get(value, -1))
        known = words and -1 not in words and ctype in _ITEMSIZE
        views[name] = ArrayRef("view", arena.index, tuple(words), _ITEMSIZE[ctype]) if known else arena
    return views


def _accesses(text: str, known: dict[str, ArrayRef], inputs: dict[str, int]) -> AccessSet:
    roots = _roots(text, known)
    roots.update(_views(text, roots, inputs))
    roots = _roots(text, roots)  # copies of views
    text = _VIEW.sub("", text)
    reads: set[ArrayRef] = set()
    writes: set[ArrayRef] = set()
    for match in _NAME.finditer(text):
        root = _root(match.group(1), roots)
        if root is None:
            continue
        rest = text[match.end():].lstrip()
        before = text[:match.start()].rstrip()
        if rest.startswith("["):
            after = text[_closing_bracket(text, match.end()) + 1:].lstrip()
            atomic = before.endswith("&") and not before.endswith("&&")  # iz_atomic_add_<t>(&x[...], v)
            stored = after.startswith("=") and not after.startswith("==")
            if atomic or stored:
                writes.add(root)
            if atomic or not stored:
                reads.add(root)
        elif (rest.startswith("=") and not rest.startswith("==")) or before.endswith("=") or before.endswith("*"):
            continue  # a pointer assigned (an alias `_roots` follows), or a declaration
        else:  # passed to a function: it may read and write
            reads.add(root)
            writes.add(root)
    return AccessSet(frozenset(reads), frozenset(writes))


def _closing_bracket(text: str, start: int) -> int:
    depth = 0
    for position in range(text.index("[", start), len(text)):
        depth += {"[": 1, "]": -1}.get(text[position], 0)
        if depth == 0:
            return position
    return len(text) - 1


# --- what one call counts -------------------------------------------------------------------------------------


@functools.cache
def _access_sets(source: str, loops: int) -> tuple[list[AccessSet], AccessSet]:
    return access_sets(source, loops)


@dataclass
class CountedCall:
    """What one call's counters need (`opencl_runner.Runner` makes one per call while counting): its program
    and queue, the arguments' bytes, and each local array site's elements so far. The extents of views into
    arenas are read from the control buffer, where the serial kernel saved them."""

    program: OpenCLProgram
    queue: Any
    argument_bytes: list[int]
    site_elements: dict[int, int]

    @staticmethod
    def start(program: OpenCLProgram, queue: Any, types: Sequence[Any], values: Sequence[object],
              uploads: list[np.ndarray], copies: list[tuple[Any, np.ndarray, int]]) -> CountedCall:
        """Count a call of `program` on `values` (of `types`), which copies `uploads` in and `copies` out."""
        add("calls")
        add("buffer_allocations", len(uploads))
        add("host_copy_bytes", sum(array.nbytes for array in uploads) + sum(array.nbytes for _, array, _ in copies))
        key = f"{program.serial}:{sha256(program.source.encode()).hexdigest()[:12]}"
        for stats in _active:
            stats.programs[key] = len(program.loops)
            stats.serial_prange_loops[key] = len(program.serial_loops)
        sizes = [int(getattr(value, "nbytes", 0)) if isinstance(ty, ArrayType) else 0
                 for ty, value in zip(types, values, strict=True)]
        return CountedCall(program, queue, sizes, {})

    def bytes_of(self, arrays: frozenset[ArrayRef], words: np.ndarray) -> int:
        total = 0
        for array in arrays:
            if array.kind == "argument":
                total += self.argument_bytes[array.index]
            elif array.kind == "view":
                total += int(np.prod([max(int(words[w]), 0) for w in array.words])) * array.itemsize
            else:
                itemsize = SCALAR_TYPES[self.program.allocs[array.index].element].numpy_dtype.itemsize
                total += self.site_elements.get(array.index, 0) * itemsize
        return total

    def control_words(self, control: Any) -> np.ndarray:
        """The control buffer's words now (a blocking copy: only while counting)."""
        words = np.zeros(self.program.control_words, dtype=np.int64)
        import_pyopencl().enqueue_copy(self.queue, words, control, is_blocking=True)
        return words

    def loop_launch(self, number: int, control: Any) -> None:
        access = _access_sets(self.program.source, len(self.program.loops))[0][number]
        words = self.control_words(control)
        add("loop_launches")
        add("loop_bytes_read", self.bytes_of(access.reads, words))
        add("loop_bytes_written", self.bytes_of(access.writes, words))
        for stats in _active:
            stats.launches_by_kernel[self.program.loops[number].name] += 1

    def finish(self, control: Any) -> None:
        access = _access_sets(self.program.source, len(self.program.loops))[1]
        words = self.control_words(control)
        add("serial_bytes_read", self.bytes_of(access.reads, words))
        add("serial_bytes_written", self.bytes_of(access.writes, words))
