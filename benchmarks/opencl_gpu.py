"""OpenCL on a GPU: memory bandwidth of a parallel kernel and its gradient, the shared-parameter gradient with
work-group reductions against one atomic per work item, and the GMM gradient on the GPU against the CPU.

    ISOZYME_OPENCL_DEVICE=nvidia python benchmarks/opencl_gpu.py [--n 67108864] [--shared 16777216]
        [--naive 1048576] [--gmm 1000x10x25,...] [--json FILE]

Every figure is measured in this one run, side by side (machines are shared and noisy):

1. `elementwise`: y[i] = a*x[i]*x[i] + z[i] over n f64 elements, with device arrays (`iz.to_device`), so no
   host copies. Bytes are those the loops must move: the primal reads x and z and writes y (24 per element);
   the gradient (y, x, z Duplicated, a Active) runs the primal again, then reads x and d_y, zeroes d_y and
   adds into d_x and d_z (80 per element in all). d_y is set again before each call, untimed. The reference
   is a device-to-device copy of the same arrays (`enqueue_copy`, 16 bytes per element) and isozyme's own copy kernel.
2. `shared`: y[i] = p[0]*x[i]; the gradient adds x[i]*d_y[i] of every work item into d_p[0]. With work-group
   reductions (the default) and with ISOZYME_OPENCL_REDUCTION=atomic (one compare-and-swap add per work item),
   both checked against numpy.
3. GMM (ADBench's objective): the gradient of `examples/gmm.py`'s kernel on the CPU (`llvm`), and of the same
   objective written with `prange` over the points on the GPU (OpenCL) and on the CPU; all three agree.

Times are medians of repeats (after a warm-up call that compiles).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from gmm import HALF_LOG_2PI, log_wishart_prior, logsumexp, qtimesx, sqnorm  # noqa: E402  (examples/gmm.py)

import isozyme as iz  # noqa: E402
from isozyme import Active, Array, Const, Duplicated, f64, i64  # noqa: E402
from isozyme.runtime.opencl_backend import device  # noqa: E402


def elementwise(y: Array[f64], x: Array[f64], z: Array[f64], a: f64):
    for i in iz.prange(len(x)):
        y[i] = a * x[i] * x[i] + z[i]


def copy(y: Array[f64], x: Array[f64]):
    for i in iz.prange(len(x)):
        y[i] = x[i]


def shared(y: Array[f64], x: Array[f64], p: Array[f64]):
    for i in iz.prange(len(x)):
        y[i] = p[0] * x[i]


@iz.kernel
def gmm_prange(alphas: Array[f64], means: Array[f64, 2], icf: Array[f64, 2], x: Array[f64, 2],
               wishart_gamma: f64, wishart_m: i64, log_gamma_d: f64) -> f64:
    """examples/gmm.py's `gmm_objective` with the loop over points a `prange`: its scratch arrays are
    allocated in the loop (one copy per work item); the helper kernels are the example's."""
    K, d, n = means.shape[0], means.shape[1], x.shape[0]
    qdiag = iz.empty((K, d), f64)
    sum_qs = iz.empty(K, f64)
    for k in range(K):
        s = 0.0
        for j in range(d):
            s += icf[k, j]
            qdiag[k, j] = iz.exp(icf[k, j])
        sum_qs[k] = s
    slse = 0.0
    for i in iz.prange(n):
        xcentered = iz.empty(d, f64)
        qxcentered = iz.empty(d, f64)
        main_term = iz.empty(K, f64)
        for k in range(K):
            for j in range(d):
                xcentered[j] = x[i, j] - means[k, j]
            qtimesx(qxcentered, qdiag, icf, k, xcentered)
            main_term[k] = alphas[k] + sum_qs[k] - 0.5 * sqnorm(qxcentered)
        slse += logsumexp(main_term)
    prior = log_wishart_prior(qdiag, sum_qs, icf, wishart_gamma, wishart_m, log_gamma_d)
    return -n * d * HALF_LOG_2PI + slse - n * logsumexp(alphas) + prior


def timed(call: Callable[[], object], repeats: int, setup: Callable[[], object] | None = None) -> tuple[float, object]:
    """The median time of `call` (after a warm-up call that compiles), `setup` run untimed before each."""
    if setup:
        setup()
    result = call()
    times = []
    for _ in range(repeats):
        if setup:
            setup()
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def bandwidth(n: int, repeats: int) -> dict[str, float]:
    cl = __import__("pyopencl")
    where = device()
    rng = np.random.default_rng(0)
    x_host, z_host = rng.random(n), rng.random(n)
    x, z, y = iz.to_device(x_host), iz.to_device(z_host), iz.to_device(np.zeros(n))
    dx, dz, dy = iz.to_device(np.zeros(n)), iz.to_device(np.zeros(n)), iz.to_device(np.ones(n))

    def device_copy() -> None:
        cl.enqueue_copy(where.queue, y.data, x.data, byte_count=8 * n)
        where.queue.finish()
    copy_s, _ = timed(device_copy, repeats)
    kernel_copy = iz.kernel(copy, backend="opencl")
    copy_kernel_s, _ = timed(lambda: kernel_copy(y, x), repeats)
    primal = iz.kernel(elementwise, backend="opencl")
    primal_s, _ = timed(lambda: primal(y, x, z, 1.5), repeats)
    assert np.allclose(y.get(), 1.5 * x_host * x_host + z_host, rtol=1e-14)

    def seed() -> None:  # the gradient zeroes d_y: set it again, untimed
        dy.set(np.ones(n))
        where.queue.finish()

    def gradient() -> object:
        return iz.autodiff(primal, Duplicated(y, dy), Duplicated(x, dx), Duplicated(z, dz), Active(1.5),
                           backend="opencl")
    seed()
    first = gradient()
    assert np.allclose(dx.get(), 3.0 * x_host, rtol=1e-12) and np.allclose(dz.get(), 1.0, rtol=1e-14)
    assert np.allclose(first[1][0], np.sum(x_host * x_host), rtol=1e-9)  # type: ignore[index]
    gradient_s, _ = timed(gradient, repeats, seed)
    gb = 1e-9
    return {"n": n, "copy_GBps": 16 * n * gb / copy_s, "copy_kernel_GBps": 16 * n * gb / copy_kernel_s,
            "primal_GBps": 24 * n * gb / primal_s, "gradient_GBps": 80 * n * gb / gradient_s,
            "primal_ms": primal_s * 1e3, "gradient_ms": gradient_s * 1e3}


def shared_parameter(n: int, mode: str, repeats: int) -> dict[str, float]:
    os.environ["ISOZYME_OPENCL_REDUCTION"] = mode
    kernel = iz.kernel(shared, backend="opencl")  # a new kernel object: compiled for this mode
    rng = np.random.default_rng(1)
    x_host, dy_host = rng.random(n), rng.random(n)
    x, y, dy = iz.to_device(x_host), iz.to_device(np.zeros(n)), iz.to_device(dy_host)
    p, dp = iz.to_device(np.array([2.0])), iz.to_device(np.zeros(1))
    dx = iz.to_device(np.zeros(n))

    def seed() -> None:  # the gradient zeroes d_y: set it (and d_p) again, untimed
        dy.set(dy_host)
        dp.set(np.zeros(1))
        device().queue.finish()

    def gradient() -> None:
        iz.autodiff(kernel, Duplicated(y, dy), Duplicated(x, dx), Duplicated(p, dp), backend="opencl")
    tiny = [iz.to_device(np.ones(4)) for _ in range(4)]  # compiles
    iz.autodiff(kernel, Duplicated(tiny[0], tiny[1]), Duplicated(tiny[2], tiny[3]), Duplicated(p, dp),
                backend="opencl")
    times = []
    for _ in range(repeats):  # every call is timed and checked (the atomic baseline is slow)
        seed()
        start = time.perf_counter()
        gradient()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    expected = float(np.sum(x_host * dy_host))
    error = abs(dp.get()[0] - expected) / abs(expected)
    os.environ.pop("ISOZYME_OPENCL_REDUCTION")
    return {"n": n, "mode": mode, "ms": seconds * 1e3, "relative_error": error}


def gmm(n: int, d: int, k: int, repeats: int) -> dict[str, float]:
    from gmm import gmm_data, gmm_objective, log_gamma_distrib  # examples/gmm.py

    data = gmm_data(d, k, n, seed=0)
    args = [data.alphas, data.means, data.icf, data.x]
    log_gamma_d = log_gamma_distrib(0.5 * (d + data.m + 1), d)
    results = {}
    for name, kernel, backend in (("cpu", gmm_objective, "llvm"), ("cpu_prange", gmm_prange, "llvm"),
                                  ("gpu", gmm_prange, "opencl")):
        shadows = [np.zeros_like(a) for a in args]
        activity = [Duplicated(a, s) for a, s in zip(args[:3], shadows[:3], strict=True)] + [Const(args[3])]

        def gradient(activity: list = activity, kernel: iz.Kernel = kernel, backend: str = backend,
                     shadows: list = shadows) -> object:
            for s in shadows:
                s[...] = 0.0
            return iz.autodiff(kernel, *activity, data.gamma, data.m, log_gamma_d, backend=backend)
        seconds, _ = timed(gradient, repeats)
        results[name] = (seconds, [s.copy() for s in shadows[:3]])
    reference = results["cpu"][1]
    error = max(float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-300))
                for other in ("cpu_prange", "gpu") for a, b in zip(reference, results[other][1], strict=True))
    cpu_s, cpu_prange_s, gpu_s = (results[name][0] for name in ("cpu", "cpu_prange", "gpu"))
    return {"n": n, "d": d, "K": k, "cpu_ms": cpu_s * 1e3, "cpu_prange_ms": cpu_prange_s * 1e3,
            "gpu_ms": gpu_s * 1e3, "gpu_speedup": cpu_s / gpu_s, "max_relative_difference": error}


def print_shared(row: dict[str, object]) -> None:
    print(f"shared parameter, {row['mode']:6} n = {row['n']:>9}: {row['ms']:10.2f} ms "
          f"(relative error {row['relative_error']:.1e})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 26)
    parser.add_argument("--shared", type=int, default=1 << 24)
    parser.add_argument("--naive", type=str, default=str(1 << 20), help="work items for the atomic baseline")
    parser.add_argument("--gmm", type=str, default="1000x10x25,1000x64x100,100000x10x25",
                        help="GMM sizes n x d x K")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    print(f"device: {device().name}", flush=True)
    report: dict[str, object] = {"device": device().name}
    b = bandwidth(options.n, options.repeats)
    report["bandwidth"] = b
    print(f"copy {b['copy_GBps']:.0f} GB/s (isozyme copy kernel {b['copy_kernel_GBps']:.0f}); elementwise primal "
          f"{b['primal_GBps']:.0f} GB/s = {100 * b['primal_GBps'] / b['copy_GBps']:.0f}% of copy; gradient "
          f"{b['gradient_GBps']:.0f} GB/s = {100 * b['gradient_GBps'] / b['copy_GBps']:.0f}% "
          f"({b['primal_ms']:.2f} / {b['gradient_ms']:.2f} ms at n = {options.n})", flush=True)
    rows = [shared_parameter(options.shared, "group", options.repeats)]
    report["shared"] = rows
    print_shared(rows[0])
    gmm_rows = []
    for size in (v for v in options.gmm.split(",") if v):
        n, d, k = (int(v) for v in size.split("x"))
        row = gmm(n, d, k, max(1, options.repeats // 2))
        gmm_rows.append(row)
        print(f"GMM gradient n = {n} d = {d} K = {k}: CPU llvm {row['cpu_ms']:.1f} ms (the prange kernel on the "
              f"CPU: {row['cpu_prange_ms']:.1f} ms), GPU {row['gpu_ms']:.1f} ms: {row['gpu_speedup']:.2f}x "
              f"(max relative difference {row['max_relative_difference']:.1e})", flush=True)
    report["gmm"] = gmm_rows
    for n in (int(v) for v in options.naive.split(",") if v):  # last: slow
        rows.append(shared_parameter(n, "atomic", 1))
        print_shared(rows[-1])
        if options.json:
            options.json.write_text(json.dumps(report, indent=2))
    if options.json:
        options.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
