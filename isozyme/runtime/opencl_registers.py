"""Chained launches on NVIDIA's OpenCL at the registers of unchained ones: `.maxnreg` through the program's PTX.

    program = build_chained(cl, where, source, options)   # when `chained(where)`, CompilerWarnings ignored

A chained build (`opencl_device.chained`) puts code after each loop kernel's grid-stride loop: the fence,
the ticket and the call of the serial kernel's continuation (`codegen/opencl_loop_kernels.py`). ptxas then
gives the loop kernel more registers, and the loop runs with fewer warps per SM: in the gradient of
`benchmarks/tuned/gmm_gpu_kernels.gmm_pairs_qmu` (H200, d=64) the reverse pairs loop took 90 registers and 1.39 ms
against 64 and 0.87 unchained. It is ptxas's choice, not the code's need: one conditional store after the
loop was enough to take that kernel from 64 registers to 89, with the PTX otherwise the same
(`benchmarks/README.md`). So the chained program is built a second time from its own PTX
(`program_info.BINARIES`), each loop kernel's entry given `.maxnreg` (PTX's per-kernel register limit) at
the count ptxas chose for it in an unchained build of the same source, read from that build's log
(`-cl-nv-verbose`). ptxas spills what does not fit, where it chooses: the reverse pairs loop above (80 bytes
spilled in a probe build of the same PTX) took 0.98 ms (H200, one run, every gradient checked), and the
whole call 1.955-1.963 ms against 1.854-1.890 unchained (2.37-2.39 chained as built, in other runs); at
d=10, 0.345-0.348 ms against 0.558-0.574 unchained.

The counts come from a build of the source plus an empty kernel whose name no other build has: NVIDIA's
driver keeps the binaries of what it built (its compute cache), a comment in the source does not make a
build new to it, and a build it answers from there runs no ptxas and logs no registers. So a probe of the
plain source held nothing in every process after the first, and one of the source plus a unique comment held
nothing where an earlier process had probed the same program (with isozyme's disk cache off, or another
cache directory, as `benchmarks/gmm_gpu.py`'s cold compiles have): on an H200 (2026-11-29), after a verbose
unchained build of the GMM gradient, the comment's probe named no kernel and the new one all eleven. What a
hold is worth there (d=64, each process with the driver's cache off, so that every probe ran ptxas; the
continuations of a build since reverted): 1.80 ms a call held, 2.12 unheld, 1.73 unchained. The counts are
then kept in isozyme's disk cache (`disk_cache.py`), by device, driver, options and source, so that build is
made once. The cost: two more builds by the driver on a chained program's first build in a process (that
one, where the disk cache has no counts, and the one from PTX), chained builds only. The probe needs
nothing from the chained build, so it runs in a second thread beside it (pyopencl's `build` releases the
GIL while the driver compiles): the build from PTX waits for both. Where the log names no loop kernel's
registers, or the PTX no entry (another driver's output), the program stays as built.

The functions here build without catching the drivers' `CompilerWarning`s (notes on generated code):
their caller does (`opencl_backend.build`), around the threads' builds too, as `warnings.catch_warnings`
is not safe to enter from two threads at once."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from isozyme.codegen.opencl_control import CHAIN_MACRO
from isozyme.runtime import disk_cache
from isozyme.runtime.disk_cache import sha256
from isozyme.runtime.opencl_device import Device

LOOP_KERNEL = re.compile(r"iz_par\d+")
_FUNCTION = re.compile(r"(?:Compiling entry function '(\w+)'|Function properties for (\w+))")
_USED = re.compile(r"Used (\d+) registers")
_ENTRY = re.compile(r"(\.entry\s+(\w+)\s*\([^)]*\)[^{;]*?)(\{)")


def ptxas_registers(log: str) -> dict[str, int]:
    """The registers of each function ptxas's verbose log (`-cl-nv-verbose`) reports, by name."""
    registers: dict[str, int] = {}
    name = None
    for line in log.splitlines():
        found = _FUNCTION.search(line)
        if found:
            name = found.group(1) or found.group(2)
            continue
        used = _USED.search(line)
        if used and name is not None:
            registers[name] = int(used.group(1))
    return registers


def with_maxnreg(ptx: str, registers: dict[str, int]) -> tuple[str, int]:
    """`ptx` with `.maxnreg` before the body of each entry `registers` names and that has no limit yet, and
    how many entries got one."""
    count = 0

    def limit(entry: re.Match[str]) -> str:
        nonlocal count
        head, name = entry.group(1), entry.group(2)
        if name not in registers or ".maxnreg" in head:
            return entry.group(0)
        count += 1
        return f"{head.rstrip()}\n.maxnreg {registers[name]}\n{entry.group(3)}"

    return _ENTRY.sub(limit, ptx), count


def unchained_registers(cl: Any, where: Device, source: str, options: str) -> dict[str, int]:
    """The registers of each loop kernel of `source` built without `IZ_CHAIN` (the rest of `options`): from
    the disk cache, else from ptxas's log of a build that the driver's cache cannot answer (module
    docstring), then kept in the disk cache when the log names any."""
    unchained = options.replace(f" -D {CHAIN_MACRO}", "") + " -cl-nv-verbose"
    device = where.context.devices[0]
    what = "loop kernel registers"
    key = sha256("\n".join([what, device.name, device.driver_version, unchained, source]).encode()).hexdigest()
    entry = disk_cache.load(key, what)
    if entry is not None:
        try:
            return {str(name): int(count) for name, count in entry.metadata["registers"].items()}  # type: ignore
        except (KeyError, AttributeError, TypeError, ValueError) as error:
            disk_cache.event("corrupt", f"{what} ({error}); building again")
    probe = f"{source}\n__kernel void iz_registers_{os.urandom(8).hex()}(void) {{}}  // a PTX no build had\n"
    log = cl.Program(where.context, probe).build(options=unchained).get_build_info(device, cl.program_build_info.LOG)
    registers = {name: count for name, count in ptxas_registers(log).items() if LOOP_KERNEL.fullmatch(name)}
    if registers:
        disk_cache.store(key, {"registers": registers}, b"", what)
    return registers


def build_chained(cl: Any, where: Device, source: str, options: str) -> Any:
    """The chained build of `source` with `options`, its loop kernels held at the registers of an unchained
    build (`hold_registers`), whose probe (`unchained_registers`) runs in a second thread beside it."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="isozyme-registers") as pool:
        registers = pool.submit(unchained_registers, cl, where, source, options)
        program = cl.Program(where.context, source).build(options=options)
        return hold_registers(cl, where, program, registers.result())


def hold_registers(cl: Any, where: Device, program: Any, registers: dict[str, int]) -> Any:
    """`program`, a chained build, built again from its PTX with each loop kernel named in `registers` held
    at that count (module docstring); `program` itself where the driver's outputs give nothing to go on."""
    try:
        ptx = program.get_info(cl.program_info.BINARIES)[0].decode()
    except UnicodeDecodeError:  # not PTX text
        return program
    held, count = with_maxnreg(ptx, registers)
    if not count:
        return program
    return cl.Program(where.context, [where.context.devices[0]], [held.encode()]).build()
