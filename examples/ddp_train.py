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
`--out FILE` writes them (rank 0) as a `.npz`; `tests/test_ddp_example.py` compares the runs.

On many machines it is the same script under torchrun's multi-node launch, e.g. on each of 2 nodes:
`torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 examples/ddp_train.py`
(`gloo` runs the op on CPUs; each process compiles the kernel, or finds it in its disk cache).
"""

from __future__ import annotations

import argparse
import os

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


def train(steps: int, batch: int, features: int, hidden: int, lr: float, layer: str) -> dict[str, np.ndarray]:
    """SGD on the model, data parallel when started by torchrun (WORLD_SIZE set); the final parameters."""
    distributed = "WORLD_SIZE" in os.environ
    rank, world = 0, 1
    if distributed:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    if batch % world:
        raise ValueError(f"--batch {batch} must split evenly over {world} processes")
    model = Regressor(features, hidden, layer)
    trained = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.SGD(trained.parameters(), lr=lr)
    x, t = dataset(steps * batch, features)
    share = batch // world
    for step in range(steps):
        start = step * batch + rank * share
        optimizer.zero_grad()
        loss = torch.mean((trained(x[start:start + share]) - t[start:start + share]) ** 2)
        loss.backward()  # DDP: the all-reduce of the gradients (their mean over the processes)
        optimizer.step()
        if rank == 0 and step % max(1, steps // 5) == 0:
            print(f"step {step:4d}  loss on rank 0's share {loss.item():.6f}")
    parameters = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
    if distributed:
        # every process reaches this point before any tears gloo down: without the barrier, under load a
        # process sometimes aborted in the teardown ("terminate called without an active exception") after
        # its last step, failing the run
        dist.barrier()
        dist.destroy_process_group()
    return parameters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32, help="samples per step, over all processes")
    parser.add_argument("--features", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--layer", choices=("isozyme", "torch"), default="isozyme")
    parser.add_argument("--out", help="write the final parameters here (.npz, from rank 0)")
    args = parser.parse_args()
    parameters = train(args.steps, args.batch, args.features, args.hidden, args.lr, args.layer)
    if args.out and int(os.environ.get("RANK", "0")) == 0:
        np.savez(args.out, **parameters)


if __name__ == "__main__":
    main()
