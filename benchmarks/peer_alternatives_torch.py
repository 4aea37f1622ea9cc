"""Other idiomatic PyTorch formulations of the suite's benchmarks, beside the peers of
isozyme/benchmark_suite/peer_torch.py: what `benchmarks/peer_formulations.py` times against them (issue 60).

Each alternative is a `TorchPeer` (the peer's `inputs`, `keys` and `static`, another `unit`, `objective` or
`derivative`) that computes the peer's derivative with other operations. `ALTERNATIVES[name]` maps a
formulation's name to an `Alternative`: the `TorchPeer`, and whether `torch.compile` applies to its unit
(not to the `torch.func` transforms, whose unit is one observation's function). The formulations:

- gmm: `einsum` (`torch.einsum("kij,knj->kni")` for the peer's `bmm`), `nkd einsum (ADBench)` (the
  (n, K, d) layout, the strictly lower part by `einsum("kab,nkb->nka")` plus the diagonal: the suite's peer
  until issue 60), `gemm qx-qmu` (Q_k x_i for all components as one (K d, d) x (d, n) matrix product, Q_k
  mu_k apart);
- ba: `is_grads_batched` (the two reverse sweeps as one `autograd.grad` batched over the seeds),
  `func vmap(jacrev)` and `func vmap(jacfwd)` (`torch.func` on one observation's residual, as JAX's peer);
- lstm: the gates as four separate operations (ADBench's), and the fused (4, b) gates by one `addcmul`;
- mlp: the SGD step with `addmv` and `addr` (a matrix-vector product with its bias, a rank-1 update, each
  one operation);
- fft: the complex view by `view_as_complex` / `view_as_real` (no strided copies);
- brusselator: the clamped neighbours by `cat` of slices instead of a replicate `pad`;
- the transformer (`examples/transformer.py`'s `TorchTrainer`): attention by
  `F.scaled_dot_product_attention(is_causal=True)` (`torch_loss_sdpa`), and Adam with `fused=True`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F

from isozyme.benchmark_suite import peer_torch
from isozyme.benchmark_suite.gmm_kernels import packed_lower_index
from isozyme.benchmark_suite.peer_torch import HALF_LOG_2PI, TorchPeer


@dataclass(frozen=True)
class Alternative:
    """One formulation: its `TorchPeer`, and whether `torch.compile` of its unit applies."""

    peer: TorchPeer
    compilable: bool = True


# -- gmm ---------------------------------------------------------------------------------------------------

def _gmm_prior(qdiag, sum_qs, lower, K, d, gamma, m, log_gamma_d):
    nu = d + m + 1
    c = nu * d * (torch.log(gamma) - 0.5 * math.log(2.0)) - log_gamma_d
    frobenius = torch.sum(qdiag * qdiag, dim=1) + torch.sum(lower * lower, dim=1)
    return torch.sum(0.5 * gamma * gamma * frobenius - m * sum_qs) - K * c


def _dense_q(qdiag, lower, K, d):
    index = torch.from_numpy(packed_lower_index(d)).to(qdiag.device)
    packed = torch.cat([qdiag, lower, torch.zeros((K, 1), dtype=qdiag.dtype, device=qdiag.device)], dim=1)
    return packed[:, index]                                                             # (K, d, d)


def _gmm_total(main_term, alphas, n, d, prior, dim):
    return (-n * d * HALF_LOG_2PI + torch.sum(torch.logsumexp(main_term, dim=dim))
            - n * torch.logsumexp(alphas, dim=0) + prior)


def gmm_loss_einsum(alphas, means, icf, x, gamma, m, log_gamma_d):
    """The peer's K-batched form with `einsum("kij,knj->kni")` for its `bmm`."""
    (K, d), n = means.shape, x.shape[0]
    q, lower = icf[:, :d], icf[:, d:]
    qdiag, sum_qs = torch.exp(q), torch.sum(q, dim=1)
    centred = x[None, :, :] - means[:, None, :]                                        # (K, n, d)
    q_centred = torch.einsum("kij,knj->kni", _dense_q(qdiag, lower, K, d), centred)
    main_term = alphas[:, None] + sum_qs[:, None] - 0.5 * torch.sum(q_centred * q_centred, dim=2)  # (K, n)
    prior = _gmm_prior(qdiag, sum_qs, lower, K, d, gamma, m, log_gamma_d)
    return _gmm_total(main_term, alphas, n, d, prior, 0)


def gmm_loss_nkd(alphas, means, icf, x, gamma, m, log_gamma_d):
    """ADBench's layout: the points centred as (n, K, d), the diagonal times them plus
    `einsum("kab,nkb->nka")` of the strictly lower part."""
    (K, d), n = means.shape, x.shape[0]
    q, lower_entries = icf[:, :d], icf[:, d:]
    qdiag, sum_qs = torch.exp(q), torch.sum(q, dim=1)
    cols, rows = np.triu_indices(d, 1)  # icf's strictly lower entries, column by column
    lower = torch.zeros((K, d, d), dtype=icf.dtype, device=icf.device)
    lower[:, rows, cols] = lower_entries
    centred = x[:, None, :] - means[None, :, :]                                        # (n, K, d)
    q_centred = qdiag * centred + torch.einsum("kab,nkb->nka", lower, centred)
    main_term = alphas + sum_qs - 0.5 * torch.sum(q_centred * q_centred, dim=2)        # (n, K)
    prior = _gmm_prior(qdiag, sum_qs, lower_entries, K, d, gamma, m, log_gamma_d)
    return _gmm_total(main_term, alphas, n, d, prior, 1)


def gmm_loss_gemm(alphas, means, icf, x, gamma, m, log_gamma_d):
    """Q_k (x_i - mu_k) = Q_k x_i - Q_k mu_k, the first one (K d, d) x (d, n) matrix product."""
    (K, d), n = means.shape, x.shape[0]
    q, lower = icf[:, :d], icf[:, d:]
    qdiag, sum_qs = torch.exp(q), torch.sum(q, dim=1)
    big_q = _dense_q(qdiag, lower, K, d)
    q_x = (big_q.reshape(K * d, d) @ x.T).reshape(K, d, n)
    q_mu = torch.bmm(big_q, means[:, :, None])                                         # (K, d, 1)
    q_centred = q_x - q_mu
    main_term = alphas[:, None] + sum_qs[:, None] - 0.5 * torch.sum(q_centred * q_centred, dim=1)  # (K, n)
    prior = _gmm_prior(qdiag, sum_qs, lower, K, d, gamma, m, log_gamma_d)
    return _gmm_total(main_term, alphas, n, d, prior, 0)


# -- ba ----------------------------------------------------------------------------------------------------

def _ba_observations(cams, X, w, obs):
    cams_obs = cams[obs[:, 0]].requires_grad_()
    X_obs = X[obs[:, 1]].requires_grad_()
    return cams_obs, X_obs, w.detach().requires_grad_()


def _d_w_err(w):
    w_err = 1.0 - w * w
    (d_w_err,) = torch.autograd.grad(w_err, w, torch.ones_like(w_err))
    return d_w_err


def ba_jacobian_batched_grads(unit, cams, X, w, obs, feats):
    """The two reverse sweeps as one `autograd.grad(..., is_grads_batched=True)` over the seeds."""
    cams_obs, X_obs, w = _ba_observations(cams, X, w, obs)
    errors = unit(cams_obs, X_obs, w, feats)
    eye = torch.eye(2, dtype=errors.dtype, device=errors.device)
    seeds = eye[:, None, :].expand(2, *errors.shape).contiguous()                        # (2, p, 2)
    blocks = torch.autograd.grad(errors, (cams_obs, X_obs, w), seeds, is_grads_batched=True)
    return (*(block.transpose(0, 1) for block in blocks), _d_w_err(w))


def reprojection_error(cam, X, w, feat):
    """ADBench's computeReprojError of one observation: camera (11), point (3), weight, feature (2)."""
    rot, Xo = cam[:3], X - cam[3:6]
    sqtheta = torch.dot(rot, rot)
    nonzero = sqtheta != 0.0
    theta = torch.sqrt(torch.where(nonzero, sqtheta, 1.0))  # the double-where: no nan derivative at r = 0
    costheta, sintheta = torch.cos(theta), torch.sin(theta)
    axis = rot / theta
    rotated = (Xo * costheta + torch.linalg.cross(axis, Xo) * sintheta
               + axis * (torch.dot(axis, Xo) * (1.0 - costheta)))
    Xcam = torch.where(nonzero, rotated, Xo + torch.linalg.cross(rot, Xo))
    proj = Xcam[:2] / Xcam[2]
    rsq = torch.dot(proj, proj)
    proj = proj * (1.0 + cam[9] * rsq + cam[10] * rsq * rsq)
    return w * (proj * cam[6] + cam[7:9] - feat)


def ba_jacobian_func(unit, cams, X, w, obs, feats, *, forward: bool = False):
    """`torch.func.vmap(jacrev)` (or `jacfwd`) of one observation's residual, as JAX's peer computes them."""
    jacobian = (torch.func.jacfwd if forward else torch.func.jacrev)(unit, argnums=(0, 1, 2))
    blocks = torch.func.vmap(jacobian)(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
    d_w_err = torch.func.vmap(torch.func.grad(lambda weight: 1.0 - weight * weight))(w)
    return (*blocks, d_w_err)


def ba_jacobian_jacfwd(unit, cams, X, w, obs, feats):
    return ba_jacobian_func(unit, cams, X, w, obs, feats, forward=True)


# -- lstm --------------------------------------------------------------------------------------------------

def _lstm_head(x, extra_params, following):
    ypred = x * extra_params[1] + extra_params[2]
    lse = torch.log(torch.sum(torch.exp(ypred)) + 2.0)  # ADBench's "+2"
    return torch.sum(following * (ypred - lse))


def lstm_step_separate(weights, biases, extra_params, hidden, cell, current, following):
    """peer_torch's step with ADBench's cell: each gate its own operations."""
    x = current * extra_params[0]
    hiddens, cells = [], []
    for layer in range(weights.shape[0]):
        w, b, h = weights[layer], biases[layer], hidden[layer]
        forget = torch.sigmoid(x * w[0] + b[0])
        ingate = torch.sigmoid(h * w[1] + b[1])
        outgate = torch.sigmoid(x * w[2] + b[2])
        change = torch.tanh(h * w[3] + b[3])
        new_cell = cell[layer] * forget + ingate * change
        x = outgate * torch.tanh(new_cell)
        hiddens.append(x)
        cells.append(new_cell)
    return torch.stack(hiddens), torch.stack(cells), _lstm_head(x, extra_params, following)


def lstm_step_addcmul(weights, biases, extra_params, hidden, cell, current, following):
    """peer_torch's fused (4, b) gates, their affine part one `addcmul`."""
    x = current * extra_params[0]
    hiddens, cells = [], []
    for layer in range(weights.shape[0]):
        h = hidden[layer]
        gates = torch.addcmul(biases[layer], torch.stack([x, h, x, h]), weights[layer])
        forget, ingate, outgate = torch.sigmoid(gates[:3])
        new_cell = cell[layer] * forget + ingate * torch.tanh(gates[3])
        x = outgate * torch.tanh(new_cell)
        hiddens.append(x)
        cells.append(new_cell)
    return torch.stack(hiddens), torch.stack(cells), _lstm_head(x, extra_params, following)


# -- mlp ---------------------------------------------------------------------------------------------------

def sgd_step_fused(W1, b1, W2, b2, x, t, lr):
    """peer_torch's SGD step with `addmv` (product and bias) and `addr` (the rank-1 updates)."""
    h = torch.sigmoid(torch.addmv(b1, W1, x))
    y = torch.sigmoid(torch.addmv(b2, W2, h))
    delta2 = (y - t) * y * (1.0 - y)
    delta1 = torch.mv(W2.T, delta2) * h * (1.0 - h)
    step1, step2 = -lr * delta1, -lr * delta2
    return torch.addr(W1, step1, x), b1 + step1, torch.addr(W2, step2, h), b2 + step2


# -- fft, brusselator --------------------------------------------------------------------------------------

def fft_loss_view(data, seed_data):
    """The interleaved data viewed as complex (`view_as_complex`) and the result back (`view_as_real`)."""
    roundtrip = torch.fft.ifft(torch.fft.fft(torch.view_as_complex(data.view(-1, 2))))
    return torch.sum(seed_data * torch.view_as_real(roundtrip).reshape(-1))


def laplacian_by_slices(a):
    up = torch.cat([a[:1], a[:-1]], dim=0)
    down = torch.cat([a[1:], a[-1:]], dim=0)
    right = torch.cat([a[:, 1:], a[:, -1:]], dim=1)
    left = torch.cat([a[:, :1], a[:, :-1]], dim=1)
    return up + down + right + left - 4.0 * a


def brusselator_loss_slices(u, v, p, t, seed_du, seed_dv):
    N = u.shape[0]
    xmin, xmax, ymin, ymax = peer_torch.BRUSSELATOR_DOMAIN
    A, B = p[0], p[1]
    dx = 1.0 / (N - 1)
    alpha = p[2] / (dx * dx)
    grid = torch.arange(N, dtype=u.dtype, device=u.device)
    x = ((xmax - xmin) / (N - 1) * grid + xmin)[:, None]
    y = ((ymax - ymin) / (N - 1) * grid + ymin)[None, :]
    forcing = torch.where(((x - 0.3) * (x - 0.3) + (y - 0.6) * (y - 0.6) <= 0.1 * 0.1) & (t >= 1.1), 5.0, 0.0)
    u2v = u * u * v
    du = alpha * laplacian_by_slices(u) + B + u2v - (A + 1.0) * u + forcing
    dv = alpha * laplacian_by_slices(v) + A * u - u2v
    return torch.sum(seed_du * du) + torch.sum(seed_dv * dv)


# -- the transformer ---------------------------------------------------------------------------------------

def torch_loss_sdpa(params: dict, tokens, targets, heads: int, ln_eps: float):
    """`examples/transformer.py`'s `torch_loss` with its attention by `scaled_dot_product_attention`."""
    p = params
    B, S = tokens.shape
    d = p["tok_emb"].shape[1]
    head_dim = d // heads
    x = p["tok_emb"][tokens] + p["pos_emb"][:S]
    for layer in range(p["attn_w"].shape[0]):
        a = F.layer_norm(x, (d,), p["ln1_w"][layer], p["ln1_b"][layer], ln_eps)
        q, k, v = (a @ p["attn_w"][layer].T + p["attn_b"][layer]).split(d, dim=-1)
        q, k, v = (t.view(B, S, heads, head_dim).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + attended.transpose(1, 2).reshape(B, S, d) @ p["proj_w"][layer].T + p["proj_b"][layer]
        a = F.layer_norm(x, (d,), p["ln2_w"][layer], p["ln2_b"][layer], ln_eps)
        hidden = F.gelu(a @ p["fc1_w"][layer].T + p["fc1_b"][layer])
        x = x + hidden @ p["fc2_w"][layer].T + p["fc2_b"][layer]
    x = F.layer_norm(x, (d,), p["lnf_w"][0], p["lnf_b"][0], ln_eps)
    logits = x @ p["head_w"][0].T + p["head_b"][0]
    return F.cross_entropy(logits.reshape(B * S, -1), targets.reshape(-1))


def _with(name: str, compilable: bool = True, **fields: Callable) -> Alternative:
    return Alternative(replace(peer_torch.PEERS[name], **fields), compilable)


ALTERNATIVES: dict[str, dict[str, Alternative]] = {
    "gmm": {"einsum": _with("gmm", unit=gmm_loss_einsum), "nkd einsum (ADBench)": _with("gmm", unit=gmm_loss_nkd),
            "gemm qx-qmu": _with("gmm", unit=gmm_loss_gemm)},
    "ba": {"is_grads_batched": _with("ba", derivative=ba_jacobian_batched_grads),
           "func vmap(jacrev)": _with("ba", False, unit=reprojection_error, derivative=ba_jacobian_func),
           "func vmap(jacfwd)": _with("ba", False, unit=reprojection_error, derivative=ba_jacobian_jacfwd)},
    "ba_sumsq": {},
    "lstm": {"separate gates": _with("lstm", unit=lstm_step_separate),
             "addcmul gates": _with("lstm", unit=lstm_step_addcmul)},
    "mlp": {"addmv/addr": _with("mlp", unit=sgd_step_fused)},
    "ode_euler": {}, "ode_rk4": {},
    "fft": {"view_as_complex": _with("fft", unit=fft_loss_view)},
    "brusselator": {"slices": _with("brusselator", unit=brusselator_loss_slices)},
}
