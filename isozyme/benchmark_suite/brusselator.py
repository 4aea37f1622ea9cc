"""The 2-D Brusselator right-hand side and its vector-Jacobian product (Enzyme's ode-real benchmark).

Facts from Enzyme (EnzymeAD/Enzyme, enzyme/benchmarks/ForwardMode/ode-real/ode.cpp): on an N x N grid
(N = 32) over [0, 1]^2, with p = (A, B, alpha) = (3.4, 1, 10), t = 2.1, alpha scaled by 1 / dx^2,
dx = 1 / (N - 1), neighbours clamped at the edges:

    du = alpha (u[i-1,j] + u[i+1,j] + u[i,j+1] + u[i,j-1] - 4 u) + B + u^2 v - (A + 1) u + f(x, y, t)
    dv = alpha (v[i-1,j] + v[i+1,j] + v[i,j+1] + v[i,j-1] - 4 v) + A u - u^2 v
    f = 5 where (x - 0.3)^2 + (y - 0.6)^2 <= 0.1^2 and t >= 1.1, else 0;

the state and the adjoint are both `init_brusselator`'s u = 22 (y(1-y))^(3/2), v = 27 (x(1-x))^(3/2), and
the benchmark is the vector-Jacobian product: the adjoint seeded on (du, dv) (Enzyme's dupnoneed), the
derivative taken with respect to u, v and p.
"""

from __future__ import annotations

import numpy as np

import isozyme as iz
from isozyme import Array, f64
from isozyme.benchmark_suite import Benchmark, Primal

XMIN, XMAX, YMIN, YMAX = 0.0, 1.0, 0.0, 1.0
PARAMS = (3.4, 1.0, 10.0)  # A, B, alpha
T = 2.1


@iz.kernel
def brusselator_f(x: f64, y: f64, t: f64) -> f64:
    eq1 = (x - 0.3) * (x - 0.3) + (y - 0.6) * (y - 0.6) <= 0.1 * 0.1
    eq2 = t >= 1.1
    if eq1 and eq2:
        return 5.0
    return 0.0


@iz.kernel
def brusselator_2d_loop(du: Array[f64, 2], dv: Array[f64, 2], u: Array[f64, 2], v: Array[f64, 2], p: Array[f64],
                        t: f64):
    N = u.shape[0]
    A = p[0]
    B = p[1]
    alpha = p[2]
    dx = 1.0 / (N - 1)
    alpha = alpha / (dx * dx)
    for i in range(N):
        for j in range(N):
            x = (XMAX - XMIN) / (N - 1) * i + XMIN
            y = (YMAX - YMIN) / (N - 1) * j + YMIN
            ip1 = i if i == N - 1 else i + 1
            im1 = i if i == 0 else i - 1
            jp1 = j if j == N - 1 else j + 1
            jm1 = j if j == 0 else j - 1
            u2v = u[i, j] * u[i, j] * v[i, j]
            du[i, j] = (alpha * (u[im1, j] + u[ip1, j] + u[i, jp1] + u[i, jm1] - 4.0 * u[i, j])
                        + B + u2v - (A + 1.0) * u[i, j] + brusselator_f(x, y, t))
            dv[i, j] = (alpha * (v[im1, j] + v[ip1, j] + v[i, jp1] + v[i, jm1] - 4.0 * v[i, j])
                        + A * u[i, j] - u2v)


def init_brusselator(N: int) -> tuple[np.ndarray, np.ndarray]:
    x = ((XMAX - XMIN) / (N - 1) * np.arange(N) + XMIN)[:, None] * np.ones((1, N))
    y = ((YMAX - YMIN) / (N - 1) * np.arange(N) + YMIN)[None, :] * np.ones((N, 1))
    return 22.0 * (y * (1.0 - y)) * np.sqrt(y * (1.0 - y)), 27.0 * (x * (1.0 - x)) * np.sqrt(x * (1.0 - x))


def make_args(N: int = 32, seed: int = 0, jitter: float = 0.0) -> tuple:
    """(du, dv, u, v, p, t): Enzyme's initial state; `jitter > 0` adds seeded noise to u and v (tests)."""
    u, v = init_brusselator(N)
    if jitter > 0.0:
        rng = np.random.default_rng(seed)
        u, v = u + jitter * rng.standard_normal(u.shape), v + jitter * rng.standard_normal(v.shape)
    return np.zeros((N, N)), np.zeros((N, N)), u, v, np.array(PARAMS), T


def seeds(args: tuple) -> dict[int, np.ndarray]:
    """Enzyme's adjoint: init_brusselator's fields again, on (du, dv)."""
    adjoint_u, adjoint_v = init_brusselator(args[2].shape[0])
    return {0: adjoint_u, 1: adjoint_v}


def reference(du, dv, u, v, p, t) -> Primal:
    N = u.shape[0]
    A, B, alpha = p[0], p[1], p[2] * (N - 1) ** 2
    def laplacian(a: np.ndarray) -> np.ndarray:
        e = np.pad(a, 1, mode="edge")
        return e[:-2, 1:-1] + e[2:, 1:-1] + e[1:-1, 2:] + e[1:-1, :-2] - 4.0 * a
    x = ((XMAX - XMIN) / (N - 1) * np.arange(N) + XMIN)[:, None]
    y = ((YMAX - YMIN) / (N - 1) * np.arange(N) + YMIN)[None, :]
    forcing = np.where(((x - 0.3) ** 2 + (y - 0.6) ** 2 <= 0.1 * 0.1) & (t >= 1.1), 5.0, 0.0)
    u2v = u * u * v
    return Primal(None, {0: alpha * laplacian(u) + B + u2v - (A + 1.0) * u + forcing,
                         1: alpha * laplacian(v) + A * u - u2v})


BENCHMARK = Benchmark(
    name="brusselator",
    kernel=brusselator_2d_loop,
    activity=("dup", "dup", "dup", "dup", "dup", "const"),
    sizes={"quick": ({"N": 32},), "full": ({"N": 32}, {"N": 128}, {"N": 512})},
    make_args=make_args,
    reference=reference,
    seeds=seeds,
    label=lambda size: f"{size['N']}x{size['N']}",
    scale=lambda size: size["N"] ** 2,
    description="2-D Brusselator right-hand side, vector-Jacobian product w.r.t. u, v, p",
)
