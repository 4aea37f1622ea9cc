"""The `llvm` backend's runtime: argument checks on the compiled fast path and its fallback, checked mode,
run-time errors identical to the interpreter's, scalar conversions at the C boundary, the IR stages, and
the disk cache observed from fresh processes (hits and corrupt entries counted, never timed)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, boolean, f32, f64, i32, i64


@iz.kernel(boundscheck=True)
def get(x: Array[f64], i: i64) -> f64:
    return x[i]


@iz.kernel(boundscheck=True)
def put(x: Array[f64], i: i64, v: f64):
    x[i] = v


@iz.kernel(boundscheck=True)
def get2(a: Array[f64, 2], i: i64, j: i64) -> f64:
    return a[i, j]


@iz.kernel
def unchecked_get(x: Array[f64], i: i64) -> f64:
    return x[i]


@iz.kernel
def scale(y: Array[f64], x: Array[f64], a: f64):
    for i in range(len(x)):
        y[i] = a * x[i]


@iz.kernel
def total(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += x[i]
    return s


def both_backends(kernel: iz.Kernel, *args: object) -> list[BaseException]:
    """The exception the kernel raises on the interpreter and on LLVM (each must raise)."""
    errors = []
    for backend in ("interp", "llvm"):
        with pytest.raises(Exception) as info:
            kernel.compile(backend=backend)(*args)
        errors.append(info.value)
    return errors


def assert_same_error(kernel: iz.Kernel, *args: object, kind: type[BaseException]) -> str:
    interpreted, compiled = both_backends(kernel, *args)
    assert type(interpreted) is kind and type(compiled) is kind
    assert str(compiled) == str(interpreted)
    return str(compiled)


# --- checked mode ------------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [3, 4, -1, -(1 << 62)])
def test_out_of_bounds_read_is_the_interpreters_index_error(index: int) -> None:
    message = assert_same_error(get, np.zeros(3), index, kind=IndexError)
    assert f"index ({index},) is out of bounds for an array of shape (3,)" in message
    assert f"test_llvm_backend.py:{get.py_func.__code__.co_firstlineno + 2}:" in message


def test_out_of_bounds_write_raises_and_writes_nothing() -> None:
    x = np.arange(3.0)
    message = assert_same_error(put, x, 3, 7.0, kind=IndexError)
    assert "store: index (3,) is out of bounds for an array of shape (3,)" in message
    np.testing.assert_array_equal(x, np.arange(3.0))
    put(x, 2, 7.0)
    assert x[2] == 7.0


@pytest.mark.parametrize(("i", "j"), [(2, 0), (0, 4), (-1, 1), (1, -1)])
def test_out_of_bounds_2d_names_both_indices_and_the_shape(i: int, j: int) -> None:
    a = np.arange(8.0).reshape(2, 4)
    message = assert_same_error(get2, a, i, j, kind=IndexError)
    assert f"index ({i}, {j}) is out of bounds for an array of shape (2, 4)" in message
    assert get2(a, 1, 3) == 7.0  # the last element: row-major indexing


def test_boundscheck_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISOZYME_BOUNDSCHECK", "1")
    with pytest.raises(IndexError, match=r"index \(5,\) is out of bounds"):
        unchecked_get.compile(backend="llvm")(np.zeros(3), 5)
    assert "index.failed" in iz.show_ir(unchecked_get, stage="llvm")
    monkeypatch.setenv("ISOZYME_BOUNDSCHECK", "0")
    assert "index.failed" not in iz.show_ir(unchecked_get, stage="llvm")  # unchecked: no compare at all


# --- run-time errors ---------------------------------------------------------------------------------


@iz.kernel
def divide(a: i64, b: i64) -> i64:
    return a // b + a % b


@iz.kernel
def truncate(x: f64) -> i64:
    return int(x)


@iz.kernel
def truncate32(x: f32) -> i32:
    return i32(x)


@iz.kernel
def shift(a: i64, b: i64) -> i64:
    return a << b


@iz.kernel
def positive(x: f64) -> f64:
    assert x > 0, "x must be positive"
    return x


@iz.kernel
def local_sum(n: i64) -> f64:
    tmp = iz.zeros(n, f64)
    s = 0.0
    for i in range(n):
        tmp[i] = i * 0.5
        s += tmp[i]
    return s + (tmp[n - 1] if n > 0 else 0.0)  # read: an unread local array would be deleted at O2


@iz.kernel
def helper_fails(x: Array[f64], k: i64) -> f64:
    scratch = iz.zeros(4, f64)
    scratch[0] = x[0]
    return scratch[0] // 1.0 + k // (k - 2)


@iz.kernel
def calls_helper(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for k in range(n):
        s += helper_fails(x, k)
    return s


@pytest.mark.parametrize(("args", "kind"), [((7, 0), ZeroDivisionError), ((-(1 << 63), -1), None), ((-7, 2), None)])
def test_integer_division_follows_python(args: tuple[int, int], kind: type[BaseException] | None) -> None:
    if kind is None:
        assert divide(*args) == divide.compile(backend="interp")(*args)
    else:
        assert "integer division or modulo by zero" in assert_same_error(divide, *args, kind=kind)


@pytest.mark.parametrize(("value", "kind"), [(math.nan, ValueError), (math.inf, OverflowError),
                                             (-math.inf, OverflowError), (9.3e18, OverflowError),
                                             (-9.3e18, OverflowError)])
def test_float_to_int_conversion_errors(value: float, kind: type[BaseException]) -> None:
    assert_same_error(truncate, value, kind=kind)
    assert_same_error(truncate32, value if abs(value) != 9.3e18 else value / 1e9, kind=kind)


def test_float_to_int_at_the_edges_of_the_range() -> None:
    for value in (-9.223372036854775808e18, 9.223372036854774784e18, -2.5, 2.5, -0.0):
        assert truncate(value) == int(value)
    for value in (-2147483648.0, 2147483520.0):  # the f32 values at the ends of the i32 range
        assert truncate32(np.float32(value)) == int(np.float32(value))


def test_shift_out_of_range_and_assert() -> None:
    assert shift(3, 4) == 48
    assert_same_error(shift, 1, 64, kind=ValueError)
    assert_same_error(shift, 1, -1, kind=ValueError)
    assert positive(2.0) == 2.0
    assert str(assert_same_error(positive, -1.0, kind=AssertionError)).endswith("x must be positive")


def test_local_arrays_and_negative_extents() -> None:
    assert local_sum(1000) == local_sum.py_func(1000)
    assert local_sum(0) == 0.0
    assert "negative extent in shape (-2,)" in assert_same_error(local_sum, -2, kind=ValueError)


def test_a_failure_inside_a_called_kernel_reaches_the_caller() -> None:
    x = np.array([2.5])
    compiled = calls_helper.compile(backend="llvm", opt="O0")  # O0: a real call, not inlined
    assert compiled(x, 2) == calls_helper.py_func(x, 2)
    with pytest.raises(ZeroDivisionError) as info:
        compiled(x, 3)
    with pytest.raises(ZeroDivisionError) as expected:
        calls_helper.compile(backend="interp", opt="O0")(x, 3)
    assert str(info.value) == str(expected.value)


# --- arguments ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "kind", "message"), [
    ((np.zeros(3, np.float32), np.zeros(3), 1.0), TypeError, "parameter 'y' of kernel 'scale' must have dtype float64"),
    ((np.zeros((3, 1)), np.zeros(3), 1.0), TypeError, "parameter 'y' of kernel 'scale' must be a 1-D array, got 2-D"),
    ((np.zeros(6)[::2], np.zeros(3), 1.0), ValueError, "parameter 'y' of kernel 'scale' must be C-contiguous"),
    ((np.zeros(3), np.zeros((2, 3)).T[0], 1.0), ValueError, "parameter 'x' of kernel 'scale' must be C-contiguous"),
    ((np.zeros(3), [1.0, 2.0], 1.0), TypeError, "parameter 'x' of kernel 'scale' must be a 1-D float64 array"),
    ((np.zeros(3), np.zeros(3), "2"), TypeError, "parameter 'a' of kernel 'scale' must be a f64 scalar"),
])
def test_bad_arguments_are_rejected_naming_the_parameter(args: tuple, kind: type, message: str) -> None:
    with pytest.raises(kind, match=message.replace("(", r"\(").replace(")", r"\)")):
        scale(*args)


def test_aliasing_arrays_are_rejected() -> None:
    buffer = np.zeros(10)
    with pytest.raises(ValueError, match="parameters 'y' and 'x' of kernel 'scale' share memory"):
        scale(buffer[:6], buffer[4:], 1.0)
    with pytest.raises(ValueError, match="share memory"):
        scale(buffer, buffer, 1.0)
    scale(buffer[:5], buffer[5:], 1.0)  # adjacent halves do not overlap
    scale(np.zeros(0), np.zeros(0), 1.0)


def test_a_read_only_array_is_fine_to_read_but_not_to_write() -> None:
    frozen = np.arange(4.0)
    frozen.flags.writeable = False
    out = np.zeros(4)
    scale(out, frozen, 2.0)
    np.testing.assert_array_equal(out, 2 * np.arange(4.0))
    with pytest.raises(ValueError, match="parameter 'y' of kernel 'scale' is read-only"):
        scale(frozen, out, 2.0)


class Tagged(np.ndarray):
    """An ndarray subclass: not the exact type the compiled fast path accepts."""


def test_arrays_the_fast_path_declines_take_the_checked_path() -> None:
    x = np.arange(5.0)
    expected = float(x.sum())
    assert total(x.view(Tagged)) == expected
    other_descr = x.view(np.dtype("float64").newbyteorder("="))
    assert total(other_descr) == expected
    assert total(np.frombuffer(x.tobytes(), dtype=np.float64)) == expected  # read-only, only read
    assert total(x=x) == expected


@iz.kernel
def mixed(a: f32, b: i32, flag: boolean, n: i64) -> f32:
    return a * f32(2.0) + f32(b) if flag else f32(n)


@iz.kernel
def is_big(x: f64) -> boolean:
    return x > 10.0


def test_scalars_cross_the_c_boundary_exactly() -> None:
    for args in [(1.1, 3, True, 5), (np.float32(1.1), np.int32(-3), np.bool_(True), 5), (2, 7, False, -4),
                 (1e39, 0, True, 0)]:
        assert mixed(*args) == mixed.compile(backend="interp")(*args)
    assert type(mixed(1.5, 1, True, 1)) is float and type(is_big(11.0)) is bool
    assert is_big(11.0) is True and is_big(np.float64(3.0)) is False
    with pytest.raises(OverflowError, match="parameter 'b' of kernel 'mixed'"):
        mixed(1.0, 1 << 31, True, 0)
    with pytest.raises(TypeError, match="parameter 'n' of kernel 'mixed' must be a i64 scalar"):
        mixed(1.0, 1, True, 2.0)
    with pytest.raises(TypeError, match="parameter 'flag' of kernel 'mixed' must be a i1 scalar"):
        mixed(1.0, 1, 1, 2)


def test_kernels_run_concurrently_in_threads() -> None:
    """Compiled code runs without the GIL and keeps no per-kernel state between calls."""
    arrays = [np.random.default_rng(seed).standard_normal(100_000) for seed in range(4)]
    expected = [float(total.py_func(a[:1000])) + total(a[1000:]) for a in arrays]  # one thread at a time
    results: dict[int, float] = {}

    def work(index: int) -> None:
        for _ in range(20):
            results[index] = total(arrays[index])
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(results[i] == pytest.approx(expected[i], rel=1e-12) for i in range(4))


# --- IR stages ---------------------------------------------------------------------------------------


def test_show_ir_llvm_stages() -> None:
    emitted = iz.show_ir(scale, stage="llvm")
    assert 'define internal void @"iz_scale"' in emitted and "__fast" in emitted and "__raw" in emitted
    optimized = iz.show_ir(scale, stage="llvm-opt")
    assert "define" in optimized and "noalias" in optimized
    assert "fast" not in optimized.replace("__fast", "")  # no fast-math flags unless asked


# --- the disk cache ----------------------------------------------------------------------------------

KERNEL_FILE = '''
import numpy as np
import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.runtime import disk_cache

@iz.kernel
def mag(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return iz.sqrt(s)

value = mag(np.arange(4.0), 4)
print(json.dumps({"value": value, "codegen_imported": "isozyme.codegen.llvm" in sys.modules, **disk_cache.stats}))
'''


def run_fresh_process(directory: Path, cache: Path) -> dict[str, float]:
    script = directory / "cached_kernel.py"
    script.write_text("import json, sys\n" + textwrap.dedent(KERNEL_FILE))
    env = {**os.environ, "ISOZYME_CACHE_DIR": str(cache)}
    env.pop("ISOZYME_CACHE", None)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_fresh_process_loads_the_kernel_from_the_disk_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = run_fresh_process(tmp_path, cache)
    assert first["value"] == math.sqrt(14.0)
    assert first.get("misses") == 1 and first.get("stores") == 1 and "hits" not in first
    second = run_fresh_process(tmp_path, cache)
    assert second["value"] == math.sqrt(14.0)
    assert second.get("hits") == 1 and "misses" not in second and "stores" not in second
    assert first["codegen_imported"] and not second["codegen_imported"]  # a hit needs no code generator


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_a_corrupt_cache_entry_is_detected_and_recompiled(tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    run_fresh_process(tmp_path, cache)
    (entry,) = cache.glob("*.izc")
    data = bytearray(entry.read_bytes())
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":
        data[-100] ^= 0xFF
    else:
        data = bytearray(b"not a cache entry")
    entry.write_bytes(bytes(data))
    recovered = run_fresh_process(tmp_path, cache)
    assert recovered["value"] == math.sqrt(14.0)
    assert recovered.get("corrupt") == 1 and recovered.get("stores") == 1
    assert run_fresh_process(tmp_path, cache).get("hits") == 1  # the rewritten entry is good


def test_an_unwritable_cache_directory_is_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from isozyme.runtime import disk_cache

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("ISOZYME_CACHE_DIR", str(blocker / "cache"))  # a directory below a file
    before = disk_cache.stats["write_errors"]
    disk_cache.store("0" * 64, {}, b"payload")
    assert disk_cache.stats["write_errors"] == before + 1
    assert disk_cache.load("0" * 64) is None


def test_importing_isozyme_does_not_load_llvmlite() -> None:
    """The OpenCL path must work without llvmlite: the LLVM backend is imported at its first use."""
    code = "import sys, isozyme; print('llvmlite' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr


def arrays_on_both_branches(y: Array[f64, 2], x: Array[f64, 2]):
    for i in iz.prange(x.shape[0]):
        n = x.shape[1]
        a = iz.empty(n, f64)
        for j in range(n):
            a[j] = x[i, j] * 2.0
        if x[i, 0] > 0.0:
            b = iz.empty(n, f64)
            for j in range(n):
                b[j] = a[j] + 1.0
            for j in range(n):
                y[i, j] = b[j]
        else:
            c = iz.empty(n, f64)
            for j in range(n):
                c[j] = a[j] - 1.0
            d = iz.empty(n, f64)
            for j in range(n):
                d[j] = c[j] * c[j]
            for j in range(n):
                y[i, j] = d[j]


def test_the_llvm_ir_of_a_kernel_is_the_same_at_every_compile() -> None:
    """Eight fresh compiles of one source give one LLVM IR. A parallel loop's worker once declared the slots
    of its local arrays in the order of a set of blocks (by address): four different texts in eight."""
    texts = {iz.show_ir(iz.kernel(arrays_on_both_branches), "llvm") for _ in range(8)}
    assert len(texts) == 1
    text = texts.pop()
    assert all(f'%"{name}.block" = alloca' in text for name in "abcd")  # the four slots this test is about
