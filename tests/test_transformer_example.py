"""examples/transformer.py: the transformer trained by isozyme against the same model trained by PyTorch
(f64, same initial weights, same batches): the loss curves agree to 1e-9 relative and so do the parameters
after training; the gradient agrees with PyTorch's autograd everywhere and with central finite differences
of PyTorch's loss on a few entries of every parameter; Adam's kernel against `torch.optim.Adam`; bad
configurations and batches are ValueErrors naming what is wrong; the checkpointed loss (3 chunks of one
sequence) has the same gradient in less memory. Sizes are tiny (2 layers, d_model 8, 2 heads): the
gradient's compile dominates the time."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from example_modules import load_example

torch = pytest.importorskip("torch")

transformer = load_example("transformer")
CONFIG = transformer.Config(vocab=11, d_model=8, heads=2, layers=2, hidden=16, seq=5, batch=3, chunks=3)
RTOL = 1e-9


def relative(actual: np.ndarray, expected: np.ndarray) -> float:
    """The max-norm relative difference."""
    return float(np.max(np.abs(actual - expected)) / max(np.max(np.abs(expected)), 1e-300))


@pytest.fixture(scope="module")
def start() -> tuple:
    params = transformer.init_parameters(CONFIG, seed=3)
    params.flat += 0.05 * np.random.default_rng(4).standard_normal(params.flat.shape)  # no zero biases
    return params, transformer.make_batches(CONFIG, 4, seed=5)


@pytest.mark.parametrize("sgd", [False, True], ids=["adam", "sgd"])
def test_training_matches_torch(start: tuple, sgd: bool) -> None:
    params, batches = start
    hyper = transformer.Adam(lr=0.05 if sgd else 3e-3)
    ours = transformer.Trainer(params.copy(), hyper, sgd=sgd)
    theirs = transformer.TorchTrainer(params.copy(), hyper, sgd=sgd)
    losses = [ours.step(batch) for batch in batches]
    expected = [float(theirs.step(*theirs.batch(batch))) for batch in batches]
    np.testing.assert_allclose(losses, expected, rtol=RTOL, atol=0.0)
    assert losses[-1] < losses[0]  # it learns
    for name, view in ours.params.views.items():
        assert relative(view, theirs.tensors[name].detach().numpy()) < 1e-8, name


def check_against_autograd(trainer: Any, params: Any, batch: Any) -> None:
    """The trainer's loss and gradient on `batch` against PyTorch's autograd of `torch_loss`."""
    loss = trainer.gradient(batch)
    tensors = {name: torch.tensor(view, requires_grad=True) for name, view in params.views.items()}
    expected = transformer.torch_loss(tensors, torch.from_numpy(batch.tokens), torch.from_numpy(batch.targets),
                                      CONFIG.heads)
    expected.backward()
    assert abs(loss - expected.item()) <= RTOL * abs(expected.item())
    for name, view in trainer.grad.views.items():
        assert relative(view, tensors[name].grad.numpy()) < 1e-10, name


def test_gradient_matches_torch_and_finite_differences(start: tuple) -> None:
    params, batches = start
    batch = batches[0]
    trainer = transformer.Trainer(params.copy())
    check_against_autograd(trainer, params, batch)

    def torch_value(flat: np.ndarray) -> float:
        views = transformer.Parameters(CONFIG, flat).views
        return float(transformer.torch_loss({name: torch.from_numpy(view) for name, view in views.items()},
                                            torch.from_numpy(batch.tokens), torch.from_numpy(batch.targets),
                                            CONFIG.heads))

    rng = np.random.default_rng(6)
    offsets = np.cumsum([0] + [view.size for view in params.views.values()])
    for (name, view), offset in zip(params.views.items(), offsets):
        for k in rng.choice(view.size, size=2, replace=False):
            h = 1e-5
            up, down = params.flat.copy(), params.flat.copy()
            up[offset + k] += h
            down[offset + k] -= h
            estimate = (torch_value(up) - torch_value(down)) / (2 * h)
            got = trainer.grad.flat[offset + k]
            assert abs(got - estimate) <= 1e-6 * max(abs(estimate), 1e-3), (name, k, got, estimate)


def gradient_memory(kernel: Any, config: Any) -> tuple[int, int]:
    """The bytes that the gradient of `kernel` at the config's sizes requests as AD emitted it, and its peak
    (`iz.show_memory`)."""
    text = config.gradient_memory(kernel)
    emitted = re.search(r"as AD emitted it .*requested (\d+) B", text)
    peak = re.search(r"; peak with \d+ thread\(s\): (\d+) B:", text)  # exact: every size is known
    assert emitted is not None and peak is not None, text
    return int(emitted.group(1)), int(peak.group(1))


def test_the_checkpointed_loss_has_the_gradient_of_torch_in_less_memory(start: tuple) -> None:
    """Each layer of each chunk two split-mode calls (the reverse pass runs each block again from a slab):
    the same loss and gradient as PyTorch's autograd; at the test's sizes, a peak below that of the gradient
    that keeps every layer's activations and below that of the same kernel on the whole batch at once (one
    chunk), and at most 30% of the naive allocation (issue 26's goal: the plain gradient's local arrays and
    tapes as AD emitted them)."""
    params, batches = start
    trainer = transformer.Trainer(params.copy(), loss_kernel=transformer.transformer_loss_checkpointed)
    check_against_autograd(trainer, params, batches[1])
    naive, kept = gradient_memory(transformer.transformer_loss, CONFIG)
    _, whole = gradient_memory(transformer.transformer_loss_checkpointed, replace(CONFIG, chunks=1))
    _, chunked = gradient_memory(transformer.transformer_loss_checkpointed, CONFIG)
    assert chunked < whole < kept
    assert chunked <= 0.30 * naive


def test_adam_kernel_matches_torch() -> None:
    rng = np.random.default_rng(7)
    params, m, v = rng.standard_normal(50), np.zeros(50), np.zeros(50)
    tensor = torch.tensor(params.copy(), requires_grad=True)
    optimizer = torch.optim.Adam([tensor], lr=0.1, betas=(0.8, 0.9), eps=1e-6)
    for step in range(1, 4):
        grad = rng.standard_normal(50)
        tensor.grad = torch.tensor(grad.copy())
        optimizer.step()
        transformer.adam_step(params, grad, m, v, 0.1, 0.8, 0.9, 1e-6, step)
        assert not grad.any()  # consumed for the next gradient
        np.testing.assert_allclose(params, tensor.detach().numpy(), rtol=1e-13, atol=1e-15)


def test_bad_configurations_and_batches() -> None:
    with pytest.raises(ValueError, match="d_model"):
        transformer.Config(d_model=10, heads=4)
    with pytest.raises(ValueError, match="Config.layers"):
        transformer.Config(layers=0)
    with pytest.raises(ValueError, match="Config.chunks"):
        transformer.Config(batch=16, chunks=5)
    with pytest.raises(ValueError, match="flat"):
        transformer.Parameters(CONFIG, np.zeros(3))
    good = transformer.make_batches(CONFIG, 1)[0]
    transformer.check_batch(CONFIG, good)
    with pytest.raises(ValueError, match="tokens must hold token ids"):
        transformer.check_batch(CONFIG, good._replace(tokens=good.tokens + CONFIG.vocab))
    with pytest.raises(ValueError, match="targets must be an int64 array"):
        transformer.check_batch(CONFIG, good._replace(targets=good.targets.astype(np.int32)))
