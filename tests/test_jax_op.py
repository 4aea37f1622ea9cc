"""`isozyme.jax.op`: kernels as JAX functions (`custom_vjp` over `pure_callback`). Values and gradients are
compared with the same function written in jax.numpy (1e-12) under `jit`, `grad` and `vmap`, and with
finite differences (`jax.test_util.check_grads`, reverse mode, order 1). This module turns on
`jax_enable_x64` for the process, as f64 kernels need (benchmarks/suite/peer_jax.py does the same)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402
from op_kernels import dense_tanh, dot, gather_scale, scaled_squares  # noqa: E402

import isozyme as iz  # noqa: E402
import isozyme.jax  # noqa: E402
from isozyme import Array, f64, i64  # noqa: E402


@iz.kernel
def clip(out: Array[f64], x: Array[f64], limit: f64) -> i64:
    clipped = 0
    for i in range(x.shape[0]):
        out[i] = min(x[i], limit)
        if x[i] > limit:
            clipped += 1
    return clipped


scaled_op = isozyme.jax.op(scaled_squares, outputs=("out",))
dense_op = isozyme.jax.op(dense_tanh, outputs={"h": lambda x, W, b: (x.shape[0], W.shape[0])})
gather_op = isozyme.jax.op(gather_scale, outputs={"out": "index"})
dot_op = isozyme.jax.op(dot)


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


def test_second_derivatives_are_an_error() -> None:
    (x,) = arrays(6, (4,))
    with pytest.raises(ValueError, match="Pure callbacks do not support JVP"):
        jax.grad(lambda x: jax.grad(lambda x: dot_op(x, x))(x).sum())(x)


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
