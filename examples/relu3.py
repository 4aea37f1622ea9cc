"""A cubic ReLU, `x**3 if x > 0 else 0`, elementwise: a branch inside a loop, in two shapes.

`relu3` writes its result into an output array (a kernel returns no arrays: it fills the ones it is given);
`relu3_sum` returns the sum as a scalar, the shape `iz.grad` wants. The conditional expression becomes a
branch (or a `select`) in the SSA IR; its derivative is `3 x**2` where `x > 0` and 0 elsewhere.

Run it: `python examples/relu3.py`.
"""

import numpy as np

import isozyme as iz
from isozyme import Array, f64


@iz.kernel
def relu3(out: Array[f64], x: Array[f64]):
    for i in range(len(x)):
        out[i] = x[i] ** 3 if x[i] > 0.0 else 0.0


@iz.kernel
def relu3_sum(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        xi = x[i]
        if xi > 0.0:
            s += xi**3
    return s


def main() -> None:
    x = np.random.default_rng(0).uniform(-1.0, 1.0, 200)
    out = np.empty_like(x)
    relu3(out, x)
    expected = np.where(x > 0.0, x**3, 0.0)
    print(f"relu3: max |out - numpy| = {np.max(np.abs(out - expected)):.1e}, "
          f"relu3_sum = {relu3_sum(x):.15f} (numpy {expected.sum():.15f})")


if __name__ == "__main__":
    main()
