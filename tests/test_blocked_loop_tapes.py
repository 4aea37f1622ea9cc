"""Tapes of loops that work in blocks of four (`for block in range(n // 4)`) and of their remainder loops
(`for last in range(n % 4)`): their trip counts are divisions by a constant, which cannot trap, so the
tapes are sized when the gradient starts and placed in the arena, as for any loop of a known trip count.
Before, `n // 4` counted as an op that may trap (a tape of the block loop was allocated apart on every call,
"dynamic") and `n % 4`, which instcombine makes `and n, 3`, as unknown (a tape of the remainder loop grew as
it ran): the training step of `examples/transformer.py` with its attention written by blocks of four took
19.3 ms, 14.4 with the remainder loop's tapes sized and 8.3 with both (1 layer, 2 threads, each measured
in one process beside the example as committed, 9.2, 8.6 and 8.8 ms; the blocked attention is an experiment,
not the example)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64


@iz.kernel
def blocked_squares(out: Array[f64], x: Array[f64]):
    # out[k] = (sum of the squares of block k of x)^2 for the n // 4 blocks of four, then the same for each of
    # the last n % 4 elements alone: the reverse pass needs each sum (a loop's result, taped)
    n = x.shape[0]
    for block in range(n // 4):
        i = 4 * block
        acc = 0.0
        for j in range(4):
            acc += x[i + j] * x[i + j]
        out[block] = acc * acc
    for last in range(n % 4):
        i = n - n % 4 + last
        acc = 0.0
        for j in range(i, i + 1):
            acc += x[j] * x[j]
        out[n // 4 + last] = acc * acc


def reference(x: np.ndarray) -> np.ndarray:
    n = len(x)
    blocks = [np.sum(x[4 * k:4 * k + 4] ** 2) ** 2 for k in range(n // 4)]
    return np.array(blocks + [x[i] ** 4 for i in range(n - n % 4, n)])


def tape_lines(report: str) -> list[str]:
    return [line for line in report.splitlines()[1:] if line.strip()]


def test_both_loops_tape_their_sums_with_sizes_known_at_the_start() -> None:
    lines = tape_lines(iz.show_cache(blocked_squares, activity=("dup", "dup")))
    assert len(lines) == 2, lines
    assert not [line for line in lines if "grows" in line], lines


@pytest.mark.parametrize("n", [3, 8, 11])
def test_the_tapes_are_planned_in_the_arena(n: int) -> None:
    plan = iz.show_memory(blocked_squares, activity=("dup", "dup"), out=(n // 4 + n % 4,), x=(n,))
    tapes = [line.split() for line in plan.splitlines() if line.startswith("%tape.")]
    assert len(tapes) == 2, plan
    assert [row[-1] for row in tapes] == ["planned", "planned"], plan
    assert not re.search(r"\b(dynamic|growable)\b", plan.splitlines()[0]), plan


@pytest.mark.parametrize("n", [0, 1, 4, 7, 9])
def test_the_gradient_matches_finite_differences_and_the_primal_numpy(n: int) -> None:
    x = np.random.default_rng(n).standard_normal(n)
    out = np.zeros(n // 4 + n % 4)
    blocked_squares(out, x)
    np.testing.assert_allclose(out, reference(x), rtol=1e-13)
    if n:
        iz.testing.gradcheck(blocked_squares, np.zeros_like(out), x, argnums=1)
