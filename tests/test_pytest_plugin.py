"""The pytest plugin (`isozyme/pytest_plugin.py`, entry point `pytest11`), run in-process by `pytester` on a
test file with kernels: a failing test's report has a section with the IR of the kernels it used, at the
stages of `--isozyme-ir`; a passing test shows it only with `--isozyme-ir-all`."""

from __future__ import annotations

import re

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64
from isozyme.runtime import compile_log

pytest_plugins = ["pytester"]


@iz.kernel
def total(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += x[i]
    return s

KERNELS = '''
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
def twice(out: Array[f64], x: Array[f64]):
    for i in range(len(x)):
        out[i] = 2.0 * x[i]


@iz.kernel
def broken(x: Array[f64]) -> f64:
    return x.nope
'''

TESTS = '''
import numpy as np
import isozyme as iz
from plugin_demo_kernels import broken, mag, twice


def test_primal_passes():
    assert mag(np.ones(4), 4) == 2.0


def test_primal_fails():
    assert mag(np.ones(4), 4) == 3.0


def test_gradient_fails():
    g = iz.grad(mag)(np.ones(4), 4)
    assert g[0] == 1.0


def test_forward_fails():
    _, tangent = iz.fwddiff(mag, iz.Duplicated(np.ones(4), np.ones(4)), iz.Const(4))
    assert tangent == 0.0


def test_plain_python_fails():
    assert 1 == 2


def test_compile_error_fails():
    broken(np.ones(2))
'''


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(plugin_demo_kernels=KERNELS, test_uses_kernels=TESTS)
    pytester.syspathinsert()
    return pytester


def _sections(output: str) -> dict[str, str]:
    """Each test's failure text, by test name (pytest's `____ test_x ____` headers)."""
    parts = re.split(r"^_{3,} (test_\w+) _{3,}$", output, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_a_failing_test_shows_the_ir_of_its_kernels(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=5)
    output = result.stdout.str()
    failures = _sections(output)
    primal = failures["test_primal_fails"]
    assert "isozyme IR (opt, grad-opt)" in primal
    assert "; === kernel mag (O2, llvm): stage opt ===\nfunc @mag(%x: f64[?], %n: i64) -> f64" in primal
    assert "stage grad-opt" not in primal  # no derivative used: nothing at that stage
    gradient = failures["test_gradient_fails"]
    assert "; === kernel mag (O2, llvm): stage opt ===" in gradient
    assert "; === kernel mag (reverse, activity dup,const, opt=post, llvm): stage grad-opt ===\n" \
           "func @diffe_mag(%x: f64[?], %d_x: f64[?], %n: i64, %differet: f64)" in gradient
    assert gradient.index("stage opt") < gradient.index("stage grad-opt")
    assert "isozyme IR" not in failures["test_plain_python_fails"]
    assert "stage opt ===\n; (no IR: CompileError:" in failures["test_compile_error_fails"]
    assert "isozyme IR of passing tests" not in output
    assert output.count("isozyme IR (") == 4  # primal, gradient, forward, compile error


def test_the_stages_option(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", "no:cacheprovider", "--isozyme-ir=ssa,fwd-opt", "-k", "forward or primal")
    result.assert_outcomes(passed=1, failed=2)
    failures = _sections(result.stdout.str())
    forward = failures["test_forward_fails"]
    assert "isozyme IR (ssa, fwd-opt)" in forward
    assert "stage ssa ===\nfunc @mag(" in forward and "stage opt ===" not in forward
    assert "; === kernel mag (forward, activity dup,const, opt=post, llvm): stage fwd-opt ===\n" \
           "func @fwddiffe_mag(" in forward
    assert "stage fwd-opt" not in failures["test_primal_fails"]


def test_passing_tests_show_it_with_ir_all(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", "no:cacheprovider", "--isozyme-ir-all", "-k", "primal_passes")
    result.assert_outcomes(passed=1)
    output = result.stdout.str()
    assert "isozyme IR of passing tests" in output
    assert "test_uses_kernels.py::test_primal_passes: isozyme IR (opt, grad-opt)" in output
    assert "; === kernel mag (O2, llvm): stage opt ===\nfunc @mag(" in output
    quiet = project.runpytest("-p", "no:cacheprovider", "-k", "primal_passes")
    assert "isozyme IR" not in quiet.stdout.str()


def test_a_kernel_compiled_by_an_earlier_test_is_listed(project: pytest.Pytester) -> None:
    """test_primal_passes compiles mag (and binds it); test_primal_fails only calls it."""
    result = project.runpytest("-p", "no:cacheprovider", "-k", "primal")
    result.assert_outcomes(passed=1, failed=1)
    assert "stage opt ===\nfunc @mag(" in _sections(result.stdout.str())["test_primal_fails"]


def test_the_plugin_can_be_turned_off_and_checks_its_option(project: pytest.Pytester) -> None:
    off = project.runpytest("-p", "no:cacheprovider", "-p", "no:isozyme", "-k", "primal_fails")
    off.assert_outcomes(failed=1)
    assert "isozyme IR" not in off.stdout.str()
    wrong = project.runpytest("-p", "no:cacheprovider", "--isozyme-ir=opt,gradopt")
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown stage(s) gradopt" in wrong.stderr.str()



def test_the_compile_log_nests_and_rebinds_without_cost() -> None:
    compile_log.start()
    total(np.ones(2))  # compiled (or found compiled) and bound, seen by the log
    compile_log.stop()
    entry = total.compile().entry
    compile_log.start()
    assert total._call is not entry  # rebound to record its next call
    total(np.ones(2))
    assert total._call is entry  # and bound back: later calls cost what they did
    compile_log.start()
    iz.grad(total)(np.ones(3))
    inner = compile_log.stop()
    outer = compile_log.stop()
    assert [r.describe() for r in inner] == ["kernel total (reverse, activity dup, opt=post, llvm)"]
    assert [r.describe() for r in outer] == ["kernel total (O2, llvm)", *[r.describe() for r in inner]]
