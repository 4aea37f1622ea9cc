"""The dot product, for f64 and for i64 arrays: the smallest reduction loop.

`dot` is a sum-accumulator: its reverse-mode derivative needs no tape (d_a[i] += b[i] * seed). `idot` shows
an integer array argument (`Array[i64]`): integers wrap at 64 bits and are never differentiated.

Run it: `python examples/dot.py`.
"""

import numpy as np

import isozyme as iz
from isozyme import Array, f64, i64


@iz.kernel
def dot(a: Array[f64], b: Array[f64]) -> f64:
    assert len(a) == len(b)
    s = 0.0
    for i in range(len(a)):
        s += a[i] * b[i]
    return s


@iz.kernel
def idot(a: Array[i64], b: Array[i64]) -> i64:
    assert len(a) == len(b)
    s = 0
    for i in range(len(a)):
        s += a[i] * b[i]
    return s


def main() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(500), rng.standard_normal(500)
    ia, ib = rng.integers(-1000, 1000, 500), rng.integers(-1000, 1000, 500)
    value, expected = dot(a, b), float(np.dot(a, b))
    print(f"dot = {value:.15f} (numpy {expected:.15f}, rel. diff {abs(value - expected) / abs(expected):.1e})")
    print(f"idot = {idot(ia, ib)} (numpy {int(np.dot(ia, ib))})")


if __name__ == "__main__":
    main()
