"""A matrix-vector product y = A x over a 2-D array (`Array[f64, 2]`, C-contiguous, indexed `A[i, j]`).

The rows are independent, so the outer loop is an `iz.prange`: on OpenCL each row is a work item; on the CPU
backends it runs as an ordinary loop. The extents come from the arrays (`A.shape[k]`, `len(x)`).

Run it: `python examples/matvec.py`.
"""

import numpy as np

import isozyme as iz
from isozyme import Array, f64


@iz.kernel
def matvec(y: Array[f64], A: Array[f64, 2], x: Array[f64]):
    m, n = A.shape[0], A.shape[1]
    assert len(x) == n and len(y) == m
    for i in iz.prange(m):
        s = 0.0
        for j in range(n):
            s += A[i, j] * x[j]
        y[i] = s


def main() -> None:
    rng = np.random.default_rng(0)
    A, x = rng.standard_normal((30, 20)), rng.standard_normal(20)
    y = np.empty(30)
    matvec(y, A, x)
    print(f"matvec: y = A x for A {A.shape[0]}x{A.shape[1]}, max |y - A @ x| = {np.max(np.abs(y - A @ x)):.1e}")


if __name__ == "__main__":
    main()
