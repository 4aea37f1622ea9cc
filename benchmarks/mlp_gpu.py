"""The MLP's gradient on one GPU: isozyme's OpenCL against JAX, torch.compile and torch eager, in one run (issue 24).

    ISOZYME_OPENCL_DEVICE=nvidia python benchmarks/mlp_gpu.py [--sizes 255x255x255x64,1024x1024x1024x256]
        [--repeats 20] [--peers jax,torch,torch_compile] [--json FILE]

The two-layer perceptron of `examples/mlp.py` (sigmoid activations, mean squared error; sizes `DxHxOxB`:
inputs, hidden units, outputs, batch), the gradient of its loss with respect to W1, b1, W2 and b2, which is
what a training step computes before its update. Rows:

- `isozyme`: `mlp_loss` as the example writes it, every stage a `prange` over the output features (a work
  item per feature, the batch and the sum over inputs serial in it); its reverse adds into the adjoint of
  the hidden activations from every feature of the second layer (atomic adds);
- `jax`: `jax.jit(jax.value_and_grad(...))` of the same model written with matrix products, on the GPU;
- `torch_compile`, `torch`: `torch.compile` and eager PyTorch of it on the GPU, `torch.autograd.grad`.

Arguments are on the GPU before timing (isozyme: `iz.to_device`; its shadows zeroed before each call,
untimed); each timed call ends when its results are on the device. Times are medians of `--repeats` calls
after a first call (which compiles; its seconds are reported too). Checks: every call's value and gradient
against the CPU's, `mlp_loss` on `llvm`, to 1e-10 relative in the max-norm (the same f64 math, sums and
atomic adds in another order; the peers' matrix products sum in another order too); a mismatch prints
MISMATCH and the script exits with status 1 after writing everything.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "examples"), str(ROOT)]

import isozyme as iz  # noqa: E402
from isozyme import Duplicated  # noqa: E402
from isozyme.benchmark_checks import MISMATCH, Check, exit_status  # noqa: E402
from isozyme.runtime.opencl_device import device  # noqa: E402

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


def isozyme_variant(args: tuple) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    """A gradient call on device arrays (shadows zeroed before it) and the host copy of what it returned."""
    from mlp import mlp_loss

    arrays = [iz.to_device(np.ascontiguousarray(a)) for a in args]
    shadows = [iz.to_device(np.zeros(a.shape)) for a in args[:4]]
    zeros = [np.zeros(a.shape) for a in args[:4]]

    def call() -> Any:
        return isozyme_gradient(mlp_loss, arrays, "opencl", shadows)
    call.setup = lambda: [s.set(z) for s, z in zip(shadows, zeros)]  # type: ignore[attr-defined]

    def host(returned: Any) -> dict:
        return {"value": returned[0], **{name: s.get() for name, s in zip(GRADIENT, shadows)}}
    return call, host


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
    import jax

    jax.config.update("jax_enable_x64", True)
    loss = jax.jit(jax.value_and_grad(jax_loss, argnums=(0, 1, 2, 3)))
    inputs = [jax.device_put(np.asarray(a)) for a in args]

    def call() -> Any:
        return jax.block_until_ready(loss(*inputs))

    def host(returned: Any) -> dict:
        value, grads = returned
        return {"value": float(value), **{name: np.asarray(g, dtype=np.float64) for name, g in zip(GRADIENT, grads)}}
    return call, host


def torch_variant(args: tuple, compiled: bool) -> tuple[Callable[[], Any], Callable[[Any], dict]]:
    import torch

    loss = torch.compile(torch_loss) if compiled else torch_loss
    tensors = [torch.tensor(np.asarray(a), device="cuda") for a in args]
    for t in tensors[:4]:
        t.requires_grad_(True)

    def call() -> Any:
        value = loss(*tensors)
        grads = torch.autograd.grad(value, tensors[:4])
        torch.cuda.synchronize()
        return value, grads

    def host(returned: Any) -> dict:
        value, grads = returned
        return {"value": float(value.detach()), **{name: g.detach().cpu().numpy() for name, g in zip(GRADIENT, grads)}}
    return call, host


def measure(sizes: tuple[int, int, int, int], peers: list[str], repeats: int) -> tuple[dict, list[Check]]:
    from gmm_gpu import cuda_available, run

    args, reference = problem(*sizes)
    variants: dict[str, tuple] = {"isozyme": isozyme_variant(args)}
    if "jax" in peers:
        variants["jax"] = jax_variant(args)
    for name in ("torch_compile", "torch"):
        if name in peers and cuda_available():
            variants[name] = torch_variant(args, compiled=name == "torch_compile")
    label = "x".join(map(str, sizes))
    row: dict[str, Any] = {"size": label, "ms": {}, "first_call_s": {}, "checks": {}}
    checks = []
    for name, (call, host) in variants.items():
        check = Check(f"MLP {label} {name} against the CPU's gradient", TOLERANCE, REASON)
        first, median = run(call, host, repeats, check, reference)
        row["ms"][name], row["first_call_s"][name] = median * 1e3, first
        row["checks"][name] = check.as_dict()
        checks.append(check)
    return row, checks


def print_row(row: dict[str, Any]) -> None:
    print(f"MLP {row['size']} (inputs x hidden x outputs x batch)")
    jax_ms = row["ms"].get("jax")
    for name, ms in row["ms"].items():
        versus = f"  {ms / jax_ms:8.2f}x JAX's time" if jax_ms else ""
        status = "" if row["checks"][name]["passed"] else f"  {MISMATCH}"
        print(f"  {name:14s} {ms:10.3f} ms  (first call {row['first_call_s'][name]:.2f} s){versus}{status}",
              flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="255x255x255x64,1024x1024x1024x256")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--peers", default="jax,torch,torch_compile")
    parser.add_argument("--json")
    options = parser.parse_args(argv)
    peers = [peer for peer in options.peers.split(",") if peer]
    rows, checks = [], []
    for text in options.sizes.split(","):
        d, hidden, out, batch = (int(part) for part in text.split("x"))
        row, row_checks = measure((d, hidden, out, batch), peers, options.repeats)
        print_row(row)
        rows.append(row)
        checks.extend(row_checks)
    status = exit_status(checks, "mlp_gpu.py")
    if options.json:
        report = {"device": device().name, "passed": status == 0, "tolerance": TOLERANCE, "rows": rows}
        Path(options.json).write_text(json.dumps(report, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
