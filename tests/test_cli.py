"""The command line: `isozyme opt` and `isozyme run`, in-process through `main` and once as a subprocess."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from isozyme.__main__ import main

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_opt_prints_mag_back_unchanged(capsys) -> None:
    status, out, _ = run_cli(capsys, "opt", str(EXAMPLES / "mag.ir"))
    assert status == 0 and out == (EXAMPLES / "mag.ir").read_text()


def test_run_mag_matches_python(capsys) -> None:
    xs = [0.5, -2.25, 3.0, 7.125]
    status, out, _ = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", repr(xs), str(len(xs)))
    assert status == 0 and float(out) == math.sqrt(sum(x * x for x in xs))


def test_run_prints_changed_arrays(capsys) -> None:
    xs = [3.0, 4.0, 12.0]
    status, out, _ = run_cli(capsys, "run", str(EXAMPLES / "norm.ir"), "@norm", "[0, 0, 0]", repr(xs), "3")
    norm = math.sqrt(sum(x * x for x in xs))
    assert status == 0 and out == f"%out = {[x / norm for x in xs]!r}\n"


def test_run_reports_a_bounds_error_with_the_ir_line(capsys) -> None:
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[1.0]", "2")
    assert status == 1
    assert "IndexError" in err and "mag.ir:10" in err and "(1,)" in err


def test_run_checks_its_arguments(capsys) -> None:
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[1.0]")
    assert status == 1 and "@mag takes 2 argument(s), got 1" in err
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[[1.0]]", "1")
    assert status == 1 and "expected a 1-d array, got 2-d" in err
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@nope")
    assert status == 1 and "no function @nope" in err


def test_run_refuses_arguments_of_the_wrong_kind(capsys) -> None:
    """2.7 for an i64 parameter is an error, never silently truncated to 2."""
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[3.0, 4.0]", "2.7")
    assert status == 1 and "argument %n: expected an integer for i64, got 2.7" in err
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[3.0, 4.5]", "true")
    assert status == 1 and "argument %n: expected an integer for i64, got true" in err
    status, _, err = run_cli(capsys, "run", str(EXAMPLES / "mag.ir"), "@mag", "[3.0, 4.5]", "[2]")
    assert status == 1 and "argument %n: expected a scalar i64, got a list" in err


def test_run_step_limit(capsys, tmp_path: Path) -> None:
    spin = tmp_path / "spin.ir"
    spin.write_text("func @spin() {\nbb0:\n  br bb1\nbb1:\n  br bb1\n}\n")
    status, _, err = run_cli(capsys, "run", str(spin), "@spin", "--step-limit", "1000")
    assert status == 1 and "StepLimitExceeded" in err


def test_opt_rejects_unknown_pass_and_bad_files(capsys, tmp_path: Path) -> None:
    status, _, err = run_cli(capsys, "opt", str(EXAMPLES / "mag.ir"), "-p", "frobnicate")
    assert status == 1 and "unknown pass 'frobnicate'" in err
    broken = tmp_path / "broken.ir"
    broken.write_text("func @f() {\nbb0:\n  ret %x\n}\n")
    status, _, err = run_cli(capsys, "opt", str(broken))
    assert status == 1 and f"{broken}:3:7: error: use of undefined value %x" in err and "^" in err
    status, _, err = run_cli(capsys, "opt", str(tmp_path / "missing.ir"))
    assert status == 1 and "No such file" in err


def test_module_entry_point_runs_as_a_subprocess() -> None:
    result = subprocess.run([sys.executable, "-m", "isozyme", "run", str(EXAMPLES / "mag.ir"), "@mag",
                             "[3.0, 4.0]", "2"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "5.0\n"


# --- isozyme ir: every stage, --dot, --color -----------------------------------------------------------------

SMALL_KERNEL = '''
import isozyme as iz
from isozyme import Array, f64, i64


@iz.kernel
def total(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        if x[i] > 0.0:
            s += x[i] * x[i]
    return s
'''

STAGE_MARKERS = {"ssa": "func @total(", "opt": "func @total(", "grad": "func @diffe_total(",
                 "grad-opt": "func @diffe_total(", "fwd": "func @fwddiffe_total(", "fwd-opt": "func @fwddiffe_total(",
                 "llvm": 'define internal double @"iz_total"', "llvm-opt": "@iz_total__raw(", "opencl": "__kernel void"}


@pytest.fixture
def kernel_file(tmp_path: Path) -> Path:
    path = tmp_path / "small_kernel.py"
    path.write_text(SMALL_KERNEL)
    return path


@pytest.mark.parametrize("stage", list(STAGE_MARKERS))
def test_ir_prints_every_stage(capsys, kernel_file: Path, stage: str) -> None:
    activity = ["--activity", "dup,const"] if stage.startswith(("grad", "fwd")) else []
    status, out, err = run_cli(capsys, "ir", f"{kernel_file}:total", "--stage", stage, *activity)
    assert status == 0, err
    assert STAGE_MARKERS[stage] in out and "\x1b[" not in out  # captured output is not a terminal


@pytest.mark.parametrize(("stage", "marker"), [("llvm", '@"iz_diffe_total"'), ("llvm-opt", "@iz_diffe_total__raw("),
                                               ("opencl", "// diffe_total: the gradient of total")])
def test_code_stages_show_the_gradient_given_an_activity(capsys, kernel_file: Path, stage: str, marker: str) -> None:
    _, primal, _ = run_cli(capsys, "ir", f"{kernel_file}:total", "--stage", stage)
    status, out, err = run_cli(capsys, "ir", f"{kernel_file}:total", "--stage", stage, "--activity", "dup,const")
    assert status == 0, err
    assert out != primal and marker in out


def _dot_statements(text: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """Nodes (id -> fill color) and edges (source, target, label) of the dot files `cfg_dot` writes; checks
    that braces balance outside strings and that every string is closed."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            escaped, in_string = (not escaped and char == "\\"), in_string and (escaped or char != '"')
        elif char == '"':
            in_string = True
        elif char in "{}":
            depth += 1 if char == "{" else -1
            assert depth >= 0
    assert depth == 0 and not in_string
    nodes = dict(re.findall(r'^\s*("[^"]+") \[label=".*?(?<!\\)", fillcolor="(#[0-9a-f]{6})"', text, re.MULTILINE))
    edges = re.findall(r'^\s*("[^"]+") -> ("[^"]+")(?: \[label="(\w+)"\])?;$', text, re.MULTILINE)
    return nodes, edges


def test_dot_writes_a_cfg_with_primal_and_adjoint_colors(capsys, kernel_file: Path, tmp_path: Path) -> None:
    from isozyme.ssa.dot import ADJOINT_COLOR, PRIMAL_COLOR

    dot = tmp_path / "cfg.dot"
    status, out, err = run_cli(capsys, "ir", f"{kernel_file}:total", "--stage", "grad-opt", "--activity",
                               "dup,const", "-O", "pre", "--dot", str(dot))
    assert status == 0, err and "diffe_total" in out
    text = dot.read_text()
    assert text.startswith("digraph") and "subgraph cluster_0" in text and 'label="@diffe_total"' in text
    nodes, edges = _dot_statements(text)
    assert set(nodes.values()) == {PRIMAL_COLOR, ADJOINT_COLOR}
    assert all(nodes[f'"f0.{name}"'] == ADJOINT_COLOR for name in ("exit",) if f'"f0.{name}"' in nodes)
    assert any(".rev" in node and color == ADJOINT_COLOR for node, color in nodes.items())
    assert all(color == PRIMAL_COLOR for node, color in nodes.items() if node == '"f0.entry"')
    assert {source for source, _, _ in edges} <= set(nodes) and {target for _, target, _ in edges} <= set(nodes)
    labels = [label for _, _, label in edges if label]
    assert labels and labels.count("true") == labels.count("false")
    assert "\\l" in text  # left-aligned instruction lines


def test_dot_of_a_primal_stage_has_one_cluster_per_function(capsys, tmp_path: Path) -> None:
    from isozyme.ssa.dot import PRIMAL_COLOR

    dot = tmp_path / "norm.dot"
    status, _, err = run_cli(capsys, "ir", f"{EXAMPLES / 'norm.py'}:norm", "--stage", "ssa", "--dot", str(dot))
    assert status == 0, err
    text = dot.read_text()
    assert 'label="@mag"' in text and 'label="@norm"' in text and "cluster_1" in text
    nodes, _ = _dot_statements(text)
    assert set(nodes.values()) == {PRIMAL_COLOR}
    status, _, err = run_cli(capsys, "ir", f"{EXAMPLES / 'norm.py'}:norm", "--stage", "llvm", "--dot", str(dot))
    assert status == 1 and "--dot draws the SSA stages" in err


def test_color_always_and_never(capsys, kernel_file: Path) -> None:
    from isozyme.highlight import STYLES, strip_ansi

    _, plain, _ = run_cli(capsys, "ir", f"{kernel_file}:total", "--stage", "opt", "--color", "never")
    status, colored, _ = run_cli(capsys, "ir", f"{kernel_file}:total", "--stage", "opt", "--color=always")
    assert status == 0 and "\x1b[" not in plain and strip_ansi(colored) == plain
    for kind in ("opcode", "value", "type", "label", "comment"):
        assert STYLES[kind] in colored, kind
    _, c_code, _ = run_cli(capsys, "ir", f"{kernel_file}:total", "--stage", "opencl", "--color=always")
    assert "\x1b[" in c_code


def test_dot_also_writes_an_svg_when_graphviz_is_installed(capsys, kernel_file: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in `dot` on PATH records its arguments: the CLI calls `dot -Tsvg FILE -o FILE.svg`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "dot"
    fake.write_text(f"#!{sys.executable}\nimport sys, shutil\nassert sys.argv[1] == '-Tsvg'\n"
                    "shutil.copy(sys.argv[2], sys.argv[4])\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    dot = tmp_path / "cfg.dot"
    status, _, err = run_cli(capsys, "ir", f"{kernel_file}:total", "--stage", "opt", "--dot", str(dot))
    assert status == 0, err
    assert (tmp_path / "cfg.svg").read_text() == dot.read_text()


def test_no_color_when_piped(kernel_file: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "isozyme", "ir", f"{kernel_file}:total", "--stage", "opt"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "func @total(" in result.stdout and "\x1b[" not in result.stdout


def test_dot_rule_and_escaping() -> None:
    from isozyme.ssa.dot import cfg_dot, escape, is_adjoint_block
    from isozyme.ssa.parser import parse_module

    module = parse_module('func @diffe_f(%c: i1) {\nentry:\n  assert %c, "say \\"hi\\" \\\\ bye"\n'
                          '  cbr %c, for.body.rev, exit\nfor.body.rev:\n  br exit\nexit:\n  ret\n}\n')
    function = module["diffe_f"]
    assert [is_adjoint_block(function, label) for label in ("entry", "for.body.rev", "exit", "a.rev.b.1")] == \
        [False, True, True, True]
    assert not is_adjoint_block(module["diffe_f"], "rev.entry")  # an inlined kernel named rev
    assert escape('a "b" \\ c\nd') == 'a \\"b\\" \\\\ c\\ld\\l'
    text = cfg_dot(module)
    assert '"f0.entry" -> "f0.for.body.rev" [label="true"];' in text
    assert '"f0.entry" -> "f0.exit" [label="false"];' in text and '"f0.for.body.rev" -> "f0.exit";' in text
