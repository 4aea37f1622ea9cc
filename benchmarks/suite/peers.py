"""The peers of `python -m isozyme bench`: the same benchmarks in JAX, PyTorch and numba (issue 10).

Two entry points, by benchmark name (`Benchmark.name`) and peer name (`PEERS`):

- `variant(name, peer)`: None where the benchmark has no such peer or the peer is not installed, else a
  factory `make(args) -> Variant`. A Variant is a zero-argument callable, called outside the timed region,
  that converts or copies the inputs and returns the zero-argument callable that is timed. The first timed
  call may compile (JAX's `jit`, `torch.compile`, numba): the harness warms every variant up first.
- `gradient(name, peer, args)` / `primal(name, peer, args)`: what one timed call computes, as numpy, to
  check it against isozyme (tests/test_bench_peers.py).

What each peer computes:

- "jax" (benchmarks/suite/peer_jax.py): `jax.jit(jax.grad(loss))` of the benchmark's objective written
  in `jax.numpy`, float64, the same "dup"/"active" parameters differentiated; the objective is the scalar
  isozyme's gradient differentiates, `seed_return * return_value + sum(<seed, output>)` over the written
  outputs (`objective` in benchmarks/suite/__init__.py). BA's benchmark is its Jacobian blocks, as JAX
  computes a Jacobian (`vmap(jacrev)`).
- "torch", "torch_compile" (benchmarks/suite/peer_torch.py): the same objectives in PyTorch, float64,
  eager `backward()`, and the same under `torch.compile`.
- "numba" (benchmarks/suite/peer_numba.py): the primal only, `@numba.njit` of the kernel's loops.

A gradient is {parameter index: array} over the benchmark's "dup" parameters and {index: float} over its
"active" ones, as `run_gradient` keys its `Gradient` (BA's blocks by name). A "dup" parameter the
objective never reads, an output the kernel only writes, has a zero gradient: the peers do not compute it,
`gradient` fills it in (isozyme's shadow of such an output is zero after the call too).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from types import ModuleType

import numpy as np

from benchmarks.suite import Benchmark, Primal, all_benchmarks

PEERS = ("jax", "torch", "torch_compile", "numba")
GRADIENT_PEERS = ("jax", "torch", "torch_compile")
_MODULES = {"jax": "peer_jax", "torch": "peer_torch", "torch_compile": "peer_torch", "numba": "peer_numba"}

Timed = Callable[[], object]
Variant = Callable[[], Timed]


@functools.cache
def benchmarks() -> dict[str, Benchmark]:
    """The suite's benchmarks by name."""
    return {bench.name: bench for bench in all_benchmarks()}


@functools.cache
def peer_module(peer: str) -> ModuleType | None:
    """The module of `peer`, or None when its library is not installed (or fails to import)."""
    if peer not in _MODULES:
        raise ValueError(f"unknown peer {peer!r}: one of {', '.join(PEERS)}")
    try:
        return importlib.import_module(f"{__package__}.{_MODULES[peer]}")
    except ImportError:
        return None


def available(name: str, peer: str) -> bool:
    """Whether benchmark `name` has the peer `peer`, installed."""
    module = peer_module(peer)
    if module is None:
        return False
    return name in (module.PEERS if peer != "torch_compile" else module.COMPILED_PEERS)


def _timed(name: str, peer: str, args: tuple) -> tuple[Timed, tuple]:
    """The timed callable of `peer` on `args`, and (numba) the copies of `args` it works on."""
    module = peer_module(peer)
    if peer == "numba":
        return module.prepare(name, args)
    seeds = benchmarks()[name].seeds(args)
    if peer == "jax":
        return module.prepare(name, args, seeds), args
    return module.prepare(name, args, seeds, compiled=peer == "torch_compile"), args


def variant(name: str, peer: str) -> Callable[[tuple], Variant] | None:
    """The factory `make(args) -> Variant` of benchmark `name`'s `peer` (module docstring), or None."""
    if not available(name, peer):
        return None

    def make(args: tuple) -> Variant:
        return lambda: _timed(name, peer, args)[0]
    return make


def gradient(name: str, peer: str, args: tuple) -> dict[int | str, np.ndarray | float]:
    """The derivative that `peer` (a gradient peer) computes for benchmark `name` on `args`, as numpy, keyed
    as `run_gradient` keys it (module docstring)."""
    if peer not in GRADIENT_PEERS or not available(name, peer):
        raise ValueError(f"{name!r} has no gradient peer {peer!r} here")
    timed, _ = _timed(name, peer, args)
    result = peer_module(peer).results(name, timed())
    bench = benchmarks()[name]
    if bench.gradient is None:
        for index, kind in enumerate(bench.activity):
            if kind == "dup" and index not in result:
                result[index] = np.zeros_like(args[index])
    return result


def primal(name: str, peer: str, args: tuple) -> Primal:
    """What the primal peer `peer` ("numba") computes for benchmark `name` on copies of `args`: its return
    value and the arrays it writes."""
    if peer != "numba" or not available(name, peer):
        raise ValueError(f"{name!r} has no primal peer {peer!r} here")
    timed, copies = _timed(name, peer, args)
    value = timed()
    _, written = peer_module(peer).PEERS[name]
    return Primal(None if value is None else float(value), {index: copies[index] for index in written})
