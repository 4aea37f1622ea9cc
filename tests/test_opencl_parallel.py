"""`prange` loops on OpenCL (`codegen/parallel_loops.py`, `codegen/opencl_program.py`): NDRange kernels, one
work item per iteration, against the reference interpreter and the llvm backend.

Skipped, with the reason, where pyopencl or an OpenCL device is missing (PoCL gives a CPU device).

- **Primal programs.** Random programs of `kernelgen` (their `prange` loops write one array at the loop
  index) and hand-written `prange` kernels (elementwise, stencil, f64/i64/f32 reductions, time stepping,
  branches, inner serial loops with run-time-extent local arrays, 2-D rows, start/stop/step with negative
  steps and zero trips) equal the interpreter: f64 within 1e-12 relative (work-group reductions reorder
  the sums of positive terms), f32 within 1e-5, ints exactly. Those that must run in parallel raise on a
  `SerialLoopWarning` and show an `iz_par` kernel in `iz.show_ir(kernel, stage="opencl")`; sizes exceed
  one work group (`GROUP_SIZE`).
- **Gradients.** The AD corpus (`ad_kernels.py`, each kernel with opt "post" or "pre", alternating),
  random differentiable programs (`gradgen.py`) and the hand-written kernels above, on opencl against llvm
  (1e-9 relative to the largest component: atomics and work-group reductions reorder sums); a shared
  parameter as an Active scalar and as `p[0]` with 100_000 work items, against llvm and the closed form,
  also with `ISOZYME_OPENCL_REDUCTION=atomic`; a stencil (atomic adds into d_x); a per-item scratch array;
  forward mode. Reverse loops of parallel `prange` loops run in parallel too (one xfail: missed parallelism).
- **Device arrays** through `prange` kernels and `iz.autodiff`, against numpy.
- **Serial fallback**: `break` and loop-carried values give the interpreter's result and a
  `SerialLoopWarning` naming the reason.
- **Errors**: an out-of-bounds index in a `prange` body (boundscheck) raises the llvm backend's IndexError.

Budget (2 cores): building an OpenCL program costs PoCL ~0.3 s while its kernel cache (~/.cache/pocl,
`POCL_CACHE_DIR`) is cold, so the module takes about a minute on a fresh machine, half that warm; the corpus
(100 derivatives) is two thirds of it.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradgen
import kernelgen
import numpy as np
import pytest
from ad_kernels import CASES, Case
from ad_oracle import make_problem, reverse_mode
from hypothesis import HealthCheck, Phase, given, note, settings
from opencl_conformance import repeats

import isozyme as iz
from isozyme import Array, f32, f64, i64

pytest.importorskip("pyopencl", reason="the opencl backend needs pyopencl")
from isozyme.runtime.opencl_backend import SerialLoopWarning  # noqa: E402
from isozyme.runtime.opencl_device import OpenCLUnavailable, device  # noqa: E402

try:
    device()
except OpenCLUnavailable as error:  # pragma: no cover - depends on the machine
    pytest.skip(f"no OpenCL device: {error}", allow_module_level=True)

import test_gradient_fuzz as fuzz  # noqa: E402  (its problem builder and derivative runners)

N = 700
"""Work items of the hand-written primal kernels: several work groups of 256, cheap on the interpreter."""


@pytest.fixture(autouse=True, scope="module")
def _no_disk_cache() -> Iterator[None]:
    """Hundreds of derivatives compiled once each (as in test_autodiff_numeric)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ISOZYME_CACHE", "off")
        yield


def fresh(kernel: iz.Kernel, **options: Any) -> iz.Kernel:
    """A new kernel object of the same function: compiled code (and the SerialLoopWarning, emitted when it
    is compiled) is cached per kernel object."""
    return iz.kernel(kernel.py_func, **options)


def run_opencl(kernel: iz.Kernel, args: list[Any], parallel: bool) -> Any:
    """The kernel on opencl, compiled afresh; with `parallel`, a SerialLoopWarning is an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error" if parallel else "ignore", SerialLoopWarning)
        return fresh(kernel).compile(backend="opencl")(*args)


def close(expected: Any, actual: Any, rtol: float) -> bool:
    if isinstance(expected, float):
        return (math.isnan(expected) and math.isnan(actual)) or expected == actual \
            or abs(expected - actual) <= rtol * abs(expected)
    return type(expected) is type(actual) and expected == actual


def compare_with_interpreter(kernel: iz.Kernel, args: tuple, rtol: float = 1e-12, parallel: bool = True) -> None:
    """The kernel on opencl and on the interpreter: the same return value and arrays afterwards."""
    reference, tested = kernelgen.copy_args(args), kernelgen.copy_args(args)
    expected = kernel.compile(backend="interp")(*reference)
    actual = run_opencl(kernel, tested, parallel)
    assert close(expected, actual, rtol), (expected, actual)
    for ref, out in zip(reference, tested, strict=True):
        if isinstance(ref, np.ndarray):
            assert out.dtype == ref.dtype
            np.testing.assert_allclose(out, ref, rtol=rtol, atol=0, equal_nan=True)


def parallel_kernels(kernel: iz.Kernel) -> int:
    """How many `iz_par` NDRange kernels the OpenCL program of `kernel` has."""
    return len(re.findall(r"^__kernel .*\bvoid iz_par\d+\(", iz.show_ir(kernel, stage="opencl"), re.MULTILINE))


# --- 1. primal: random programs ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generated modules go to files: the frontend reads kernels with `inspect.getsource`."""
    return tmp_path_factory.mktemp("opencl_parallel")


PROFILE = {"deadline": None, "derandomize": True, "database": None, "phases": (Phase.generate, Phase.shrink),
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


def _has_prange(program: kernelgen.Program) -> bool:
    return "iz.prange(" in program.source


@settings(max_examples=30, **PROFILE)
@given(case=kernelgen.cases().filter(lambda case: _has_prange(case[0])))
def test_random_programs_with_prange_match_the_interpreter(kernel_dir: Path,
                                                             case: tuple[kernelgen.Program, tuple]) -> None:
    """kernelgen's programs that use `prange` (each writes one array at its index): opencl equals the
    interpreter (1e-12; the interpreter is the oracle, test_random_kernels checks it against Python).
    Loops that run serially (a helper call in the body) are allowed here."""
    program, args = case
    note(program.source)
    entry = kernelgen.load_module(program.source, kernel_dir).entry
    expected_args, actual_args = kernelgen.copy_args(args), kernelgen.copy_args(args)
    expected = entry.compile(backend="interp")(*expected_args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SerialLoopWarning)
        actual = entry.compile(backend="opencl")(*actual_args)
    kernelgen.assert_same_results((expected, expected_args), (actual, actual_args), program.returns)


# --- 1. primal: hand-written prange kernels -------------------------------------------------------------


@iz.kernel
def elementwise(out: Array[f64], x: Array[f64], a: f64):
    for i in iz.prange(len(x)):
        out[i] = a * iz.sin(x[i]) + iz.exp(-x[i] * x[i]) + i


@iz.kernel
def stencil(out: Array[f64], x: Array[f64]):
    for i in iz.prange(1, len(x) - 1):
        out[i] = x[i - 1] - 2.0 * x[i] + x[i + 1]


@iz.kernel
def sum_f64(x: Array[f64]) -> f64:
    s = 0.0
    for i in iz.prange(len(x)):
        s += x[i] * x[i]
    return s


@iz.kernel
def sum_i64(k: Array[i64], base: i64) -> i64:
    s = base
    for i in iz.prange(len(k)):
        s += k[i] * 3 - i
    return s


@iz.kernel
def sum_f32(x: Array[f32]) -> f32:
    s = f32(0.0)
    for i in iz.prange(len(x)):
        s += x[i] * x[i]
    return s


@iz.kernel
def two_reductions_in_branches(x: Array[f64]) -> f64:
    """Two reductions, each added to on one branch only, and a subtraction."""
    positive = 0.0
    negative = 0.0
    for i in iz.prange(len(x)):
        if x[i] > 0.0:
            positive += x[i]
        else:
            negative -= x[i]
    return positive * 1000.0 + negative


@iz.kernel
def time_stepping(u: Array[f64], r: f64, steps: i64) -> f64:
    """Explicit heat steps: a serial loop over time around two prange loops (one launch each per step)."""
    n = len(u)
    prev = iz.empty(n, f64)
    energy = 0.0
    for _ in range(steps):
        for i in iz.prange(n):
            prev[i] = u[i]
        for i in iz.prange(1, n - 1):
            u[i] = prev[i] + r * (prev[i - 1] - 2.0 * prev[i] + prev[i + 1])
        energy += u[n // 2]
    return energy


@iz.kernel
def prange_in_branch(out: Array[f64], x: Array[f64], flag: i64):
    if flag > 0:
        for i in iz.prange(len(x)):
            out[i] = x[i] * 2.0
    else:
        for i in iz.prange(len(x)):
            out[i] = -x[i]


@iz.kernel
def inner_loop_with_local_array(out: Array[f64], x: Array[f64], m: i64):
    """Each work item fills its own run-time-extent local array in a serial inner loop."""
    for i in iz.prange(len(x)):
        w = iz.zeros(m, f64)
        for j in range(m):
            w[j] = x[i] * (j + 1)
        t = 0.0
        for j in range(m):
            t += w[j] * w[m - 1 - j]
        out[i] = t


@iz.kernel
def rows(out: Array[f64, 2], a: Array[f64, 2]):
    for i in iz.prange(a.shape[0]):
        for j in range(a.shape[1]):
            out[i, j] = a[i, j] * (i + 1) + j


@iz.kernel
def strided(out: Array[f64], x: Array[f64], start: i64, stop: i64, step: i64) -> i64:
    count = 0
    for i in iz.prange(start, stop, step):
        out[i] = x[i] + 1.0
        count += 1
    return count


def _rng() -> np.random.Generator:
    return np.random.default_rng(20261121)


PRIMAL_CASES = [
    ("elementwise", elementwise, lambda r: (np.zeros(N), r.normal(size=N), 0.5), 1e-12),
    ("stencil", stencil, lambda r: (np.zeros(N), r.normal(size=N)), 1e-12),
    ("sum_f64", sum_f64, lambda r: (r.uniform(0.5, 2.0, N),), 1e-12),
    ("sum_i64", sum_i64, lambda r: (r.integers(-1000, 1000, N), 7), 0.0),
    ("sum_f32", sum_f32, lambda r: (r.uniform(0.5, 2.0, N).astype(np.float32),), 1e-5),
    ("two_reductions_in_branches", two_reductions_in_branches, lambda r: (r.normal(size=N),), 1e-12),
    ("time_stepping", time_stepping, lambda r: (r.uniform(0.0, 1.0, N), 0.25, 6), 1e-12),
    ("prange_in_branch_then", prange_in_branch, lambda r: (np.zeros(N), r.normal(size=N), 1), 1e-12),
    ("prange_in_branch_else", prange_in_branch, lambda r: (np.zeros(N), r.normal(size=N), -1), 1e-12),
    ("inner_loop_with_local_array", inner_loop_with_local_array,
     lambda r: (np.zeros(300), r.normal(size=300), 5), 1e-12),
    ("rows", rows, lambda r: (np.zeros((300, 7)), r.normal(size=(300, 7))), 1e-12),
]


@pytest.mark.parametrize(("kernel", "make_args", "rtol"), [case[1:] for case in PRIMAL_CASES],
                         ids=[case[0] for case in PRIMAL_CASES])
def test_prange_kernel_runs_in_parallel_and_matches_the_interpreter(kernel: iz.Kernel, make_args: Any,
                                                                     rtol: float) -> None:
    compare_with_interpreter(kernel, make_args(_rng()), rtol)
    assert parallel_kernels(kernel) >= 1


def test_time_stepping_launches_two_loops() -> None:
    assert parallel_kernels(time_stepping) == 2 and parallel_kernels(prange_in_branch) == 2


@pytest.mark.parametrize(("start", "stop", "step"), [
    (0, N, 1), (3, N, 7), (N - 1, -1, -1), (N - 2, 0, -5), (5, 5, 1), (9, 2, 1), (2, 9, -1), (0, 0, -3),
    (N - 1, N - 2, -100),
])
def test_start_stop_step(start: int, stop: int, step: int) -> None:
    r = _rng()
    compare_with_interpreter(strided, (np.zeros(N), r.normal(size=N), start, stop, step))
    assert strided.compile(backend="opencl")(np.zeros(N), np.zeros(N), start, stop, step) == \
        len(range(start, stop, step))


# --- 2. gradients: the AD corpus and random differentiable programs against llvm ----------------------


GRADIENT_RTOL = 1e-9
"""opencl against llvm, relative to the largest component: work-group reductions and atomics reorder sums."""


def assert_close_to(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    """|got - expected| <= GRADIENT_RTOL * max |expected| + 1e-300, element by element (nan where nan)."""
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, what
    assert np.array_equal(np.isnan(got), np.isnan(expected)), what
    finite = ~np.isnan(expected)
    scale = float(np.abs(expected[finite]).max(initial=0.0))
    bad = np.abs(got[finite] - expected[finite]) > GRADIENT_RTOL * scale + 1e-300
    assert not bad.any(), f"{what}: opencl {got.tolist()}, llvm {expected.tolist()}"


CORPUS = [(case, ("post", "pre")[k % 2]) for k, case in enumerate(CASES)]
"""Each corpus kernel with one opt, alternating: both opts are covered at half the compiles (a derivative's
OpenCL program costs PoCL ~0.3 s to build when its kernel cache is cold)."""


@pytest.mark.parametrize(("case", "opt"), CORPUS, ids=[f"{case.name}-{opt}" for case, opt in CORPUS])
def test_corpus_gradient_matches_llvm(case: Case, opt: str) -> None:
    """(Called `repeats()` times on a GPU: opencl_conformance.py.)"""
    problem = make_problem(case)
    on_llvm = reverse_mode(problem, opt, "llvm")
    for call in range(repeats()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SerialLoopWarning)
            on_opencl = reverse_mode(problem, opt, "opencl")
        what = f"{case.name}, call {call + 1}"
        assert_close_to(on_opencl.gradient, on_llvm.gradient, f"{what}: gradient")
        for got, expected in zip(on_opencl.arrays, on_llvm.arrays, strict=True):
            assert_close_to(got, expected, f"{what}: arrays after the call")
        if on_llvm.primal_return is None:
            assert on_opencl.primal_return is None
        else:
            assert_close_to(np.array([on_opencl.primal_return]), np.array([on_llvm.primal_return]),
                            f"{what}: return value")


@settings(max_examples=12, **PROFILE)
@given(program=gradgen.programs(fuzz.ENABLED_FEATURES), seed=fuzz.seeds)
def test_random_gradients_match_llvm(kernel_dir: Path, program: gradgen.Program, seed: int) -> None:
    """gradgen's programs (test_gradient_fuzz checks them against finite differences): reverse mode on
    opencl equals llvm, for one opt per program (alternating)."""
    note(gradgen.numbered(program))
    problem = fuzz.make_problem(program, seed, kernel_dir)
    opt = fuzz.forward_opt(seed)
    on_llvm = fuzz.reverse_mode(problem, opt, "llvm")
    (llvm_return, llvm_args) = on_llvm.result
    for _ in range(repeats()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SerialLoopWarning)
            on_opencl = fuzz.reverse_mode(problem, opt, "opencl")
        assert_close_to(on_opencl.gradient, on_llvm.gradient, f"{opt} gradient")
        (opencl_return, opencl_args) = on_opencl.result
        assert (opencl_return is None) == (llvm_return is None)
        if llvm_return is not None:
            assert_close_to(np.array([opencl_return]), np.array([llvm_return]), "return value")
        for got, expected in zip(opencl_args, llvm_args, strict=True):
            if isinstance(expected, np.ndarray):
                assert_close_to(got, expected, "arrays after the call")


# --- 2. gradients of prange kernels ------------------------------------------------------------------------

WORK_ITEMS = 100_000
"""Work items of the shared-parameter gradients: 391 work groups, so the groups' sums meet in atomics."""


@iz.kernel
def shared_active(out: Array[f64], x: Array[f64], a: f64):
    for i in iz.prange(len(x)):
        out[i] = iz.sin(a * x[i])


@iz.kernel
def shared_element(out: Array[f64], x: Array[f64], p: Array[f64]):
    for i in iz.prange(len(x)):
        out[i] = iz.sin(p[0] * x[i])


@iz.kernel
def warp_blocks(out: Array[f64], x: Array[f64], p: Array[f64]):
    """The reverse adds into d_p[i // 64]: the 32 lanes of a warp add into one element (warp sums on NVIDIA),
    into the next one every 64 work items."""
    for i in iz.prange(len(x)):
        out[i] = iz.sin(p[i // 64] * x[i])


@iz.kernel
def warp_scattered(out: Array[f64], x: Array[f64], p: Array[f64]):
    """The reverse adds into d_p[i % 7]: neighbouring lanes add into different elements (no warp sum)."""
    for i in iz.prange(len(x)):
        out[i] = p[i % 7] * x[i] * x[i]


@iz.kernel
def warp_diverged(out: Array[f64], x: Array[f64], p: Array[f64]):
    """The reverse adds into d_p[i // 64] in a branch that some lanes take: a warp is only partly there."""
    for i in iz.prange(len(x)):
        if x[i] > 0.5:
            out[i] = p[i // 64] * x[i]
        else:
            out[i] = x[i]


@iz.kernel
def warp_blocks_f32(out: Array[f32], x: Array[f32], p: Array[f32]):
    """`warp_blocks` in f32."""
    for i in iz.prange(len(x)):
        out[i] = p[i // 64] * x[i] * x[i]


@iz.kernel
def stencil_sum(y: Array[f64], x: Array[f64]):
    for i in iz.prange(1, len(x) - 1):
        y[i] = x[i - 1] + 2.0 * x[i] + x[i + 1]


@iz.kernel
def scratch_per_item(out: Array[f64], x: Array[f64], m: i64):
    """A private array of constant extent and a scratch array of run-time extent per work item."""
    for i in iz.prange(len(x)):
        w = iz.zeros(4, f64)
        v = iz.zeros(m, f64)
        for j in range(4):
            w[j] = x[i] * (j + 1.0)
        for j in range(m):
            v[j] = iz.sin(x[i] + j)
        t = 0.0
        for j in range(4):
            t += w[j] * w[3 - j]
        for j in range(m):
            t += v[j] * v[j]
        out[i] = t


class Sources:
    """The OpenCL C of every program built while it is installed (`opencl_backend.build` is wrapped)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from isozyme.runtime import opencl_backend

        self.built: list[str] = []
        build = opencl_backend.build

        def recording(source: str, where: Any) -> Any:
            self.built.append(source)
            return build(source, where)
        monkeypatch.setattr(opencl_backend, "build", recording)


def shared_inputs() -> tuple[np.ndarray, np.ndarray, float]:
    """x, the seed of out and the parameter: every term of the parameter's adjoint positive (no
    cancellation, so its relative error measures the summation)."""
    rng = _rng()
    return rng.uniform(0.1, 1.0, WORK_ITEMS), rng.uniform(0.5, 1.5, WORK_ITEMS), 0.7


def gradient_of_shared(kernel: iz.Kernel, backend: str) -> tuple[float, np.ndarray, np.ndarray]:
    """(d parameter, d_x, d_out) after `iz.autodiff` with the seed of `shared_inputs` in d_out."""
    x, seed, a = shared_inputs()
    d_out, d_x = seed.copy(), np.zeros_like(x)
    call = [iz.Duplicated(np.zeros_like(x), d_out), iz.Duplicated(x, d_x)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", SerialLoopWarning)
        if kernel.py_func is shared_active.py_func:
            _, (d_a,) = iz.autodiff(kernel, *call, iz.Active(a), backend=backend)
            return d_a, d_x, d_out
        d_p = np.zeros(1)
        iz.autodiff(kernel, *call, iz.Duplicated(np.array([a]), d_p), backend=backend)
        return float(d_p[0]), d_x, d_out


@pytest.mark.parametrize("reduction", ["group", "atomic"])
@pytest.mark.parametrize("kernel", [shared_active, shared_element], ids=["active_scalar", "duplicated_element"])
def test_shared_parameter_gradient(kernel: iz.Kernel, reduction: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every work item reads the parameter: its adjoint is a sum over 100_000 work items (a work-group
    reduction, or with ISOZYME_OPENCL_REDUCTION=atomic one atomic add per item), equal to llvm's and to the
    closed form sum seed_i x_i cos(a x_i); d_x_i = seed_i a cos(a x_i); d_out is consumed."""
    monkeypatch.setenv("ISOZYME_OPENCL_REDUCTION", reduction)
    sources = Sources(monkeypatch)
    d_param, d_x, d_out = gradient_of_shared(fresh(kernel), "opencl")
    llvm_param, llvm_x, _ = gradient_of_shared(fresh(kernel), "llvm")
    x, seed, a = shared_inputs()
    assert d_param == pytest.approx(float(np.sum(seed * x * np.cos(a * x))), rel=1e-11)
    assert d_param == pytest.approx(llvm_param, rel=1e-11)
    assert_close_to(d_x, llvm_x, "d_x")
    np.testing.assert_allclose(d_x, seed * a * np.cos(a * x), rtol=1e-13)
    assert not d_out.any()
    (source,) = sources.built
    grouped = "reqd_work_group_size" in source and "red_f64[lid]" in source
    assert grouped == (reduction == "group"), source


def test_stencil_gradient_accumulates_atomically(monkeypatch: pytest.MonkeyPatch) -> None:
    """y[i] = x[i-1] + 2 x[i] + x[i+1]: three work items add into each d_x[j] (atomic adds)."""
    sources = Sources(monkeypatch)
    rng = _rng()
    n = 5000
    x, seed = rng.normal(size=n), rng.normal(size=n)
    results = {}
    for backend in ("opencl", "llvm"):
        d_y, d_x = seed.copy(), np.zeros(n)
        with warnings.catch_warnings():
            warnings.simplefilter("error", SerialLoopWarning)
            iz.autodiff(stencil_sum, iz.Duplicated(np.zeros(n), d_y), iz.Duplicated(x.copy(), d_x), backend=backend)
        results[backend] = d_x
    expected = np.zeros(n)
    expected[:-2] += seed[1:-1]
    expected[1:-1] += 2.0 * seed[1:-1]
    expected[2:] += seed[1:-1]
    np.testing.assert_allclose(results["opencl"], expected, rtol=1e-14, atol=1e-15)
    assert_close_to(results["opencl"], results["llvm"], "d_x")
    assert any(re.search(r"iz_atomic_add_double\(&a\d+\[", source) for source in sources.built)


def test_gradient_with_a_scratch_array_per_work_item(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = Sources(monkeypatch)
    rng = _rng()
    n, m = 1000, 3
    x, seed = rng.normal(size=n), rng.normal(size=n)
    results = {}
    for backend in ("opencl", "llvm"):
        d_out, d_x = seed.copy(), np.zeros(n)
        with warnings.catch_warnings():
            warnings.simplefilter("error", SerialLoopWarning)
            iz.autodiff(scratch_per_item, iz.Duplicated(np.zeros(n), d_out), iz.Duplicated(x.copy(), d_x), m,
                        backend=backend)
        results[backend] = d_x
    # t = sum_j (j+1)(4-j) x^2 + sum_j sin(x+j)^2 = 20 x^2 + sum_j sin(x+j)^2
    closed = 40.0 * x + sum(np.sin(2.0 * (x + j)) for j in range(m))
    np.testing.assert_allclose(results["opencl"], seed * closed, rtol=1e-12, atol=1e-13)
    assert_close_to(results["opencl"], results["llvm"], "d_x")
    (source,) = sources.built
    assert re.search(r"void iz_par\d+\(.*__global double\* restrict s\d+", source)


def test_forward_mode_on_a_prange_kernel() -> None:
    """d out_i = cos(p x_i) (dp x_i + p dx_i), on opencl, llvm and in closed form."""
    rng = _rng()
    n = 3000
    x, dx, p = rng.normal(size=n), rng.normal(size=n), 0.7
    tangents = {}
    for backend in ("opencl", "llvm"):
        out, d_out = np.zeros(n), np.zeros(n)
        with warnings.catch_warnings():
            warnings.simplefilter("error", SerialLoopWarning)
            iz.fwddiff(shared_element, iz.Duplicated(out, d_out), iz.Duplicated(x.copy(), dx.copy()),
                       iz.Duplicated(np.array([p]), np.array([0.25])), backend=backend)
        np.testing.assert_allclose(out, np.sin(p * x), rtol=1e-13, atol=1e-15)
        tangents[backend] = d_out
    np.testing.assert_allclose(tangents["opencl"], np.cos(p * x) * (0.25 * x + p * dx), rtol=1e-12, atol=1e-14)
    assert_close_to(tangents["opencl"], tangents["llvm"], "tangent")


def _dup(value: np.ndarray, shadow: np.ndarray | None = None) -> iz.Duplicated:
    return iz.Duplicated(value, np.zeros_like(value) if shadow is None else shadow)


PRANGE_GRADIENTS = [
    ("sum_f64", sum_f64, lambda r: [_dup(r.uniform(0.5, 2.0, N))]),
    ("elementwise", elementwise, lambda r: [_dup(np.zeros(N), r.normal(size=N)), _dup(r.normal(size=N)),
                                            iz.Active(0.5)]),
    ("prange_in_branch", prange_in_branch, lambda r: [_dup(np.zeros(N), r.normal(size=N)), _dup(r.normal(size=N)),
                                                      1]),
    ("inner_loop_with_local_array", inner_loop_with_local_array,
     lambda r: [_dup(np.zeros(300), r.normal(size=300)), _dup(r.normal(size=300)), 5]),
    ("rows", rows, lambda r: [_dup(np.zeros((300, 7)), r.normal(size=(300, 7))), _dup(r.normal(size=(300, 7)))]),
    ("strided_negative_step", strided, lambda r: [_dup(np.zeros(N), r.normal(size=N)), _dup(r.normal(size=N)),
                                                  N - 2, 0, -5]),
    ("two_reductions_in_branches", two_reductions_in_branches, lambda r: [_dup(r.normal(size=N))]),
    ("time_stepping", time_stepping, lambda r: [_dup(r.uniform(0.0, 1.0, N), r.normal(size=N)), iz.Active(0.25), 4]),
]

SERIAL_REVERSE_LOOPS: dict[str, str] = {}
"""The hand-written kernels whose reverse `prange` loops run serially (missed parallelism, results right)."""


def prange_gradient(kernel: iz.Kernel, make_call: Any, opt: str, backend: str) -> tuple[Any, list[np.ndarray]]:
    """`iz.autodiff` of the kernel: (its result, the shadows and arrays afterwards)."""
    call = make_call(_rng())
    result = iz.autodiff(kernel, *call, opt=opt, backend=backend)
    arrays = [array for a in call if isinstance(a, iz.Duplicated) for array in (a.value, a.shadow)]
    return result, arrays


@pytest.mark.parametrize(("kernel", "make_call", "opt"),
                         [(*case[1:], ("pre", "post")[k % 2]) for k, case in enumerate(PRANGE_GRADIENTS)],
                         ids=[case[0] for case in PRANGE_GRADIENTS])
def test_prange_gradient_matches_llvm(kernel: iz.Kernel, make_call: Any, opt: str) -> None:
    """The hand-written prange kernels, differentiated: opencl equals llvm (one opt per kernel, alternating;
    test_reverse_prange_loops_run_in_parallel runs "post" on each)."""
    (llvm_primal, llvm_adjoints), llvm_arrays = prange_gradient(kernel, make_call, opt, "llvm")
    for _ in range(repeats()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SerialLoopWarning)  # test_reverse_prange_loops_run_in_parallel
            (primal, adjoints), arrays = prange_gradient(kernel, make_call, opt, "opencl")
        assert (primal is None) == (llvm_primal is None)
        if llvm_primal is not None:
            assert_close_to(np.array([primal]), np.array([llvm_primal]), "return value")
        assert_close_to(np.array(adjoints), np.array(llvm_adjoints), "Active adjoints")
        for got, expected in zip(arrays, llvm_arrays, strict=True):
            assert_close_to(got, expected, "arrays and shadows")


@pytest.mark.parametrize(("kernel", "make_call"), [
    pytest.param(*case[1:], id=case[0], marks=[pytest.mark.xfail(strict=True, raises=SerialLoopWarning,
                                                                  reason=SERIAL_REVERSE_LOOPS[case[0]])]
                 if case[0] in SERIAL_REVERSE_LOOPS else []) for case in PRANGE_GRADIENTS])
def test_reverse_prange_loops_run_in_parallel(kernel: iz.Kernel, make_call: Any) -> None:
    """The derivative of a kernel whose prange loops run in parallel has parallel reverse loops too."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", SerialLoopWarning)
        prange_gradient(fresh(kernel), make_call, "post", "opencl")


# --- 3. device arrays ------------------------------------------------------------------------------------


def test_device_arrays_are_modified_in_place() -> None:
    rng = _rng()
    u = rng.uniform(0.0, 1.0, N)
    u_device = iz.to_device(u)
    energy = time_stepping.compile(backend="opencl")(u_device, 0.25, 6)
    expected = u.copy()
    expected_energy = 0.0
    for _ in range(6):
        expected[1:-1] = expected[1:-1] + 0.25 * (expected[:-2] - 2.0 * expected[1:-1] + expected[2:])
        expected_energy += expected[N // 2]
    np.testing.assert_allclose(u_device.get(), expected, rtol=1e-12, atol=1e-15)
    assert energy == pytest.approx(expected_energy, rel=1e-12)
    assert not np.array_equal(u_device.get(), u)  # numpy's copy is untouched, the device's changed


@pytest.mark.parametrize("on_device", [(True, True), (True, False), (False, True)],
                         ids=["both", "out_only", "x_only"])
def test_device_and_numpy_arguments_mix(on_device: tuple[bool, bool]) -> None:
    rng = _rng()
    x = rng.normal(size=N)
    out, x_arg = np.zeros(N), x.copy()
    args = [iz.to_device(a) if flag else a for a, flag in zip((out, x_arg), on_device)]
    elementwise.compile(backend="opencl")(*args, 0.5)
    result = args[0].get() if on_device[0] else args[0]
    np.testing.assert_allclose(result, 0.5 * np.sin(x) + np.exp(-x * x) + np.arange(N), rtol=1e-13)
    np.testing.assert_array_equal(args[1].get() if on_device[1] else args[1], x)


def test_autodiff_with_device_shadows() -> None:
    x, seed, a = shared_inputs()
    out, d_out = iz.to_device(np.zeros_like(x)), iz.to_device(seed)
    x_device, d_x = iz.to_device(x), iz.to_device(np.zeros_like(x))
    p, d_p = iz.to_device(np.array([a])), iz.to_device(np.zeros(1))
    iz.autodiff(shared_element, iz.Duplicated(out, d_out), iz.Duplicated(x_device, d_x), iz.Duplicated(p, d_p),
                backend="opencl")
    assert float(d_p.get()[0]) == pytest.approx(float(np.sum(seed * x * np.cos(a * x))), rel=1e-11)
    np.testing.assert_allclose(d_x.get(), seed * a * np.cos(a * x), rtol=1e-13)
    np.testing.assert_allclose(out.get(), np.sin(a * x), rtol=1e-13, atol=1e-15)
    assert not d_out.get().any()


# --- 4. serial fallback -------------------------------------------------------------------------------------


@iz.kernel
def prefix_until_negative(out: Array[f64], x: Array[f64]):
    for i in iz.prange(len(x)):
        if x[i] < 0.0:
            break
        out[i] = 2.0 * x[i]


@iz.kernel
def differences(out: Array[f64], x: Array[f64]):
    prev = 0.0
    for i in iz.prange(len(x)):
        out[i] = x[i] - prev
        prev = x[i]


@iz.kernel
def product(x: Array[f64]) -> f64:
    s = 1.0
    for i in iz.prange(len(x)):
        s = s * x[i]
    return s


@iz.kernel
def scaled_scatter(y: Array[f64], x: Array[f64], idx: Array[i64]):
    for i in iz.prange(len(x)):
        y[idx[i]] = y[idx[i]] * x[i]  # read-modify-write at an element other iterations may update too


@iz.kernel
def subtract_scatter(y: Array[f64], x: Array[f64], idx: Array[i64]):
    for i in iz.prange(len(x)):
        y[idx[i]] -= x[i]  # an accumulation: atomic (repeated indices are fine)


@iz.kernel
def local_scatter(out: Array[f64], x: Array[f64], idx: Array[i64]):
    t = iz.zeros(len(out), f64)
    for i in iz.prange(len(x)):
        t[idx[i]] = x[i]  # a local array: not the user's promise, and idx may repeat
    for j in range(len(out)):
        out[j] = t[j]


def test_a_subtracting_accumulation_is_atomic() -> None:
    """`y[idx[i]] -= x[i]` with indices repeated: one atomic add of -x[i] per work item, as llvm's sum (the
    reverse of `x[i] - means[k]` in the GMM gradient was such a subtraction, left a racing load and store)."""
    rng = _rng()
    args = (rng.normal(size=50), rng.normal(size=N), rng.integers(0, 50, N))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SerialLoopWarning)
        source = iz.show_ir(fresh(subtract_scatter), stage="opencl")
    assert re.search(r"iz_atomic_add_double\(&a\d+\[", source)
    expected, got = kernelgen.copy_args(args), kernelgen.copy_args(args)
    subtract_scatter.compile(backend="interp")(*expected)
    run_opencl(subtract_scatter, got, parallel=True)
    assert_close_to(got[0], expected[0], "y")  # sums in another order: to 1e-10 of the largest


def _positive_then_negative(r: np.random.Generator) -> tuple:
    x = r.uniform(0.5, 1.5, N)
    x[N // 3] = -1.0
    return np.zeros(N), x


SERIAL_CASES = [
    ("break", prefix_until_negative, _positive_then_negative,
     r"runs serially: unknown trip count: the loop also exits from \S+"),
    ("carried_previous", differences, lambda r: (np.zeros(N), r.normal(size=N)),
     r"runs serially: %prev\S* is carried from one iteration to the next"),
    ("carried_product", product, lambda r: (r.uniform(0.99, 1.01, N),),
     r"runs serially: %s\S* is carried from one iteration to the next"),
    ("read_modify_write", scaled_scatter, lambda r: (r.normal(size=50), r.normal(size=N), r.integers(0, 50, N)),
     r"runs serially: its iterations may read and write the same elements of %y"),
    ("local_scatter", local_scatter, lambda r: (np.zeros(50), r.normal(size=N), r.integers(0, 50, N)),
     r"runs serially: every iteration writes the local array %t"),
]


@pytest.mark.parametrize(("kernel", "make_args", "reason"), [case[1:] for case in SERIAL_CASES],
                         ids=[case[0] for case in SERIAL_CASES])
def test_serial_fallback_warns_and_matches_the_interpreter(kernel: iz.Kernel, make_args: Any, reason: str) -> None:
    with pytest.warns(SerialLoopWarning, match=r"OpenCL: the prange loop at .*test_opencl_parallel\.py:\d+:\d+ "
                                               + reason):
        fresh(kernel).compile(backend="opencl")
    compare_with_interpreter(kernel, make_args(_rng()), parallel=False)
    assert parallel_kernels(kernel) == 0


# --- 5. run-time errors ---------------------------------------------------------------------------------


@iz.kernel(boundscheck=True)
def shifted_read(out: Array[f64], x: Array[f64], k: i64):
    for i in iz.prange(len(x)):
        out[i] = x[i + k]


def test_out_of_bounds_in_a_work_item_matches_the_llvm_backend() -> None:
    """Only the last work item reads out of bounds: the same IndexError as llvm, and the kernel runs again."""
    args = (np.zeros(N), np.arange(N, dtype=np.float64), 1)
    with pytest.raises(IndexError) as on_llvm:
        shifted_read.compile(backend="llvm")(*kernelgen.copy_args(args))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SerialLoopWarning)
        on_opencl = shifted_read.compile(backend="opencl")
    with pytest.raises(IndexError) as raised:
        on_opencl(*kernelgen.copy_args(args))
    assert str(raised.value) == str(on_llvm.value)
    assert f"index ({N},) is out of bounds for an array of shape ({N},)" in str(raised.value)
    out = np.zeros(N)
    on_opencl(out, args[1], 0)
    np.testing.assert_array_equal(out, args[1])


def test_many_work_items_out_of_bounds() -> None:
    """Half the work items fail: one of them reports (which one is up to the device)."""
    with pytest.raises(IndexError, match=r"index \(\d+,\) is out of bounds for an array of shape \(700,\)"):
        shifted_read.compile(backend="opencl")(np.zeros(N), np.ones(N), N // 2)
