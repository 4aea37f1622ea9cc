"""The LSTM gradient on one GPU: isozyme's OpenCL against JAX, torch.compile and torch eager, in one run (issue 24).

    ISOZYME_OPENCL_DEVICE=nvidia python benchmarks/lstm_gpu.py [--sizes l2c1024,l4c1024] [--repeats 20]
        [--peers jax,torch,torch_compile] [--json FILE]

ADBench's LSTM objective as the suite's "lstm" benchmark (`isozyme/benchmark_suite/lstm.py`): l layers of
b = 14 cells over c characters, the gradient with respect to the main and the extra parameters, at ADBench's
sizes (`--sizes` takes `lLcC`, or `lLcCbB` for another b), on `make_args`'s seeded data. The work is a chain:
each character's state depends on the one before, and a layer's cells are only 14 numbers, so no tool has
parallel work beyond b cells at a time. Rows:

- `isozyme`: the suite's `lstm_objective` as it is (its loops serial: one work item runs the whole forward
  and reverse pass, the tape in its private and heap memory);
- `jax`: `jax.jit(jax.value_and_grad(...))` of the suite's JAX formulation (`peer_jax.lstm_loss`: `lax.scan`
  over the characters, each layer's four gates as one (4, b) operation) on the GPU;
- `torch_compile`, `torch`: PyTorch on the GPU, the suite's `peer_torch.lstm_loss` (a Python loop over the
  characters) with its step `torch.compile`d or eager, the gradient by `torch.autograd.grad` (at most 3 calls:
  each launches some 10^5 kernels).

Arguments are on the GPU before timing (isozyme: `iz.to_device`; its shadows zeroed before each call,
untimed); each timed call ends when its results are on the device. Times are medians of `--repeats` calls
after a first call (which compiles, with an empty disk cache: `ISOZYME_CACHE_DIR` a new folder unless it is
set; its seconds are reported, and for isozyme's rows those of the first call in a new process with the disk
cache filled, where only the driver builds). Checks: every call's value and gradient against the CPU's,
`lstm_objective` on `llvm`, to 1e-10 relative in the max-norm (the same f64 math; the peers sum the cells in
another order); a mismatch prints MISMATCH and the script exits with status 1 after writing everything.

`--json` writes the results schema (`gmm_gpu.write_report`): isozyme's row "natural" (the suite's kernel),
the others "peer".
"""

from __future__ import annotations

import functools
import re
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
from isozyme.benchmark_suite import lstm  # noqa: E402

TOLERANCE = 1e-10
REASON = "the same f64 math, the peers' sums over the cells in another order"
GRADIENT = ("d_main_params", "d_extra_params")


def sizes_of(text: str) -> tuple[int, int, int]:
    """`l2c1024` (b = 14, ADBench's) or `l2c1024b14`: layers, characters, cells."""
    match = re.fullmatch(r"l(\d+)c(\d+)(?:b(\d+))?", text)
    if match is None:
        raise SystemExit(f"--sizes: {text!r} is not lLcC or lLcCbB")
    layers, c, b = match.groups()
    return int(layers), int(c), int(b or 14)


def isozyme_gradient(arrays: list, backend: str, shadows: list | None = None) -> tuple:
    """The value and the shadows of main_params and extra_params after `iz.autodiff`."""
    main_params, extra_params, state, sequence = arrays
    if shadows is None:
        shadows = [np.zeros(a.shape) for a in (main_params, extra_params)]
    value, _ = iz.autodiff(lstm.lstm_objective, Duplicated(main_params, shadows[0]),
                           Duplicated(extra_params, shadows[1]), state, sequence, backend=backend)
    return value, shadows


def problem(layers: int, c: int, b: int) -> tuple[tuple, dict[str, Any]]:
    """The arguments (host) and the reference: the kernel's value and gradient on the CPU."""
    args = lstm.make_args(layers, c, b, seed=0)
    value, shadows = isozyme_gradient([a.copy() for a in args], "llvm")
    return args, {"value": value, **dict(zip(GRADIENT, shadows))}


def isozyme_variant(args: tuple) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    from gmm_gpu import device_variant

    return device_variant(lambda arrays, shadows: isozyme_gradient(arrays, "opencl", shadows), args, (0, 1),
                          GRADIENT)


def first_call(text: str, name: str) -> float:
    """`--first-call`: the seconds of the first call of isozyme variant `name` (only "isozyme") in this (new)
    process."""
    from gmm_gpu import first_call_of

    assert name == "isozyme", name
    return first_call_of(isozyme_variant(lstm.make_args(*sizes_of(text), seed=0))[0])


def jax_variant(args: tuple) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    from gmm_gpu import jax_gradient_variant

    from isozyme.benchmark_suite import peer_jax

    return jax_gradient_variant(peer_jax.lstm_loss, args, GRADIENT)


def torch_variant(args: tuple, compiled: bool) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    import torch
    from gmm_gpu import torch_gradient_variant

    from isozyme.benchmark_suite import peer_torch

    step = torch.compile(peer_torch.lstm_step) if compiled else peer_torch.lstm_step
    return torch_gradient_variant(functools.partial(peer_torch.lstm_loss, step), args, GRADIENT, compiled=False)


def measure(layers: int, c: int, b: int, peers: list[str], repeats: int) -> tuple[dict, list[Check]]:
    from gmm_gpu import cuda_available, measure_variants

    args, reference = problem(layers, c, b)
    variants: dict[str, tuple] = {"isozyme": isozyme_variant(args)}
    if "jax" in peers:
        variants["jax"] = jax_variant(args)
    for name in ("torch_compile", "torch"):
        if name in peers and cuda_available():
            variants[name] = torch_variant(args, compiled=name == "torch_compile")
    row: dict[str, Any] = {"l": layers, "c": c, "b": b, "ms": {}, "first_call_s": {}, "checks": {},
                           "reference": reference}
    checks = measure_variants(variants, row, f"LSTM l={layers} c={c} b={b}", repeats, TOLERANCE, REASON,
                              few=("torch_compile", "torch"))
    return row, checks


def main(argv: list[str] | None = None) -> int:
    from gmm_gpu import gpu_row_parser, measure_sizes

    parser = gpu_row_parser("l2c1024,l4c1024")
    parser.description = __doc__.splitlines()[0]
    options = parser.parse_args(argv)
    return measure_sizes(options, lambda text, peers: measure(*sizes_of(text), peers, options.repeats),
                         lambda row: f"l={row['l']} c={row['c']} b={row['b']}", "lstm_gpu.py", first_call,
                         "lstm gradient", lambda row: f"l={row['l']} c={row['c']} b={row['b']}")


if __name__ == "__main__":
    sys.exit(main())
