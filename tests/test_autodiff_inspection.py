"""The inspection helpers of reverse mode: `iz.show_cache` and the `grad`/`grad-opt` stages of `iz.show_ir`."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64, i64


@iz.kernel
def product(x: Array[f64], n: i64) -> f64:
    p = 1.0
    for i in range(n):
        p *= x[i]
    return p


@iz.kernel
def total(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i]
    return s


def _line_of(kernel: iz.Kernel, text: str) -> int:
    lines, first = inspect.getsourcelines(kernel.py_func)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_show_cache_lists_the_loop_carried_product_with_its_line_type_and_size() -> None:
    report = iz.show_cache(product, activity=("dup", "const")).splitlines()
    assert "1 taped value" in report[0]
    match = re.fullmatch(r"(\S+)  (\S+)  x (.+)  at (\S+)", report[1])
    assert match is not None, report[1]
    name, element, size, where = match.groups()
    assert (name, element) == ("%p", "f64")
    assert "n" in size and "+ 1" in size  # one element per run of the loop header: the trip count + 1
    assert where.endswith(f"test_autodiff_inspection.py:{_line_of(product, 'p *= x[i]')}")


def test_show_cache_of_a_sum_is_empty() -> None:
    report = iz.show_cache(total, activity=("dup", "const"))
    assert "0 taped value" in report and len(report.splitlines()) == 1


def test_grad_stages_show_diffe_before_and_after_optimization() -> None:
    raw = iz.show_ir(total, stage="grad", activity=("dup", "const"))
    optimized = iz.show_ir(total, stage="grad-opt", activity=("dup", "const"))
    signature = "func @diffe_total(%x: f64[?], %d_x: f64[?], %n: i64, %differet: f64) -> f64"
    assert signature in raw and signature in optimized
    assert "alloc f64[1]" in raw           # the adjoint slots, before mem2reg
    assert "alloc" not in optimized        # promoted: a sum needs no tape
    assert raw != optimized


def test_grad_stage_needs_an_activity() -> None:
    with pytest.raises(ValueError, match="activity"):
        iz.show_ir(total, stage="grad")
    with pytest.raises(ValueError, match="one entry per parameter"):
        iz.show_cache(total, activity=("dup",))


# --- what the cache planner no longer tapes (enzyme_ad/cache.py) ----------------------------------------


@iz.kernel
def triangle(icf: Array[f64], x: Array[f64], reps: i64) -> f64:
    d = len(x)
    s = 0.0
    for _ in range(reps):
        idx = 0
        for col in range(d):
            for row in range(col + 1, d):
                s += icf[idx] * x[col] * x[row]
                idx += 1
    return s


@iz.kernel
def rewritten_each_step(W: Array[f64, 2], x: Array[f64], steps: i64) -> f64:
    n = len(x)
    h = iz.empty(n, f64)
    for _ in range(steps):
        for j in range(n):
            h[j] = iz.sin(W[j, j] * x[j])
        for o in range(n):
            for j in range(W.shape[1]):  # not len(x), the filling loop's: h[j] is taped, not recomputed
                W[o, j] -= 0.1 * h[j] * h[o]
    t = 0.0
    for o in range(n):
        t += W[o, 0] * W[o, 0]
    return t


@iz.kernel
def filled_first(x: Array[f64], n: i64) -> f64:
    q = iz.empty(n, f64)
    for i in range(n):
        q[i] = iz.exp(x[i])
    s = 0.0
    for _ in range(3):
        for i in range(n):
            s += iz.sin(q[i] * x[i])
    return s


def _tapes(kernel: iz.Kernel, activity: tuple[str, ...]) -> list[str]:
    return iz.show_cache(kernel, activity=activity).splitlines()[1:]


def _check_gradient(kernel: iz.Kernel, args: list, position: int) -> None:
    """The gradient in argument `position` against central differences of the undecorated function."""
    grad = iz.grad(kernel, argnums=position)(*[a.copy() if hasattr(a, "copy") else a for a in args])
    base = args[position]
    for index in [tuple(0 for _ in base.shape), tuple(s - 1 for s in base.shape)]:
        values = []
        for step in (1e-6, -1e-6):
            shifted = [a.copy() if hasattr(a, "copy") else a for a in args]
            shifted[position][index] += step
            values.append(kernel.py_func(*shifted))
        assert abs((values[0] - values[1]) / 2e-6 - grad[index]) < 1e-6 * (1 + abs(grad[index]))


def test_a_packed_triangles_index_is_recomputed_from_the_column_counter_and_its_loads_reloaded() -> None:
    """`idx += 1` in the row loop `range(col + 1, d)` is `start + counter`, and its start, the column
    header's phi, is `col * (d - 1) - col * (col - 1) / 2` (`triangular_index.py`); `icf[idx]` is loaded
    again (nothing writes icf): nothing is taped."""
    assert _tapes(triangle, ("dup", "dup", "const")) == []
    rng = np.random.default_rng(0)
    _check_gradient(triangle, [rng.standard_normal(6), rng.standard_normal(4), 2], 0)
    _check_gradient(triangle, [rng.standard_normal(6), rng.standard_normal(4), 2], 1)


@iz.kernel
def triangle_of_an_argument(icf: Array[f64], x: Array[f64], d: i64, reps: i64) -> f64:
    s = 0.0
    for _ in range(reps):
        idx = 0
        for col in range(d):
            for row in range(col + 1, d):  # max(max(d, 0) - (col + 1), 0) rows: d may be negative
                s += icf[idx] * x[col] * x[row]
                idx += 1
    return s


def test_a_triangle_over_an_argument_is_recomputed_too() -> None:
    """d is an argument, not an extent: the row count clamps it (`ssa/range_length.py`) to the column
    loop's own trip count max(d, 0), which the closed form takes for D."""
    assert _tapes(triangle_of_an_argument, ("dup", "dup", "const", "const")) == []
    rng = np.random.default_rng(4)
    _check_gradient(triangle_of_an_argument, [rng.standard_normal(6), rng.standard_normal(4), 4, 2], 0)
    _check_gradient(triangle_of_an_argument, [rng.standard_normal(6), rng.standard_normal(4), 4, 2], 1)


@iz.kernel
def clipped_triangle(icf: Array[f64], x: Array[f64], reps: i64) -> f64:
    d = len(x)
    s = 0.0
    for _ in range(reps):
        idx = 0
        for col in range(d):
            for row in range(col + 2, d):  # max(d - col - 2, 0) rows: the last column has none
                s += icf[idx] * x[col] * x[row]
                idx += 1
    return s


def test_a_triangles_index_whose_row_count_clips_at_zero_keeps_its_tape_per_column() -> None:
    """Must not recompute: `range(col + 2, d)` has max(d - col - 2, 0) rows, which clips at the last
    column, so the closed form does not hold. The start of `idx` is taped once per run of the row loop."""
    tapes = _tapes(clipped_triangle, ("dup", "dup", "const"))
    assert len(tapes) == 1 and tapes[0].startswith("%idx  i64  x "), tapes
    rng = np.random.default_rng(3)
    _check_gradient(clipped_triangle, [rng.standard_normal(3), rng.standard_normal(4), 2], 0)
    _check_gradient(clipped_triangle, [rng.standard_normal(3), rng.standard_normal(4), 2], 1)


def test_a_load_unchanged_through_a_loop_gets_no_index_for_it() -> None:
    """h[j] read inside `for o: for j:` after the loop that wrote h: steps * n elements, not steps * n * n."""
    tapes = _tapes(rewritten_each_step, ("dup", "dup", "const"))
    line = _line_of(rewritten_each_step, "W[o, j] -= 0.1")
    h_tapes = [t for t in tapes if t.endswith(f":{line}") and "<load>" in t]
    assert h_tapes and all(t.count("W.shape[1]") == 1 and "x.shape[0]" not in t for t in h_tapes), tapes
    rng = np.random.default_rng(1)
    _check_gradient(rewritten_each_step, [rng.standard_normal((4, 4)), rng.standard_normal(4), 3], 0)


@iz.kernel
def centred(x: Array[f64, 2], m: Array[f64], factor: Array[f64]) -> f64:
    n, d = x.shape[0], x.shape[1]
    xc = iz.empty(d, f64)
    s = 0.0
    for i in range(n):
        for j in range(d):
            xc[j] = x[i, j] - m[j]
        for j in range(d):
            s += factor[j] * xc[j] * xc[j]
        for col in range(d):
            for row in range(col + 1, d):
                s += iz.sin(xc[col]) * x[i, row]
    return s


def test_a_scratch_row_read_after_the_loop_that_fills_it_is_recomputed_not_taped() -> None:
    """GMM's centred point: `xc[j] = x[i, j] - m[j]` for every i, read by two later loops of the same
    trip count (`forwarding_store`). Both reads are recomputed from x and m; only sin(xc[col]) is taped
    (its adjoint of x[i, row] needs it), and no load is."""
    tapes = _tapes(centred, ("dup", "dup", "const"))
    assert len(tapes) == 1 and tapes[0].startswith("<sin>"), tapes
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal(4)]
    _check_gradient(centred, args, 0)
    _check_gradient(centred, args, 1)


def test_an_array_filled_before_the_loops_that_read_it_is_reloaded() -> None:
    """q is written once, before the loops that read it: q[i] needs no tape (but x[i] * q[i] goes through
    sin, whose argument is taped or recomputed from loads of x and q)."""
    tapes = _tapes(filled_first, ("dup", "const"))
    assert not any(t.startswith("<load>") for t in tapes), tapes
    _check_gradient(filled_first, [np.random.default_rng(2).standard_normal(5), 5], 0)


@iz.kernel
def layers(x: Array[f64], w: Array[f64, 2]) -> f64:
    """A layer loop writing slab k + 1 of h from slab k in iteration k: what a layer reads is never written
    again."""
    L, n = w.shape[0], w.shape[1]
    h = iz.empty((L + 1, n), f64)
    for i in range(n):
        h[0, i] = x[i]
    for layer in range(L):
        for i in range(n):
            h[layer + 1, i] = iz.sin(w[layer, i] * h[layer, i]) + h[layer, n - 1 - i]
    s = 0.0
    for i in range(n):
        s += h[L, i] * h[L, i]
    return s


@iz.kernel
def layers_rewriting_a_read_slab(x: Array[f64], w: Array[f64, 2]) -> f64:
    """The same loop, but iteration k also rewrites slab k - 1 (read by iteration k - 1 before): that read
    must be taped, not reloaded."""
    L, n = w.shape[0], w.shape[1]
    h = iz.empty((L + 1, n), f64)
    for i in range(n):
        h[0, i] = x[i]
    for layer in range(L):
        for i in range(n):
            h[layer + 1, i] = iz.sin(w[layer, i] * h[layer, i])
        if layer >= 1:
            for i in range(n):
                h[layer - 1, i] = 0.0
    s = 0.0
    for i in range(n):
        s += h[L, i] * h[L - 1, i]
    return s


@iz.kernel
def layers_in_place(x: Array[f64], w: Array[f64, 2]) -> f64:
    """A slab indexed by the layer counter, and every iteration k reads and rewrites slab k + 1 (an add in
    place), which iteration k + 1 reads."""
    L, n = w.shape[0], w.shape[1]
    h = iz.zeros((L + 1, n), f64)
    for i in range(n):
        h[0, i] = x[i]
    for layer in range(L):
        for i in range(n):
            h[layer + 1, i] = h[layer + 1, i] + iz.sin(w[layer, i] * h[layer, i])
    s = 0.0
    for i in range(n):
        s += h[L, i] * h[L, i]
    return s


@iz.kernel
def layers_clearing_the_read_slab(x: Array[f64], w: Array[f64, 2]) -> f64:
    """Each layer clears the slab it read, in the same iteration, after reading it."""
    L, n = w.shape[0], w.shape[1]
    h = iz.empty((L + 1, n), f64)
    for i in range(n):
        h[0, i] = x[i]
    for layer in range(L):
        for i in range(n):
            h[layer + 1, i] = iz.sin(w[layer, i] * h[layer, i])
        for i in range(n):
            h[layer, i] = 0.0
    s = 0.0
    for i in range(n):
        s += h[L, i] * h[L, i]
    return s


def test_a_slab_of_a_layer_loop_is_reloaded_where_no_later_iteration_writes_it() -> None:
    """h[k, i] read by iteration k, written by iteration k - 1 (slab k of h), is never written again: no
    tape of loads; the gradient still matches central differences."""
    tapes = _tapes(layers, ("dup", "dup"))
    assert not any(t.startswith("<load>") for t in tapes), tapes
    rng = np.random.default_rng(3)
    for position in (0, 1):
        _check_gradient(layers, [rng.standard_normal(5), rng.standard_normal((3, 5))], position)


def test_a_slab_written_by_a_later_iteration_is_taped() -> None:
    """Iteration k rewrites slab k - 1, which iteration k - 1 read: the loads of slab k are taped, and the
    gradient matches central differences (a reload would read the zeros); so do layers that add into the
    slab the next layer reads, and layers that clear the slab they read in the same iteration."""
    tapes = _tapes(layers_rewriting_a_read_slab, ("dup", "dup"))
    assert any(t.startswith("<load>") or t.startswith("<fmul>") for t in tapes), tapes
    rng = np.random.default_rng(4)
    for position in (0, 1):
        _check_gradient(layers_rewriting_a_read_slab, [rng.standard_normal(5), rng.standard_normal((4, 5))], position)
    for kernel in (layers_in_place, layers_clearing_the_read_slab):
        for position in (0, 1):
            _check_gradient(kernel, [rng.standard_normal(5), rng.standard_normal((4, 5))], position)


# --- rows of a softmax: a row-major pair of counters, and a row read after the loop that wrote it -------


@iz.kernel
def softmax_rows(q: Array[f64, 3], heads: i64) -> f64:
    """Attention's softmax: `probs[b, h * S + i, j]` written once (row h * S + i, 0 <= i < S), and read
    back by the next loop over the same j."""
    B, S = q.shape[0], q.shape[1]
    probs = iz.empty((B, heads * S, S), f64)
    s = 0.0
    for b in range(B):
        for h in range(heads):
            for i in range(S):
                z = 0.0
                for j in range(i + 1):
                    e = iz.exp(q[b, i, h] * q[b, j, h])
                    probs[b, h * S + i, j] = e
                    z += e
                for j in range(i + 1):
                    s += iz.sin(probs[b, h * S + i, j] / z) * q[b, j, h]
    return s


@iz.kernel
def overlapping_rows(q: Array[f64, 2]) -> f64:
    """Rows of S + 1 elements at a stride of S: the last element of row h is the first of row h + 1, which
    the next row overwrites, so neither the exponential nor the load can be had from `buf` again."""
    H, S = q.shape[0], q.shape[1]
    buf = iz.empty(H * S + 1, f64)
    s = 0.0
    for h in range(H):
        for i in range(S + 1):
            e = iz.exp(q[h, i % S] * q[h, 0])
            buf[h * S + i] = e
        for i in range(S + 1):
            s += iz.sin(buf[h * S + i]) * q[h, i % S]
    return s


def _full_gradient_check(kernel: iz.Kernel, args: list, position: int) -> None:
    """Every element of the gradient in argument `position` against central differences of `py_func`."""
    grad = iz.grad(kernel, argnums=position)(*[a.copy() if hasattr(a, "copy") else a for a in args])
    base = args[position]
    expected = np.zeros_like(base)
    for index in np.ndindex(base.shape):
        values = []
        for step in (1e-6, -1e-6):
            shifted = [a.copy() if hasattr(a, "copy") else a for a in args]
            shifted[position][index] += step
            values.append(kernel.py_func(*shifted))
        expected[index] = (values[0] - values[1]) / 2e-6
    np.testing.assert_allclose(grad, expected, rtol=1e-6, atol=1e-7)


def test_a_softmax_row_is_reloaded_not_taped() -> None:
    """`h * S + i` with i < S (the i loop's trip count is S) is a different row for every (h, i), so the
    store of e keeps it for the reverse pass (`_radix_pair`), and the second j loop reads what the first
    wrote, never written again (`_wrote_before`): neither e nor the load is taped."""
    tapes = _tapes(softmax_rows, ("dup", "const"))
    assert not any(t.startswith(("<exp>", "<load>", "%e ")) for t in tapes), tapes
    _full_gradient_check(softmax_rows, [np.random.default_rng(5).standard_normal((2, 4, 3)), 3], 0)


def test_overlapping_rows_are_taped() -> None:
    """Must tape: the i loop runs S + 1 times at a stride of S, so row h's last element is overwritten by
    row h + 1. The gradient matches central differences (a reload would read row h + 1's first value)."""
    tapes = _tapes(overlapping_rows, ("dup",))
    assert any(t.startswith(("<exp>", "<load>", "%e ")) for t in tapes), tapes
    _full_gradient_check(overlapping_rows, [np.random.default_rng(6).standard_normal((3, 4))], 0)


@iz.kernel
def rows_of_varying_length(q: Array[f64, 2]) -> f64:
    """Row h has E = H + 2 - h elements at offset h * E: row 1 is [4, 8) and row 2 [6, 9) for H = 3, so row 2
    overwrites the end of row 1; neither the exponential nor the load can be had from `buf` again."""
    H, S = q.shape[0], q.shape[1]
    buf = iz.empty(4 * H * H + 4, f64)
    s = 0.0
    for h in range(H):
        E = H + 2 - h
        for i in range(E):
            buf[h * E + i] = iz.exp(q[h, i % S] * q[h, 0])
        for i in range(E):
            s += iz.sin(buf[h * E + i]) * q[h, i % S]
    return s


def test_rows_whose_length_varies_with_the_row_are_taped() -> None:
    """Must tape: `h * E + i` with E depending on h is no row-major pair (rows overlap). The gradient
    matches central differences."""
    tapes = _tapes(rows_of_varying_length, ("dup",))
    assert any(t.startswith(("<exp>", "<load>")) for t in tapes), tapes
    _full_gradient_check(rows_of_varying_length, [np.random.default_rng(7).standard_normal((3, 4))], 0)
