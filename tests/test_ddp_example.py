"""examples/ddp_train.py, the isozyme op under PyTorch's DistributedDataParallel: started by torchrun with 2
processes on this machine (gloo over loopback), it checks itself: its parameters after N steps against those
of the one-process run on the full batch, its verdict the maximum relative difference (at most 1e-12, exit
status 0). The test reads that verdict, checks the parameters and the printed global losses against the
one-process run in this process (which equals the same model with the layer written in torch), and breaks
the check once: against a reference perturbed by 1e-9 the script says FAIL and exits 1."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

from example_modules import EXAMPLES, load_example  # noqa: E402

ROOT = EXAMPLES.parent
SETTINGS = {"steps": 8, "batch": 32, "features": 4, "hidden": 8, "lr": 0.1}
TIMEOUT = 300
"""Seconds the distributed run may take: two Python processes importing torch and compiling the kernel on a
loaded 2-core machine take well under a minute; a hung rendezvous fails the test instead of hanging CI."""
VERDICT = re.compile(r"max relative difference ([-+.e0-9]+) to the 1-process reference \(limit ([-+.e0-9]+)\): "
                     r"(OK|FAIL)")
LOSS = re.compile(r"step +(\d+) +loss ([-+.e0-9]+)")


def run_distributed(*options: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    settings = [text for key, value in SETTINGS.items() for text in (f"--{key}", str(value))]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(EXAMPLES / "ddp_train.py"), *settings, *options]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)


def verdict(output: str) -> tuple[float, str]:
    """The script's maximum relative difference and its verdict, from its one verdict line."""
    (found,) = VERDICT.findall(output)
    difference, limit, word = found
    assert float(limit) == 1e-12
    return float(difference), word


def losses(output: str) -> dict[int, float]:
    return {int(step): float(loss) for step, loss in LOSS.findall(output)}


def assert_same(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)  # in this process: the one-process run
    return load_example("ddp_train")


def test_two_processes_under_ddp_check_themselves_against_one_process(tmp_path: Path, example,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ddp.npz"
    done = run_distributed("--out", str(out))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    difference, word = verdict(done.stdout)
    assert word == "OK" and 0.0 <= difference <= 1e-12, output
    capsys.readouterr()
    single = example.train(**SETTINGS, layer="isozyme", report=True)
    printed_by_one_process = losses(capsys.readouterr().out)
    with np.load(out) as parameters:
        assert_same(dict(parameters), single)  # the verdict is the test's too
    printed = losses(done.stdout)  # the loss of the whole batch, all-reduced, not rank 0's share
    assert printed.keys() == printed_by_one_process.keys() and len(printed) >= 3
    for step, loss in printed.items():
        assert loss == pytest.approx(printed_by_one_process[step], rel=1e-9), step
    assert_same(single, example.train(**SETTINGS, layer="torch"))
    untrained = example.train(**{**SETTINGS, "steps": 0}, layer="torch")
    assert all(np.abs(single[name] - untrained[name]).max() > 1e-3 for name in single)  # the steps did train


def test_the_check_fails_against_a_perturbed_reference(tmp_path: Path, example) -> None:
    reference = example.train(**SETTINGS, layer="isozyme")
    W = reference["W"]
    W.flat[0] += 1e-9 * np.abs(W).max()  # far above the rounding of a split sum, far below a wrong gradient
    np.savez(tmp_path / "perturbed.npz", **reference)
    done = run_distributed("--reference", str(tmp_path / "perturbed.npz"))
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    difference, word = verdict(done.stdout)
    assert word == "FAIL" and difference == pytest.approx(1e-9, rel=1e-3), output
