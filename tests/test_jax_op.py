"""`isozyme.jax.op`: kernels as JAX functions (primitives whose rules call the kernel's reverse mode, forward
mode and Hessian-vector products through `pure_callback`). Values and derivatives are compared with the same
function written in jax.numpy (1e-12) under `jit`, `grad`, `jacfwd`, `hessian` and `vmap`, and with finite
differences (`jax.test_util.check_grads`, forward and reverse mode, order 1, and order 2 for a
float-returning kernel). This module turns on `jax_enable_x64` for the process, as f64 kernels need
(benchmarks/suite/peer_jax.py does the same); a test turns it off where it checks the messages of that case."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402
from op_kernels import coupled_energy, dense_tanh, dot, gather_scale, scaled_squares  # noqa: E402

import isozyme as iz  # noqa: E402
import isozyme.jax  # noqa: E402
from isozyme import Array, f32, f64, i64  # noqa: E402


@iz.kernel
def clip(out: Array[f64], x: Array[f64], limit: f64) -> i64:
    clipped = 0
    for i in range(x.shape[0]):
        out[i] = min(x[i], limit)
        if x[i] > limit:
            clipped += 1
    return clipped


@iz.kernel
def squares32(x: Array[f32], n: i64, out: Array[f32]) -> f32:
    s = f32(0.0)
    for i in range(n):
        out[i] = x[i] * x[i]
        s += x[i]
    return s


@iz.kernel
def scale32(x: Array[f32], a: f64, out: Array[f32]):
    for i in range(x.shape[0]):
        out[i] = x[i] * f32(a)


@iz.kernel
def count32(x: Array[f32]) -> i64:
    count = 0
    for i in range(x.shape[0]):
        if x[i] > f32(0.0):
            count += 1
    return count


scaled_op = isozyme.jax.op(scaled_squares, outputs=("out",))
dense_op = isozyme.jax.op(dense_tanh, outputs={"h": lambda x, W, b: (x.shape[0], W.shape[0])})
gather_op = isozyme.jax.op(gather_scale, outputs={"out": "index"})
dot_op = isozyme.jax.op(dot)
energy_op = isozyme.jax.op(coupled_energy)


def energy_jax(x, w, a):
    return a * jnp.sin(x[:-1] * x[1:]).sum() + (w[:-1] * x[:-1] ** 3).sum()


def scaled_jax(x, a, n):
    return a * x * x, jnp.sin(x).sum()


def dense_jax(x, W, b):
    return jnp.tanh(x @ W.T + b)


def arrays(seed: int, *shapes: tuple[int, ...]) -> list:
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal(shape)) for shape in shapes]


def assert_close(actual, expected) -> None:
    for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-12, atol=1e-14)


def test_values_and_gradients_match_jax_numpy() -> None:
    (x,) = arrays(0, (6,))

    def loss(x, a, op):
        out, s = op(x, a, 6)
        return (jnp.linspace(-1.0, 1.0, 6) * out).sum() + 3.0 * s
    assert_close(scaled_op(x, 1.5, 6), scaled_jax(x, 1.5, 6))
    assert_close(scaled_op(x, 1.5, 6), scaled_op(x, 1.5, 6))  # fresh zeroed outputs: no accumulation
    assert_close(jax.grad(loss, argnums=(0, 1))(x, 1.5, scaled_op), jax.grad(loss, argnums=(0, 1))(x, 1.5, scaled_jax))


def test_jit_grad_of_a_layer() -> None:
    x, W, b, target = arrays(1, (5, 3), (4, 3), (4,), (5, 4))

    def loss(W, b, layer):
        return ((layer(x, W, b) - target) ** 2).mean()
    compiled = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)), static_argnums=2)
    assert_close(compiled(W, b, dense_op), jax.value_and_grad(loss, argnums=(0, 1))(W, b, dense_jax))


def test_vmap_of_grad() -> None:
    x, b = arrays(2, (3, 2), (4,))
    (batch,) = arrays(3, (5, 4, 2))  # five W

    def loss(W, layer):
        return (layer(x, W, b) ** 2).sum()
    per_example = jax.vmap(jax.grad(loss), in_axes=(0, None))
    assert_close(per_example(batch, dense_op), per_example(batch, dense_jax))
    assert_close(jax.jit(jax.vmap(dense_op, in_axes=(None, 0, None)))(x, batch, b),
                 jax.vmap(dense_jax, in_axes=(None, 0, None))(x, batch, b))


def test_integer_arguments_get_no_gradient() -> None:
    (x,) = arrays(4, (5,))
    index = jnp.asarray([4, 0, 0, 2])

    def loss(x, scale, op):
        return (jnp.arange(1.0, 5.0) * op(x, index, scale)).sum()
    gather_jax = lambda x, index, scale: scale * x[index]  # noqa: E731
    assert_close(jax.grad(loss, argnums=(0, 1))(x, 1.5, gather_op), jax.grad(loss, argnums=(0, 1))(x, 1.5, gather_jax))


def test_an_integer_result_beside_a_float_output() -> None:
    (x,) = arrays(8, (6,))
    clip_op = isozyme.jax.op(clip, outputs=("out",))
    out, clipped = clip_op(x, 0.5)
    assert clipped.dtype == jnp.int64 and int(clipped) == int((x > 0.5).sum())

    def loss(x, limit, op):
        return (jnp.arange(6.0) * op(x, limit)[0]).sum()
    clip_jax = lambda x, limit: (jnp.minimum(x, limit), None)  # noqa: E731
    assert_close(jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(x, 0.5, clip_op),
                 jax.grad(loss, argnums=(0, 1))(x, 0.5, clip_jax))


def test_a_shape_rule_may_read_an_integer_argument_given_as_a_python_int() -> None:
    (x,) = arrays(9, (6,))
    first = isozyme.jax.op(scaled_squares, outputs={"out": lambda x, a, n: (n,)})
    expected = (1.5 * x[:4] * x[:4], jnp.sin(x[:4]).sum())
    assert_close(first(x, 1.5, 4), expected)
    assert_close(jax.jit(first, static_argnums=2)(x, 1.5, 4), expected)


def test_check_grads_reverse_order_one() -> None:
    x, W, b = arrays(5, (3, 2), (4, 2), (4,))
    check_grads(dense_op, (x, W, b), order=1, modes=["rev"])
    check_grads(lambda x, a: scaled_op(x, a, 2), (x[0], 0.7), order=1, modes=["rev"])
    check_grads(lambda x: dot_op(x, x), (x[1],), order=1, modes=["rev"])  # one buffer passed twice


def test_forward_mode_is_isozymes_forward_mode() -> None:
    """Issue 62: `jax.jacfwd` and `jax.jvp` through the op (a custom_vjp) were JAX's "can't apply forward-mode
    autodiff (jvp) to a custom_vjp function"; now the op's jvp is the kernel's forward mode (iz.fwddiff)."""
    x, W, b, dx = arrays(10, (3, 2), (4, 2), (4,), (6,))
    argnums = (0, 1, 2)
    assert_close(jax.jacfwd(dense_op, argnums)(x, W, b), jax.jacfwd(dense_jax, argnums)(x, W, b))
    assert_close(jax.jit(jax.jacfwd(dense_op, argnums))(x, W, b), jax.jacfwd(dense_jax, argnums)(x, W, b))
    (v,) = arrays(11, (6,))
    assert_close(jax.jvp(lambda x, a: scaled_op(x, a, 6), (v, 1.5), (dx, -0.3)),
                 jax.jvp(lambda x, a: scaled_jax(x, a, 6), (v, 1.5), (dx, -0.3)))
    check_grads(dense_op, (x, W, b), order=1, modes=["fwd", "rev"])
    check_grads(lambda x, a: scaled_op(x, a, 2), (x[0], 0.7), order=1, modes=["fwd", "rev"])
    check_grads(lambda x: dot_op(x, x), (v,), order=1, modes=["fwd", "rev"])  # one buffer passed twice


def test_second_derivatives_of_a_float_returning_kernel() -> None:
    """Issue 62: grad of grad was "Pure callbacks do not support JVP". Forward over reverse (`jax.hessian`),
    reverse over reverse (grad of grad), forward over forward, reverse over forward, under jit and vmap:
    against the function written in jax.numpy and finite differences (order 2, both modes)."""
    x, w = arrays(12, (5,), (5,))
    argnums = (0, 1, 2)
    expected = jax.hessian(energy_jax, argnums)(x, w, 0.7)
    assert_close(jax.hessian(energy_op, argnums)(x, w, 0.7), expected)
    assert_close(jax.jit(jax.hessian(energy_op, argnums))(x, w, 0.7), expected)
    assert_close(jax.jacfwd(jax.jacfwd(energy_op, argnums), argnums)(x, w, 0.7), expected)
    assert_close(jax.jacrev(jax.jacfwd(energy_op, argnums), argnums)(x, w, 0.7), expected)
    assert_close(jax.jacrev(jax.jacrev(energy_op, argnums), argnums)(x, w, 0.7), expected)
    grad_of_grad = jax.grad(lambda x, f: jnp.sin(jax.grad(f)(x, w, 0.7)).sum())
    assert_close(grad_of_grad(x, energy_op), grad_of_grad(x, energy_jax))
    batch = jnp.stack([x, w, x * w])
    assert_close(jax.vmap(jax.hessian(energy_op), in_axes=(0, None, None))(batch, w, 0.7),
                 jax.vmap(jax.hessian(energy_jax), in_axes=(0, None, None))(batch, w, 0.7))
    check_grads(energy_op, (x[:4], w[:4], 0.7), order=2, modes=["fwd", "rev"])


def test_second_derivatives_that_isozyme_cannot_take_are_an_error_naming_the_kernel() -> None:
    """An op with a float output has first derivatives only (iz.hvp differentiates a float return); a
    float-returning kernel's op has up to second. Past that, an error naming the kernel, never a zero."""
    x, W, b = arrays(6, (3, 2), (4, 2), (4,))
    with pytest.raises(RuntimeError, match="kernel 'dense_tanh' has first derivatives only.*output.*'h'"):
        jax.grad(lambda W: jax.grad(lambda W: dense_op(x, W, b).sum())(W).sum())(W)
    with pytest.raises(RuntimeError, match="kernel 'dense_tanh' has first derivatives only"):
        jax.hessian(lambda W: dense_op(x, W, b).sum())(W)
    with pytest.raises(RuntimeError, match="kernel 'dense_tanh' has first derivatives only"):
        jax.jacfwd(jax.jacfwd(lambda W: dense_op(x, W, b).sum()))(W)
    v, w = arrays(13, (4,), (4,))
    with pytest.raises(RuntimeError, match="kernel 'coupled_energy' has derivatives up to second order"):
        jax.jacfwd(jax.hessian(energy_op))(v, w, 0.7)
    with pytest.raises(RuntimeError, match="kernel 'coupled_energy' has derivatives up to second order"):
        jax.grad(lambda v: jax.grad(lambda v: jax.grad(energy_op)(v, w, 0.7).sum())(v).sum())(v)


def test_with_64_bit_types_off_the_errors_name_the_parameter() -> None:
    """Issue 62: with JAX's 64-bit types off (its default), a numpy float64 argument met JAX's
    "result_shape_dtypes cannot specify 64-bit types" instead of a TypeError naming the parameter. An f32
    kernel with an i64 scalar works (JAX holds the int in 32 bits; the kernel takes an int)."""
    rng = np.random.default_rng(14)
    x, W, b = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), rng.standard_normal(4)
    with jax.enable_x64(False):
        with pytest.raises(TypeError, match="parameter 'x' of kernel 'dense_tanh' is an array of float64.*"
                                            r"jax.config.update\('jax_enable_x64', True\)"):
            dense_op(x, W, b)
        with pytest.raises(TypeError, match="parameter 'x' of kernel 'scaled_squares' is an array of float64"):
            scaled_op(x[0], 1.5, 2)
        with pytest.raises(TypeError, match="parameter 'a' of kernel 'scale32' is a scalar of float64"):
            isozyme.jax.op(scale32, outputs=("out",))(jnp.ones(3), 2.0)
        with pytest.raises(TypeError, match="the return value of kernel 'count32' is int64"):
            isozyme.jax.op(count32)(jnp.ones(3))
        squares = isozyme.jax.op(squares32, outputs=("out",))
        v = jnp.asarray(rng.standard_normal(5), jnp.float32)
        out, s = squares(v, 5)
        assert out.dtype == jnp.float32
        np.testing.assert_allclose(out, v * v, rtol=1e-6)
        loss = lambda v, f: (jnp.arange(5.0) * f(v, 5)[0]).sum() + 2.0 * f(v, 5)[1]  # noqa: E731
        np.testing.assert_allclose(jax.grad(loss)(v, squares), jax.grad(loss)(v, lambda v, n: (v * v, v.sum())),
                                   rtol=1e-6)


def test_bad_arguments_name_the_parameter() -> None:
    x, W, b = arrays(7, (3, 2), (4, 2), (4,))
    with pytest.raises(TypeError, match="parameter 'W' of kernel 'dense_tanh'.*float64.*float32.*jax_enable_x64"):
        dense_op(x, W.astype(jnp.float32), b)
    with pytest.raises(TypeError, match="parameter 'b'.*1-d array"):
        dense_op(x, W, b[None])
    with pytest.raises(TypeError, match="parameter 'n'.*an int"):
        scaled_op(b, 1.0, 2.0)
    with pytest.raises(TypeError, match="parameter 'a'.*a number"):
        scaled_op(b, True, 2)
    with pytest.raises(TypeError, match="parameter 'x'.*an array, got list"):
        scaled_op([1.0, 2.0], 1.0, 2)
    with pytest.raises(TypeError, match=r"takes \(x, W, b\)"):
        dense_op(x, W)
