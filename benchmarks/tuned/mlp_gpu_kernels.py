"""The MLP of `examples/mlp.py` written for a GPU: every (feature, sample) pair of a stage is a work item.

`mlp_loss_pairs` computes what `mlp_loss` computes, with the same stages, each one parallel loop over the
(feature j, sample b) pairs of its output, `for j, b in iz.ndrange(features, batch)` (the arrays stay
feature-major, `h[j, b]`), where the example's stages are a `prange` over the features with the batch in
series: 64 times the work items at the example's sizes. In the reverse pass the adds into a weight's
adjoint (d_W[j, k], from every sample) and into the adjoint of the hidden activations (d_h1[k, b], from
every feature of the second layer) are atomic adds: several work items add into each element.
"""

from __future__ import annotations

import isozyme as iz
from isozyme import Array, f64


@iz.kernel
def dense_pairs(out: Array[f64, 2], W: Array[f64, 2], x: Array[f64, 2]):
    # out[j, b] = sum_k W[j, k] x[k, b]: one work item per output feature j and sample b
    for j, b in iz.ndrange(W.shape[0], x.shape[1]):
        s = 0.0
        for k in range(W.shape[1]):
            s += W[j, k] * x[k, b]
        out[j, b] = s


@iz.kernel
def bias_sigmoid_pairs(out: Array[f64, 2], z: Array[f64, 2], bias: Array[f64]):
    for j, b in iz.ndrange(z.shape[0], z.shape[1]):
        out[j, b] = 1.0 / (1.0 + iz.exp(-(z[j, b] + bias[j])))


@iz.kernel
def mean_squared_error_pairs(h: Array[f64, 2], targets: Array[f64, 2]) -> f64:
    s = 0.0
    for j, b in iz.ndrange(h.shape[0], h.shape[1]):
        diff = h[j, b] - targets[j, b]
        s += diff * diff
    return s / (h.shape[0] * h.shape[1])


@iz.kernel
def mlp_loss_pairs(W1: Array[f64, 2], b1: Array[f64], W2: Array[f64, 2], b2: Array[f64], X: Array[f64, 2],
                   Y: Array[f64, 2]) -> f64:
    batch = X.shape[1]
    z1 = iz.empty((W1.shape[0], batch), f64)
    dense_pairs(z1, W1, X)
    h1 = iz.empty((W1.shape[0], batch), f64)
    bias_sigmoid_pairs(h1, z1, b1)
    z2 = iz.empty((W2.shape[0], batch), f64)
    dense_pairs(z2, W2, h1)
    h2 = iz.empty((W2.shape[0], batch), f64)
    bias_sigmoid_pairs(h2, z2, b2)
    return mean_squared_error_pairs(h2, Y)
