"""The transformer of `examples/transformer.py` written for a GPU: every stage is one parallel loop over the
pairs (feature, token) of its output, and every parameter lives in one flat vector on the device.

`transformer_loss_pairs` computes what `transformer_loss` computes (the same model, the same parameters,
the same loss to rounding), with two changes of layout:

- **Activations are feature-major**, `xs[layer, c, t]` for token t = b * S + s: a stage is
  `for o, t in iz.ndrange(n_out, B * S)` (tokens fastest), so the 32 work items of a warp are 32
  neighbouring tokens of one feature: they read and write neighbouring addresses, read one weight (one
  load for the warp) and, in the reverse pass, add into one element of the weights' adjoint at a time,
  which a warp sum turns into one atomic add per warp on NVIDIA. A stage per token of the example (a
  LayerNorm, the loss) is a `prange` over the tokens, the softmax one over the (sequence, head, query)
  rows. Every array a stage writes is indexed by its loop's counters as they are (plus a constant), so
  each work item's writes are its own; what a work item reads may take a division (b = t // S).
- **The parameters are one flat vector** `theta`, laid out as `transformer.Parameters.flat` (the arrays of
  `PARAMETER_NAMES` one after the other, each row-major; the kernel computes each one's offset), so its
  gradient is one device array and the Adam update one call (`GpuTrainer`).

The attention scores every (query i, key j) pair and the softmax gives the pairs j > i a probability of 0,
instead of leaving them out: all 32 work items of a warp then take the same path, which the warp sums need
(a warp whose lanes diverged adds lane by lane).

`GpuTrainer` trains it as `transformer.Trainer` trains `transformer_loss`, every array on the device:
`iz.autodiff` of the loss into the flat gradient, then `adam_step` on the flat vectors.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import isozyme as iz
from isozyme import Array, boolean, f64, i64

LN_EPS = 1e-5
INV_SQRT2 = 1.0 / math.sqrt(2.0)


@iz.kernel
def embed_pairs(x: Array[f64, 3], tokens: Array[i64, 2], theta: Array[f64], tok: i64, pos: i64):
    # x[0, c, t] = tok_emb[tokens[b, s], c] + pos_emb[s, c] for token t = b * S + s, the embeddings at
    # theta[tok] and theta[pos]
    d, S = x.shape[1], tokens.shape[1]
    for c, t in iz.ndrange(d, x.shape[2]):
        b = t // S
        s = t - b * S
        x[0, c, t] = theta[tok + tokens[b, s] * d + c] + theta[pos + s * d + c]


@iz.kernel
def layer_norm_tokens(out: Array[f64, 3], lo: i64, x: Array[f64, 3], lx: i64, theta: Array[f64], weight: i64,
                      bias: i64):
    # out[lo, :, t] = LayerNorm(x[lx, :, t]) * theta[weight:][:d] + theta[bias:][:d]: a work item per token
    d = x.shape[1]
    for t in iz.prange(x.shape[2]):
        mean = 0.0
        for c in range(d):
            mean += x[lx, c, t]
        mean = mean / d
        var = 0.0
        for c in range(d):
            v = x[lx, c, t] - mean
            var += v * v
        rstd = 1.0 / iz.sqrt(var / d + LN_EPS)
        for c in range(d):
            out[lo, c, t] = (x[lx, c, t] - mean) * rstd * theta[weight + c] + theta[bias + c]


@iz.kernel
def dense_pairs(out: Array[f64, 3], lo: i64, x: Array[f64, 3], lx: i64, theta: Array[f64], weight: i64, bias: i64,
                residual: Array[f64, 3], lr: i64, with_residual: boolean):
    # out[lo, o, t] = theta[bias + o] + sum_i W[o, i] x[lx, i, t] (+ residual[lr, o, t]), W the (n_out, n_in)
    # matrix at theta[weight]: a work item per output feature and token
    n_in = x.shape[1]
    for o, t in iz.ndrange(out.shape[1], x.shape[2]):
        acc = theta[bias + o]
        for i in range(n_in):
            acc += theta[weight + o * n_in + i] * x[lx, i, t]
        if with_residual:
            acc += residual[lr, o, t]
        out[lo, o, t] = acc


@iz.kernel
def attention_scores(scores: Array[f64, 2], qkv: Array[f64, 3], layer: i64, heads: i64, head_dim: i64):
    # scores[first + u, j] = q_i . k_j / sqrt(head_dim) for row u = (b * heads + h) * S + i of this layer
    # (first = layer * B * heads * S) and every key j (the softmax masks j > i); q and k are the head's
    # rows of the column blocks 0 and d of qkv
    S, d = scores.shape[1], heads * head_dim
    rows = qkv.shape[2] * heads  # B * heads * S
    scale = 1.0 / iz.sqrt(float(head_dim))
    for u, j in iz.ndrange(rows, S):
        p = u // S
        i = u - p * S
        b = p // heads
        h = p - b * heads
        acc = 0.0
        for c in range(head_dim):
            acc += qkv[layer, h * head_dim + c, b * S + i] * qkv[layer, d + h * head_dim + c, b * S + j]
        scores[layer * rows + u, j] = acc * scale


@iz.kernel
def attention_softmax(probs: Array[f64, 2], scores: Array[f64, 2], first: i64, rows: i64):
    # probs[first + u, :] = the softmax of scores[first + u, j] over the keys j <= i (query i = u % S), and
    # 0 for j > i; the shift is floor of the row's maximum, an integer: a constant to AD (the example's
    # module docstring)
    S = scores.shape[1]
    for u in iz.prange(rows):
        i = u - (u // S) * S
        top = -1.0e300
        for j in range(S):  # trip counts of S, not i + 1: a reverse pass counts the runs of a loop whose
            if j <= i:      # trip count varies, and that count would be carried from row to row
                top = max(top, scores[first + u, j])
        shift = float(math.floor(top))
        z = 0.0
        for j in range(S):
            if j <= i:
                z += iz.exp(scores[first + u, j] - shift)
        rz = 1.0 / z
        for j in range(S):
            if j <= i:
                probs[first + u, j] = iz.exp(scores[first + u, j] - shift) * rz
            else:
                probs[first + u, j] = 0.0


@iz.kernel
def attention_output(att: Array[f64, 3], probs: Array[f64, 2], qkv: Array[f64, 3], layer: i64, heads: i64,
                     head_dim: i64):
    # att[layer, o, t] = sum_j p_ij v_jc for feature o = h * head_dim + c and token t = b * S + i, v the
    # head's rows of the column block 2 d of qkv: tokens fastest, so a warp reads one value of v at a time
    S, d, T = probs.shape[1], heads * head_dim, qkv.shape[2]
    first = layer * T * heads
    for o, t in iz.ndrange(d, T):
        h = o // head_dim
        b = t // S
        i = t - b * S
        row = first + (b * heads + h) * S + i
        acc = 0.0
        for j in range(S):
            acc += probs[row, j] * qkv[layer, 2 * d + o, b * S + j]
        att[layer, o, t] = acc


@iz.kernel
def gelu_pairs(act: Array[f64, 3], pre: Array[f64, 3], layer: i64):
    # act[layer] = gelu(pre[layer]), the exact (erf) GELU
    for f, t in iz.ndrange(pre.shape[1], pre.shape[2]):
        z = pre[layer, f, t]
        act[layer, f, t] = 0.5 * z * (1.0 + iz.erf(z * INV_SQRT2))


@iz.kernel
def cross_entropy_tokens(logits: Array[f64, 3], targets: Array[i64, 2]) -> f64:
    # the mean over tokens t = b * S + s of logsumexp(logits[0, :, t]) - logits[0, targets[b, s], t]
    V, T, S = logits.shape[1], logits.shape[2], targets.shape[1]
    total = 0.0
    for t in iz.prange(T):
        b = t // S
        top = -1.0e300
        for o in range(V):
            top = max(top, logits[0, o, t])
        shift = float(math.floor(top))
        z = 0.0
        for o in range(V):
            z += iz.exp(logits[0, o, t] - shift)
        total += iz.log(z) + shift - logits[0, targets[b, t - b * S], t]
    return total / T


@iz.kernel
def transformer_loss_pairs(tokens: Array[i64, 2], targets: Array[i64, 2], heads: i64, head_dim: i64, layers: i64,
                           hidden: i64, vocab: i64, theta: Array[f64]) -> f64:
    B, S = tokens.shape[0], tokens.shape[1]
    d, L, F, V, T = heads * head_dim, layers, hidden, vocab, B * S
    # theta's layout: transformer.Config.shapes in PARAMETER_NAMES order
    tok = 0
    pos = tok + V * d
    ln1_w = pos + S * d
    ln1_b = ln1_w + L * d
    attn_w = ln1_b + L * d
    attn_b = attn_w + L * 3 * d * d
    proj_w = attn_b + L * 3 * d
    proj_b = proj_w + L * d * d
    ln2_w = proj_b + L * d
    ln2_b = ln2_w + L * d
    fc1_w = ln2_b + L * d
    fc1_b = fc1_w + L * F * d
    fc2_w = fc1_b + L * F
    fc2_b = fc2_w + L * d * F
    lnf_w = fc2_b + L * d
    lnf_b = lnf_w + d
    head_w = lnf_b + d
    head_b = head_w + V * d
    assert theta.shape[0] == head_b + V, "theta must hold the parameters of these sizes"
    xs = iz.empty((L + 1, d, T), f64)  # the residual stream entering each layer, and leaving the last
    a1 = iz.empty((L, d, T), f64)
    qkv = iz.empty((L, 3 * d, T), f64)
    scores = iz.empty((L * T * heads, S), f64)  # a row per (layer, sequence, head, query)
    probs = iz.empty((L * T * heads, S), f64)
    att = iz.empty((L, d, T), f64)
    mid = iz.empty((L, d, T), f64)
    a2 = iz.empty((L, d, T), f64)
    pre = iz.empty((L, F, T), f64)
    act = iz.empty((L, F, T), f64)
    embed_pairs(xs, tokens, theta, tok, pos)
    for layer in range(L):
        layer_norm_tokens(a1, layer, xs, layer, theta, ln1_w + layer * d, ln1_b + layer * d)
        dense_pairs(qkv, layer, a1, layer, theta, attn_w + layer * 3 * d * d, attn_b + layer * 3 * d, xs, layer,
                    False)
        attention_scores(scores, qkv, layer, heads, head_dim)
        attention_softmax(probs, scores, layer * T * heads, T * heads)
        attention_output(att, probs, qkv, layer, heads, head_dim)
        dense_pairs(mid, layer, att, layer, theta, proj_w + layer * d * d, proj_b + layer * d, xs, layer, True)
        layer_norm_tokens(a2, layer, mid, layer, theta, ln2_w + layer * d, ln2_b + layer * d)
        dense_pairs(pre, layer, a2, layer, theta, fc1_w + layer * F * d, fc1_b + layer * F, mid, layer, False)
        gelu_pairs(act, pre, layer)
        dense_pairs(xs, layer + 1, act, layer, theta, fc2_w + layer * d * F, fc2_b + layer * d, mid, layer, True)
    final = iz.empty((1, d, T), f64)
    layer_norm_tokens(final, 0, xs, L, theta, lnf_w, lnf_b)
    logits = iz.empty((1, V, T), f64)
    dense_pairs(logits, 0, final, 0, theta, head_w, head_b, final, 0, False)
    return cross_entropy_tokens(logits, targets)


class GpuTrainer:
    """`transformer.Trainer` for `transformer_loss_pairs` with every array on the OpenCL device: the flat
    parameters, their gradient and Adam's moments are `iz.to_device` arrays; a step is one gradient call
    (the batch is copied in, the loss out) and one `adam_step` call, which zeroes the gradient."""

    def __init__(self, params: Any, adam: Any) -> None:
        from transformer import adam_step

        config = params.config
        self.adam, self.steps = adam, 0
        self.sizes = (config.heads, config.head_dim, config.layers, config.hidden, config.vocab)
        self.theta = iz.to_device(params.flat)
        self.grad, self.m, self.v = (iz.to_device(np.zeros_like(params.flat)) for _ in range(3))
        self._update = adam_step.compile(backend="opencl").entry

    def step(self, batch: Any) -> float:
        loss, _ = iz.autodiff(transformer_loss_pairs, batch.tokens, batch.targets, *self.sizes,
                              iz.Duplicated(self.theta, self.grad), backend="opencl")
        self.steps += 1
        a = self.adam
        self._update(self.theta, self.grad, self.m, self.v, a.lr, a.beta1, a.beta2, a.eps, self.steps)
        return loss
