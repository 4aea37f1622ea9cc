"""The GMM gradient on one GPU: isozyme's OpenCL against JAX, torch.compile and torch eager, in one run (issue 24).

    ISOZYME_OPENCL_DEVICE=nvidia python benchmarks/gmm_gpu.py [--sizes 1000x10x25,1000x64x100,100000x10x25]
        [--precisions f64,f32] [--repeats 20] [--peers jax,torch,torch_compile]
        [--variants pairs,pairs_qmu,staged,blocked,blocked_qmu,points] [--profile] [--json FILE] [--plot FILE.svg]
    python benchmarks/gmm_gpu.py --from-json FILE --plot FILE.svg      # the plot of an earlier run

ADBench's GMM objective (`examples/gmm.py`), the gradient with respect to alphas, means and icf, at n x d x K.
Rows, per size and precision (f32 where the peer supports it; isozyme's f32 kernel is `gmm_gpu_kernels.load(f32)`):

- `isozyme pairs`: `benchmarks/tuned/gmm_gpu_kernels.py`'s `gmm_pairs` (a work item per component and point);
- `isozyme pairs_qmu`: its `gmm_pairs_qmu` (the same, with Q_k mu_k once per component: one atomic add per
  step of the reverse pairs loop instead of two);
- `isozyme staged`: its `gmm_staged` (the same pairs in three stages through (d, K*n) arrays);
- `isozyme blocked`: its `gmm_blocked` (a work item per component and four points);
- `isozyme blocked_qmu`: its `gmm_blocked_qmu` (the same with Q_k mu_k once per component);
- `isozyme points`: `opencl_gpu.py`'s `gmm_prange` (a work item per point: the example's loops), f64 only;
- `jax`: `jax.jit(jax.grad(...))` of the K-batched JAX formulation (`isozyme/benchmark_suite/peer_jax.py`)
  on the GPU;
- `torch_compile`, `torch`: `torch.compile` and eager PyTorch of the same formulation
  (`isozyme/benchmark_suite/peer_torch.py`) on the GPU, the gradient by `torch.autograd.grad`.

`--variants` chooses isozyme's rows (all by default), and the JSON is written again after each size, so a
run cut short keeps the sizes it measured. Every variant's arguments are on the GPU before timing
(isozyme: `iz.to_device`, its shadows zeroed before each call, untimed), and each timed call ends when its
results are on the device (`block_until_ready`, `torch.cuda.synchronize`); the gradients are then copied
to the host, untimed, and checked. Times are medians of `--repeats` calls after a warm-up call (`isozyme
points`: at most 3 calls, it is slow).

Checks: every call's gradient (and value) against the CPU's: the example's serial kernel on `llvm` in f64.
Tolerance: 1e-10 relative in the max-norm for f64 (the same math, sums in another order), 2e-3 for f32 (f32
rounding over sums of up to n terms). A mismatch prints MISMATCH and the script exits with status 1 after
writing everything.

Compile times: isozyme's first call per kernel and precision (lowering, AD, optimization, OpenCL C, the
driver's build) with an empty disk cache (`ISOZYME_CACHE_DIR` a fresh folder), and the first call of a new
process with that cache filled (`--first-call`, run as a subprocess), where only the driver builds.
`--profile` prints and stores the profile (`iz.profile()`) of one call of each isozyme variant. `--plot`
draws the medians as bars per size and precision, on a log scale (the rows whose checks passed).

`--json` writes the results schema (`isozyme/benchmark_suite/results.py`, `result_rows`; `ba_gpu.py`,
`mlp_gpu.py` and `lstm_gpu.py` too, `write_report`): a row per size, precision and variant, `isozyme
points` "natural" (the example's loops), the formulations of `benchmarks/tuned/gmm_gpu_kernels.py` "tuned",
JAX and PyTorch "peer".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "examples"), str(ROOT)]
if __name__ == "__main__" and "ISOZYME_CACHE_DIR" not in os.environ:  # cold compiles: an empty cache
    os.environ["ISOZYME_CACHE_DIR"] = tempfile.mkdtemp(prefix="isozyme-gmm-gpu-")

import isozyme as iz  # noqa: E402
from isozyme import Const, Duplicated  # noqa: E402
from isozyme.benchmark_checks import MISMATCH, Check, exit_status  # noqa: E402
from isozyme.benchmark_suite import results  # noqa: E402
from isozyme.runtime.opencl_device import device  # noqa: E402

TOLERANCE = {"f64": 1e-10, "f32": 2e-3}
REASON = {"f64": "the same f64 math, its sums in another order (work-group sums, atomic adds in any order)",
          "f32": "f32 rounding over sums of up to n terms, against the f64 reference"}
DTYPES = {"f64": np.float64, "f32": np.float32}


def problem(n: int, d: int, K: int) -> tuple[tuple, dict[str, Any]]:
    """The arguments (f64, host) and the reference: the CPU's serial kernel's value and gradient."""
    from gmm import gmm_data, gmm_objective, log_gamma_distrib

    data = gmm_data(d, K, n, seed=0)
    args = (data.alphas, data.means, data.icf, data.x, float(data.gamma), int(data.m),
            log_gamma_distrib(0.5 * (d + data.m + 1), d))
    shadows = [np.zeros_like(a) for a in args[:3]]
    value, _ = iz.autodiff(gmm_objective, *(Duplicated(a, s) for a, s in zip(args[:3], shadows)), Const(args[3]),
                           *args[4:], backend="llvm")
    return args, {"value": value, "d_alphas": shadows[0], "d_means": shadows[1], "d_icf": shadows[2]}


def isozyme_variant(kernel: iz.Kernel, args: tuple, dtype: type) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    """A gradient call on device arrays (shadows zeroed before it) and the host copy of what it returned."""
    arrays = [iz.to_device(np.ascontiguousarray(a, dtype=dtype)) for a in args[:4]]
    shadows = [iz.to_device(np.zeros(a.shape, dtype=dtype)) for a in args[:3]]
    zeros = [np.zeros(a.shape, dtype=dtype) for a in args[:3]]

    def call() -> Any:  # `setup`, run before the clock starts, zeroes the shadows it adds into
        return iz.autodiff(kernel, *(Duplicated(a, s) for a, s in zip(arrays[:3], shadows)), Const(arrays[3]),
                           *args[4:], backend="opencl")
    call.setup = lambda: [s.set(z) for s, z in zip(shadows, zeros)]  # type: ignore[attr-defined]

    def host(returned: Any) -> dict:
        return {"value": returned[0], "d_alphas": shadows[0].get(), "d_means": shadows[1].get(),
                "d_icf": shadows[2].get()}
    return call, host


def jax_variant(args: tuple, dtype: type) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    import jax

    from isozyme.benchmark_suite import peer_jax

    jax.config.update("jax_default_matmul_precision", "highest")  # f32 einsums in f32, not TF32
    loss = jax.jit(jax.value_and_grad(peer_jax.gmm_loss, argnums=(0, 1, 2)))
    inputs = [jax.device_put(np.asarray(a, dtype=dtype)) for a in args[:4]]
    scalars = [jax.device_put(np.asarray(v, dtype=dtype)) for v in (args[4], args[5], args[6])]

    def call() -> Any:
        return jax.block_until_ready(loss(*inputs, *scalars))

    def host(returned: Any) -> dict:
        value, grads = returned
        return {"value": float(value), **{name: np.asarray(g, dtype=np.float64)
                                          for name, g in zip(("d_alphas", "d_means", "d_icf"), grads)}}
    return call, host


def torch_variant(args: tuple, dtype: type, compiled: bool) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    import torch

    from isozyme.benchmark_suite import peer_torch

    torch.backends.cuda.matmul.allow_tf32 = False  # f32 matrix products in f32, as isozyme's and JAX's
    loss = torch.compile(peer_torch.gmm_loss) if compiled else peer_torch.gmm_loss
    tensors = [torch.tensor(np.asarray(a, dtype=dtype), device="cuda") for a in args[:4]]
    for t in tensors[:3]:
        t.requires_grad_(True)
    gamma = torch.tensor(args[4], dtype=tensors[0].dtype, device="cuda")
    log_gamma_d = torch.tensor(args[6], dtype=tensors[0].dtype, device="cuda")

    def call() -> Any:
        value = loss(*tensors, gamma, args[5], log_gamma_d)
        grads = torch.autograd.grad(value, tensors[:3])
        torch.cuda.synchronize()
        return value, grads

    def host(returned: Any) -> dict:
        value, grads = returned
        return {"value": float(value), **{name: g.detach().cpu().numpy().astype(np.float64)
                                          for name, g in zip(("d_alphas", "d_means", "d_icf"), grads)}}
    return call, host


def cuda_available() -> bool:
    """Can torch run on a CUDA GPU (the torch rows are left out otherwise)?"""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def run(call: Callable[[], Any], host: Callable[[Any], dict], repeats: int, check: Check,
        reference: dict) -> tuple[float, float]:
    """The first call's seconds (it compiles) and the median of `repeats` more; every result checked."""
    times = []
    for _ in range(repeats + 1):
        setup = getattr(call, "setup", None)
        if setup is not None:
            setup()
        start = time.perf_counter()
        returned = call()
        times.append(time.perf_counter() - start)
        check.compare(host(returned), reference)
    return times[0], statistics.median(times[1:])


def device_variant(gradient: Callable[[list, list], Any], args: tuple, shadowed: Sequence[int],
                   names: Sequence[str]) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    """`ba_gpu.py`'s and `mlp_gpu.py`'s isozyme variant: `gradient(arrays, shadows)` on device arrays, the
    shadows those of the arguments at `shadowed` (zeroed before each call, untimed), and the host copy of
    what it returned: the value (its first item) and the shadows, by `names`."""
    arrays = [iz.to_device(np.ascontiguousarray(a)) for a in args]
    shadows = [iz.to_device(np.zeros(np.shape(args[k]))) for k in shadowed]
    zeros = [np.zeros(s.shape) for s in shadows]

    def call() -> Any:
        return gradient(arrays, shadows)
    call.setup = lambda: [s.set(z) for s, z in zip(shadows, zeros)]  # type: ignore[attr-defined]

    def host(returned: Any) -> dict:
        return {"value": returned[0], **{name: s.get() for name, s in zip(names, shadows)}}
    return call, host


def jax_gradient_variant(loss: Callable[..., Any], inputs: Sequence[Any],
                         names: Sequence[str]) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    """`jax.jit(jax.value_and_grad(loss))` in f64 on the device, the gradient in the first `len(names)` inputs
    (`ba_gpu.py`, `mlp_gpu.py`), and the host copy of what it returned."""
    import jax

    jax.config.update("jax_enable_x64", True)
    gradient = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(names)))))
    on_device = [jax.device_put(np.asarray(a)) for a in inputs]

    def call() -> Any:
        return jax.block_until_ready(gradient(*on_device))

    def host(returned: Any) -> dict:
        value, grads = returned
        return {"value": float(value), **{name: np.asarray(g, dtype=np.float64) for name, g in zip(names, grads)}}
    return call, host


def torch_gradient_variant(loss: Callable[..., Any], inputs: Sequence[Any], names: Sequence[str],
                           compiled: bool) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    """`loss` (`torch.compile`d or eager) on CUDA, `torch.autograd.grad` in the first `len(names)` inputs."""
    import torch

    function = torch.compile(loss) if compiled else loss
    tensors = [torch.tensor(np.asarray(a), device="cuda") for a in inputs]
    for t in tensors[:len(names)]:
        t.requires_grad_(True)

    def call() -> Any:
        value = function(*tensors)
        grads = torch.autograd.grad(value, tensors[:len(names)])
        torch.cuda.synchronize()
        return value, grads

    def host(returned: Any) -> dict:
        value, grads = returned
        return {"value": float(value.detach()), **{name: g.detach().cpu().numpy() for name, g in zip(names, grads)}}
    return call, host


def measure_variants(variants: dict[str, tuple], row: dict[str, Any], what: str, repeats: int, tolerance: float,
                     reason: str, few: Collection[str] = ()) -> list[Check]:
    """Run each variant's (call, host) pair (`run`: `repeats` calls, 3 at most for those in `few`, which are
    slow), checked against `row["reference"]`; its median ms, first call and check go into `row`. `ba_gpu.py`
    and `mlp_gpu.py` measure their rows with it."""
    reference = row.pop("reference")
    checks = []
    for name, (call, host) in variants.items():
        check = Check(f"{what} {name} against the CPU's gradient", tolerance, reason)
        first, median = run(call, host, min(repeats, 3) if name in few else repeats, check, reference)
        row["ms"][name], row["first_call_s"][name] = median * 1e3, first
        row["checks"][name] = check.as_dict()
        checks.append(check)
    return checks


def print_variants(row: dict[str, Any]) -> None:
    """A line per variant of a row of `measure_variants`: its median, its first call (and for isozyme's, the
    first call of a new process with the disk cache filled), its time over JAX's."""
    jax_ms = row["ms"].get("jax")
    for name, ms in row["ms"].items():
        versus = f"  {ms / jax_ms:8.2f}x JAX's time" if jax_ms else ""
        status = "" if row["checks"][name]["passed"] else f"  {MISMATCH}"
        warm = row["first_call_s"].get(f"{name}, warm disk cache")
        warm_text = "" if warm is None else f", warm disk cache {warm:.2f} s"
        print(f"  {name:18s} {ms:10.3f} ms  (first call {row['first_call_s'][name]:.2f} s{warm_text}){versus}"
              f"{status}", flush=True)


def gpu_row_parser(sizes: str) -> argparse.ArgumentParser:
    """The options of `ba_gpu.py`, `mlp_gpu.py` and `lstm_gpu.py`: --sizes (default `sizes`), --repeats, --peers,
    --json, and the hidden --first-call SIZE VARIANT of `measure_sizes`."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default=sizes)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--peers", default="jax,torch,torch_compile")
    parser.add_argument("--json")
    parser.add_argument("--first-call", nargs=2, metavar=("SIZE", "VARIANT"), help=argparse.SUPPRESS)
    return parser


def first_call_of(call: Callable[[], Any]) -> float:
    """The seconds of one call of a variant's `call` (its `setup` first, untimed)."""
    setup = getattr(call, "setup", None)
    if setup is not None:
        setup()
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def warm_first_calls(script: str, size: str, row: dict[str, Any]) -> None:
    """For each isozyme variant of `row`: the first call in a new process of `script` (`--first-call SIZE
    VARIANT`), with the disk cache this run filled, as `row["first_call_s"]["<variant>, warm disk cache"]`
    (None if that process failed)."""
    for name in [name for name in row["ms"] if name.startswith("isozyme")]:
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--first-call", size, name],
                              capture_output=True, text=True, env=os.environ, timeout=600)
        row["first_call_s"][f"{name}, warm disk cache"] = (float(done.stdout.split()[-1]) if done.returncode == 0
                                                            else None)


def measure_sizes(options: argparse.Namespace, measure_one: Callable[[str, list[str]], tuple[dict, list[Check]]],
                  title: Callable[[dict], str], script: str, first_call: Callable[[str, str], float], problem: str,
                  size: Callable[[dict], str], tuned: Collection[str] = ()) -> int:
    """`measure_one(size, peers)` for each of `options.sizes`, each row printed under its `title`; the exit
    status and the JSON of `write_report` (rows of `problem` at `size(row)`, the isozyme variants named in
    `tuned` "tuned", the others "natural"). Compiles are cold: `ISOZYME_CACHE_DIR` is a new folder unless it
    is set; after each row, `warm_first_calls` runs `first_call(size, variant)` (the seconds of that
    variant's first call) in new processes, which is what `--first-call` does."""
    if options.first_call:
        print(first_call(*options.first_call))
        return 0
    if "ISOZYME_CACHE_DIR" not in os.environ:
        os.environ["ISOZYME_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"isozyme-{Path(script).stem}-")
    peers = [peer for peer in options.peers.split(",") if peer]
    rows, checks = [], []
    for text in options.sizes.split(","):
        row, row_checks = measure_one(text, peers)
        warm_first_calls(script, text, row)
        print(title(row))
        print_variants(row)
        rows += result_rows(row, problem, size(row), lambda name: kind_of(name, tuned))
        checks.extend(row_checks)
    return write_report(options, rows, checks, script)


def kind_of(variant: str, tuned: Collection[str] = ()) -> str:
    """isozyme's variants "natural" unless named in `tuned`; the rest are peers."""
    return ("tuned" if variant in tuned else "natural") if variant.startswith("isozyme") else "peer"


def result_rows(row: dict[str, Any], problem: str, size: str, kind: Callable[[str], str],
                precision: bool = False) -> list[dict[str, Any]]:
    """A row of `measure_variants` (or of `measure`: with `precision`, its keys end in the precision, which
    goes into the size) as rows of the results schema: median, first calls, check, profile."""
    made = []
    for key, ms in row["ms"].items():
        variant, at = (key.rsplit(" ", 1)[0], f"{size} {key.rsplit(' ', 1)[1]}") if precision else (key, size)
        check, warm = row["checks"][key], f"{key}, warm disk cache"
        fields: dict[str, Any] = {"first_call_s": row["first_call_s"][key]}
        if warm in row["first_call_s"]:
            fields["warm_first_call_s"] = row["first_call_s"][warm]
        if key in row.get("profiles", {}):
            fields["details"] = {"profile": row["profiles"][key]}
        made.append(results.row(problem, at, variant, kind(variant), ms, check, calls=check["calls"] - 1, **fields))
    return made


def write_report(options: argparse.Namespace, rows: list[dict[str, Any]], checks: list[Check], script: str) -> int:
    """The exit status of a run of `script` (1 if a check failed), its rows written to `options.json` in the
    results schema, its options the parameters."""
    status = exit_status(checks, script)
    if options.json:
        results.write(options.json, Path(script).stem, rows, parameters_of(options), passed=status == 0)
    return status


def parameters_of(options: argparse.Namespace) -> dict[str, Any]:
    """The options of a run that say what it measured (not where it wrote)."""
    return {key: value for key, value in vars(options).items() if key not in ("json", "plot", "from_json",
                                                                               "first_call")}


def first_call_seconds(n: int, d: int, K: int, precision: str, variant: str) -> float:
    """`--first-call`: the first call's seconds in this (new) process, with the disk cache as it is."""
    args, _ = problem(min(n, 64), d, K)
    kernel = kernel_of(variant, precision)
    call, _ = isozyme_variant(kernel, args, DTYPES[precision])
    return first_call_of(call)


def kernel_of(variant: str, precision: str) -> iz.Kernel:
    from opencl_gpu import gmm_prange
    from tuned import gmm_gpu_kernels

    if variant == "isozyme points":
        return gmm_prange
    module = gmm_gpu_kernels if precision == "f64" else gmm_gpu_kernels.load(iz.f32)
    return getattr(module, "gmm_" + variant.removeprefix("isozyme "))  # pairs, pairs_qmu, staged, blocked, ...


FORMULATIONS = ("pairs", "pairs_qmu", "staged", "blocked", "blocked_qmu", "points")
"""isozyme's rows by their `--variants` names (module docstring); `points` runs in f64 only."""


def measure(n: int, d: int, K: int, precisions: list[str], peers: list[str], repeats: int, profile: bool,
            formulations: Sequence[str] = FORMULATIONS) -> tuple[dict[str, Any], list[Check]]:
    args, reference = problem(n, d, K)
    row: dict[str, Any] = {"n": n, "d": d, "K": K, "ms": {}, "first_call_s": {}, "checks": {}, "profiles": {}}
    checks = []
    for precision in precisions:
        dtype = DTYPES[precision]
        variants: dict[str, tuple] = {}
        for formulation in formulations:
            if formulation != "points" or precision == "f64":
                name = f"isozyme {formulation}"
                variants[name] = isozyme_variant(kernel_of(name, precision), args, dtype)
        if "jax" in peers:
            variants["jax"] = jax_variant(args, dtype)
        for name in ("torch_compile", "torch"):
            if name in peers and cuda_available():
                variants[name] = torch_variant(args, dtype, compiled=name == "torch_compile")
        for name, (call, host) in variants.items():
            key = f"{name} {precision}"
            check = Check(f"GMM n={n} d={d} K={K} {key} against the CPU's f64 gradient", TOLERANCE[precision],
                          REASON[precision])
            first, median = run(call, host, min(repeats, 3) if name == "isozyme points" else repeats, check,
                                reference)
            row["ms"][key], row["first_call_s"][key] = median * 1e3, first
            row["checks"][key] = check.as_dict()
            checks.append(check)
            if profile and name.startswith("isozyme"):
                call.setup()  # type: ignore[attr-defined]
                with iz.profile() as recorded:
                    call()
                print(recorded.table(), flush=True)
                row["profiles"][key] = recorded.as_dict()
            if name.startswith("isozyme"):
                done = subprocess.run([sys.executable, __file__, "--first-call", f"{n}x{d}x{K}", precision, name],
                                      capture_output=True, text=True, env=os.environ, timeout=600)
                warm = float(done.stdout.split()[-1]) if done.returncode == 0 else None
                row["first_call_s"][f"{key}, warm disk cache"] = warm
    return row, checks


def print_row(row: dict[str, Any]) -> None:
    ms = row["ms"]
    for key, value in ms.items():
        precision = key.split()[-1]
        jax = ms.get(f"jax {precision}")
        ratio = f"  {jax / value:6.2f}x jax" if jax and not key.startswith("jax") else ""
        check = row["checks"][key]
        warm = row["first_call_s"].get(f"{key}, warm disk cache")
        compile_times = f"  first call {row['first_call_s'][key]:.2f} s"
        if warm:
            compile_times += f", warm cache {warm:.2f} s"
        verdict = "ok" if check["passed"] else MISMATCH
        print(f"  {key:<22} {value:10.3f} ms{ratio}{compile_times}  {verdict} ({check['error']:.1e})", flush=True)


COLORS = {"isozyme pairs": "#1f77b4", "isozyme pairs_qmu": "#ff7f0e", "isozyme staged": "#9467bd",
          "isozyme blocked": "#17becf", "isozyme blocked_qmu": "#bcbd22", "isozyme points": "#aec7e8",
          "jax": "#d62728", "torch_compile": "#2ca02c", "torch": "#98df8a"}


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """Bars of the median ms of each variant (results rows whose checks passed), a group per size and
    precision, log scale."""
    import math

    grouped: dict[str, dict[str, float]] = {}
    for row in rows:
        if row["check"]["passed"]:
            grouped.setdefault(row["size"], {})[row["variant"]] = row["median_ms"]
    groups = list(grouped.items())
    top, height, left, bar = 40, 300, 60, 22
    lo, hi = -1, max(1, math.ceil(math.log10(max(v for _, bars in groups for v in bars.values()))))
    width = left + sum(len(bars) * bar + 30 for _, bars in groups) + 20

    def y(ms: float) -> float:
        return top + height - (math.log10(ms) - lo) / (hi - lo) * height
    out = [f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">GMM gradient on the GPU, median ms '
           f'(log scale; lower is faster)</text>']
    for e in range(lo, hi + 1):
        out.append(f'<line x1="{left}" y1="{y(10**e):.1f}" x2="{width - 20}" y2="{y(10**e):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(10**e) + 4:.1f}" text-anchor="end" font-size="11">{10**e:g}</text>')
    x = left + 10
    for label, bars in groups:
        start = x
        for name, ms in bars.items():
            out.append(f'<rect x="{x}" y="{y(ms):.1f}" width="{bar - 2}" height="{top + height - y(ms):.1f}" '
                       f'fill="{COLORS.get(name, "#777")}"><title>{name}: {ms:.3f} ms</title></rect>')
            x += bar
        out.append(f'<text x="{(start + x) / 2:.1f}" y="{top + height + 16}" text-anchor="middle" font-size="10">'
                   f'{label}</text>')
        x += 30
    for i, (name, color) in enumerate(COLORS.items()):
        out.append(f'<rect x="{left + 150 * i}" y="{top + height + 34}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{left + 150 * i + 18}" y="{top + height + 45}" font-size="12">{name}</text>')
    Path(path).write_text(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 60}" '
                          f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n'
                          + "\n".join(out) + "\n</svg>\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000x10x25,1000x64x100,100000x10x25", help="comma-separated n x d x K")
    parser.add_argument("--precisions", default="f64,f32")
    parser.add_argument("--peers", default="jax,torch_compile,torch")
    parser.add_argument("--variants", default=",".join(FORMULATIONS),
                        help=f"isozyme's formulations: some of {', '.join(FORMULATIONS)}")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--plot", metavar="FILE.svg")
    parser.add_argument("--from-json", metavar="FILE", help="plot the rows of an earlier run's JSON")
    parser.add_argument("--first-call", nargs=3, metavar=("SIZE", "PRECISION", "VARIANT"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.from_json:
        if options.plot:
            plot(json.loads(Path(options.from_json).read_text())["rows"], options.plot)
        return 0
    if options.first_call:
        size, precision, variant = options.first_call
        n, d, K = map(int, size.split("x"))
        print(first_call_seconds(n, d, K, precision, variant))
        return 0
    peers = [p for p in options.peers.split(",") if p]
    formulations = [v for v in options.variants.split(",") if v]
    if not set(formulations) <= set(FORMULATIONS):
        parser.error(f"--variants must name some of {', '.join(FORMULATIONS)}, got {options.variants!r}")
    print(f"device: {device().name}", flush=True)
    rows: list[dict[str, Any]] = []
    checks: list[Check] = []
    for size in options.sizes.split(","):
        n, d, K = map(int, size.split("x"))
        print(f"GMM gradient n={n} d={d} K={K}", flush=True)
        row, row_checks = measure(n, d, K, options.precisions.split(","), peers, options.repeats, options.profile,
                                  formulations)
        print_row(row)
        rows += result_rows(row, "gmm gradient", f"n={n} d={d} K={K}",
                            lambda name: kind_of(name, {f"isozyme {f}" for f in FORMULATIONS if f != "points"}),
                            precision=True)
        checks += row_checks
        if options.json:  # after each row: a run cut short keeps the rows it measured
            results.write(options.json, "gmm_gpu", rows, parameters_of(options))
    if options.plot:
        plot(rows, options.plot)
    return exit_status(checks, "gmm_gpu.py")


if __name__ == "__main__":
    sys.exit(main())
