"""The arena's block kept between calls (codegen/llvm_arena_cache.py): a later call reuses it or, when it
needs more, frees it and takes a larger one; an exit through a failure puts it back too; calls on several
threads at once each get a block of their own; gradients, whose tapes live there, stay right."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64, i64


@iz.kernel
def scratch(x: Array[f64], n: i64, limit: f64) -> f64:
    doubled = iz.empty(n, f64)
    shifted = iz.empty(n, f64)
    for i in range(n):
        doubled[i] = 2.0 * x[i]
    for i in range(n):
        shifted[i] = doubled[i] + 1.0
    s = 0.0
    for i in range(n):
        s += shifted[i] * doubled[i]
    assert s <= limit
    return s


def expected(x: np.ndarray, n: int) -> float:
    return float(np.sum((2.0 * x[:n] + 1.0) * (2.0 * x[:n])))


def test_the_arena_is_taken_from_and_put_back_in_its_cache() -> None:
    code = iz.show_ir(scratch, stage="llvm")
    assert "take_arena" in code and "release_arena" in code and ".arena\" = internal global" in code


def test_later_calls_reuse_or_regrow_the_block() -> None:
    x = np.random.default_rng(0).standard_normal(5000)
    for n in (10, 5000, 3, 4999, 0, 1000):
        assert scratch(x, n, np.inf) == pytest.approx(expected(x, n), rel=1e-12)


def test_a_failing_call_puts_the_block_back() -> None:
    x = np.ones(100)
    for n in (50, 100, 20):
        with pytest.raises(AssertionError):
            scratch(x, n, -1.0)
        assert scratch(x, n, np.inf) == expected(x, n)


def test_calls_on_several_threads_get_their_own_blocks() -> None:
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(int(rng.integers(1, 20000))) for _ in range(64)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda x: scratch(x, len(x), np.inf), inputs))
    for x, result in zip(inputs, results):
        assert result == pytest.approx(expected(x, len(x)), rel=1e-12)


def test_gradients_with_tapes_in_a_reused_arena_stay_right() -> None:
    for n in (7, 300, 31):
        x = np.random.default_rng(n).standard_normal(n)
        np.testing.assert_allclose(iz.grad(scratch)(x, n, np.inf), 8.0 * x + 2.0, rtol=1e-13)
