"""The OpenCL program of a kernel: a serial kernel that yields to the host, and one NDRange kernel per
parallel loop (`parallel_loops.py`).

    program = emit_opencl(module, module["heat"], CodegenOptions(), writable=frozenset({1}))
    program.source          # OpenCL C: helpers, the module's other functions, the loop bodies, the kernels
    program.serial          # "iz_serial"
    program.loops[k].name   # "iz_par<k>": parallel loop k, one work item per iteration

Execution (the host's loop is `runtime/opencl_backend.py`). The host runs `iz_serial` as one work item. It
runs the entry function until the function returns or needs the host; then it writes a request into the
control buffer, saves every variable there too, and returns. The requests:

  - LAUNCH k, trip: run `iz_par<k>` over `trip` work items, then resume. The serial kernel resumes at the
    loop's header with the induction variables at their final values and each reduction's sum added,
    takes the exit branch, and goes on. So serial loops around `prange` loops (time stepping) are driven
    by the host, one launch per step, and scalars cross regions in the control buffer;
  - ALLOC site, count, keep: a local array of the entry function lives in a global buffer per `alloc`
    (its site), as large as the largest run asked for; the host (re)allocates and fills it (nan, the
    integer minimum, True or zero: the interpreter's fill; not when `keep` is 1) and resumes. Extents may
    be run-time values. The serial kernel asks only when the site's buffer (its capacity is in the
    control buffer) is too small or a large zeroed array needs clearing; otherwise it goes on with the
    buffer as it is (clearing a small zeroed array itself), so a repeated call makes no round trip for
    its local arrays (`opencl_serial.SerialRenderer.request_alloc`). A parallel loop's scratch arrays (a
    copy per work item) are sites too. After arena placement (`optimize/memory_reuse.py`) most local
    arrays are views: pointers into the arena's site at an offset, recomputed on every resume and passed
    to loop kernels as the site plus the offset;
  - GROW site, new, old: the host gives the site a buffer of `new` elements holding the first `old`;
  - CLEAR site, start, bytes: the host zeroes those bytes of the site's buffer (a zeroed view into an arena
    larger than the serial kernel clears itself, `opencl_serial.SERIAL_CLEAR_LIMIT`);
  - DONE: the return value is in the header.

Every LAUNCH and CLEAR takes the next request number (`SEQUENCE`). A replayed call (`runtime/opencl_runner.py`)
enqueues the previous call's launches and clears without waiting for the serial kernel: a loop kernel run
with `trip` -1 and a request number runs the loop only if that request is pending and is its launch (it
takes the trip count from the request; otherwise its work items take no iteration), and `iz_clear` clears
only if its request is pending; each writes the number it served into `SERVED`. A resume of the serial
kernel that the host did not order (`served` 0) goes on only if its pending LAUNCH or CLEAR is served, so a
replay whose steps differ from the call's requests stops at the first difference and leaves the request
for the host.

Chained launches (NVIDIA's OpenCL unless `ISOZYME_OPENCL_CHAIN=0`: `runtime/opencl_device.chained`): a
replayed loop kernel launched with `trip` -2 that served its request has each work group's first work
item fence the group's stores at the GPU's scope after a barrier, and the last work group to finish (a
ticket per group) runs the serial kernel's code from the resume after that launch to its next request
(`iz_serial_run<k>`, built only with `IZ_CHAIN`), so the replay enqueues no resume after a launch.

A yield saves the variables live after it, a resume restores them and jumps to the point it stopped at
(`RESTORE`, then a `switch`; `serial_liveness.py`). A
failing check anywhere writes the error record (the first work item claims it) and stops; the host
raises the site's exception. Called functions are plain C functions; local arrays in them and in parallel
loops are private arrays of constant extents (a parallel loop's larger ones are scratch slices), and a call
that passes a private array calls the callee's version taking a `__private` pointer there
(`address_spaces.py`, `render_called_functions`).

The program's parts: the control buffer and the requests (`opencl_control.py`), the serial kernel
(`opencl_serial.py`), the loop kernels (`opencl_loop_kernels.py`), and the functions they call, rendered
by `opencl_function.py` through the table of `opencl_lowerings.py` in the language of `opencl_language.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from isozyme.codegen.abi import CodegenError, CodegenOptions
from isozyme.codegen.error_sites import ErrorSite
from isozyme.codegen.opencl_control import (
    ARG0,
    ARG1,
    ARG2,
    CHAIN_MACRO,
    CLEAR,
    GROUP_SIZE,
    KIND,
    SEQUENCE,
    SERVED,
    AllocSite,
)
from isozyme.codegen.opencl_function import FunctionRenderer
from isozyme.codegen.opencl_language import OpenCLRenderer
from isozyme.codegen.opencl_loop_kernels import BodyRenderer
from isozyme.codegen.opencl_lowerings import LOWERINGS
from isozyme.codegen.opencl_serial import SerialRenderer
from isozyme.codegen.out_of_ssa import OutOfSSA, out_of_ssa
from isozyme.codegen.parallel_loops import plan_parallel_loops
from isozyme.ssa.ir import Function, Module


@dataclass
class LoopKernel:
    name: str
    location: str
    accumulators: int
    """How many sums its work groups reduce (the work-group size is then the program's `group_size`)."""
    atomics: bool = False
    """Does an iteration make atomic adds (into elements other work items may add into)?"""


@dataclass
class OpenCLProgram:
    """A module's OpenCL C source and what the runtime needs to run it."""

    source: str
    serial: str
    """The serial kernel's name."""
    loops: list[LoopKernel]
    """The NDRange kernels, by loop number."""
    allocs: list[AllocSite]
    """The entry function's local arrays, by site number."""
    control_words: int
    sites: list[ErrorSite] = field(default_factory=list)
    """The error sites, numbered from 1 in list order."""
    serial_loops: list[str] = field(default_factory=list)
    """Why each `prange` loop that runs serially does (`parallel_loops.py`)."""
    uses_heap: bool = False
    """Does a called function allocate local arrays on the device heap (`opencl_lowerings.py`, `_heap_alloc`)?"""
    writable: frozenset[int] = frozenset()
    """The positions of the entry's array parameters that the program may write (the host copies only
    these back, and refuses read-only numpy arrays for them)."""
    capacities: int = 0
    """The control word of site 0's buffer capacity in elements (site k's follows at `capacities + k`): the
    host writes them before a call; the serial kernel asks for a site's buffer only when it is too small."""
    group_size: int = GROUP_SIZE
    """The work-group size its kernels with work-group reductions require (`reqd_work_group_size`)."""


def render_called_functions(lang: OpenCLRenderer, plans: dict[Function, OutOfSSA]) -> list[str]:
    """Every version of a called function that the calls rendered so far need (`address_spaces.py`): their
    prototypes, then their definitions. Rendering one may request others, until none is pending; a function
    that no rendered code calls is not emitted."""
    prototypes: list[str] = []
    definitions: list[str] = []
    while versions := lang.versions.drain():
        for version in versions:
            renderer = FunctionRenderer(lang, version.function, plans[version.function], LOWERINGS, version.spaces)
            prototypes.append(f"{renderer.signature()};")
            definitions += ["", *renderer.render()]
    return [*prototypes, *definitions]


CLEAR_KERNEL = "iz_clear"


def clear_kernel() -> list[str]:
    """`iz_clear`, a replayed CLEAR (module docstring): if the serial kernel's request `sequence` is to
    clear bytes of `site`, zero them (in longs when aligned) and mark the request served."""
    return [f"__kernel void {CLEAR_KERNEL}(__global uchar* target, __global long* ctl, long site, long sequence) {{",
            f"  if (ctl[{KIND}] != {CLEAR} || ctl[{ARG0}] != site || ctl[{SEQUENCE}] != sequence) return;",
            f"  long start = ctl[{ARG1}], bytes = ctl[{ARG2}];",
            "  long gid = (long)get_global_id(0), size = (long)get_global_size(0);",
            f"  if (gid == 0) ctl[{SERVED}] = sequence;",
            "  if (((start | bytes) & 7) == 0) {",
            "    __global ulong* words = (__global ulong*)(target + start);",
            "    for (long i = gid; i < bytes / 8; i += size) words[i] = 0;",
            "  } else {",
            "    for (long i = gid; i < bytes; i += size) target[start + i] = 0;",
            "  }",
            "}"]


def emit_opencl(module: Module, entry: Function, options: CodegenOptions, writable: frozenset[int],
                reduction: str = "group", group_size: int = GROUP_SIZE) -> OpenCLProgram:
    """The OpenCL program of `module` with `entry` as the kernel (module docstring). `writable` is what the
    caller's memory-effects analysis found `entry` may write (`OpenCLProgram.writable`). `reduction="atomic"`
    replaces work-group reductions by one atomic add per work item (a baseline for benchmarks).
    `group_size` (a power of two) is the work-group size of loop kernels with work-group reductions.
    Out-of-SSA and the parallel-loop rewrite change `module` in place (it stays valid SSA with the same
    semantics); the caller passes a module it owns."""
    for function in module:
        if function.return_type.is_array:
            raise CodegenError(f"@{function.name} returns an array, which compiled code cannot do")
    lang = OpenCLRenderer(options)
    plans = {fn: out_of_ssa(fn) for fn in module if fn is not entry}
    plan = out_of_ssa(entry)
    loops, serial_reasons = plan_parallel_loops(entry)
    serial = SerialRenderer(lang, entry, plan, loops, sum(len(loop.reductions) for loop in loops))
    serial_lines = serial.render()
    if group_size < 1 or group_size & (group_size - 1):
        raise CodegenError(f"the work-group size must be a power of two, not {group_size}")
    bodies = [BodyRenderer(lang, entry, plan, loop, serial, reduction, group_size) for loop in loops]
    body_lines: list[list[str]] = []
    for body in bodies:
        serial.layout.recording = set()
        body_lines.append(["", *body.render(), "", f"#ifdef {CHAIN_MACRO}", *serial.continuation(body.loop), "#endif",
                           "", *body.kernel()])
        serial.check_launch_reads(body.loop, serial.layout.recording)
    serial.layout.recording = None
    lines = [*lang.prelude_lines, *lang.helpers(), "", *render_called_functions(lang, plans)]
    for body in body_lines:
        lines += body
    lines += ["", *serial_lines, "", *clear_kernel()]
    kernels = [LoopKernel(f"iz_par{b.loop.number}", b.loop.location, len(b.accumulators), b.atomics) for b in bodies]
    return OpenCLProgram("\n".join(lines) + "\n", "iz_serial", kernels, serial.allocs, serial.layout.next,
                         lang.sites, serial_reasons, lang.uses_heap, writable, serial.capacities, group_size)
