"""A two-layer perceptron with sigmoid activations and a mean squared error loss, written the way generic
layered code is written: one small helper kernel per layer stage, a loss kernel calling them, and
`iz.grad` for a training step. Loop fusion (`optimize/loop_fusion.py`) has work to do on its gradient.

Every stage writes a new array, as a tensor program would (the pre-activations z1, z2 and the activations
h1, h2). Every array is stored feature-major, `h[j, b]` (feature j, sample b of the batch), and every stage
loops `for j in iz.prange(features): for b in range(batch)`: the parallel index of a layer (`dense`) is the
one of its epilogue (`bias_sigmoid`) and of the loss, so each stage reads only what the same iteration j of
the stage before wrote. With the helpers inlined (the default), the forward sweep is five `prange` loops
over j and the reverse sweep as many again, adjacent loops of one trip count that fusion may merge:

    h1 = sigmoid(W1 x + b1)        W1: (hidden, d),  X: (d, batch)
    h2 = sigmoid(W2 h1 + b2)       W2: (out, hidden)
    loss = mean((h2 - Y)^2)        Y: (out, batch)

`mlp_loss_numpy` is the same model in numpy; `sgd_step` is one step of gradient descent with the gradient
of `mlp_loss` in W1, b1, W2, b2 (`iz.grad`) and the update in numpy.

Run it: `python examples/mlp.py` (`ISOZYME_BACKEND=opencl` for the OpenCL backend).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

import isozyme as iz
from isozyme import Array, f64

PARAMETERS = (0, 1, 2, 3)
"""The positions of W1, b1, W2 and b2 in `mlp_loss`'s parameters: what `sgd_step` differentiates."""


@iz.kernel
def dense(out: Array[f64, 2], W: Array[f64, 2], x: Array[f64, 2]):
    # out[j, b] = sum_k W[j, k] x[k, b]: one work item per output feature j
    nout, nin, batch = W.shape[0], W.shape[1], x.shape[1]
    for j in iz.prange(nout):
        for b in range(batch):
            s = 0.0
            for k in range(nin):
                s += W[j, k] * x[k, b]
            out[j, b] = s


@iz.kernel
def bias_sigmoid(out: Array[f64, 2], z: Array[f64, 2], bias: Array[f64]):
    # out[j, b] = sigmoid(z[j, b] + bias[j]), into a new array as a tensor program would
    for j in iz.prange(z.shape[0]):
        for b in range(z.shape[1]):
            out[j, b] = 1.0 / (1.0 + iz.exp(-(z[j, b] + bias[j])))


@iz.kernel
def mean_squared_error(h: Array[f64, 2], targets: Array[f64, 2]) -> f64:
    # a sum per row, then over rows: the reverse of a prange sum carried through an inner loop would run
    # serially on OpenCL (its adjoint is carried from one iteration to the next)
    s = 0.0
    for j in iz.prange(h.shape[0]):
        row = 0.0
        for b in range(h.shape[1]):
            diff = h[j, b] - targets[j, b]
            row += diff * diff
        s += row
    return s / (h.shape[0] * h.shape[1])


@iz.kernel
def mlp_loss(W1: Array[f64, 2], b1: Array[f64], W2: Array[f64, 2], b2: Array[f64], X: Array[f64, 2],
             Y: Array[f64, 2]) -> f64:
    batch = X.shape[1]
    z1 = iz.empty((W1.shape[0], batch), f64)
    dense(z1, W1, X)
    h1 = iz.empty((W1.shape[0], batch), f64)
    bias_sigmoid(h1, z1, b1)
    z2 = iz.empty((W2.shape[0], batch), f64)
    dense(z2, W2, h1)
    h2 = iz.empty((W2.shape[0], batch), f64)
    bias_sigmoid(h2, z2, b2)
    return mean_squared_error(h2, Y)


def mlp_loss_numpy(W1: np.ndarray, b1: np.ndarray, W2: np.ndarray, b2: np.ndarray, X: np.ndarray,
                   Y: np.ndarray) -> float:
    """`mlp_loss` with numpy matrix products."""
    h1 = 1.0 / (1.0 + np.exp(-(W1 @ X + b1[:, None])))
    h2 = 1.0 / (1.0 + np.exp(-(W2 @ h1 + b2[:, None])))
    return float(np.mean((h2 - Y) ** 2))


class Problem(NamedTuple):
    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray
    b2: np.ndarray
    X: np.ndarray
    Y: np.ndarray


def mlp_data(d: int = 255, hidden: int = 255, out: int = 255, batch: int = 64, seed: int = 0) -> Problem:
    """Random parameters (scaled by 1/sqrt(fan-in)), inputs and targets in (0, 1)."""
    rng = np.random.default_rng(seed)
    return Problem(rng.standard_normal((hidden, d)) / np.sqrt(d), 0.1 * rng.standard_normal(hidden),
                   rng.standard_normal((out, hidden)) / np.sqrt(hidden), 0.1 * rng.standard_normal(out),
                   rng.standard_normal((d, batch)), rng.uniform(0.0, 1.0, (out, batch)))


def mlp_gradient(backend: str | None = None):
    """The gradient of `mlp_loss` in (W1, b1, W2, b2): a function of `mlp_loss`'s arguments."""
    return iz.grad(mlp_loss, argnums=PARAMETERS, backend=backend)


def sgd_step(problem: Problem, learning_rate: float, backend: str | None = None) -> tuple[Problem, float]:
    """One step of gradient descent on W1, b1, W2, b2: the new problem and the loss before the step."""
    loss = mlp_loss(*problem) if backend is None else mlp_loss.compile(backend=backend)(*problem)
    gradients = mlp_gradient(backend)(*problem)
    updated = [p - learning_rate * g for p, g in zip(problem[:4], gradients)]
    return Problem(*updated, problem.X, problem.Y), float(loss)


def finite_difference_check(problem: Problem, gradients: tuple[np.ndarray, ...], samples: int = 5,
                            seed: int = 1, h: float = 1e-5) -> float:
    """The largest relative error of `gradients` against central differences of `mlp_loss_numpy`, over a few
    random entries of each parameter."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for position, gradient in zip(PARAMETERS, gradients):
        for _ in range(samples):
            index = tuple(int(rng.integers(extent)) for extent in gradient.shape)
            args = [a.copy() for a in problem]
            args[position][index] += h
            up = mlp_loss_numpy(*args)
            args[position][index] -= 2.0 * h
            down = mlp_loss_numpy(*args)
            estimate = (up - down) / (2.0 * h)
            worst = max(worst, abs(gradient[index] - estimate) / max(abs(estimate), 1e-8))
    return worst


def main() -> None:
    problem = mlp_data(d=32, hidden=32, out=16, batch=16)
    gradients = mlp_gradient()(*problem)
    print(f"mlp: |kernel - numpy| loss = {abs(mlp_loss(*problem) - mlp_loss_numpy(*problem)):.1e}, "
          f"gradient against central differences: max relative error {finite_difference_check(problem, gradients):.1e}")
    for step in range(10):
        problem, loss = sgd_step(problem, learning_rate=2.0)
        print(f"step {step}: loss {loss:.6f}")
    print(f"final loss {mlp_loss(*problem):.6f}")


if __name__ == "__main__":
    main()
