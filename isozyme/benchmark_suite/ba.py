"""ADBench's bundle adjustment (BA): reprojection and weight errors, and the Jacobian blocks.

Facts from ADBench (awf/ADBench, `src/cpp/shared/ba.h`, `read_ba_instance` in `src/cpp/shared/utils.cpp`,
`src/cpp/modules/tapenade/TapenadeBA.cpp`). A camera is 11 numbers [r1 r2 r3 C1 C2 C3 f u0 v0 k1 k2]
(Rodrigues rotation, centre, focal length, principal point, radial distortion); observation i sees point
obs[i, 1] from camera obs[i, 0] at feature feats[i] with weight w[i]:

    Xcam = R(r) (X - C)                    (Rodrigues' formula; R = I + [r]x when |r| = 0)
    proj = Xcam[:2] / Xcam[2] * (1 + k1 rsq + k2 rsq^2) * f + (u0, v0),    rsq = |Xcam[:2] / Xcam[2]|^2
    reproj_err[i] = w[i] (proj - feats[i]),    w_err[i] = 1 - w[i]^2

`ba_objective` is ADBench's primal (all residuals); `ba_sum_of_squares` (benchmark "ba_sumsq", the second BA
row of TARGETS.md, not an ADBench objective) sums their squares and is differentiated in one reverse sweep
(with respect to all cameras, points and weights); `ba_sum_of_squares_parallel` is the same sum as one
`prange` over the observations (`benchmarks/ba_gpu.py` runs it on a GPU). ADBench's Jacobian (2p + p rows,
11 n + 3 m + p columns) is made of 2 x 15 blocks, one per observation, computed by two reverse sweeps of the
observation's `compute_reproj_error` (seeds (1, 0) and (0, 1)), and of dw_err/dw = -2 w. `ba_jacobian` (the benchmark's
gradient) runs those sweeps for all observations in two calls: `ba_reproj_blocks` loops over the
observations reading each one's own copy of its camera and point (gathered by numpy, `cams[obs[:, 0]]`),
so the reverse of iteration i is observation i's sweep and its adjoints land in block i, never summed with
another observation's. `ba_jacobian_per_observation` is ADBench's driver word for word (2p `iz.autodiff`
calls of `compute_reproj_error` on one-row views), slow from Python, used to check the other.

Data: ADBench replicates one camera, one point, one weight and one feature (the first values of its input
file) to n cameras, m points and p observations, observation i seeing camera i mod n and point i mod m.
`make_args(n, m, p)` does that with the values of ADBench's data/ba files (`BA_SOURCE`), for the sizes of
ba1..ba20 (`ADBENCH_SIZES`); `jitter > 0` perturbs every copy (seeded) so that observations differ (for the
tests).
"""

from __future__ import annotations

import numpy as np

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.benchmark_suite import Benchmark, Gradient, Primal

N_CAM_PARAMS = 11

# The first camera, point, weight and feature of every ADBench data/ba/ba*.txt file (all share them).
BA_SOURCE = {
    "cam": (-0.758453, -1.109613, -0.845551, 34.556073, 39.676747, 53.881673, 419.194514, 5.864426, -8.518870,
            0.087812, 0.002739),
    "X": (7.203245, 0.001144, 3.023326),
    "w": 0.417022,
    "feat": (271.760969, 834.209256),
}

# (n, m, p) of ADBench's ba1..ba20, from the first line of each file (ba20's file says p = 28987644).
ADBENCH_SIZES = {
    "ba1": (49, 7776, 31843), "ba2": (21, 11315, 36455), "ba3": (161, 48126, 182072),
    "ba4": (372, 47423, 204472), "ba5": (257, 65132, 225911), "ba6": (539, 65220, 277273),
    "ba7": (93, 61203, 287451), "ba8": (88, 64298, 383937), "ba9": (810, 88814, 393775),
    "ba10": (1197, 126327, 563734), "ba11": (1723, 156502, 678718), "ba12": (253, 163691, 899155),
    "ba13": (245, 198739, 1091386), "ba14": (356, 226730, 1255268), "ba15": (1102, 780462, 4052340),
    "ba16": (1544, 942409, 4750193), "ba17": (1778, 993923, 5001946), "ba18": (1936, 649673, 5213733),
    "ba19": (4585, 1324582, 9125125), "ba20": (13682, 4456117, 28987644),
}


@iz.kernel
def rodrigues_rotate_point(rot: Array[f64, 2], r: i64, pt: Array[f64], rotated: Array[f64]):
    # rotated = R(rot[r, 0:3]) pt, Ceres' evaluation as in ADBench
    sqtheta = rot[r, 0] * rot[r, 0] + rot[r, 1] * rot[r, 1] + rot[r, 2] * rot[r, 2]
    if sqtheta != 0.0:
        theta = iz.sqrt(sqtheta)
        costheta = iz.cos(theta)
        sintheta = iz.sin(theta)
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


@iz.kernel
def radial_distort(cams: Array[f64, 2], c: i64, proj: Array[f64]):
    rsq = proj[0] * proj[0] + proj[1] * proj[1]
    L = 1.0 + cams[c, 9] * rsq + cams[c, 10] * rsq * rsq
    proj[0] = proj[0] * L
    proj[1] = proj[1] * L


@iz.kernel
def project(cams: Array[f64, 2], c: i64, X: Array[f64, 2], pt: i64, proj: Array[f64]):
    Xo = iz.empty(3, f64)
    Xcam = iz.empty(3, f64)
    for j in range(3):
        Xo[j] = X[pt, j] - cams[c, 3 + j]
    rodrigues_rotate_point(cams, c, Xo, Xcam)
    proj[0] = Xcam[0] / Xcam[2]
    proj[1] = Xcam[1] / Xcam[2]
    radial_distort(cams, c, proj)
    proj[0] = proj[0] * cams[c, 6] + cams[c, 7]
    proj[1] = proj[1] * cams[c, 6] + cams[c, 8]


@iz.kernel
def compute_reproj_error(cams: Array[f64, 2], c: i64, X: Array[f64, 2], pt: i64, w: Array[f64], i: i64,
                         feats: Array[f64, 2], err: Array[f64, 2]):
    # err[i] = w[i] (project(camera c, point pt) - feats[i]): ADBench's computeReprojError, the camera, point,
    # weight and feature given as rows of arrays (the kernel language has no pointers into arrays)
    proj = iz.empty(2, f64)
    project(cams, c, X, pt, proj)
    err[i, 0] = w[i] * (proj[0] - feats[i, 0])
    err[i, 1] = w[i] * (proj[1] - feats[i, 1])


@iz.kernel
def ba_objective(cams: Array[f64, 2], X: Array[f64, 2], w: Array[f64], obs: Array[i64, 2], feats: Array[f64, 2],
                 reproj_err: Array[f64, 2], w_err: Array[f64]):
    p = len(w)
    for i in range(p):
        compute_reproj_error(cams, obs[i, 0], X, obs[i, 1], w, i, feats, reproj_err)
    for i in range(p):
        w_err[i] = 1.0 - w[i] * w[i]


@iz.kernel
def ba_sum_of_squares(cams: Array[f64, 2], X: Array[f64, 2], w: Array[f64], obs: Array[i64, 2],
                      feats: Array[f64, 2], reproj_err: Array[f64, 2], w_err: Array[f64]) -> f64:
    # the least-squares cost of ADBench's residuals (TARGETS.md's second BA row): ba_objective, then the sum
    # of the squared residuals
    ba_objective(cams, X, w, obs, feats, reproj_err, w_err)
    s = 0.0
    for i in range(len(w)):
        s += reproj_err[i, 0] * reproj_err[i, 0] + reproj_err[i, 1] * reproj_err[i, 1] + w_err[i] * w_err[i]
    return s


@iz.kernel
def ba_sum_of_squares_parallel(cams: Array[f64, 2], X: Array[f64, 2], w: Array[f64], obs: Array[i64, 2],
                               feats: Array[f64, 2], reproj_err: Array[f64, 2], w_err: Array[f64]) -> f64:
    # ba_sum_of_squares as one parallel loop over the observations (a GPU's formulation, and the CPU's
    # threads): each iteration writes its own residuals and adds its squares into the sum; in reverse, its
    # camera's and point's adjoints are atomic adds (observations share cameras and points)
    s = 0.0
    for i in iz.prange(len(w)):
        compute_reproj_error(cams, obs[i, 0], X, obs[i, 1], w, i, feats, reproj_err)
        w_err[i] = 1.0 - w[i] * w[i]
        s += reproj_err[i, 0] * reproj_err[i, 0] + reproj_err[i, 1] * reproj_err[i, 1] + w_err[i] * w_err[i]
    return s


@iz.kernel
def ba_reproj_blocks(cams_obs: Array[f64, 2], X_obs: Array[f64, 2], w: Array[f64], feats: Array[f64, 2],
                     reproj_err: Array[f64, 2]):
    # the reprojection errors with observation i's own camera cams_obs[i] and point X_obs[i]
    for i in range(len(w)):
        compute_reproj_error(cams_obs, i, X_obs, i, w, i, feats, reproj_err)


@iz.kernel
def ba_weight_error(w: Array[f64], w_err: Array[f64]):
    for i in range(len(w)):
        w_err[i] = 1.0 - w[i] * w[i]


def make_args(n: int, m: int, p: int, seed: int = 0, jitter: float = 0.0) -> tuple:
    """ADBench's replicated data (module docstring): (cams, X, w, obs, feats, reproj_err, w_err)."""
    cams = np.tile(np.array(BA_SOURCE["cam"]), (n, 1))
    X = np.tile(np.array(BA_SOURCE["X"]), (m, 1))
    w = np.full(p, BA_SOURCE["w"])
    feats = np.tile(np.array(BA_SOURCE["feat"]), (p, 1))
    obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1).astype(np.int64)
    if jitter > 0.0:
        rng = np.random.default_rng(seed)
        for a in (cams, X, w, feats):
            a *= 1.0 + jitter * rng.standard_normal(a.shape)
    return cams, X, w, obs, feats, np.zeros((p, 2)), np.zeros(p)


def read_adbench_ba(text: str) -> tuple:
    """An ADBench BA input file's contents: "n m p", one camera, point, weight and feature, replicated."""
    tokens = text.split()
    n, m, p = (int(t) for t in tokens[:3])
    values = [float(t) for t in tokens[3:3 + N_CAM_PARAMS + 3 + 1 + 2]]
    cams = np.tile(values[:11], (n, 1))
    X = np.tile(values[11:14], (m, 1))
    w = np.full(p, values[14])
    feats = np.tile(values[15:17], (p, 1))
    obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1).astype(np.int64)
    return cams, X, w, obs, feats, np.zeros((p, 2)), np.zeros(p)


def reprojection_numpy(cams: np.ndarray, X: np.ndarray, w: np.ndarray, feats: np.ndarray) -> np.ndarray:
    """The reprojection errors, one camera and point per observation (rows of cams, X), vectorized."""
    rot, Xo = cams[:, :3], X - cams[:, 3:6]
    sqtheta = np.sum(rot * rot, axis=1, keepdims=True)
    safe = np.where(sqtheta != 0.0, sqtheta, 1.0)
    theta = np.sqrt(safe)
    axis = rot / theta
    rotated = (Xo * np.cos(theta) + np.cross(axis, Xo) * np.sin(theta)
               + axis * np.sum(axis * Xo, axis=1, keepdims=True) * (1.0 - np.cos(theta)))
    Xcam = np.where(sqtheta != 0.0, rotated, Xo + np.cross(rot, Xo))
    proj = Xcam[:, :2] / Xcam[:, 2:3]
    rsq = np.sum(proj * proj, axis=1, keepdims=True)
    proj = proj * (1.0 + cams[:, 9:10] * rsq + cams[:, 10:11] * rsq * rsq)
    proj = proj * cams[:, 6:7] + cams[:, 7:9]
    return w[:, None] * (proj - feats)


def reference(cams, X, w, obs, feats, reproj_err, w_err) -> Primal:
    return Primal(None, {5: reprojection_numpy(cams[obs[:, 0]], X[obs[:, 1]], w, feats), 6: 1.0 - w * w})


def sum_of_squares_reference(cams, X, w, obs, feats, reproj_err, w_err) -> Primal:
    residuals = reference(cams, X, w, obs, feats, reproj_err, w_err).outputs
    return Primal(float(np.sum(residuals[5] ** 2) + np.sum(residuals[6] ** 2)), residuals)


def ba_jacobian(args: tuple, opt: str = "post", backend: str | None = None) -> Gradient:
    """ADBench's Jacobian blocks by two reverse sweeps per observation (module docstring), on `backend` (None:
    the default). The shadows are keyed by name: "cams" (p, 2, 11), "X" (p, 2, 3) and "w" (p, 2), row r of
    observation i's block being d reproj_err[i, r] / d(its camera, point, weight), and "w_err" (p,):
    d w_err[i] / d w[i]."""
    cams, X, w, obs, feats, reproj_err, w_err = args
    p = len(w)
    cams_obs, X_obs = cams[obs[:, 0]], X[obs[:, 1]]
    blocks = {"cams": np.empty((p, 2, N_CAM_PARAMS)), "X": np.empty((p, 2, 3)), "w": np.empty((p, 2))}
    for r in range(2):
        d_cams, d_X, d_w = np.zeros_like(cams_obs), np.zeros_like(X_obs), np.zeros_like(w)
        seed = np.zeros((p, 2))
        seed[:, r] = 1.0
        iz.autodiff(ba_reproj_blocks, iz.Duplicated(cams_obs, d_cams), iz.Duplicated(X_obs, d_X),
                    iz.Duplicated(w, d_w), feats, iz.Duplicated(reproj_err, seed), opt=opt, backend=backend)
        blocks["cams"][:, r], blocks["X"][:, r], blocks["w"][:, r] = d_cams, d_X, d_w
    d_w = np.zeros_like(w)
    iz.autodiff(ba_weight_error, iz.Duplicated(w, d_w), iz.Duplicated(w_err, np.ones(p)), opt=opt,
                backend=backend)
    return Gradient(None, {**blocks, "w_err": d_w})


def ba_jacobian_per_observation(args: tuple, opt: str = "post", backend: str | None = None) -> Gradient:
    """The same blocks as `ba_jacobian`, by ADBench's driver itself: two `iz.autodiff` calls of
    `compute_reproj_error` per observation, on one-row views of its camera, point, weight and feature."""
    cams, X, w, obs, feats, reproj_err, w_err = args
    p = len(w)
    blocks = {"cams": np.empty((p, 2, N_CAM_PARAMS)), "X": np.empty((p, 2, 3)), "w": np.empty((p, 2))}
    err = np.empty((1, 2))
    for i in range(p):
        c, pt = int(obs[i, 0]), int(obs[i, 1])
        for r in range(2):
            d_cam, d_X, d_w, seed = np.zeros((1, 11)), np.zeros((1, 3)), np.zeros(1), np.zeros((1, 2))
            seed[0, r] = 1.0
            iz.autodiff(compute_reproj_error, iz.Duplicated(cams[c:c + 1], d_cam), 0, iz.Duplicated(X[pt:pt + 1], d_X),
                        0, iz.Duplicated(w[i:i + 1], d_w), 0, feats[i:i + 1], iz.Duplicated(err, seed), opt=opt,
                        backend=backend)
            blocks["cams"][i, r], blocks["X"][i, r], blocks["w"][i, r] = d_cam[0], d_X[0], d_w[0]
    d_w = np.zeros_like(w)
    iz.autodiff(ba_weight_error, iz.Duplicated(w, d_w), iz.Duplicated(w_err, np.ones(p)), opt=opt, backend=backend)
    return Gradient(None, {**blocks, "w_err": d_w})


def sparse_values(jacobian: Gradient) -> np.ndarray:
    """The Jacobian's nonzero values in ADBench's BASparseMat order: for each observation its two rows of 15
    (11 camera, 3 point, 1 weight), then the p weight-error entries."""
    rows = np.concatenate([jacobian.shadows["cams"], jacobian.shadows["X"], jacobian.shadows["w"][:, :, None]],
                          axis=2)
    return np.concatenate([rows.ravel(), jacobian.shadows["w_err"]])


BENCHMARK = Benchmark(
    name="ba",
    kernel=ba_objective,
    activity=("dup", "dup", "dup", "const", "const", "dup", "dup"),
    sizes={"quick": ({"n": 49, "m": 7776, "p": 31843},),
           "full": tuple({"n": n, "m": m, "p": p} for n, m, p in (ADBENCH_SIZES[f"ba{k}"] for k in range(1, 6)))},
    make_args=make_args,
    reference=reference,
    seeds=lambda args: {5: np.ones_like(args[5]), 6: np.ones_like(args[6])},
    gradient=ba_jacobian,
    label=lambda size: f"n={size['n']} m={size['m']} p={size['p']}",
    scale=lambda size: size["p"],
    description="ADBench BA: the 2x15 Jacobian blocks by two reverse sweeps per observation",
)

BENCHMARK_SUM_OF_SQUARES = Benchmark(
    name="ba_sumsq",
    kernel=ba_sum_of_squares,
    activity=("dup", "dup", "dup", "const", "const", "dup", "dup"),
    sizes=BENCHMARK.sizes,
    make_args=make_args,
    reference=sum_of_squares_reference,
    label=BENCHMARK.label,
    scale=BENCHMARK.scale,
    description="ADBench BA residuals, gradient of their sum of squares w.r.t. cameras, points, weights",
)
BENCHMARKS = (BENCHMARK, BENCHMARK_SUM_OF_SQUARES)
