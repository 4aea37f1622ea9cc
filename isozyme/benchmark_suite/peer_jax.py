"""The JAX peer of every benchmark: `jax.jit(jax.grad(loss))` of the benchmark's objective in `jax.numpy`.

Each loss is the function its kernel computes, written the way a JAX user would write it (vectorized, no
element loops): the scalar that isozyme's gradient differentiates, `seed_return * return_value +
sum(<seed, output>)` over the written outputs (`objective` in isozyme/benchmark_suite/__init__.py). Its first
arguments are the kernel parameters differentiated (the "dup" and "active" ones the kernel reads, in
parameter order: `JaxPeer.keys`), then the constants (the other inputs and the seeds), then, as keywords,
the integers that fix shapes or trip counts (static under `jax.jit`). Float64 throughout: importing this
module turns on `jax_enable_x64` for the process.

Where a loss is written differently from its kernel (same function, other operations):
- gmm: the K-batched formulation of ../shared/anchors/jax_gmm.py (the fastest JAX GMM we know: 1.5-2x
  ADBench's (n, K, d) einsum): dense Q_k gathered per component, Q_k (x_i - mu_k) one batched matmul over
  the (K, n, d) centred points, `logsumexp` over the components;
- ba: the Jacobian blocks, as ADBench's driver computes them, by `vmap(jacrev(reprojection error))` over
  the observations (`jacrev` of a 2-vector: two reverse sweeps), and `vmap(grad)` of the weight error;
  ba_sumsq: the sum of squares with cameras and points gathered per observation (scatter-add in reverse);
- lstm: `lax.scan` over the characters, the four gates of a layer as one (4, b) operation;
- ode: `lax.fori_loop` with a static trip count (so a scan, reverse-differentiable);
- fft: `jnp.fft.fft` then `jnp.fft.ifft` on the complex view of the interleaved data, not the radix-2 loops;
- brusselator: the Laplacian by edge padding;
- mlp: the SGD steps in `lax.fori_loop`, each a matrix-vector forward and backward pass.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import logsumexp

from isozyme.benchmark_suite.gmm_kernels import packed_lower_index

jax.config.update("jax_enable_x64", True)

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
ODE_DECAY = 1.2                     # isozyme/benchmark_suite/ode.py's DECAY
BRUSSELATOR_DOMAIN = (0.0, 1.0, 0.0, 1.0)  # brusselator.py's XMIN, XMAX, YMIN, YMAX


@dataclass(frozen=True)
class JaxPeer:
    """One benchmark's JAX derivative. `derivative(*arrays, **static)` returns one array per entry of `keys`
    (kernel parameter indices, or BA's block names); `inputs(args, seeds)` gives its arrays from the
    kernel's arguments and the benchmark's seeds; `static(args)` its keyword integers, named
    `static_names`."""

    derivative: Callable[..., tuple]
    inputs: Callable[[tuple, Mapping[int, np.ndarray]], tuple]
    keys: tuple[int | str, ...]
    static_names: tuple[str, ...] = ()
    static: Callable[[tuple], dict[str, int]] = field(default=lambda args: {})

    @functools.cached_property
    def compiled(self) -> Callable[..., tuple]:
        """The jitted derivative, one per benchmark (JAX caches its compilations per shape and static)."""
        return jax.jit(self.derivative, static_argnames=self.static_names)


def gradient_of(loss: Callable[..., jax.Array], differentiated: int) -> Callable[..., tuple]:
    """`jax.grad` of `loss` with respect to its first `differentiated` arguments."""
    return jax.grad(loss, argnums=tuple(range(differentiated)))


# -- norm, relu3 -------------------------------------------------------------------------------------------

def norm_loss(x, seed_out):
    return jnp.sum(seed_out * (x / jnp.sqrt(jnp.sum(x * x))))


def relu3_loss(x):
    return jnp.sum(jnp.where(x > 0.0, x**3, 0.0))


# -- gmm ---------------------------------------------------------------------------------------------------

def gmm_loss(alphas, means, icf, x, gamma, m, log_gamma_d):
    """ADBench's GMM objective in the K-batched form of ../shared/anchors/jax_gmm.py: Q_k gathered dense
    (K, d, d), the points centred per component (K, n, d), and Q_k (x_i - mu_k) one batched matmul."""
    (K, d), n = means.shape, x.shape[0]
    q, lower = icf[:, :d], icf[:, d:]
    qdiag, sum_qs = jnp.exp(q), jnp.sum(q, axis=1)
    big_q = jnp.concatenate([qdiag, lower, jnp.zeros((K, 1), icf.dtype)], axis=1)[:, packed_lower_index(d)]
    centred = x[None, :, :] - means[:, None, :]                                    # (K, n, d)
    q_centred = jnp.einsum("kij,knj->kni", big_q, centred)                         # Q_k (x_i - mu_k)
    main_term = alphas[:, None] + sum_qs[:, None] - 0.5 * jnp.sum(q_centred * q_centred, axis=2)  # (K, n)
    nu = d + m + 1
    c = nu * d * (jnp.log(gamma) - 0.5 * jnp.log(2.0)) - log_gamma_d
    frobenius = jnp.sum(qdiag * qdiag, axis=1) + jnp.sum(lower * lower, axis=1)
    prior = jnp.sum(0.5 * gamma * gamma * frobenius - m * sum_qs) - K * c
    return -n * d * HALF_LOG_2PI + jnp.sum(logsumexp(main_term, axis=0)) - n * logsumexp(alphas) + prior


# -- ba ----------------------------------------------------------------------------------------------------

def reprojection_error(cam, X, w, feat):
    """ADBench's computeReprojError for one camera (11), point (3), weight and feature (2)."""
    rot, Xo = cam[:3], X - cam[3:6]
    sqtheta = jnp.dot(rot, rot)
    nonzero = sqtheta != 0.0
    theta = jnp.sqrt(jnp.where(nonzero, sqtheta, 1.0))  # the double-where: no nan derivative at r = 0
    costheta, sintheta = jnp.cos(theta), jnp.sin(theta)
    axis = rot / theta
    rotated = Xo * costheta + jnp.cross(axis, Xo) * sintheta + axis * (jnp.dot(axis, Xo) * (1.0 - costheta))
    Xcam = jnp.where(nonzero, rotated, Xo + jnp.cross(rot, Xo))
    proj = Xcam[:2] / Xcam[2]
    rsq = jnp.dot(proj, proj)
    proj = proj * (1.0 + cam[9] * rsq + cam[10] * rsq * rsq)
    return w * (proj * cam[6] + cam[7:9] - feat)


def ba_jacobian(cams, X, w, obs, feats):
    blocks = jax.vmap(jax.jacrev(reprojection_error, argnums=(0, 1, 2)))(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
    d_w_err = jax.vmap(jax.grad(lambda weight: 1.0 - weight * weight))(w)
    return (*blocks, d_w_err)


def ba_sum_of_squares_loss(cams, X, w, obs, feats):
    errors = jax.vmap(reprojection_error)(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
    w_err = 1.0 - w * w
    return jnp.sum(errors * errors) + jnp.sum(w_err * w_err)


# -- lstm --------------------------------------------------------------------------------------------------

def lstm_loss(main_params, extra_params, state0, sequence):
    layers, (c, b) = main_params.shape[0] // 2, sequence.shape
    weights = main_params[0::2].reshape(layers, 4, b)  # forget, ingate, outgate, change
    biases = main_params[1::2].reshape(layers, 4, b)

    def step(state, characters):
        hidden, cell = state
        current, following = characters
        x = current * extra_params[0]
        hiddens, cells = [], []
        for layer in range(layers):
            h = hidden[layer]
            gates = jnp.stack([x, h, x, h]) * weights[layer] + biases[layer]
            forget, ingate, outgate = jax.nn.sigmoid(gates[:3])
            new_cell = cell[layer] * forget + ingate * jnp.tanh(gates[3])
            x = outgate * jnp.tanh(new_cell)
            hiddens.append(x)
            cells.append(new_cell)
        ypred = x * extra_params[1] + extra_params[2]
        lse = jnp.log(jnp.sum(jnp.exp(ypred)) + 2.0)  # ADBench's "+2"
        return (jnp.stack(hiddens), jnp.stack(cells)), jnp.sum(following * (ypred - lse))

    _, totals = lax.scan(step, (state0[0::2], state0[1::2]), (sequence[:-1], sequence[1:]))
    return -jnp.sum(totals) / ((c - 1) * b)


# -- ode ---------------------------------------------------------------------------------------------------

def decay(x):
    return -ODE_DECAY * x


def euler_loss(x0, t, *, iters):
    dt = t / iters
    return lax.fori_loop(0, iters, lambda step, x: x + dt * decay(x), x0)[0]


def rk4_loss(x0, t, *, iters):
    dt = t / iters

    def step(_, x):
        k1 = decay(x)
        k2 = decay(x + 0.5 * dt * k1)
        k3 = decay(x + 0.5 * dt * k2)
        k4 = decay(x + dt * k3)
        return x + dt / 6.0 * k1 + dt / 3.0 * k2 + dt / 3.0 * k3 + dt / 6.0 * k4
    return lax.fori_loop(0, iters, step, x0)[0]


# -- fft ---------------------------------------------------------------------------------------------------

def fft_loss(data, seed_data):
    roundtrip = jnp.fft.ifft(jnp.fft.fft(lax.complex(data[0::2], data[1::2])))
    return jnp.sum(seed_data * jnp.stack([roundtrip.real, roundtrip.imag], axis=1).ravel())


# -- brusselator -------------------------------------------------------------------------------------------

def brusselator_loss(u, v, p, t, seed_du, seed_dv):
    N = u.shape[0]
    xmin, xmax, ymin, ymax = BRUSSELATOR_DOMAIN
    A, B = p[0], p[1]
    dx = 1.0 / (N - 1)
    alpha = p[2] / (dx * dx)
    x = ((xmax - xmin) / (N - 1) * np.arange(N) + xmin)[:, None]
    y = ((ymax - ymin) / (N - 1) * np.arange(N) + ymin)[None, :]
    forcing = jnp.where(((x - 0.3) * (x - 0.3) + (y - 0.6) * (y - 0.6) <= 0.1 * 0.1) & (t >= 1.1), 5.0, 0.0)

    def laplacian(a):
        e = jnp.pad(a, 1, mode="edge")  # neighbours clamped at the edges
        return e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, 2:] + e[1:-1, :-2] - 4.0 * a
    u2v = u * u * v
    du = alpha * laplacian(u) + B + u2v - (A + 1.0) * u + forcing
    dv = alpha * laplacian(v) + A * u - u2v
    return jnp.sum(seed_du * du) + jnp.sum(seed_dv * dv)


# -- mlp ---------------------------------------------------------------------------------------------------

def mlp_loss(W1, b1, W2, b2, X, target, lr, *, steps):
    batch = X.shape[0]

    def sgd_step(step, params):
        W1, b1, W2, b2 = params
        x, t = X[step % batch], target[step % batch]
        h = jax.nn.sigmoid(W1 @ x + b1)
        y = jax.nn.sigmoid(W2 @ h + b2)
        delta2 = (y - t) * y * (1.0 - y)
        delta1 = (W2.T @ delta2) * h * (1.0 - h)
        return W1 - lr * jnp.outer(delta1, x), b1 - lr * delta1, W2 - lr * jnp.outer(delta2, h), b2 - lr * delta2

    W1, b1, W2, b2 = lax.fori_loop(0, steps, sgd_step, (W1, b1, W2, b2))
    Y = jax.nn.sigmoid(jax.nn.sigmoid(X @ W1.T + b1) @ W2.T + b2)
    return jnp.mean(0.5 * jnp.sum((Y - target) ** 2, axis=1))


def _ode_peer(loss: Callable) -> JaxPeer:
    return JaxPeer(gradient_of(loss, 2), lambda args, seeds: (args[0], args[1]), (0, 1), ("iters",),
                   lambda args: {"iters": int(args[2])})


PEERS: dict[str, JaxPeer] = {
    "norm": JaxPeer(gradient_of(norm_loss, 1), lambda args, seeds: (args[1], seeds[0]), (1,)),
    "relu3": JaxPeer(gradient_of(relu3_loss, 1), lambda args, seeds: (args[0],), (0,)),
    "gmm": JaxPeer(gradient_of(gmm_loss, 3), lambda args, seeds: args, (0, 1, 2)),
    "gmm_reassoc": JaxPeer(gradient_of(gmm_loss, 3), lambda args, seeds: args, (0, 1, 2)),
    "gmm_by_component": JaxPeer(gradient_of(gmm_loss, 3), lambda args, seeds: args, (0, 1, 2)),
    "ba": JaxPeer(ba_jacobian, lambda args, seeds: args[:5], ("cams", "X", "w", "w_err")),
    "ba_sumsq": JaxPeer(gradient_of(ba_sum_of_squares_loss, 3), lambda args, seeds: args[:5], (0, 1, 2)),
    "lstm": JaxPeer(gradient_of(lstm_loss, 2), lambda args, seeds: args, (0, 1)),
    "ode_euler": _ode_peer(euler_loss),
    "ode_rk4": _ode_peer(rk4_loss),
    "fft": JaxPeer(gradient_of(fft_loss, 1), lambda args, seeds: (args[0], seeds[0]), (0,)),
    "brusselator": JaxPeer(gradient_of(brusselator_loss, 3),
                           lambda args, seeds: (*args[2:6], seeds[0], seeds[1]), (2, 3, 4)),
    "mlp": JaxPeer(gradient_of(mlp_loss, 4), lambda args, seeds: args[:7], (0, 1, 2, 3), ("steps",),
                   lambda args: {"steps": int(args[7])}),
}


def prepare(name: str, args: tuple, seeds: Mapping[int, np.ndarray]) -> Callable[[], tuple] | None:
    """The timed callable of benchmark `name` on `args` (None if it has no JAX peer): the inputs are device
    arrays already; each call runs the jitted derivative and blocks until its result is ready."""
    peer = PEERS.get(name)
    if peer is None:
        return None
    arrays = tuple(jnp.asarray(a) for a in peer.inputs(args, seeds))
    static, compiled = peer.static(args), peer.compiled
    return lambda: jax.block_until_ready(compiled(*arrays, **static))


def results(name: str, value: tuple) -> dict[int | str, np.ndarray | float]:
    """What a timed call returned, as numpy by key (0-d arrays, the adjoints of scalars, as floats)."""
    return {key: (float(array) if np.ndim(array) == 0 else np.asarray(array))
            for key, array in zip(PEERS[name].keys, value)}
