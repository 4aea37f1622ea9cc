"""The bench on the user's own kernel (isozyme/kernel_comparison.py: `python -m isozyme bench FILE.py:kernel
--args ...` and `iz.compare`), and the suite run from an installed copy of the package in another directory
(issue 26).

What is checked against something the code under test did not compute: IR sizes against the instruction
lines of `iz.show_ir`'s text, the finite-difference check against analytic gradients, a wrong gradient (in
the pre and post variants alike, so only the finite differences can see it) failing, and a kernel whose
compiled primal differs from its Python function (64-bit integers wrap) failing the primal check."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import xml.dom.minidom
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, boolean, f32, f64, i64
from isozyme import benchmark_suite as suite
from isozyme.__main__ import main as isozyme_main
from isozyme.benchmark_checks import MISMATCH
from isozyme.benchmark_suite.results import validate
from isozyme.benchmarking import paired_ratio
from isozyme.kernel_comparison import (
    IR_STAGES,
    default_activity,
    finite_difference_check,
    ir_sizes,
    user_benchmark,
)

ROOT = Path(__file__).resolve().parents[1]
USER_MODULE = '''
import numpy as np
import isozyme as iz
from isozyme import Array, f64, i64


@iz.kernel
def mag(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return iz.sqrt(s)


@iz.kernel
def norm(out: Array[f64], x: Array[f64], n: i64):
    for i in range(n):
        out[i] = x[i] / mag(x, n)


def inputs(n):
    return np.zeros(n), np.random.default_rng(1).random(n), n
'''


@iz.kernel
def cubes(x: Array[f64], a: f64) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += a * x[i] * x[i] * x[i]
    return s


@iz.kernel
def cubes32(x: Array[f32]) -> f32:
    s = f32(0.0)
    for i in range(len(x)):
        s += x[i] * x[i] * x[i]
    return s


@iz.kernel
def wraps(x: Array[f64], k: i64) -> f64:
    m = k * k  # wraps to 0 for k = 2**32 in the kernel (64-bit), 2**64 in Python
    return x[0] * float(m) + x[1]


@iz.kernel
def mixed(x: Array[f64], index: Array[i64], a: f64, n: i64, y: Array[f32], flag: boolean) -> f64:
    return x[0] * a + float(index[0] + n) + float(len(y)) if flag else 0.0


@pytest.fixture
def user_module(tmp_path: Path) -> Path:
    """The kernels of USER_MODULE in a file of a folder of their own."""
    folder = tmp_path / "src"
    folder.mkdir()
    path = folder / "user_kernels.py"
    path.write_text(USER_MODULE, encoding="utf-8")
    return path


@pytest.fixture
def bench_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command in this process; the variables it sets are restored after."""
    monkeypatch.setenv("ISOZYME_CACHE", "off")
    monkeypatch.setenv("ISOZYME_BACKEND", "llvm")


def instruction_lines(text: str) -> int:
    """The instructions of printed SSA: the indented lines inside `func ... { }`."""
    return sum(1 for line in text.splitlines() if line.startswith("  ") and line.strip())


def test_user_kernel_command_from_another_directory(user_module: Path, tmp_path: Path) -> None:
    """Two rows (two --args), from a folder that is neither the repository nor the kernel's: the table, the IR
    sizes, every check passed, the JSON and the plot."""
    run = tmp_path / "run"
    run.mkdir()
    result = subprocess.run([sys.executable, "-m", "isozyme", "bench", f"{user_module}:norm",
                             "--args", "inputs(50)", "--args", "np.zeros(80), rng.random(80), 80",
                             "--min-time", "0.001", "--json", "out.json", "--plot", "out.svg"],
                            cwd=run, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "pre/post" in result.stdout and "IR instructions" in result.stdout and MISMATCH not in result.stdout
    data = json.loads((run / "out.json").read_text())
    assert validate(data) == [] and data["benchmark"] == "bench_user"
    assert data["passed"] is True and data["parameters"]["activity"] == ["dup", "dup", "const"]
    assert list(dict.fromkeys(row["size"] for row in data["rows"])) == ["out[50] x[50] n=50", "out[80] x[80] n=80"]
    for row in data["rows"]:
        assert row["check"]["passed"] and row["variant"] in ("isozyme", "isozyme post", "isozyme pre")
        if row["variant"] == "isozyme pre":  # the reference gradient, and its finite-difference check
            assert set(row["check"]["checks"]) == {"pre", "finite differences"}
        if row["variant"] == "isozyme post":
            assert set(row["details"]["ir_sizes"]) == {column for column, _, _ in IR_STAGES}
    document = xml.dom.minidom.parse(str(run / "out.svg"))
    assert len(document.getElementsByTagName("polyline")) == 2  # one kernel, two panels


def test_ir_sizes_count_the_printed_instructions() -> None:
    activity = ("dup", "active")
    sizes = ir_sizes(cubes, activity)
    for column, stage, opt in IR_STAGES:
        text = iz.show_ir(cubes, stage, opt, activity if stage.startswith("grad") else None)
        assert sizes[column] == instruction_lines(text), column


BAD_INPUTS = [
    (["{file}:missing", "--args", "1"], "has no kernel 'missing' (kernels: mag, norm)"),
    (["{folder}/absent.py:norm", "--args", "1"], "cannot read"),
    (["{file}", "--args", "1"], "expected FILE.py:kernel"),
    (["{file}:norm"], "give the kernel's arguments with --args"),
    (["{file}:norm", "--args", "np.zeros(3), rng.random(3)"], "gives 2 argument(s), the kernel takes 3"),
    (["{file}:norm", "--args", "np.zeros(3), rng.random(3), 3.5"], "parameter 'n' of kernel 'norm'"),
    (["{file}:norm", "--args", "np.zeros(3), np.zeros(3, np.int64), 3"], "parameter 'x' of kernel 'norm'"),
    (["{file}:norm", "--args", "np.zeros(3), rng.random(3), undefined"], "NameError: name 'undefined'"),
    (["{file}:norm", "--args", "np.zeros(3), rng.random(3"], "SyntaxError"),
    (["{file}:norm", "--args", "inputs(3)", "--activity", "dup,dup,dup"], "parameter 'n': its type i64"),
    (["{file}:norm", "--args", "inputs(3)", "--activity", "dup,dup"], "has 3 parameter(s)"),
    (["{file}:norm", "--args", "inputs(3)", "--activity", "dup,active,const"], "an array is dup or const"),
    (["{file}:norm", "--args", "inputs(3)", "--activity", "const,const,const"], "no parameter is dup or active"),
    (["{file}:norm", "--args", "inputs(3)", "--activity", "const,dup,const"], "writes no dup array"),
    (["{file}:norm", "--args", "inputs(3)", "--only", "norm"], "--suite, --only, --peers and --jobs"),
    (["{file}:norm", "--args", "inputs(3)", "--jobs", "2"], "are for the benchmarks of the suite"),
    (["--args", "1"], "not the suite"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUTS, ids=[message for _, message in BAD_INPUTS])
def test_bad_spec_or_arguments_exit_2(argv: list[str], message: str, user_module: Path,
                                      capsys: pytest.CaptureFixture, bench_environment: None) -> None:
    argv = [arg.format(file=user_module, folder=user_module.parent) for arg in argv]
    assert isozyme_main(["bench", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.startswith("isozyme bench: ") and captured.out == ""


def test_bad_spec_exits_2_from_the_process(user_module: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "isozyme", "bench", f"{user_module}:nope", "--args", "1"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "has no kernel 'nope'" in result.stderr


def test_default_activity() -> None:
    """Float arrays dup, float scalars active, integers, integer arrays and booleans const."""
    assert default_activity(mixed) == ("dup", "const", "active", "const", "dup", "const")


def test_compare_returns_the_row(capsys: pytest.CaptureFixture) -> None:
    x = np.random.default_rng(0).random(300)
    row = iz.compare(cubes, x, 2.5, min_time=0.0, verbose=True)
    assert set(row.timings) == {"primal", "post", "pre"} and row.passed
    assert row.speedup == paired_ratio(row.timings["pre"], row.timings["post"]) > 0.0
    assert set(row.checks) == {"primal", "post", "pre", "finite differences"}
    assert set(row.ir_sizes) == {column for column, _, _ in IR_STAGES}
    out = capsys.readouterr().out
    assert "grad post" in out and "IR instructions" in out and "cubes" in out


def test_finite_differences_against_the_analytic_gradient() -> None:
    """L = a sum(x^3): dL/dx = 3 a x^2, dL/da = sum(x^3); the check passes on them and fails when the
    largest entry of dL/dx (always among those checked) is off by 1e-3 of itself, or dL/da is."""
    x, a = np.random.default_rng(3).uniform(0.5, 2.0, 40), 1.7
    bench = user_benchmark(cubes, [(x, a)])
    exact = {"value": a * np.sum(x**3), 0: 3.0 * a * x**2, 1: float(np.sum(x**3))}
    check = finite_difference_check(bench, (x, a), exact)
    assert check.passed and check.calls == 1 and check.error < 1e-7
    wrong_x = {**exact, 0: exact[0].copy()}
    wrong_x[0][np.argmax(wrong_x[0])] *= 1.001
    assert not finite_difference_check(bench, (x, a), wrong_x).passed
    assert not finite_difference_check(bench, (x, a), {**exact, 1: exact[1] * 1.001}).passed


def test_a_kernel_in_f32() -> None:
    """In f32 the finite differences go along a random direction (single entries drown in rounding): the
    analytic gradient 3 x^2 passes, 2% off fails; `iz.compare` passes on the kernel itself."""
    x = np.random.default_rng(4).random(20_000).astype(np.float32)
    bench = user_benchmark(cubes32, [(x,)])
    exact = {"value": float(np.sum(x.astype(np.float64) ** 3)), 0: 3.0 * x.astype(np.float64) ** 2}
    assert finite_difference_check(bench, (x,), exact).passed
    assert not finite_difference_check(bench, (x,), {**exact, 0: exact[0] * 1.02}).passed
    row = iz.compare(cubes32, x, min_time=0.0)
    assert row.passed and row.checks["finite differences"].tolerance == 1e-2


def wrong_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every gradient (opt="pre" and "post" alike, the reference too) 1e-3 too large in its first entry."""
    prepare_gradient = suite.prepare_gradient

    def wrong(bench: Any, args: tuple, opt: str = "post", backend: str | None = None) -> Any:
        call, finish = prepare_gradient(bench, args, opt, backend)

        def perturbed(returned: object) -> Any:
            gradient = finish(returned)
            for shadow in gradient.shadows.values():
                shadow.ravel()[np.argmax(np.abs(shadow))] *= 1.001
            return gradient
        return call, perturbed
    monkeypatch.setattr(suite, "prepare_gradient", wrong)


def test_a_gradient_wrong_in_pre_and_post_fails_on_finite_differences(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong_gradients(monkeypatch)
    x = np.random.default_rng(0).random(100)
    with pytest.raises(AssertionError, match="MISMATCH: cubes gradient .* against central finite differences"):
        iz.compare(cubes, x, 2.5, min_time=0.0)
    row = iz.compare(cubes, x, 2.5, min_time=0.0, check=False)
    assert not row.checks["finite differences"].passed
    assert all(row.checks[name].passed for name in ("primal", "post", "pre"))  # pre and post agree


def test_the_command_fails_on_a_wrong_gradient(user_module: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture, bench_environment: None) -> None:
    wrong_gradients(monkeypatch)
    out = tmp_path / "out.json"
    status = isozyme_main(["bench", f"{user_module}:norm", "--args", "inputs(30)", "--min-time", "0.0",
                           "--json", str(out)])
    captured = capsys.readouterr()
    assert status == 1 and f"{MISMATCH} finite differences" in captured.out
    assert "against central finite differences" in captured.err
    assert json.loads(out.read_text())["passed"] is False


def test_the_primal_is_checked_against_the_python_function() -> None:
    """k * k wraps in the kernel's 64-bit integers, not in Python: the Python reference sees the difference,
    the kernel compiled without optimization (`reference="O0"`) does not."""
    x = np.array([1.5, 2.0])
    row = iz.compare(wraps, x, 2**32, min_time=0.0, check=False)
    assert not row.checks["primal"].passed
    assert all(row.checks[name].passed for name in ("post", "pre", "finite differences"))
    assert iz.compare(wraps, x, 2**32, min_time=0.0, reference="O0").passed


def test_compare_needs_a_kernel() -> None:
    with pytest.raises(TypeError, match="needs an @iz.kernel"):
        iz.compare(cubes.py_func, np.ones(3), 1.0)


# --- the package installed elsewhere --------------------------------------------------------------------------

def test_installed_package_runs_the_bench_from_any_directory(tmp_path: Path, user_module: Path) -> None:
    """A non-editable install of a copy of the package's files (no benchmarks/, no examples/) into a folder
    of its own, the only one on PYTHONPATH; the suite (its smallest benchmark) and a user kernel from a third
    folder."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "isozyme", source / "isozyme", ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path / "site"
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *isolation,
                              "--target", str(site), str(source)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    run = tmp_path / "run"
    run.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}

    def bench(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "isozyme", "bench", *argv], cwd=run, env=env,
                              capture_output=True, text=True, timeout=300)
    where = subprocess.run([sys.executable, "-c", "import isozyme.benchmark_suite as s; print(s.__file__)"],
                           cwd=run, env=env, capture_output=True, text=True, timeout=120)
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout + where.stderr
    suite_run = bench("--suite", "quick", "--only", "relu3", "--min-time", "0.01", "--json", "suite.json")
    assert suite_run.returncode == 0, suite_run.stderr
    data = json.loads((run / "suite.json").read_text())
    assert data["passed"] is True and {row["details"]["benchmark"] for row in data["rows"]} == {"relu3"}
    assert data["commit"] is None and data["dirty"] is None  # installed: no checkout
    assert "relu3" in suite_run.stdout and "geometric mean of pre/post" in suite_run.stdout
    user_run = bench(f"{user_module}:norm", "--args", "inputs(20)", "--min-time", "0.001")
    assert user_run.returncode == 0, user_run.stderr
    assert "IR instructions" in user_run.stdout


def test_the_readmes_command_runs(tmp_path: Path) -> None:
    """The README's "Your own kernel" command, word for word, on examples/norm.py copied as my_module.py."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = next(line for line in readme.splitlines() if line.startswith("python -m isozyme bench my_module.py:"))
    shutil.copy(ROOT / "examples" / "norm.py", tmp_path / "my_module.py")
    result = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "norm.json").read_text())
    assert data["passed"] is True and data["rows"][0]["size"] == "out[4000] x[4000] n=4000"
