"""The GMM objective (examples/gmm.py) written for a GPU: every (component, point) pair is a work item.

`gmm_pairs` computes what `gmm_objective` computes, with the same formula (the example's docstring), in
three parallel loops:

1. `prange` over the components: exp(q_k) and sum(q_k) (a row of `qdiag` and an element of `sum_qs` each);
2. `prange` over the K * n pairs t = k * n + i (component-major: the 32 work items of a warp share a
   component, so they read one row of `icf` and `means` (one load for the warp) and, in the reverse loop,
   add into one element of the adjoints of `icf` and `means` at a time, which a warp sum turns into one
   atomic add per warp on NVIDIA): main_term[t] = alpha_k + sum(q_k) - ||Q_k (x_i - mu_k)||^2 / 2, with
   Q_k (x_i - mu_k) taken row by row (no scratch array: each row is a dot product with the row of the
   strictly lower part, which `icf` stores column by column);
3. `prange` over the points: the logsumexp over k of main_term[k * n + i], summed;

and the Wishart prior as a `prange` over the elements of `icf` with a reduction. `x` is transposed first
(a `prange` over the points), so that in loop 2 the 32 work items of a warp, neighbouring points of one
component, read 32 neighbouring values of each row. Its gradient (isozyme's reverse mode) has the same
loops in reverse, each parallel: the adjoints of `means` and `icf` (n adds per element) are atomic adds, a
warp sum and one `red.global.add` per warp on NVIDIA. `load(f32)` gives the same objective in f32 (JAX's
and torch's usual precision on a GPU).

The formulations share loops 1 and 3, the transpose and the prior as helper kernels (inlined):
`diagonals`, `log_sum_exps` (`blocked_log_sum_exps` for four points per work item), `transpose`,
`weights_and_prior` and `q_means` (Q_k mu_k, for the `_qmu` formulations). `gmm_pairs_qmu` is
`gmm_pairs` with Q_k (x_i - mu_k) taken as Q_k x_i - Q_k mu_k (Q_k mu_k once per component), so that its
reverse pairs loop makes one atomic add per step instead of two; `gmm_staged`, `gmm_blocked` and
`gmm_blocked_qmu` are more ways to cut those adds (their docstrings).
"""

from __future__ import annotations

import importlib.util
import math
from types import ModuleType

import isozyme as iz
from isozyme import Array, f64, i64

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
FLOAT = globals().get("FLOAT", f64)  # set before execution by `load`


def load(float_type: object) -> ModuleType:
    """This module executed anew with `FLOAT = float_type` (its kernels then take and compute that type)."""
    spec = importlib.util.spec_from_file_location(f"{__name__}_{float_type}", __file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.FLOAT = float_type  # type: ignore[attr-defined]
    spec.loader.exec_module(module)
    return module


@iz.kernel
def diagonals(qdiag: Array[FLOAT, 2], sum_qs: Array[FLOAT], icf: Array[FLOAT, 2]):
    # qdiag[k, :] = exp of the diagonal of Q_k (the first d values of icf[k]), sum_qs[k] = their log sum
    for k in iz.prange(qdiag.shape[0]):
        s = 0.0
        for j in range(qdiag.shape[1]):
            s += icf[k, j]
            qdiag[k, j] = iz.exp(icf[k, j])
        sum_qs[k] = s


@iz.kernel
def transpose(xt: Array[FLOAT, 2], x: Array[FLOAT, 2]):
    # xt = x transposed: the work items of a warp (neighbouring points) then read a row
    for i in iz.prange(x.shape[0]):
        for j in range(x.shape[1]):
            xt[j, i] = x[i, j]


@iz.kernel
def log_sum_exps(main_term: Array[FLOAT], n: i64, K: i64) -> FLOAT:
    # sum over the points i of logsumexp over k of main_term[k * n + i] (component-major pairs); K an argument,
    # not main_term's length over n: a trip count from a division is not known when the kernel starts, and
    # the reverse pass would count the runs of the inner loops from one point to the next (a serial loop)
    slse = 0.0
    for i in iz.prange(n):
        mx = main_term[i]
        for k in range(1, K):
            mx = max(mx, main_term[k * n + i])
        s = 0.0
        for k in range(K):
            s += iz.exp(main_term[k * n + i] - mx)
        slse += iz.log(s) + mx
    return slse


@iz.kernel
def q_means(qmu: Array[FLOAT, 2], qdiag: Array[FLOAT, 2], icf: Array[FLOAT, 2], means: Array[FLOAT, 2]):
    # qmu[k, :] = Q_k mu_k: a work item per component and row
    K, d = means.shape[0], means.shape[1]
    for t in iz.prange(K * d):
        k = t // d
        row = t - k * d
        v = qdiag[k, row] * means[k, row]
        for col in range(row):
            v += icf[k, d + col * d - col * (col + 1) // 2 + row - col - 1] * means[k, col]
        qmu[k, row] = v


@iz.kernel
def blocked_log_sum_exps(main_term: Array[FLOAT, 2], n: i64, m: i64, K: i64) -> FLOAT:
    # `log_sum_exps` of the main terms of four points per work item: point p * m + j of component k at
    # main_term[p, k * m + j]
    slse = 0.0
    for i in iz.prange(n):
        p = i // m
        j = i - p * m
        mx = main_term[p, j]
        for k in range(1, K):
            mx = max(mx, main_term[p, k * m + j])
        s = 0.0
        for k in range(K):
            s += iz.exp(main_term[p, k * m + j] - mx)
        slse += iz.log(s) + mx
    return slse


@iz.kernel
def weights_and_prior(alphas: Array[FLOAT], qdiag: Array[FLOAT, 2], sum_qs: Array[FLOAT], icf: Array[FLOAT, 2],
                      wishart_gamma: FLOAT, wishart_m: i64, log_gamma_d: FLOAT, n: i64) -> FLOAT:
    # the objective but for its log-sum-exps: -n logsumexp(alphas), the Wishart prior and the constants
    K, d = qdiag.shape[0], qdiag.shape[1]
    amax = alphas[0]
    for k in range(1, K):
        amax = max(amax, alphas[k])
    asum = 0.0
    for k in range(K):
        asum += iz.exp(alphas[k] - amax)
    nu = d + wishart_m + 1
    c = nu * d * (iz.log(wishart_gamma) - 0.5 * iz.log(2.0)) - log_gamma_d
    width = icf.shape[1]
    frobenius = 0.0  # ||Q_k||_F^2 of every k: a work item per element of icf
    for t in iz.prange(K * width):
        k = t // width
        j = t - k * width
        if j < d:
            frobenius += qdiag[k, j] * qdiag[k, j]
        else:
            frobenius += icf[k, j] * icf[k, j]
    sum_q = 0.0
    for k in range(K):
        sum_q += sum_qs[k]
    prior = 0.5 * wishart_gamma * wishart_gamma * frobenius - wishart_m * sum_q
    return -n * d * HALF_LOG_2PI - n * (iz.log(asum) + amax) + prior - K * c


@iz.kernel
def gmm_pairs(alphas: Array[FLOAT], means: Array[FLOAT, 2], icf: Array[FLOAT, 2], x: Array[FLOAT, 2],
              wishart_gamma: FLOAT, wishart_m: i64, log_gamma_d: FLOAT) -> FLOAT:
    K, d, n = means.shape[0], means.shape[1], x.shape[0]
    assert len(alphas) == K and icf.shape[0] == K and icf.shape[1] == d + d * (d - 1) // 2 and x.shape[1] == d
    qdiag = iz.empty((K, d), FLOAT)
    sum_qs = iz.empty(K, FLOAT)
    diagonals(qdiag, sum_qs, icf)
    xt = iz.empty((d, n), FLOAT)
    transpose(xt, x)
    main_term = iz.empty(n * K, FLOAT)
    for t in iz.prange(n * K):
        k = t // n
        i = t - k * n
        norm = 0.0
        for row in range(d):
            v = qdiag[k, row] * (xt[row, i] - means[k, row])
            for col in range(row):  # Q_k[row, col] is icf[k, d + col * d - col * (col + 1) // 2 + row - col - 1]
                v += icf[k, d + col * d - col * (col + 1) // 2 + row - col - 1] * (xt[col, i] - means[k, col])
            norm += v * v
        main_term[t] = alphas[k] + sum_qs[k] - 0.5 * norm
    rest = weights_and_prior(alphas, qdiag, sum_qs, icf, wishart_gamma, wishart_m, log_gamma_d, n)
    return log_sum_exps(main_term, n, K) + rest


@iz.kernel
def gmm_pairs_qmu(alphas: Array[FLOAT], means: Array[FLOAT, 2], icf: Array[FLOAT, 2], x: Array[FLOAT, 2],
                  wishart_gamma: FLOAT, wishart_m: i64, log_gamma_d: FLOAT) -> FLOAT:
    """`gmm_pairs` with Q_k (x_i - mu_k) taken as Q_k x_i - Q_k mu_k: a `prange` over the (component, row)
    pairs computes qmu[k, row] = (Q_k mu_k)[row] first, so the pairs loop reads `means` nowhere. In the
    reverse pass each step (row, col) of a pair's inner loop then makes one atomic add (into the adjoint of
    `icf`) where `gmm_pairs` makes two (`icf`'s and `means`'s, 2,080 per pair at d=64), and the adjoint of
    `means` comes from the K * d work items of the qmu loop (H100, n=100k d=10 K=25: the reverse pairs loop
    0.83 ms against 1.81 ms). The same objective; its value rounds otherwise (f64: 1e-16 relative)."""
    K, d, n = means.shape[0], means.shape[1], x.shape[0]
    assert len(alphas) == K and icf.shape[0] == K and icf.shape[1] == d + d * (d - 1) // 2 and x.shape[1] == d
    qdiag = iz.empty((K, d), FLOAT)
    sum_qs = iz.empty(K, FLOAT)
    diagonals(qdiag, sum_qs, icf)
    qmu = iz.empty((K, d), FLOAT)
    q_means(qmu, qdiag, icf, means)
    xt = iz.empty((d, n), FLOAT)
    transpose(xt, x)
    main_term = iz.empty(n * K, FLOAT)
    for t in iz.prange(n * K):
        k = t // n
        i = t - k * n
        norm = 0.0
        for row in range(d):
            v = qdiag[k, row] * xt[row, i] - qmu[k, row]  # (Q_k x_i - Q_k mu_k)[row]
            for col in range(row):
                v += icf[k, d + col * d - col * (col + 1) // 2 + row - col - 1] * xt[col, i]
            norm += v * v
        main_term[t] = alphas[k] + sum_qs[k] - 0.5 * norm
    rest = weights_and_prior(alphas, qdiag, sum_qs, icf, wishart_gamma, wishart_m, log_gamma_d, n)
    return log_sum_exps(main_term, n, K) + rest


@iz.kernel
def gmm_staged(alphas: Array[FLOAT], means: Array[FLOAT, 2], icf: Array[FLOAT, 2], x: Array[FLOAT, 2],
               wishart_gamma: FLOAT, wishart_m: i64, log_gamma_d: FLOAT) -> FLOAT:
    """`gmm_pairs` with its pairs loop in three stages, each a `prange` over the pairs t = k * n + i writing
    arrays of shape (d, K * n) (a warp's work items touch neighbouring elements): xc[:, t] = x_i - mu_k, then
    y[:, t] = Q_k xc[:, t], then the main term from the squares of y[:, t]. In the reverse pass the adjoint
    of each xc[col, t] is a plain add into the work item's own element (not an atomic add into the adjoint
    of `means` per row and column, as in `gmm_pairs`), and no value needs a tape: y is reloaded where the
    squares need it."""
    K, d, n = means.shape[0], means.shape[1], x.shape[0]
    assert len(alphas) == K and icf.shape[0] == K and icf.shape[1] == d + d * (d - 1) // 2 and x.shape[1] == d
    qdiag = iz.empty((K, d), FLOAT)
    sum_qs = iz.empty(K, FLOAT)
    diagonals(qdiag, sum_qs, icf)
    xt = iz.empty((d, n), FLOAT)
    transpose(xt, x)
    pairs = n * K
    xc = iz.empty((d, pairs), FLOAT)
    for t in iz.prange(pairs):
        k = t // n
        i = t - k * n
        for j in range(d):
            xc[j, t] = xt[j, i] - means[k, j]
    y = iz.empty((d, pairs), FLOAT)
    for t in iz.prange(pairs):
        k = t // n
        for row in range(d):
            v = qdiag[k, row] * xc[row, t]
            for col in range(row):  # Q_k[row, col] is icf[k, d + col * d - col * (col + 1) // 2 + row - col - 1]
                v += icf[k, d + col * d - col * (col + 1) // 2 + row - col - 1] * xc[col, t]
            y[row, t] = v
    main_term = iz.empty(pairs, FLOAT)
    for t in iz.prange(pairs):
        k = t // n
        norm = 0.0
        for row in range(d):
            norm += y[row, t] * y[row, t]
        main_term[t] = alphas[k] + sum_qs[k] - 0.5 * norm
    rest = weights_and_prior(alphas, qdiag, sum_qs, icf, wishart_gamma, wishart_m, log_gamma_d, n)
    return log_sum_exps(main_term, n, K) + rest


@iz.kernel
def gmm_blocked(alphas: Array[FLOAT], means: Array[FLOAT, 2], icf: Array[FLOAT, 2], x: Array[FLOAT, 2],
                wishart_gamma: FLOAT, wishart_m: i64, log_gamma_d: FLOAT) -> FLOAT:
    """`gmm_pairs` with four points per work item: work item (k, j) takes points j, j + m, j + 2m, j + 3m of
    component k (m = ceil(n / 4); a point past the last one reads the last point's values, and its main term
    goes to an element that nothing reads). The main term of point p * m + j of component k is
    main_term[p, k * m + j], an element of work item (k, j)'s own. Each element of `icf` and `means` is
    loaded once for the four points, so the reverse pass adds the four points' adjoints up in a register and
    makes one atomic add (a warp sum on NVIDIA) where `gmm_pairs` makes four. Work items of a warp take
    neighbouring points, so their reads of `xt` are neighbouring too."""
    K, d, n = means.shape[0], means.shape[1], x.shape[0]
    assert len(alphas) == K and icf.shape[0] == K and icf.shape[1] == d + d * (d - 1) // 2 and x.shape[1] == d
    qdiag = iz.empty((K, d), FLOAT)
    sum_qs = iz.empty(K, FLOAT)
    diagonals(qdiag, sum_qs, icf)
    xt = iz.empty((d, n), FLOAT)
    transpose(xt, x)
    m = (n + 3) // 4
    main_term = iz.empty((4, K * m), FLOAT)
    for w in iz.prange(K * m):
        k = w // m
        i0 = w - k * m
        i1 = min(i0 + m, n - 1)
        i2 = min(i0 + 2 * m, n - 1)
        i3 = min(i0 + 3 * m, n - 1)
        norm0 = 0.0
        norm1 = 0.0
        norm2 = 0.0
        norm3 = 0.0
        for row in range(d):
            q = qdiag[k, row]
            mu = means[k, row]
            v0 = q * (xt[row, i0] - mu)
            v1 = q * (xt[row, i1] - mu)
            v2 = q * (xt[row, i2] - mu)
            v3 = q * (xt[row, i3] - mu)
            for col in range(row):  # Q_k[row, col] is icf[k, d + col * d - col * (col + 1) // 2 + row - col - 1]
                lower = icf[k, d + col * d - col * (col + 1) // 2 + row - col - 1]
                mc = means[k, col]
                v0 += lower * (xt[col, i0] - mc)
                v1 += lower * (xt[col, i1] - mc)
                v2 += lower * (xt[col, i2] - mc)
                v3 += lower * (xt[col, i3] - mc)
            norm0 += v0 * v0
            norm1 += v1 * v1
            norm2 += v2 * v2
            norm3 += v3 * v3
        base = alphas[k] + sum_qs[k]
        main_term[0, w] = base - 0.5 * norm0
        main_term[1, w] = base - 0.5 * norm1
        main_term[2, w] = base - 0.5 * norm2
        main_term[3, w] = base - 0.5 * norm3
    return blocked_log_sum_exps(main_term, n, m, K) + \
        weights_and_prior(alphas, qdiag, sum_qs, icf, wishart_gamma, wishart_m, log_gamma_d, n)


@iz.kernel
def gmm_blocked_qmu(alphas: Array[FLOAT], means: Array[FLOAT, 2], icf: Array[FLOAT, 2], x: Array[FLOAT, 2],
                    wishart_gamma: FLOAT, wishart_m: i64, log_gamma_d: FLOAT) -> FLOAT:
    """`gmm_blocked`'s four points per work item with `gmm_pairs_qmu`'s Q_k x_i - Q_k mu_k: the pairs loop
    reads neither `means` nor its own differences, so each step (row, col) of its reverse makes one atomic
    add (into the adjoint of `icf`: a warp sum on NVIDIA) for four points, where `gmm_pairs_qmu` makes one
    per point and `gmm_blocked` two for four (`icf`'s and `means`'s)."""
    K, d, n = means.shape[0], means.shape[1], x.shape[0]
    assert len(alphas) == K and icf.shape[0] == K and icf.shape[1] == d + d * (d - 1) // 2 and x.shape[1] == d
    qdiag = iz.empty((K, d), FLOAT)
    sum_qs = iz.empty(K, FLOAT)
    diagonals(qdiag, sum_qs, icf)
    qmu = iz.empty((K, d), FLOAT)
    q_means(qmu, qdiag, icf, means)
    xt = iz.empty((d, n), FLOAT)
    transpose(xt, x)
    m = (n + 3) // 4
    main_term = iz.empty((4, K * m), FLOAT)
    for w in iz.prange(K * m):
        k = w // m
        i0 = w - k * m
        i1 = min(i0 + m, n - 1)
        i2 = min(i0 + 2 * m, n - 1)
        i3 = min(i0 + 3 * m, n - 1)
        norm0 = 0.0
        norm1 = 0.0
        norm2 = 0.0
        norm3 = 0.0
        for row in range(d):
            q = qdiag[k, row]
            qm = qmu[k, row]
            v0 = q * xt[row, i0] - qm
            v1 = q * xt[row, i1] - qm
            v2 = q * xt[row, i2] - qm
            v3 = q * xt[row, i3] - qm
            for col in range(row):  # Q_k[row, col] is icf[k, d + col * d - col * (col + 1) // 2 + row - col - 1]
                lower = icf[k, d + col * d - col * (col + 1) // 2 + row - col - 1]
                v0 += lower * xt[col, i0]
                v1 += lower * xt[col, i1]
                v2 += lower * xt[col, i2]
                v3 += lower * xt[col, i3]
            norm0 += v0 * v0
            norm1 += v1 * v1
            norm2 += v2 * v2
            norm3 += v3 * v3
        base = alphas[k] + sum_qs[k]
        main_term[0, w] = base - 0.5 * norm0
        main_term[1, w] = base - 0.5 * norm1
        main_term[2, w] = base - 0.5 * norm2
        main_term[3, w] = base - 0.5 * norm3
    return blocked_log_sum_exps(main_term, n, m, K) + \
        weights_and_prior(alphas, qdiag, sum_qs, icf, wishart_gamma, wishart_m, log_gamma_d, n)
