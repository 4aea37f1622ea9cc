"""Test-session setup: compiled code goes to a fresh disk cache, never to the user's `~/.cache/isozyme`; the
hypothesis profiles.

Tests that study the cache itself point `ISOZYME_CACHE_DIR` at their own directories.

Hypothesis profiles (`--hypothesis-profile=NAME`):
- "ci", the default of every run: derandomized (the same examples on every run, CI is reproducible), no
  deadline (the first example pays for compiling), no example database, no `explain` phase (its line report
  is noise for generated code), and the health checks that slow generated programs trip suppressed.
  `max_examples` stays hypothesis' 100: tests that fix their own count keep it, the fuzz tests
  (`test_gradient_fuzz.py`) take shares of it.
- "long": 10 times the examples, randomized, with hypothesis' example database (.hypothesis/, so a failure
  replays on the next run), for bug hunts: `python -m pytest -m fuzz --hypothesis-profile=long`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

_QUIET = {
    "deadline": None,
    "phases": (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
}
settings.register_profile("ci", max_examples=100, derandomize=True, database=None, **_QUIET)
settings.register_profile("long", max_examples=1000, derandomize=False, **_QUIET)
settings.load_profile("ci")


def pytest_configure(config: object) -> None:
    os.environ["ISOZYME_CACHE_DIR"] = tempfile.mkdtemp(prefix="isozyme-test-cache-")


OPENCL_MODULES = frozenset({"test_device_arrays.py", "test_ndrange.py"})
"""Test modules about the OpenCL backend besides those named `*opencl*`: every test in them is marked `opencl`."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `opencl` every test that runs OpenCL code: the tests of the modules named `*opencl*` and of
    `OPENCL_MODULES`, and every test parametrized with the opencl backend (its id names it: `post-opencl`,
    `[opencl]`). `python -m pytest -m opencl` with `ISOZYME_OPENCL_DEVICE=<device>` is the GPU conformance
    run (README, docs/parallel.md)."""
    for item in items:
        module = Path(str(item.fspath)).name
        if "opencl" in module or module in OPENCL_MODULES or "opencl" in item.name.lower():
            item.add_marker(pytest.mark.opencl)
