"""`isozyme/kernel_op.py`, the framework-free half of `isozyme.torch` and `isozyme.jax`, on numpy arrays:
the forward against numpy, the backward against central differences of the undecorated kernel; fresh
outputs, inputs passed twice, and the messages of a bad op. Needs neither torch nor jax; without them,
`import isozyme.torch` / `isozyme.jax` say which extra to install."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from op_kernels import coupled_energy, dot

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.kernel_op import KernelOp


@iz.kernel
def affine_accumulate(out: Array[f64, 2], x: Array[f64, 2], W: Array[f64, 2], scale: f64, n: i64) -> f64:
    # accumulates into its output (the op's is zeroed first), and returns a float
    total = 0.0
    for i in range(x.shape[0]):
        for j in range(W.shape[0]):
            for k in range(n):
                out[i, j] += scale * x[i, k] * W[j, k]
            total += iz.sin(out[i, j])
    return total


SHAPES = {"out": lambda x, W, scale, n: (x.shape[0], W.shape[0])}


def loss(spec: KernelOp, values: list, cotangent: np.ndarray) -> float:
    (out,), total = spec.forward(values)
    return float((cotangent * out).sum() + 2.0 * total)


def test_forward_and_backward_match_numpy_and_central_differences() -> None:
    rng = np.random.default_rng(0)
    x, W, cotangent = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), rng.standard_normal((3, 4))
    spec = KernelOp(affine_accumulate, SHAPES)
    values = [x, W, 0.7, 2]
    (out,), total = spec.forward(values)
    np.testing.assert_allclose(out, 0.7 * x @ W.T, rtol=1e-12)
    np.testing.assert_allclose(total, np.sin(0.7 * x @ W.T).sum(), rtol=1e-12)
    np.testing.assert_array_equal(spec.forward(values)[0][0], out)  # fresh zeroed outputs: no accumulation
    d_x, d_W, d_scale, d_n = spec.backward(values, [cotangent], 2.0)
    assert d_n is None
    eps = 1e-6
    for position, gradient in ((0, d_x), (1, d_W)):
        for index in np.ndindex(values[position].shape):
            plus, minus = ([v.copy() if isinstance(v, np.ndarray) else v for v in values] for _ in range(2))
            plus[position][index] += eps
            minus[position][index] -= eps
            expected = (loss(spec, plus, cotangent) - loss(spec, minus, cotangent)) / (2 * eps)
            assert abs(gradient[index] - expected) <= 1e-6 * max(1.0, abs(expected))
    expected = (loss(spec, [x, W, 0.7 + eps, 2], cotangent) - loss(spec, [x, W, 0.7 - eps, 2], cotangent)) / (2 * eps)
    assert abs(d_scale - expected) <= 1e-6 * max(1.0, abs(expected))


def test_tangents_and_hessian_vector_products_match_central_differences() -> None:
    """Forward mode (`tangents`) against central differences of the forward, the Hessian-vector product
    against central differences of the backward (the gradient), both in a random direction."""
    rng = np.random.default_rng(1)
    x, W, dx, dW = (rng.standard_normal(shape) for shape in ((3, 2), (4, 2), (3, 2), (4, 2)))
    spec = KernelOp(affine_accumulate, SHAPES)
    (d_out,), d_total = spec.tangents([x, W, 0.7, 2], [dx, dW, -0.4, None])
    eps = 1e-6
    (out_plus,), total_plus = spec.forward([x + eps * dx, W + eps * dW, 0.7 - eps * 0.4, 2])
    (out_minus,), total_minus = spec.forward([x - eps * dx, W - eps * dW, 0.7 + eps * 0.4, 2])
    np.testing.assert_allclose(d_out, (out_plus - out_minus) / (2 * eps), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(d_total, (total_plus - total_minus) / (2 * eps), rtol=1e-6, atol=1e-8)
    assert spec.derivative_order == 1  # a float output: iz.hvp differentiates a float return only
    with pytest.raises(RuntimeError, match="kernel 'affine_accumulate' has first derivatives only.*output.*'out'"):
        spec.hessian_vector([x, W, 0.7, 2], [dx, dW, 1.0, None])
    energy = KernelOp(coupled_energy, ())
    assert energy.derivative_order == 2
    v, w, dv, dw = (rng.standard_normal(5) for _ in range(4))
    products = energy.hessian_vector([v, w, 0.3], [dv, dw, 0.8])
    plus = energy.backward([v + eps * dv, w + eps * dw, 0.3 + eps * 0.8], [], 1.0)
    minus = energy.backward([v - eps * dv, w - eps * dw, 0.3 - eps * 0.8], [], 1.0)
    for product, high, low in zip(products, plus, minus):
        np.testing.assert_allclose(product, (np.asarray(high) - np.asarray(low)) / (2 * eps), rtol=1e-6, atol=1e-8)


def test_an_input_passed_twice_is_copied_and_both_gradients_come_back() -> None:
    x = np.arange(1.0, 5.0)
    spec = KernelOp(dot, ())
    assert spec.forward([x, x]) == ([], 30.0)
    d_x, d_y = spec.backward([x, x], [], 1.0)
    np.testing.assert_array_equal(d_x, x)
    np.testing.assert_array_equal(d_y, x)


def test_bad_shape_rules() -> None:
    with pytest.raises(ValueError, match="shape of output 'out'.*'scale', which is not an input array of rank 2"):
        KernelOp(affine_accumulate, {"out": "scale"})
    with pytest.raises(TypeError, match="shape rule of output 'out' must be"):
        KernelOp(affine_accumulate, {"out": 3})
    spec = KernelOp(affine_accumulate, {"out": lambda x, W, scale, n: (n,)})
    with pytest.raises(ValueError, match=r"shape rule of output 'out'.*gave \(2,\), not 2 extent"):
        spec.forward([np.zeros((3, 2)), np.zeros((4, 2)), 1.0, 2])
    negative = KernelOp(affine_accumulate, {"out": lambda x, W, scale, n: (x.shape[0] - n - 2, W.shape[0])})
    with pytest.raises(ValueError, match=r"shape rule of output 'out' of kernel 'affine_accumulate' gave \(-1, 4\)"
                                         ": an extent is negative"):
        negative.forward([np.zeros((3, 2)), np.zeros((4, 2)), 1.0, 2])
    with pytest.raises(ValueError, match="names a parameter twice"):
        KernelOp(affine_accumulate, ("out", "out"))
    with pytest.raises(TypeError, match="needs an @iz.kernel"):
        KernelOp(dot.py_func, ())


@pytest.mark.parametrize(("module", "extra"), [("torch", "PyTorch"), ("jax", "JAX")])
def test_without_the_framework_the_import_names_the_extra(module: str, extra: str) -> None:
    code = f"import sys; sys.modules[{module!r}] = None; import isozyme.{module}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"isozyme.{module} needs {extra}: pip install 'isozyme[{module}]'" in done.stderr
