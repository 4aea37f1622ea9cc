"""OpenCL on a GPU: memory bandwidth of a parallel kernel and its gradient, the shared-parameter gradient with
work-group reductions against one atomic per work item, and the GMM gradient on the GPU against the CPU.

    ISOZYME_OPENCL_DEVICE=nvidia python benchmarks/opencl_gpu.py [--n 67108864] [--shared 16777216]
        [--naive 1048576] [--gmm 1000x10x25,...] [--repeats 5] [--repeat-checks 20] [--json FILE]

Every figure is measured in this one run, side by side (machines are shared and noisy):

1. `elementwise`: y[i] = a*x[i]*x[i] + z[i] over n f64 elements, with device arrays (`iz.to_device`), so no
   host copies. Bytes are those the loops must move: the primal reads x and z and writes y (24 per element);
   the gradient (y, x, z Duplicated, a Active) runs the primal again and its reverse, one loop once fused
   (`optimize/loop_fusion.py` puts a `prange` loop and its reverse together): it reads x, z and d_y, writes
   y, zeroes d_y and adds into d_x and d_z (72 per element; 80 with fusion off, when the reverse loop reads
   x again). d_y is set again before each call, d_x and d_z zeroed, untimed. The reference is a
   device-to-device copy of the same arrays (`enqueue_copy`, 16 bytes per element) and isozyme's own copy
   kernel. Each timed call starts on an idle GPU (its arrays were set, and the previous call checked, in
   between: the host's CPU has streamed the arrays through its caches and slowed down meanwhile, so the
   host's part of a call takes several times longer than in a row).
   Then *in a row* (`back_to_back`): `--repeats` calls one right after the other, each on arrays of its
   own (set before the batch, untimed, each call's checked after it), the median time of a call of the
   batch (each returns when its work is done), against as many device copies in a row: a kernel called
   again and again, as in a training loop. One more call of each, profiled (`iz.profile`), gives the
   bandwidth of the loop kernels alone (their device time from profiling events): what a call would reach
   without the rest of its time (the serial kernel's runs, the host's part, waiting for the device).
2. `shared`: y[i] = p[0]*x[i]; the gradient adds x[i]*d_y[i] of every work item into d_p[0]. With work-group
   reductions (the default) and with ISOZYME_OPENCL_REDUCTION=atomic (one compare-and-swap add per work item).
3. GMM (ADBench's objective): the gradient of `examples/gmm.py`'s kernel on the CPU (`llvm`), and of the same
   objective written with `prange` over the points on the GPU (OpenCL) and on the CPU.

Times are medians of `--repeats` calls after a warm-up call that compiles (the GMM gradient on the CPU:
half as many; on the GPU: `--repeat-checks`); the atomic baseline's calls are all timed, after a call on
4 elements compiled it.

Checks (`isozyme/benchmark_checks.py`): every call above, the warm-up included, is compared with its
reference after its timer stopped, on what that call produced (the arrays it wrote are cleared before it,
untimed, so a call that does nothing fails): the copies with x, exactly; the elementwise primal with
numpy's a*x*x + z and its gradient (y, d_x, d_z, the consumed d_y, d_a) with numpy's; the shared
parameter's gradient (y, d_x, d_y, d_p) with numpy's; every GMM gradient (value and the three shadows) with
the first gradient of the example's serial kernel on the CPU. The GPU's GMM gradient is called
`--repeat-checks` times (default 20) after its warm-up, every result checked: a race shows in some calls
only. The tolerance is `GPU_TOLERANCE`, 1e-10 relative in the max-norm (the same f64 math, its sums taken
in another order). A failed check is marked MISMATCH in its printed line and written to the JSON as
"check": {"passed": false, ...}, with "passed": false at the top; the script exits with status 1 after
printing and writing everything.

`--json` writes the results schema (`isozyme/benchmark_suite/results.py`, `result_rows`): rows of the device
copy (`enqueue_copy` a "peer", the driver's), of the elementwise primal and gradient (their bandwidth as a
fraction of the copy's in "ratios"), from idle and in a row, of the shared parameter's gradient and of the
GMM gradients, every isozyme row "natural".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "examples"), str(Path(__file__).resolve().parents[1])]

from gmm import HALF_LOG_2PI, log_wishart_prior, logsumexp, qtimesx, sqnorm  # noqa: E402  (examples/gmm.py)

import isozyme as iz  # noqa: E402
from isozyme import Active, Array, Const, Duplicated, f64, i64  # noqa: E402
from isozyme.benchmark_checks import MISMATCH, Check, checks_json, exit_status  # noqa: E402
from isozyme.benchmark_suite import results  # noqa: E402
from isozyme.runtime.opencl_device import device  # noqa: E402

GRADIENT_BYTES = 72
"""Bytes per element the elementwise gradient must move (module docstring, 1)."""
GPU_TOLERANCE = 1e-10
GPU_REASON = ("the same f64 math, its sums taken in another order (contracted multiply-adds, work-group sums, "
              "atomic adds in any order)")
COPY_REASON = "a copy moves the bits"


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


def timed(call: Callable[[], object], repeats: int, setup: Callable[[], object] | None = None,
          check: Callable[[object], object] | None = None, warm_up: bool = True) -> float:
    """The median time of `repeats` calls of `call` (after a warm-up call that compiles, unless not
    `warm_up`): `setup` runs untimed before each call, `check` untimed after each (the warm-up's too) with
    what the call returned."""
    times = []
    for index in range(repeats + warm_up):
        if setup:
            setup()
        start = time.perf_counter()
        returned = call()
        elapsed = time.perf_counter() - start
        if index or not warm_up:
            times.append(elapsed)
        if check:
            check(returned)
    return statistics.median(times)


def clear(*arrays: Any) -> None:
    """Zero device arrays (untimed, before a call that must write them)."""
    cl = __import__("pyopencl")
    for array in arrays:
        cl.enqueue_fill_buffer(array.where.queue, array.data, np.float64(0.0), 0, array.nbytes)
    device().queue.finish()


def gpu_check(what: str) -> Check:
    return Check(what, GPU_TOLERANCE, GPU_REASON)


def bandwidth(n: int, repeats: int) -> tuple[dict[str, float], dict[str, Check]]:
    cl = __import__("pyopencl")
    where = device()
    rng = np.random.default_rng(0)
    x_host, z_host = rng.random(n), rng.random(n)
    x, z, y = iz.to_device(x_host), iz.to_device(z_host), iz.to_device(np.zeros(n))
    dx, dz, dy = iz.to_device(np.zeros(n)), iz.to_device(np.zeros(n)), iz.to_device(np.ones(n))
    checks = {"copy": Check("enqueue_copy: y against x", 0.0, COPY_REASON),
              "copy_kernel": Check("isozyme's copy kernel: y against x", 0.0, COPY_REASON),
              "primal": gpu_check("elementwise primal: y against numpy's a*x*x + z"),
              "gradient": gpu_check("elementwise gradient: y, d_x, d_z, d_y, d_a against numpy's")}
    primal_reference = 1.5 * x_host * x_host + z_host
    gradient_reference = {"y": primal_reference, "d_x": 3.0 * x_host, "d_z": np.ones(n), "d_y": np.zeros(n),
                          "d_a": float(np.sum(x_host * x_host))}

    def device_copy() -> None:
        cl.enqueue_copy(where.queue, y.data, x.data, byte_count=8 * n)
        where.queue.finish()
    copy_s = timed(device_copy, repeats, lambda: clear(y), lambda _: checks["copy"].compare(y.get(), x_host))
    kernel_copy = iz.kernel(copy, backend="opencl")
    copy_kernel_s = timed(lambda: kernel_copy(y, x), repeats, lambda: clear(y),
                          lambda _: checks["copy_kernel"].compare(y.get(), x_host))
    primal = iz.kernel(elementwise, backend="opencl")
    primal_s = timed(lambda: primal(y, x, z, 1.5), repeats, lambda: clear(y),
                     lambda _: checks["primal"].compare(y.get(), primal_reference))

    def seed() -> None:  # the gradient zeroes d_y and adds into d_x and d_z: set them again, untimed
        dy.set(np.ones(n))
        clear(y, dx, dz)

    def gradient() -> Any:
        return iz.autodiff(primal, Duplicated(y, dy), Duplicated(x, dx), Duplicated(z, dz), Active(1.5),
                           backend="opencl")

    def check_gradient(returned: Any) -> None:
        result = {"y": y.get(), "d_x": dx.get(), "d_z": dz.get(), "d_y": dy.get(), "d_a": returned[1][0]}
        checks["gradient"].compare(result, gradient_reference)
    gradient_s = timed(gradient, repeats, seed, check_gradient)
    gb = 1e-9
    return ({"n": n, "copy_GBps": 16 * n * gb / copy_s, "copy_kernel_GBps": 16 * n * gb / copy_kernel_s,
             "primal_GBps": 24 * n * gb / primal_s, "gradient_GBps": GRADIENT_BYTES * n * gb / gradient_s,
             "primal_ms": primal_s * 1e3, "gradient_ms": gradient_s * 1e3}, checks)


def back_to_back(n: int, calls: int) -> tuple[dict[str, float], dict[str, Check]]:
    """Bandwidth in steady state: `calls` calls in a row, none waiting for anything but the one before it
    (as in a loop that calls a kernel again and again), against as many device copies in a row; each call
    on arrays of its own (cleared before the batch, untimed) and checked after it (module docstring)."""
    cl = __import__("pyopencl")
    where = device()
    rng = np.random.default_rng(0)
    x_host, z_host = rng.random(n), rng.random(n)
    x, z = iz.to_device(x_host), iz.to_device(z_host)
    outs = [iz.to_device(np.zeros(n)) for _ in range(calls)]
    shadows = [[iz.to_device(np.zeros(n)) for _ in range(3)] for _ in range(calls)]  # d_y, d_x, d_z per call
    checks = {"copy": Check("enqueue_copy in a row: y against x", 0.0, COPY_REASON),
              "primal": gpu_check("elementwise primal in a row: y against numpy's a*x*x + z"),
              "gradient": gpu_check("elementwise gradient in a row: y, d_x, d_z, d_y, d_a against numpy's")}
    primal_reference = 1.5 * x_host * x_host + z_host
    gradient_reference = {"y": primal_reference, "d_x": 3.0 * x_host, "d_z": np.ones(n), "d_y": np.zeros(n),
                          "d_a": float(np.sum(x_host * x_host))}
    primal = iz.kernel(elementwise, backend="opencl")

    def batch(call: Callable[[int], object]) -> tuple[float, list[object]]:
        call(0)  # compiles, records the launches
        clear(*outs)
        for d_y, d_x, d_z in shadows:
            d_y.set(np.ones(n))
            clear(d_x, d_z)
        times, returned = [], []
        for k in range(calls):  # each call returns when its work is done: time each, take the median
            start = time.perf_counter()
            returned.append(call(k))
            times.append(time.perf_counter() - start)
        return statistics.median(times), returned

    def device_copy(k: int) -> None:
        cl.enqueue_copy(where.queue, outs[k].data, x.data, byte_count=8 * n)
        where.queue.finish()
    copy_s, _ = batch(device_copy)
    for out in outs:
        checks["copy"].compare(out.get(), x_host)
    def run_primal(k: int) -> None:
        primal(outs[k], x, z, 1.5)

    def run_gradient(k: int) -> Any:
        return iz.autodiff(primal, Duplicated(outs[k], shadows[k][0]), Duplicated(x, shadows[k][1]),
                           Duplicated(z, shadows[k][2]), Active(1.5), backend="opencl")

    def check_gradient(k: int, result: Any) -> None:
        d_y, d_x, d_z = shadows[k]
        checks["gradient"].compare({"y": outs[k].get(), "d_x": d_x.get(), "d_z": d_z.get(), "d_y": d_y.get(),
                                    "d_a": result[1][0]}, gradient_reference)

    primal_s, _ = batch(run_primal)
    for out in outs:
        checks["primal"].compare(out.get(), primal_reference)
    gradient_s, returned = batch(run_gradient)
    for k, result in enumerate(returned):
        check_gradient(k, result)
    clear(outs[0], *shadows[0][1:])  # one more call of each, profiled: its loop kernels' device time
    shadows[0][0].set(np.ones(n))
    primal_loops_s, _ = loop_seconds(lambda: run_primal(0))
    checks["primal"].compare(outs[0].get(), primal_reference)
    clear(outs[0], *shadows[0][1:])
    gradient_loops_s, result = loop_seconds(lambda: run_gradient(0))
    check_gradient(0, result)
    gb = 1e-9
    return ({"n": n, "calls": calls, "copy_GBps": 16 * n * gb / copy_s, "primal_GBps": 24 * n * gb / primal_s,
             "gradient_GBps": GRADIENT_BYTES * n * gb / gradient_s, "primal_ms": primal_s * 1e3,
             "gradient_ms": gradient_s * 1e3, "primal_loop_kernels_GBps": 24 * n * gb / primal_loops_s,
             "gradient_loop_kernels_GBps": GRADIENT_BYTES * n * gb / gradient_loops_s,
             "primal_loop_kernels_ms": primal_loops_s * 1e3, "gradient_loop_kernels_ms": gradient_loops_s * 1e3},
            checks)


def loop_seconds(call: Callable[[], object]) -> tuple[float, object]:
    """The device time of the loop kernels of one call (`iz.profile`), and what the call returned."""
    with iz.profile() as profile:
        returned = call()
    return sum(launch.device_ms for record in profile.calls for launch in record.launches
               if launch.kind == "loop") / 1e3, returned


def shared_parameter(n: int, mode: str, repeats: int) -> tuple[dict[str, object], Check]:
    os.environ["ISOZYME_OPENCL_REDUCTION"] = mode
    kernel = iz.kernel(shared, backend="opencl")  # a new kernel object: compiled for this mode
    rng = np.random.default_rng(1)
    x_host, dy_host = rng.random(n), rng.random(n)
    x, y, dy = iz.to_device(x_host), iz.to_device(np.zeros(n)), iz.to_device(dy_host)
    p, dp = iz.to_device(np.array([2.0])), iz.to_device(np.zeros(1))
    dx = iz.to_device(np.zeros(n))
    check = gpu_check(f"shared parameter gradient ({mode}): y, d_x, d_y, d_p against numpy's")
    reference = {"y": 2.0 * x_host, "d_x": 2.0 * dy_host, "d_y": np.zeros(n),
                 "d_p": np.array([np.sum(x_host * dy_host)])}

    def seed() -> None:  # the gradient zeroes d_y and adds into d_x and d_p: set them again, untimed
        dy.set(dy_host)
        clear(y, dx, dp)

    def gradient() -> None:
        iz.autodiff(kernel, Duplicated(y, dy), Duplicated(x, dx), Duplicated(p, dp), backend="opencl")
    tiny = [iz.to_device(np.ones(4)) for _ in range(4)]  # compiles
    iz.autodiff(kernel, Duplicated(tiny[0], tiny[1]), Duplicated(tiny[2], tiny[3]), Duplicated(p, dp),
                backend="opencl")
    seconds = timed(gradient, repeats, seed, warm_up=False,  # every call timed (the atomic baseline is slow)
                    check=lambda _: check.compare({"y": y.get(), "d_x": dx.get(), "d_y": dy.get(), "d_p": dp.get()},
                                                  reference))
    os.environ.pop("ISOZYME_OPENCL_REDUCTION")
    return {"n": n, "mode": mode, "ms": seconds * 1e3, "check": check.as_dict()}, check


GMM_VARIANTS = (("cpu", "llvm"), ("cpu_prange", "llvm"), ("gpu", "opencl"))
"""The GMM gradients: the example's serial kernel on the CPU (the first call's result is the reference),
and `gmm_prange` on the CPU and on the GPU."""


def gmm(n: int, d: int, k: int, repeats: int, repeat_checks: int) -> tuple[dict[str, object], dict[str, Check]]:
    from gmm import gmm_data, gmm_objective, log_gamma_distrib  # examples/gmm.py

    data = gmm_data(d, k, n, seed=0)
    args = [data.alphas, data.means, data.icf, data.x]
    log_gamma_d = log_gamma_distrib(0.5 * (d + data.m + 1), d)
    seconds: dict[str, float] = {}
    checks: dict[str, Check] = {}
    reference: list[dict[str, object]] = []  # the first result of the CPU's serial kernel
    for name, backend in GMM_VARIANTS:
        kernel = gmm_objective if name == "cpu" else gmm_prange
        shadows = [np.zeros_like(a) for a in args[:3]]
        activity = [Duplicated(a, s) for a, s in zip(args[:3], shadows, strict=True)] + [Const(args[3])]
        check = checks[name] = gpu_check(f"GMM n={n} d={d} K={k} gradient, {name} ({backend}), against the "
                                         "CPU's serial kernel")

        def zero(shadows: list = shadows) -> None:  # the shadows accumulate: zeroed before each call, untimed
            for s in shadows:
                s[...] = 0.0

        def gradient(activity: list = activity, kernel: iz.Kernel = kernel, backend: str = backend) -> Any:
            return iz.autodiff(kernel, *activity, data.gamma, data.m, log_gamma_d, backend=backend)

        def compare(returned: Any, shadows: list = shadows, check: Check = check) -> None:
            result = {"value": returned[0], "d_alphas": shadows[0].copy(), "d_means": shadows[1].copy(),
                      "d_icf": shadows[2].copy()}
            if not reference:  # the first call of the first variant
                reference.append(result)
            check.compare(result, reference[0])
        calls = repeat_checks if backend == "opencl" else max(1, repeats // 2)
        seconds[name] = timed(gradient, calls, zero, compare)
    error = max(checks[name].error for name in ("cpu_prange", "gpu"))
    return ({"n": n, "d": d, "K": k, "cpu_ms": seconds["cpu"] * 1e3, "cpu_prange_ms": seconds["cpu_prange"] * 1e3,
             "gpu_ms": seconds["gpu"] * 1e3, "gpu_speedup": seconds["cpu"] / seconds["gpu"],
             "gpu_calls": checks["gpu"].calls, "max_relative_difference": error if error < float("inf") else None,
             "check": checks_json(checks)}, checks)


def verdict(checks: Sequence[Check]) -> str:
    """"checked: ok", or MISMATCH and what differs."""
    failed = [check for check in checks if not check.passed]
    if not failed:
        return "checked: ok"
    return f"{MISMATCH}: " + "; ".join(f"{c.what} differs by {c.error:.1e} (tolerance {c.tolerance:.0e})"
                                       for c in failed)


def print_shared(row: dict[str, Any], check: Check) -> None:
    print(f"shared parameter, {row['mode']:6} n = {row['n']:>9}: {row['ms']:10.2f} ms "
          f"(relative error {check.error:.1e} over {check.calls} calls, {verdict([check])})", flush=True)


REDUCTIONS = {"group": "isozyme, work-group sums", "atomic": "isozyme, an atomic add per work item"}
GMM_ROWS = {"cpu": "isozyme serial, CPU (llvm)", "cpu_prange": "isozyme prange, CPU (llvm)",
            "gpu": "isozyme prange, GPU (opencl)"}


def bandwidth_rows(b: dict[str, Any], checks: dict[str, Check], when: str) -> list[dict[str, Any]]:
    """The copies' and the elementwise kernel's rows of the results schema, from `bandwidth` or `back_to_back`."""
    size, copy_ms = f"n={b['n']} {when}", 16 * b["n"] * 1e-6 / b["copy_GBps"]
    made = [results.row("device copy", size, "enqueue_copy", "peer", copy_ms, checks["copy"].as_dict(),
                        details={"GBps": b["copy_GBps"]})]
    if "copy_kernel_GBps" in b:
        made.append(results.row("device copy", size, "isozyme copy kernel", "natural",
                                16 * b["n"] * 1e-6 / b["copy_kernel_GBps"], checks["copy_kernel"].as_dict(),
                                details={"GBps": b["copy_kernel_GBps"]}))
    for part in ("primal", "gradient"):
        details = {"GBps": b[f"{part}_GBps"], **{key.removeprefix(f"{part}_"): value for key, value in b.items()
                                                 if key.startswith(f"{part}_loop_kernels_")}}
        made.append(results.row(f"elementwise {part}", size, "isozyme", "natural", b[f"{part}_ms"],
                                checks[part].as_dict(), details=details,
                                ratios={"of the copy's bandwidth": b[f"{part}_GBps"] / b["copy_GBps"]}))
    return made


def result_rows(report: dict[str, Any], checks: dict[str, dict[str, Check]]) -> list[dict[str, Any]]:
    """The report's rows of the results schema (module docstring); `checks` by the report's keys."""
    made = []
    for key, when in (("bandwidth", "from idle"), ("back_to_back", "in a row")):
        if key in report:
            made += bandwidth_rows(report[key], checks[key], when)
    for row in report.get("shared", []):
        made.append(results.row("shared parameter gradient", f"n={row['n']}", REDUCTIONS[row["mode"]], "natural",
                                row["ms"], row["check"]))
    for row in report.get("gmm", []):
        for name, variant in GMM_ROWS.items():
            made.append(results.row("gmm gradient", f"n={row['n']} d={row['d']} K={row['K']}", variant, "natural",
                                    row[f"{name}_ms"], row["check"]["checks"][name],
                                    calls=row["check"]["checks"][name]["calls"] - 1,
                                    **({"ratios": {"CPU serial/GPU": row["gpu_speedup"]}} if name == "gpu" else {})))
    return made


def parse_gmm_sizes(text: str) -> Iterator[tuple[int, int, int]]:
    for size in (v for v in text.split(",") if v):
        n, d, k = (int(v) for v in size.split("x"))
        yield n, d, k


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 26)
    parser.add_argument("--shared", type=int, default=1 << 24)
    parser.add_argument("--naive", type=str, default=str(1 << 20), help="work items for the atomic baseline")
    parser.add_argument("--gmm", type=str, default="1000x10x25,1000x64x100,100000x10x25",
                        help="GMM sizes n x d x K")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--repeat-checks", type=int, default=20,
                        help="timed calls of the GPU's GMM gradient, each result checked (default 20)")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args(argv)
    print(f"device: {device().name}", flush=True)
    report: dict[str, Any] = {}
    every_check: list[Check] = []
    bandwidth_checks: dict[str, dict[str, Check]] = {}

    def write() -> None:
        if options.json:
            results.write(options.json, "opencl_gpu", result_rows(report, bandwidth_checks),
                          {key: value for key, value in vars(options).items() if key != "json"},
                          passed=all(check.passed for check in every_check))
    for key, label, (b, checks) in (("bandwidth", "from idle", bandwidth(options.n, options.repeats)),
                                    ("back_to_back", f"in a row ({options.repeats} calls each)",
                                     back_to_back(options.n, options.repeats))):
        every_check += checks.values()
        report[key], bandwidth_checks[key] = b, checks
        kernel_copy = f" (isozyme copy kernel {b['copy_kernel_GBps']:.0f})" if "copy_kernel_GBps" in b else ""
        print(f"{label}: copy {b['copy_GBps']:.0f} GB/s{kernel_copy}; elementwise primal {b['primal_GBps']:.0f} "
              f"GB/s = {100 * b['primal_GBps'] / b['copy_GBps']:.0f}% of copy; gradient {b['gradient_GBps']:.0f} "
              f"GB/s = {100 * b['gradient_GBps'] / b['copy_GBps']:.0f}% ({b['primal_ms']:.2f} / "
              f"{b['gradient_ms']:.2f} ms at n = {options.n}; {verdict(list(checks.values()))})", flush=True)
        if "gradient_loop_kernels_GBps" in b:
            print(f"  the loop kernels alone: primal {b['primal_loop_kernels_GBps']:.0f} GB/s = "
                  f"{100 * b['primal_loop_kernels_GBps'] / b['copy_GBps']:.0f}%, gradient "
                  f"{b['gradient_loop_kernels_GBps']:.0f} GB/s = "
                  f"{100 * b['gradient_loop_kernels_GBps'] / b['copy_GBps']:.0f}% ({b['primal_loop_kernels_ms']:.2f} / "
                  f"{b['gradient_loop_kernels_ms']:.2f} ms)", flush=True)
    row, check = shared_parameter(options.shared, "group", options.repeats)
    rows = [row]
    every_check.append(check)
    report["shared"] = rows
    print_shared(row, check)
    gmm_rows = report["gmm"] = []
    for n, d, k in parse_gmm_sizes(options.gmm):
        row, checks = gmm(n, d, k, options.repeats, options.repeat_checks)
        gmm_rows.append(row)
        every_check += checks.values()
        print(f"GMM gradient n = {n} d = {d} K = {k}: CPU llvm {row['cpu_ms']:.1f} ms (the prange kernel on the "
              f"CPU: {row['cpu_prange_ms']:.1f} ms), GPU {row['gpu_ms']:.1f} ms: {row['gpu_speedup']:.2f}x "
              f"(max relative difference {max(c.error for c in checks.values()):.1e} over "
              f"{sum(c.calls for c in checks.values())} calls, the GPU's {checks['gpu'].calls}; "
              f"{verdict(list(checks.values()))})", flush=True)
    for n in (int(v) for v in options.naive.split(",") if v):  # last: slow
        row, check = shared_parameter(n, "atomic", 1)
        rows.append(row)
        every_check.append(check)
        print_shared(row, check)
        write()
    write()
    return exit_status(every_check, "opencl_gpu.py")


if __name__ == "__main__":
    raise SystemExit(main())
