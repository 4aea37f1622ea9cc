"""The 1-D heat equation u_t = u_xx, stepped explicitly (forward Euler in time, centred differences in
space), updating its state array in place.

Each step copies `u` into a scratch array (a local `iz.empty`, freed when the kernel returns) and then sets
    u[i] = prev[i] + r * (prev[i-1] - 2 prev[i] + prev[i+1]),   1 <= i <= n-2,   r = dt / dx**2,
leaving the boundary values u[0] and u[n-1] fixed (Dirichlet). The scheme is stable for r <= 1/2. The kernel
returns the final energy E = dx/2 * sum u[i]^2 (a discrete 1/2 * integral of u^2, dx = 1/(n-1)). Every step
overwrites `u` and reads the previous step: reverse-mode AD must keep the overwritten values. The loops over
space are `iz.prange` loops: on the `opencl` backend each step launches two NDRange kernels (and so does the
reverse of each step); elsewhere they run in order.

Run it: `python examples/heat.py`.
"""

import numpy as np

import isozyme as iz
from isozyme import Array, f64, i64


@iz.kernel
def heat(u: Array[f64], r: f64, steps: i64) -> f64:
    n = len(u)
    assert n >= 2
    prev = iz.empty(n, f64)
    for _ in range(steps):
        for i in iz.prange(n):
            prev[i] = u[i]
        for i in iz.prange(1, n - 1):
            u[i] = prev[i] + r * (prev[i - 1] - 2.0 * prev[i] + prev[i + 1])
    dx = 1.0 / (n - 1)
    energy = 0.0
    for i in range(n):
        energy += u[i] * u[i]
    return 0.5 * dx * energy


def heat_numpy(u: np.ndarray, r: float, steps: int) -> float:
    """The same scheme with numpy slices, updating `u` in place."""
    for _ in range(steps):
        u[1:-1] = u[1:-1] + r * (u[:-2] - 2.0 * u[1:-1] + u[2:])
    return 0.5 / (len(u) - 1) * float(np.sum(u * u))


def main() -> None:
    n, r, steps = 21, 0.4, 50
    xs = np.linspace(0.0, 1.0, n)
    u0 = np.sin(np.pi * xs) + 0.5 * xs  # a bump on a linear profile: boundary values 0 and 0.5
    u, u_ref = u0.copy(), u0.copy()
    energy = heat(u, r, steps)
    expected = heat_numpy(u_ref, r, steps)
    print(f"heat: n={n}, {steps} steps of r={r}: energy {heat(u0.copy(), r, 0):.6f} -> {energy:.12f} "
          f"(numpy {expected:.12f}), max |u - numpy| = {np.max(np.abs(u - u_ref)):.1e}")


if __name__ == "__main__":
    main()
