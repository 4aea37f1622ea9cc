"""Data-parallel training beyond one process through PyTorch's DistributedDataParallel: a small regression
model whose hidden layer is an isozyme kernel, turned into a PyTorch operator by `isozyme.torch.op`.
isozyme adds no cluster layer: DDP splits the batch, runs the op's forward and backward (the kernel and its
reverse mode) in each process, and averages the gradients with an all-reduce.

    h = tanh(x W^T + b)          the isozyme op (`dense_tanh`), W: (hidden, d), x: (batch, d)
    y = h v + c                  torch (`torch.nn.Linear(hidden, 1)`)
    loss = mean((y - t)^2)       torch, over the batch the process holds

Run it:

    torchrun --nproc_per_node 2 examples/ddp_train.py --steps 20      # 2 processes on this machine (gloo)
    python examples/ddp_train.py --steps 20                            # 1 process, the full batch
    python examples/ddp_train.py --layer torch                         # the layer written in torch instead

Each of the W processes (rank r) trains on its contiguous share of every batch, batch / W samples; as the
loss is a mean and DDP averages the gradients, each step is the full batch's gradient step, so the
parameters after N steps are those of the one-process run (to rounding: the sums are split differently).
The script checks this itself. The loss it prints is the whole batch's (the mean of the processes' losses,
all-reduced). After the steps each process trains the one-process reference on the full batch (or reads
it: `--reference FILE`, a `.npz` written by `--out`) and compares its parameters with it; rank 0 prints the
largest relative difference over the processes (max |p - p_ref| / max |p_ref| per parameter), and above
`TOLERANCE` (1e-12) every process exits with status 1. `--out FILE` writes the parameters (rank 0).
`tests/test_ddp_example.py` runs it with 2 processes, and once against a perturbed reference.

On many machines it is the same script under torchrun's multi-node launch, e.g. on each of 2 nodes:
`torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 examples/ddp_train.py`
(`gloo` runs the op on CPUs; each process compiles the kernel, or finds it in its disk cache).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import isozyme as iz
import isozyme.torch
from isozyme import Array, f64


@iz.kernel
def dense_tanh(h: Array[f64, 2], x: Array[f64, 2], W: Array[f64, 2], b: Array[f64]):
    # h[i, j] = tanh(sum_k x[i, k] W[j, k] + b[j]): one row of the batch per i
    for i in range(x.shape[0]):
        for j in range(W.shape[0]):
            s = b[j]
            for k in range(x.shape[1]):
                s += x[i, k] * W[j, k]
            h[i, j] = iz.tanh(s)


dense_tanh_op = isozyme.torch.op(dense_tanh, outputs={"h": lambda x, W, b: (x.shape[0], W.shape[0])})
"""The layer as a PyTorch operator: (x, W, b) -> h, with the kernel's reverse mode as its backward."""


class Regressor(torch.nn.Module):
    """The model of the module docstring; `layer="torch"` computes the hidden layer with torch's ops."""

    def __init__(self, features: int, hidden: int, layer: str = "isozyme") -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)  # the same initial parameters in every process
        self.W = torch.nn.Parameter(torch.randn(hidden, features, generator=generator, dtype=torch.float64) * 0.5)
        self.b = torch.nn.Parameter(torch.randn(hidden, generator=generator, dtype=torch.float64) * 0.1)
        self.head = torch.nn.Linear(hidden, 1, dtype=torch.float64)
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(1, hidden, generator=generator, dtype=torch.float64) * 0.5)
            self.head.bias.zero_()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.layer == "isozyme":
            h = dense_tanh_op(x, self.W, self.b)
        else:
            h = torch.tanh(x @ self.W.T + self.b)
        return self.head(h).squeeze(1)


def dataset(samples: int, features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed regression problem: targets from a smooth function of the inputs, plus noise."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(samples, features, generator=generator, dtype=torch.float64)
    t = torch.sin(x.sum(dim=1)) + 0.1 * torch.randn(samples, generator=generator, dtype=torch.float64)
    return x, t


TOLERANCE = 1e-12
"""The largest relative difference from the one-process run accepted: f64 sums split over the processes
differ from the full batch's by rounding (about 1e-16 a step), a wrong gradient by far more."""


def train(steps: int, batch: int, features: int, hidden: int, lr: float, layer: str, rank: int = 0,
          world: int = 1, report: bool = False) -> dict[str, np.ndarray]:
    """SGD on the model, the final parameters. With `world` > 1 (the process group started) this process,
    of rank `rank`, trains on its share of each batch under DDP. With `report`, rank 0 prints the loss of
    the whole batch every few steps."""
    if batch % world:
        raise ValueError(f"--batch {batch} must split evenly over {world} processes")
    model = Regressor(features, hidden, layer)
    trained = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.SGD(trained.parameters(), lr=lr)
    x, t = dataset(steps * batch, features)
    share = batch // world
    for step in range(steps):
        start = step * batch + rank * share
        optimizer.zero_grad()
        loss = torch.mean((trained(x[start:start + share]) - t[start:start + share]) ** 2)
        loss.backward()  # DDP: the all-reduce of the gradients (their mean over the processes)
        optimizer.step()
        if report and step % max(1, steps // 5) == 0:
            whole = mean_over_processes(loss.detach(), world)  # every process takes part
            if rank == 0:
                print(f"step {step:4d}  loss {whole:.12f}")
    return {name: p.detach().numpy().copy() for name, p in model.named_parameters()}


def mean_over_processes(value: torch.Tensor, world: int) -> float:
    """The mean of `value` over the processes: with equal shares, the whole batch's loss from theirs."""
    if world > 1:
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value.item() / world


def max_relative_difference(parameters: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> float:
    """max over the parameters of max |p - p_ref| / max |p_ref|: each relative to its own scale, so that a
    parameter near zero (the head's bias starts at 0) does not divide by a small entry."""
    if parameters.keys() != reference.keys():
        raise ValueError(f"parameters {sorted(parameters)} against a reference of {sorted(reference)}")
    return max(float(np.abs(parameters[name] - reference[name]).max() / np.abs(reference[name]).max())
               for name in reference)


def start_processes() -> tuple[int, int]:
    """This process's rank and the number of processes: from torchrun (WORLD_SIZE set), the gloo group
    started; else 0 and 1."""
    if "WORLD_SIZE" not in os.environ:
        return 0, 1
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def finish_processes(world: int) -> None:
    """Stop the process group, if there is one."""
    if world > 1:
        # every process reaches this point before any tears gloo down: without the barrier, under load a
        # process sometimes aborted in the teardown ("terminate called without an active exception") after
        # its last step, failing the run
        dist.barrier()
        dist.destroy_process_group()


def check(parameters: dict[str, np.ndarray], reference: dict[str, np.ndarray], rank: int, world: int) -> bool:
    """Compare this process's parameters with the reference; the largest difference over the processes is
    printed (rank 0) and judged: the same verdict in every process."""
    difference = torch.tensor(max_relative_difference(parameters, reference), dtype=torch.float64)
    if world > 1:
        dist.all_reduce(difference, op=dist.ReduceOp.MAX)
    passed = bool(difference.item() <= TOLERANCE)
    if rank == 0:
        print(f"{world} process{'es' if world > 1 else ''}: parameters after the steps, max relative difference "
              f"{difference.item():.3e} to the 1-process reference (limit {TOLERANCE:.0e}): "
              f"{'OK' if passed else 'FAIL'}")
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32, help="samples per step, over all processes")
    parser.add_argument("--features", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--layer", choices=("isozyme", "torch"), default="isozyme")
    parser.add_argument("--out", help="write the final parameters here (.npz, from rank 0)")
    parser.add_argument("--reference", help="compare with these parameters (.npz of a 1-process run's --out) "
                                            "instead of training the 1-process reference")
    args = parser.parse_args()
    settings = {name: getattr(args, name) for name in ("steps", "batch", "features", "hidden", "lr", "layer")}
    reference = None
    if args.reference:  # read before the steps: a missing file fails at once
        with np.load(args.reference) as saved:
            reference = dict(saved)
    rank, world = start_processes()
    parameters = train(**settings, rank=rank, world=world, report=True)
    if reference is None and world > 1:
        reference = train(**settings)  # the full batch in this one process, no DDP
    passed = True
    if reference is not None:
        passed = check(parameters, reference, rank, world)
    elif rank == 0:
        print("1 process: this run is the 1-process reference (run it under torchrun, or pass --reference)")
    finish_processes(world)
    if args.out and rank == 0:
        np.savez(args.out, **parameters)
    sys.exit(0 if passed else 1)

if __name__ == "__main__":
    main()
