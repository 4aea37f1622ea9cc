"""The Gaussian mixture model objective of ADBench: examples/gmm.py's kernels, inputs and numpy reference.

The code below is examples/gmm.py's, line for line (that file's docstring gives the formula, ADBench's `icf`
layout and where each piece comes from); it lives here too so that the suite works from an installed package,
without the repository's examples/. tests/test_bench_kernels.py checks that the two stay the same source.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

import isozyme as iz
from isozyme import Array, f64, i64

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@iz.kernel
def logsumexp(v: Array[f64]) -> f64:
    # log(sum(exp(v))), shifted by the maximum so that no exp overflows
    mx = v[0]
    for i in range(1, len(v)):
        mx = max(mx, v[i])
    s = 0.0
    for i in range(len(v)):
        s += iz.exp(v[i] - mx)
    return iz.log(s) + mx


@iz.kernel
def sqnorm(v: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(v)):
        s += v[i] * v[i]
    return s


@iz.kernel
def qtimesx(out: Array[f64], qdiag: Array[f64, 2], icf: Array[f64, 2], k: i64, x: Array[f64]):
    # out = Q_k x: the diagonal exp(q_k) is qdiag[k, :]; the strictly lower entries follow q_k in icf[k, :],
    # column by column
    d = len(x)
    for j in range(d):
        out[j] = qdiag[k, j] * x[j]
    idx = d
    for col in range(d):
        for row in range(col + 1, d):
            out[row] += icf[k, idx] * x[col]
            idx += 1


@iz.kernel
def log_wishart_prior(qdiag: Array[f64, 2], sum_qs: Array[f64], icf: Array[f64, 2], gamma: f64, m: i64,
                      log_gamma_d: f64) -> f64:
    K, d = qdiag.shape[0], qdiag.shape[1]
    nu = d + m + 1
    c = nu * d * (iz.log(gamma) - 0.5 * iz.log(2.0)) - log_gamma_d
    out = 0.0
    for k in range(K):
        frobenius = 0.0  # ||Q_k||_F^2: the diagonal, then the strictly lower entries
        for j in range(d):
            frobenius += qdiag[k, j] * qdiag[k, j]
        for j in range(d, icf.shape[1]):
            frobenius += icf[k, j] * icf[k, j]
        out += 0.5 * gamma * gamma * frobenius - m * sum_qs[k]
    return out - K * c


@iz.kernel
def gmm_objective(alphas: Array[f64], means: Array[f64, 2], icf: Array[f64, 2], x: Array[f64, 2],
                  wishart_gamma: f64, wishart_m: i64, log_gamma_d: f64) -> f64:
    K, d, n = means.shape[0], means.shape[1], x.shape[0]
    assert len(alphas) == K and icf.shape[0] == K and icf.shape[1] == d + d * (d - 1) // 2 and x.shape[1] == d
    qdiag = iz.empty((K, d), f64)  # exp(q_k), the diagonal of Q_k
    sum_qs = iz.empty(K, f64)      # sum(q_k) = log det Q_k
    for k in range(K):
        s = 0.0
        for j in range(d):
            s += icf[k, j]
            qdiag[k, j] = iz.exp(icf[k, j])
        sum_qs[k] = s
    xcentered = iz.empty(d, f64)
    qxcentered = iz.empty(d, f64)
    main_term = iz.empty(K, f64)
    slse = 0.0
    for i in range(n):
        for k in range(K):
            for j in range(d):
                xcentered[j] = x[i, j] - means[k, j]
            qtimesx(qxcentered, qdiag, icf, k, xcentered)
            main_term[k] = alphas[k] + sum_qs[k] - 0.5 * sqnorm(qxcentered)
        slse += logsumexp(main_term)
    prior = log_wishart_prior(qdiag, sum_qs, icf, wishart_gamma, wishart_m, log_gamma_d)
    return -n * d * HALF_LOG_2PI + slse - n * logsumexp(alphas) + prior


@iz.kernel
def gmm_objective_by_component(alphas: Array[f64], means: Array[f64, 2], icf: Array[f64, 2], x: Array[f64, 2],
                               wishart_gamma: f64, wishart_m: i64, log_gamma_d: f64) -> f64:
    # The same objective with the loops in the other order: components outside, in parallel, points inside
    # (the order of JAX's batched products). Q_k and its adjoint stay in the cache while the points stream
    # through; each component's adjoints belong to one iteration. logsumexp then runs over each point's row.
    K, d, n = means.shape[0], means.shape[1], x.shape[0]
    assert len(alphas) == K and icf.shape[0] == K and icf.shape[1] == d + d * (d - 1) // 2 and x.shape[1] == d
    qdiag = iz.empty((K, d), f64)
    sum_qs = iz.empty(K, f64)
    main_term = iz.empty((n, K), f64)
    for k in iz.prange(K):
        s = 0.0
        for j in range(d):
            s += icf[k, j]
            qdiag[k, j] = iz.exp(icf[k, j])
        sum_qs[k] = s
        xcentered = iz.empty(d, f64)
        qxcentered = iz.empty(d, f64)
        for i in range(n):
            for j in range(d):
                xcentered[j] = x[i, j] - means[k, j]
            qtimesx(qxcentered, qdiag, icf, k, xcentered)
            main_term[i, k] = alphas[k] + s - 0.5 * sqnorm(qxcentered)
    slse = 0.0
    for i in iz.prange(n):
        mx = main_term[i, 0]  # logsumexp of row i, inline: kernels take no row views
        for k in range(1, K):
            mx = max(mx, main_term[i, k])
        total = 0.0
        for k in range(K):
            total += iz.exp(main_term[i, k] - mx)
        slse += iz.log(total) + mx
    prior = log_wishart_prior(qdiag, sum_qs, icf, wishart_gamma, wishart_m, log_gamma_d)
    return -n * d * HALF_LOG_2PI + slse - n * logsumexp(alphas) + prior

def log_gamma_distrib(a: float, p: int) -> float:
    """log Gamma_p(a), the log of the multivariate gamma function:
    p(p-1)/4 log(pi) + sum_{j=1..p} lgamma(a + (1-j)/2)."""
    return 0.25 * p * (p - 1) * math.log(math.pi) + sum(math.lgamma(a + 0.5 * (1 - j)) for j in range(1, p + 1))


class GMMInput(NamedTuple):
    """One GMM problem: K components in d dimensions, n points, and the Wishart prior's parameters."""

    alphas: np.ndarray  # (K,) log weights, unnormalized
    means: np.ndarray   # (K, d)
    icf: np.ndarray     # (K, d + d(d-1)/2): log-diagonal of Q_k, then its strictly lower part column by column
    x: np.ndarray       # (n, d) the points
    gamma: float        # Wishart prior scale
    m: int              # Wishart prior degrees of freedom beyond d + 1


def gmm_data(d: int, K: int, n: int, seed: int = 0, gamma: float = 1.0, m: int = 0) -> GMMInput:
    """Random inputs drawn from ADBench's distributions: alphas, icf and x standard normal, means uniform on
    [0, 1), gamma = 1 and m = 0 by default. ADBench draws from one NumPy stream seeded 31337 and sized for its
    largest problem; this draws from `np.random.default_rng(seed)`, so the distributions match, not the
    numbers."""
    rng = np.random.default_rng(seed)
    alphas = rng.standard_normal(K)
    means = rng.uniform(0.0, 1.0, (K, d))
    icf = rng.standard_normal((K, d + d * (d - 1) // 2))
    x = rng.standard_normal((n, d))
    return GMMInput(alphas, means, icf, x, gamma, m)


def packed_lower_index(d: int) -> np.ndarray:
    """(d, d) indices into a row [exp(q) | l | 0] of d + d(d-1)/2 + 1 entries that gather Q_k, ADBench's
    lower-triangular factor: exp(q) on the diagonal, icf's strictly lower entries (column by column) below
    it, the trailing zero above it."""
    lower_count = d * (d - 1) // 2
    index = np.full((d, d), d + lower_count, dtype=np.int64)
    index[np.arange(d), np.arange(d)] = np.arange(d)
    cols, rows = np.triu_indices(d, 1)  # icf's strictly lower entries, column by column
    index[rows, cols] = d + np.arange(lower_count)
    return index


def _logsumexp_numpy(a: np.ndarray, axis: int) -> np.ndarray:
    mx = a.max(axis=axis, keepdims=True)
    return np.squeeze(mx + np.log(np.sum(np.exp(a - mx), axis=axis, keepdims=True)), axis=axis)


def gmm_objective_numpy(data: GMMInput) -> float:
    """The same objective, vectorized: dense Q_k matrices and einsum instead of ADBench's loops."""
    alphas, means, icf, x, gamma, m = data
    (K, d), n = means.shape, x.shape[0]
    q = icf[:, :d]
    Q = np.zeros((K, d, d))
    Q[:, np.arange(d), np.arange(d)] = np.exp(q)
    cols, rows = np.triu_indices(d, 1)  # (column, row) with row > column, column by column
    Q[:, rows, cols] = icf[:, d:]
    centred = x[:, None, :] - means[None, :, :]                       # (n, K, d)
    mahalanobis = np.sum(np.einsum("kab,nkb->nka", Q, centred) ** 2, axis=2)  # (n, K)
    likelihood = np.sum(_logsumexp_numpy(alphas + q.sum(axis=1) - 0.5 * mahalanobis, axis=1))
    nu = d + m + 1
    c = nu * d * (np.log(gamma) - 0.5 * np.log(2.0)) - log_gamma_distrib(0.5 * nu, d)
    prior = 0.5 * gamma**2 * np.sum(Q**2) - m * np.sum(q) - K * c
    return float(-0.5 * n * d * np.log(2.0 * np.pi) + likelihood - n * _logsumexp_numpy(alphas, axis=0) + prior)
