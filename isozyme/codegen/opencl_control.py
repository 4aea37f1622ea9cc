"""What the host and the kernels of an OpenCL program agree on: the control buffer's words, the requests
the serial kernel makes (`opencl_program.py` describes the execution), the entry function's local arrays
(`AllocSite`), and the C text both kinds of kernel use for the entry's parameters and for sums.

The control buffer, in `long` words: the header (`KIND`, `RESUME`, `ARG0..ARG2`, `RETURN`, `TICKETS`, the
groups of a parallel loop that are done, and `HEAP_TOP`, the device heap's words in use), the error
record at `ERROR`, the heap's size (`HEAP_WORDS`), the number of requests the serial kernel has made
(`SEQUENCE`) and the number of the last one a replayed loop kernel served (`SERVED`), one word per
reduction from `REDUCTIONS`, then one word per saved value (`Layout`). A parallel loop's kernel also gets `part`, a
buffer of one word per accumulator and work group for the partial sums.
"""

from __future__ import annotations

from dataclasses import dataclass

from isozyme.codegen.error_sites import PAYLOAD_WORDS
from isozyme.codegen.opencl_language import OpenCLRenderer
from isozyme.ssa.ir import Constant, Function, Value
from isozyme.ssa.types import ArrayType, ScalarType, Type

KIND, RESUME, ARG0, ARG1, ARG2, RETURN, TICKETS, HEAP_TOP = range(8)
ERROR = 8
HEAP_WORDS = ERROR + 1 + PAYLOAD_WORDS
"""The device heap's size in words (the host writes it); functions see these words as `err[-1]` and
`err[9]` (`opencl_lowerings.py`)."""
SEQUENCE = HEAP_WORDS + 1
"""The requests the serial kernel has made in this call: the number of the one it is waiting on."""
SERVED = SEQUENCE + 1
"""The number of the last request a replayed loop kernel served (`opencl_program.py`: replayed launches)."""
REDUCTIONS = 24
assert SERVED < REDUCTIONS
HEADER_WORDS = SERVED + 1
"""The words the host reads after each run of the serial kernel."""
DONE, LAUNCH, ALLOC, GROW, CLEAR = 1, 2, 3, 4, 5
REPLAYED_TRIP, CHAINED_TRIP = -1, -2
"""A loop kernel's `trip` argument when it is replayed (the trip count is in the request), and when it is
replayed and its last work group runs the serial kernel on (`opencl_program.py`: chained launches)."""
CHAIN_MACRO = "IZ_CHAIN"
"""Defined when the program is built for chained launches: on NVIDIA's OpenCL (`runtime/opencl_backend.py`),
whose PTX has the fence they need (`GPU_FENCE`). PoCL's work-group compiler, which wraps loops over the
work items around a kernel's code, gets the serial kernel's code (whose resumes jump into loops) wrong
inside a loop kernel: a sum came out 256 times over, even in launches that never ran it."""
GPU_FENCE = 'asm volatile("fence.acq_rel.gpu;" ::: "memory");'
"""A fence at the scope of the whole GPU (PTX's memory model). In a chained launch each work group's first
work item makes one after a barrier that follows every work item's last store (cumulative, as in CUDA's
grid sync), and the last work group's first work item one after its ticket (an atomic add that read every
other group's ticket), so the serial code it then runs reads what every work item stored. With
`mem_fence(CLK_GLOBAL_MEM_FENCE)` there instead, on an H100 that code never saw the request marked served
(by the first work item, at the kernel's start), and every replay stopped at its first launch."""
REPLAYED, SERVED_BY_HOST, START = 0, 1, 2
"""The serial kernel's `served` argument: a resume enqueued after a replayed step, one after the host
served the request, the first run of a call (which zeroes the control words the host does not keep)."""
GROUP_SIZE = 256
"""Work items per group in a kernel with work-group reductions (a power of two) unless the runtime chooses
another for its device (`emit_opencl`'s `group_size`, `runtime/opencl_backend.group_size`)."""


@dataclass
class AllocSite:
    """A local array of the entry function: one global buffer, (re)filled by the host at each `alloc`."""

    element: str
    """Its element type ("f64", ...)."""
    fill: float | int | bool
    """What a fresh array holds (0 with the `zeroed` flag)."""
    location: str | None = None
    """`file:line:col` of the alloc, for a device that cannot hold it."""


# --- saving values in the control buffer ---------------------------------------------------------------


def load_word(ty: Type, word: str) -> str:
    """The value of type `ty` stored in the control word `word` (a C lvalue such as `ctl[40]`)."""
    return {"f64": f"as_double({word})", "f32": f"as_float((int){word})", "i64": word,
            "i32": f"(int){word}", "i1": f"({word} != 0)"}[str(ty)]


def store_word(ty: Type, word: str, value: str) -> str:
    return {"f64": f"{word} = as_long({value});", "f32": f"{word} = (long)as_int({value});",
            "i64": f"{word} = {value};", "i32": f"{word} = (long){value};",
            "i1": f"{word} = {value} ? 1 : 0;"}[str(ty)]


class Layout:
    """The control word of each value the serial kernel saves (scalars; a local array's extents)."""

    def __init__(self, first: int) -> None:
        self.words: dict[tuple[Value, int], int] = {}
        self.next = first
        self.recording: set[tuple[Value, int]] | None = None
        """The words `word` was asked for since recording started (a set), or None: what a loop kernel
        reads, which its launch must save (`opencl_serial.SerialRenderer.check_launch_reads`)."""

    def add(self, value: Value, part: int = -1) -> None:
        self.words[(value, part)] = self.next
        self.next += 1

    def word(self, value: Value, part: int = -1) -> str:
        if self.recording is not None:
            self.recording.add((value, part))
        return f"ctl[{self.words[(value, part)]}]"

    def load(self, value: Value) -> str:
        return load_word(value.type, self.word(value))


# --- the entry's parameters ----------------------------------------------------------------------------


def kernel_params(lang: OpenCLRenderer, entry: Function) -> list[str]:
    """A kernel's parameters for the entry's arguments: `__global T* p<i>` plus extents, scalars by value
    (a boolean as `uchar`)."""
    params: list[str] = []
    for arg in entry.args:
        if isinstance(arg.type, ArrayType):
            params.append(f"{lang.pointer(arg.type)} restrict p{arg.index}")  # distinct: checked at the call
            params += [f"long p{arg.index}_d{k}" for k in range(arg.type.rank)]
        else:
            params.append(f"{'uchar' if arg.type.is_bool else lang.scalar(arg.type)} p{arg.index}")  # type: ignore
    return params


def argument_declarations(lang: OpenCLRenderer, entry: Function) -> list[str]:
    """The entry's arguments as the variables `a<i>` that function code uses, from the kernel's `p<i>`."""
    lines: list[str] = []
    for arg in entry.args:
        i = arg.index
        if isinstance(arg.type, ArrayType):
            lines.append(f"  {lang.pointer(arg.type)} a{i} = p{i};")
            lines += [f"  long a{i}_d{k} = p{i}_d{k};" for k in range(arg.type.rank)]
        elif arg.type.is_bool:  # type: ignore[union-attr]
            lines.append(f"  bool a{i} = (p{i} != 0);")
        else:
            lines.append(f"  {lang.scalar(arg.type)} a{i} = p{i};")
    return lines


def argument_values(entry: Function) -> list[str]:
    """The `a<i>` variables (and extents) in parameter order, for a call."""
    values: list[str] = []
    for arg in entry.args:
        values.append(f"a{arg.index}")
        if isinstance(arg.type, ArrayType):
            values += [f"a{arg.index}_d{k}" for k in range(arg.type.rank)]
    return values


def function_params(lang: OpenCLRenderer, entry: Function) -> list[str]:
    params: list[str] = []
    for arg in entry.args:
        if isinstance(arg.type, ArrayType):
            params.append(f"{lang.pointer(arg.type)} restrict a{arg.index}")
            params += [f"long a{arg.index}_d{k}" for k in range(arg.type.rank)]
        else:
            params.append(f"{lang.scalar(arg.type)} a{arg.index}")
    return params


def identity(lang: OpenCLRenderer, ty: ScalarType) -> str:
    """The neutral element of the sum: -0.0 (exact: x + -0.0 == x), or 0."""
    return lang.float_literal(-0.0, ty) if ty.is_float else lang.constant(Constant(ty, 0))


def wrapping_add(lang: OpenCLRenderer, ty: ScalarType, a: str, b: str) -> str:
    if ty.is_float:
        return f"({a} + {b})"
    u = lang.unsigned_types[str(ty)]
    return f"({lang.scalar(ty)})(({u}){a} + ({u}){b})"


def atomic_add(lang: OpenCLRenderer, ty: ScalarType, pointer: str, value: str) -> str:
    return f"iz_atomic_add_{lang.storage(ty)}({pointer}, {value});"
