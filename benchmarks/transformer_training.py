"""Training a transformer end to end: isozyme against PyTorch eager and `torch.compile`, one run (issue 26,
part 4).

    python benchmarks/transformer_training.py [--depths 1,2,3,4] [--steps 100] [--threads N]
        [--backend llvm|opencl] [--variants strict,reassoc,contract,afn,checkpoint,pairs] [--rounds 5]
        [--interleave] [--quick] [--json FILE]

The model of `examples/transformer.py` (d_model 64, 4 heads, sequence 64, batch 16, vocabulary 128, MLP
width 256, the checkpointed loss on 4 chunks of 4 sequences; `--quick`: a tiny one, 2 layers at most, 5
steps), f64, trained with Adam (lr 1e-3) for `--steps` steps at each depth, every variant from the same
initial weights on the same batches. The steps are run in `--rounds` rounds: in each, every variant runs
its next `steps / rounds` steps, one variant's after the other's (each thread pool, isozyme's and PyTorch's
OpenMP, then has the cores to itself: pools that take turns step by step wait on each other's spinning
threads; `--interleave` takes turns anyway, a round a step). On a shared machine the speed changes in
phases that last seconds (one process at 4 layers: 20 steps at 60 ms, 15 at 43, 10 at 75): with one
round, one variant could run all its steps in a slow phase and another in a fast one; rounds spread every
variant's steps over the same phases. The variants:

- `isozyme` (`--variants strict`): `transformer_loss` as written (IEEE-strict), its gradient by
  `iz.autodiff` and the update by the `adam_step` kernel, `prange` loops on `--threads` threads;
- `isozyme reassoc` (`reassoc`): the same kernel built with `fastmath=("reassoc",)`;
- `isozyme reassoc+contract` (`contract`): with `fastmath=("reassoc", "contract")`, which also lets LLVM fuse
  a product and a sum into one FMA (as XLA and PyTorch's CPU kernels do);
- `isozyme reassoc+contract+afn` (`afn`): with `fastmath=("reassoc", "contract", "afn")`, which also lets
  the softmax's `exp` and the GELU's `erf` (and their derivatives') loops vectorize, through glibc's vector
  math functions (`codegen/llvm_vector_math.py`; accurate to 4 ulp, as PyTorch's own vectorized `exp`
  and `erf`, from SLEEF, are to 1);
- `isozyme checkpointed reassoc+contract+afn` (`checkpoint`): `transformer_loss_checkpointed`, each layer
  of each chunk of the batch two split-mode calls whose reverse runs the block's forward again, and each
  chunk's loss one (the example's docstring, "Checkpointing"), with the flags of `afn`;
- `isozyme pairs` (`pairs`, `--backend opencl` only): `benchmarks/tuned/transformer_gpu_kernels.py`'s
  `transformer_loss_pairs`, the same model written for a GPU (every stage a parallel loop over the
  (feature, token) pairs of its output, the parameters one flat vector), trained by its `GpuTrainer` with
  every array on the device (the batch copied in, untimed);
- `torch eager`: `examples/transformer.py`'s `torch_loss`, `backward`, `torch.optim.Adam`, on
  `--threads` threads (`torch.set_num_threads`);
- `torch.compile`: the same with `torch.compile(torch_loss)` (the backward compiled with it by AOTAutograd;
  the optimizer's step is PyTorch's, as in the eager variant).

With `--backend opencl` isozyme runs on `ISOZYME_OPENCL_DEVICE` (its arrays copied in and out on every
call: numpy arguments) and PyTorch on CUDA when it has a GPU (else on the CPU); `reassoc`, `contract`, `afn`
and `checkpoint` are LLVM options and are left out there, and `pairs` runs only there.

Time per step: the median over the steps after the first (which compiles), `perf_counter` around the whole
step (on CUDA, after a synchronize). Checks, outside the timed region: every variant's loss curve (all the
steps) against torch eager's, max-norm relative, within 1e-9 (the same math rounded in another order);
a mismatch, or a variant that fails, marks the row MISMATCH, and the script exits with status 1 after
printing and writing everything. Memory: the peak of the gradient's local memory by `iz.show_memory` at
the row's sizes, for `transformer_loss` and for `transformer_loss_checkpointed` (the arena, a copy per
thread of the arrays allocated in a `prange` loop, which a task allocates once, the growable tapes at their
final size, and the largest peak among the calls the gradient makes: the checkpointed blocks' forward,
their reverses with the restored slab and the `diffe_` of each block, one chunk's), each against the naive
allocation of `transformer_loss`'s gradient (every local array and tape as AD emitted it, its own block),
and whether that is at most 30% (the issue's goal); the plans of the CPU's code, so not with `--backend
opencl`. The report (`--json`, the results schema of `isozyme/benchmark_suite/results.py`: a row per depth
and variant, `isozyme pairs` "tuned", PyTorch's "peer", the rest "natural"; the memory plans under "extra")
is written again after each depth.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "examples"), str(ROOT)]

import isozyme as iz  # noqa: E402
from isozyme.benchmark_checks import MISMATCH, relative_error  # noqa: E402
from isozyme.benchmark_suite import results  # noqa: E402

TOLERANCE = 1e-9
MEMORY_GOAL = 0.30
FULL = dict(vocab=128, d_model=64, heads=4, hidden=256, seq=64, batch=16, chunks=4)
QUICK = dict(vocab=16, d_model=16, heads=2, hidden=32, seq=8, batch=2, chunks=2)


VARIANTS = ("strict", "reassoc", "contract", "afn", "checkpoint", "pairs")
"""isozyme's variants, by their `--variants` names (module docstring)."""


def loss_kernels(variants: list[str]) -> dict[str, iz.Kernel]:
    """isozyme's variants by name: the example's kernel, and the same built with fast-math flags."""
    from transformer import transformer_loss, transformer_loss_checkpointed

    contract, fast = ("reassoc", "contract"), ("reassoc", "contract", "afn")
    kernels = {"strict": ("isozyme", transformer_loss),
               "reassoc": ("isozyme reassoc", iz.kernel(fastmath=("reassoc",))(transformer_loss.py_func)),
               "contract": ("isozyme reassoc+contract", iz.kernel(fastmath=contract)(transformer_loss.py_func)),
               "afn": ("isozyme reassoc+contract+afn", iz.kernel(fastmath=fast)(transformer_loss.py_func)),
               "checkpoint": ("isozyme checkpointed reassoc+contract+afn",
                              iz.kernel(fastmath=fast)(transformer_loss_checkpointed.py_func))}
    if "pairs" in variants:
        from tuned.transformer_gpu_kernels import transformer_loss_pairs
        kernels["pairs"] = ("isozyme pairs", transformer_loss_pairs)
    return dict(kernels[variant] for variant in variants)


class Runner:
    """One variant's training: `step(k)` runs step k (timed) and keeps its loss."""

    def __init__(self, name: str, step, synchronize=None) -> None:
        self.name, self._step, self._synchronize = name, step, synchronize
        self.losses: list[float] = []
        self.seconds: list[float] = []
        self.error: str | None = None

    def step(self, k: int) -> None:
        if self.error is not None:
            return
        try:
            start = time.perf_counter()
            loss = self._step(k)
            if self._synchronize is not None:
                self._synchronize()
            self.seconds.append(time.perf_counter() - start)
            self.losses.append(float(loss))
        except Exception as error:  # a variant that fails is reported as a failed check, not a crash
            self.error = f"{type(error).__name__}: {error}"


def runners(config, batches, kernels: dict[str, iz.Kernel], backend: str) -> list[Runner]:
    import torch
    from transformer import Adam, TorchTrainer, Trainer, init_parameters

    params = init_parameters(config, seed=0)
    device = "cuda" if backend == "opencl" and torch.cuda.is_available() else "cpu"
    synchronize = torch.cuda.synchronize if device == "cuda" else None
    made: list[Runner] = []
    for name, kernel in kernels.items():
        if name == "isozyme pairs":
            from transformer import Batch
            from tuned.transformer_gpu_kernels import GpuTrainer

            gpu = GpuTrainer(params.copy(), Adam())
            moved = [Batch(iz.to_device(batch.tokens), iz.to_device(batch.targets)) for batch in batches]
            made.append(Runner(name, lambda k, gpu=gpu, moved=moved: gpu.step(moved[k])))
            continue
        trainer = Trainer(params.copy(), Adam(), backend=backend, loss_kernel=kernel)
        made.append(Runner(name, lambda k, trainer=trainer: trainer.step(batches[k])))
    for name, compile in (("torch eager", False), ("torch.compile", True)):
        reference = TorchTrainer(params.copy(), Adam(), compile=compile, device=device)
        on_device = [reference.batch(batch) for batch in batches]
        made.append(Runner(name, lambda k, reference=reference, on_device=on_device: reference.step(*on_device[k]),
                           synchronize))
    return made


def memory(config, kernel: iz.Kernel, naive: int | None = None) -> dict[str, object]:
    """The peak of the gradient's local memory at the config's sizes (`iz.show_memory`: the arena, a copy of
    the per-work-item arrays per thread, growable tapes, and the largest peak of a call) against the naive
    allocation (every local array and tape of the gradient as AD emitted it, its own block; `naive`: that
    of another kernel of the same model, for the checkpointed one)."""
    table = config.gradient_memory(kernel)
    header = [line for line in table.splitlines() if line.startswith(";")]
    emitted = _figure(r"as AD emitted it .*requested (\d+) B", header)
    peak = _figure(r"^; peak with \d+ thread\(s\): (\d+) B:", header)  # ": at least" when a size is unknown
    naive = emitted if naive is None else naive
    ratio = peak / naive if naive else 0.0
    return {"emitted_requested_bytes": emitted, "naive_bytes": naive, "peak_bytes": peak,
            "threads": iz.get_num_threads(), "peak_over_naive": ratio, "goal": MEMORY_GOAL,
            "meets_goal": ratio <= MEMORY_GOAL, "header": header}


def _figure(pattern: str, header: list[str], missing: int | None = None) -> int:
    """The number `pattern` finds in the header lines of `iz.show_memory`'s table."""
    for line in header:
        found = re.search(pattern, line)
        if found:
            return int(found.group(1))
    if missing is None:
        raise RuntimeError(f"iz.show_memory's header changed: no {pattern!r} in {header}")
    return missing


def rounds_of(steps: int, rounds: int) -> list[range]:
    """The steps 0..steps-1 cut into `rounds` consecutive ranges (at most `steps` of them, none empty),
    their lengths differing by one at most."""
    rounds = max(1, min(rounds, steps))
    cuts = [steps * r // rounds for r in range(rounds + 1)]
    return [range(start, stop) for start, stop in zip(cuts, cuts[1:])]


def measure(layers: int, steps: int, sizes: dict[str, int], kernels: dict[str, iz.Kernel], backend: str,
            rounds: int) -> dict:
    from transformer import Config, make_batches

    config = Config(layers=layers, **sizes)
    batches = make_batches(config, steps, seed=1)
    made = runners(config, batches, kernels, backend)
    for part in rounds_of(steps, rounds):  # every variant's steps in the same order, the variants in turn
        for runner in made:
            for k in part:
                runner.step(k)
    reference = next(r for r in made if r.name == "torch eager")
    variants: dict[str, dict[str, object]] = {}
    for runner in made:
        error = relative_error(runner.losses, reference.losses) if runner.error is None and \
            reference.error is None else float("inf")
        timed = runner.seconds[1:] or runner.seconds
        variants[runner.name] = {
            "seconds_median": statistics.median(timed) if timed else None, "seconds_min": min(timed, default=None),
            "first_step_seconds": runner.seconds[0] if runner.seconds else None, "losses": runner.losses,
            "loss_curve_relative_error": error, "error": runner.error,
            "check": {"passed": bool(error <= TOLERANCE), "error": error if math.isfinite(error) else None,
                      "tolerance": TOLERANCE, "calls": len(runner.losses),
                      "what": "the loss curve against torch eager's", "reason": "the same math rounded otherwise"}}
    compiled = variants["torch.compile"]["seconds_median"]
    for entry in variants.values():
        if compiled and entry["seconds_median"]:
            entry["speedup_over_torch_compile"] = compiled / entry["seconds_median"]
    row = {"layers": layers, "config": vars(config), "steps": steps, "rounds": len(rounds_of(steps, rounds)),
           "variants": variants,
           "check": {"passed": all(v["check"]["passed"] for v in variants.values())}}
    if backend == "llvm":  # the memory plans of the CPU's code
        from transformer import transformer_loss, transformer_loss_checkpointed

        row["memory"] = memory(config, transformer_loss)
        row["memory_checkpointed"] = memory(config, transformer_loss_checkpointed, row["memory"]["naive_bytes"])
    return row


def result_rows(row: dict) -> list[dict]:
    """A depth's rows of the results schema (module docstring)."""
    config = row["config"]
    size = f"layers={row['layers']} d_model={config['d_model']} seq={config['seq']} batch={config['batch']}"
    made = []
    for name, entry in row["variants"].items():
        kind = "peer" if name.startswith("torch") else "tuned" if name == "isozyme pairs" else "natural"
        median, fastest = (None if entry[key] is None else entry[key] * 1e3 for key in ("seconds_median",
                                                                                       "seconds_min"))
        made.append(results.row("transformer training step", size, name, kind, median, entry["check"],
                                min_ms=fastest, calls=max(len(entry["losses"]) - 1, 0),
                                first_call_s=entry["first_step_seconds"],
                                details={"rounds": row["rounds"], "losses": entry["losses"], "error": entry["error"]}))
    return made


def print_row(row: dict) -> None:
    print(f"layers={row['layers']}" + ("" if row["check"]["passed"] else f"  {MISMATCH}"))
    for name, entry in row["variants"].items():
        if entry["seconds_median"] is None:
            print(f"  {name:<16} failed: {entry['error']}")
            continue
        speedup = entry.get("speedup_over_torch_compile")
        print(f"  {name:<16} {entry['seconds_median'] * 1e3:9.2f} ms/step (min {entry['seconds_min'] * 1e3:8.2f})"
              + (f"  {speedup:5.2f}x torch.compile" if speedup else "")
              + f"  loss curve vs eager {entry['loss_curve_relative_error']:.1e}"
              + ("" if entry["check"]["passed"] else f"  {MISMATCH}")
              + (f"  {entry['error']}" if entry["error"] else ""))
    for key, what in (("memory", "every layer's activations kept"), ("memory_checkpointed", "checkpointed")):
        if key not in row:
            continue
        m = row[key]
        print(f"  gradient's peak memory, {what}: {m['peak_bytes'] / 2**20:.2f} MiB of the naive "
              f"{m['naive_bytes'] / 2**20:.2f} MiB ({100 * m['peak_over_naive']:.1f}%, goal <= "
              f"{100 * MEMORY_GOAL:.0f}%)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="1,2,3,4", help="comma-separated layer counts")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--backend", choices=("llvm", "opencl"), default="llvm")
    parser.add_argument("--variants", default="strict,reassoc,contract,afn,checkpoint,pairs",
                        help="isozyme's: strict, reassoc, contract, afn, checkpoint (llvm only), pairs (opencl only)")
    parser.add_argument("--quick", action="store_true", help="a tiny model, at most 2 layers and 5 steps")
    parser.add_argument("--rounds", type=int, default=5, help="the variants take turns this many times")
    parser.add_argument("--interleave", action="store_true", help="variants take turns step by step")
    parser.add_argument("--json", metavar="FILE")
    options = parser.parse_args(argv)
    import torch

    depths = [int(depth) for depth in options.depths.split(",")]
    variants = [v for v in options.variants.split(",")  # LLVM's options on llvm, the GPU's kernel on OpenCL
                if v and (v in ("strict", "pairs") if options.backend == "opencl" else v != "pairs")]
    if any(v not in VARIANTS for v in variants) or not variants:
        parser.error(f"--variants must name some of {', '.join(VARIANTS)}, got {options.variants!r}")
    steps, sizes = (min(options.steps, 5), QUICK) if options.quick else (options.steps, FULL)
    if options.quick:
        depths = [depth for depth in depths if depth <= 2] or [1]
    if steps < 2:
        parser.error("--steps must be at least 2 (the first step compiles and is not timed)")
    if options.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {options.rounds}")
    iz.set_num_threads(options.threads)
    torch.set_num_threads(options.threads)
    kernels = loss_kernels(variants)
    rows: list[dict] = []
    for layers in depths:
        rows.append(measure(layers, steps, sizes, kernels, options.backend,
                            steps if options.interleave else options.rounds))
        print_row(rows[-1])
        if options.json:  # after each depth: a run cut short keeps the depths it measured
            memory_plans = {str(row["layers"]): {key: row[key] for key in ("memory", "memory_checkpointed")
                                                 if key in row} for row in rows}
            results.write(options.json, "transformer_training" + ("_opencl" if options.backend == "opencl" else ""),
                          [entry for row in rows for entry in result_rows(row)],
                          {"depths": depths, "steps": steps, "rounds": options.rounds, "interleave": options.interleave,
                           "threads": options.threads, "backend": options.backend, "variants": variants,
                           "quick": options.quick, "config": sizes,
                           "torch_device": "cuda" if options.backend == "opencl" and torch.cuda.is_available()
                           else "cpu"},
                          {"memory": memory_plans})
    return 0 if all(row["check"]["passed"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
