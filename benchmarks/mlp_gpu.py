"""The MLP's gradient on one GPU: isozyme's OpenCL against JAX, torch.compile and torch eager, in one run (issue 24).

    ISOZYME_OPENCL_DEVICE=nvidia python benchmarks/mlp_gpu.py [--sizes 255x255x255x64,1024x1024x1024x256]
        [--repeats 20] [--peers jax,torch,torch_compile] [--json FILE]

The two-layer perceptron of `examples/mlp.py` (sigmoid activations, mean squared error; sizes `DxHxOxB`:
inputs, hidden units, outputs, batch), the gradient of its loss with respect to W1, b1, W2 and b2, which is
what a training step computes before its update. Rows:

- `isozyme`: `mlp_loss` as the example writes it, every stage a `prange` over the output features (a work
  item per feature, the batch and the sum over inputs serial in it); its reverse adds into the adjoint of
  the hidden activations from every feature of the second layer (atomic adds);
- `isozyme pairs`: `mlp_gpu_kernels.mlp_loss_pairs`, the same stages, each a `prange` over the (feature,
  sample) pairs of its output: batch times the work items;
- `jax`: `jax.jit(jax.value_and_grad(...))` of the same model written with matrix products, on the GPU;
- `torch_compile`, `torch`: `torch.compile` and eager PyTorch of it on the GPU, `torch.autograd.grad`.

Arguments are on the GPU before timing (isozyme: `iz.to_device`; its shadows zeroed before each call,
untimed); each timed call ends when its results are on the device. Times are medians of `--repeats` calls
after a first call (which compiles, with an empty disk cache: `ISOZYME_CACHE_DIR` a new folder unless it is
set; its seconds are reported, and for isozyme's rows those of the first call in a new process with the disk
cache filled, where only the driver builds). Checks: every call's value and gradient against the CPU's,
`mlp_loss` on `llvm`, to 1e-10 relative in the max-norm (the same f64 math, sums and atomic adds in another
order; the peers' matrix products sum in another order too); a mismatch prints MISMATCH and the script exits
with status 1 after writing everything.

`--json` writes the results schema (`gmm_gpu.write_report`): `isozyme` "natural" (the example's kernel),
`isozyme pairs` "tuned" (`benchmarks/tuned/`), the others "peer".
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "examples"), str(ROOT)]

import isozyme as iz  # noqa: E402
from isozyme import Duplicated  # noqa: E402
from isozyme.benchmark_checks import Check  # noqa: E402

TOLERANCE = 1e-10
REASON = "the same f64 math, its sums (matrix products, atomic adds) in another order"
GRADIENT = ("d_W1", "d_b1", "d_W2", "d_b2")


def problem(d: int, hidden: int, out: int, batch: int) -> tuple[tuple, dict[str, Any]]:
    """The arguments (host) and the reference: `mlp_loss`'s value and gradient on the CPU."""
    from mlp import mlp_data, mlp_loss

    args = tuple(mlp_data(d, hidden, out, batch, seed=0))
    value, shadows = isozyme_gradient(mlp_loss, list(args), "llvm")
    return args, {"value": value, **dict(zip(GRADIENT, shadows))}


def isozyme_gradient(kernel: iz.Kernel, arrays: list, backend: str, shadows: list | None = None) -> tuple:
    """The value and the shadows of W1, b1, W2, b2 after `iz.autodiff`."""
    if shadows is None:
        shadows = [np.zeros(a.shape) for a in arrays[:4]]
    value, _ = iz.autodiff(kernel, *(Duplicated(a, s) for a, s in zip(arrays[:4], shadows)), *arrays[4:],
                           backend=backend)
    return value, shadows


def isozyme_variant(kernel: iz.Kernel, args: tuple) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    """A gradient call on device arrays (shadows zeroed before it) and the host copy of what it returned."""
    from gmm_gpu import device_variant

    return device_variant(lambda arrays, shadows: isozyme_gradient(kernel, arrays, "opencl", shadows), args,
                          range(4), GRADIENT)


def jax_loss(W1: Any, b1: Any, W2: Any, b2: Any, X: Any, Y: Any) -> Any:
    import jax.numpy as jnp

    h1 = 1.0 / (1.0 + jnp.exp(-(W1 @ X + b1[:, None])))
    h2 = 1.0 / (1.0 + jnp.exp(-(W2 @ h1 + b2[:, None])))
    return jnp.mean((h2 - Y) ** 2)


def torch_loss(W1: Any, b1: Any, W2: Any, b2: Any, X: Any, Y: Any) -> Any:
    import torch

    h1 = torch.sigmoid(W1 @ X + b1[:, None])
    h2 = torch.sigmoid(W2 @ h1 + b2[:, None])
    return torch.mean((h2 - Y) ** 2)


def jax_variant(args: tuple) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    from gmm_gpu import jax_gradient_variant

    return jax_gradient_variant(jax_loss, args, GRADIENT)


def torch_variant(args: tuple, compiled: bool) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    from gmm_gpu import torch_gradient_variant

    return torch_gradient_variant(torch_loss, args, GRADIENT, compiled)


def isozyme_variants(args: tuple) -> dict[str, tuple]:
    from mlp import mlp_loss
    from tuned.mlp_gpu_kernels import mlp_loss_pairs

    return {"isozyme": isozyme_variant(mlp_loss, args), "isozyme pairs": isozyme_variant(mlp_loss_pairs, args)}


def sizes_of(text: str) -> tuple[int, int, int, int]:
    d, hidden, out, batch = (int(part) for part in text.split("x"))
    return d, hidden, out, batch


def first_call(text: str, name: str) -> float:
    """`--first-call`: the seconds of the first call of isozyme variant `name` in this (new) process."""
    from gmm_gpu import first_call_of
    from mlp import mlp_data

    return first_call_of(isozyme_variants(tuple(mlp_data(*sizes_of(text), seed=0)))[name][0])


def measure(sizes: tuple[int, int, int, int], peers: list[str], repeats: int) -> tuple[dict, list[Check]]:
    from gmm_gpu import cuda_available, measure_variants

    args, reference = problem(*sizes)
    variants: dict[str, tuple] = isozyme_variants(args)
    if "jax" in peers:
        variants["jax"] = jax_variant(args)
    for name in ("torch_compile", "torch"):
        if name in peers and cuda_available():
            variants[name] = torch_variant(args, compiled=name == "torch_compile")
    label = "x".join(map(str, sizes))
    row: dict[str, Any] = {"size": label, "ms": {}, "first_call_s": {}, "checks": {}, "reference": reference}
    return row, measure_variants(variants, row, f"MLP {label}", repeats, TOLERANCE, REASON)


def main(argv: list[str] | None = None) -> int:
    from gmm_gpu import gpu_row_parser, measure_sizes

    parser = gpu_row_parser("255x255x255x64,1024x1024x1024x256")
    parser.description = __doc__.splitlines()[0]
    options = parser.parse_args(argv)

    return measure_sizes(options, lambda text, peers: measure(sizes_of(text), peers, options.repeats),
                         lambda row: f"MLP {row['size']} (inputs x hidden x outputs x batch)", "mlp_gpu.py",
                         first_call, "mlp gradient", lambda row: row["size"], tuned=("isozyme pairs",))


if __name__ == "__main__":
    sys.exit(main())
