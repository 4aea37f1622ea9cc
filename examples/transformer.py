"""A GPT-style transformer language model trained end to end: forward, loss, gradient and Adam update
compiled by isozyme (issue 26, part 4). The gradient is isozyme's reverse mode of the loss kernel, nothing
is written by hand.

The model (pre-LayerNorm, as GPT-2), for token ids `tokens[b, s]` and next-token targets `targets[b, s]`:

    x = tok_emb[tokens] + pos_emb                              (B, S, d)
    for each of the L layers:
        x = x + proj(causal_self_attention(LN1(x)))            heads of size d / heads, softmax over j <= i
        x = x + fc2(gelu(fc1(LN2(x))))                         fc1: d -> F, gelu(z) = z (1 + erf(z / sqrt 2)) / 2
    loss = mean over (b, s) of cross_entropy(head(LNf(x)), targets)

Every dense layer is `y = x W^T + b` with W stored (out, in), as `torch.nn.Linear` stores it, so the
weights copy one to one into `torch_loss`, the same model in PyTorch, which the tests and
`benchmarks/transformer_training.py` train (`TorchTrainer`) beside this one, from the same weights on the
same batches. The
parameters of the L layers are stacked (`attn_w` is (L, 3d, d): the rows of q, then k, then v; the final
LayerNorm's and the head's, of which there is one, have a leading 1, so `dense` computes the logits too
and the reverse pass adds the head's adjoint once per two tokens); all of them
live in one flat vector (`Parameters`), of which the kernel's arguments are views, so one `adam_step` call
updates everything.

`transformer_loss` is one kernel: each stage (`layer_norm`, `dense`, `causal_attention`, `gelu`,
`cross_entropy`) is a helper kernel, inlined, whose outer loop is a `prange` over the
sequences of the batch, so each runs on every core (`iz.set_num_threads`) and, on OpenCL, as an NDRange
kernel. Activations are local arrays with a layer index and the batch index next (`a1[layer, b, s, c]`): each
element is written once, as a tensor program would, and the reverse pass reads what it needs from them (a
layer's slab is never written again, so nothing is taped for it). Why the batch index and not the token:
the reverse of a `prange` iteration adds into the adjoints of what it read, and an array a parallel loop
writes must be split between iterations by one index; the attention's iterations read whole sequences
(keys and values of every earlier position), so the index that splits every activation between
iterations, from the embedding to the loss, is the sequence's. The weights' adjoints are shared by all
iterations: each task of the thread pool adds into a copy of them, summed after the loop. The head count
is an argument with the head size (`heads * head_dim == d`, asserted): extents and trip counts then need
no division (a division may trap, so the compiler does not treat it as known when the kernel starts: a
local array sized by one would be left out of the memory plan, a loop bounded by one would need growable
tapes).

Softmax (in the attention and in the loss) subtracts a shift: `floor` of the row's maximum, as an integer.
Softmax does not depend on the shift, so its exact derivative is zero, and an integer is never active in
isozyme's AD: the reverse pass has nothing to do for it (the maximum is not differentiated through a chain
of `max`es), and every exponent is below 1, so nothing overflows. A NaN score makes the conversion raise
(`ValueError`) where PyTorch would return a NaN loss.

**Checkpointing** (what `jax.checkpoint` and `torch.utils.checkpoint` do for a block):
`transformer_loss_checkpointed` is the same model on the batch cut into `chunks` chunks of `chunk`
sequences (`Config.chunks`), each layer of each chunk two calls, `checkpointed_attention` (writes
`mid[slot]` from `xs[slot]`) and `checkpointed_mlp` (writes `xs[slot + chunks]` from `mid[slot]`), and each
chunk's loss a call of `checkpointed_head_loss` (the chunk's sum; the kernel divides the total): kernels
declared `inline=False` whose activations are local arrays of the call. Reverse mode differentiates each
call in split mode (README, "Calls that are not inlined"): the forward pass keeps only the slab the block
reads (`enzyme_ad/custom.py`: one slab of `xs` or `mid` per call, and nothing of the array it only writes),
and the reverse pass runs the block's forward again from it, then its reverse, with this block's
activations and their adjoints only. Hence the layout: a slab is a first index, so the chunk is the first
index of the residual stream (slot `layer * chunks + k` of `xs` and `mid` is chunk k entering that layer),
and the helpers loop (`prange`) over the chunk's sequences, the second index. The gradient holds one
chunk's block's activations at a time instead of every layer's, for one more forward pass per block; the
calls run one after the other (a split-mode call in a `prange` would not run in parallel), so a chunk
needs a sequence per thread or more to keep every core busy (`iz.show_memory` gives the peak with the
calls' frames; `benchmarks/transformer_training.py` measures memory and time of both). The gradients
agree to rounding.

`Trainer.step` is one training step: `iz.autodiff` of `transformer_loss` (forward, loss and reverse in one
compiled call) into the flat gradient, then `adam_step` (an isozyme kernel, `prange` over the parameters)
updates the parameters and Adam's moments and zeroes the gradient for the next step. Adam is PyTorch's
(`torch.optim.Adam`, no weight decay).

Run it: `python examples/transformer.py` (a small model, 20 steps beside PyTorch when it is installed).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

import isozyme as iz
from isozyme import Array, boolean, f64, i64

LN_EPS = 1e-5
"""LayerNorm's epsilon, PyTorch's default."""
INV_SQRT2 = 1.0 / math.sqrt(2.0)


@iz.kernel
def embed(x: Array[f64, 4], tokens: Array[i64, 2], tok_emb: Array[f64, 2], pos_emb: Array[f64, 2]):
    # x[0, b, s, :] = tok_emb[tokens[b, s], :] + pos_emb[s, :]
    for b in iz.prange(tokens.shape[0]):
        for s in range(tokens.shape[1]):
            t = tokens[b, s]
            for c in range(tok_emb.shape[1]):
                x[0, b, s, c] = tok_emb[t, c] + pos_emb[s, c]


@iz.kernel
def embed_chunk(x: Array[f64, 4], slot: i64, tokens: Array[i64, 2], first: i64, tok_emb: Array[f64, 2],
                pos_emb: Array[f64, 2]):
    # x[slot, b, s, :] = tok_emb[tokens[first + b, s], :] + pos_emb[s, :]: the x.shape[1] sequences from
    # `first` on
    for b in iz.prange(x.shape[1]):
        for s in range(x.shape[2]):
            t = tokens[first + b, s]
            for c in range(tok_emb.shape[1]):
                x[slot, b, s, c] = tok_emb[t, c] + pos_emb[s, c]


@iz.kernel
def layer_norm(out: Array[f64, 4], lo: i64, x: Array[f64, 4], lx: i64, weight: Array[f64, 2], bias: Array[f64, 2],
               layer: i64):
    # out[lo, b, s, :] = LayerNorm(x[lx, b, s, :]) with weight[layer, :], bias[layer, :] (biased variance)
    d = x.shape[3]
    for b in iz.prange(x.shape[1]):
        for s in range(x.shape[2]):
            mean = 0.0
            for c in range(d):
                mean += x[lx, b, s, c]
            mean = mean / d
            var = 0.0
            for c in range(d):
                t = x[lx, b, s, c] - mean
                var += t * t
            rstd = 1.0 / iz.sqrt(var / d + LN_EPS)
            for c in range(d):
                out[lo, b, s, c] = (x[lx, b, s, c] - mean) * rstd * weight[layer, c] + bias[layer, c]


@iz.kernel
def dense(out: Array[f64, 4], lo: i64, x: Array[f64, 4], lx: i64, W: Array[f64, 3], bias: Array[f64, 2],
          layer: i64, residual: Array[f64, 4], lr: i64, with_residual: boolean):
    # out[lo, b, s, o] = bias[layer, o] + W[layer, o, :] . x[lx, b, s, :] (+ residual[lr, b, s, o]),
    # four outputs and two tokens at a time: each weight is loaded once for two products and each input
    # once for four; the reverse pass adds into a weight's adjoint once for two products and into an
    # input's adjoint once for four (those adds, a load and a store each, are the reverse pass's traffic).
    # Eight sums, and in the reverse pass their eight adjoints, stay in registers with the four weights
    # and two inputs of a step of the inner loop on a machine with 16 vector registers (AVX2): four by
    # four needed 24 and spilled, in the forward pass the sums themselves, a store and a load in every
    # step (a 2-core AVX2 EPYC: the dense layers' gradients 20-35% slower than with four by two).
    # Outputs outside, tokens inside: the reverse pass adds into four rows of the weights' adjoint for all
    # the sequence's tokens before it moves on, so those rows stay in the L1 cache, and so do the inputs'
    # adjoints where they are small (64 tokens x 64 inputs: 32 KiB); tokens outside, the whole weight
    # adjoint went through the cache for every block of tokens (6-10% of a training step, 2-core Xeon)
    S, n_out = x.shape[2], W.shape[1]
    for b in iz.prange(x.shape[1]):
        for quad in range(n_out // 4):
            o = 4 * quad
            for pair in range(S // 2):
                s = 2 * pair
                a00 = bias[layer, o]
                a01 = a00
                a10 = bias[layer, o + 1]
                a11 = a10
                a20 = bias[layer, o + 2]
                a21 = a20
                a30 = bias[layer, o + 3]
                a31 = a30
                for i in range(W.shape[2]):
                    w0 = W[layer, o, i]
                    w1 = W[layer, o + 1, i]
                    w2 = W[layer, o + 2, i]
                    w3 = W[layer, o + 3, i]
                    x0 = x[lx, b, s, i]
                    x1 = x[lx, b, s + 1, i]
                    a00 += w0 * x0
                    a01 += w0 * x1
                    a10 += w1 * x0
                    a11 += w1 * x1
                    a20 += w2 * x0
                    a21 += w2 * x1
                    a30 += w3 * x0
                    a31 += w3 * x1
                if with_residual:
                    a00 += residual[lr, b, s, o]
                    a01 += residual[lr, b, s + 1, o]
                    a10 += residual[lr, b, s, o + 1]
                    a11 += residual[lr, b, s + 1, o + 1]
                    a20 += residual[lr, b, s, o + 2]
                    a21 += residual[lr, b, s + 1, o + 2]
                    a30 += residual[lr, b, s, o + 3]
                    a31 += residual[lr, b, s + 1, o + 3]
                out[lo, b, s, o] = a00
                out[lo, b, s + 1, o] = a01
                out[lo, b, s, o + 1] = a10
                out[lo, b, s + 1, o + 1] = a11
                out[lo, b, s, o + 2] = a20
                out[lo, b, s + 1, o + 2] = a21
                out[lo, b, s, o + 3] = a30
                out[lo, b, s + 1, o + 3] = a31
        for pair in range(S // 2):
            s = 2 * pair
            for o in range(n_out - n_out % 4, n_out):  # the last n_out % 4 outputs, one at a time
                a0 = bias[layer, o]
                a1 = a0
                for i in range(W.shape[2]):
                    w = W[layer, o, i]
                    a0 += w * x[lx, b, s, i]
                    a1 += w * x[lx, b, s + 1, i]
                if with_residual:
                    a0 += residual[lr, b, s, o]
                    a1 += residual[lr, b, s + 1, o]
                out[lo, b, s, o] = a0
                out[lo, b, s + 1, o] = a1
        for s in range(S - S % 2, S):  # the last token of an odd sequence, alone
            for o in range(W.shape[1]):
                acc = bias[layer, o]
                for i in range(W.shape[2]):
                    acc += W[layer, o, i] * x[lx, b, s, i]
                if with_residual:
                    acc += residual[lr, b, s, o]
                out[lo, b, s, o] = acc


@iz.kernel
def causal_attention(out: Array[f64, 4], probs: Array[f64, 4], scores: Array[f64, 4], qkv: Array[f64, 4],
                     layer: i64, heads: i64, head_dim: i64):
    # for batch b, head h, query i: p_ij = softmax_j(q_i . k_j / sqrt(head_dim)) over j <= i and
    # out[layer, b, i, h head_dim + c] = sum_j p_ij v_jc, with q, k, v the column blocks 0, d, 2 d of qkv
    # (the head's columns in each); probs[layer, b, h S + i, j] keeps exp(score - shift) for the reverse pass
    S, d = qkv.shape[2], out.shape[3]
    scale = 1.0 / iz.sqrt(float(head_dim))
    for b in iz.prange(qkv.shape[1]):
        for h in range(heads):
            for i in range(S):
                top = -1.0e300
                for j in range(i + 1):
                    acc = 0.0
                    for c in range(head_dim):
                        acc += qkv[layer, b, i, h * head_dim + c] * qkv[layer, b, j, d + h * head_dim + c]
                    scores[layer, b, h * S + i, j] = acc * scale
                    top = max(top, acc * scale)
                shift = float(math.floor(top))  # an integer: a constant to AD (module docstring)
                z = 0.0
                for j in range(i + 1):
                    e = iz.exp(scores[layer, b, h * S + i, j] - shift)
                    probs[layer, b, h * S + i, j] = e
                    z += e
                rz = 1.0 / z
                for c in range(head_dim):
                    out[layer, b, i, h * head_dim + c] = 0.0
                for j in range(i + 1):
                    p = probs[layer, b, h * S + i, j] * rz
                    for c in range(head_dim):
                        out[layer, b, i, h * head_dim + c] += p * qkv[layer, b, j, 2 * d + h * head_dim + c]


@iz.kernel
def gelu(act: Array[f64, 4], pre: Array[f64, 4], layer: i64):
    # act[layer, b, s, f] = gelu(pre[layer, b, s, f]), the exact (erf) GELU
    for b in iz.prange(pre.shape[1]):
        for s in range(pre.shape[2]):
            for f in range(pre.shape[3]):
                z = pre[layer, b, s, f]
                act[layer, b, s, f] = 0.5 * z * (1.0 + iz.erf(z * INV_SQRT2))


@iz.kernel
def cross_entropy_sum(logits: Array[f64, 4], targets: Array[i64, 2], first: i64) -> f64:
    # sum over tokens of logsumexp(logits[0, b, s, :]) - logits[0, b, s, targets[first + b, s]]
    V = logits.shape[3]
    total = 0.0
    for b in iz.prange(logits.shape[1]):
        row = 0.0
        for s in range(logits.shape[2]):
            top = -1.0e300
            for o in range(V):
                top = max(top, logits[0, b, s, o])
            shift = float(math.floor(top))  # an integer: a constant to AD (module docstring)
            z = 0.0
            for o in range(V):
                z += iz.exp(logits[0, b, s, o] - shift)
            row += iz.log(z) + shift - logits[0, b, s, targets[first + b, s]]
        total += row
    return total


@iz.kernel
def cross_entropy(logits: Array[f64, 4], targets: Array[i64, 2]) -> f64:
    # mean over tokens of logsumexp(logits[0, b, s, :]) - logits[0, b, s, target]
    return cross_entropy_sum(logits, targets, 0) / (logits.shape[1] * logits.shape[2])


@iz.kernel
def attention_block(xs: Array[f64, 4], layer: i64, mid: Array[f64, 4], lm: i64, a1: Array[f64, 4],
                    qkv: Array[f64, 4], probs: Array[f64, 4], scores: Array[f64, 4], att: Array[f64, 4], la: i64,
                    heads: i64, head_dim: i64, ln1_w: Array[f64, 2], ln1_b: Array[f64, 2], attn_w: Array[f64, 3],
                    attn_b: Array[f64, 2], proj_w: Array[f64, 3], proj_b: Array[f64, 2]):
    # mid[lm] = xs[layer] + proj(attention(LN1(xs[layer]))), the activations in slab `la` of a1 ... att
    layer_norm(a1, la, xs, layer, ln1_w, ln1_b, layer)
    dense(qkv, la, a1, la, attn_w, attn_b, layer, xs, layer, False)
    causal_attention(att, probs, scores, qkv, la, heads, head_dim)
    dense(mid, lm, att, la, proj_w, proj_b, layer, xs, layer, True)


@iz.kernel
def mlp_block(xs: Array[f64, 4], layer: i64, mid: Array[f64, 4], lm: i64, a2: Array[f64, 4], pre: Array[f64, 4],
              act: Array[f64, 4], la: i64, ln2_w: Array[f64, 2], ln2_b: Array[f64, 2], fc1_w: Array[f64, 3],
              fc1_b: Array[f64, 2], fc2_w: Array[f64, 3], fc2_b: Array[f64, 2]):
    # xs[layer + 1] = mid[lm] + fc2(gelu(fc1(LN2(mid[lm])))), the activations in slab `la` of a2, pre, act
    layer_norm(a2, la, mid, lm, ln2_w, ln2_b, layer)
    dense(pre, la, a2, la, fc1_w, fc1_b, layer, mid, lm, False)  # (no residual: mid, which it reads anyway)
    gelu(act, pre, la)
    dense(xs, layer + 1, act, la, fc2_w, fc2_b, layer, mid, lm, True)


@iz.kernel(inline=False)
def checkpointed_attention(xs: Array[f64, 4], slot: i64, mid: Array[f64, 4], layer: i64, heads: i64, head_dim: i64,
                           ln1_w: Array[f64, 2], ln1_b: Array[f64, 2], attn_w: Array[f64, 3], attn_b: Array[f64, 2],
                           proj_w: Array[f64, 3], proj_b: Array[f64, 2]):
    # mid[slot] = xs[slot] + proj(attention(LN1(xs[slot]))) with layer `layer`'s weights, for one chunk of
    # sequences; its activations are local arrays of this call, which reverse mode differentiates in split
    # mode (not inlined: module docstring, "Checkpointing")
    C, S, d = xs.shape[1], xs.shape[2], xs.shape[3]
    a1 = iz.empty((1, C, S, d), f64)
    qkv = iz.empty((1, C, S, 3 * d), f64)
    probs = iz.empty((1, C, heads * S, S), f64)
    scores = iz.empty((1, C, heads * S, S), f64)
    att = iz.empty((1, C, S, d), f64)
    layer_norm(a1, 0, xs, slot, ln1_w, ln1_b, layer)
    dense(qkv, 0, a1, 0, attn_w, attn_b, layer, xs, slot, False)
    causal_attention(att, probs, scores, qkv, 0, heads, head_dim)
    dense(mid, slot, att, 0, proj_w, proj_b, layer, xs, slot, True)


@iz.kernel(inline=False)
def checkpointed_mlp(mid: Array[f64, 4], slot: i64, xs: Array[f64, 4], to: i64, layer: i64, ln2_w: Array[f64, 2],
                     ln2_b: Array[f64, 2], fc1_w: Array[f64, 3], fc1_b: Array[f64, 2], fc2_w: Array[f64, 3],
                     fc2_b: Array[f64, 2]):
    # xs[to] = mid[slot] + fc2(gelu(fc1(LN2(mid[slot])))) with layer `layer`'s weights, for one chunk (as
    # `checkpointed_attention`)
    C, S, F = mid.shape[1], mid.shape[2], fc1_w.shape[1]
    a2 = iz.empty((1, C, S, mid.shape[3]), f64)
    pre = iz.empty((1, C, S, F), f64)
    act = iz.empty((1, C, S, F), f64)
    layer_norm(a2, 0, mid, slot, ln2_w, ln2_b, layer)
    dense(pre, 0, a2, 0, fc1_w, fc1_b, layer, mid, slot, False)
    gelu(act, pre, 0)
    dense(xs, to, act, 0, fc2_w, fc2_b, layer, mid, slot, True)


@iz.kernel(inline=False)
def checkpointed_head_loss(xs: Array[f64, 4], slot: i64, targets: Array[i64, 2], first: i64, lnf_w: Array[f64, 2],
                           lnf_b: Array[f64, 2], head_w: Array[f64, 3], head_b: Array[f64, 2]) -> f64:
    # the cross-entropy of head(LNf(xs[slot])) against targets[first + b, s], summed over the chunk's tokens
    # (its logits are local arrays of this call, as `checkpointed_attention`'s activations)
    C, S = xs.shape[1], xs.shape[2]
    final = iz.empty((1, C, S, xs.shape[3]), f64)
    layer_norm(final, 0, xs, slot, lnf_w, lnf_b, 0)
    logits = iz.empty((1, C, S, head_w.shape[1]), f64)
    dense(logits, 0, final, 0, head_w, head_b, 0, final, 0, False)
    return cross_entropy_sum(logits, targets, first)


@iz.kernel
def head_loss(xs: Array[f64, 4], L: i64, targets: Array[i64, 2], lnf_w: Array[f64, 2], lnf_b: Array[f64, 2],
              head_w: Array[f64, 3], head_b: Array[f64, 2]) -> f64:
    # the final LayerNorm of xs[L], the logits and the mean cross-entropy
    final = iz.empty((1, xs.shape[1], xs.shape[2], xs.shape[3]), f64)
    layer_norm(final, 0, xs, L, lnf_w, lnf_b, 0)
    logits = iz.empty((1, xs.shape[1], xs.shape[2], head_w.shape[1]), f64)
    dense(logits, 0, final, 0, head_w, head_b, 0, final, 0, False)
    return cross_entropy(logits, targets)


@iz.kernel
def transformer_loss(tokens: Array[i64, 2], targets: Array[i64, 2], heads: i64, head_dim: i64,
                     tok_emb: Array[f64, 2], pos_emb: Array[f64, 2], ln1_w: Array[f64, 2], ln1_b: Array[f64, 2],
                     attn_w: Array[f64, 3], attn_b: Array[f64, 2], proj_w: Array[f64, 3], proj_b: Array[f64, 2],
                     ln2_w: Array[f64, 2], ln2_b: Array[f64, 2], fc1_w: Array[f64, 3], fc1_b: Array[f64, 2],
                     fc2_w: Array[f64, 3], fc2_b: Array[f64, 2], lnf_w: Array[f64, 2], lnf_b: Array[f64, 2],
                     head_w: Array[f64, 3], head_b: Array[f64, 2]) -> f64:
    B, S = tokens.shape[0], tokens.shape[1]
    d, L, F = tok_emb.shape[1], attn_w.shape[0], fc1_w.shape[1]
    assert heads * head_dim == d, "heads * head_dim must equal d_model"
    xs = iz.empty((L + 1, B, S, d), f64)  # the residual stream entering each layer, and leaving the last
    a1 = iz.empty((L, B, S, d), f64)
    qkv = iz.empty((L, B, S, 3 * d), f64)
    probs = iz.empty((L, B, heads * S, S), f64)
    scores = iz.empty((L, B, heads * S, S), f64)
    att = iz.empty((L, B, S, d), f64)
    mid = iz.empty((L, B, S, d), f64)
    a2 = iz.empty((L, B, S, d), f64)
    pre = iz.empty((L, B, S, F), f64)
    act = iz.empty((L, B, S, F), f64)
    embed(xs, tokens, tok_emb, pos_emb)
    for layer in range(L):
        attention_block(xs, layer, mid, layer, a1, qkv, probs, scores, att, layer, heads, head_dim, ln1_w, ln1_b,
                        attn_w, attn_b, proj_w, proj_b)
        mlp_block(xs, layer, mid, layer, a2, pre, act, layer, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b)
    return head_loss(xs, L, targets, lnf_w, lnf_b, head_w, head_b)


@iz.kernel
def transformer_loss_checkpointed(tokens: Array[i64, 2], targets: Array[i64, 2], heads: i64, head_dim: i64,
                                  chunks: i64, chunk: i64, tok_emb: Array[f64, 2], pos_emb: Array[f64, 2],
                                  ln1_w: Array[f64, 2], ln1_b: Array[f64, 2], attn_w: Array[f64, 3],
                                  attn_b: Array[f64, 2], proj_w: Array[f64, 3], proj_b: Array[f64, 2],
                                  ln2_w: Array[f64, 2], ln2_b: Array[f64, 2], fc1_w: Array[f64, 3],
                                  fc1_b: Array[f64, 2], fc2_w: Array[f64, 3], fc2_b: Array[f64, 2],
                                  lnf_w: Array[f64, 2], lnf_b: Array[f64, 2], head_w: Array[f64, 3],
                                  head_b: Array[f64, 2]) -> f64:
    """`transformer_loss` on `chunks` chunks of `chunk` sequences, each layer of each chunk two calls,
    `checkpointed_attention` and `checkpointed_mlp`, and each chunk's loss a call of `checkpointed_head_loss`
    (module docstring, "Checkpointing")."""
    B, S = tokens.shape[0], tokens.shape[1]
    d, L = tok_emb.shape[1], attn_w.shape[0]
    assert heads * head_dim == d, "heads * head_dim must equal d_model"
    assert chunks * chunk == B, "chunks * chunk must equal the batch"
    # slab layer * chunks + k: chunk k's residual stream entering `layer` (and leaving the last, layer L)
    xs = iz.empty(((L + 1) * chunks, chunk, S, d), f64)
    mid = iz.empty((L * chunks, chunk, S, d), f64)  # between the attention and the MLP, slabs as xs
    for k in range(chunks):
        embed_chunk(xs, k, tokens, k * chunk, tok_emb, pos_emb)
    for layer in range(L):
        for k in range(chunks):  # serial: split-mode calls in a prange would not run in parallel
            slot = layer * chunks + k
            checkpointed_attention(xs, slot, mid, layer, heads, head_dim, ln1_w, ln1_b, attn_w, attn_b, proj_w,
                                   proj_b)
            checkpointed_mlp(mid, slot, xs, slot + chunks, layer, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b)
    total = 0.0
    for k in range(chunks):
        total += checkpointed_head_loss(xs, L * chunks + k, targets, k * chunk, lnf_w, lnf_b, head_w, head_b)
    return total / (B * S)


@iz.kernel
def adam_step(params: Array[f64], grad: Array[f64], m: Array[f64], v: Array[f64], lr: f64, beta1: f64,
              beta2: f64, eps: f64, step: i64):
    # torch.optim.Adam (no weight decay, not amsgrad) at step `step` (1, 2, ...); zeroes grad for the next
    # gradient, which accumulates
    bias1 = 1.0 - beta1 ** step
    root2 = iz.sqrt(1.0 - beta2 ** step)
    for i in iz.prange(params.shape[0]):
        g = grad[i]
        m[i] = beta1 * m[i] + (1.0 - beta1) * g
        v[i] = beta2 * v[i] + (1.0 - beta2) * g * g
        params[i] -= (lr / bias1) * m[i] / (iz.sqrt(v[i]) / root2 + eps)
        grad[i] = 0.0


@iz.kernel
def sgd_step(params: Array[f64], grad: Array[f64], lr: f64):
    # params -= lr grad; zeroes grad for the next gradient
    for i in iz.prange(params.shape[0]):
        params[i] -= lr * grad[i]
        grad[i] = 0.0


# --- the model's parameters and a training step ---------------------------------------------------------

PARAMETER_NAMES = ("tok_emb", "pos_emb", "ln1_w", "ln1_b", "attn_w", "attn_b", "proj_w", "proj_b", "ln2_w",
                   "ln2_b", "fc1_w", "fc1_b", "fc2_w", "fc2_b", "lnf_w", "lnf_b", "head_w", "head_b")
"""`transformer_loss`'s parameter arguments, in order."""


@dataclass(frozen=True)
class Config:
    """The model's sizes: vocabulary, d_model, heads, layers, MLP width, sequence length and batch; and the
    chunks into which `transformer_loss_checkpointed` cuts the batch (a divisor of it; `transformer_loss`
    ignores it)."""

    vocab: int = 128
    d_model: int = 64
    heads: int = 4
    layers: int = 1
    hidden: int = 256
    seq: int = 64
    batch: int = 16
    chunks: int = 1

    def __post_init__(self) -> None:
        for name in ("vocab", "d_model", "heads", "layers", "hidden", "seq", "batch", "chunks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Config.{name} must be a positive int, got {value!r}")
        if self.d_model % self.heads:
            raise ValueError(f"Config.d_model ({self.d_model}) must be a multiple of Config.heads ({self.heads})")
        if self.batch % self.chunks:
            raise ValueError(f"Config.batch ({self.batch}) must be a multiple of Config.chunks ({self.chunks})")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def size_arguments(self, kernel: iz.Kernel) -> dict[str, int]:
        """The integer arguments after the batch that `kernel` (`transformer_loss` or
        `transformer_loss_checkpointed`, built with any options) takes, by name and in order."""
        sizes = {"heads": self.heads, "head_dim": self.head_dim, "chunks": self.chunks,
                 "chunk": self.batch // self.chunks}
        names = inspect.signature(kernel.py_func).parameters
        return {name: value for name, value in sizes.items() if name in names}

    def gradient_memory(self, kernel: iz.Kernel) -> str:
        """`iz.show_memory` of the gradient of `kernel` (as `size_arguments`) in every parameter, at these
        sizes: the memory plan, its peak and the naive allocation in its header lines."""
        scalars = self.size_arguments(kernel)
        sizes = {"tokens": (self.batch, self.seq), "targets": (self.batch, self.seq), **scalars,
                 **dict(zip(PARAMETER_NAMES, self.shapes().values()))}
        activity = ("const",) * (2 + len(scalars)) + ("dup",) * len(PARAMETER_NAMES)
        return iz.show_memory(kernel, activity=activity, **sizes)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Each parameter's shape, in `PARAMETER_NAMES` order."""
        V, d, L, F, S = self.vocab, self.d_model, self.layers, self.hidden, self.seq
        return {"tok_emb": (V, d), "pos_emb": (S, d), "ln1_w": (L, d), "ln1_b": (L, d), "attn_w": (L, 3 * d, d),
                "attn_b": (L, 3 * d), "proj_w": (L, d, d), "proj_b": (L, d), "ln2_w": (L, d), "ln2_b": (L, d),
                "fc1_w": (L, F, d), "fc1_b": (L, F), "fc2_w": (L, d, F), "fc2_b": (L, d), "lnf_w": (1, d),
                "lnf_b": (1, d), "head_w": (1, V, d), "head_b": (1, V)}


class Parameters:
    """All parameters in one flat f64 vector, and `views` of it shaped as `transformer_loss` takes them."""

    def __init__(self, config: Config, flat: np.ndarray | None = None) -> None:
        self.config = config
        shapes = config.shapes()
        size = sum(math.prod(shape) for shape in shapes.values())
        if flat is None:
            flat = np.zeros(size)
        if not isinstance(flat, np.ndarray) or flat.dtype != np.float64 or flat.shape != (size,):
            raise ValueError(f"flat must be a float64 array of shape ({size},) for {config}")
        self.flat = flat
        self.views: dict[str, np.ndarray] = {}
        offset = 0
        for name, shape in shapes.items():
            count = math.prod(shape)
            self.views[name] = flat[offset:offset + count].reshape(shape)
            offset += count

    def arrays(self) -> list[np.ndarray]:
        return [self.views[name] for name in PARAMETER_NAMES]

    def copy(self) -> Parameters:
        return Parameters(self.config, self.flat.copy())


def init_parameters(config: Config, seed: int = 0) -> Parameters:
    """GPT-2's initialization: weights normal(0, 0.02), biases 0, LayerNorm weights 1 and biases 0; the
    projections into the residual stream (proj_w, fc2_w) scaled by 1/sqrt(2 L)."""
    rng = np.random.default_rng(seed)
    params = Parameters(config)
    for name, view in params.views.items():
        if name.endswith("_w") and name.startswith("ln"):
            view[...] = 1.0
        elif name in ("tok_emb", "pos_emb") or name.endswith("_w"):
            view[...] = 0.02 * rng.standard_normal(view.shape)
    for name in ("proj_w", "fc2_w"):
        params.views[name] /= math.sqrt(2.0 * config.layers)
    return params


class Batch(NamedTuple):
    tokens: np.ndarray
    targets: np.ndarray


def make_batches(config: Config, count: int, seed: int = 1) -> list[Batch]:
    """`count` batches of a noisy counting language: token t + 1 (mod vocab) follows t, except where a
    random token replaces it, so that the loss has something to learn; targets are the next tokens."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        start = rng.integers(0, config.vocab, (config.batch, 1))
        text = (start + np.arange(config.seq + 1)) % config.vocab
        noise = rng.random(text.shape) < 0.2
        text[noise] = rng.integers(0, config.vocab, int(noise.sum()))
        batches.append(Batch(np.ascontiguousarray(text[:, :-1]), np.ascontiguousarray(text[:, 1:])))
    return batches


def check_batch(config: Config, batch: Batch) -> None:
    """ValueError unless the batch has the config's shape and every id is in the vocabulary (the kernel does
    not check its indices)."""
    for name, ids in zip(("tokens", "targets"), batch):
        if not isinstance(ids, np.ndarray) or ids.dtype != np.int64 or ids.shape != (config.batch, config.seq):
            raise ValueError(f"{name} must be an int64 array of shape ({config.batch}, {config.seq})")
        if ids.size and (ids.min() < 0 or ids.max() >= config.vocab):
            raise ValueError(f"{name} must hold token ids in [0, {config.vocab})")


class Adam(NamedTuple):
    """Adam's hyperparameters (PyTorch's defaults but the learning rate)."""

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8


DEFAULT_ADAM = Adam()


class Trainer:
    """Training by isozyme: the gradient of `transformer_loss` by `iz.autodiff` into one flat gradient, and
    `adam_step` (or `sgd_step` with `sgd=True`). `loss_kernel` may be `transformer_loss` built with other
    options (`iz.kernel(fastmath=("reassoc",))(transformer_loss.py_func)`), or `transformer_loss_checkpointed` (its
    chunks: `Config.chunks`)."""

    def __init__(self, params: Parameters, adam: Adam = DEFAULT_ADAM, sgd: bool = False, backend: str | None = None,
                 loss_kernel: iz.Kernel | None = None) -> None:
        self.params, self.adam, self.sgd, self.backend = params, adam, sgd, backend
        self.loss_kernel = transformer_loss if loss_kernel is None else loss_kernel
        self.grad = Parameters(params.config)
        self.m, self.v = np.zeros_like(params.flat), np.zeros_like(params.flat)
        self.steps = 0
        config = params.config
        self._shadowed = [iz.Duplicated(p, g) for p, g in zip(params.arrays(), self.grad.arrays())]
        self._sizes = tuple(config.size_arguments(self.loss_kernel).values())
        self._update = (sgd_step if sgd else adam_step) if backend is None else \
            (sgd_step if sgd else adam_step).compile(backend=backend).entry

    def gradient(self, batch: Batch) -> float:
        """The loss at the current parameters; its gradient is added into `self.grad`."""
        loss, _ = iz.autodiff(self.loss_kernel, batch.tokens, batch.targets, *self._sizes, *self._shadowed,
                              backend=self.backend)
        return loss

    def step(self, batch: Batch) -> float:
        """One training step on `batch` (unchecked: `check_batch`); the loss before it."""
        loss = self.gradient(batch)
        self.steps += 1
        if self.sgd:
            self._update(self.params.flat, self.grad.flat, self.adam.lr)
        else:
            a = self.adam
            self._update(self.params.flat, self.grad.flat, self.m, self.v, a.lr, a.beta1, a.beta2, a.eps,
                         self.steps)
        return loss


# --- the same model in PyTorch ----------------------------------------------------------------------------

def torch_loss(params: dict, tokens, targets, heads: int):
    """`transformer_loss` in PyTorch (tensors in `params` by name, shaped as `Config.shapes` says)."""
    import torch
    import torch.nn.functional as functional

    p = params
    B, S = tokens.shape
    d = p["tok_emb"].shape[1]
    head_dim = d // heads
    x = p["tok_emb"][tokens] + p["pos_emb"][:S]
    mask = torch.ones(S, S, dtype=torch.bool, device=x.device).tril()
    for layer in range(p["attn_w"].shape[0]):
        a = functional.layer_norm(x, (d,), p["ln1_w"][layer], p["ln1_b"][layer], LN_EPS)
        q, k, v = (a @ p["attn_w"][layer].T + p["attn_b"][layer]).split(d, dim=-1)
        q, k, v = (t.view(B, S, heads, head_dim).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(head_dim)
        attended = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v
        x = x + attended.transpose(1, 2).reshape(B, S, d) @ p["proj_w"][layer].T + p["proj_b"][layer]
        a = functional.layer_norm(x, (d,), p["ln2_w"][layer], p["ln2_b"][layer], LN_EPS)
        hidden = functional.gelu(a @ p["fc1_w"][layer].T + p["fc1_b"][layer])
        x = x + hidden @ p["fc2_w"][layer].T + p["fc2_b"][layer]
    x = functional.layer_norm(x, (d,), p["lnf_w"][0], p["lnf_b"][0], LN_EPS)
    logits = x @ p["head_w"][0].T + p["head_b"][0]
    return functional.cross_entropy(logits.reshape(B * S, -1), targets.reshape(-1))


class TorchTrainer:
    """Training the same model with PyTorch: `torch_loss` (or `torch.compile` of it, `compile=True`),
    `backward`, and `torch.optim.Adam` (or SGD) with the same hyperparameters, f64, from `params`."""

    def __init__(self, params: Parameters, adam: Adam = DEFAULT_ADAM, sgd: bool = False, compile: bool = False,
                 device: str = "cpu") -> None:
        import torch

        self.torch = torch
        self.device = device
        self.heads = params.config.heads
        self.tensors = {name: torch.tensor(view, dtype=torch.float64, device=device, requires_grad=True)
                        for name, view in params.views.items()}
        values = list(self.tensors.values())
        self.optimizer = torch.optim.SGD(values, lr=adam.lr) if sgd else \
            torch.optim.Adam(values, lr=adam.lr, betas=(adam.beta1, adam.beta2), eps=adam.eps)
        self.loss = torch.compile(torch_loss) if compile else torch_loss

    def batch(self, batch: Batch) -> tuple:
        """The batch as tensors on the device (outside the timed step)."""
        return tuple(self.torch.from_numpy(ids).to(self.device) for ids in batch)

    def step(self, tokens, targets) -> float:
        """One training step on a batch made by `batch`; the loss before it."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(self.tensors, tokens, targets, self.heads)
        loss.backward()
        self.optimizer.step()
        return loss.detach()


def main() -> None:
    config = Config(vocab=32, d_model=16, heads=2, layers=2, hidden=64, seq=16, batch=4)
    params = init_parameters(config)
    batches = make_batches(config, 20)
    trainer = Trainer(params.copy(), Adam(lr=1e-2))
    losses = [trainer.step(batch) for batch in batches]
    try:
        reference = TorchTrainer(params.copy(), Adam(lr=1e-2))
    except ImportError:
        reference = None
    for step, loss in enumerate(losses):
        line = f"step {step:2d}: loss {loss:.12f}"
        if reference is not None:
            expected = float(reference.step(*reference.batch(batches[step])))
            line += f"  torch {expected:.12f}  relative difference {abs(loss - expected) / expected:.1e}"
        print(line)


if __name__ == "__main__":
    main()
