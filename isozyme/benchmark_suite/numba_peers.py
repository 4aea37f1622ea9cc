"""numba `@njit` versions of the kernels that `benchmarks/llvm_backend.py` measures, written with the same loops.

Loaded by path by `benchmarks/llvm_backend.py` (in its process, and in the fresh processes that time numba's
cold compile and its warm load from numba's cache): it imports numba and numpy, never isozyme. The bench's
numba peer (peer_numba.py) reuses its norm and gmm. Functions are
compiled with numba's defaults (no fast-math, no bounds checks), the settings isozyme's `llvm` backend uses
by default. `ISOZYME_BENCH_NUMBA_CACHE=1` turns on `cache=True` (the fresh-process runs set it, together
with `NUMBA_CACHE_DIR`, so no cache file is written next to this file).

- `ident`, `first`: the trivial kernels of the per-call overhead measurement.
- `mag`, `norm`: examples/norm.py.
- `logsumexp`, `sqnorm`, `qtimesx`, `log_wishart_prior`, `gmm_objective`: examples/gmm.py, loop for loop
  (same local arrays, same order of operations, same helper calls).
"""

import math
import os

import numpy as np
from numba import njit

CACHE = os.environ.get("ISOZYME_BENCH_NUMBA_CACHE") == "1"
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@njit(cache=CACHE)
def ident(a):
    return a


@njit(cache=CACHE)
def first(x):
    return x[0]


@njit(cache=CACHE)
def mag(x, n):
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return math.sqrt(s)


@njit(cache=CACHE)
def norm(out, x, n):
    for i in range(n):
        out[i] = x[i] / mag(x, n)


@njit(cache=CACHE)
def logsumexp(v):
    mx = v[0]
    for i in range(1, len(v)):
        mx = max(mx, v[i])
    s = 0.0
    for i in range(len(v)):
        s += math.exp(v[i] - mx)
    return math.log(s) + mx


@njit(cache=CACHE)
def sqnorm(v):
    s = 0.0
    for i in range(len(v)):
        s += v[i] * v[i]
    return s


@njit(cache=CACHE)
def qtimesx(out, qdiag, icf, k, x):
    d = len(x)
    for j in range(d):
        out[j] = qdiag[k, j] * x[j]
    idx = d
    for col in range(d):
        for row in range(col + 1, d):
            out[row] += icf[k, idx] * x[col]
            idx += 1


@njit(cache=CACHE)
def log_wishart_prior(qdiag, sum_qs, icf, gamma, m, log_gamma_d):
    K, d = qdiag.shape[0], qdiag.shape[1]
    nu = d + m + 1
    c = nu * d * (math.log(gamma) - 0.5 * math.log(2.0)) - log_gamma_d
    out = 0.0
    for k in range(K):
        frobenius = 0.0
        for j in range(d):
            frobenius += qdiag[k, j] * qdiag[k, j]
        for j in range(d, icf.shape[1]):
            frobenius += icf[k, j] * icf[k, j]
        out += 0.5 * gamma * gamma * frobenius - m * sum_qs[k]
    return out - K * c


@njit(cache=CACHE)
def gmm_objective(alphas, means, icf, x, wishart_gamma, wishart_m, log_gamma_d):
    K, d, n = means.shape[0], means.shape[1], x.shape[0]
    assert len(alphas) == K and icf.shape[0] == K and icf.shape[1] == d + d * (d - 1) // 2 and x.shape[1] == d
    qdiag = np.empty((K, d), np.float64)
    sum_qs = np.empty(K, np.float64)
    for k in range(K):
        s = 0.0
        for j in range(d):
            s += icf[k, j]
            qdiag[k, j] = math.exp(icf[k, j])
        sum_qs[k] = s
    xcentered = np.empty(d, np.float64)
    qxcentered = np.empty(d, np.float64)
    main_term = np.empty(K, np.float64)
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
