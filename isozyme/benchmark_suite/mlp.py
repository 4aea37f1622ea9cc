"""A 2-layer sigmoid MLP trained by SGD inside one kernel; the gradient of the loss after training with
respect to the initial parameters (differentiating through the training loop, hand-written backprop
included).

The network: x (width) -> h = sigmoid(W1 x + b1) (width) -> y = sigmoid(W2 h + b2) (width), both layers
width x width (255-255 in the `full` suite), squared error 0.5 |y - target|^2. `mlp_train` copies the
initial parameters into local arrays, runs `steps` SGD steps of rate `lr`, step s on sample s mod batch
(a forward pass, the backward pass written out by hand: delta2 = (y - target) y (1 - y),
delta1 = (W2^T delta2) h (1 - h), then W2 -= lr delta2 h^T, b2 -= lr delta2, W1 -= lr delta1 x^T,
b1 -= lr delta1), and returns the mean loss over the batch with the trained parameters. The language fits
it as is: the only compromise is a local copy of each sample's row (the layer kernels take 1-D inputs).

Reverse mode through the training loop needs each step's W2 (the backward pass and the forward pass both
read it) on the tape: about steps x width^2 x 8 bytes (0.5 GB for 255 x 255 and 1,000 steps), more if W1 is
taped too. The `quick` sizes are small.
"""

from __future__ import annotations

import numpy as np

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.benchmark_suite import Benchmark, Primal


@iz.kernel
def sigmoid(z: f64) -> f64:
    return 1.0 / (1.0 + iz.exp(-z))


@iz.kernel
def dense_sigmoid(out: Array[f64], W: Array[f64, 2], b: Array[f64], x: Array[f64]):
    for o in range(W.shape[0]):
        s = b[o]
        for i in range(W.shape[1]):
            s += W[o, i] * x[i]
        out[o] = sigmoid(s)


@iz.kernel
def sample_loss(y: Array[f64], target: Array[f64, 2], k: i64) -> f64:
    s = 0.0
    for o in range(len(y)):
        e = y[o] - target[k, o]
        s += e * e
    return 0.5 * s


@iz.kernel
def sgd_step(W1: Array[f64, 2], b1: Array[f64], W2: Array[f64, 2], b2: Array[f64], x: Array[f64], h: Array[f64],
             y: Array[f64], delta1: Array[f64], delta2: Array[f64], target: Array[f64, 2], k: i64, lr: f64):
    dense_sigmoid(h, W1, b1, x)
    dense_sigmoid(y, W2, b2, h)
    for o in range(len(y)):
        delta2[o] = (y[o] - target[k, o]) * y[o] * (1.0 - y[o])
    for j in range(len(h)):
        s = 0.0
        for o in range(len(y)):
            s += W2[o, j] * delta2[o]
        delta1[j] = s * h[j] * (1.0 - h[j])
    for o in range(len(y)):
        for j in range(len(h)):
            W2[o, j] -= lr * delta2[o] * h[j]
        b2[o] -= lr * delta2[o]
    for j in range(len(h)):
        for i in range(len(x)):
            W1[j, i] -= lr * delta1[j] * x[i]
        b1[j] -= lr * delta1[j]


@iz.kernel
def mlp_train(W1_0: Array[f64, 2], b1_0: Array[f64], W2_0: Array[f64, 2], b2_0: Array[f64], X: Array[f64, 2],
              target: Array[f64, 2], lr: f64, steps: i64) -> f64:
    n_hidden, n_in, n_out, batch = W1_0.shape[0], W1_0.shape[1], W2_0.shape[0], X.shape[0]
    W1 = iz.empty((n_hidden, n_in), f64)
    b1 = iz.empty(n_hidden, f64)
    W2 = iz.empty((n_out, n_hidden), f64)
    b2 = iz.empty(n_out, f64)
    for j in range(n_hidden):
        for i in range(n_in):
            W1[j, i] = W1_0[j, i]
        b1[j] = b1_0[j]
    for o in range(n_out):
        for j in range(n_hidden):
            W2[o, j] = W2_0[o, j]
        b2[o] = b2_0[o]
    x = iz.empty(n_in, f64)
    h = iz.empty(n_hidden, f64)
    y = iz.empty(n_out, f64)
    delta1 = iz.empty(n_hidden, f64)
    delta2 = iz.empty(n_out, f64)
    for step in range(steps):
        k = step % batch
        for i in range(n_in):
            x[i] = X[k, i]
        sgd_step(W1, b1, W2, b2, x, h, y, delta1, delta2, target, k, lr)
    total = 0.0
    for k in range(batch):
        for i in range(n_in):
            x[i] = X[k, i]
        dense_sigmoid(h, W1, b1, x)
        dense_sigmoid(y, W2, b2, h)
        total += sample_loss(y, target, k)
    return total / batch


def make_args(width: int, steps: int, batch: int = 16, lr: float = 0.5, seed: int = 0) -> tuple:
    """(W1, b1, W2, b2, X, target, lr, steps): weights normal / sqrt(width), biases 0.1 normal, inputs and
    targets uniform on [0, 1)."""
    rng = np.random.default_rng(seed)
    W1 = rng.standard_normal((width, width)) / np.sqrt(width)
    b1 = 0.1 * rng.standard_normal(width)
    W2 = rng.standard_normal((width, width)) / np.sqrt(width)
    b2 = 0.1 * rng.standard_normal(width)
    return W1, b1, W2, b2, rng.random((batch, width)), rng.random((batch, width)), lr, steps


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def reference(W1, b1, W2, b2, X, target, lr, steps) -> Primal:
    W1, b1, W2, b2 = W1.copy(), b1.copy(), W2.copy(), b2.copy()
    for step in range(steps):
        x, t = X[step % len(X)], target[step % len(X)]
        h = _sigmoid(W1 @ x + b1)
        y = _sigmoid(W2 @ h + b2)
        delta2 = (y - t) * y * (1.0 - y)
        delta1 = (W2.T @ delta2) * h * (1.0 - h)
        W2 -= lr * np.outer(delta2, h)
        b2 -= lr * delta2
        W1 -= lr * np.outer(delta1, x)
        b1 -= lr * delta1
    Y = _sigmoid(_sigmoid(X @ W1.T + b1) @ W2.T + b2)
    return Primal(float(np.mean(0.5 * np.sum((Y - target) ** 2, axis=1))))


BENCHMARK = Benchmark(
    name="mlp",
    kernel=mlp_train,
    activity=("dup", "dup", "dup", "dup", "const", "const", "const", "const"),
    sizes={"quick": ({"width": 32, "steps": 100, "batch": 16},),
           "full": ({"width": 64, "steps": 1000, "batch": 16}, {"width": 255, "steps": 1000, "batch": 16})},
    make_args=make_args,
    reference=reference,
    label=lambda size: f"{size['width']}-{size['width']} steps={size['steps']}",
    scale=lambda size: size["width"] ** 2 * size["steps"],
    description="2-layer sigmoid MLP trained by SGD in the kernel, d(final loss)/d(initial parameters)",
)
