"""The OpenCL device: pyopencl, imported on first use, and the device kernels run on, chosen once.

The device is the first whose platform or device name contains `ISOZYME_OPENCL_DEVICE` (case-insensitive),
by default the first CPU device (PoCL), else the first device. A missing pyopencl or device is an
`OpenCLUnavailable` error when something first needs it, never at import: this module imports nothing but
the standard library, so device arrays (`device_array.py`, which argument checking imports on every path)
and the OpenCL backend (`opencl_backend.py`) both build on it without loading pyopencl or each other.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any


class OpenCLUnavailable(RuntimeError):
    """pyopencl or a matching OpenCL device is missing."""


@dataclass
class Device:
    """A chosen device with its context and queue."""

    context: Any
    queue: Any
    name: str
    units: int
    """Compute units (streaming multiprocessors, CPU cores)."""
    is_gpu: bool
    float_atomics: bool = False
    """Has `cl_ext_float_atomics` and OpenCL C 3.0."""
    largest_buffer: int = 2**63 - 1
    """`CL_DEVICE_MAX_MEM_ALLOC_SIZE`: the most bytes of one buffer."""
    largest_group: int = 256
    """`CL_DEVICE_MAX_WORK_GROUP_SIZE`: the most work items of one group."""
    ptx: bool = False
    """NVIDIA's OpenCL, which compiles OpenCL C to PTX and accepts inline PTX (native float atomic adds)."""


def import_pyopencl() -> Any:
    """The pyopencl module, imported on first use (OpenCLUnavailable without it)."""
    try:
        import pyopencl
    except ImportError as error:
        raise OpenCLUnavailable("the opencl backend needs pyopencl (pip install pyopencl pocl-binary-distribution)") \
            from error
    return pyopencl


@functools.cache
def device(selector: str | None = None) -> Device:
    """The device that `selector` (or `ISOZYME_OPENCL_DEVICE`) names, by default the first CPU device."""
    cl = import_pyopencl()
    wanted = (selector if selector is not None else os.environ.get("ISOZYME_OPENCL_DEVICE", "")).lower()
    try:
        candidates = [(p, d) for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error as error:
        raise OpenCLUnavailable(f"no OpenCL platform: {error}") from error
    if wanted:
        chosen = [(p, d) for p, d in candidates if wanted in p.name.lower() or wanted in d.name.lower()]
    else:
        chosen = [(p, d) for p, d in candidates if d.type & cl.device_type.CPU] or candidates
    if not chosen:
        raise OpenCLUnavailable(f"no OpenCL device matches ISOZYME_OPENCL_DEVICE={wanted!r}" if wanted
                                else "no OpenCL device")
    platform, dev = chosen[0]
    context = cl.Context([dev])
    return Device(context, cl.CommandQueue(context), f"{platform.name}: {dev.name}", dev.max_compute_units,
                  bool(dev.type & cl.device_type.GPU), float_atomics=_has_float_atomics(cl, dev),
                  largest_buffer=dev.max_mem_alloc_size, largest_group=dev.max_work_group_size,
                  ptx="NVIDIA" in platform.name and bool(dev.type & cl.device_type.GPU))


def _has_float_atomics(cl: Any, dev: Any) -> bool:
    try:
        versions = [v.version for v in dev.opencl_c_all_versions]
    except (AttributeError, cl.Error):  # an OpenCL 1.2 platform
        return False
    opencl_c_3 = 3 << 22  # CL_MAKE_VERSION(3, 0, 0)
    return "cl_ext_float_atomics" in dev.extensions.split() and any(v >= opencl_c_3 for v in versions)


def chained(where: Device) -> bool:
    """Are replayed launches on `where` chained: does a replayed loop kernel's last work group run the serial
    kernel on to its next request, so that a replay enqueues no resume after a launch? On NVIDIA's OpenCL
    unless `ISOZYME_OPENCL_CHAIN` is "0"; not elsewhere (`codegen/opencl_control.CHAIN_MACRO` says why).
    On an H100 a resume is a launch of some 5 to 10 us of the GPU's time, and its enqueue some 5 us of the
    host's. A chained build's loop kernels are held at the registers ptxas gives them unchained
    (`opencl_registers.py`: as built, the reverse pairs loop of `gmm_pairs_qmu`'s gradient took 90
    registers against 64). On an H200 (2026-11-29, one run, two processes of each mode taking turns,
    medians of 15 calls, every gradient checked) `benchmarks/tuned/gmm_gpu_kernels.gmm_pairs_qmu`'s gradient
    took 0.28 to 0.38 ms chained against 0.51 to 0.59 unchained at n=1000 d=10 K=25, 1.83 to 1.89 against
    1.76 to 1.90 at d=64 K=100, and 1.82 to 1.92 against 1.69 to 1.78 at n=100k d=10 (its forward loop,
    2.5M work items in 9,766 work groups, took 0.54 ms chained against 0.41); the GPU transformer's
    training step (`benchmarks/tuned/transformer_gpu_kernels.py`) 3.23 against 3.43 ms at 2 layers and 6.12
    against 6.55 at 4. The cost: a chained program's first build takes the driver
    three builds (two where the disk cache holds its registers): the GMM gradient's first call with empty
    caches took 13.2 to 13.8 s against 2.4 to 2.6 unchained, a new process's with them filled 0.22 s
    against 0.16 to 0.20 (`benchmarks/results/gmm_gpu_h200_chained.json`)."""
    value = os.environ.get("ISOZYME_OPENCL_CHAIN", "1")
    if value not in ("0", "1"):
        raise ValueError(f"ISOZYME_OPENCL_CHAIN must be 0 or 1, not {value!r}")
    return value == "1" and where.ptx
