"""`iz.testing.gradcheck` (reverse mode, forward mode and central differences compared) and
`iz.testing.assert_ir` (FileCheck from Python). The wrong derivative gradcheck must catch is a custom reverse
rule (`defvjp`) that is off by a factor: forward mode and finite differences use the kernel's body and
agree, reverse mode uses the rule."""

from __future__ import annotations

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f32, f64, i64
from isozyme.testing import GradcheckError, assert_ir, gradcheck


@iz.kernel
def soft_energy(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        if x[i] > 0.0:
            s += x[i] * iz.exp(-x[i])
        else:
            s += x[i] * x[i]
    return iz.sqrt(s + 1.0)


@iz.kernel
def damped(x: Array[f64], a: f64, steps: i64) -> f64:
    """An Active scalar and a `while` loop of data-dependent length."""
    total = 0.0
    k = 0
    while k < steps:
        total += iz.sin(a * x[k % len(x)]) / (k + 1)
        k += 1
    return total * a


@iz.kernel
def scaled_rows(out: Array[f64, 2], x: Array[f64, 2], c: f64):
    """No return value: writes `out` (gradcheck's dot-product test) and reads x twice."""
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = c * x[i, j] * x[i, (j + 1) % x.shape[1]]


@iz.kernel
def in_place(x: Array[f64], c: f64) -> f64:
    """Overwrites its input: L = ret + <w, x after>, differentiated with respect to x before."""
    for i in range(len(x)):
        x[i] = iz.tanh(c * x[i])
    return x[0] * x[len(x) - 1]


@iz.kernel
def quarter(x: Array[f32], n: i64) -> f32:
    s = f32(0.0)
    for i in range(n):
        s += x[i] * x[i] * f32(0.25)
    return s


@iz.kernel
def norm3(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return iz.sqrt(s)


@norm3.defvjp
@iz.kernel
def norm3_wrong_vjp(x: Array[f64], d_x: Array[f64], n: i64, differet: f64) -> None:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    for i in range(n):
        d_x[i] += 2.0 * differet * x[i] / iz.sqrt(s)  # the factor 2 is the mistake


@iz.kernel
def uses_norm3(x: Array[f64], w: Array[f64]) -> f64:
    return norm3(x, len(x)) * w[0] + w[1]


@iz.kernel
def counts(x: Array[i64], n: i64) -> i64:
    return x[0] + n


RNG = np.random.default_rng(11)


def test_a_loop_kernel_passes_and_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    x = RNG.uniform(-1.0, 1.0, 7)
    result = gradcheck(soft_energy, x, 7)
    assert result and result.passed
    out = capsys.readouterr().out
    assert "gradcheck of kernel soft_energy" in out and "passed" in out
    for pair in ("reverse vs fd", "forward vs fd", "reverse vs forward"):
        assert pair in out
    assert set(result.gradients) == {"reverse", "forward", "fd"}
    assert result.gradients["reverse"]["x"].shape == (7,)
    assert result.errors["x"][("reverse", "forward")].max_abs < 1e-12


def test_an_active_scalar_and_a_while_loop() -> None:
    x, a = RNG.uniform(-1.0, 1.0, 4), 0.7
    result = gradcheck(damped, x, a, 9, show_summary=False)
    assert set(result.gradients["reverse"]) == {"x", "a"}
    assert result.gradients["reverse"]["a"].shape == ()
    result = gradcheck(damped, x, a, 9, argnums=1, reference="python", show_summary=False)
    assert set(result.gradients["fd"]) == {"a"}


def test_output_arrays_get_the_dot_product_test() -> None:
    out, x = np.zeros((2, 3)), RNG.uniform(-1.0, 1.0, (2, 3))
    result = gradcheck(scaled_rows, out, x, 1.3, show_summary=False)
    assert "L = <w, out>" in result.table
    assert result.gradients["fd"]["x"].shape == (2, 3)
    assert np.all(result.gradients["reverse"]["out"] == 0.0)  # out is overwritten: its entry value is dead
    assert np.all(out == 0.0)  # the caller's arrays are copied, never written


def test_an_array_overwritten_in_place() -> None:
    x = RNG.uniform(-1.0, 1.0, 5)
    before = x.copy()
    assert gradcheck(in_place, x, 0.8, show_summary=False)
    assert np.array_equal(x, before)


def test_f32_gets_looser_defaults() -> None:
    x = RNG.uniform(-1.0, 1.0, 6).astype(np.float32)
    result = gradcheck(quarter, x, 6, show_summary=False)
    assert "eps=0.01" in result.table


def test_a_wrong_custom_derivative_is_caught_with_the_ir() -> None:
    x, w = RNG.uniform(0.5, 1.0, 3), np.array([1.5, -0.5])
    with pytest.raises(GradcheckError) as error:
        gradcheck(uses_norm3, x, w, show_summary=False)
    message = str(error.value)
    assert isinstance(error.value, AssertionError)
    rows = {line.split()[0] + " " + " ".join(line.split()[2:5]): line.split()[-1]
            for line in message.splitlines() if " vs " in line}
    assert rows["x reverse vs fd"] == "NO" and rows["x reverse vs forward"] == "NO"
    assert rows["x forward vs fd"] == "yes" and rows["w reverse vs fd"] == "yes"
    assert "stage grad-opt, activity dup,dup" in message
    assert "func @diffe_uses_norm3(" in message and "func @norm3_wrong_vjp(" in message


def test_a_failure_can_be_returned_instead() -> None:
    x = RNG.uniform(0.5, 1.0, 3)
    result = gradcheck(norm3, x, 3, raise_on_failure=False, show_summary=False)
    assert not result
    assert not result.errors["x"][("reverse", "fd")].ok
    assert result.errors["x"][("forward", "fd")].ok


def test_gradcheck_refuses_what_it_cannot_check() -> None:
    with pytest.raises(ValueError, match="argnums 1 of kernel 'soft_energy' is not a float"):
        gradcheck(soft_energy, np.ones(2), 2, argnums=1)
    with pytest.raises(TypeError, match="returns no float and writes no float array"):
        gradcheck(counts, np.ones(2, dtype=np.int64), 2)
    with pytest.raises(TypeError, match="takes 2 argument"):
        gradcheck(soft_energy, np.ones(2))
    with pytest.raises(TypeError, match="needs an @iz.kernel"):
        gradcheck(soft_energy.py_func, np.ones(2), 2)


# --- assert_ir ---------------------------------------------------------------------------------------------


def test_assert_ir_on_a_kernel_and_its_gradient() -> None:
    text = assert_ir(soft_energy, """
        ; CHECK-LABEL: func @soft_energy(
        ; CHECK: exp
        ; CHECK: sqrt
        ; CHECK-NOT: call
    """)
    assert "func @soft_energy(" in text
    assert_ir(soft_energy, "CHECK-LABEL: func @diffe_soft_energy(\nCHECK: %d_x", stage="grad-opt",
              activity=("dup", "const"))


def test_assert_ir_on_text_and_its_failure() -> None:
    ir = "func @f(%a: f64) -> f64 {\nbb0:\n  %b = fmul %a, %a\n  ret %b\n}\n"
    assert_ir(ir, "CHECK: %[[B:[a-z0-9.]+]] = fmul %a, %a\nCHECK-NEXT: ret %[[B]]")
    with pytest.raises(AssertionError, match=r"(?s)FileCheck failed on the IR text.*error:.*fadd.*--- the IR ---"):
        assert_ir(ir, "CHECK: fadd")
    with pytest.raises(AssertionError, match="CHECK-NOT"):
        assert_ir(ir, "CHECK: func @f\nCHECK-NOT: fmul")
    with pytest.raises(ValueError, match="at least one CHECK line"):
        assert_ir(ir, "fmul")
