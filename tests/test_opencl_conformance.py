"""The GPU conformance tests (issue 22): what a green run on PoCL cannot show, run on the OpenCL device of
`ISOZYME_OPENCL_DEVICE`. With the rest of `-m opencl` (every differential test of the OpenCL backend, the
random generators, the AD corpus), this is the GPU conformance run of the README:

    ISOZYME_OPENCL_DEVICE=nvidia python -m pytest -m opencl

On a GPU (`opencl_conformance.py`) the sizes are the real ones and every derivative is called 20 times,
each call compared with the llvm backend's (a race shows as a result that is wrong on some calls only); in
CI (PoCL) the same tests run once each at small sizes.

- `prange` kernels with at least 100k work items (many work groups: shared parameters summed by group
  reductions and atomics, stencils, a scratch array per work item, time stepping), their gradients;
- atomic adds of a warp into one element, into scattered elements and from a branch some lanes take, with
  warp sums and without;
- the GMM objective with its loop over points a `prange` (benchmarks/opencl_gpu.py, the kernel whose
  gradient was wrong on an H100) and with a work item per component and point (benchmarks/tuned/gmm_gpu_kernels.py)
  at ADBench's sizes n=1000 d=10 K=25, n=1000 d=64 K=100 and n=100k d=10 K=25, against the llvm gradient of
  examples/gmm.py's serial kernel;
- ADBench's GMM, BA (sum of squares) and LSTM gradients (isozyme/benchmark_suite) at their sizes;
- the examples' kernels and gradients (heat, matvec, the MLP, norm);
- the transformer written for a GPU (benchmarks/tuned/transformer_gpu_kernels.py), 2 layers at the benchmark's
  sizes, against examples/transformer.py's gradient.

Every comparison is with the llvm backend on the same inputs, to 1e-10 of the largest magnitude (the order
of float additions in reductions and atomic adds differs).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from example_modules import load_example
from opencl_conformance import real_sizes, repeats

import isozyme as iz

pytest.importorskip("pyopencl", reason="the opencl backend needs pyopencl")

import test_opencl_parallel as parallel  # noqa: E402  (after the skip: it needs pyopencl too)

from isozyme.benchmark_suite import Benchmark, all_benchmarks, run_gradient  # noqa: E402
from isozyme.runtime.opencl_backend import SerialLoopWarning  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # opencl_gpu, gmm_gpu_kernels

RTOL = 1e-10
WORK_ITEMS = 100_003 if real_sizes() else 4_099
"""Work items of the prange gradients: 391 work groups of 256 on a GPU (odd: the last group is partial)."""


def assert_close(got: Any, expected: Any, what: str) -> None:
    """Equal to RTOL of the largest magnitude of `expected` (max-norm), nan where nan."""
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, what
    assert np.array_equal(np.isnan(got), np.isnan(expected)), what
    finite = ~np.isnan(expected)
    scale = float(np.abs(expected[finite]).max(initial=0.0))
    error = float(np.abs(got[finite] - expected[finite]).max(initial=0.0))
    assert error <= RTOL * scale + 1e-300, f"{what}: max difference {error:.3e}, {error / max(scale, 1e-300):.3e} " \
                                           "relative"


def flat(result: tuple[Any, list[np.ndarray]]) -> list[np.ndarray]:
    (value, adjoints), arrays = result
    values = [] if value is None else [np.array([value], dtype=np.float64)]
    return [*values, np.asarray(adjoints, dtype=np.float64), *arrays]


def check_repeatedly(name: str, compute: Callable[[str], list[np.ndarray]]) -> None:
    """`compute(backend)` on llvm once and on opencl `repeats()` times; every opencl call equals llvm."""
    expected = compute("llvm")
    for call in range(repeats()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SerialLoopWarning)
            got = compute("opencl")
        for k, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert_close(a, b, f"{name}, call {call + 1}, result {k}")


# --- prange kernels with many work items ----------------------------------------------------------------


def _dup(value: np.ndarray, shadow: np.ndarray | None = None) -> iz.Duplicated:
    return iz.Duplicated(value, np.zeros_like(value) if shadow is None else shadow)


def _many(kernel: iz.Kernel) -> Callable[[np.random.Generator], list[Any]]:
    n = WORK_ITEMS

    def make(r: np.random.Generator) -> list[Any]:
        out, x = _dup(np.zeros(n), r.normal(size=n)), _dup(r.uniform(0.1, 1.0, n))
        extra: dict[Any, list[Any]] = {
            parallel.shared_active: [iz.Active(0.7)],
            parallel.shared_element: [_dup(np.array([0.7]))],
            parallel.scratch_per_item: [5],
            parallel.elementwise: [iz.Active(0.5)],
            parallel.prange_in_branch: [1],
        }
        return [out, x, *extra.get(kernel, [])]
    return make


MANY_WORK_ITEMS = [
    ("shared_active", parallel.shared_active, _many(parallel.shared_active)),
    ("shared_element", parallel.shared_element, _many(parallel.shared_element)),
    ("stencil_sum", parallel.stencil_sum, _many(parallel.stencil_sum)),
    ("scratch_per_item", parallel.scratch_per_item, _many(parallel.scratch_per_item)),
    ("elementwise", parallel.elementwise, _many(parallel.elementwise)),
    ("prange_in_branch", parallel.prange_in_branch, _many(parallel.prange_in_branch)),
    ("sum_f64", parallel.sum_f64, lambda r: [_dup(r.uniform(0.5, 2.0, WORK_ITEMS))]),
    ("two_reductions_in_branches", parallel.two_reductions_in_branches,
     lambda r: [_dup(r.normal(size=WORK_ITEMS))]),
    ("time_stepping", parallel.time_stepping,
     lambda r: [_dup(r.uniform(0.0, 1.0, WORK_ITEMS), r.normal(size=WORK_ITEMS)), iz.Active(0.25), 3]),
]


@pytest.mark.parametrize("reduction", ["group", "atomic"])
@pytest.mark.parametrize(("kernel", "make_call"), [case[1:] for case in MANY_WORK_ITEMS],
                         ids=[case[0] for case in MANY_WORK_ITEMS])
def test_prange_gradients_with_many_work_items(kernel: iz.Kernel, make_call: Any, reduction: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISOZYME_OPENCL_REDUCTION", reduction)
    kernel = parallel.fresh(kernel)  # its own caches: other tests count what their kernels build
    check_repeatedly(kernel.__name__, lambda backend: flat(parallel.prange_gradient(kernel, make_call, "post",
                                                                                    backend)))


# --- atomic adds of a warp into one element (warp sums on NVIDIA) --------------------------------------------


def _warp_call(kernel: iz.Kernel, dtype: type) -> Callable[[np.random.Generator], list[Any]]:
    n = WORK_ITEMS

    def make(r: np.random.Generator) -> list[Any]:
        out = iz.Duplicated(np.zeros(n, dtype), r.normal(size=n).astype(dtype))
        x = _dup(r.uniform(0.0, 1.0, n).astype(dtype))
        return [out, x, _dup(r.uniform(0.5, 1.5, -(-n // 64)).astype(dtype))]
    return make


@pytest.mark.parametrize("warp_sums", ["1", "0"])
@pytest.mark.parametrize("kernel", [parallel.warp_blocks, parallel.warp_scattered, parallel.warp_diverged],
                         ids=lambda kernel: kernel.__name__)
def test_atomic_adds_of_a_warp(kernel: iz.Kernel, warp_sums: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reverse `prange` loops whose atomic adds go to one element per warp, to different elements, and from
    a branch that some lanes take: with warp sums (`ISOZYME_OPENCL_WARP_SUMS`, NVIDIA) and without, every
    call equals llvm."""
    monkeypatch.setenv("ISOZYME_OPENCL_WARP_SUMS", warp_sums)
    kernel = parallel.fresh(kernel)
    check_repeatedly(kernel.__name__, lambda backend: flat(parallel.prange_gradient(kernel, _warp_call(kernel,
                                                                                                       np.float64),
                                                                                    "post", backend)))


def test_atomic_adds_of_a_warp_in_f32() -> None:
    """`warp_blocks` in f32 (the warp sum of floats): opencl within 1e-5 of llvm on every call."""
    kernel = parallel.fresh(parallel.warp_blocks_f32)
    expected = flat(parallel.prange_gradient(kernel, _warp_call(kernel, np.float32), "post", "llvm"))
    for _ in range(repeats()):
        got = flat(parallel.prange_gradient(kernel, _warp_call(kernel, np.float32), "post", "opencl"))
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max(initial=0.0)))


# --- the GMM gradient with a prange over the points -----------------------------------------------------

GMM_SIZES = [(1000, 10, 25), (1000, 64, 100), (100_000, 10, 25)] if real_sizes() else [(60, 3, 4), (33, 5, 7)]


def _gmm_gpu_kernel(name: str) -> iz.Kernel:
    """opencl_gpu.py's `gmm_prange` (a work item per point) or gmm_gpu_kernels.py's `gmm_pairs` (a work item
    per component and point, component-major: warp sums of the adjoints of `icf` and `means`) or
    `gmm_pairs_qmu` (the same with Q_k mu_k first: warp sums of the adjoints of `icf` and of a local array) or
    `gmm_staged` (the pairs loop in three stages, its reverse loops fused) or `gmm_blocked` (four points per
    work item) or `gmm_blocked_qmu` (four points per work item, Q_k mu_k first)."""
    if name == "gmm_prange":
        from opencl_gpu import gmm_prange
        return gmm_prange
    from tuned import gmm_gpu_kernels
    return getattr(gmm_gpu_kernels, name)


@pytest.mark.parametrize("kernel", ["gmm_prange", "gmm_pairs", "gmm_pairs_qmu", "gmm_staged", "gmm_blocked",
                                    "gmm_blocked_qmu"])
@pytest.mark.parametrize(("n", "d", "k"), GMM_SIZES, ids=[f"n{n}_d{d}_K{k}" for n, d, k in GMM_SIZES])
def test_gmm_gpu_gradient_matches_the_serial_kernel(n: int, d: int, k: int, kernel: str) -> None:
    """The GPU formulations of the GMM objective against examples/gmm.py's serial kernel on llvm, every
    prange loop in parallel."""
    gmm = load_example("gmm")
    data = gmm.gmm_data(d, k, n, seed=0)
    args = [data.alphas, data.means, data.icf]
    log_gamma_d = gmm.log_gamma_distrib(0.5 * (d + data.m + 1), d)

    def gradient(kernel: iz.Kernel, backend: str) -> list[np.ndarray]:
        shadows = [np.zeros_like(a) for a in args]
        call = [*(iz.Duplicated(a, s) for a, s in zip(args, shadows, strict=True)), data.x]
        value, _ = iz.autodiff(kernel, *call, data.gamma, data.m, log_gamma_d, backend=backend)
        return [np.array([value]), *shadows]
    expected = gradient(gmm.gmm_objective, "llvm")
    for call in range(repeats()):
        with warnings.catch_warnings():
            warnings.simplefilter("error", SerialLoopWarning)  # every prange loop runs in parallel
            got = gradient(_gmm_gpu_kernel(kernel), "opencl")
        for name, a, b in zip(("value", "d_alphas", "d_means", "d_icf"), got, expected, strict=True):
            assert_close(a, b, f"GMM {kernel} n={n} d={d} K={k}, call {call + 1}: {name}")


def test_transformer_pairs_gradient_matches_the_example() -> None:
    """benchmarks/tuned/transformer_gpu_kernels.py's `transformer_loss_pairs` (every stage a parallel loop over the
    (feature, token) pairs, the parameters one flat vector, the weights' adjoints warp sums and atomic adds)
    against the gradient of examples/transformer.py's `transformer_loss` on llvm: 2 layers, the benchmark's
    sizes on a GPU; every prange loop in parallel."""
    from tuned import transformer_gpu_kernels

    transformer = load_example("transformer")
    sizes = dict(vocab=128, d_model=64, heads=4, hidden=256, seq=64, batch=16) if real_sizes() else \
        dict(vocab=16, d_model=8, heads=2, hidden=12, seq=6, batch=3)
    config = transformer.Config(layers=2, **sizes)
    params = transformer.init_parameters(config, seed=0)
    params.flat[:] += 0.05 * np.random.default_rng(3).standard_normal(params.flat.shape)  # biases not 0
    batch = transformer.make_batches(config, 1)[0]
    grad = transformer.Parameters(config)
    shadowed = [iz.Duplicated(p, g) for p, g in zip(params.arrays(), grad.arrays(), strict=True)]
    loss, _ = iz.autodiff(transformer.transformer_loss, batch.tokens, batch.targets, config.heads, config.head_dim,
                          *shadowed, backend="llvm")
    for call in range(repeats()):
        flat_grad = np.zeros_like(params.flat)
        with warnings.catch_warnings():
            warnings.simplefilter("error", SerialLoopWarning)  # every prange loop runs in parallel
            got, _ = iz.autodiff(transformer_gpu_kernels.transformer_loss_pairs, batch.tokens, batch.targets,
                                 config.heads, config.head_dim, config.layers, config.hidden, config.vocab,
                                 iz.Duplicated(params.flat.copy(), flat_grad), backend="opencl")
        assert_close(got, loss, f"transformer pairs, call {call + 1}: loss")
        assert_close(flat_grad, grad.flat, f"transformer pairs, call {call + 1}: gradient")


def test_ba_parallel_gradient_matches_the_serial_kernel() -> None:
    """BA's sum of squares as one prange over the observations (`ba_sum_of_squares_parallel`: a work item per
    observation, atomic adds into the adjoints of the cameras and points they share) against the serial
    kernel on llvm, at ba1's size on a GPU; every observation's camera and point perturbed, so that no two
    adds are the same number."""
    from isozyme.benchmark_suite import ba

    n, m, p = ba.ADBENCH_SIZES["ba1"] if real_sizes() else (3, 12, 40)
    args = ba.make_args(n, m, p, seed=3, jitter=0.01)

    def gradient(kernel: iz.Kernel, backend: str) -> list[np.ndarray]:
        cams, X, w, obs, feats, err, w_err = (a.copy() for a in args)
        shadows = [np.zeros_like(a) for a in (cams, X, w, err, w_err)]
        value, _ = iz.autodiff(kernel, iz.Duplicated(cams, shadows[0]), iz.Duplicated(X, shadows[1]),
                               iz.Duplicated(w, shadows[2]), obs, feats, iz.Duplicated(err, shadows[3]),
                               iz.Duplicated(w_err, shadows[4]), backend=backend)
        return [np.array([value]), *shadows[:3], err, w_err]
    expected = gradient(ba.ba_sum_of_squares, "llvm")
    for call in range(repeats()):
        with warnings.catch_warnings():
            warnings.simplefilter("error", SerialLoopWarning)  # the observations' loop runs in parallel
            got = gradient(ba.ba_sum_of_squares_parallel, "opencl")
        for name, a, b in zip(("value", "d_cams", "d_X", "d_w", "reproj_err", "w_err"), got, expected, strict=True):
            assert_close(a, b, f"BA n={n} m={m} p={p}, call {call + 1}: {name}")


# --- ADBench's GMM, BA and LSTM, the examples ----------------------------------------------------------

SMALL = {"gmm": {"d": 3, "K": 4, "n": 30}, "ba_sumsq": {"n": 3, "m": 12, "p": 40}, "lstm": {"l": 2, "c": 6, "b": 5}}
"""Sizes on a CPU device; on a GPU the benchmark's own first quick size (ADBench's: GMM d=2 K=5 n=1000, BA
ba1, LSTM l=2 c=256)."""

ADBENCH = [bench for bench in all_benchmarks() if bench.name in SMALL]


def _gradient_arrays(bench: Benchmark, args: tuple, backend: str) -> list[np.ndarray]:
    fresh = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
    result = run_gradient(bench, fresh, "post", backend)
    values = [] if result.value is None else [np.array([result.value], dtype=np.float64)]
    return [*values, *(result.shadows[i] for i in sorted(result.shadows)),
            *(np.array([result.active[i]]) for i in sorted(result.active))]


@pytest.mark.parametrize("bench", ADBENCH, ids=[bench.name for bench in ADBENCH])
def test_adbench_gradients(bench: Benchmark) -> None:
    size = bench.sizes["quick"][-1] if real_sizes() else SMALL[bench.name]
    args = bench.make_args(**size)
    check_repeatedly(f"{bench.name} {bench.label(size)}", lambda backend: _gradient_arrays(bench, args, backend))


def test_examples_gradients() -> None:
    heat, matvec, mlp, norm = (load_example(name) for name in ("heat", "matvec", "mlp", "norm"))
    rng = np.random.default_rng(11)
    n = 4_001 if real_sizes() else 65
    u = rng.uniform(size=n)
    check_repeatedly("heat", lambda backend: flat(parallel.prange_gradient(
        heat.heat, lambda r: [_dup(u.copy(), np.zeros(n)), iz.Active(0.2), 5], "post", backend)))
    A, x = rng.normal(size=(n, 31)), rng.normal(size=31)
    check_repeatedly("matvec", lambda backend: flat(parallel.prange_gradient(
        matvec.matvec, lambda r: [_dup(np.zeros(n), np.ones(n)), _dup(A.copy()), _dup(x.copy())], "post", backend)))
    problem = mlp.mlp_data(**({} if real_sizes() else {"d": 7, "hidden": 6, "out": 5, "batch": 4}))
    check_repeatedly("mlp", lambda backend: [np.asarray(g) for g in mlp.mlp_gradient(backend)(*problem)])
    check_repeatedly("norm", lambda backend: flat(parallel.prange_gradient(
        norm.norm, lambda r: [_dup(np.zeros(n), np.ones(n)), _dup(u.copy()), n], "post", backend)))
