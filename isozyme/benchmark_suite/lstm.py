"""ADBench's LSTM objective: l layers of b cells over a sequence of c characters (b bits each).

Facts from ADBench (awf/ADBench, `src/cpp/shared/lstm.h`, `read_lstm_instance` in `src/cpp/shared/utils.cpp`,
data/lstm/gen_data.py). `main_params` has 2l rows of 4b: row 2i the weights of layer i (forget, ingate,
outgate, change gates, b each), row 2i+1 its biases; `extra_params` 3 rows of b: input weights, output
weights, output biases; `state` 2l rows of b: row 2i the hidden state of layer i, row 2i+1 its cell (the
objective works on a copy: ADBench passes it by value); `sequence` c rows of b bits. For t < c - 1:

    x = sequence[t] * in_weight;   each layer i:  forget = sigmoid(x w_f + b_f), ingate = sigmoid(h w_i + b_i),
        outgate = sigmoid(x w_o + b_o), change = tanh(h w_c + b_c), cell = cell forget + ingate change,
        h = outgate tanh(cell), x = h;
    ypred = x * out_weight + out_bias,  lse = log(sum(exp(ypred)) + 2)   (ADBench's "+2", kept),
    total += sum(sequence[t + 1] * (ypred - lse))
and the loss is -total / ((c - 1) b). The gradient is with respect to main_params and extra_params
(ADBench's order). The kernels mirror ADBench's functions: `sigmoid`, `logsumexp` (with the +2),
`lstm_model` (one layer, in place on the state), `lstm_predict`, `lstm_objective`. One departure: ADBench
points the next layer's input at the hidden state of the layer below; `lstm_predict` copies it into a local
array `x` (b numbers per layer and step) rather than pass `state` to `lstm_model` twice: two array parameters
bound to one array are what DESIGN 1.1 rules out at kernel calls (the optimizer relies on distinct array
arguments not aliasing), even if today's inlined calls compute it right.

Sizes: ADBench's l = 2, c = 1024, b = 14 (its data/lstm/lstm_l2_c1024.txt, also its test input) for `full`;
`make_args` draws ADBench's distributions (parameters and state uniform on [0, 1), characters as bits)
from a seeded generator, the characters uniform on the printable ASCII range since the text is not
shipped; `read_adbench_lstm` parses ADBench's files.
"""

from __future__ import annotations

import numpy as np

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.benchmark_suite import Benchmark, Primal


@iz.kernel
def sigmoid(x: f64) -> f64:
    return 1.0 / (1.0 + iz.exp(-x))


@iz.kernel
def logsumexp(v: Array[f64]) -> f64:
    # log(sum(exp(v)) + 2): ADBench's, unshifted, with its "+2"
    s = 0.0
    for i in range(len(v)):
        s += iz.exp(v[i])
    s += 2.0
    return iz.log(s)


@iz.kernel
def lstm_model(params: Array[f64, 2], layer: i64, state: Array[f64, 2], x: Array[f64]):
    # one layer, in place on its hidden state (row 2 layer) and cell (row 2 layer + 1)
    b = len(x)
    w, bias, hidden, cell = 2 * layer, 2 * layer + 1, 2 * layer, 2 * layer + 1
    for i in range(b):
        forget = sigmoid(x[i] * params[w, i] + params[bias, i])
        ingate = sigmoid(state[hidden, i] * params[w, b + i] + params[bias, b + i])
        outgate = sigmoid(x[i] * params[w, 2 * b + i] + params[bias, 2 * b + i])
        change = iz.tanh(state[hidden, i] * params[w, 3 * b + i] + params[bias, 3 * b + i])
        state[cell, i] = state[cell, i] * forget + ingate * change
        state[hidden, i] = outgate * iz.tanh(state[cell, i])


@iz.kernel
def lstm_predict(main_params: Array[f64, 2], extra_params: Array[f64, 2], state: Array[f64, 2],
                 sequence: Array[f64, 2], t: i64, x: Array[f64], output: Array[f64]):
    # output = the prediction after character t; x is the layers' input (a copy of the hidden state of the
    # layer below: the kernel language passes whole arrays, not rows)
    b = len(output)
    for i in range(b):
        x[i] = sequence[t, i] * extra_params[0, i]
    for layer in range(main_params.shape[0] // 2):
        lstm_model(main_params, layer, state, x)
        for i in range(b):
            x[i] = state[2 * layer, i]
    for i in range(b):
        output[i] = x[i] * extra_params[1, i] + extra_params[2, i]


@iz.kernel
def lstm_objective(main_params: Array[f64, 2], extra_params: Array[f64, 2], state0: Array[f64, 2],
                   sequence: Array[f64, 2]) -> f64:
    c, b = sequence.shape[0], sequence.shape[1]
    state = iz.empty((state0.shape[0], b), f64)  # ADBench's objective takes the state by value
    for k in range(state0.shape[0]):
        for i in range(b):
            state[k, i] = state0[k, i]
    x = iz.empty(b, f64)
    ypred = iz.empty(b, f64)
    total = 0.0
    count = 0
    for t in range(c - 1):
        lstm_predict(main_params, extra_params, state, sequence, t, x, ypred)
        lse = logsumexp(ypred)
        for i in range(b):
            total += sequence[t + 1, i] * (ypred[i] - lse)
        count += b
    return -total / count


def make_args(l: int, c: int, b: int = 14, seed: int = 0) -> tuple:  # noqa: E741 - ADBench's names
    """(main_params, extra_params, state, sequence) drawn as ADBench's gen_data.py draws them."""
    rng = np.random.default_rng(seed)
    main_params = rng.random((2 * l, 4 * b))
    extra_params = rng.random((3, b))
    state = rng.random((2 * l, b))
    chars = rng.integers(32, 127, c)
    sequence = ((chars[:, None] >> np.arange(b - 1, -1, -1)[None, :]) & 1).astype(np.float64)
    return main_params, extra_params, state, sequence


def read_adbench_lstm(text: str) -> tuple:
    """An ADBench LSTM input file's contents: "l c b", then main_params, extra_params, state, sequence."""
    tokens = text.split()
    layers, c, b = (int(t) for t in tokens[:3])
    values = np.array([float(t) for t in tokens[3:]])
    sizes = [(2 * layers, 4 * b), (3, b), (2 * layers, b), (c, b)]
    out, start = [], 0
    for shape in sizes:
        count = shape[0] * shape[1]
        out.append(values[start:start + count].reshape(shape).copy())
        start += count
    assert start == len(values)
    return tuple(out)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def lstm_objective_numpy(main_params: np.ndarray, extra_params: np.ndarray, state0: np.ndarray,
                         sequence: np.ndarray) -> float:
    """The same loss, vectorized over the cells."""
    c, b = sequence.shape
    layers = main_params.shape[0] // 2
    hidden, cell = state0[0::2].copy(), state0[1::2].copy()
    total = 0.0
    for t in range(c - 1):
        x = sequence[t] * extra_params[0]
        for i in range(layers):
            w, bias = main_params[2 * i].reshape(4, b), main_params[2 * i + 1].reshape(4, b)
            forget = _sigmoid(x * w[0] + bias[0])
            ingate = _sigmoid(hidden[i] * w[1] + bias[1])
            outgate = _sigmoid(x * w[2] + bias[2])
            change = np.tanh(hidden[i] * w[3] + bias[3])
            cell[i] = cell[i] * forget + ingate * change
            hidden[i] = outgate * np.tanh(cell[i])
            x = hidden[i]
        ypred = x * extra_params[1] + extra_params[2]
        total += np.sum(sequence[t + 1] * (ypred - np.log(np.sum(np.exp(ypred)) + 2.0)))
    return float(-total / ((c - 1) * b))


def reference(main_params, extra_params, state, sequence) -> Primal:
    return Primal(lstm_objective_numpy(main_params, extra_params, state, sequence))


BENCHMARK = Benchmark(
    name="lstm",
    kernel=lstm_objective,
    activity=("dup", "dup", "const", "const"),
    sizes={"quick": ({"l": 2, "c": 256, "b": 14},),
           "full": ({"l": 2, "c": 1024, "b": 14}, {"l": 4, "c": 1024, "b": 14})},
    make_args=make_args,
    reference=reference,
    label=lambda size: f"l={size['l']} c={size['c']} b={size['b']}",
    scale=lambda size: size["l"] * size["c"] * size["b"],
    description="ADBench LSTM loss (with its +2), gradient w.r.t. main and extra parameters",
)
