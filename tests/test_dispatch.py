"""The thin call path of `iz.grad` and `iz.autodiff` (runtime/autodiff.py `_ReverseCall`): what it keeps from
one call to the next never changes what a call computes or which checks it makes. Each environment
variable that chooses compiled code (`runtime/environment.py` SELECTING) takes effect on the next call of a
gradient function made before it changed; a custom rule registered after a call is used by the next one;
bad arguments after good ones are still refused. Values are checked against the undecorated functions and
central differences."""

from __future__ import annotations

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.runtime import compile_log
from isozyme.runtime.environment import SELECTING, selection


@iz.kernel
def weighted(x: Array[f64], w: f64, n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += w * x[i] * x[i]
    return s


@iz.kernel
def peek(x: Array[f64], i: i64) -> f64:
    return x[i] * x[i]


@iz.kernel
def cube(a: f64) -> f64:
    return a * a * a


def central(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    out = np.zeros_like(x)
    for i in range(x.size):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        out[i] = (f(up) - f(down)) / (2 * h)
    return out


def test_selection_reads_each_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for index, name in enumerate(SELECTING):
        monkeypatch.delenv(name, raising=False)
        before = selection()
        monkeypatch.setenv(name, "1")
        after = selection()
        assert before[index] is None and after[index] is not None
        assert before[:index] + before[index + 1:] == after[:index] + after[index + 1:]


def test_repeated_calls_give_fresh_correct_gradients() -> None:
    x, w = np.array([1.0, -2.0, 0.5]), 1.5
    g = iz.grad(weighted, argnums=(0, 1))
    first = g(x, w, 3)
    second = g(x, w, 3)
    assert first[0] is not second[0]  # a new shadow per call, never the last call's array
    expected_x = central(lambda v: weighted.py_func(v, w, 3), x)
    expected_w = (weighted.py_func(x, w + 1e-6, 3) - weighted.py_func(x, w - 1e-6, 3)) / 2e-6
    for dx, dw in (first, second):
        np.testing.assert_allclose(dx, expected_x, rtol=1e-7)
        assert dw == pytest.approx(expected_w, rel=1e-7)
    assert g(x * 2, w, 3)[1] == pytest.approx(4 * expected_w, rel=1e-7)


def test_argument_kinds_change_between_calls() -> None:
    g = iz.grad(cube)
    assert g(2.0) == pytest.approx(12.0)
    with pytest.raises(TypeError, match="must be a f64 scalar"):
        g(np.array([2.0]))  # an array for a scalar parameter is Active, and refused as a scalar
    assert g(np.float64(3.0)) == pytest.approx(27.0)
    assert g(np.array(3.0)) == pytest.approx(27.0)  # a 0-d array for a scalar parameter is Active
    with pytest.raises(TypeError, match="takes 1 argument"):
        g(2.0, 3.0)


def test_autodiff_checks_every_call() -> None:
    x, d = np.array([1.0, 2.0]), np.zeros(2)
    result, adjoints = iz.autodiff(weighted, iz.Duplicated(x, d), iz.Active(2.0), 2)
    assert result == pytest.approx(10.0) and adjoints == (pytest.approx(5.0),)
    np.testing.assert_allclose(d, [4.0, 8.0])
    with pytest.raises(ValueError, match="shadow of parameter 'x'"):
        iz.autodiff(weighted, iz.Duplicated(x, np.zeros(3)), iz.Active(2.0), 2)
    with pytest.raises(TypeError, match="shadow of parameter 'x'"):
        iz.autodiff(weighted, iz.Duplicated(x, [0.0, 0.0]), iz.Active(2.0), 2)
    _, adjoints = iz.autodiff(weighted, iz.Duplicated(x, np.zeros(2)), iz.Active(2.0), 2, seed=3.0)
    assert adjoints == (pytest.approx(15.0),)
    with pytest.raises(TypeError, match="seed="):
        iz.autodiff(weighted, iz.Duplicated(x, np.zeros(2)), iz.Active(2.0), 2, seed="one")
    with pytest.raises(TypeError, match="needs an @iz.kernel"):
        iz.autodiff(weighted.py_func, 1.0)


def test_the_backend_variable_takes_effect_on_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ISOZYME_BACKEND", raising=False)
    g, x = iz.grad(peek), np.array([3.0, 4.0])
    compile_log.start()
    try:
        np.testing.assert_allclose(g(x, 1), [0.0, 8.0])
        monkeypatch.setenv("ISOZYME_BACKEND", "interp")
        np.testing.assert_allclose(g(x, 1), [0.0, 8.0])
        monkeypatch.delenv("ISOZYME_BACKEND")
        np.testing.assert_allclose(g(x, 0), [6.0, 0.0])
    finally:
        records = compile_log.stop()
    used = [r.backend for r in records if r.kernel is peek and r.mode == "reverse"]
    assert used == ["llvm", "interp"]


def test_the_boundscheck_variable_takes_effect_on_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ISOZYME_BOUNDSCHECK", raising=False)
    g, x = iz.grad(peek), np.array([3.0, 4.0])
    g(x, 1)
    monkeypatch.setenv("ISOZYME_BOUNDSCHECK", "1")
    with pytest.raises(IndexError):
        g(x, 5)
    with pytest.raises(IndexError):
        iz.autodiff(peek, iz.Duplicated(x, np.zeros(2)), 7)


def test_the_fusion_and_race_variables_choose_other_compiled_code(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ISOZYME_LOOP_FUSION", "ISOZYME_CHECK_RACES"):
        monkeypatch.delenv(name, raising=False)
    g, x = iz.grad(weighted), np.array([1.0, 2.0])
    g(x, 1.0, 2)
    before = set(weighted.__dict__["_gradients"])
    monkeypatch.setenv("ISOZYME_LOOP_FUSION", "0")
    np.testing.assert_allclose(g(x, 1.0, 2), [2.0, 4.0])
    fused_off = set(weighted.__dict__["_gradients"]) - before
    assert any(key[0] == "grad" and not key[4].loop_fusion for key in fused_off)  # compiled again without it
    monkeypatch.setenv("ISOZYME_BACKEND", "interp")
    monkeypatch.setenv("ISOZYME_CHECK_RACES", "1")
    np.testing.assert_allclose(g(x, 1.0, 2), [2.0, 4.0])
    assert any(key[0] == "grad" and key[3] == "interp" and key[5] for key in weighted.__dict__["_gradients"])


def test_a_custom_rule_registered_after_a_call_is_used_by_the_next() -> None:
    @iz.kernel
    def twice(a: f64) -> f64:
        return 2.0 * a

    g = iz.grad(twice)
    assert g(1.0) == pytest.approx(2.0)
    assert iz.autodiff(twice, iz.Active(1.0))[1] == (pytest.approx(2.0),)

    @twice.defvjp
    @iz.kernel
    def twice_vjp(a: f64, d_a: Array[f64], differet: f64) -> None:
        d_a[0] += 5.0 * differet  # deliberately not the derivative: the test sees which rule ran

    assert g(1.0) == pytest.approx(5.0)
    assert iz.autodiff(twice, iz.Active(1.0))[1] == (pytest.approx(5.0),)
