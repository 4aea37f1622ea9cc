"""Other idiomatic JAX formulations of the suite's benchmarks, beside the peers of
isozyme/benchmark_suite/peer_jax.py: what `benchmarks/peer_formulations.py` times against them (issue 60).

Each alternative computes what the peer of the same benchmark computes (the same scalar objective, the same
derivative, keyed as its `JaxPeer.keys`) with other operations; `ALTERNATIVES[name]` maps a formulation's
name to its `JaxPeer` (the peer's `inputs`, `keys` and `static`, another `derivative`). The formulations:

- gmm: `nkd einsum`, ADBench's (n, K, d) layout (the strictly lower part of Q_k by
  `einsum("kab,nkb->nka")` plus the diagonal, the suite's peer until issue 60); `gemm qx-qmu`, Q_k x_i for
  every component as one (K d, d) x (d, n) matrix product and Q_k mu_k apart, their difference the centred
  product (no (K, n, d) copy of the points); `anchor`, the function of ../shared/anchors/jax_gmm.py itself
  (where that file and scipy are there);
- ba: `vmap(jacfwd)`, the 2 x 15 blocks in forward mode (15 tangents) instead of `jacrev`'s two reverse
  sweeps; `vectorized vjp`, the residuals of all observations as array operations (no `vmap`) and the two
  sweeps as one `vmap` of their pullback over the seeds (1, 0) and (0, 1); ba_sumsq: `vectorized`, the same
  array form of the residuals;
- lstm: the cell's gates as four separate operations (ADBench's) instead of one (4, b) operation; the scan
  unrolled 8 steps at a time (`lax.scan(..., unroll=8)`); the output layer and the log-sum-exp of every
  character after the scan, vectorized over the characters, the scan carrying only the layers; and the loop
  over the characters unrolled in Python under `jit` (`python loop`: only up to a trip count the caller
  chooses, `PYTHON_LOOP_LIMIT` by default, as its compilation grows faster than the trip count);
- ode_euler, ode_rk4: `lax.scan`, `lax.scan(unroll=8)`, `lax.fori_loop(unroll=8)`, and the Python loop under
  `jit` (the same limit);
- mlp: `lax.scan` over the rows of the steps gathered beforehand (`X[steps % batch]`), with `unroll=1` and
  `unroll=8`, and `lax.fori_loop(unroll=8)`;
- brusselator: the clamped neighbours by `concatenate` of slices instead of an edge `pad`;
- fft: none (`jnp.fft` is the one formulation).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import logsumexp

from isozyme.benchmark_suite import peer_jax
from isozyme.benchmark_suite.gmm_kernels import packed_lower_index
from isozyme.benchmark_suite.peer_jax import HALF_LOG_2PI, JaxPeer, decay, gradient_of

PYTHON_LOOP_LIMIT = 0
"""The longest loop unrolled in Python under `jit` that is timed by default: none. XLA's compilation grows
faster than the trip count: the gradient of 1000 explicit Euler steps unrolled was still compiling after 5
minutes on 2 (shared) cores, where the `fori_loop`'s compiles in 0.4 s; the suite's shortest loops are 255
LSTM characters and 1000 ODE steps."""
ANCHOR = Path(__file__).resolve().parents[2] / "shared" / "anchors" / "jax_gmm.py"


# -- gmm ---------------------------------------------------------------------------------------------------

def _gmm_prior(qdiag, sum_qs, lower, K, d, gamma, m, log_gamma_d):
    nu = d + m + 1
    c = nu * d * (jnp.log(gamma) - 0.5 * jnp.log(2.0)) - log_gamma_d
    frobenius = jnp.sum(qdiag * qdiag, axis=1) + jnp.sum(lower * lower, axis=1)
    return jnp.sum(0.5 * gamma * gamma * frobenius - m * sum_qs) - K * c


def gmm_loss_nkd(alphas, means, icf, x, gamma, m, log_gamma_d):
    """ADBench's JAX formulation: the points centred as (n, K, d), Q_k (x_i - mu_k) as the diagonal times
    the centred points plus `einsum("kab,nkb->nka")` of the strictly lower part."""
    (K, d), n = means.shape, x.shape[0]
    q, lower_entries = icf[:, :d], icf[:, d:]
    qdiag, sum_qs = jnp.exp(q), jnp.sum(q, axis=1)
    cols, rows = np.triu_indices(d, 1)  # icf's strictly lower entries, column by column
    lower = jnp.zeros((K, d, d), icf.dtype).at[:, rows, cols].set(lower_entries)
    centred = x[:, None, :] - means[None, :, :]                                    # (n, K, d)
    q_centred = qdiag * centred + jnp.einsum("kab,nkb->nka", lower, centred)
    main_term = alphas + sum_qs - 0.5 * jnp.sum(q_centred * q_centred, axis=2)     # (n, K)
    prior = _gmm_prior(qdiag, sum_qs, lower_entries, K, d, gamma, m, log_gamma_d)
    return -n * d * HALF_LOG_2PI + jnp.sum(logsumexp(main_term, axis=1)) - n * logsumexp(alphas) + prior


def gmm_loss_gemm(alphas, means, icf, x, gamma, m, log_gamma_d):
    """Q_k (x_i - mu_k) = Q_k x_i - Q_k mu_k: the first for all components one matrix product of the stacked
    (K d, d) factors and the (n, d) points, laid out (K, d, n); the second (K, d) apart."""
    (K, d), n = means.shape, x.shape[0]
    q, lower = icf[:, :d], icf[:, d:]
    qdiag, sum_qs = jnp.exp(q), jnp.sum(q, axis=1)
    big_q = jnp.concatenate([qdiag, lower, jnp.zeros((K, 1), icf.dtype)], axis=1)[:, packed_lower_index(d)]
    q_x = jnp.einsum("kij,nj->kin", big_q, x)                                       # (K, d, n)
    q_mu = jnp.einsum("kij,kj->ki", big_q, means)                                  # (K, d)
    q_centred = q_x - q_mu[:, :, None]
    main_term = alphas[:, None] + sum_qs[:, None] - 0.5 * jnp.sum(q_centred * q_centred, axis=1)  # (K, n)
    prior = _gmm_prior(qdiag, sum_qs, lower, K, d, gamma, m, log_gamma_d)
    return -n * d * HALF_LOG_2PI + jnp.sum(logsumexp(main_term, axis=0)) - n * logsumexp(alphas) + prior


@functools.cache
def anchor_module():
    """../shared/anchors/jax_gmm.py as a module, or None where it (or scipy, which it needs) is not there."""
    if not ANCHOR.exists() or importlib.util.find_spec("scipy") is None:
        return None
    spec = importlib.util.spec_from_file_location("anchors_jax_gmm", ANCHOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _anchor_peer() -> JaxPeer:
    """The gradient of the anchor's own objective (`objective(d, k, n, gamma, m)`, which computes its
    log-gamma constant itself, with scipy): gamma and m are static, the arrays its arguments."""
    def derivative(alphas, means, icf, x, *, gamma, m):
        (K, d), n = means.shape, x.shape[0]
        loss = _anchor_objective(d, K, n, gamma, m)
        return jax.grad(loss, argnums=(0, 1, 2))(alphas, means, icf, x)
    return JaxPeer(derivative, lambda args, seeds: args[:4], (0, 1, 2), ("gamma", "m"),
                   lambda args: {"gamma": float(args[4]), "m": int(args[5])})


@functools.cache
def _anchor_objective(d: int, K: int, n: int, gamma: float, m: int) -> Callable:
    return anchor_module().objective(d, K, n, gamma, m)


# -- ba ----------------------------------------------------------------------------------------------------

def ba_jacobian_jacfwd(cams, X, w, obs, feats):
    """The blocks by `vmap(jacfwd)`: one forward sweep per input (15) instead of one reverse per output (2)."""
    jacobian = jax.jacfwd(peer_jax.reprojection_error, argnums=(0, 1, 2))
    blocks = jax.vmap(jacobian)(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
    d_w_err = jax.vmap(jax.grad(lambda weight: 1.0 - weight * weight))(w)
    return (*blocks, d_w_err)


def reprojection_errors(cams, X, w, feats):
    """ADBench's computeReprojError of every observation as array operations (peer_torch's), row i of `cams`
    and `X` its camera and point."""
    rot, Xo = cams[:, :3], X - cams[:, 3:6]
    sqtheta = jnp.sum(rot * rot, axis=1, keepdims=True)
    nonzero = sqtheta != 0.0
    theta = jnp.sqrt(jnp.where(nonzero, sqtheta, 1.0))  # the double-where: no nan derivative at r = 0
    costheta, sintheta = jnp.cos(theta), jnp.sin(theta)
    axis = rot / theta
    rotated = (Xo * costheta + jnp.cross(axis, Xo) * sintheta
               + axis * (jnp.sum(axis * Xo, axis=1, keepdims=True) * (1.0 - costheta)))
    Xcam = jnp.where(nonzero, rotated, Xo + jnp.cross(rot, Xo))
    proj = Xcam[:, :2] / Xcam[:, 2:3]
    rsq = jnp.sum(proj * proj, axis=1, keepdims=True)
    proj = proj * (1.0 + cams[:, 9:10] * rsq + cams[:, 10:11] * rsq * rsq)
    return w[:, None] * (proj * cams[:, 6:7] + cams[:, 7:9] - feats)


def ba_jacobian_vectorized(cams, X, w, obs, feats):
    """The residuals of all observations at once and their pullback `vmap`ped over the two seeds: the
    blocks (p, 2, 11), (p, 2, 3), (p, 2) as `vmap(jacrev)` lays them out."""
    errors, pullback = jax.vjp(lambda c, x, weight: reprojection_errors(c, x, weight, feats),
                               cams[obs[:, 0]], X[obs[:, 1]], w)
    seeds = jnp.broadcast_to(jnp.eye(2, dtype=errors.dtype)[:, None, :], (2, *errors.shape))
    rows = jax.vmap(pullback)(seeds)
    d_w_err = jax.vmap(jax.grad(lambda weight: 1.0 - weight * weight))(w)
    return (*(jnp.moveaxis(block, 0, 1) for block in rows), d_w_err)


def ba_sum_of_squares_vectorized(cams, X, w, obs, feats):
    errors = reprojection_errors(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
    w_err = 1.0 - w * w
    return jnp.sum(errors * errors) + jnp.sum(w_err * w_err)


# -- lstm --------------------------------------------------------------------------------------------------

def fused_gates(x, h, cell, weights, biases):
    """peer_jax's cell: the four gates as one (4, b) operation."""
    gates = jnp.stack([x, h, x, h]) * weights + biases
    forget, ingate, outgate = jax.nn.sigmoid(gates[:3])
    new_cell = cell * forget + ingate * jnp.tanh(gates[3])
    return outgate * jnp.tanh(new_cell), new_cell


def separate_gates(x, h, cell, weights, biases):
    """ADBench's cell: each gate its own operations."""
    forget = jax.nn.sigmoid(x * weights[0] + biases[0])
    ingate = jax.nn.sigmoid(h * weights[1] + biases[1])
    outgate = jax.nn.sigmoid(x * weights[2] + biases[2])
    change = jnp.tanh(h * weights[3] + biases[3])
    new_cell = cell * forget + ingate * change
    return outgate * jnp.tanh(new_cell), new_cell


def _layers(cell_fn, weights, biases, hidden, cell, x):
    """Every layer on one character: the new hidden states and cells, and the top layer's output."""
    hiddens, cells = [], []
    for layer in range(weights.shape[0]):
        x, new_cell = cell_fn(x, hidden[layer], cell[layer], weights[layer], biases[layer])
        hiddens.append(x)
        cells.append(new_cell)
    return jnp.stack(hiddens), jnp.stack(cells), x


def _char_term(x, extra_params, following):
    ypred = x * extra_params[1] + extra_params[2]
    lse = jnp.log(jnp.sum(jnp.exp(ypred)) + 2.0)  # ADBench's "+2"
    return jnp.sum(following * (ypred - lse))


def lstm_loss_with(main_params, extra_params, state0, sequence, *, cell_fn, loop: str, unroll: int = 1):
    """The LSTM objective with `cell_fn` for a layer's cell, the characters by `loop`: "scan" (`unroll`
    steps at a time), "scan_head_after" (the scan carries the layers and yields the top layer's output; the
    output layer and log-sum-exp then run on all characters at once) or "python" (unrolled in Python)."""
    layers, (c, b) = main_params.shape[0] // 2, sequence.shape
    weights = main_params[0::2].reshape(layers, 4, b)
    biases = main_params[1::2].reshape(layers, 4, b)
    state = (state0[0::2], state0[1::2])

    def step(state, characters):
        current, following = characters
        hidden, cell, x = _layers(cell_fn, weights, biases, *state, current * extra_params[0])
        return (hidden, cell), _char_term(x, extra_params, following)

    if loop == "scan":
        _, totals = lax.scan(step, state, (sequence[:-1], sequence[1:]), unroll=unroll)
        total = jnp.sum(totals)
    elif loop == "scan_head_after":
        def layers_only(state, current):
            hidden, cell, x = _layers(cell_fn, weights, biases, *state, current * extra_params[0])
            return (hidden, cell), x
        _, outputs = lax.scan(layers_only, state, sequence[:-1], unroll=unroll)        # (c - 1, b)
        ypred = outputs * extra_params[1] + extra_params[2]
        lse = jnp.log(jnp.sum(jnp.exp(ypred), axis=1, keepdims=True) + 2.0)
        total = jnp.sum(sequence[1:] * (ypred - lse))
    else:
        total = 0.0
        for t in range(c - 1):
            state, term = step(state, (sequence[t], sequence[t + 1]))
            total = total + term
    return -total / ((c - 1) * b)


def _lstm_peer(**options) -> JaxPeer:
    return replace(peer_jax.PEERS["lstm"], derivative=gradient_of(functools.partial(lstm_loss_with, **options), 2))


# -- ode ---------------------------------------------------------------------------------------------------

def euler_step(x, dt):
    return x + dt * decay(x)


def rk4_step(x, dt):
    k1 = decay(x)
    k2 = decay(x + 0.5 * dt * k1)
    k3 = decay(x + 0.5 * dt * k2)
    k4 = decay(x + dt * k3)
    return x + dt / 6.0 * k1 + dt / 3.0 * k2 + dt / 3.0 * k3 + dt / 6.0 * k4


def integrate_with(x0, t, *, iters, step, loop: str, unroll: int = 1):
    """x(t) of the ODE by `iters` steps of `step`, looped by "scan", "fori_loop" (both `unroll` steps at a
    time) or "python"."""
    dt = t / iters
    if loop == "scan":
        x, _ = lax.scan(lambda x, _: (step(x, dt), None), x0, None, length=iters, unroll=unroll)
    elif loop == "fori_loop":
        x = lax.fori_loop(0, iters, lambda _, x: step(x, dt), x0, unroll=unroll)
    else:
        x = x0
        for _ in range(iters):
            x = step(x, dt)
    return x[0]


def _ode_peer(name: str, step: Callable, **options) -> JaxPeer:
    return replace(peer_jax.PEERS[name],
                   derivative=gradient_of(functools.partial(integrate_with, step=step, **options), 2))


# -- mlp ---------------------------------------------------------------------------------------------------

def _sgd_step(params, x, t, lr):
    W1, b1, W2, b2 = params
    h = jax.nn.sigmoid(W1 @ x + b1)
    y = jax.nn.sigmoid(W2 @ h + b2)
    delta2 = (y - t) * y * (1.0 - y)
    delta1 = (W2.T @ delta2) * h * (1.0 - h)
    return W1 - lr * jnp.outer(delta1, x), b1 - lr * delta1, W2 - lr * jnp.outer(delta2, h), b2 - lr * delta2


def mlp_loss_with(W1, b1, W2, b2, X, target, lr, *, steps, loop: str, unroll: int = 1):
    """peer_jax's MLP with the SGD steps in "scan" (over the rows X[s % batch] gathered beforehand) or
    "fori_loop", `unroll` steps at a time."""
    batch = X.shape[0]
    params = (W1, b1, W2, b2)
    if loop == "scan":
        rows = jnp.arange(steps) % batch
        params, _ = lax.scan(lambda p, xt: (_sgd_step(p, *xt, lr), None), params, (X[rows], target[rows]),
                             unroll=unroll)
    else:
        params = lax.fori_loop(0, steps, lambda s, p: _sgd_step(p, X[s % batch], target[s % batch], lr), params,
                               unroll=unroll)
    W1, b1, W2, b2 = params
    Y = jax.nn.sigmoid(jax.nn.sigmoid(X @ W1.T + b1) @ W2.T + b2)
    return jnp.mean(0.5 * jnp.sum((Y - target) ** 2, axis=1))


def _mlp_peer(**options) -> JaxPeer:
    return replace(peer_jax.PEERS["mlp"], derivative=gradient_of(functools.partial(mlp_loss_with, **options), 4))


# -- brusselator -------------------------------------------------------------------------------------------

def laplacian_by_slices(a):
    """The 5-point Laplacian with neighbours clamped at the edges, each neighbour a `concatenate` of slices."""
    up = jnp.concatenate([a[:1], a[:-1]], axis=0)
    down = jnp.concatenate([a[1:], a[-1:]], axis=0)
    right = jnp.concatenate([a[:, 1:], a[:, -1:]], axis=1)
    left = jnp.concatenate([a[:, :1], a[:, :-1]], axis=1)
    return up + down + right + left - 4.0 * a


def brusselator_loss_slices(u, v, p, t, seed_du, seed_dv):
    N = u.shape[0]
    xmin, xmax, ymin, ymax = peer_jax.BRUSSELATOR_DOMAIN
    A, B = p[0], p[1]
    dx = 1.0 / (N - 1)
    alpha = p[2] / (dx * dx)
    x = ((xmax - xmin) / (N - 1) * np.arange(N) + xmin)[:, None]
    y = ((ymax - ymin) / (N - 1) * np.arange(N) + ymin)[None, :]
    forcing = jnp.where(((x - 0.3) * (x - 0.3) + (y - 0.6) * (y - 0.6) <= 0.1 * 0.1) & (t >= 1.1), 5.0, 0.0)
    u2v = u * u * v
    du = alpha * laplacian_by_slices(u) + B + u2v - (A + 1.0) * u + forcing
    dv = alpha * laplacian_by_slices(v) + A * u - u2v
    return jnp.sum(seed_du * du) + jnp.sum(seed_dv * dv)


def _with_loss(name: str, loss: Callable, differentiated: int) -> JaxPeer:
    return replace(peer_jax.PEERS[name], derivative=gradient_of(loss, differentiated))


def alternatives() -> dict[str, dict[str, JaxPeer]]:
    """{benchmark: {formulation name: JaxPeer}} (module docstring); the anchor only where it is there."""
    ba = peer_jax.PEERS["ba"]
    table: dict[str, dict[str, JaxPeer]] = {
        "gmm": {"nkd einsum (ADBench)": _with_loss("gmm", gmm_loss_nkd, 3),
                "gemm qx-qmu": _with_loss("gmm", gmm_loss_gemm, 3)},
        "ba": {"vmap(jacfwd)": replace(ba, derivative=ba_jacobian_jacfwd),
               "vectorized vjp": replace(ba, derivative=ba_jacobian_vectorized)},
        "ba_sumsq": {"vectorized": _with_loss("ba_sumsq", ba_sum_of_squares_vectorized, 3)},
        "lstm": {"scan, separate gates": _lstm_peer(cell_fn=separate_gates, loop="scan"),
                 "scan unroll=8": _lstm_peer(cell_fn=fused_gates, loop="scan", unroll=8),
                 "scan, head after": _lstm_peer(cell_fn=fused_gates, loop="scan_head_after"),
                 "scan unroll=8, head after": _lstm_peer(cell_fn=fused_gates, loop="scan_head_after", unroll=8),
                 "python loop": _lstm_peer(cell_fn=fused_gates, loop="python")},
        "mlp": {"scan": _mlp_peer(loop="scan"), "scan unroll=8": _mlp_peer(loop="scan", unroll=8),
                "fori_loop unroll=8": _mlp_peer(loop="fori_loop", unroll=8)},
        "brusselator": {"slices": _with_loss("brusselator", brusselator_loss_slices, 3)},
        "fft": {},
    }
    for name, step in (("ode_euler", euler_step), ("ode_rk4", rk4_step)):
        table[name] = {"scan": _ode_peer(name, step, loop="scan"),
                       "scan unroll=8": _ode_peer(name, step, loop="scan", unroll=8),
                       "fori_loop unroll=8": _ode_peer(name, step, loop="fori_loop", unroll=8),
                       "python loop": _ode_peer(name, step, loop="python")}
    if anchor_module() is not None:
        table["gmm"]["anchor (shared/anchors/jax_gmm.py)"] = _anchor_peer()
    return table


PYTHON_LOOPS = {"lstm": lambda size: size["c"] - 1, "ode_euler": lambda size: size["iters"],
                "ode_rk4": lambda size: size["iters"]}
"""The trip count of the "python loop" formulations, by benchmark."""


def applies(name: str, formulation: str, size: dict, python_loop_limit: int = PYTHON_LOOP_LIMIT) -> bool:
    """Whether `formulation` of benchmark `name` is timed at `size`: the Python loops only up to
    `python_loop_limit` steps."""
    return formulation != "python loop" or PYTHON_LOOPS[name](size) <= python_loop_limit

