"""The peers of `python -m isozyme bench`: the same benchmarks in JAX, PyTorch and numba (issue 10).

The entry points, by benchmark name (`Benchmark.name`) and peer name (`PEERS`):

- `variant(name, peer)`: None where the benchmark has no such peer or the peer is not installed, else a
  factory `make(args) -> Variant`. A Variant is a zero-argument callable, called outside the timed region,
  that converts or copies the inputs and returns the zero-argument callable that is timed. The first timed
  call may compile (JAX's `jit`, `torch.compile`, numba): the harness warms every variant up first.
- `result(name, peer, args, returned)`: what one timed call computed (`returned`: what it returned), as
  numpy, keyed as the bench's checks compare it with isozyme's reference (`isozyme/benchmarking.py`);
  `gradient(name, peer, args)` / `primal(name, peer, args)`: the same for one call made here, to check it
  against isozyme (tests/test_bench_peers.py).

What each peer computes:

- "jax" (isozyme/benchmark_suite/peer_jax.py): `jax.jit(jax.grad(loss))` of the benchmark's objective written
  in `jax.numpy`, float64, the same "dup"/"active" parameters differentiated; the objective is the scalar
  isozyme's gradient differentiates, `seed_return * return_value + sum(<seed, output>)` over the written
  outputs (`objective` in isozyme/benchmark_suite/__init__.py). BA's benchmark is its Jacobian blocks, as JAX
  computes a Jacobian (`vmap(jacrev)`).
- "torch", "torch_compile" (isozyme/benchmark_suite/peer_torch.py): the same objectives in PyTorch, float64,
  eager `backward()`, and the same under `torch.compile`.
- "numba" (isozyme/benchmark_suite/peer_numba.py): the primal only, `@numba.njit` of the kernel's loops.

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

from isozyme.benchmark_suite import Benchmark, Primal, all_benchmarks

PEERS = ("jax", "torch", "torch_compile", "numba")
PEER_TOLERANCE = 1e-8
PEER_REASON = ("the same math written differently (JAX's and PyTorch's FFT, GMM's dense Q, LSTM's fused gates, "
               "scans): rounding differs more than between two orders of the same loops")
"""How far (relative, max-norm) a gradient peer's derivative may be from isozyme's reference gradient in the
bench's checks (tests/test_bench_peers.py checks the peers at this tolerance too), and why."""
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


def _timed(name: str, peer: str, args: tuple) -> Timed:
    """The timed callable of `peer` on `args` (numba's works on copies of `args` and returns them too)."""
    module = peer_module(peer)
    if peer == "numba":
        return module.prepare(name, args)[0]
    seeds = benchmarks()[name].seeds(args)
    if peer == "jax":
        return module.prepare(name, args, seeds)
    return module.prepare(name, args, seeds, compiled=peer == "torch_compile")


def variant(name: str, peer: str) -> Callable[[tuple], Variant] | None:
    """The factory `make(args) -> Variant` of benchmark `name`'s `peer` (module docstring), or None."""
    if not available(name, peer):
        return None

    def make(args: tuple) -> Variant:
        return lambda: _timed(name, peer, args)
    return make


def _numba_primal(name: str, returned: tuple[object, tuple]) -> Primal:
    value, copies = returned
    _, written = peer_module("numba").PEERS[name]
    return Primal(None if value is None else float(value), {index: copies[index] for index in written})


def result(name: str, peer: str, args: tuple, returned: object) -> dict[int | str, object]:
    """What one timed call of `peer` on `args` computed (`returned`: what the call returned), as numpy,
    keyed the way the bench compares it: a gradient peer's derivative as `Gradient.results(value=False)`
    keys isozyme's (module docstring), numba's return value and written arrays as `Primal.results()`."""
    if peer == "numba":
        return _numba_primal(name, returned).results()  # type: ignore[arg-type]
    derivative = peer_module(peer).results(name, returned)
    bench = benchmarks()[name]
    if bench.gradient is None:
        for index, kind in enumerate(bench.activity):
            if kind == "dup" and index not in derivative:
                derivative[index] = np.zeros_like(args[index])
    return derivative


def gradient(name: str, peer: str, args: tuple) -> dict[int | str, np.ndarray | float]:
    """The derivative that `peer` (a gradient peer) computes for benchmark `name` on `args`, as numpy, keyed
    as `run_gradient` keys it (module docstring)."""
    if peer not in GRADIENT_PEERS or not available(name, peer):
        raise ValueError(f"{name!r} has no gradient peer {peer!r} here")
    return result(name, peer, args, _timed(name, peer, args)())  # type: ignore[return-value]


def primal(name: str, peer: str, args: tuple) -> Primal:
    """What the primal peer `peer` ("numba") computes for benchmark `name` on copies of `args`: its return
    value and the arrays it writes."""
    if peer != "numba" or not available(name, peer):
        raise ValueError(f"{name!r} has no primal peer {peer!r} here")
    return _numba_primal(name, _timed(name, peer, args)())  # type: ignore[arg-type]
