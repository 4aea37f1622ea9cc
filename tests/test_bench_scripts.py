"""The scripts of benchmarks/ fail on a wrong answer (issue 22): each compares what its timed calls computed
with a reference (`isozyme/benchmark_checks.py`), and a result made wrong on purpose here (a perturbed
gradient, a perturbed value, in one call only where the script calls many times) is marked MISMATCH, written
to the JSON as {"passed": false, ...}, and makes the script exit with status 1; a correct run exits 0.
Every JSON follows the results schema (`isozyme/benchmark_suite/results.py`). Tiny sizes; times are not
checked. The OpenCL scripts run on PoCL (the CPU OpenCL of CI).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from opencl_conformance import needs_opencl

import isozyme as iz
from isozyme.benchmark_checks import MISMATCH
from isozyme.benchmark_suite.results import validate

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
TINY_GPU_RUN = ["--n", "4096", "--shared", "4096", "--naive", "1024", "--gmm", "20x3x4"]
"""opencl_gpu.py at sizes PoCL runs in seconds."""




def perturb_call(number: int) -> Callable[[np.ndarray], None]:
    """A function that, at its `number`-th call (1-based), changes an array in place by 1e-6 of its largest
    entry, and leaves it alone at every other call: a wrong result in one call of many."""
    calls = [0]

    def perturb(array: np.ndarray) -> None:
        calls[0] += 1
        if calls[0] == number:
            array.flat[0] += 1e-6 * max(float(np.max(np.abs(array))), 1.0)
    return perturb


def wrong_in_the_second_call(make_variant: Callable[..., tuple], key: str) -> Callable[..., tuple]:
    """A GPU script's `isozyme_variant` whose host copy of the result has `key` perturbed in its second call
    (`perturb_call(2)`): the script must report a mismatch."""
    def made(*args: Any) -> tuple:
        call, host = make_variant(*args)
        perturb = perturb_call(2)

        def perturbed(returned: Any) -> dict:
            result = host(returned)
            perturb(result[key])
            return result
        return call, perturbed
    return made


def report_of(path: Path) -> dict:
    """A script's JSON, which must follow the results schema."""
    report = json.loads(path.read_text())
    assert validate(report) == []
    return report


def by_variant(report: dict, problem: str | None = None, size: str | None = None) -> dict[str, dict]:
    """The rows of a report (of one problem, of one size) by variant."""
    return {row["variant"]: row for row in report["rows"]
            if problem in (None, row["problem"]) and size in (None, row["size"])}


def assert_warm_first_calls(rows: list[dict], names: set[str]) -> None:
    """A GPU script's rows (of one size) have, for each isozyme variant, the first call of a new process with
    the disk cache that run filled: a measured time, which a process that failed would have left None."""
    warm = {row["variant"]: row["warm_first_call_s"] for row in rows if "warm_first_call_s" in row}
    assert set(warm) == names and all(isinstance(seconds, float) and seconds > 0 for seconds in warm.values())


# --- opencl_gpu.py -------------------------------------------------------------------------------------------

@needs_opencl
def test_opencl_gpu_runs_end_to_end_and_checks_every_call(tmp_path: Path) -> None:
    output = tmp_path / "gpu.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "opencl_gpu.py"), *TINY_GPU_RUN, "--json", str(output)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert MISMATCH not in done.stdout and "checked: ok" in done.stdout
    report = report_of(output)
    assert report["passed"] is True and report["benchmark"] == "opencl_gpu"
    idle = [row for row in report["rows"] if row["size"] == "n=4096 from idle"]
    assert [(row["problem"], row["variant"], row["kind"]) for row in idle] == [
        ("device copy", "enqueue_copy", "peer"), ("device copy", "isozyme copy kernel", "natural"),
        ("elementwise primal", "isozyme", "natural"), ("elementwise gradient", "isozyme", "natural")]
    assert {row["check"]["calls"] for row in idle} == {6}  # warm-up and 5 timed
    assert all(row["check"]["passed"] for row in report["rows"])
    assert len(by_variant(report, "shared parameter gradient")) == 2
    gmm = by_variant(report, "gmm gradient")
    calls = [gmm[f"isozyme {name}"]["check"]["calls"] for name in
             ("prange, GPU (opencl)", "serial, CPU (llvm)", "prange, CPU (llvm)")]
    assert calls == [21, 3, 3]  # the GPU's warm-up and --repeat-checks 20
    assert all(row["check"]["error"] <= row["check"]["tolerance"] == 1e-10 for row in gmm.values())


@needs_opencl
@pytest.mark.parametrize("wrong", [2, 4, 5])  # the first call of the batch, the last, the profiled one
def test_opencl_gpu_in_a_row_checks_each_call_of_the_batch(wrong: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`back_to_back` compares every call of a batch with numpy: a gradient call whose d_x is off by 1e-6 of
    its scale fails the gradient's check (the 1st call compiles, the 2nd to 4th are the batch, the 5th is
    profiled), the primal's and the copy's still pass."""
    import opencl_gpu

    autodiff, perturb = iz.autodiff, perturb_call(wrong)

    def wrong_once(kernel: iz.Kernel, *args: Any, **options: Any) -> Any:
        returned = autodiff(kernel, *args, **options)
        d_x = args[1].shadow
        host = d_x.get()
        perturb(host)
        d_x.set(host)
        return returned
    monkeypatch.setattr(opencl_gpu.iz, "autodiff", wrong_once)
    _, checks = opencl_gpu.back_to_back(1000, 3)
    assert checks["copy"].passed and checks["primal"].passed and checks["copy"].calls == 3
    assert checks["primal"].calls == 4  # the batch and the profiled call
    assert not checks["gradient"].passed and checks["gradient"].calls == 4


@needs_opencl
def test_opencl_gpu_fails_on_a_wrong_gpu_gradient_in_one_call_of_twenty(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture) -> None:
    import opencl_gpu

    autodiff, perturb = iz.autodiff, perturb_call(12)

    def wrong_on_the_gpu(kernel: iz.Kernel, *args: Any, **options: Any) -> Any:
        returned = autodiff(kernel, *args, **options)
        if kernel is opencl_gpu.gmm_prange and options.get("backend") == "opencl":
            perturb(args[1].shadow)  # d_means, in the 12th of the GPU's 21 calls
        return returned
    monkeypatch.setattr(iz, "autodiff", wrong_on_the_gpu)
    output = tmp_path / "gpu.json"
    assert opencl_gpu.main([*TINY_GPU_RUN, "--json", str(output)]) == 1
    out, err = capsys.readouterr()
    gmm_line = next(line for line in out.splitlines() if line.startswith("GMM gradient"))
    assert MISMATCH in gmm_line and "gpu (opencl)" in gmm_line
    assert "MISMATCH: GMM n=20 d=3 K=4 gradient, gpu (opencl)" in err and "exit status 1" in err
    report = report_of(output)
    failed = [(row["problem"], row["variant"]) for row in report["rows"] if not row["check"]["passed"]]
    assert report["passed"] is False and failed == [("gmm gradient", "isozyme prange, GPU (opencl)")]
    assert by_variant(report, "gmm gradient")["isozyme prange, GPU (opencl)"]["check"]["error"] > 1e-10


# --- fusion.py ------------------------------------------------------------------------------------------------

@needs_opencl
def test_fusion_fails_on_a_wrong_gradient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fusion

    cases, perturb = fusion.cases, perturb_call(3)

    def heat_only_wrong_with_fusion(quick: bool, heat_sizes: list[int]) -> list[Any]:
        (case,) = cases(quick, heat_sizes)[1:]
        call = case.call

        def wrong() -> tuple[np.ndarray, ...]:
            gradient = call()
            if fusion.os.environ.get("ISOZYME_LOOP_FUSION") == "1":
                perturb(gradient[0])  # the timed call of the "on" setting
            return gradient
        case.call = wrong
        return [case]
    monkeypatch.setattr(fusion, "cases", heat_only_wrong_with_fusion)
    output = tmp_path / "fusion.json"
    assert fusion.main(["--quick", "--repeats", "1", "--heat", "50", "--json", str(output)]) == 1
    report = report_of(output)
    rows = by_variant(report, "heat gradient")
    assert report["passed"] is False and set(rows) == {"fusion off", "fusion on"}
    assert rows["fusion off"]["check"]["passed"] is True and rows["fusion off"]["check"]["calls"] == 3
    on = rows["fusion on"]["check"]
    assert on["passed"] is False and on["checks"]["gradient"]["passed"] is False
    assert on["checks"]["fusion on against off"]["passed"] is True  # the first calls agree: the third is wrong


# --- tape_bytes.py, optimizer_report.py, llvm_backend.py ---------------------------------------------------

def test_tape_bytes_checks_the_measured_gradient(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture) -> None:
    import tape_bytes

    assert tape_bytes.main(["--n", "6", "--steps", "2"]) == 0
    assert capsys.readouterr().out.count(" ok (") == 4
    run, perturb = tape_bytes._run, perturb_call(2)

    def wrong(function: Any, args: tuple) -> object:
        value = run(function, args)
        if isinstance(args[1], np.ndarray):  # a gradient's run (the primal's second argument is a float)
            perturb(args[1])  # the first shadow, in the second gradient measured (heat, opt="pre")
        return value
    monkeypatch.setattr(tape_bytes, "_run", wrong)
    assert tape_bytes.main(["--n", "6", "--steps", "2"]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("heat", "euler"))]
    assert [MISMATCH in row for row in rows] == [False, True, False, False]


def test_optimizer_report_checks_the_timed_modules(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    import optimizer_report

    assert optimizer_report.main(["--repeat", "1"]) == 0
    run_function = optimizer_report.interpreter.run_function
    monkeypatch.setattr(optimizer_report.interpreter, "run_function",
                        lambda *args, **kwargs: run_function(*args, **kwargs) * (1.0 + 1e-6))
    assert optimizer_report.main(["--repeat", "2"]) == 1
    out = capsys.readouterr().out
    assert f"{MISMATCH}: GMM objective after O2" in out and "over 2 call(s)" in out


def test_llvm_backend_checks_every_gmm_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Section 4 in process (the others start fresh processes): every call of every variant is checked."""
    import llvm_backend

    monkeypatch.setattr(llvm_backend, "CHECKS", {})
    llvm_backend.measure_gmm([(2, 3, 10)], min_time=0.0, min_rounds=3)
    checks = llvm_backend.CHECKS
    assert all(check.passed and check.calls >= 4 for check in checks.values()) and "gmm d=2 K=3 n=10 isozyme" in checks
    assert llvm_backend.exit_status(checks.values(), "llvm_backend.py") == 0
    gmm = sys.modules["isozyme_example_gmm"]
    objective, calls = gmm.gmm_objective, [0]

    def wrong_in_the_fourth_call(*args: Any) -> float:
        calls[0] += 1
        return objective(*args) * (1.0 + 1e-6 * (calls[0] == 4))
    monkeypatch.setattr(gmm, "gmm_objective", wrong_in_the_fourth_call)
    monkeypatch.setattr(llvm_backend, "CHECKS", {})
    llvm_backend.measure_gmm([(2, 3, 10)], min_time=0.0, min_rounds=3)
    checks = llvm_backend.CHECKS
    assert not checks["gmm d=2 K=3 n=10 isozyme"].passed and checks["gmm d=2 K=3 n=10 numpy"].passed
    assert llvm_backend.exit_status(checks.values(), "llvm_backend.py") == 1


# --- dispatch.py -----------------------------------------------------------------------------------------------

def test_dispatch_runs_and_fails_on_a_wrong_gradient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dispatch

    output = tmp_path / "dispatch.json"
    assert dispatch.main(["--number", "20", "--repeat", "2", "--json", str(output)]) == 0
    report = report_of(output)
    assert report["passed"] is True and by_variant(report, "first(x) gradient")["iz.grad"]["check"]["calls"] == 2
    variants = dispatch.variants

    def one_wrong_call() -> dict:
        table = variants()
        function, arguments, read, expected = table["iz.grad(first)(x)"]
        calls = [0]

        def sometimes_wrong(*args: object) -> object:
            calls[0] += 1
            result = function(*args)
            return result + 1e-6 if calls[0] == 1 else result  # the call checked before the samples
        table["iz.grad(first)(x)"] = (sometimes_wrong, arguments, read, expected)
        return table
    monkeypatch.setattr(dispatch, "variants", one_wrong_call)
    assert dispatch.main(["--number", "20", "--repeat", "2", "--json", str(output)]) == 1
    report = report_of(output)
    failed = [(row["problem"], row["variant"]) for row in report["rows"] if not row["check"]["passed"]]
    assert report["passed"] is False and failed == [("first(x) gradient", "iz.grad")]


# --- threads.py ------------------------------------------------------------------------------------------------

def test_threads_runs_and_fails_on_a_wrong_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threads

    output = tmp_path / "threads.json"
    assert threads.main(["--quick", "--repeats", "2", "--threads", "3", "--json", str(output)]) == 0
    report = report_of(output)
    assert report["passed"] is True and report["parameters"]["threads"] == 3
    assert len({(row["problem"], row["size"]) for row in report["rows"]}) == 4
    assert report["rows"][0]["variant"] == "prange 3 threads"
    compute = threads.compute_prange
    calls = [0]

    def sometimes_wrong(out: np.ndarray, x: np.ndarray, terms: int) -> float:
        calls[0] += 1
        total = compute(out, x, terms)
        if calls[0] == 3:  # one timed call of the threaded variant
            out[7] += 1e-9
        return total
    monkeypatch.setattr(threads, "compute_prange", sometimes_wrong)
    assert threads.main(["--quick", "--repeats", "2", "--json", str(output)]) == 1
    report = report_of(output)
    assert report["passed"] is False and report["rows"][0]["check"]["passed"] is False
    assert report["rows"][0]["variant"] == f"prange {iz.get_num_threads()} threads"
    assert all(row["check"]["passed"] for row in report["rows"][1:])


# --- gmm_cpu.py ------------------------------------------------------------------------------------------------

def test_gmm_cpu_runs_and_fails_on_a_wrong_gradient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gmm_cpu

    output = tmp_path / "gmm_cpu.json"
    tiny = ["--sizes", "3x4", "--n", "40", "--repeats", "2", "--json", str(output)]
    assert gmm_cpu.main(tiny) == 0
    report = report_of(output)
    assert report["passed"] is True and by_variant(report)["isozyme by component"]["kind"] == "tuned"
    variants = gmm_cpu.variants

    def one_wrong(d: int, K: int, n: int) -> tuple:
        args, table = variants(d, K, n)
        call, tolerance = table["isozyme prange"]
        calls = [0]

        def sometimes_wrong() -> tuple:
            calls[0] += 1
            alphas, means, icf = call()
            return (alphas + 1e-6, means, icf) if calls[0] == 2 else (alphas, means, icf)
        table["isozyme prange"] = (sometimes_wrong, tolerance)
        return args, table
    monkeypatch.setattr(gmm_cpu, "variants", one_wrong)
    assert gmm_cpu.main(tiny) == 1
    failed = [row["variant"] for row in report_of(output)["rows"] if not row["check"]["passed"]]
    assert failed == ["isozyme prange"]


# --- transformer_training.py ---------------------------------------------------------------------------------

def _restoring_threads(main: Callable[[list[str]], int], threads: tuple[int, int]) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        import torch

        try:
            return main(argv)
        finally:
            iz.set_num_threads(threads[0])
            torch.set_num_threads(threads[1])
    return run


def test_transformer_training_checks_every_loss_curve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    """A correct tiny run passes; a loss off by 1e-6 relative in one step of isozyme's curve fails the row."""
    pytest.importorskip("torch")
    import importlib

    import transformer_training

    transformer = importlib.import_module("transformer")  # examples/transformer.py, on the script's path

    torch = pytest.importorskip("torch")
    threads = (iz.get_num_threads(), torch.get_num_threads())  # main() sets both; put them back after
    monkeypatch.setattr(transformer_training, "main", _restoring_threads(transformer_training.main, threads))
    arguments = ["--quick", "--depths", "1", "--steps", "3", "--variants", "strict", "--threads", "1",
                 "--rounds", "2"]
    assert transformer_training.main([*arguments, "--json", str(tmp_path / "good.json")]) == 0
    report = report_of(tmp_path / "good.json")
    isozyme = by_variant(report)["isozyme"]
    assert report["passed"] is True and len(isozyme["details"]["losses"]) == 3
    assert isozyme["details"]["rounds"] == 2  # steps 0, then 1 and 2: each curve still in step order
    step, calls = transformer.Trainer.step, [0]

    def wrong_in_the_second_step(self: Any, batch: Any) -> float:
        calls[0] += 1
        return step(self, batch) * (1.0 + (1e-6 if calls[0] == 2 else 0.0))
    monkeypatch.setattr(transformer.Trainer, "step", wrong_in_the_second_step)
    assert transformer_training.main([*arguments, "--json", str(tmp_path / "bad.json")]) == 1
    assert MISMATCH in capsys.readouterr().out
    rows = by_variant(report_of(tmp_path / "bad.json"))
    assert rows["isozyme"]["check"]["passed"] is False
    assert rows["torch.compile"]["check"]["passed"] is True and rows["torch eager"]["check"]["passed"] is True


@pytest.mark.parametrize(("steps", "rounds"), [(100, 5), (10, 3), (3, 5), (7, 1), (2, 2)])
def test_transformer_training_rounds_cover_every_step_once_in_order(steps: int, rounds: int) -> None:
    import transformer_training

    parts = transformer_training.rounds_of(steps, rounds)
    assert [k for part in parts for k in part] == list(range(steps))
    assert len(parts) == min(steps, rounds) and all(len(part) >= 1 for part in parts)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


@needs_opencl
def test_transformer_training_trains_the_gpu_kernel_on_opencl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--backend opencl --variants pairs`: `transformer_gpu_kernels.GpuTrainer` trains on the device and its
    loss curve is checked against torch eager's like any variant's (a wrong curve failing the row is
    `test_transformer_training_checks_every_loss_curve`'s)."""
    torch = pytest.importorskip("torch")
    import transformer_training

    threads = (iz.get_num_threads(), torch.get_num_threads())
    monkeypatch.setattr(transformer_training, "main", _restoring_threads(transformer_training.main, threads))
    arguments = ["--quick", "--depths", "2", "--steps", "3", "--backend", "opencl", "--variants", "pairs",
                 "--threads", "1", "--json", str(tmp_path / "pairs.json")]
    assert transformer_training.main(arguments) == 0
    variants = by_variant(report_of(tmp_path / "pairs.json"))
    assert set(variants) == {"isozyme pairs", "torch eager", "torch.compile"}
    pairs = variants["isozyme pairs"]
    assert pairs["check"]["passed"] and len(pairs["details"]["losses"]) == 3 and pairs["kind"] == "tuned"


# --- ba_gpu.py -------------------------------------------------------------------------------------------------

@needs_opencl
def test_ba_gpu_runs_and_fails_on_a_wrong_gradient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ba_gpu

    output = tmp_path / "ba_gpu.json"
    tiny = ["--sizes", "3x12x40", "--peers", "", "--serial", "--repeats", "2", "--json", str(output)]
    assert ba_gpu.main(tiny) == 0
    report = report_of(output)
    assert report["passed"] is True and set(by_variant(report)) == {"isozyme parallel", "isozyme serial"}
    assert all(row["check"]["calls"] == 3 and row["kind"] == "natural" for row in report["rows"])
    assert_warm_first_calls(report["rows"], {"isozyme parallel", "isozyme serial"})
    monkeypatch.setattr(ba_gpu, "isozyme_variant", wrong_in_the_second_call(ba_gpu.isozyme_variant, "d_cams"))
    assert ba_gpu.main(tiny) == 1
    report = report_of(output)
    assert report["passed"] is False and not any(row["check"]["passed"] for row in report["rows"])


# --- lstm_gpu.py ------------------------------------------------------------------------------------------------

@needs_opencl
def test_lstm_gpu_runs_and_fails_on_a_wrong_gradient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lstm_gpu

    output = tmp_path / "lstm_gpu.json"
    tiny = ["--sizes", "l2c6b3,l1c5", "--peers", "", "--repeats", "2", "--json", str(output)]
    assert lstm_gpu.main(tiny) == 0
    rows = report_of(output)["rows"]
    assert [(row["size"], row["variant"]) for row in rows] == [("l=2 c=6 b=3", "isozyme"), ("l=1 c=5 b=14", "isozyme")]
    assert all(row["check"]["calls"] == 3 for row in rows)
    for row in rows:
        assert_warm_first_calls([row], {"isozyme"})
    with pytest.raises(SystemExit):
        lstm_gpu.main(["--sizes", "2x6"])
    monkeypatch.setattr(lstm_gpu, "isozyme_variant", wrong_in_the_second_call(lstm_gpu.isozyme_variant,
                                                                              "d_extra_params"))
    assert lstm_gpu.main(tiny) == 1
    assert not report_of(output)["rows"][0]["check"]["passed"]


# --- mlp_gpu.py -------------------------------------------------------------------------------------------------

@needs_opencl
def test_mlp_gpu_runs_and_fails_on_a_wrong_gradient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlp_gpu

    output = tmp_path / "mlp_gpu.json"
    tiny = ["--sizes", "5x7x3x4", "--peers", "", "--repeats", "2", "--json", str(output)]
    assert mlp_gpu.main(tiny) == 0
    report = report_of(output)
    rows = by_variant(report)
    assert report["passed"] is True and set(rows) == {"isozyme", "isozyme pairs"}
    assert (rows["isozyme"]["kind"], rows["isozyme pairs"]["kind"]) == ("natural", "tuned")
    assert all(row["check"]["calls"] == 3 for row in report["rows"])
    assert_warm_first_calls(report["rows"], {"isozyme", "isozyme pairs"})
    monkeypatch.setattr(mlp_gpu, "isozyme_variant", wrong_in_the_second_call(mlp_gpu.isozyme_variant, "d_W2"))
    assert mlp_gpu.main(tiny) == 1
    assert not any(row["check"]["passed"] for row in report_of(output)["rows"])


# --- gmm_gpu.py ------------------------------------------------------------------------------------------------

@needs_opencl
def test_gmm_gpu_runs_and_fails_on_a_wrong_gradient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gmm_gpu

    output, picture = tmp_path / "gmm_gpu.json", tmp_path / "gmm_gpu.svg"
    tiny = ["--sizes", "30x3x4", "--precisions", "f64,f32", "--peers", "", "--repeats", "2", "--json", str(output),
            "--plot", str(picture)]
    assert gmm_gpu.main(tiny) == 0
    report = report_of(output)
    keys = {f"{row['variant']} {row['size'].split()[-1]}" for row in report["rows"]}
    assert report["passed"] is True and keys == {
        "isozyme pairs f64", "isozyme pairs_qmu f64", "isozyme staged f64", "isozyme blocked f64",
        "isozyme blocked_qmu f64", "isozyme points f64", "isozyme pairs f32", "isozyme pairs_qmu f32",
        "isozyme staged f32", "isozyme blocked f32", "isozyme blocked_qmu f32"}
    assert {row["variant"] for row in report["rows"] if row["kind"] == "natural"} == {"isozyme points"}
    assert picture.read_text().count("<rect x=") >= 3
    one = ["--sizes", "30x3x4", "--precisions", "f64", "--peers", "", "--repeats", "2", "--variants", "pairs_qmu",
           "--json", str(output)]
    assert gmm_gpu.main(one) == 0
    assert [(row["size"], row["variant"]) for row in report_of(output)["rows"]] == [
        ("n=30 d=3 K=4 f64", "isozyme pairs_qmu")]
    with pytest.raises(SystemExit):
        gmm_gpu.main([*one[:-2], "--variants", "pairs,qmu"])
    monkeypatch.setattr(gmm_gpu, "isozyme_variant", wrong_in_the_second_call(gmm_gpu.isozyme_variant, "d_means"))
    assert gmm_gpu.main(tiny) == 1
    report = report_of(output)
    f64, f32 = by_variant(report, size="n=30 d=3 K=4 f64"), by_variant(report, size="n=30 d=3 K=4 f32")
    assert not any(f64[f"isozyme {name}"]["check"]["passed"]
                   for name in ("pairs", "pairs_qmu", "staged", "blocked", "blocked_qmu", "points"))
    assert all(f32[f"isozyme {name}"]["check"]["passed"]  # 1e-6 of the largest entry is within f32's tolerance
               for name in ("pairs", "pairs_qmu", "staged", "blocked", "blocked_qmu"))


# --- transformer_parts.py ------------------------------------------------------------------------------------

def test_transformer_parts_checks_every_part_against_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    """A correct tiny run passes with a row per part and the layer's sum; a gradient off by 1e-6 in one part
    (the GELU's), in its first call or in the mean of its timed calls, fails that row and the run, and no
    other row."""
    torch = pytest.importorskip("torch")
    import transformer_parts

    threads = (iz.get_num_threads(), torch.get_num_threads())
    monkeypatch.setattr(transformer_parts, "main", _restoring_threads(transformer_parts.main, threads))
    default_dtype = torch.get_default_dtype()  # main() sets f64
    arguments = ["--quick", "--repeats", "1", "--threads", "1"]
    adjoints = transformer_parts.Part.adjoints
    try:
        assert transformer_parts.main([*arguments, "--json", str(tmp_path / "good.json")]) == 0
        report = report_of(tmp_path / "good.json")
        assert report["passed"] is True
        assert list(dict.fromkeys(row["problem"] for row in report["rows"])) == [
            f"{part} gradient" for part in [*transformer_parts.LAYER_USES, "layer (sum)"]]
        assert {row["variant"]: row["check"]["passed"] for row in report["rows"][:3]} == {
            "isozyme": True, "torch eager": None, "torch.compile": None}  # torch: the reference, and data
        for wrong_call in (1, 2):  # the first call's gradient; the timed calls' mean
            perturb = perturb_call(wrong_call)

            def wrong_gelu(self: Any, calls: int = 1, perturb: Callable = perturb) -> dict:
                result = adjoints(self, calls)
                if self.name == "gelu":
                    perturb(result["x"])
                return result
            monkeypatch.setattr(transformer_parts.Part, "adjoints", wrong_gelu)
            bad = tmp_path / f"bad{wrong_call}.json"
            assert transformer_parts.main([*arguments, "--json", str(bad)]) == 1
            assert MISMATCH in capsys.readouterr().out
            rows = {row["problem"]: row["check"]["passed"] for row in report_of(bad)["rows"]
                    if row["variant"] == "isozyme"}
            assert rows.pop("gelu gradient") is False and rows.pop("layer (sum) gradient") is False
            assert all(rows.values())
    finally:
        torch.set_default_dtype(default_dtype)
