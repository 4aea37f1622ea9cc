"""examples/ddp_train.py, the isozyme op under PyTorch's DistributedDataParallel: started by torchrun with 2
processes on this machine (gloo over loopback), its parameters after N steps equal those of the one-process
run on the full batch (f64, 1e-10), which equal those of the same model with the layer written in torch.
The one-process runs call the example's `train` in this process; the distributed one is a subprocess."""

from __future__ import annotations

import os
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


def run_distributed(tmp_path: Path) -> dict[str, np.ndarray]:
    out = tmp_path / "ddp.npz"
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    options = [text for key, value in SETTINGS.items() for text in (f"--{key}", str(value))]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(EXAMPLES / "ddp_train.py"), *options, "--out", str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    with np.load(out) as parameters:
        return dict(parameters)


def assert_same(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-10, atol=1e-12, err_msg=name)


def test_two_processes_under_ddp_equal_one_process_on_the_full_batch(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)  # in this process: the one-process run
    example = load_example("ddp_train")
    single = example.train(**SETTINGS, layer="isozyme")
    assert_same(run_distributed(tmp_path), single)
    assert_same(single, example.train(**SETTINGS, layer="torch"))
    untrained = example.train(**{**SETTINGS, "steps": 0}, layer="torch")
    assert all(np.abs(single[name] - untrained[name]).max() > 1e-3 for name in single)  # the steps did train
