"""The PyTorch peers of every benchmark: eager `backward` of the benchmark's objective, and the same with
`torch.compile`.

The objectives are peer_jax.py's, in PyTorch, float64 (the same function as the kernel: the scalar that
isozyme's gradient differentiates, module docstring of isozyme/benchmark_suite/peers.py). Each is split into
the objective and its `unit`, the part "torch_compile" hands to `torch.compile`: the whole objective where
it is straight-line tensor code, one step where the benchmark is a loop of many steps (lstm: one character;
ode: one Euler or RK4 step; mlp: one SGD step), the loop staying in Python, as PyTorch code is compiled in
practice (dynamo would unroll the loop into one graph of thousands of steps). The derivative is
`torch.autograd.grad` of the objective (a reverse sweep through the recorded graph, the compiled parts'
AOTAutograd backward graphs included). BA's Jacobian blocks are two reverse sweeps of the reprojection
errors of all observations, each observation with its own gathered copy of its camera and point, as
isozyme's `ba_jacobian` computes them.

PyTorch runs on one thread (as isozyme's `llvm` backend and numba do; on a loaded machine its thread pool
makes small operations 10 to 20 times slower): `ISOZYME_BENCH_TORCH_THREADS` sets another count. Importing
this module sets it for the process.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from isozyme.benchmark_suite.gmm_kernels import packed_lower_index

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
ODE_DECAY = 1.2
BRUSSELATOR_DOMAIN = (0.0, 1.0, 0.0, 1.0)

torch.set_num_threads(int(os.environ.get("ISOZYME_BENCH_TORCH_THREADS", "1")))


def whole(unit: Callable, *tensors, **static):
    """The objective of a benchmark whose unit is all of it."""
    return unit(*tensors, **static)


@dataclass(frozen=True)
class TorchPeer:
    """One benchmark's PyTorch objective `objective(unit, *tensors, **static)`, `unit` the part compiled by
    "torch_compile". The first `len(keys)` tensors are differentiated (kernel parameter indices, or BA's
    block names; BA's derivative is `derivative`, not a gradient); `inputs(args, seeds)` gives the tensors'
    values from the kernel's arguments and the benchmark's seeds, `static(args)` the keyword integers."""

    unit: Callable
    inputs: Callable[[tuple, Mapping[int, np.ndarray]], tuple]
    keys: tuple[int | str, ...]
    objective: Callable = whole
    static: Callable[[tuple], dict[str, int]] = field(default=lambda args: {})
    derivative: Callable | None = None

    @functools.cached_property
    def compiled_unit(self) -> Callable:
        return torch.compile(self.unit)


# -- norm, relu3, gmm --------------------------------------------------------------------------------------

def norm_loss(x, seed_out):
    return torch.sum(seed_out * (x / torch.sqrt(torch.sum(x * x))))


def relu3_loss(x):
    return torch.sum(torch.where(x > 0.0, x**3, 0.0))


def gmm_loss(alphas, means, icf, x, gamma, m, log_gamma_d):
    """peer_jax.py's K-batched GMM objective: Q_k gathered dense (K, d, d), Q_k (x_i - mu_k) one `bmm` over
    the (K, n, d) centred points."""
    (K, d), n = means.shape, x.shape[0]
    q, lower = icf[:, :d], icf[:, d:]
    qdiag, sum_qs = torch.exp(q), torch.sum(q, dim=1)
    index = torch.from_numpy(packed_lower_index(d)).to(icf.device)
    packed = torch.cat([qdiag, lower, torch.zeros((K, 1), dtype=icf.dtype, device=icf.device)], dim=1)
    big_q = packed[:, index]                                                           # (K, d, d)
    centred = x[None, :, :] - means[:, None, :]                                        # (K, n, d)
    q_centred = torch.bmm(centred, big_q.transpose(1, 2))                              # Q_k (x_i - mu_k)
    main_term = alphas[:, None] + sum_qs[:, None] - 0.5 * torch.sum(q_centred * q_centred, dim=2)  # (K, n)
    nu = d + m + 1
    c = nu * d * (torch.log(gamma) - 0.5 * math.log(2.0)) - log_gamma_d
    frobenius = torch.sum(qdiag * qdiag, dim=1) + torch.sum(lower * lower, dim=1)
    prior = torch.sum(0.5 * gamma * gamma * frobenius - m * sum_qs) - K * c
    return (-n * d * HALF_LOG_2PI + torch.sum(torch.logsumexp(main_term, dim=0))
            - n * torch.logsumexp(alphas, dim=0) + prior)


# -- ba ----------------------------------------------------------------------------------------------------

def reprojection_errors(cams, X, w, feats):
    """ADBench's computeReprojError of every observation, row i of `cams` and `X` its camera and point."""
    rot, Xo = cams[:, :3], X - cams[:, 3:6]
    sqtheta = torch.sum(rot * rot, dim=1, keepdim=True)
    nonzero = sqtheta != 0.0
    theta = torch.sqrt(torch.where(nonzero, sqtheta, 1.0))  # the double-where: no nan derivative at r = 0
    costheta, sintheta = torch.cos(theta), torch.sin(theta)
    axis = rot / theta
    rotated = (Xo * costheta + torch.linalg.cross(axis, Xo, dim=1) * sintheta
               + axis * (torch.sum(axis * Xo, dim=1, keepdim=True) * (1.0 - costheta)))
    Xcam = torch.where(nonzero, rotated, Xo + torch.linalg.cross(rot, Xo, dim=1))
    proj = Xcam[:, :2] / Xcam[:, 2:3]
    rsq = torch.sum(proj * proj, dim=1, keepdim=True)
    proj = proj * (1.0 + cams[:, 9:10] * rsq + cams[:, 10:11] * rsq * rsq)
    return w[:, None] * (proj * cams[:, 6:7] + cams[:, 7:9] - feats)


def ba_jacobian(unit, cams, X, w, obs, feats):
    cams_obs = cams[obs[:, 0]].requires_grad_()
    X_obs = X[obs[:, 1]].requires_grad_()
    w = w.detach().requires_grad_()
    errors = unit(cams_obs, X_obs, w, feats)
    rows = []
    for r in range(2):
        seed = torch.zeros_like(errors)
        seed[:, r] = 1.0
        rows.append(torch.autograd.grad(errors, (cams_obs, X_obs, w), seed, retain_graph=r == 0))
    w_err = 1.0 - w * w
    (d_w_err,) = torch.autograd.grad(w_err, w, torch.ones_like(w_err))
    return (*(torch.stack(blocks, dim=1) for blocks in zip(*rows)), d_w_err)


def ba_sum_of_squares_loss(cams, X, w, obs, feats):
    errors = reprojection_errors(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
    w_err = 1.0 - w * w
    return torch.sum(errors * errors) + torch.sum(w_err * w_err)


# -- lstm --------------------------------------------------------------------------------------------------

def lstm_step(weights, biases, extra_params, hidden, cell, current, following):
    """One character: the layers' new hidden states and cells, and the character's term of the total."""
    x = current * extra_params[0]
    hiddens, cells = [], []
    for layer in range(weights.shape[0]):
        h = hidden[layer]
        gates = torch.stack([x, h, x, h]) * weights[layer] + biases[layer]
        forget, ingate, outgate = torch.sigmoid(gates[:3])
        new_cell = cell[layer] * forget + ingate * torch.tanh(gates[3])
        x = outgate * torch.tanh(new_cell)
        hiddens.append(x)
        cells.append(new_cell)
    ypred = x * extra_params[1] + extra_params[2]
    lse = torch.log(torch.sum(torch.exp(ypred)) + 2.0)  # ADBench's "+2"
    return torch.stack(hiddens), torch.stack(cells), torch.sum(following * (ypred - lse))


def lstm_loss(step, main_params, extra_params, state0, sequence):
    layers, (c, b) = main_params.shape[0] // 2, sequence.shape
    weights = main_params[0::2].reshape(layers, 4, b)  # forget, ingate, outgate, change
    biases = main_params[1::2].reshape(layers, 4, b)
    hidden, cell = state0[0::2], state0[1::2]
    total = 0.0
    for t in range(c - 1):
        hidden, cell, term = step(weights, biases, extra_params, hidden, cell, sequence[t], sequence[t + 1])
        total = total + term
    return -total / ((c - 1) * b)


# -- ode ---------------------------------------------------------------------------------------------------

def euler_step(x, dt):
    return x + dt * (-ODE_DECAY * x)


def rk4_step(x, dt):
    k1 = -ODE_DECAY * x
    k2 = -ODE_DECAY * (x + 0.5 * dt * k1)
    k3 = -ODE_DECAY * (x + 0.5 * dt * k2)
    k4 = -ODE_DECAY * (x + dt * k3)
    return x + dt / 6.0 * k1 + dt / 3.0 * k2 + dt / 3.0 * k3 + dt / 6.0 * k4


def integrate(step, x0, t, *, iters):
    x, dt = x0, t / iters
    for _ in range(iters):
        x = step(x, dt)
    return x[0]


# -- fft, brusselator --------------------------------------------------------------------------------------

def fft_loss(data, seed_data):
    roundtrip = torch.fft.ifft(torch.fft.fft(torch.complex(data[0::2], data[1::2])))
    return torch.sum(seed_data * torch.stack([roundtrip.real, roundtrip.imag], dim=1).reshape(-1))


def brusselator_loss(u, v, p, t, seed_du, seed_dv):
    N = u.shape[0]
    xmin, xmax, ymin, ymax = BRUSSELATOR_DOMAIN
    A, B = p[0], p[1]
    dx = 1.0 / (N - 1)
    alpha = p[2] / (dx * dx)
    grid = torch.arange(N, dtype=u.dtype, device=u.device)
    x = ((xmax - xmin) / (N - 1) * grid + xmin)[:, None]
    y = ((ymax - ymin) / (N - 1) * grid + ymin)[None, :]
    forcing = torch.where(((x - 0.3) * (x - 0.3) + (y - 0.6) * (y - 0.6) <= 0.1 * 0.1) & (t >= 1.1), 5.0, 0.0)

    def laplacian(a):
        e = F.pad(a[None, None], (1, 1, 1, 1), mode="replicate")[0, 0]  # neighbours clamped at the edges
        return e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, 2:] + e[1:-1, :-2] - 4.0 * a
    u2v = u * u * v
    du = alpha * laplacian(u) + B + u2v - (A + 1.0) * u + forcing
    dv = alpha * laplacian(v) + A * u - u2v
    return torch.sum(seed_du * du) + torch.sum(seed_dv * dv)


# -- mlp ---------------------------------------------------------------------------------------------------

def sgd_step(W1, b1, W2, b2, x, t, lr):
    h = torch.sigmoid(W1 @ x + b1)
    y = torch.sigmoid(W2 @ h + b2)
    delta2 = (y - t) * y * (1.0 - y)
    delta1 = (W2.T @ delta2) * h * (1.0 - h)
    return W1 - lr * torch.outer(delta1, x), b1 - lr * delta1, W2 - lr * torch.outer(delta2, h), b2 - lr * delta2


def mlp_loss(step, W1, b1, W2, b2, X, target, lr, *, steps):
    batch = X.shape[0]
    for s in range(steps):
        W1, b1, W2, b2 = step(W1, b1, W2, b2, X[s % batch], target[s % batch], lr)
    Y = torch.sigmoid(torch.sigmoid(X @ W1.T + b1) @ W2.T + b2)
    return torch.mean(0.5 * torch.sum((Y - target) ** 2, dim=1))


def _ode_peer(step: Callable) -> TorchPeer:
    return TorchPeer(step, lambda args, seeds: (args[0], args[1]), (0, 1), integrate,
                     lambda args: {"iters": int(args[2])})


PEERS: dict[str, TorchPeer] = {
    "norm": TorchPeer(norm_loss, lambda args, seeds: (args[1], seeds[0]), (1,)),
    "relu3": TorchPeer(relu3_loss, lambda args, seeds: (args[0],), (0,)),
    "gmm": TorchPeer(gmm_loss, lambda args, seeds: args, (0, 1, 2)),
    "gmm_reassoc": TorchPeer(gmm_loss, lambda args, seeds: args, (0, 1, 2)),
    "gmm_by_component": TorchPeer(gmm_loss, lambda args, seeds: args, (0, 1, 2)),
    "ba": TorchPeer(reprojection_errors, lambda args, seeds: args[:5], ("cams", "X", "w", "w_err"),
                    derivative=ba_jacobian),
    "ba_sumsq": TorchPeer(ba_sum_of_squares_loss, lambda args, seeds: args[:5], (0, 1, 2)),
    "lstm": TorchPeer(lstm_step, lambda args, seeds: args, (0, 1), lstm_loss),
    "ode_euler": _ode_peer(euler_step),
    "ode_rk4": _ode_peer(rk4_step),
    "fft": TorchPeer(fft_loss, lambda args, seeds: (args[0], seeds[0]), (0,)),
    "brusselator": TorchPeer(brusselator_loss, lambda args, seeds: (*args[2:6], seeds[0], seeds[1]), (2, 3, 4)),
    "mlp": TorchPeer(sgd_step, lambda args, seeds: args[:7], (0, 1, 2, 3), mlp_loss,
                     lambda args: {"steps": int(args[7])}),
}
COMPILED_PEERS = PEERS


def tensor(value: object) -> torch.Tensor:
    """A float64 (or int64) tensor of a kernel argument or seed, sharing numpy's memory where it can."""
    return torch.as_tensor(value, dtype=torch.float64 if isinstance(value, float) else None)


def prepare(name: str, args: tuple, seeds: Mapping[int, np.ndarray], compiled: bool = False
            ) -> Callable[[], tuple] | None:
    """The timed callable of benchmark `name` on `args` (None without a PyTorch peer): each call evaluates
    the objective (with its unit compiled if `compiled`) and returns its derivative."""
    peer = PEERS.get(name)
    if peer is None:
        return None
    tensors = [tensor(a) for a in peer.inputs(args, seeds)]
    static, unit = peer.static(args), peer.compiled_unit if compiled else peer.unit
    if peer.derivative is not None:
        return lambda: peer.derivative(unit, *tensors, **static)
    differentiated = [t.requires_grad_() for t in tensors[:len(peer.keys)]]

    def timed() -> tuple:
        return torch.autograd.grad(peer.objective(unit, *tensors, **static), differentiated)
    return timed


def results(name: str, value: tuple) -> dict[int | str, np.ndarray | float]:
    """What a timed call returned, as numpy by key (0-d tensors, the adjoints of scalars, as floats)."""
    return {key: (float(t) if t.ndim == 0 else t.detach().cpu().numpy().copy())
            for key, t in zip(PEERS[name].keys, value)}
