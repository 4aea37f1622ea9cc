"""`fastmath=("afn",)`: the C library's math functions through glibc's vector versions (libmvec), which the
loop vectorizer calls on 2, 4 or 8 values at once (`codegen/llvm_vector_math.py`).

Every function's results stay within a few ulp of Python's `math` (in f64 and f32), gradients through them
match finite differences, the vector versions are called only under "afn" (never in the IEEE-strict or
"reassoc" build), and compiled code that calls them loads in a process that never compiled anything (the
shared library names libmvec).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f32, f64
from isozyme.codegen.llvm_vector_math import approximate_functions, vector_variants


def every_function(out: Array[f64, 2], x: Array[f64], y: Array[f64]):
    for i in range(x.shape[0]):
        out[0, i] = iz.exp(x[i])
        out[1, i] = iz.log(y[i])
        out[2, i] = iz.log1p(x[i])
        out[3, i] = iz.expm1(x[i])
        out[4, i] = iz.sin(x[i])
        out[5, i] = iz.cos(x[i])
        out[6, i] = iz.tan(x[i])
        out[7, i] = iz.tanh(x[i])
        out[8, i] = iz.sinh(x[i])
        out[9, i] = iz.cosh(x[i])
        out[10, i] = iz.asin(x[i])
        out[11, i] = iz.acos(x[i])
        out[12, i] = iz.atan(x[i])
        out[13, i] = iz.atan2(x[i], y[i])
        out[14, i] = iz.erf(x[i])
        out[15, i] = iz.pow(y[i], x[i])


REFERENCE = (lambda x, y: math.exp(x), lambda x, y: math.log(y), lambda x, y: math.log1p(x),
             lambda x, y: math.expm1(x), lambda x, y: math.sin(x), lambda x, y: math.cos(x),
             lambda x, y: math.tan(x), lambda x, y: math.tanh(x), lambda x, y: math.sinh(x),
             lambda x, y: math.cosh(x), lambda x, y: math.asin(x), lambda x, y: math.acos(x),
             lambda x, y: math.atan(x), lambda x, y: math.atan2(x, y), lambda x, y: math.erf(x),
             lambda x, y: math.pow(y, x))
"""`every_function`'s rows as Python computes them."""


def every_function_f32(out: Array[f32, 2], x: Array[f32]):
    for i in range(x.shape[0]):
        out[0, i] = iz.exp(x[i])
        out[1, i] = iz.erf(x[i])
        out[2, i] = iz.sin(x[i])


approximate = iz.kernel(fastmath=("afn",))(every_function)
strict = iz.kernel(every_function)
has_vector_exp = bool(vector_variants("exp", 1))
needs_libmvec = pytest.mark.skipif(not has_vector_exp, reason="no glibc libmvec with vector exp on this host")


def inputs(n: int = 1003) -> tuple[np.ndarray, np.ndarray]:
    """x in (-0.95, 0.95) (every function's domain; odd n: the vector loops' remainders run too), y > 0."""
    x = np.linspace(-0.95, 0.95, n)
    return x, 0.25 + np.abs(x) * 3.0


def reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.array([[f(a, b) for a, b in zip(x, y)] for f in REFERENCE])


def calls(code: str) -> set[str]:
    return set(re.findall(r"call [^@]*@\"?([\w.]+)", code))


def test_approximate_functions_are_those_python_computes_within_a_few_ulp() -> None:
    x, y = inputs()
    out = np.zeros((len(REFERENCE), len(x)))
    approximate(out, x, y)
    expected = reference(x, y)
    scale = np.maximum(np.abs(expected), 1e-300)
    assert np.max(np.abs(out - expected) / scale) < 8 * np.finfo(np.float64).eps
    strict_out = np.zeros_like(out)
    strict(strict_out, x, y)
    np.testing.assert_array_equal(strict_out, expected)  # the strict build calls libm: Python's results


def test_f32_calls_the_double_functions_and_rounds() -> None:
    x = np.linspace(-3.0, 3.0, 517).astype(np.float32)
    out = np.zeros((3, len(x)), np.float32)
    iz.kernel(fastmath=("afn",))(every_function_f32)(out, x)
    expected = np.array([[f(float(v)) for v in x] for f in (math.exp, math.erf, math.sin)])
    np.testing.assert_allclose(out, expected, rtol=2 * np.finfo(np.float32).eps, atol=1e-30)


@needs_libmvec
def test_only_afn_code_calls_the_vector_versions() -> None:
    vectorized = calls(iz.show_ir(approximate, stage="llvm-opt"))
    lanes = {symbol for lanes, symbol in vector_variants("exp", 1)}
    assert vectorized & lanes, sorted(vectorized)
    assert any(name.endswith("_erf") and name.startswith("_ZGV") for name in vectorized)
    assert any(name.endswith("_pow") and name.startswith("_ZGV") for name in vectorized)  # two operands
    gradient = calls(iz.show_ir(approximate, stage="llvm-opt", activity=("dup", "dup", "dup")))
    assert any(name.startswith("_ZGV") for name in gradient)
    for options in ((), ("reassoc", "contract")):
        kernel = iz.kernel(fastmath=options)(every_function)
        assert not any(name.startswith("_ZGV") for name in calls(iz.show_ir(kernel, stage="llvm-opt")))
    assert approximate_functions(("fast",)) and not approximate_functions(("reassoc", "nsz"))


def softplus_sum(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(x.shape[0]):
        s += iz.log(1.0 + iz.exp(x[i])) * iz.erf(0.5 * x[i])
    return s


def test_gradients_through_approximate_functions_match_finite_differences() -> None:
    x = np.random.default_rng(3).standard_normal(37)
    fast = iz.kernel(fastmath=("afn", "reassoc"))(softplus_sum)
    iz.testing.gradcheck(fast, x, argnums=(0,), show_summary=False)
    np.testing.assert_allclose(iz.grad(fast)(x), iz.grad(iz.kernel(softplus_sum))(x), rtol=1e-13, atol=1e-15)


@needs_libmvec
def test_cached_vector_code_loads_in_a_fresh_process(tmp_path) -> None:
    """The library names libmvec, so a process that loads it from the disk cache (and never compiled,
    so never loaded libmvec itself) resolves the vector functions."""
    program = textwrap.dedent("""
        import math, numpy as np, isozyme as iz
        from isozyme import Array, f64
        from isozyme.runtime import disk_cache

        @iz.kernel(fastmath=("afn",))
        def exps(out: Array[f64], x: Array[f64]):
            for i in range(x.shape[0]):
                out[i] = iz.exp(x[i]) + iz.erf(x[i])

        x = np.linspace(-2.0, 2.0, 101); out = np.zeros_like(x)
        exps(out, x)
        assert np.allclose(out, [math.exp(v) + math.erf(v) for v in x], rtol=1e-14, atol=0)
        print(sorted(k for k, v in disk_cache.stats.items() if v and k in ("hits", "misses", "library_loads")))
    """)
    (tmp_path / "program.py").write_text(program)
    env = {**os.environ, "ISOZYME_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, str(tmp_path / "program.py")], capture_output=True, text=True, env=env,
                           timeout=120) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert "'misses'" in runs[0].stdout, runs[0].stdout
    assert runs[1].stdout.strip() == "['hits', 'library_loads']", runs[1].stdout


def exp_erf(out: Array[f64], x: Array[f64]):
    for i in range(x.shape[0]):
        out[i] = iz.exp(x[i]) - iz.erf(x[i])


@needs_libmvec
def test_vector_code_loads_through_mcjit_without_a_linker(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Where no shared library can be linked, the JIT engine resolves the vector functions itself."""
    from isozyme.runtime import disk_cache, shared_library

    monkeypatch.setenv("ISOZYME_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(shared_library, "LINKERS", (("isozyme-no-such-linker", "-shared"),))
    before = disk_cache.stats["object_loads"]
    x = np.linspace(-2.0, 2.0, 101)
    out = np.zeros_like(x)
    kernel = iz.kernel(fastmath=("afn",))(exp_erf)
    kernel(out, x)
    assert disk_cache.stats["object_loads"] == before + 1
    assert any(name.startswith("_ZGV") for name in calls(iz.show_ir(kernel, stage="llvm-opt")))
    np.testing.assert_allclose(out, [math.exp(v) - math.erf(v) for v in x], rtol=1e-14, atol=1e-15)
