"""The inspection helpers of reverse mode: `iz.show_cache` and the `grad`/`grad-opt` stages of `iz.show_ir`."""

from __future__ import annotations

import inspect
import re

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
