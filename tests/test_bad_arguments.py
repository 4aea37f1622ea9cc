"""Bad arguments on every backend (issue 23, items 6 and 7): each is the same Python exception on `interp`,
`llvm` and `opencl` (PoCL here), raised before the kernel runs, naming the parameter.

- Read-only numpy arrays: accepted where the kernel (or its gradient) only reads them, a ValueError naming
  the parameter where it may write them (its memory effects say which), for kernels, `iz.autodiff`,
  `iz.grad`, `iz.fwddiff` and `iz.hvp` alike; OpenCL copies back only what the program may write.
- A non-native byte order is named in the dtype error.
- Scalars out of range: an integer too large for a float parameter, or outside an integer parameter's
  range, is an OverflowError naming the parameter (and the range), also for the scalars of derivatives.
- `seed=` of `iz.autodiff` for a kernel that returns no float, and `argnums` of `iz.grad` and `iz.hvp`
  (duplicates, out of range, negative: from the end, as in JAX).
- Checked mode (`boundscheck=True`) of a kernel covers the code it calls, inlined or not, and a callee that
  asks for checks keeps them inside an unchecked caller.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f32, f64, i32, i64
from isozyme.ssa.parser import parse_module
from isozyme.ssa.printer import print_module
from tests.opencl_conformance import needs_opencl

BACKENDS = ["interp", "llvm", pytest.param("opencl", marks=needs_opencl)]


def read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@iz.kernel
def scale(out: Array[f64], x: Array[f64], a: f64, n: i64) -> None:
    for i in range(n):
        out[i] = a * x[i]


@iz.kernel
def weighted_sum(x: Array[f64], w: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i] * w[i]
    return s


# --- read-only arrays --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_only_input_is_accepted(backend: str) -> None:
    x = read_only(np.arange(4.0))
    out = np.zeros(4)
    scale.compile(backend)(out, x, 2.0, 4)
    np.testing.assert_array_equal(out, 2 * np.arange(4.0))
    assert weighted_sum.compile(backend)(x, read_only(np.ones(4)), 4) == 14.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_only_output_is_a_value_error_naming_it(backend: str) -> None:
    out = read_only(np.zeros(4))
    with pytest.raises(ValueError, match="parameter 'out' of kernel 'scale' is read-only, but the kernel may write it"):
        scale.compile(backend)(out, np.arange(4.0), 2.0, 4)
    with pytest.raises(ValueError, match="parameter 'out' of kernel 'scale' is read-only"):
        scale.compile(backend)(out=out, x=np.arange(4.0), a=2.0, n=4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_accept_read_only_inputs(backend: str) -> None:
    x, w = read_only(np.arange(4.0)), read_only(np.ones(4))
    np.testing.assert_array_equal(iz.grad(weighted_sum, backend=backend)(x, w, 4), 2 * np.arange(4.0))
    value, _ = iz.autodiff(weighted_sum, iz.Duplicated(x, np.zeros(4)), iz.Const(w), 4, backend=backend)
    assert value == 14.0
    dout, dx = np.ones(4), np.zeros(4)
    iz.autodiff(scale, iz.Duplicated(np.zeros(4), dout), iz.Duplicated(x, dx), 2.0, 4, backend=backend)
    np.testing.assert_array_equal(dx, 2 * np.ones(4))
    value, tangent = iz.fwddiff(weighted_sum, iz.Duplicated(x, read_only(np.ones(4))), w, 4, backend=backend)
    assert (value, tangent) == (14.0, 12.0)
    np.testing.assert_array_equal(iz.hvp(weighted_sum, backend=backend)(x, w, 4, read_only(np.ones(4))), 2 * w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_refuse_read_only_arrays_they_write(backend: str) -> None:
    x = np.arange(4.0)
    with pytest.raises(ValueError, match="parameter 'd_x' of kernel 'diffe_weighted_sum' is read-only"):
        iz.autodiff(weighted_sum, iz.Duplicated(x, read_only(np.zeros(4))), np.ones(4), 4, backend=backend)
    with pytest.raises(ValueError, match="parameter 'out' of kernel 'diffe_scale' is read-only"):
        iz.autodiff(scale, iz.Duplicated(read_only(np.zeros(4)), np.ones(4)), iz.Duplicated(x, np.zeros(4)),
                    2.0, 4, backend=backend)
    with pytest.raises(ValueError, match="parameter 'd_out' of kernel 'diffe_scale' is read-only"):
        iz.autodiff(scale, iz.Duplicated(np.zeros(4), read_only(np.ones(4))), iz.Duplicated(x, np.zeros(4)),
                    2.0, 4, backend=backend)
    with pytest.raises(ValueError, match="parameter 'out' of kernel 'fwddiffe_scale' is read-only"):
        iz.fwddiff(scale, iz.Duplicated(read_only(np.zeros(4)), np.zeros(4)), iz.Duplicated(x, np.ones(4)),
                   2.0, 4, backend=backend)


@needs_opencl
def test_opencl_copies_back_only_what_the_program_may_write() -> None:
    from isozyme.runtime import opencl_backend, opencl_counters

    x = np.arange(4.0)
    with opencl_counters.counting() as stats:
        scale.compile("opencl")(np.zeros(4), x, 2.0, 4)
    assert stats.host_copy_bytes == 3 * x.nbytes  # out and x in, out back
    opencl_backend._programs.clear()  # the next compile reads the program from the disk cache
    with pytest.raises(ValueError, match="parameter 'out' of kernel 'scale' is read-only"):
        iz.kernel(scale.py_func, backend="opencl")(read_only(np.zeros(4)), x, 2.0, 4)


@needs_opencl
def test_device_arrays_of_read_only_arrays() -> None:
    x = read_only(np.arange(4.0))
    on_device = iz.to_device(x)
    out = iz.to_device(np.zeros(4))
    scale.compile("opencl")(out, on_device, 2.0, 4)
    np.testing.assert_array_equal(out.get(), 2 * x)
    on_device.set(read_only(np.ones(4)))
    np.testing.assert_array_equal(on_device.get(), np.ones(4))


# --- byte order --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_big_endian_array_is_named_so(backend: str) -> None:
    swapped = np.arange(4.0).astype(">f8")
    expected = ("parameter 'x' of kernel 'scale' must have dtype float64, got float64 in big-endian byte order "
                "(>f8); pass a native-order array, e.g. x.astype(np.float64)")
    with pytest.raises(TypeError) as info:
        scale.compile(backend)(np.zeros(4), swapped, 2.0, 4)
    assert str(info.value) == expected
    with pytest.raises(TypeError, match="parameter 'x' of kernel 'diffe_weighted_sum' must have dtype float64, "
                                        "got float64 in big-endian byte order"):
        iz.grad(weighted_sum, backend=backend)(swapped, np.ones(4), 4)
    with pytest.raises(TypeError, match=r"must have dtype float64, got int64 in big-endian byte order \(>i8\)$"):
        scale.compile(backend)(np.zeros(4), np.arange(4).astype(">i8"), 2.0, 4)  # another dtype: no advice



# --- scalars out of range ----------------------------------------------------------------------------------


@iz.kernel
def mixed(a: f64, b: f32, n: i64, m: i32) -> f64:
    return a * b + n + m


I64_RANGE = "(from -9223372036854775808 to 9223372036854775807)"
I32_RANGE = "(from -2147483648 to 2147483647)"
OUT_OF_RANGE = [
    ((10**400, 1.0, 1, 1), "parameter 'a' of kernel 'mixed': an integer of about 10**400 is too large for f64"),
    ((-(10**309), 1.0, 1, 1), "parameter 'a' of kernel 'mixed': an integer of about -10**309 is too large for f64"),
    ((1.0, 10**39, 1, 1), "parameter 'b' of kernel 'mixed': an integer of about 10**39 is too large for f32"),
    ((1.0, 1.0, 2**70, 1), f"parameter 'n' of kernel 'mixed': 1180591620717411303424 does not fit in i64 {I64_RANGE}"),
    ((1.0, 1.0, 10**23, 1), f"'n' of kernel 'mixed': 100000000000000000000000 does not fit in i64 {I64_RANGE}"),
    ((1.0, 1.0, 2**63, 1), f"parameter 'n' of kernel 'mixed': 9223372036854775808 does not fit in i64 {I64_RANGE}"),
    ((1.0, 1.0, np.uint64(2**64 - 1), 1), "parameter 'n' of kernel 'mixed': 18446744073709551615 does not fit"),
    ((1.0, 1.0, 10**5000, 1), f"'n' of kernel 'mixed': an integer of about 10**5000 does not fit in i64 {I64_RANGE}"),
    ((1.0, 1.0, 1, 2**31), f"parameter 'm' of kernel 'mixed': 2147483648 does not fit in i32 {I32_RANGE}"),
    ((1.0, 1.0, 1, np.int64(-(2**40))), "parameter 'm' of kernel 'mixed': -1099511627776 does not fit in i32"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("args", "message"), OUT_OF_RANGE)
def test_a_scalar_out_of_range_is_an_overflow_error_naming_it(backend: str, args: tuple, message: str) -> None:
    with pytest.raises(OverflowError) as info:
        mixed.compile(backend)(*args)
    assert message in str(info.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalars_in_range_at_the_edges(backend: str) -> None:
    run = mixed.compile(backend)
    assert run(-(2**53), 1.0, -(2**63), -(2**31)) == float(-(2**53) - 2**63 - 2**31)
    assert run(1.0, 2**127, 2**63 - 1, 2**31 - 1) == float(2**127 + 2**63 - 1 + 2**31 - 1)
    assert run(1.0, 1e300, 0, 0) == np.inf  # a float rounds to f32 as numpy rounds it


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_scalars_of_derivatives_are_checked_alike(backend: str) -> None:
    with pytest.raises(OverflowError, match=f"parameter 'n' of kernel 'diffe_mixed': 1180591620717411303424 does not "
                                            f"fit in i64 {re.escape(I64_RANGE)}"):
        iz.grad(mixed, backend=backend)(1.0, 1.0, 2**70, 1)
    with pytest.raises(OverflowError, match=f"parameter 'm' of kernel 'diffe_mixed': .* {re.escape(I32_RANGE)}"):
        iz.autodiff(mixed, iz.Active(1.0), iz.Active(1.0), 1, 10**23, backend=backend)
    with pytest.raises(OverflowError, match="parameter 'a' of kernel 'diffe_mixed': an integer of about 10"):
        iz.autodiff(mixed, iz.Active(10**400), 1.0, 1, 1, backend=backend)
    with pytest.raises(OverflowError, match="parameter 'a' of kernel 'diffe_mixed': an integer of about 10"):
        iz.grad(mixed, argnums=1, backend=backend)(10**400, 1.0, 1, 1)
    with pytest.raises(OverflowError, match="parameter 'd_a' of kernel 'fwddiffe_mixed': an integer of about 10"):
        iz.fwddiff(mixed, iz.Duplicated(1.0, 10**400), 1.0, 1, 1, backend=backend)
    with pytest.raises(OverflowError, match="parameter 'n' of kernel 'fwddiffe_diffe_mixed': .* does not fit"):
        iz.hvp(mixed, backend=backend)(1.0, 1.0, 2**70, 1, 1.0)
    with pytest.raises(OverflowError, match="the direction v for parameter 'a' of kernel 'mixed': an integer"):
        iz.hvp(mixed, backend=backend)(1.0, 1.0, 1, 1, 10**400)


# --- seed= and argnums -------------------------------------------------------------------------------------


@iz.kernel
def count_positive(x: Array[f64], n: i64) -> i64:
    c = 0
    for i in range(n):
        if x[i] > 0.0:
            c += 1
    return c


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_seeds_the_returned_float_only(backend: str) -> None:
    x = np.arange(4.0)
    dx = np.zeros(4)
    assert iz.autodiff(weighted_sum, iz.Duplicated(x, dx), np.ones(4), 4, seed=-2.0, backend=backend)[0] == 14.0
    np.testing.assert_array_equal(dx, -4.0 * x)
    dx[:] = 0.0
    iz.autodiff(weighted_sum, iz.Duplicated(x, dx), np.ones(4), 4, backend=backend)  # 1.0 by default
    np.testing.assert_array_equal(dx, 2.0 * x)
    with pytest.raises(TypeError, match="seed= is the cotangent of the returned float, and kernel 'scale' returns "
                                        r"nothing: seed the outputs through the shadows .*\(out, d_out\)\)"):
        iz.autodiff(scale, iz.Duplicated(np.zeros(4), np.ones(4)), iz.Duplicated(x, np.zeros(4)), 2.0, 4,
                    seed=2.0, backend=backend)
    with pytest.raises(TypeError, match="kernel 'count_positive' returns an i64, which has no derivative"):
        iz.autodiff(count_positive, iz.Duplicated(x, np.zeros(4)), 4, seed=1.0, backend=backend)
    with pytest.raises(TypeError, match=r"seed= \(the cotangent of the float kernel 'weighted_sum' returns\) must "
                                        "be a f64 scalar, got str"):
        iz.autodiff(weighted_sum, iz.Duplicated(x, np.zeros(4)), np.ones(4), 4, seed="1", backend=backend)
    with pytest.raises(OverflowError, match=r"seed= \(the cotangent .*\): an integer of about 10\*\*400 is too large"):
        iz.autodiff(weighted_sum, iz.Duplicated(x, np.zeros(4)), np.ones(4), 4, seed=10**400, backend=backend)


def test_grad_argnums_are_read_as_jax_reads_them() -> None:
    x, w = np.arange(3.0), np.ones(3)
    gradient = iz.grad(weighted_sum, argnums=(1, 0))(x, w, 3)
    np.testing.assert_array_equal(gradient[0], x * x)
    np.testing.assert_array_equal(gradient[1], 2 * x)
    np.testing.assert_array_equal(iz.grad(weighted_sum, argnums=-2)(x, w, 3), x * x)  # from the end
    np.testing.assert_array_equal(iz.grad(weighted_sum, argnums=[-3])(x, w, 3)[0], 2 * x)
    np.testing.assert_array_equal(iz.grad(weighted_sum, argnums=np.int64(0))(x, w, 3), 2 * x)


@pytest.mark.parametrize("transform", [iz.grad, iz.hvp])
@pytest.mark.parametrize(("argnums", "error", "message"), [
    ((0, 0), ValueError, r"argnums \(0, 0\) names parameter 'x' of kernel 'weighted_sum' twice"),
    ((1, -2), ValueError, r"argnums \(1, -2\) names parameter 'w' of kernel 'weighted_sum' twice"),
    (3, ValueError, r"argnums 3 is out of range for kernel 'weighted_sum' with 3 parameters \(from -3 to 2"),
    ((0, -4), ValueError, "argnums -4 is out of range"),
    ((), ValueError, r"argnums \(\) names no parameter of kernel 'weighted_sum'"),
    (1.0, TypeError, "argnums must be an int or a sequence of ints, got 1.0"),
    ("x", TypeError, "argnums must be an int or a sequence of ints, got 'x'"),
])
def test_bad_argnums(transform: object, argnums: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        transform(weighted_sum, argnums=argnums)  # type: ignore[operator]


def test_gradcheck_reads_argnums_alike() -> None:
    x, w = np.arange(1.0, 4.0), np.ones(3)
    iz.testing.gradcheck(weighted_sum, x, w, 3, argnums=-3)
    with pytest.raises(ValueError, match="names parameter 'x' of kernel 'weighted_sum' twice"):
        iz.testing.gradcheck(weighted_sum, x, w, 3, argnums=(0, -3))


# --- checked mode across calls -----------------------------------------------------------------------------


@iz.kernel
def element(x: Array[f64], i: i64) -> f64:
    return x[i]


@iz.kernel(inline=False)
def element_kept(x: Array[f64], i: i64) -> f64:
    return x[i]


@iz.kernel(boundscheck=True)
def element_checked(x: Array[f64], i: i64) -> f64:
    return x[i]


@iz.kernel(boundscheck=True)
def checked_caller(x: Array[f64], i: i64) -> f64:
    return element(x, i) + element_kept(x, i)


@iz.kernel(boundscheck=True, inline=False)
def element_checked_kept(x: Array[f64], i: i64) -> f64:
    return x[i]


@iz.kernel
def unchecked_caller(out: Array[f64], x: Array[f64], i: i64) -> None:
    out[0] = 2.0 * element_checked(x, i)


@iz.kernel
def unchecked_caller_kept(out: Array[f64], x: Array[f64], i: i64) -> None:
    out[0] = 2.0 * element_checked_kept(x, i)


def line_of(kernel: iz.Kernel) -> int:
    return kernel.py_func.__code__.co_firstlineno + 2  # the decorator, the def, then `return x[i]`


@pytest.mark.parametrize("backend", BACKENDS)
def test_checked_mode_covers_inlined_and_kept_callees(backend: str) -> None:
    x = np.arange(4.0)
    with pytest.raises(IndexError, match=rf"test_bad_arguments.py:{line_of(element)}:\d+: load: index \(4,\) is out "
                                         r"of bounds for an array of shape \(4,\)"):
        checked_caller.compile(backend)(x, 4)
    with pytest.raises(IndexError, match=rf"test_bad_arguments.py:{line_of(element)}:\d+: load: index \(-1,\)"):
        iz.grad(checked_caller, backend=backend)(x, -1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("caller", "callee"), [(unchecked_caller, element_checked),
                                                (unchecked_caller_kept, element_checked_kept)])
def test_a_checked_callee_stays_checked_in_an_unchecked_caller(backend: str, caller: iz.Kernel,
                                                               callee: iz.Kernel) -> None:
    x, out = np.arange(4.0), np.zeros(1)
    where = rf"test_bad_arguments.py:{line_of(callee)}:\d+: load: index \(5,\) is out of bounds"
    caller.compile(backend)(out, x, 3)
    assert out[0] == 6.0
    with pytest.raises(IndexError, match=where):
        caller.compile(backend)(out, x, 5)
    with pytest.raises(IndexError, match=where):
        iz.autodiff(caller, iz.Duplicated(out, np.ones(1)), iz.Duplicated(x, np.zeros(4)), 5, backend=backend)
    with pytest.raises(IndexError, match=where):
        iz.fwddiff(caller, iz.Duplicated(out, np.zeros(1)), iz.Duplicated(x, np.ones(4)), 5, backend=backend)


def test_the_shadow_of_a_checked_access_is_checked() -> None:
    for stage, activity in (("grad", ("dup", "dup", "const")), ("fwd", ("dup", "dup", "const"))):
        text = iz.show_ir(unchecked_caller, stage=stage, activity=activity, opt="none")
        shadow_accesses = [line for line in text.splitlines() if "%d_x[" in line or "%d.x[" in line]
        assert shadow_accesses and all(line.rstrip().endswith("checked") for line in shadow_accesses), text
    lowered = iz.show_ir(unchecked_caller, stage="ssa")
    assert [line.strip() for line in lowered.splitlines() if line.endswith(" checked")] == ["%0 = load %x[%i] checked"]
    assert print_module(parse_module(lowered)) == lowered  # the flag round-trips through the text form
