"""Tape bytes of reverse mode against the naive "tape every load" bound (issue 7's closing figure).

For the heat stencil (examples/heat.py) and the Euler integrator (examples/euler.py), with opt="post" and
"pre", this runs `diffe_<f>` on the reference interpreter and measures the bytes its tapes hold at the end
(indexed tapes: their allocated size; stack tapes: their final capacity, and the elements pushed), and the
naive bound: every `load` the primal (the same prepared program, before AD) executes, taped at its element
size, as a tool that records every read of memory would. Both are counted by instrumenting the
interpreter's handlers for `alloc`, `grow` and `load`, so the figures are measured, not derived from the
formulas of `iz.show_cache`.

The gradient the measured run computed (its return value, the shadows and the adjoints) is checked against
`iz.autodiff` of the same kernel and `opt` on the `llvm` backend, within 1e-10 relative in the max-norm
(`isozyme/benchmark_checks.py`): the same derivative, compiled. A run that taped the wrong values would give a
wrong gradient; it is marked MISMATCH in the table, and the script exits with status 1 after printing it.

    python benchmarks/tape_bytes.py [--n 64] [--steps 50]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import euler  # noqa: E402
import heat  # noqa: E402

import isozyme as iz  # noqa: E402
from isozyme.benchmark_checks import Check, exit_status  # noqa: E402
from isozyme.runtime.compiled_derivatives import differentiate, parse_activity  # noqa: E402
from isozyme.ssa import interpreter  # noqa: E402
from isozyme.ssa.ir import Instruction  # noqa: E402
from isozyme.ssa.ops import Op  # noqa: E402

TOLERANCE = 1e-10
REASON = "the same derivative on the interpreter and compiled by LLVM, sums possibly in another order"


class Meter:
    """Counts loads executed and records the arrays of chosen allocs, through the interpreter's handlers."""

    def __init__(self) -> None:
        self.loads_bytes = 0
        self.arrays: dict[Instruction, np.ndarray] = {}
        self.watched: set[Instruction] = set()

    def __enter__(self) -> Meter:
        handlers = interpreter._HANDLERS
        self.saved = {op: handlers[op] for op in (Op.LOAD, Op.ALLOC, Op.GROW)}
        load, alloc, grow = self.saved[Op.LOAD], self.saved[Op.ALLOC], self.saved[Op.GROW]

        def on_load(interp: object, inst: Instruction, env: dict) -> object:
            value = load(interp, inst, env)
            self.loads_bytes += inst.type.numpy_dtype.itemsize  # type: ignore[attr-defined]
            return value

        def on_alloc(interp: object, inst: Instruction, env: dict) -> object:
            array = alloc(interp, inst, env)
            if inst in self.watched:
                self.arrays[inst] = array
            return array

        def on_grow(interp: object, inst: Instruction, env: dict) -> None:
            grow(interp, inst, env)
            if inst.operands[0] in self.watched:
                self.arrays[inst.operands[0]] = env[inst.operands[0]]  # type: ignore[index]

        handlers.update({Op.LOAD: on_load, Op.ALLOC: on_alloc, Op.GROW: on_grow})
        return self

    def __exit__(self, *exc: object) -> None:
        interpreter._HANDLERS.update(self.saved)


def _run(function: object, args: tuple) -> object:
    return interpreter.run_function(function, *args)  # type: ignore[arg-type]


def measure(kernel: iz.Kernel, activity: tuple[str, ...], opt: str, make_args: Callable[[], tuple]) -> dict:
    activities = parse_activity(kernel, activity)
    gradient = differentiate(kernel, activities, opt)
    # the naive bound: the loads of the primal as differentiated (inlined, prepared), run as the kernel
    primal_loads = _primal_load_bytes(kernel, opt, make_args())
    meter = Meter()
    meter.watched = {tape.array for tape in gradient.tapes}
    args = make_args()
    call, shadows, adjoints = [], [], []
    for value, kind in zip(args, activity):
        call.append(value)
        if kind == "dup":
            shadows.append(np.zeros_like(value))
            call.append(shadows[-1])
        elif kind == "active":
            adjoints.append(np.zeros(1))
            call.append(adjoints[-1])
    if gradient.function.return_type.is_float:
        call.append(1.0)
    with meter:
        value = _run(gradient.function, tuple(call))
    taped = sum(array.nbytes for array in meter.arrays.values())
    check = Check(f"{kernel.definition.name} opt={opt}: the measured run's gradient against llvm's", TOLERANCE,
                  REASON)
    check.compare({"value": value, "shadows": shadows, "adjoints": [a[0] for a in adjoints]},
                  compiled_gradient(kernel, activity, opt, make_args()))
    return {"tapes": len(gradient.tapes), "tape_bytes": taped, "naive_bytes": primal_loads, "check": check,
            "listing": [f"{tape.value.name or tape.value.op} x {tape.size_text}" for tape in gradient.tapes]}


def compiled_gradient(kernel: iz.Kernel, activity: tuple[str, ...], opt: str, args: tuple) -> dict:
    """The reference: `iz.autodiff` on `llvm`, keyed as `measure` keys the interpreter's gradient."""
    annotated: list[object] = []
    shadows = []
    for value, kind in zip(args, activity):
        if kind == "dup":
            shadows.append(np.zeros_like(value))
            annotated.append(iz.Duplicated(value, shadows[-1]))
        else:
            annotated.append(iz.Active(value) if kind == "active" else iz.Const(value))
    value, adjoints = iz.autodiff(kernel, *annotated, opt=opt, backend="llvm")
    return {"value": value, "shadows": shadows, "adjoints": list(adjoints)}


def _primal_load_bytes(kernel: iz.Kernel, opt: str, args: tuple) -> int:
    module, function = kernel.lower()
    if opt == "post":
        kernel.run_pipeline(module, "O2")
    meter = Meter()
    with meter:
        _run(module[function.name], args)
    return meter.loads_bytes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=64, help="grid points (heat) and masses (Euler)")
    parser.add_argument("--steps", type=int, default=50)
    options = parser.parse_args(argv)
    n, steps = options.n, options.steps
    rng = np.random.default_rng(0)
    u0 = rng.uniform(-1, 1, n)
    y0 = rng.uniform(-0.5, 0.5, 2 * n)
    problems = [
        (f"heat n={n} steps={steps}", heat.heat, ("dup", "active", "const"), lambda: (u0.copy(), 0.4, steps)),
        (f"euler m={n} steps={steps}", euler.euler, ("dup", "active", "const", "active", "active"),
         lambda: (y0.copy(), 0.01, steps, 1.0, 0.1)),
    ]
    print(f"{'problem':<24} {'opt':<5} {'tapes':>5} {'tape bytes':>12} {'naive bytes':>12} {'ratio':>7}  "
          f"gradient check")
    checks = []
    for name, kernel, activity, make_args in problems:
        for opt in ("post", "pre"):
            figures = measure(kernel, activity, opt, make_args)
            checks.append(figures["check"])
            ratio = figures["tape_bytes"] / figures["naive_bytes"]
            print(f"{name:<24} {opt:<5} {figures['tapes']:>5} {figures['tape_bytes']:>12,} "
                  f"{figures['naive_bytes']:>12,} {ratio:>7.3f}  {figures['check'].mark} "
                  f"({figures['check'].error:.1e})")
            for line in figures["listing"]:
                print(f"{'':<31}{line}")
    return exit_status(checks, "tape_bytes.py")


if __name__ == "__main__":
    raise SystemExit(main())
