"""`iz.show_memory`'s peak (`optimize/memory_peak.py`): a gradient that calls a helper in split mode holds
its arena, the growable tape of the slabs the helper reads (one per call), and while a call runs the
callee's own memory: the figures against the sizes worked out from the shapes here."""

from __future__ import annotations

import re

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.optimize.memory_layout import ARENA_ALIGNMENT, align_up


@iz.kernel(inline=False)
def step(xs: Array[f64, 2], k: i64, w: Array[f64]) -> None:
    scratch = iz.empty(len(w), f64)
    for i in range(len(w)):
        scratch[i] = iz.sin(xs[k, i] * w[i])
    for i in range(len(w)):
        xs[k + 1, i] = scratch[len(w) - 1 - i] * w[i] + xs[k, i]  # not one element per iteration: an array


@iz.kernel
def stack(x: Array[f64], w: Array[f64], layers: i64) -> f64:
    xs = iz.empty((layers + 1, len(x)), f64)
    for i in range(len(x)):
        xs[0, i] = x[i]
    for k in range(layers):
        step(xs, k, w)
    e = 0.0
    for i in range(len(x)):
        e += xs[layers, i] * xs[layers, i]
    return e


def frame_lines(text: str) -> dict[str, tuple[int, int]]:
    """Each frame's (own, peak) bytes by function name."""
    found = re.findall(r"@([\w.]+): own (\d+) B .*, peak (\d+) B", text)
    return {name: (int(own), int(peak)) for name, own, peak in found}


def test_the_peak_adds_the_tape_of_slabs_and_the_largest_call() -> None:
    n, layers = 100, 7
    text = iz.show_memory(stack, activity=("dup", "dup", "const"), x=n, w=n, layers=layers)
    assert f"growable %tape.xs: {layers * n * 8} B at the end of the run" in text, text  # a slab of n per call
    frames = frame_lines(text)
    entry = frames.pop("diffe_stack")
    assert set(frames) >= {"step", "reverse_step.0s", "diffe_step"}, text
    assert frames["step"][0] == align_up(8 * n, ARENA_ALIGNMENT)  # its scratch array
    # the restored copy of xs, then diffe_step's own frame
    assert frames["reverse_step.0s"][1] == frames["reverse_step.0s"][0] + frames["diffe_step"][1]
    assert frames["reverse_step.0s"][0] >= 8 * n * (layers + 1)
    assert entry[1] == entry[0] + max(frames["step"][1], frames["reverse_step.0s"][1])
    peak = int(re.search(r"; peak with \d+ thread\(s\): (\d+) B:", text).group(1))  # type: ignore[union-attr]
    assert peak == entry[1]


def test_a_peak_with_sizes_not_given_is_a_lower_bound() -> None:
    text = iz.show_memory(stack, activity=("dup", "dup", "const"), x=100, w=100)
    assert re.search(r"; peak with \d+ thread\(s\): \d+ B at least \(some sizes are not known\)", text), text
    assert "growable %tape.xs: ? B" in text
