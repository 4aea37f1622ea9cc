"""What the GPU conformance run (`ISOZYME_OPENCL_DEVICE=nvidia python -m pytest -m opencl`, README) changes in
the OpenCL tests: on a GPU every OpenCL derivative is called `REPEATS` times (a race shows as a result that
changes from call to call) and the conformance tests use the problems' real sizes; on a CPU device (PoCL in
CI, where work items run almost in order and a race stays hidden whatever the count) once, at small sizes.

`ISOZYME_CONFORMANCE_REPEATS=N` and `ISOZYME_CONFORMANCE_SIZES=real|small` override the choice.
"""

from __future__ import annotations

import functools
import os

import pytest


@functools.cache
def on_gpu() -> bool:
    """Is the OpenCL device that the tests use (`ISOZYME_OPENCL_DEVICE`) a GPU? False without OpenCL."""
    try:
        from isozyme.runtime.opencl_device import device
        return device().is_gpu
    except Exception:  # no pyopencl, no platform: the OpenCL tests skip or fail on their own
        return False


def repeats() -> int:
    """How many times the OpenCL tests call each derivative (module docstring)."""
    given = os.environ.get("ISOZYME_CONFORMANCE_REPEATS")
    return int(given) if given else 20 if on_gpu() else 1


def real_sizes() -> bool:
    """Do the conformance tests use the real sizes (ADBench's, 100k work items)?"""
    given = os.environ.get("ISOZYME_CONFORMANCE_SIZES")
    return given == "real" if given else on_gpu()


def opencl_missing() -> str | None:
    """Why the OpenCL backend cannot run here, or None."""
    try:
        import pyopencl  # noqa: F401
    except ImportError:
        return "the opencl backend needs pyopencl"
    from isozyme.runtime.opencl_device import OpenCLUnavailable, device
    try:
        device()
    except OpenCLUnavailable as error:  # pragma: no cover - depends on the machine
        return f"no OpenCL device: {error}"
    return None


OPENCL_MISSING = opencl_missing()
needs_opencl = pytest.mark.skipif(OPENCL_MISSING is not None, reason=OPENCL_MISSING or "")
"""Marks a test that needs a working OpenCL device (it says why it skipped)."""
