"""The BA gradient on one GPU: isozyme's OpenCL against JAX, torch.compile and torch eager, in one run (issue 24).

    ISOZYME_OPENCL_DEVICE=nvidia python benchmarks/ba_gpu.py [--sizes ba1,ba5] [--repeats 20]
        [--peers jax,torch,torch_compile] [--serial] [--json FILE]

ADBench's bundle adjustment as the suite's "ba_sumsq" benchmark (`isozyme/benchmark_suite/ba.py`): the sum of
the squared reprojection and weight errors, its gradient with respect to the cameras, points and weights, at
ADBench's sizes (`ba1` is n=49 cameras, m=7,776 points, p=31,843 observations; `--sizes` takes ADBench names
or `NxMxP`), on ADBench's replicated data with every copy perturbed by 1% (seeded), so that no two
observations are the same numbers. Rows:

- `isozyme parallel`: `ba_sum_of_squares_parallel`, one `prange` over the observations (a work item per
  observation; the reverse adds into the adjoints of the cameras and points the observations share);
- `isozyme serial` (`--serial`): the suite's `ba_sum_of_squares`, whose loops are serial (one work item);
- `jax`: `jax.jit(jax.value_and_grad(...))` of the suite's JAX formulation (`peer_jax.ba_sum_of_squares_loss`,
  gathered cameras and points, `vmap` over the observations) on the GPU;
- `torch_compile`, `torch`: `torch.compile` and eager PyTorch of `peer_torch.ba_sum_of_squares_loss` on the
  GPU, the gradient by `torch.autograd.grad`.

Arguments are on the GPU before timing (isozyme: `iz.to_device`; its shadows zeroed before each call,
untimed); each timed call ends when its results are on the device. Times are medians of `--repeats` calls
after a first call (which compiles, with an empty disk cache: `ISOZYME_CACHE_DIR` a new folder unless it is
set; its seconds are reported, and for isozyme's rows those of the first call in a new process with the disk
cache filled, where only the driver builds). Checks: every call's value and gradient against the CPU's, the
serial kernel on `llvm`, to 1e-10 relative in the max-norm (the same f64 math, sums and atomic adds in another
order); a mismatch prints MISMATCH and the script exits with status 1 after writing everything.

`--json` writes the results schema (`gmm_gpu.write_report`): isozyme's rows "natural" (the suite's kernels),
the others "peer".
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]

import isozyme as iz  # noqa: E402
from isozyme import Duplicated  # noqa: E402
from isozyme.benchmark_checks import Check  # noqa: E402
from isozyme.benchmark_suite import ba  # noqa: E402

TOLERANCE = 1e-10
REASON = "the same f64 math, its sums and atomic adds in another order"
GRADIENT = ("d_cams", "d_X", "d_w")


def sizes_of(text: str) -> tuple[int, int, int]:
    """An ADBench name (`ba1`) or `NxMxP`."""
    if text in ba.ADBENCH_SIZES:
        return ba.ADBENCH_SIZES[text]
    n, m, p = (int(part) for part in text.split("x"))
    return n, m, p


def problem(n: int, m: int, p: int) -> tuple[tuple, dict[str, Any]]:
    """The arguments (host) and the reference: the serial kernel's value and gradient on the CPU."""
    args = ba.make_args(n, m, p, seed=0, jitter=0.01)
    value, shadows = isozyme_gradient(ba.ba_sum_of_squares, [a.copy() for a in args], "llvm")
    return args, {"value": value, **{name: s for name, s in zip(GRADIENT, shadows)}}


def isozyme_gradient(kernel: iz.Kernel, arrays: list, backend: str, shadows: list | None = None) -> tuple:
    """The value and the shadows of cams, X, w after `iz.autodiff` (shadows of the residuals' arrays too)."""
    cams, X, w, obs, feats, err, w_err = arrays
    if shadows is None:
        shadows = [np.zeros(a.shape) for a in (cams, X, w, err, w_err)]
    value, _ = iz.autodiff(kernel, Duplicated(cams, shadows[0]), Duplicated(X, shadows[1]),
                           Duplicated(w, shadows[2]), obs, feats, Duplicated(err, shadows[3]),
                           Duplicated(w_err, shadows[4]), backend=backend)
    return value, shadows[:3]


def isozyme_variant(kernel: iz.Kernel, args: tuple) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    """A gradient call on device arrays (shadows zeroed before it) and the host copy of what it returned."""
    from gmm_gpu import device_variant

    return device_variant(lambda arrays, shadows: isozyme_gradient(kernel, arrays, "opencl", shadows), args,
                          (0, 1, 2, 5, 6), GRADIENT)


def jax_variant(args: tuple) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    from gmm_gpu import jax_gradient_variant

    from isozyme.benchmark_suite import peer_jax

    return jax_gradient_variant(peer_jax.ba_sum_of_squares_loss, args[:5], GRADIENT)


def torch_variant(args: tuple, compiled: bool) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    from gmm_gpu import torch_gradient_variant

    from isozyme.benchmark_suite import peer_torch

    return torch_gradient_variant(peer_torch.ba_sum_of_squares_loss, args[:5], GRADIENT, compiled)


def isozyme_variants(args: tuple, serial: bool) -> dict[str, tuple]:
    variants = {"isozyme parallel": isozyme_variant(ba.ba_sum_of_squares_parallel, args)}
    if serial:
        variants["isozyme serial"] = isozyme_variant(ba.ba_sum_of_squares, args)
    return variants


def first_call(text: str, name: str) -> float:
    """`--first-call`: the seconds of the first call of isozyme variant `name` in this (new) process."""
    from gmm_gpu import first_call_of

    args = ba.make_args(*sizes_of(text), seed=0, jitter=0.01)
    return first_call_of(isozyme_variants(args, serial=name == "isozyme serial")[name][0])


def measure(n: int, m: int, p: int, peers: list[str], repeats: int, serial: bool) -> tuple[dict, list[Check]]:
    from gmm_gpu import cuda_available, measure_variants

    args, reference = problem(n, m, p)
    variants: dict[str, tuple] = isozyme_variants(args, serial)
    if "jax" in peers:
        variants["jax"] = jax_variant(args)
    for name in ("torch_compile", "torch"):
        if name in peers and cuda_available():
            variants[name] = torch_variant(args, compiled=name == "torch_compile")
    row: dict[str, Any] = {"n": n, "m": m, "p": p, "ms": {}, "first_call_s": {}, "checks": {}, "reference": reference}
    checks = measure_variants(variants, row, f"BA n={n} m={m} p={p}", repeats, TOLERANCE, REASON,
                              few=("isozyme serial",))
    return row, checks


def main(argv: list[str] | None = None) -> int:
    from gmm_gpu import gpu_row_parser, measure_sizes

    parser = gpu_row_parser("ba1,ba5")
    parser.description = __doc__.splitlines()[0]
    parser.add_argument("--serial", action="store_true")
    options = parser.parse_args(argv)
    return measure_sizes(options, lambda text, peers: measure(*sizes_of(text), peers, options.repeats, options.serial),
                         lambda row: f"n={row['n']} m={row['m']} p={row['p']}", "ba_gpu.py", first_call,
                         "ba_sumsq gradient", lambda row: f"n={row['n']} m={row['m']} p={row['p']}")


if __name__ == "__main__":
    sys.exit(main())
