"""Normalize a vector: DESIGN section 1's `mag` and `norm`, the example isozyme is built around.

`norm` calls `mag(x, n)` inside its loop, so as written it does O(n^2) work. `mag` only reads `x`, and `norm`
never writes `x` (distinct array arguments do not alias), so the optimizer's LICM hoists the call out of the
loop; the gradient is then built from the O(n) program instead of the O(n^2) one. Compare

    iz.show_ir(norm, stage="ssa")     # the call to @mag inside the loop
    iz.show_ir(norm, stage="opt")     # the call hoisted into the preheader

Run it: `python examples/norm.py`.
"""

import numpy as np

import isozyme as iz
from isozyme import Array, f64, i64


@iz.kernel
def mag(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return iz.sqrt(s)          # math.sqrt works too


@iz.kernel
def norm(out: Array[f64], x: Array[f64], n: i64):
    for i in range(n):
        out[i] = x[i] / mag(x, n)


def main() -> None:
    n = 40  # small: the reference interpreter runs mag n times here, as written
    x = np.random.default_rng(0).random(n)
    out = np.empty_like(x)
    norm(out, x, n)
    expected = x / np.linalg.norm(x)
    print(f"norm: n={n}, |out| = {mag(out, n):.15f}, max |out - x/|x|| = {np.max(np.abs(out - expected)):.1e}")


if __name__ == "__main__":
    main()
