"""Kernels the tests of the framework ops share (`test_torch_op.py`, `test_jax_op.py`, `test_kernel_op.py`):
each test compares the op of one with the same function written in that framework."""

from __future__ import annotations

import isozyme as iz
from isozyme import Array, f64, i64


@iz.kernel(boundscheck=True)  # n comes from the caller: an index past x is an IndexError
def scaled_squares(x: Array[f64], a: f64, n: i64, out: Array[f64]) -> f64:
    # accumulates into its output, and returns a float too
    s = 0.0
    for i in range(n):
        out[i] += a * x[i] * x[i]
        s += iz.sin(x[i])
    return s


@iz.kernel
def dense_tanh(h: Array[f64, 2], x: Array[f64, 2], W: Array[f64, 2], b: Array[f64]):
    for i in range(x.shape[0]):
        for j in range(W.shape[0]):
            s = b[j]
            for k in range(x.shape[1]):
                s += x[i, k] * W[j, k]
            h[i, j] = iz.tanh(s)


@iz.kernel
def gather_scale(out: Array[f64], x: Array[f64], index: Array[i64], scale: f64):
    for i in range(index.shape[0]):
        out[i] = scale * x[index[i]]


@iz.kernel
def dot(x: Array[f64], y: Array[f64]) -> f64:
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


@iz.kernel
def coupled_energy(x: Array[f64], w: Array[f64], a: f64) -> f64:
    # a float-returning kernel whose Hessian couples x, w and a (the ops' second derivatives go through iz.hvp)
    e = 0.0
    for i in range(x.shape[0] - 1):
        e += a * iz.sin(x[i] * x[i + 1]) + w[i] * x[i] * x[i] * x[i]
    return e
