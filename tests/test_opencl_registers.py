"""Chained loop kernels held at the registers of unchained ones (`runtime/opencl_registers.py`): reading
ptxas's log, limiting PTX entries, and the rebuild from PTX, with a stand-in for pyopencl (the real path
needs NVIDIA's OpenCL, where launches are chained by default: the GPU conformance run covers it)."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace

import pytest

from isozyme.runtime.opencl_registers import build_chained, ptxas_registers, with_maxnreg

# an excerpt of ptxas's log for the gradient of benchmarks/tuned/gmm_gpu_kernels.gmm_pairs_qmu (H200, -cl-nv-verbose)
LOG = """\
(): Warning: Function iz_par0 is a kernel, so overriding noinline attribute. The function may be inlined when called.

ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'iz_clear' for 'sm_90a'
ptxas info    : Function properties for iz_clear
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 26 registers, used 0 barriers
ptxas info    : Compile time = 19.057 ms
ptxas info    : Compiling entry function 'iz_serial' for 'sm_90a'
ptxas info    : Function properties for iz_serial
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 127 registers, used 0 barriers
ptxas info    : Compiling entry function 'iz_par10' for 'sm_90a'
ptxas info    : Function properties for iz_par10
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers
ptxas info    : Compiling entry function 'iz_par7' for 'sm_90a'
ptxas info    : Function properties for iz_par7
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 64 registers, used 0 barriers
"""

PTX = """\
.version 8.5
.target sm_90a

.visible .entry iz_par7(
\t.param .u64 .ptr .global .align 8 iz_par7_param_0,
\t.param .u64 iz_par7_param_1
)
{
\t.reg .pred \t%p<64>;
\tret;
}

.visible .entry iz_par10(
\t.param .u64 .ptr .global .align 8 iz_par10_param_0
)
.reqntid 256, 1, 1
{
\tret;
}

.visible .entry iz_serial(
\t.param .u64 iz_serial_param_0
)
{
\tret;
}
"""


def test_ptxas_registers_reads_each_function_of_the_log():
    assert ptxas_registers(LOG) == {"iz_clear": 26, "iz_serial": 127, "iz_par10": 40, "iz_par7": 64}
    assert ptxas_registers("ptxas info    : 0 bytes gmem\n") == {}


def test_with_maxnreg_limits_the_named_entries_before_their_bodies():
    held, count = with_maxnreg(PTX, {"iz_par7": 64, "iz_par10": 40})
    assert count == 2
    assert "iz_par7_param_1\n)\n.maxnreg 64\n{\n\t.reg .pred" in held
    assert "iz_par10_param_0\n)\n.reqntid 256, 1, 1\n.maxnreg 40\n{" in held  # after the other directives
    assert "iz_serial_param_0\n)\n{" in held  # not named: as it was
    assert held.count(".maxnreg") == 2
    again, count = with_maxnreg(held, {"iz_par7": 50})
    assert (again, count) == (held, 0)  # an entry with a limit keeps it


class FakeProgram:
    """pyopencl's `Program`, as far as `build_chained` uses it: built from source or from binaries; the log
    is the class's `log`, as a build that ptxas ran gives it with `-cl-nv-verbose`. `built` lists the
    builds in the order they ended (the probe's, in its thread, may end before the chained build's)."""

    built: list[FakeProgram] = []
    log = LOG

    def __init__(self, context, *args) -> None:
        self.source = args[0] if len(args) == 1 else None
        self.binaries = args[1] if len(args) == 2 else None
        self.options = None

    def build(self, options: str = "") -> FakeProgram:
        self.options = options
        FakeProgram.built.append(self)
        return self

    def get_build_info(self, device, what) -> str:
        return self.log

    def get_info(self, what) -> list[bytes]:
        return [PTX.encode()]


def fake_pyopencl(log: str = LOG):
    FakeProgram.built = []
    return SimpleNamespace(Program=type("Program", (FakeProgram,), {"log": log}), CompilerWarning=UserWarning,
                           program_build_info=SimpleNamespace(LOG="log"),
                           program_info=SimpleNamespace(BINARIES="binaries"))


WHERE = SimpleNamespace(context=SimpleNamespace(devices=[SimpleNamespace(name="gpu", driver_version="1.0")]))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ISOZYME_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ISOZYME_CACHE", raising=False)
    return tmp_path / "cache"


def builds(source: str) -> list[FakeProgram]:
    """The builds so far from `source` (the probes' sources have `source` and then a kernel of their own)."""
    return [program for program in FakeProgram.built if program.source == source]


def probes() -> list[FakeProgram]:
    return [program for program in FakeProgram.built if program.source and "iz_registers_" in program.source]


def test_build_chained_builds_then_rebuilds_the_program_from_limited_ptx(cache_dir):
    cl = fake_pyopencl()
    options = "-cl-fp32-correctly-rounded-divide-sqrt -D IZ_CHAIN -D X"
    held = build_chained(cl, WHERE, "source", options)
    assert len(FakeProgram.built) == 3 and FakeProgram.built[-1] is held  # the rebuild waits for both builds
    [chained], [probe] = builds("source"), probes()
    assert chained.options == options
    # not a build the driver's cache answers: its PTX has a kernel no other build has
    assert re.fullmatch(r"source\n__kernel void iz_registers_[0-9a-f]{16}\(void\) \{\}.*\n", probe.source)
    assert probe.options == "-cl-fp32-correctly-rounded-divide-sqrt -D X -cl-nv-verbose"
    assert held.source is None
    ptx = held.binaries[0].decode()
    assert ".maxnreg 64" in ptx and ".maxnreg 40" in ptx and ptx.count(".maxnreg") == 2  # loop kernels only


def test_the_probe_builds_beside_the_chained_build(cache_dir):
    """The probe runs in its own thread: a chained build that takes its time has the probe's build end
    first (with the two in turn, the chained build would always end first)."""
    cl = fake_pyopencl()
    build = cl.Program.build

    def slow_chained_build(self, options: str = "") -> FakeProgram:
        if self.source == "source":
            deadline = time.monotonic() + 5.0
            while not probes() and time.monotonic() < deadline:
                time.sleep(0.01)
        return build(self, options)
    cl.Program.build = slow_chained_build
    build_chained(cl, WHERE, "source", "-D IZ_CHAIN")
    assert FakeProgram.built[0] is probes()[0] and FakeProgram.built[1] is builds("source")[0]


def test_a_failed_chained_build_raises_after_the_probe_ends(cache_dir):
    cl = fake_pyopencl()

    def failing(self, options: str = "") -> FakeProgram:
        if self.source == "source":
            raise RuntimeError("clBuildProgram failed")
        return FakeProgram.build(self, options)
    cl.Program.build = failing
    with pytest.raises(RuntimeError, match="clBuildProgram failed"):
        build_chained(cl, WHERE, "source", "-D IZ_CHAIN")
    assert len(probes()) == 1


def test_the_counts_are_built_once_and_then_read_from_the_disk_cache(cache_dir):
    """A later process finds the counts in the disk cache and builds no probe, even when the driver would
    answer every build from its own cache (no ptxas, so no registers in the log)."""
    cl = fake_pyopencl()
    build_chained(cl, WHERE, "source", "-D IZ_CHAIN")
    assert len(FakeProgram.built) == 3  # chained, probe, rebuilt
    cl = fake_pyopencl(log="")
    held = build_chained(cl, WHERE, "source", "-D IZ_CHAIN")
    assert FakeProgram.built == [builds("source")[0], held] and ".maxnreg 64" in held.binaries[0].decode()
    other = build_chained(cl, WHERE, "other source", "-D IZ_CHAIN")  # another key: a probe, no log
    assert other is builds("other source")[0] and len(probes()) == 1


def test_without_the_disk_cache_each_probe_is_a_source_the_driver_has_not_seen(monkeypatch):
    monkeypatch.setenv("ISOZYME_CACHE", "off")
    sources = []
    for _ in range(2):
        cl = fake_pyopencl()
        build_chained(cl, WHERE, "source", "-D IZ_CHAIN")
        sources.append(re.search(r"iz_registers_\w+", probes()[0].source).group(0))
    assert sources[0] != sources[1]


def test_build_chained_keeps_the_program_when_the_log_names_no_loop_kernel(cache_dir):
    cl = fake_pyopencl(log="ptxas info    : Used 127 registers, used 0 barriers\n")
    assert build_chained(cl, WHERE, "source", "-D IZ_CHAIN") is builds("source")[0]
    assert len(FakeProgram.built) == 2  # the chained build and the probe: nothing to build again
    assert not list(cache_dir.glob("*.izc"))  # nothing to keep
