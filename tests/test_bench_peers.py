"""The peers of `python -m isozyme bench` (isozyme/benchmark_suite/peers.py) compute what isozyme computes.

For every benchmark of the suite and every peer, on the benchmark's smallest "quick" size: the gradient
peers' derivative (JAX `jit(grad)`, PyTorch eager and `torch.compile`) equals isozyme's (`run_gradient`,
opt="post") to 1e-8 relative, key by key; numba's primal equals the kernel's (return value and written
arrays). A peer whose library is not installed skips, saying so (`pip install -e '.[peers]'`).

`torch.compile` costs 3 to 20 s of compilation per benchmark on 2 cores, about two minutes for the suite:
by default only `TORCH_COMPILE_DEFAULT` (one benchmark compiled whole, one compiled step by step) is checked
with it; `ISOZYME_TEST_TORCH_COMPILE=all` checks every benchmark.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

from isozyme.benchmark_suite import Gradient, all_benchmarks, peers, run_gradient, run_primal  # noqa: E402

RTOL = peers.PEER_TOLERANCE
NAMES = tuple(bench.name for bench in all_benchmarks())
TORCH_COMPILE_DEFAULT = ("relu3", "ode_euler")


def smallest_args(name: str) -> tuple:
    bench = peers.benchmarks()[name]
    return bench.make_args(**bench.sizes["quick"][0])


@functools.cache
def isozyme_gradient(name: str) -> Gradient:
    return run_gradient(peers.benchmarks()[name], smallest_args(name), opt="post")


def require(name: str, peer: str) -> None:
    """Skip, saying why, where `peer` is not installed or has no version of benchmark `name`."""
    if peers.peer_module(peer) is None:
        pytest.skip(f"{peer}: its library is not installed (pip install -e '.[peers]')")
    if not peers.available(name, peer):
        pytest.skip(f"{name} has no {peer} peer")


def assert_close(got: object, want: object, what: str) -> None:
    """`got` equals `want` to RTOL relative to the largest magnitude of `want` (entries near zero included)."""
    want = np.asarray(want, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, isozyme's {want.shape}"
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * scale, err_msg=what)


@pytest.mark.parametrize("peer", peers.GRADIENT_PEERS)
@pytest.mark.parametrize("name", NAMES)
def test_peer_gradient_equals_isozymes(name: str, peer: str) -> None:
    require(name, peer)
    if peer == "torch_compile" and name not in TORCH_COMPILE_DEFAULT \
            and os.environ.get("ISOZYME_TEST_TORCH_COMPILE") != "all":
        pytest.skip("torch.compile: 3-20 s of compilation each; ISOZYME_TEST_TORCH_COMPILE=all checks it")
    expected = isozyme_gradient(name)
    want = {**expected.shadows, **expected.active}
    got = peers.gradient(name, peer, smallest_args(name))
    assert sorted(got, key=str) == sorted(want, key=str)
    for key, value in want.items():
        assert_close(got[key], value, f"{name} {peer}: derivative {key!r}")


@pytest.mark.parametrize("name", NAMES)
def test_numba_primal_equals_the_kernels(name: str) -> None:
    require(name, "numba")
    result = peers.primal(name, "numba", smallest_args(name))
    args = smallest_args(name)
    value = run_primal(peers.benchmarks()[name], args)
    assert (result.value is None) == (value is None)
    if value is not None:
        assert_close(result.value, value, f"{name} numba: return value")
    for index, array in result.outputs.items():
        assert_close(array, args[index], f"{name} numba: output {index}")


def test_every_benchmark_has_its_peers() -> None:
    """JAX and numba cover the suite (the `PEERS` tables of peer_jax.py and peer_numba.py), and PyTorch."""
    for peer in peers.PEERS:
        module = peers.peer_module(peer)
        if module is not None:
            assert set(NAMES) <= set(module.PEERS), f"{peer} lacks {sorted(set(NAMES) - set(module.PEERS))}"


@pytest.mark.parametrize("peer", peers.PEERS)
def test_variant_is_a_factory_of_timed_callables(peer: str) -> None:
    require("relu3", peer)
    make = peers.variant("relu3", peer)
    prepared = make(smallest_args("relu3"))
    timed = prepared()
    assert callable(timed)
    timed()
    timed()  # timed again without preparing: the harness repeats it


def test_variant_is_none_without_the_peer() -> None:
    assert peers.variant("no_such_benchmark", "numba") is None
    with pytest.raises(ValueError, match="unknown peer"):
        peers.variant("relu3", "no_such_peer")


# -- the GMM peers' formulation (issue 60): the K-batched matmul of ../shared/anchors/jax_gmm.py ------------

GMM_SHAPE = {"d": 4, "K": 3, "n": 7}


def gmm_peer_args() -> tuple:
    bench = peers.benchmarks()["gmm"]
    return bench.make_args(**GMM_SHAPE)


def test_jax_gmm_peer_is_one_k_batched_matmul() -> None:
    """The JAX peer's gradient computes Q_k (x_i - mu_k) as dot_generals batched over the K components of
    (K, d, d) and (K, n, d) operands, and never forms the (n, K, d) layout of ADBench's einsum (1.5-2x slower
    than the batched form on 2 cores and 2-5x on an H200, issue 60)."""
    if peers.peer_module("jax") is None:
        pytest.skip("jax: its library is not installed (pip install -e '.[jax]')")
    import jax

    from isozyme.benchmark_suite import peer_jax

    d, K, n = GMM_SHAPE["d"], GMM_SHAPE["K"], GMM_SHAPE["n"]
    jaxpr = jax.make_jaxpr(jax.grad(peer_jax.gmm_loss, argnums=(0, 1, 2)))(*gmm_peer_args()).jaxpr
    equations = list(_jax_equations(jaxpr))
    batched = [e for e in equations if e.primitive.name == "dot_general"
               and e.params["dimension_numbers"][1] == ((0,), (0,))
               and sorted(tuple(v.aval.shape) for v in e.invars) == sorted([(K, d, d), (K, n, d)])]
    assert batched, "no dot_general batched over K of Q (K, d, d) and the centred points (K, n, d)"
    shapes = {tuple(v.aval.shape) for e in equations for v in e.outvars}
    assert (n, K, d) not in shapes, "an (n, K, d) intermediate: ADBench's layout, not the K-batched one"


def _jax_equations(jaxpr):
    """Every equation of `jaxpr` and of the jaxprs nested in its equations' parameters (pjit, custom_jvp)."""
    for equation in jaxpr.eqns:
        yield equation
        for param in equation.params.values():
            inner = getattr(param, "jaxpr", param)
            if hasattr(inner, "eqns"):
                yield from _jax_equations(inner)


def test_torch_gmm_peer_is_one_k_batched_matmul() -> None:
    """The PyTorch peer's forward and backward run Q_k (x_i - mu_k) as `bmm`s over the K components with
    (K, n, d) and (K, d, d) operands, and no operation produces the (n, K, d) layout."""
    if peers.peer_module("torch") is None:
        pytest.skip("torch: its library is not installed (pip install -e '.[torch]')")
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from isozyme.benchmark_suite import peer_torch

    d, K, n = GMM_SHAPE["d"], GMM_SHAPE["K"], GMM_SHAPE["n"]
    calls: list[tuple[str, list[tuple[int, ...]], list[tuple[int, ...]]]] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
            outs = [tuple(o.shape) for o in (out if isinstance(out, (tuple, list)) else [out])
                    if isinstance(o, torch.Tensor)]
            calls.append((str(func.overloadpacket.__name__), shapes, outs))
            return out

    tensors = [torch.tensor(np.asarray(a)) for a in gmm_peer_args()[:4]]
    for t in tensors[:3]:
        t.requires_grad_(True)
    alphas, means, icf, x = tensors
    _, _, _, _, gamma, m, log_gamma_d = gmm_peer_args()
    with Record():
        value = peer_torch.gmm_loss(alphas, means, icf, x, torch.tensor(gamma), m, torch.tensor(log_gamma_d))
        torch.autograd.grad(value, tensors[:3])
    forward = [c for c in calls if c[0] == "bmm" and c[2] == [(K, n, d)]]
    assert any(sorted(shapes) == sorted([(K, n, d), (K, d, d)]) for _, shapes, _ in forward), calls
    assert all((n, K, d) not in outs for _, _, outs in calls), "an (n, K, d) intermediate"
