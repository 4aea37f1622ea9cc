"""Every JAX and PyTorch peer of the suite beside the other idiomatic formulations of it, timed side by side in
one process, every result checked (issue 60, "peers at their best").

    python benchmarks/peer_formulations.py [--device cpu|gpu] [--only gmm,lstm,...] [--sizes quick|full]
        [--repeats 15] [--max-seconds 20] [--torch-modes eager,default] [--compile-all]
        [--python-loop-limit 0] [--no-isozyme] [--json FILE]

For each benchmark (gmm, ba, ba_sumsq, lstm, mlp, ode_euler, ode_rk4, fft, brusselator: the suite's, at its
`--sizes`, `bench.sizes`; and `transformer`, the training step of `examples/transformer.py`'s
`TorchTrainer`, the torch peer of `benchmarks/transformer_training.py`), the formulations are:

- JAX: the suite's peer (`isozyme/benchmark_suite/peer_jax.py`, marked `[peer jax]`) and the alternatives of
  `peer_alternatives_jax.py`, each `jax.jit` of its derivative;
- PyTorch: the suite's peer (`peer_torch.py`) eager (`[peer torch]`) and its unit under `torch.compile` in
  each mode of `--torch-modes` besides "eager" (`default` is the suite's `[peer torch_compile]`;
  `max-autotune-no-cudagraphs` compiles for minutes), and the alternatives of `peer_alternatives_torch.py`,
  eager (in every mode too with `--compile-all`, where `torch.compile` applies). The compiled units are
  made once per mode and kept over the sizes, as `isozyme bench` keeps them: dynamo recompiles them for a
  new shape (with dynamic shapes from the second one on).

Both modules' docstrings say what each alternative is. With `--device gpu` JAX runs on its default device
(a GPU: the script stops if JAX has none) and PyTorch on CUDA; with `--device cpu` JAX on the CPU
(`JAX_PLATFORMS=cpu` unless it is set) and PyTorch on `ISOZYME_BENCH_TORCH_THREADS` threads (1 by default:
`peer_torch.py` says why). Every input is on the device before timing; every timed call ends when its
results are ready there (`jax.block_until_ready`, `torch.cuda.synchronize`).

Timing, per size: the first call of each formulation (which compiles) is timed apart; then `--repeats`
rounds, in each of which every formulation takes one sample in turn (calls interleaved): a sample is enough
back-to-back calls to last about `SAMPLE_SECONDS` (one for the transformer's steps), timed together. The
median over the samples, per call, is the row's time; a size stops after `--max-seconds` of rounds (three
rounds at least). `vs peer` is the time of the suite's peer of the same library (for PyTorch, in the same
mode, else eager) over the row's.

Checks (`isozyme/benchmark_checks.py`), outside the timed region: the result of every call of every
formulation (copied to the host after its sample) against the first result of its library's peer (PyTorch: the eager
one), and the suite's peers' also against isozyme's gradient (`run_gradient(opt="post")` on fresh
arguments, keyed as `peers.result` keys a peer's; `--no-isozyme` leaves it out), to `peers.PEER_TOLERANCE`
(1e-8 relative in the max-norm: the same math written differently, rounded otherwise); the transformer's
loss curve (the loss before each step, every formulation training from the same weights on the same
batches) against the eager peer's, to 1e-9 (`transformer_training.py`'s tolerance). A formulation that
raises is a failed check. A failed check is marked MISMATCH and the script exits with status 1 after
printing and writing everything. The machine's load (`os.getloadavg`) is printed and written before and
after each benchmark: on a shared machine, read the times with it.

JSON (`--json`, written again after each benchmark): {"device", "cpus", "torch_threads", "versions",
"passed", "rows": [{problem, size, label, library, formulation, mode, peer, median_ms, min_ms, samples,
calls_per_sample, first_call_s, vs_peer, check, isozyme_check, skipped, error}], "loads": [...]}.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "examples"), str(ROOT)]

PROBLEMS = ("gmm", "ba", "ba_sumsq", "lstm", "mlp", "ode_euler", "ode_rk4", "fft", "brusselator", "transformer")
SAMPLE_SECONDS = 0.005
MIN_ROUNDS = 3
TRANSFORMER_TOLERANCE = 1e-9
TRANSFORMER_SIZES = {"quick": ({"layers": 2, "vocab": 16, "d_model": 16, "heads": 2, "hidden": 32, "seq": 8,
                                "batch": 2},),
                     "full": tuple({"layers": layers, "vocab": 128, "d_model": 64, "heads": 4, "hidden": 256,
                                    "seq": 64, "batch": 16} for layers in (1, 2))}
"""`transformer_training.py`'s QUICK (at 2 layers) and FULL (at 1 and 2 layers) models."""
CURRENT = {"gmm": ("K-batched einsum", "bmm"), "ba": ("vmap(jacrev)", "two sweeps"),
           "ba_sumsq": ("vmap", "vectorized"), "lstm": ("scan, fused gates", "fused gates"),
           "mlp": ("fori_loop", "python loop"), "ode_euler": ("fori_loop", "python loop"),
           "ode_rk4": ("fori_loop", "python loop"), "fft": ("jnp.fft", "strided complex"),
           "brusselator": ("pad", "replicate pad"), "transformer": (None, "manual attention")}
"""The names of the suite's peers in the tables, by benchmark: (JAX's, PyTorch's)."""

Prepared = tuple[Callable[[], Any], Callable[[Any], Any]]


@dataclass
class Formulation:
    """One way of computing a benchmark's derivative: `prepare(args, seeds)` puts the inputs on the device
    and returns the timed call and the host copy of what it returned. `peer`: the suite's peer this is
    ("jax", "torch", "torch_compile"), None for an alternative. A `stateful` one (a training step) changes
    its state each call: its results form a sequence, checked against its library peer's sequence."""

    library: str
    name: str
    mode: str
    prepare: Callable[[tuple, Mapping], Prepared]
    peer: str | None = None
    stateful: bool = False

    @property
    def label(self) -> str:
        mark = f" [peer {self.peer}]" if self.peer else ""
        return f"{self.library} {self.mode}: {self.name}{mark}"


@dataclass
class Measured:
    """A formulation's calls at one size: first call, per-call sample times, the checks."""

    formulation: Formulation
    call: Callable[[], Any] | None = None
    host: Callable[[Any], Any] | None = None
    first_call_s: float | None = None
    number: int = 1
    samples: list[float] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    check: Any = None
    isozyme_check: Any = None
    error: str | None = None


# -- the formulations --------------------------------------------------------------------------------------

def jax_formulation(name: str, peer_object: Any, peer: str | None = None) -> Formulation:
    """`jax.jit` of a `JaxPeer`'s derivative on the default device."""
    def prepare(args: tuple, seeds: Mapping) -> Prepared:
        import jax

        arrays = tuple(jax.device_put(np.asarray(a)) for a in peer_object.inputs(args, seeds))
        static, compiled = peer_object.static(args), jax.jit(peer_object.derivative,
                                                            static_argnames=peer_object.static_names)

        def host(value: Any) -> dict:
            return {key: np.asarray(v) for key, v in zip(peer_object.keys, value)}
        return (lambda: jax.block_until_ready(compiled(*arrays, **static))), host
    return Formulation("jax", name, "jit", prepare, peer)


@functools.cache
def compiled_unit(unit: Callable, mode: str) -> Callable:
    """`torch.compile(unit, mode=mode)`, one per unit and mode for the whole run."""
    import torch

    return torch.compile(unit, mode=mode)


def torch_formulation(name: str, peer_object: Any, mode: str, device: str, peer: str | None = None) -> Formulation:
    """A `TorchPeer`'s derivative (its unit eager, or compiled in `mode`) on `device`."""
    def prepare(args: tuple, seeds: Mapping) -> Prepared:
        import torch

        from isozyme.benchmark_suite import peer_torch

        tensors = [peer_torch.tensor(a).to(device) for a in peer_object.inputs(args, seeds)]
        static = peer_object.static(args)
        unit = peer_object.unit if mode == "eager" else compiled_unit(peer_object.unit, mode)
        synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        if peer_object.derivative is not None:
            def call() -> Any:
                value = peer_object.derivative(unit, *tensors, **static)
                synchronize()
                return value
        else:
            differentiated = [t.requires_grad_() for t in tensors[:len(peer_object.keys)]]

            def call() -> Any:
                value = torch.autograd.grad(peer_object.objective(unit, *tensors, **static), differentiated)
                synchronize()
                return value

        def host(value: Any) -> dict:
            return {key: t.detach().cpu().numpy() for key, t in zip(peer_object.keys, value)}
        return call, host
    return Formulation("torch", name, mode, prepare, peer)


def transformer_formulation(name: str, mode: str, device: str, sdpa: bool = False, fused_adam: bool = False,
                            peer: str | None = None) -> Formulation:
    """A training step of `TorchTrainer` (`torch_loss` or `torch_loss_sdpa`, eager or compiled in `mode`,
    `torch.optim.Adam` or its fused kernel) from the example's initial weights, the batches in turn."""
    def prepare(size: dict, seeds: Mapping) -> Prepared:
        import torch
        from peer_alternatives_torch import torch_loss_sdpa
        from transformer import LN_EPS, Adam, Config, TorchTrainer, init_parameters, make_batches, torch_loss

        config = Config(**size)
        trainer = TorchTrainer(init_parameters(config, seed=0), Adam(), device=device)
        loss = functools.partial(torch_loss_sdpa, ln_eps=LN_EPS) if sdpa else torch_loss
        trainer.loss = loss if mode == "eager" else torch.compile(loss, mode=mode)
        if fused_adam:
            adam = Adam()
            trainer.optimizer = torch.optim.Adam(list(trainer.tensors.values()), lr=adam.lr,
                                                 betas=(adam.beta1, adam.beta2), eps=adam.eps, fused=True)
        batches = [trainer.batch(batch) for batch in make_batches(config, 8, seed=1)]
        steps = itertools.count()
        synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)

        def call() -> Any:
            loss_value = trainer.step(*batches[next(steps) % len(batches)])
            synchronize()
            return loss_value
        return call, lambda value: float(value)
    return Formulation("torch", name, mode, prepare, peer, stateful=True)


def formulations_of(problem: str, options: argparse.Namespace, device: str) -> list[Formulation]:
    """The formulations of `problem` (module docstring), the suite's peers first."""
    modes = [mode for mode in options.torch_modes.split(",") if mode]
    compiled_modes = [mode for mode in modes if mode != "eager"]
    jax_name, torch_name = CURRENT[problem]
    made: list[Formulation] = []
    if problem == "transformer":
        made += [transformer_formulation(torch_name, mode, device, peer=_torch_peer(mode)) for mode in modes]
        for mode in modes if options.compile_all else ["eager"]:
            made.append(transformer_formulation("scaled_dot_product_attention", mode, device, sdpa=True))
        made.append(transformer_formulation("manual attention, fused Adam", "eager", device, fused_adam=True))
        return made
    import peer_alternatives_jax
    import peer_alternatives_torch

    from isozyme.benchmark_suite import peer_jax, peer_torch

    made.append(jax_formulation(jax_name, peer_jax.PEERS[problem], "jax"))
    made += [jax_formulation(name, alternative, None)
             for name, alternative in peer_alternatives_jax.alternatives()[problem].items()]
    made += [torch_formulation(torch_name, peer_torch.PEERS[problem], mode, device, _torch_peer(mode))
             for mode in modes]
    for name, alternative in peer_alternatives_torch.ALTERNATIVES[problem].items():
        for mode in ["eager", *(compiled_modes if options.compile_all and alternative.compilable else [])]:
            made.append(torch_formulation(name, alternative.peer, mode, device))
    return made


def _torch_peer(mode: str) -> str | None:
    return {"eager": "torch", "default": "torch_compile"}.get(mode)


def skipped(problem: str, formulation: Formulation, size: dict, python_loop_limit: int) -> str | None:
    """Why `formulation` is left out at `size`, or None."""
    import peer_alternatives_jax

    if formulation.library == "jax" and problem != "transformer" \
            and not peer_alternatives_jax.applies(problem, formulation.name, size, python_loop_limit):
        return (f"a Python loop of more than {python_loop_limit} steps (--python-loop-limit): XLA compiles it "
                f"for minutes")
    return None


# -- measuring ---------------------------------------------------------------------------------------------

def isozyme_reference(problem: str, size: dict) -> tuple[dict | None, str | None]:
    """isozyme's derivative at `size` on fresh arguments, keyed as `peers.result` keys a peer's (the "dup"
    parameters a peer does not compute filled with zeros), or None and why."""
    from isozyme.benchmark_suite import peers, run_gradient

    bench = peers.benchmarks()[problem]
    args = bench.make_args(**size)
    try:
        gradient = run_gradient(bench, args, opt="post")
    except Exception as error:  # reported beside the rows; the peers are still checked against each other
        return None, f"{type(error).__name__}: {error}"
    return {**gradient.shadows, **gradient.active}, None


def with_zeros(problem: str, args: tuple, result: dict) -> dict:
    """A peer's result with the zero gradients of the "dup" parameters it does not compute (`peers.result`)."""
    from isozyme.benchmark_suite import peers

    bench = peers.benchmarks()[problem]
    filled = dict(result)
    if bench.gradient is None:
        for index, kind in enumerate(bench.activity):
            if kind == "dup" and index not in filled:
                filled[index] = np.zeros_like(args[index])
    return filled


def first_calls(measured: list[Measured], args: Any, seeds: Mapping) -> None:
    """Prepare each formulation, time its first call (which compiles) and its second (how many calls make
    a sample), keeping both results; a failure is recorded."""
    for entry in measured:
        try:
            entry.call, entry.host = entry.formulation.prepare(args, seeds)
            start = time.perf_counter()
            value = entry.call()
            entry.first_call_s = time.perf_counter() - start
            entry.results.append(entry.host(value))
            start = time.perf_counter()
            value = entry.call()
            once = time.perf_counter() - start
            entry.results.append(entry.host(value))
            entry.number = 1 if entry.formulation.stateful else max(1, min(1000, math.ceil(SAMPLE_SECONDS / once)))
        except Exception as error:  # a formulation that fails is a failed check, not a crash
            entry.error = f"{type(error).__name__}: {error}"[:500]
            entry.call = None


def sample_rounds(measured: list[Measured], repeats: int, max_seconds: float) -> None:
    """Rounds of one sample per formulation in turn; what each call returned is copied to the host after
    its sample, for the checks."""
    started = time.perf_counter()
    for round_index in range(repeats):
        if round_index >= MIN_ROUNDS and time.perf_counter() - started > max_seconds:
            break
        for entry in measured:
            if entry.call is None:
                continue
            try:
                returned = [None] * entry.number
                start = time.perf_counter()
                for call_index in range(entry.number):
                    returned[call_index] = entry.call()
                entry.samples.append((time.perf_counter() - start) / entry.number)
                entry.results += [entry.host(value) for value in returned]
            except Exception as error:
                entry.error = f"{type(error).__name__}: {error}"[:500]
                entry.call = None


def check_all(problem: str, args: Any, measured: list[Measured], isozyme: dict | None) -> None:
    """Each formulation's results against its library peer's first (a stateful one's: the sequences), the
    suite's peers' also against isozyme's."""
    from isozyme.benchmark_checks import Check
    from isozyme.benchmark_suite import peers

    references = {}
    for entry in measured:
        library = entry.formulation.library
        if entry.formulation.peer in ("jax", "torch") and entry.results:
            references[library] = entry
    for entry in measured:
        reference = references.get(entry.formulation.library)
        stateful = entry.formulation.stateful
        tolerance = TRANSFORMER_TOLERANCE if stateful else peers.PEER_TOLERANCE
        what = "loss curve" if stateful else "derivative"
        against = reference.formulation.label if reference is not None else "(no peer)"
        entry.check = Check(f"{problem} {entry.formulation.label}: {what} against {against}", tolerance,
                            peers.PEER_REASON)
        if entry.error is not None or reference is None:
            entry.check.record(math.inf)
            continue
        if stateful:
            got, want = entry.results, reference.results
            entry.check.compare(got, want[:len(got)] if len(want) >= len(got) else [*want, math.nan])
        else:
            for result in entry.results:
                entry.check.compare(result, reference.results[0])
        if entry.formulation.peer is not None and isozyme is not None and not stateful:
            entry.isozyme_check = Check(f"{problem} {entry.formulation.label} against isozyme's gradient",
                                        peers.PEER_TOLERANCE, peers.PEER_REASON)
            for result in entry.results:
                entry.isozyme_check.compare(with_zeros(problem, args, result), isozyme)


def measure_size(problem: str, size: dict, formulations: list[Formulation], options: argparse.Namespace
                 ) -> tuple[list[dict], str | None]:
    """Every formulation of `problem` at `size`: rows for the report, and why isozyme's check was left out."""
    from isozyme.benchmark_suite import peers

    if problem == "transformer":
        args, seeds, isozyme, why = size, {}, None, "not computed for the transformer"
    else:
        bench = peers.benchmarks()[problem]
        args = bench.make_args(**size)
        seeds = bench.seeds(args)
        isozyme, why = (None, "--no-isozyme") if options.no_isozyme else isozyme_reference(problem, size)
    rows, measured = [], []
    for formulation in formulations:
        reason = skipped(problem, formulation, size, options.python_loop_limit)
        if reason:
            rows.append(row_of(problem, size, Measured(formulation), skipped_because=reason))
        else:
            measured.append(Measured(formulation))
    first_calls(measured, args, seeds)
    sample_rounds(measured, options.repeats, options.max_seconds)
    check_all(problem, args, measured, isozyme)
    rows = [row_of(problem, size, entry) for entry in measured] + rows
    add_ratios(rows)
    return rows, why


def row_of(problem: str, size: dict, entry: Measured, skipped_because: str | None = None) -> dict:
    """A report row (module docstring)."""
    formulation = entry.formulation
    samples = entry.samples
    return {"problem": problem, "size": size, "label": size_label(problem, size), "library": formulation.library,
            "formulation": formulation.name, "mode": formulation.mode, "peer": formulation.peer,
            "median_ms": statistics.median(samples) * 1e3 if samples else None,
            "min_ms": min(samples) * 1e3 if samples else None, "samples": len(samples),
            "calls_per_sample": entry.number, "first_call_s": entry.first_call_s,
            "check": entry.check.as_dict() if entry.check is not None else None,
            "isozyme_check": entry.isozyme_check.as_dict() if entry.isozyme_check is not None else None,
            "skipped": skipped_because, "error": entry.error}


def add_ratios(rows: list[dict]) -> None:
    """`vs_peer`: the time of the suite's peer of the row's library (PyTorch: in its mode, else eager) over
    the row's."""
    peers_ms = {(r["library"], r["mode"]): r["median_ms"] for r in rows if r["peer"] and r["median_ms"]}
    for r in rows:
        reference = peers_ms.get((r["library"], r["mode"])) or peers_ms.get((r["library"], "eager"))
        r["vs_peer"] = reference / r["median_ms"] if reference and r["median_ms"] else None


def size_label(problem: str, size: dict) -> str:
    if problem == "transformer":
        return f"layers={size['layers']} d_model={size['d_model']} seq={size['seq']} batch={size['batch']}"
    from isozyme.benchmark_suite import peers

    return peers.benchmarks()[problem].label(size)


def sizes_of(problem: str, which: str) -> tuple[dict, ...]:
    if problem == "transformer":
        return TRANSFORMER_SIZES[which]
    from isozyme.benchmark_suite import peers

    return tuple(dict(size) for size in peers.benchmarks()[problem].sizes[which])


# -- reporting ---------------------------------------------------------------------------------------------

def passed(row: dict) -> bool:
    checks = [row["check"], row["isozyme_check"]]
    return row["skipped"] is not None or (row["check"] is not None and all(c is None or c["passed"] for c in checks))


def print_rows(rows: list[dict]) -> None:
    width = max(len(f"{r['library']} {r['mode']}: {r['formulation']}") for r in rows) + 22
    print(f"  {'formulation':<{width}} {'median ms':>11} {'min ms':>10} {'vs peer':>8} {'first s':>8}  check")
    for r in rows:
        mark = f" [peer {r['peer']}]" if r["peer"] else ""
        name = f"{r['library']} {r['mode']}: {r['formulation']}{mark}"
        if r["skipped"]:
            print(f"  {name:<{width}} skipped: {r['skipped']}")
            continue
        if r["median_ms"] is None:
            print(f"  {name:<{width}} failed: {r['error']}  MISMATCH")
            continue
        check = r["check"]
        text = f"{'ok' if check['passed'] else 'MISMATCH'} {_error(check)}"
        if r["isozyme_check"]:
            iz_check = r["isozyme_check"]
            text += f"; vs isozyme {'ok' if iz_check['passed'] else 'MISMATCH'} {_error(iz_check)}"
        ratio = f"{r['vs_peer']:7.2f}x" if r["vs_peer"] else "       -"
        first = f"{r['first_call_s']:8.2f}" if r["first_call_s"] is not None else "       -"
        print(f"  {name:<{width}} {r['median_ms']:11.4f} {r['min_ms']:10.4f} {ratio} {first}  {text}"
              + (f"  ({r['error']})" if r["error"] else ""), flush=True)


def _error(check: dict) -> str:
    return "inf" if check["error"] is None else f"{check['error']:.1e}"


def fastest(rows: list[dict]) -> list[str]:
    """One line per benchmark, size and library: the fastest formulation whose checks passed, beside the
    suite's peers of that library."""
    lines = []
    for (problem, label, library), group in itertools.groupby(rows, key=lambda r: (r["problem"], r["label"],
                                                                                   r["library"])):
        timed = [r for r in group if r["median_ms"] and passed(r)]
        if not timed:
            continue
        best = min(timed, key=lambda r: r["median_ms"])
        beside = "; ".join(f"peer {r['peer']} {r['median_ms']:.4f} ms ({r['median_ms'] / best['median_ms']:.2f}x)"
                           for r in timed if r["peer"])
        lines.append(f"{problem} {label} {library}: fastest {best['mode']}: {best['formulation']} "
                     f"{best['median_ms']:.4f} ms; {beside}")
    return lines


def versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "numpy": np.__version__}
    for name in ("jax", "jaxlib", "torch"):
        module = sys.modules.get(name)
        if module is not None:
            found[name] = getattr(module, "__version__", "?")
    return found


def write_json(path: str | None, rows: list[dict], loads: list[dict], device: str) -> None:
    if not path:
        return
    report = {"device": device, "cpus": len(os.sched_getaffinity(0)), "machine": platform.machine(),
              "processor": platform.processor(), "torch_threads": _torch_threads(), "jax_devices": _jax_devices(),
              "versions": versions(), "passed": all(passed(r) for r in rows), "loads": loads, "rows": rows}
    Path(path).write_text(json.dumps(report, indent=1))


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def _jax_devices() -> list[str] | None:
    jax = sys.modules.get("jax")
    return [str(d) for d in jax.devices()] if jax is not None else None


def load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


# -- main --------------------------------------------------------------------------------------------------

def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--only", default=",".join(PROBLEMS), help=f"comma-separated, of {', '.join(PROBLEMS)}")
    parser.add_argument("--sizes", choices=("quick", "full"), default="quick")
    parser.add_argument("--repeats", type=int, default=15, help="rounds of samples per size (at most)")
    parser.add_argument("--max-seconds", type=float, default=20.0, help="of rounds per size (3 rounds at least)")
    parser.add_argument("--torch-modes", default="eager,default",
                        help="eager and torch.compile modes: default, max-autotune-no-cudagraphs, ...")
    parser.add_argument("--compile-all", action="store_true", help="the torch alternatives in every mode too")
    parser.add_argument("--python-loop-limit", type=int, default=0,
                        help="JAX's loops unrolled in Python under jit: timed up to this many steps (0: none)")
    parser.add_argument("--no-isozyme", action="store_true", help="no check of the peers against isozyme")
    parser.add_argument("--json", metavar="FILE")
    options = parser.parse_args(argv)
    unknown = set(options.only.split(",")) - set(PROBLEMS)
    if unknown:
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}; the benchmarks are {', '.join(PROBLEMS)}")
    if options.repeats < 1:
        parser.error("--repeats must be at least 1")
    return options


def setup(device: str) -> str:
    """Import JAX and PyTorch for `device`; torch's device name ("cpu" or "cuda")."""
    if device == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import torch

    import isozyme.benchmark_suite.peer_jax  # noqa: F401 (turns on float64 for the process)
    import isozyme.benchmark_suite.peer_torch  # noqa: F401 (sets torch's thread count)

    for name in ("cache_size_limit", "recompile_limit"):  # a compiled unit sees every size of a benchmark
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    if device == "gpu":
        if jax.default_backend() != "gpu":
            raise SystemExit(f"--device gpu: JAX's default backend is {jax.default_backend()!r}, not a GPU")
        if not torch.cuda.is_available():
            raise SystemExit("--device gpu: torch sees no CUDA device")
        return "cuda"
    return "cpu"


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    torch_device = setup(options.device)
    device = f"{options.device} (jax {_jax_devices()}, torch {torch_device})"
    print(f"device: {device}; cpus {len(os.sched_getaffinity(0))}; torch threads {_torch_threads()}; "
          f"load {load()}", flush=True)
    rows: list[dict] = []
    loads: list[dict] = []
    for problem in [p for p in options.only.split(",") if p]:
        before = load()
        formulations = formulations_of(problem, options, torch_device)
        for size in sizes_of(problem, options.sizes):
            print(f"{problem} {size_label(problem, size)}  (load {load()})", flush=True)
            size_rows, why = measure_size(problem, size, formulations, options)
            if why:
                print(f"  isozyme's gradient not compared: {why}")
            print_rows(size_rows)
            rows += size_rows
        loads.append({"problem": problem, "before": before, "after": load()})
        write_json(options.json, rows, loads, device)
    print("fastest, per size and library (checks passed):")
    for line in fastest(rows):
        print(f"  {line}")
    failed = [r for r in rows if not passed(r)]
    for r in failed:
        print(f"peer_formulations.py: MISMATCH: {r['problem']} {r['label']} {r['library']} {r['mode']}: "
              f"{r['formulation']}" + (f" ({r['error']})" if r["error"] else ""), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
