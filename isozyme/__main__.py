"""The command line: `python -m isozyme opt|run ...` (also installed as `isozyme`).

    isozyme opt FILE.ir [-p dce,O2,'inline<threshold=100>',...] [--verify-each] [--print-after-all]
                        [--print-after NAME] [--time-passes]
        parse, verify, run the passes, verify again, print the module (`-` reads stdin); IR dumps and
        the timing table go to stderr
    isozyme run FILE.ir @f ARG... [--step-limit N]
        interpret @f on the arguments and print its return value, then every array argument it changed
    isozyme ir FILE.py[:kernel] [--stage ssa|opt|grad|grad-opt|fwd|fwd-opt|llvm|llvm-opt|opencl] [-O PIPELINE]
                                [--activity const,dup,...] [--dot FILE.dot] [--color auto|always|never]
        print the IR of the kernels of a Python file at a stage of the compiler (with --activity, the
        llvm, llvm-opt and opencl stages show the gradient's code); --dot also writes its CFG for Graphviz
    isozyme bench [--suite quick|full] [--backend llvm|opencl] [--peers ...] [--json FILE] [--plot FILE]
        the main job: primal and gradient (opt="post" and "pre") times on the suite of isozyme/benchmark_suite,
        from any directory (isozyme/benchmarking.py)
    isozyme bench FILE.py:kernel --args EXPR [--args ...] [--activity dup,const,...] [--json FILE] [--plot FILE]
        the same on your kernel, with its IR sizes per stage and a finite-difference check
        (isozyme/kernel_comparison.py); exit status 2 for a bad spec or bad arguments

Arguments of `run` are Python literals read by the parameter's type: `3`, `2.5`, `true`, and nested
lists for arrays (`"[[1, 2], [3, 4]]"` for an `f64[?,?]`).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Sequence

import numpy as np

from isozyme.enzyme_ad.errors import DifferentiationError
from isozyme.frontend.diagnostics import CompileError
from isozyme.optimize.pass_manager import (
    PassError,
    PassOptions,
    format_statistics,
    format_timing_report,
    run_passes,
)
from isozyme.runtime.inspection import STAGES
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.parser import ParseError, parse_module
from isozyme.ssa.printer import print_module
from isozyme.ssa.types import ArrayType, ScalarType, Type
from isozyme.ssa.verifier import VerificationError, verify


class UsageError(Exception):
    """Bad command-line input (not an error in the IR)."""


def _read_module(path: str) -> Module:
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    module = parse_module(text, "<stdin>" if path == "-" else path)
    verify(module)
    return module


def command_opt(args: argparse.Namespace) -> int:
    module = _read_module(args.file)
    names = [name for group in args.passes for name in group.split(",") if name]
    options = PassOptions(verify_each=args.verify_each, print_after_all=args.print_after_all,
                          print_after=set(args.print_after), time_passes={} if args.time_passes else None,
                          statistics={} if args.stats else None)
    run_passes(module, names, options)
    verify(module)
    sys.stdout.write(print_module(module))
    if options.time_passes is not None:
        sys.stderr.write(format_timing_report(options.time_passes))
    if options.statistics is not None:
        sys.stderr.write(format_statistics(options.statistics))
    return 0


def parse_argument(text: str, ty: Type, name: str) -> object:
    """A command-line literal as a value of type `ty` (numpy array for arrays)."""
    literal = text.strip()
    if literal in ("true", "false"):
        literal = literal.capitalize()
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError):
        value = float(literal) if literal in ("inf", "-inf", "nan") else None
        if value is None:
            raise UsageError(f"argument %{name}: cannot read {text!r} as {ty}") from None
    if isinstance(ty, ArrayType):
        array = np.ascontiguousarray(np.array(value, dtype=ty.element.numpy_dtype))
        if array.ndim != ty.rank:
            raise UsageError(f"argument %{name}: expected a {ty.rank}-d array, got {array.ndim}-d")
        return array
    assert isinstance(ty, ScalarType)
    if isinstance(value, (list, tuple)):
        raise UsageError(f"argument %{name}: expected a scalar {ty}, got a list")
    accepted = _LITERAL_KINDS["bool" if ty.is_bool else "int" if ty.is_int else "float"]
    if type(value) not in accepted[1]:  # exact types: a bool is not an int here
        raise UsageError(f"argument %{name}: expected {accepted[0]} for {ty}, got {text}")
    return value if ty.is_bool or ty.is_int else float(value)


_LITERAL_KINDS = {"bool": ("true or false", (bool,)), "int": ("an integer", (int,)),
                  "float": ("a number", (int, float))}
"""What a scalar parameter accepts on the command line, so 2.7 never truncates into an i64."""


def _format_array(array: np.ndarray) -> str:
    """Nested lists of shortest round-tripping literals."""
    return repr(array.tolist())


def command_run(args: argparse.Namespace) -> int:
    from isozyme.ssa.interpreter import run_function

    module = _read_module(args.file)
    name = args.function.lstrip("@")
    if name not in module:
        raise UsageError(f"no function @{name} in {args.file} (has: "
                         f"{', '.join('@' + f for f in module.functions)})")
    function: Function = module[name]
    if len(args.args) != len(function.args):
        raise UsageError(f"@{name} takes {len(function.args)} argument(s), got {len(args.args)}")
    values = [parse_argument(text, param.type, param.name or str(i))
              for i, (text, param) in enumerate(zip(args.args, function.args))]
    before = [v.copy() if isinstance(v, np.ndarray) else None for v in values]
    result = run_function(function, *values, step_limit=args.step_limit)
    if result is not None:
        print(repr(result).lower() if isinstance(result, bool) else repr(result))
    for param, old, new in zip(function.args, before, values):
        if isinstance(new, np.ndarray) and not np.array_equal(old, new, equal_nan=True):
            print(f"%{param.name} = {_format_array(new)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="isozyme", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    opt = commands.add_parser("opt", help="parse, verify, optimize and print IR")
    opt.add_argument("file", help="an .ir file, or - for stdin")
    opt.add_argument("-p", "--passes", action="append", default=[],
                     help="comma-separated passes and pipelines (O0, O1, O2); parameters as 'inline<threshold=100>'")
    opt.add_argument("--verify-each", action="store_true", help="verify after every pass")
    opt.add_argument("--print-after-all", action="store_true", help="print the IR after every pass")
    opt.add_argument("--print-after", action="append", default=[], metavar="PASS", help="print after PASS")
    opt.add_argument("--time-passes", action="store_true", help="print each pass's wall time to stderr")
    opt.add_argument("--stats", action="store_true", help="print what each pass changed to stderr")
    opt.set_defaults(handler=command_opt)
    run = commands.add_parser("run", help="interpret a function of an .ir file")
    run.add_argument("file", help="an .ir file, or - for stdin")
    run.add_argument("function", help="the function to run, @name")
    run.add_argument("args", nargs="*", help="arguments as Python literals")
    run.add_argument("--step-limit", type=int, default=None, help="stop after this many instructions")
    run.set_defaults(handler=command_run)
    ir = commands.add_parser("ir", help="print a Python kernel's IR")
    ir.add_argument("kernel", help="FILE.py:kernel, or FILE.py for all its kernels")
    ir.add_argument("--stage", default="ssa", choices=STAGES,
                    help="ssa: as lowered; opt: optimized; grad, grad-opt: the reverse-mode gradient diffe_f "
                         "right after AD and optimized; fwd, fwd-opt: the same for forward mode (fwddiffe_f); "
                         "llvm: LLVM IR as emitted; llvm-opt: after LLVM's O3; opencl: the OpenCL C (these three "
                         "show the gradient's code when --activity is given)")
    ir.add_argument("-O", "--opt", default=None,
                    help="the pipeline of --stage opt (default O2); for the grad and fwd stages, and llvm, llvm-opt "
                         "and opencl with --activity: post, pre or none (default post)")
    ir.add_argument("--activity", default=None, type=lambda text: tuple(text.split(",")),
                    help="for the grad and fwd stages: const, dup or active per parameter, comma-separated; "
                         "with llvm, llvm-opt or opencl: show the code of the gradient diffe_f instead")
    ir.add_argument("--dot", default=None, metavar="FILE",
                    help="also write the CFG of the stage's functions as Graphviz (and FILE.svg when the dot "
                         "program is installed); adjoint blocks are colored apart from primal ones")
    ir.add_argument("--color", default="auto", choices=("auto", "always", "never"),
                    help="syntax highlighting: auto (when stdout is a terminal), always or never")
    ir.set_defaults(handler=command_ir)
    bench = commands.add_parser("bench", help="pre- against post-optimization gradients on the benchmark suite")
    from isozyme.benchmarking import add_arguments, command_bench
    add_arguments(bench)
    bench.set_defaults(handler=command_bench)
    return parser


def command_ir(args: argparse.Namespace) -> int:
    from isozyme.kernel_files import find_kernels
    from isozyme.runtime.inspection import show_ir

    try:
        kernels = find_kernels(args.kernel)
    except LookupError as error:
        raise UsageError(str(error)) from None
    texts = [show_ir(kernel, args.stage, args.opt, args.activity) for kernel in kernels]
    text = "\n".join(texts)
    if args.dot is not None:
        write_dot(args.dot, args.stage, texts)
    if args.color == "always" or (args.color == "auto" and sys.stdout.isatty()):
        from isozyme.highlight import highlight
        text = highlight(text, "c" if args.stage == "opencl" else "ssa")
    sys.stdout.write(text)
    return 0


DOT_STAGES = ("ssa", "opt", "grad", "grad-opt", "fwd", "fwd-opt")
"""The stages `--dot` draws: those printed in isozyme's SSA text form."""


def write_dot(path: str, stage: str, texts: Sequence[str]) -> None:
    """The Graphviz CFG of the functions of `texts` (the SSA text form, parsed back) into `path`, and
    `path` with the suffix .svg when Graphviz's `dot` is installed."""
    import shutil
    import subprocess
    from pathlib import Path

    from isozyme.ssa.dot import cfg_dot

    if stage not in DOT_STAGES:
        raise UsageError(f"--dot draws the SSA stages ({', '.join(DOT_STAGES)}), not {stage!r}")
    functions: dict[str, Function] = {}  # a callee shared by several kernels is drawn once
    for text in texts:
        for function in parse_module(text, f"<{stage}>"):
            functions.setdefault(function.name, function)
    Path(path).write_text(cfg_dot(functions.values(), f"isozyme {stage}"), encoding="utf-8")
    if shutil.which("dot") is not None:
        subprocess.run(["dot", "-Tsvg", path, "-o", str(Path(path).with_suffix(".svg"))], check=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (ParseError, VerificationError, UsageError, PassError, OSError, CompileError,
            DifferentiationError) as error:
        print(f"isozyme {args.command}: {error}", file=sys.stderr)
        return 1
    except PROGRAM_ERRORS as error:
        if args.command != "run":
            raise
        print(f"isozyme run: {type(error).__name__}: {error}", file=sys.stderr)
        return 1


PROGRAM_ERRORS = (ArithmeticError, IndexError, ValueError, AssertionError, RuntimeError)
"""What the interpreted program itself may raise (division by zero, bounds, assert, step limit)."""


if __name__ == "__main__":
    sys.exit(main())
