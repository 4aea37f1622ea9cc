"""Where a transformer layer's training time goes: each part's gradient, isozyme against PyTorch eager and
`torch.compile`, in one run on the CPU (issue 26, part 4).

    python benchmarks/transformer_parts.py [--repeats 40] [--threads N] [--quick] [--json FILE]

The parts are `examples/transformer.py`'s kernels at the sizes of `transformer_training.py` (d_model 64,
4 heads, sequence 64, batch 16, MLP width 256, f64; `--quick`: tiny ones): the four dense layers of a
layer (`qkv` 64 -> 192, `proj` 64 -> 64, `fc1` 64 -> 256, `fc2` 256 -> 64), `causal_attention`,
`layer_norm` and `gelu`. Each part's loss is `sum(out * g)` for a fixed random `g`; a call is the loss and
its gradient with respect to every input of the part (activations and weights), as in a training step:
isozyme's `iz.autodiff` of the part's kernel (built with `fastmath=("reassoc", "contract", "afn")`, the
training benchmark's fastest variant), PyTorch's forward and `backward` of the same math written as in
`examples/transformer.py`'s `torch_loss`, eager and under `torch.compile`. Both sides run on `--threads`
threads. Time: the median over `--repeats` calls after two untimed ones.

Check, outside the timed region: isozyme's gradients against torch eager's, max-norm relative, within 1e-9
(the same math rounded in another order), for its first call and for the mean of its timed calls (the
adjoints zeroed before them: each call adds its gradient); a mismatch marks the row MISMATCH and the script
exits with status 1 after printing and writing everything. The JSON also records torch.compile's gradient
against torch eager's (`torch_compile_vs_eager`), as data: it is PyTorch's, not a check of isozyme.

The layer's row adds the parts as a layer uses them (`layer_norm` twice): what a layer's training costs on
each side, apart from the residual adds and what runs between the parts. The loss `sum(out * g)` and its
reverse are in every call on both sides.

`--json` writes the results schema (`isozyme/benchmark_suite/results.py`): per part, isozyme's row
("natural": the example's kernels with documented fast-math flags) and the two "peer" rows, torch eager's
the reference (unchecked) and torch.compile's recorded as data (unchecked, its difference in "details").
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "examples"), str(ROOT)]

import numpy as np  # noqa: E402
from transformer import LN_EPS, causal_attention, dense, gelu, layer_norm  # noqa: E402

import isozyme as iz  # noqa: E402
from isozyme import Array, f64, i64  # noqa: E402
from isozyme.benchmark_checks import MISMATCH, Check, checks_json, relative_error  # noqa: E402
from isozyme.benchmark_suite import results  # noqa: E402

TOLERANCE = 1e-9
FAST = ("reassoc", "contract", "afn")
FULL = dict(batch=16, seq=64, d_model=64, heads=4, hidden=256)
QUICK = dict(batch=2, seq=8, d_model=16, heads=2, hidden=32)
LAYER_USES = {"qkv": 1, "proj": 1, "fc1": 1, "fc2": 1, "attention": 1, "layer_norm": 2, "gelu": 1}
"""How many times a transformer layer runs each part."""


@iz.kernel
def weighted_sum(out: Array[f64, 4], g: Array[f64, 4]) -> f64:
    # sum(out[0] * g[0]), parallel over the sequences
    total = 0.0
    for b in iz.prange(out.shape[1]):
        row = 0.0
        for s in range(out.shape[2]):
            for c in range(out.shape[3]):
                row += out[0, b, s, c] * g[0, b, s, c]
        total += row
    return total


@iz.kernel(fastmath=FAST)
def dense_part(out: Array[f64, 4], x: Array[f64, 4], W: Array[f64, 3], bias: Array[f64, 2],
               g: Array[f64, 4]) -> f64:
    dense(out, 0, x, 0, W, bias, 0, x, 0, False)
    return weighted_sum(out, g)


@iz.kernel(fastmath=FAST)
def attention_part(out: Array[f64, 4], probs: Array[f64, 4], scores: Array[f64, 4], qkv: Array[f64, 4],
                   heads: i64, head_dim: i64, g: Array[f64, 4]) -> f64:
    causal_attention(out, probs, scores, qkv, 0, heads, head_dim)
    return weighted_sum(out, g)


@iz.kernel(fastmath=FAST)
def layer_norm_part(out: Array[f64, 4], x: Array[f64, 4], weight: Array[f64, 2], bias: Array[f64, 2],
                    g: Array[f64, 4]) -> f64:
    layer_norm(out, 0, x, 0, weight, bias, 0)
    return weighted_sum(out, g)


@iz.kernel(fastmath=FAST)
def gelu_part(out: Array[f64, 4], x: Array[f64, 4], g: Array[f64, 4]) -> f64:
    gelu(out, x, 0)
    return weighted_sum(out, g)


class Part:
    """One part: isozyme's call and PyTorch's on the same inputs. `arguments` are the kernel's (every array
    but the last, `g`, with an adjoint: the outputs too, which the kernel writes and then reads); `inputs`
    name the positions of the differentiated inputs, as `torch_loss` names its parameters."""

    def __init__(self, name: str, kernel: iz.Kernel, arguments: list, inputs: dict[str, int], torch_loss) -> None:
        import torch

        self.name, self.kernel, self.inputs, self.torch_loss = name, kernel, inputs, torch_loss
        self.arguments = [iz.Duplicated(a, np.zeros_like(a)) if isinstance(a, np.ndarray) else a
                          for a in arguments[:-1]] + [arguments[-1]]
        self.tensors = {key: torch.tensor(self._unslab(key, self.arguments[position].value), requires_grad=True)
                        for key, position in inputs.items()}
        self.torch_g = torch.tensor(arguments[-1][0])

    @staticmethod
    def _unslab(key: str, array: np.ndarray) -> np.ndarray:
        """Activations are slabs (1, B, S, c) in isozyme's kernels and (B, S, c) tensors in PyTorch."""
        return array[0] if key in ("x", "qkv") else array

    def call(self) -> None:
        """isozyme's call, timed: each call adds its gradient into the adjoints (the outputs' adjoints are
        zero again after it), as a training step's gradient does until the update zeroes it."""
        iz.autodiff(self.kernel, *self.arguments)

    def zero(self) -> None:
        for argument in self.arguments:
            if isinstance(argument, iz.Duplicated):
                argument.shadow[...] = 0.0

    def adjoints(self, calls: int = 1) -> dict[str, np.ndarray]:
        """The inputs' adjoints over `calls`: the gradient of one call, where the adjoints were zeroed before
        `calls` calls."""
        return {key: np.array(self._unslab(key, self.arguments[position].shadow)) / calls
                for key, position in self.inputs.items()}

    def torch(self, loss) -> dict[str, np.ndarray]:
        for tensor in self.tensors.values():
            tensor.grad = None
        (loss(**self.tensors) * self.torch_g).sum().backward()
        return {key: tensor.grad.numpy() for key, tensor in self.tensors.items()}


def parts(sizes: dict[str, int]) -> list[Part]:
    import torch
    import torch.nn.functional as functional

    B, S, d, H, F = (sizes[key] for key in ("batch", "seq", "d_model", "heads", "hidden"))
    rng = np.random.default_rng(0)

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return rng.standard_normal(shape) * scale

    made = []
    for name, (n_in, n_out) in {"qkv": (d, 3 * d), "proj": (d, d), "fc1": (d, F), "fc2": (F, d)}.items():
        arrays = [np.zeros((1, B, S, n_out)), normal(1, B, S, n_in), normal(1, n_out, n_in, scale=n_in ** -0.5),
                  normal(1, n_out), normal(1, B, S, n_out)]
        made.append(Part(name, dense_part, arrays, {"x": 1, "W": 2, "bias": 3},
                         lambda x, W, bias: x @ W[0].T + bias[0]))
    head_dim = d // H
    mask = torch.ones(S, S, dtype=torch.bool).tril()

    def attention(qkv):
        # examples/transformer.py's torch_loss, its attention
        q, k, v = (t.view(B, S, H, head_dim).transpose(1, 2) for t in qkv.split(d, dim=-1))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(head_dim)
        attended = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v
        return attended.transpose(1, 2).reshape(B, S, d)

    arrays = [np.zeros((1, B, S, d)), np.zeros((1, B, H * S, S)), np.zeros((1, B, H * S, S)),
              normal(1, B, S, 3 * d, scale=0.5), H, head_dim, normal(1, B, S, d)]
    made.append(Part("attention", attention_part, arrays, {"qkv": 3}, attention))
    arrays = [np.zeros((1, B, S, d)), normal(1, B, S, d), 1.0 + normal(1, d, scale=0.1), normal(1, d, scale=0.1),
              normal(1, B, S, d)]
    made.append(Part("layer_norm", layer_norm_part, arrays, {"x": 1, "weight": 2, "bias": 3},
                     lambda x, weight, bias: functional.layer_norm(x, (d,), weight[0], bias[0], LN_EPS)))
    arrays = [np.zeros((1, B, S, F)), normal(1, B, S, F), normal(1, B, S, F)]
    made.append(Part("gelu", gelu_part, arrays, {"x": 1}, lambda x: functional.gelu(x)))
    return made


def median_ms(call, repeats: int) -> float:
    call()
    call()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds) * 1e3


def measure(part: Part, repeats: int) -> dict[str, object]:
    """The part's row: the times, and the gradient of isozyme's first call and the mean of its timed calls
    (`median_ms` makes `repeats` + 2) against torch eager's."""
    import torch

    compiled = torch.compile(part.torch_loss)
    expected = part.torch(part.torch_loss)
    part.zero()
    part.call()
    first = relative_error(part.adjoints(), expected)
    part.zero()
    isozyme_ms = median_ms(part.call, repeats)
    check = Check(f"{part.name}: isozyme's gradient (first call, mean of the timed ones) against torch eager's",
                  TOLERANCE, "the same math rounded in another order")
    check.record(first)
    check.record(relative_error(part.adjoints(repeats + 2), expected))
    row = {"part": part.name, "isozyme_ms": isozyme_ms,
           "torch_eager_ms": median_ms(lambda: part.torch(part.torch_loss), repeats),
           "torch_compile_ms": median_ms(lambda: part.torch(compiled), repeats),
           "gradient_vs_torch": check.error, "tolerance": TOLERANCE, "passed": check.passed, "check": check}
    row["torch_compile_vs_eager"] = relative_error(part.torch(compiled), expected)
    return row


def layer_row(rows: list[dict]) -> dict[str, object]:
    total = {key: sum(LAYER_USES[row["part"]] * row[key] for row in rows)
             for key in ("isozyme_ms", "torch_eager_ms", "torch_compile_ms")}
    return {"part": "layer (sum)", **total, "passed": all(row["passed"] for row in rows),
            "check": {row["part"]: row["check"] for row in rows}}


def result_rows(row: dict, size: str, repeats: int) -> list[dict]:
    """The part's (or the layer's sum's) rows of the results schema (module docstring)."""
    problem = f"{row['part']} gradient"
    check = row["check"]
    mine = checks_json(check) if isinstance(check, dict) else check.as_dict()
    compile_details = {"torch_compile_vs_eager": row["torch_compile_vs_eager"]} if "torch_compile_vs_eager" in row \
        else {}
    return [results.row(problem, size, "isozyme", "natural", row["isozyme_ms"], mine, calls=repeats),
            results.row(problem, size, "torch eager", "peer", row["torch_eager_ms"],
                        results.unchecked("the reference isozyme's gradient is checked against"), calls=repeats),
            results.row(problem, size, "torch.compile", "peer", row["torch_compile_ms"],
                        results.unchecked("PyTorch's, recorded as data (details)"), calls=repeats,
                        details=compile_details)]


def print_row(row: dict) -> None:
    ratio = row["torch_compile_ms"] / row["isozyme_ms"]
    check = "" if "gradient_vs_torch" not in row else \
        f"  gradient vs torch {row['gradient_vs_torch']:.1e}" + ("" if row["passed"] else f"  {MISMATCH}")
    print(f"  {row['part']:12s} isozyme {row['isozyme_ms']:7.3f}  torch eager {row['torch_eager_ms']:7.3f}  "
          f"torch.compile {row['torch_compile_ms']:7.3f} ms  {ratio:5.2f}x torch.compile{check}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args(argv)
    import torch

    iz.set_num_threads(options.threads)
    torch.set_num_threads(options.threads)
    torch.set_default_dtype(torch.float64)
    sizes = QUICK if options.quick else FULL
    print(f"parts of a transformer layer, f64, {options.threads} thread(s), {sizes}; ms per call (loss and "
          f"gradient), median of {options.repeats}")
    rows = []
    for part in parts(sizes):
        rows.append(measure(part, options.repeats))
        print_row(rows[-1])
    rows.append(layer_row(rows))
    print_row(rows[-1])
    passed = all(row["passed"] for row in rows)
    if options.json:
        size = " ".join(f"{key}={value}" for key, value in sizes.items())
        results.write(options.json, "transformer_parts",
                      [entry for row in rows for entry in result_rows(row, size, options.repeats)],
                      {"threads": options.threads, "repeats": options.repeats, "quick": options.quick})
    if not passed:
        print(f"{MISMATCH}: a part's gradient differs from torch's by more than {TOLERANCE}", file=sys.stderr)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
