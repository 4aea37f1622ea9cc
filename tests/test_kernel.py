"""The kernel object: lazy compilation, the undecorated function, argument checks naming the parameter,
run-time errors with the kernel's source line, the Python side of the intrinsics, ISOZYME_PRINT_IR."""

from __future__ import annotations

import math

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f32, f64, i32, i64

LIMIT = 2.0


@iz.kernel
def axpy(y: Array[f64], a: f64, x: Array[f64], n: i64) -> f64:
    """y += a * x; returns the new y[0] (or 0 for empty arrays)."""
    for i in range(n):
        y[i] += a * x[i]
    return y[0] if n > 0 else 0.0


@iz.kernel
def clipped(x: Array[f64]) -> f64:
    return min(x[0], LIMIT)


@iz.kernel(boundscheck=True)
def at(x: Array[f64], i: i64) -> f64:
    return x[i]


@iz.kernel
def positive(x: f64) -> f64:
    assert x > 0, "x must be positive"
    return x


def test_kernel_keeps_the_python_function() -> None:
    assert axpy.py_func.__name__ == "axpy" and axpy.__name__ == "axpy"
    assert axpy.__doc__ == axpy.py_func.__doc__
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=7), rng.normal(size=7)
    y_kernel, y_python = y.copy(), y.copy()
    assert axpy(y_kernel, 0.5, x, 7) == axpy.py_func(y_python, 0.5, x, 7)
    np.testing.assert_array_equal(y_kernel, y_python)


def test_compiles_once_per_backend_and_pipeline() -> None:
    assert axpy.compile() is axpy.compile()
    assert axpy.compile(opt="O0") is axpy.compile(backend="llvm", opt="O0")
    assert axpy.compile(opt="O0") is not axpy.compile(backend="interp", opt="O0")


def test_keyword_arguments_and_zero_length_arrays() -> None:
    empty = np.zeros(0)
    assert axpy(y=empty, a=1.0, x=np.zeros(0), n=0) == 0.0


@pytest.mark.parametrize(("args", "error", "message"), [
    ((np.zeros(3, np.float32), 1.0, np.zeros(3), 3), TypeError, "parameter 'y' of kernel 'axpy' must have dtype"),
    ((np.zeros((3, 1)), 1.0, np.zeros(3), 3), TypeError, "parameter 'y' of kernel 'axpy' must be a 1-D array, got 2-D"),
    ((np.zeros(6)[::2], 1.0, np.zeros(3), 3), ValueError, "parameter 'y' of kernel 'axpy' must be C-contiguous"),
    (([0.0, 1.0], 1.0, np.zeros(2), 2), TypeError, "parameter 'y' of kernel 'axpy' must be a 1-D float64 array"),
    ((np.zeros(3), "1", np.zeros(3), 3), TypeError, "parameter 'a' of kernel 'axpy' must be a f64 scalar"),
    ((np.zeros(3), 1.0, np.zeros(3), 3.0), TypeError, "'n' of kernel 'axpy' must be a i64 scalar, got float"),
    ((np.zeros(3), 1.0, np.zeros(3), 1 << 70), OverflowError, "parameter 'n' of kernel 'axpy'"),
    ((np.zeros(3), 1.0, np.zeros(3)), TypeError, "axpy() missing 1 required positional argument: 'n'"),
])
def test_bad_arguments_name_the_parameter(args: tuple, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        axpy(*args)
    assert message in str(info.value)


def test_overlapping_arrays_are_rejected() -> None:
    buffer = np.zeros(8)
    with pytest.raises(ValueError, match="parameters 'y' and 'x' of kernel 'axpy' share memory"):
        axpy(buffer[:5], 1.0, buffer[3:], 5)
    axpy(buffer[:4], 1.0, buffer[4:], 4)  # adjacent, not overlapping: fine


def test_out_of_bounds_is_an_index_error_with_the_source_line() -> None:
    with pytest.raises(IndexError, match=r"test_kernel\.py:\d+"):
        at(np.zeros(3), 3)
    with pytest.raises(IndexError):
        at(np.zeros(3), -1)  # run-time negative indices are out of bounds (constant ones count from the end)


def test_assert_raises_assertion_error_with_its_message() -> None:
    assert positive(2.0) == 2.0
    with pytest.raises(AssertionError, match="x must be positive"):
        positive(-1.0)


def test_module_constants_are_frozen_at_compile_time() -> None:
    global LIMIT
    assert clipped(np.array([5.0])) == 2.0
    LIMIT = 3.0
    try:
        assert clipped(np.array([5.0])) == 2.0  # compiled with LIMIT = 2.0
        assert clipped.py_func(np.array([5.0])) == 3.0
    finally:
        LIMIT = 2.0


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        iz.kernel(backend="cuda")(lambda: None)


def test_show_ir_arguments() -> None:
    assert iz.show_ir(axpy).startswith("func @axpy(%y: f64[?], %a: f64, %x: f64[?], %n: i64) -> f64 {")
    with pytest.raises(ValueError, match="unknown IR stage 'llvm-ir'"):
        iz.show_ir(axpy, stage="llvm-ir")
    with pytest.raises(TypeError, match="needs an @iz.kernel"):
        iz.show_ir(axpy.py_func)


def test_print_ir_at_compile_time(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    @iz.kernel
    def twice(x: f64) -> f64:
        return x + x

    monkeypatch.setenv("ISOZYME_PRINT_IR", "ssa")
    assert twice(1.5) == 3.0
    assert "func @twice(%x: f64) -> f64 {" in capsys.readouterr().err


def test_a_kernel_without_source_is_a_compile_error() -> None:
    namespace: dict = {"iz": iz, "f64": f64}
    exec("@iz.kernel\ndef nosource(x: f64) -> f64:\n    return x\n", namespace)
    with pytest.raises(iz.CompileError, match="cannot read the source of kernel 'nosource'"):
        namespace["nosource"](1.0)


def test_intrinsics_in_plain_python_follow_the_kernel_semantics() -> None:
    assert math.isnan(iz.sqrt(-1.0)) and iz.log(0.0) == -math.inf
    assert iz.floor(2.5) == 2.0 and isinstance(iz.floor(2.5), float)
    assert iz.atan2(1.0, 1.0) == math.atan2(1.0, 1.0)
    assert list(iz.prange(1, 7, 2)) == [1, 3, 5]
    assert iz.zeros((2, 3), i32).dtype == np.int32 and iz.zeros(4).dtype == np.float64
    assert iz.empty(3, f32).dtype == np.float32
    assert f32(0.1) == float(np.float32(0.1)) and i64(2.9) == 2 and i32(1 << 31) == -(1 << 31)
    with pytest.raises(TypeError, match="unsupported dtype"):
        iz.zeros(3, complex)


def test_annotation_types() -> None:
    assert repr(Array[f64]) == "Array[f64]" and repr(Array[i32, 3]) == "Array[i32, 3]"
    for bad in ((f64, 5), (float, 1), (f64, 1, 2)):
        with pytest.raises(TypeError):
            Array[bad]
