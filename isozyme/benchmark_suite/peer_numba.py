"""The numba peer: the primal of each benchmark as `@numba.njit` of its kernel's loops.

Every function takes the kernel's arguments, in its parameter order, and is its kernel loop for loop (same
helper functions, local arrays, order of operations), `iz.<f>` read as `math.<f>` and `iz.empty` as
`np.empty`. norm and gmm are isozyme/benchmark_suite/numba_peers.py's (the llvm_backend benchmark's), reused. numba's
defaults (no fast-math, no bounds checks), as isozyme's `llvm` backend. Compiled on the first call.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numba import njit

from isozyme.benchmark_suite import numba_peers

ODE_DECAY = 1.2
BRUSSELATOR_DOMAIN = (0.0, 1.0, 0.0, 1.0)


@njit
def relu3_sum(x):
    s = 0.0
    for i in range(len(x)):
        xi = x[i]
        if xi > 0.0:
            s += xi * xi * xi
    return s


# -- ba ----------------------------------------------------------------------------------------------------

@njit
def rodrigues_rotate_point(rot, r, pt, rotated):
    sqtheta = rot[r, 0] * rot[r, 0] + rot[r, 1] * rot[r, 1] + rot[r, 2] * rot[r, 2]
    if sqtheta != 0.0:
        theta = math.sqrt(sqtheta)
        costheta = math.cos(theta)
        sintheta = math.sin(theta)
        theta_inverse = 1.0 / theta
        w0 = rot[r, 0] * theta_inverse
        w1 = rot[r, 1] * theta_inverse
        w2 = rot[r, 2] * theta_inverse
        tmp = (w0 * pt[0] + w1 * pt[1] + w2 * pt[2]) * (1.0 - costheta)
        rotated[0] = pt[0] * costheta + (w1 * pt[2] - w2 * pt[1]) * sintheta + w0 * tmp
        rotated[1] = pt[1] * costheta + (w2 * pt[0] - w0 * pt[2]) * sintheta + w1 * tmp
        rotated[2] = pt[2] * costheta + (w0 * pt[1] - w1 * pt[0]) * sintheta + w2 * tmp
    else:
        rotated[0] = pt[0] + (rot[r, 1] * pt[2] - rot[r, 2] * pt[1])
        rotated[1] = pt[1] + (rot[r, 2] * pt[0] - rot[r, 0] * pt[2])
        rotated[2] = pt[2] + (rot[r, 0] * pt[1] - rot[r, 1] * pt[0])


@njit
def radial_distort(cams, c, proj):
    rsq = proj[0] * proj[0] + proj[1] * proj[1]
    L = 1.0 + cams[c, 9] * rsq + cams[c, 10] * rsq * rsq
    proj[0] = proj[0] * L
    proj[1] = proj[1] * L


@njit
def project(cams, c, X, pt, proj):
    Xo = np.empty(3, np.float64)
    Xcam = np.empty(3, np.float64)
    for j in range(3):
        Xo[j] = X[pt, j] - cams[c, 3 + j]
    rodrigues_rotate_point(cams, c, Xo, Xcam)
    proj[0] = Xcam[0] / Xcam[2]
    proj[1] = Xcam[1] / Xcam[2]
    radial_distort(cams, c, proj)
    proj[0] = proj[0] * cams[c, 6] + cams[c, 7]
    proj[1] = proj[1] * cams[c, 6] + cams[c, 8]


@njit
def compute_reproj_error(cams, c, X, pt, w, i, feats, err):
    proj = np.empty(2, np.float64)
    project(cams, c, X, pt, proj)
    err[i, 0] = w[i] * (proj[0] - feats[i, 0])
    err[i, 1] = w[i] * (proj[1] - feats[i, 1])


@njit
def ba_objective(cams, X, w, obs, feats, reproj_err, w_err):
    p = len(w)
    for i in range(p):
        compute_reproj_error(cams, obs[i, 0], X, obs[i, 1], w, i, feats, reproj_err)
    for i in range(p):
        w_err[i] = 1.0 - w[i] * w[i]


@njit
def ba_sum_of_squares(cams, X, w, obs, feats, reproj_err, w_err):
    ba_objective(cams, X, w, obs, feats, reproj_err, w_err)
    s = 0.0
    for i in range(len(w)):
        s += reproj_err[i, 0] * reproj_err[i, 0] + reproj_err[i, 1] * reproj_err[i, 1] + w_err[i] * w_err[i]
    return s


# -- lstm --------------------------------------------------------------------------------------------------

@njit
def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


@njit
def lstm_logsumexp(v):
    s = 0.0
    for i in range(len(v)):
        s += math.exp(v[i])
    s += 2.0
    return math.log(s)


@njit
def lstm_model(params, layer, state, x):
    b = len(x)
    w, bias, hidden, cell = 2 * layer, 2 * layer + 1, 2 * layer, 2 * layer + 1
    for i in range(b):
        forget = sigmoid(x[i] * params[w, i] + params[bias, i])
        ingate = sigmoid(state[hidden, i] * params[w, b + i] + params[bias, b + i])
        outgate = sigmoid(x[i] * params[w, 2 * b + i] + params[bias, 2 * b + i])
        change = math.tanh(state[hidden, i] * params[w, 3 * b + i] + params[bias, 3 * b + i])
        state[cell, i] = state[cell, i] * forget + ingate * change
        state[hidden, i] = outgate * math.tanh(state[cell, i])


@njit
def lstm_predict(main_params, extra_params, state, sequence, t, x, output):
    b = len(output)
    for i in range(b):
        x[i] = sequence[t, i] * extra_params[0, i]
    for layer in range(main_params.shape[0] // 2):
        lstm_model(main_params, layer, state, x)
        for i in range(b):
            x[i] = state[2 * layer, i]
    for i in range(b):
        output[i] = x[i] * extra_params[1, i] + extra_params[2, i]


@njit
def lstm_objective(main_params, extra_params, state0, sequence):
    c, b = sequence.shape[0], sequence.shape[1]
    state = np.empty((state0.shape[0], b), np.float64)
    for k in range(state0.shape[0]):
        for i in range(b):
            state[k, i] = state0[k, i]
    x = np.empty(b, np.float64)
    ypred = np.empty(b, np.float64)
    total = 0.0
    count = 0
    for t in range(c - 1):
        lstm_predict(main_params, extra_params, state, sequence, t, x, ypred)
        lse = lstm_logsumexp(ypred)
        for i in range(b):
            total += sequence[t + 1, i] * (ypred[i] - lse)
        count += b
    return -total / count


# -- ode ---------------------------------------------------------------------------------------------------

@njit
def decay_rhs(dxdt, x, t):
    for i in range(len(x)):
        dxdt[i] = -ODE_DECAY * x[i]


@njit
def euler_step(x, dxdt, t, dt):
    decay_rhs(dxdt, x, t)
    for i in range(len(x)):
        x[i] += dt * dxdt[i]


@njit
def rk4_step(x, k1, k2, k3, k4, xt, t, dt):
    n = len(x)
    decay_rhs(k1, x, t)
    for i in range(n):
        xt[i] = x[i] + 0.5 * dt * k1[i]
    decay_rhs(k2, xt, t + 0.5 * dt)
    for i in range(n):
        xt[i] = x[i] + 0.5 * dt * k2[i]
    decay_rhs(k3, xt, t + 0.5 * dt)
    for i in range(n):
        xt[i] = x[i] + dt * k3[i]
    decay_rhs(k4, xt, t + dt)
    for i in range(n):
        x[i] += dt / 6.0 * k1[i] + dt / 3.0 * k2[i] + dt / 3.0 * k3[i] + dt / 6.0 * k4[i]


@njit
def integrate_euler(x0, t, iters):
    n = len(x0)
    x = np.empty(n, np.float64)
    dxdt = np.empty(n, np.float64)
    for i in range(n):
        x[i] = x0[i]
    dt = t / iters
    for step in range(iters):
        euler_step(x, dxdt, step * dt, dt)
    return x[0]


@njit
def integrate_rk4(x0, t, iters):
    n = len(x0)
    x = np.empty(n, np.float64)
    k1 = np.empty(n, np.float64)
    k2 = np.empty(n, np.float64)
    k3 = np.empty(n, np.float64)
    k4 = np.empty(n, np.float64)
    xt = np.empty(n, np.float64)
    for i in range(n):
        x[i] = x0[i]
    dt = t / iters
    for step in range(iters):
        rk4_step(x, k1, k2, k3, k4, xt, step * dt, dt)
    return x[0]


# -- fft ---------------------------------------------------------------------------------------------------

@njit
def scramble(data, n):
    j = 1
    for ii in range(n):
        i = 2 * ii + 1
        if j > i:
            tmp = data[j - 1]
            data[j - 1] = data[i - 1]
            data[i - 1] = tmp
            tmp = data[j]
            data[j] = data[i]
            data[i] = tmp
        m = n
        while m >= 2 and j > m:
            j -= m
            m = m // 2
        j += m


@njit
def butterflies(data, n, sign):
    levels = 0
    size = 1
    while size < n:
        size *= 2
        levels += 1
    for level in range(1, levels + 1):
        points = 1 << level
        for block in range(0, n, points):
            wtemp = sign * math.sin(math.pi / points)
            wpi = -sign * math.sin(2.0 * (math.pi / points))
            wpr = -2.0 * wtemp * wtemp
            wr = 1.0
            wi = 0.0
            for ii in range(points // 2):
                i = 2 * block + 2 * ii
                iN = i + points
                tempr = data[iN] * wr - data[iN + 1] * wi
                tempi = data[iN] * wi + data[iN + 1] * wr
                data[iN] = data[i] - tempr
                data[iN + 1] = data[i + 1] - tempi
                data[i] += tempr
                data[i + 1] += tempi
                wtemp = wr
                wr = wr * (wpr + 1.0) - wi * wpi
                wi = wi * (wpr + 1.0) + wtemp * wpi


@njit
def rescale(data, n):
    scale = 1.0 / n
    for i in range(2 * n):
        data[i] *= scale


@njit
def fft_roundtrip(data, n):
    scramble(data, n)
    butterflies(data, n, 1.0)
    scramble(data, n)
    butterflies(data, n, -1.0)
    rescale(data, n)


# -- brusselator -------------------------------------------------------------------------------------------

@njit
def brusselator_f(x, y, t):
    eq1 = (x - 0.3) * (x - 0.3) + (y - 0.6) * (y - 0.6) <= 0.1 * 0.1
    eq2 = t >= 1.1
    if eq1 and eq2:
        return 5.0
    return 0.0


@njit
def brusselator_2d_loop(du, dv, u, v, p, t):
    xmin, xmax, ymin, ymax = BRUSSELATOR_DOMAIN
    N = u.shape[0]
    A = p[0]
    B = p[1]
    alpha = p[2]
    dx = 1.0 / (N - 1)
    alpha = alpha / (dx * dx)
    for i in range(N):
        for j in range(N):
            x = (xmax - xmin) / (N - 1) * i + xmin
            y = (ymax - ymin) / (N - 1) * j + ymin
            ip1 = i if i == N - 1 else i + 1
            im1 = i if i == 0 else i - 1
            jp1 = j if j == N - 1 else j + 1
            jm1 = j if j == 0 else j - 1
            u2v = u[i, j] * u[i, j] * v[i, j]
            du[i, j] = (alpha * (u[im1, j] + u[ip1, j] + u[i, jp1] + u[i, jm1] - 4.0 * u[i, j])
                        + B + u2v - (A + 1.0) * u[i, j] + brusselator_f(x, y, t))
            dv[i, j] = (alpha * (v[im1, j] + v[ip1, j] + v[i, jp1] + v[i, jm1] - 4.0 * v[i, j])
                        + A * u[i, j] - u2v)


# -- mlp ---------------------------------------------------------------------------------------------------

@njit
def dense_sigmoid(out, W, b, x):
    for o in range(W.shape[0]):
        s = b[o]
        for i in range(W.shape[1]):
            s += W[o, i] * x[i]
        out[o] = sigmoid(s)


@njit
def sample_loss(y, target, k):
    s = 0.0
    for o in range(len(y)):
        e = y[o] - target[k, o]
        s += e * e
    return 0.5 * s


@njit
def sgd_step(W1, b1, W2, b2, x, h, y, delta1, delta2, target, k, lr):
    dense_sigmoid(h, W1, b1, x)
    dense_sigmoid(y, W2, b2, h)
    for o in range(len(y)):
        delta2[o] = (y[o] - target[k, o]) * y[o] * (1.0 - y[o])
    for j in range(len(h)):
        s = 0.0
        for o in range(len(y)):
            s += W2[o, j] * delta2[o]
        delta1[j] = s * h[j] * (1.0 - h[j])
    for o in range(len(y)):
        for j in range(len(h)):
            W2[o, j] -= lr * delta2[o] * h[j]
        b2[o] -= lr * delta2[o]
    for j in range(len(h)):
        for i in range(len(x)):
            W1[j, i] -= lr * delta1[j] * x[i]
        b1[j] -= lr * delta1[j]


@njit
def mlp_train(W1_0, b1_0, W2_0, b2_0, X, target, lr, steps):
    n_hidden, n_in, n_out, batch = W1_0.shape[0], W1_0.shape[1], W2_0.shape[0], X.shape[0]
    W1 = W1_0.copy()
    b1 = b1_0.copy()
    W2 = W2_0.copy()
    b2 = b2_0.copy()
    x = np.empty(n_in, np.float64)
    h = np.empty(n_hidden, np.float64)
    y = np.empty(n_out, np.float64)
    delta1 = np.empty(n_hidden, np.float64)
    delta2 = np.empty(n_out, np.float64)
    for step in range(steps):
        k = step % batch
        for i in range(n_in):
            x[i] = X[k, i]
        sgd_step(W1, b1, W2, b2, x, h, y, delta1, delta2, target, k, lr)
    total = 0.0
    for k in range(batch):
        for i in range(n_in):
            x[i] = X[k, i]
        dense_sigmoid(h, W1, b1, x)
        dense_sigmoid(y, W2, b2, h)
        total += sample_loss(y, target, k)
    return total / batch


# The benchmarks with a numba peer, by name: the function and the parameters it writes (its outputs).
PEERS: dict[str, tuple[Callable, tuple[int, ...]]] = {
    "norm": (numba_peers.norm, (0,)),
    "relu3": (relu3_sum, ()),
    "gmm": (numba_peers.gmm_objective, ()),
    "gmm_reassoc": (numba_peers.gmm_objective, ()),
    "gmm_by_component": (numba_peers.gmm_objective, ()),
    "ba": (ba_objective, (5, 6)),
    "ba_sumsq": (ba_sum_of_squares, (5, 6)),
    "lstm": (lstm_objective, ()),
    "ode_euler": (integrate_euler, ()),
    "ode_rk4": (integrate_rk4, ()),
    "fft": (fft_roundtrip, (0,)),
    "brusselator": (brusselator_2d_loop, (0, 1)),
    "mlp": (mlp_train, ()),
}


def prepare(name: str, args: tuple) -> tuple[Callable[[], tuple[object, tuple]], tuple] | None:
    """The timed callable of benchmark `name` on copies of `args` (kernels write some of their arguments),
    and those copies; None if it has no numba peer. A call returns the function's return value and the
    copies, where the arrays it wrote are."""
    if name not in PEERS:
        return None
    function, _ = PEERS[name]
    copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
    return (lambda: (function(*copies), copies)), copies
