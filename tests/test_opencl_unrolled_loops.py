"""Simple inner loops of OpenCL code as C loops under `#pragma unroll 8` (`FunctionRenderer.render_loop`).

A counted inner loop with a straight-line body, in a `prange` body or a called function, becomes
`for (;;) { ...; if (!(condition)) break; ... }` under the hint; a loop that makes atomic adds (a reverse
loop adding into a shared parameter's adjoint) and the serial kernel's loops (which it resumes into) stay
`goto`s. Results equal the llvm backend's for trip counts around the unroll factor (0 to 17, so the
compiler's remainder loop runs too), primal and gradient.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64

pytest.importorskip("pyopencl", reason="the opencl backend needs pyopencl")
from isozyme.runtime.opencl_device import OpenCLUnavailable, device  # noqa: E402

try:
    device()
except OpenCLUnavailable as error:  # pragma: no cover - depends on the machine
    pytest.skip(f"no OpenCL device: {error}", allow_module_level=True)

HINT = "#pragma unroll 8"


@iz.kernel
def triangular(out: Array[f64], L: Array[f64, 2], x: Array[f64], w: Array[f64]):
    # out[i] = sum_{j < i} L[i, j] * w[j] * x[j], one work item per row: the inner loop reads the shared w
    for i in iz.prange(x.shape[0]):
        acc = 0.0
        for j in range(i):
            acc += L[i, j] * w[j] * x[j]
        out[i] = acc


@iz.kernel
def serial_sum(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


def unrolled_loops(source: str) -> list[str]:
    """The text of each loop under the hint, up to its closing brace."""
    loops = []
    for match in re.finditer(re.escape(HINT) + r"\n  for \(;;\) \{\n", source):
        end = source.index("\n  }\n", match.end())
        loops.append(source[match.end():end])
    return loops


def functions(source: str) -> dict[str, str]:
    """Each function's text by name (a definition starts at column 0 and ends at the next `}` there)."""
    found = {}
    for match in re.finditer(r"^\S.*?\b(iz_\w+)\(.*\{$", source, re.MULTILINE):
        found[match.group(1)] = source[match.start():source.index("\n}\n", match.end())]
    return found


def test_a_simple_inner_loop_is_a_c_loop_under_the_hint() -> None:
    source = iz.show_ir(triangular, stage="opencl")
    bodies = {name: text for name, text in functions(source).items() if name.startswith("iz_body")}
    assert bodies and all(unrolled_loops(text) for text in bodies.values()), source
    assert HINT not in functions(source)["iz_serial"]


def test_the_serial_kernel_keeps_its_loops_as_gotos() -> None:
    source = iz.show_ir(serial_sum, stage="opencl")
    assert HINT not in source and "goto" in source


def test_a_reverse_loop_with_atomic_adds_is_not_unrolled() -> None:
    source = iz.show_ir(triangular, stage="opencl", activity=("dup", "const", "dup", "dup"))
    assert "iz_atomic_add" in source
    loops = unrolled_loops(source)
    assert loops and not any("atomic" in loop for loop in loops), source


@pytest.mark.parametrize("n", [0, 1, 2, 7, 8, 9, 16, 17])
def test_unrolled_loops_compute_what_llvm_computes(n: int) -> None:
    rng = np.random.default_rng(n)
    L, x, w, d_out = (rng.standard_normal((n, n)), rng.standard_normal(n), rng.standard_normal(n),
                      rng.standard_normal(n))
    results = {}
    for backend in ("llvm", "opencl"):
        out = np.zeros(n)
        triangular.compile(backend=backend).entry(out, L, x, w)
        d_x, d_w = np.zeros(n), np.zeros(n)
        iz.autodiff(triangular, iz.Duplicated(np.zeros(n), d_out.copy()), L, iz.Duplicated(x, d_x),
                    iz.Duplicated(w, d_w), backend=backend)
        results[backend] = (out, d_x, d_w)
    np.testing.assert_allclose(results["llvm"][0], [L[i, :i] @ (w[:i] * x[:i]) for i in range(n)], rtol=1e-12,
                               atol=1e-14)
    for expected, actual in zip(results["llvm"], results["opencl"]):
        np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-12)
