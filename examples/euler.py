"""Explicit Euler for a small nonlinear ODE: a damped Fermi-Pasta-Ulam-Tsingou (FPUT-beta) chain.

m unit masses sit between two walls, joined by m+1 springs whose force is V'(s) = s + beta*s**3 for a
stretch s. The state is y = [q_0 .. q_{m-1}, p_0 .. p_{m-1}] (positions, then momenta):
    dq_i/dt = p_i,    dp_i/dt = V'(q_{i+1} - q_i) - V'(q_i - q_{i-1}) - damping * p_i,    q_{-1} = q_m = 0.
`euler` steps y in place, y += dt * f(y), calling the right-hand-side kernel `fput_rhs` once a step with a
local array for the derivative, and returns the final energy from another kernel, `chain_energy`. Kernels
calling kernels, local arrays passed to a callee that writes them, and a state overwritten every step (which
reverse-mode AD must cache) are what this example shows.

Run it: `python examples/euler.py`.
"""

import numpy as np

import isozyme as iz
from isozyme import Array, f64, i64


@iz.kernel
def spring_force(s: f64, beta: f64) -> f64:
    return s + beta * s**3


@iz.kernel
def fput_rhs(dydt: Array[f64], y: Array[f64], m: i64, beta: f64, damping: f64):
    for i in range(m):
        left = 0.0
        if i > 0:
            left = y[i - 1]
        right = 0.0
        if i < m - 1:
            right = y[i + 1]
        q, p = y[i], y[m + i]
        dydt[i] = p
        dydt[m + i] = spring_force(right - q, beta) - spring_force(q - left, beta) - damping * p


@iz.kernel
def chain_energy(y: Array[f64], m: i64, beta: f64) -> f64:
    e = 0.0
    for i in range(m):
        e += 0.5 * y[m + i] * y[m + i]
    for i in range(m + 1):  # spring i joins mass i-1 and mass i (the walls at i = 0 and i = m)
        left = y[i - 1] if i > 0 else 0.0
        right = y[i] if i < m else 0.0
        s = right - left
        e += 0.5 * s * s + 0.25 * beta * s**4
    return e


@iz.kernel
def euler(y: Array[f64], dt: f64, steps: i64, beta: f64, damping: f64) -> f64:
    n = len(y)
    m = n // 2
    dydt = iz.empty(n, f64)
    for _ in range(steps):
        fput_rhs(dydt, y, m, beta, damping)
        for i in range(n):
            y[i] += dt * dydt[i]
    return chain_energy(y, m, beta)


def fput_rhs_numpy(y: np.ndarray, beta: float, damping: float) -> np.ndarray:
    """The same right-hand side, vectorized over the springs."""
    m = len(y) // 2
    q, p = y[:m], y[m:]
    stretch = np.diff(np.concatenate(([0.0], q, [0.0])))
    force = stretch + beta * stretch**3
    return np.concatenate((p, force[1:] - force[:-1] - damping * p))


def main() -> None:
    m, dt, steps, beta, damping = 4, 0.02, 100, 1.0, 0.1
    y0 = np.concatenate((0.5 * np.sin(np.pi * np.arange(1, m + 1) / (m + 1)), np.zeros(m)))
    y, y_ref = y0.copy(), y0.copy()
    energy = euler(y, dt, steps, beta, damping)
    for _ in range(steps):
        y_ref += dt * fput_rhs_numpy(y_ref, beta, damping)
    print(f"euler: FPUT chain of {m} masses, {steps} steps of dt={dt}: energy {chain_energy(y0, m, beta):.6f} -> "
          f"{energy:.6f}, max |y - numpy| = {np.max(np.abs(y - y_ref)):.1e}")


if __name__ == "__main__":
    main()
