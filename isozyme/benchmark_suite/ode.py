"""Enzyme's ODE benchmark: explicit Euler and classical RK4 on one ODE system, written as generic code.

Facts from Enzyme (EnzymeAD/Enzyme, enzyme/benchmarks/ReverseMode/ode/ode.cpp and ForwardMode/ode/ode.cpp):
boost::odeint's `integrate_const(stepper, system, x, 0.0, t, t / iters)` on the system Enzyme names
`lorenz`, which is in fact exponential decay, dx/dt = -1.2 x, from x(0) = 1 to the final time t = 2.1;
the objective is x(t) and it is differentiated with respect to t (so also through the step dt = t / iters).
Exact: x(t) = exp(-1.2 t); Euler gives (1 - 1.2 t / iters)^iters.

As generic code would be (boost's structure): the right-hand side is a kernel `decay_rhs(dxdt, x, t)`
(the system), the steppers are kernels `euler_step` and `rk4_step` taking the state and their stage
arrays, and the integrators `integrate_euler` / `integrate_rk4` allocate the stages as local arrays once
(boost's steppers hold them as members), copy the initial state into a local state, take `iters` steps
of dt = t / iters and return x[0]. The state has `n` components (Enzyme: 1); the gradient is with respect
to t (Active) and the initial state x0 (Duplicated).
"""

from __future__ import annotations

import numpy as np

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.benchmark_suite import Benchmark, Primal

DECAY = 1.2      # Enzyme's `const double a = 1.2`
T_FINAL = 2.1    # Enzyme's `inp`


@iz.kernel
def decay_rhs(dxdt: Array[f64], x: Array[f64], t: f64):
    for i in range(len(x)):
        dxdt[i] = -DECAY * x[i]


@iz.kernel
def euler_step(x: Array[f64], dxdt: Array[f64], t: f64, dt: f64):
    decay_rhs(dxdt, x, t)
    for i in range(len(x)):
        x[i] += dt * dxdt[i]


@iz.kernel
def rk4_step(x: Array[f64], k1: Array[f64], k2: Array[f64], k3: Array[f64], k4: Array[f64], xt: Array[f64],
             t: f64, dt: f64):
    # boost::odeint's runge_kutta4: three intermediate states, then x += dt/6 k1 + dt/3 k2 + dt/3 k3 + dt/6 k4
    n = len(x)
    decay_rhs(k1, x, t)
    for i in range(n):
        xt[i] = x[i] + 0.5 * dt * k1[i]
    decay_rhs(k2, xt, t + 0.5 * dt)
    for i in range(n):
        xt[i] = x[i] + 0.5 * dt * k2[i]
    decay_rhs(k3, xt, t + 0.5 * dt)
    for i in range(n):
        xt[i] = x[i] + dt * k3[i]
    decay_rhs(k4, xt, t + dt)
    for i in range(n):
        x[i] += dt / 6.0 * k1[i] + dt / 3.0 * k2[i] + dt / 3.0 * k3[i] + dt / 6.0 * k4[i]


@iz.kernel
def integrate_euler(x0: Array[f64], t: f64, iters: i64) -> f64:
    n = len(x0)
    x = iz.empty(n, f64)
    dxdt = iz.empty(n, f64)
    for i in range(n):
        x[i] = x0[i]
    dt = t / iters
    for step in range(iters):
        euler_step(x, dxdt, step * dt, dt)
    return x[0]


@iz.kernel
def integrate_rk4(x0: Array[f64], t: f64, iters: i64) -> f64:
    n = len(x0)
    x = iz.empty(n, f64)
    k1 = iz.empty(n, f64)
    k2 = iz.empty(n, f64)
    k3 = iz.empty(n, f64)
    k4 = iz.empty(n, f64)
    xt = iz.empty(n, f64)
    for i in range(n):
        x[i] = x0[i]
    dt = t / iters
    for step in range(iters):
        rk4_step(x, k1, k2, k3, k4, xt, step * dt, dt)
    return x[0]


def make_args(iters: int, n: int = 1, seed: int = 0) -> tuple:
    """(x0, t, iters): Enzyme's x0 = 1 for n = 1, else seeded uniform on [0.5, 1.5); t = 2.1."""
    x0 = np.ones(n) if n == 1 else np.random.default_rng(seed).uniform(0.5, 1.5, n)
    return x0, T_FINAL, iters


def euler_numpy(x0: np.ndarray, t: float, iters: int) -> Primal:
    x, dt = x0.astype(np.float64).copy(), t / iters
    for _ in range(iters):
        x = x + dt * (-DECAY * x)
    return Primal(float(x[0]))


def rk4_numpy(x0: np.ndarray, t: float, iters: int) -> Primal:
    x, dt = x0.astype(np.float64).copy(), t / iters
    f = lambda y: -DECAY * y  # noqa: E731
    for _ in range(iters):
        k1 = f(x)
        k2 = f(x + 0.5 * dt * k1)
        k3 = f(x + 0.5 * dt * k2)
        k4 = f(x + dt * k3)
        x = x + dt / 6.0 * k1 + dt / 3.0 * k2 + dt / 3.0 * k3 + dt / 6.0 * k4
    return Primal(float(x[0]))


_SIZES = {"quick": ({"iters": 1000, "n": 1},),
          "full": ({"iters": 1000, "n": 1}, {"iters": 10_000, "n": 1}, {"iters": 100_000, "n": 1})}

BENCHMARK_EULER = Benchmark(
    name="ode_euler", kernel=integrate_euler, activity=("dup", "active", "const"), sizes=_SIZES,
    make_args=make_args, reference=euler_numpy,
    label=lambda size: f"iters={size['iters']} n={size['n']}", scale=lambda size: size["iters"],
    description="Enzyme's ODE: dx/dt = -1.2 x by explicit Euler, d x(t) / d(t, x0)")
BENCHMARK_RK4 = Benchmark(
    name="ode_rk4", kernel=integrate_rk4, activity=("dup", "active", "const"), sizes=_SIZES,
    make_args=make_args, reference=rk4_numpy,
    label=lambda size: f"iters={size['iters']} n={size['n']}", scale=lambda size: size["iters"],
    description="Enzyme's ODE: dx/dt = -1.2 x by classical RK4, d x(t) / d(t, x0)")
BENCHMARKS = (BENCHMARK_EULER, BENCHMARK_RK4)
