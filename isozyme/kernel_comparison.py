"""The bench on the user's own kernel: `python -m isozyme bench FILE.py:kernel --args EXPR` and `iz.compare`.

    python -m isozyme bench my_module.py:my_kernel --args "rng.random(1000), np.zeros(1000), 1000"
                            [--args ...] [--activity dup,dup,const] [--reference python|O0] [--min-time 0.2]
                            [--backend llvm|opencl] [--json FILE] [--plot FILE.svg]

The kernel is measured as a benchmark of the suite is (`isozyme/benchmarking.py`, same progress bar, table,
JSON and plot), one row per `--args`: the primal, the gradient of the optimized program (`opt="post"`) and of
the program as written (`opt="pre"`), their ratio pre/post and the compile times; and, below the table, the
size of the IR at each stage (`IR_STAGES`: instructions over the kernel and its callees, as `iz.show_ir`
prints them), where the optimizer's work shows before any timing does.

Arguments (`--args`): a Python expression giving the kernel's arguments in parameter order, evaluated with
`np` (numpy), `rng` (`np.random.default_rng(0)`, so runs repeat) and `iz` in scope, over the globals of the
kernel's module, so a function of the module can make them (`--args "make_inputs(1000)"`). A tuple is the
argument list; any other value is the single argument of a one-parameter kernel. Several `--args` give
several rows (a sweep of sizes).

Activity (`--activity`, as `isozyme ir` takes it: const, dup or active per parameter): by default every
float array is "dup", every float scalar "active", everything else (integers, booleans, integer arrays)
"const". The gradient differentiates L = (returned float, if any) + sum of <w_k, x_k> over the "dup" arrays
x_k the kernel may write (their values after the call), w_k fixed random weights uniform on [0, 1) (the
seeds of those shadows). A kernel with nothing to differentiate (no "dup" or "active" parameter, or no float
returned and no "dup" array written) is a ValueError.

Checks (`isozyme/benchmark_checks.py`), every call as in the suite: the primal against the undecorated
Python function run on the same inputs (`--reference python`, the default; it runs at Python speed, so for
large inputs `--reference O0` takes the kernel compiled without optimization instead); the gradients against
the reference gradient (`opt="pre"` on llvm); and that reference gradient against central finite
differences of L (computed with the compiled primal) per differentiated parameter
(`finite_difference_check`: along a random direction, `_direction`, and at a few entries; in f32 along the
direction only, with looser tolerances, `FD_CHECKS` and `F32_TOLERANCE`). A failed check is MISMATCH, exit
status 1 (`iz.compare` raises). A bad kernel spec or bad arguments are exit status 2 with the reason.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from isozyme import benchmark_suite as suite
from isozyme.benchmark_checks import Check, exit_status
from isozyme.benchmark_suite import results
from isozyme.benchmarking import Row, format_table, measure_rows, plot_svg, to_json
from isozyme.runtime.arguments import Parameter, check_arguments, writable_parameters
from isozyme.runtime.inspection import show_ir
from isozyme.runtime.kernel import Kernel
from isozyme.ssa.parser import parse_module
from isozyme.ssa.types import ArrayType, Type

IR_STAGES = (("ssa", "ssa", None), ("opt", "opt", None), ("grad post", "grad", "post"),
             ("grad-opt post", "grad-opt", "post"), ("grad pre", "grad", "pre"), ("grad-opt pre", "grad-opt", "pre"))
"""(column, `show_ir` stage, opt): the program as lowered and after O2, the gradient right after AD and after
the optimization that follows, for AD of the optimized program (post) and of the program as written (pre)."""
ACTIVITIES = ("const", "dup", "active")
FD_CHECKS = {
    np.float64: (1e-4, "central differences with step eps^(1/3) max(1, |x|) = 6e-6 max(1, |x|): truncation "
                       "O(h^2) and rounding O(eps |L| / h), relative to the parameter's largest derivative (at "
                       "least 1e-6 |L|) at an entry, to sum |g v| along a direction v"),
    np.float32: (1e-2, "a kernel in f32: central differences along a random direction (entries alone drown in "
                       "f32 rounding) with step eps^(1/3) max(1, |x|) = 5e-3 max(1, |x|), relative to sum |g v|"),
}
"""(tolerance, reason) of the finite-difference check by the kernel's float precision (`_precision`)."""
F32_TOLERANCE = 1e-4
"""The primal and gradient checks of a kernel in f32: its rounding (eps 1.2e-7) in another order, over sums of
up to millions of terms (f64 kernels: the suite's 1e-10)."""
SEED_WEIGHTS = 1000
"""The seed of the random weights w_k of written arrays (the generator is seeded SEED_WEIGHTS + k)."""


class BenchUsageError(ValueError):
    """A bad kernel spec, `--args` or `--activity`: the command exits with status 2."""


def _differentiable(ty: Type) -> bool:
    return (ty.element if isinstance(ty, ArrayType) else ty).is_float


def default_activity(kernel: Kernel) -> tuple[str, ...]:
    """"dup" for float arrays, "active" for float scalars, "const" for everything else (module docstring)."""
    params, _ = kernel.signature()
    return tuple(("dup" if isinstance(p.type, ArrayType) else "active") if _differentiable(p.type) else "const"
                 for p in params)


def checked_activity(kernel: Kernel, activity: Sequence[str] | None) -> tuple[str, ...]:
    """`activity`, or the default; ValueError naming the parameter for a wrong length or kind."""
    if activity is None:
        return default_activity(kernel)
    params, _ = kernel.signature()
    activity = tuple(activity)
    if len(activity) != len(params):
        raise ValueError(f"activity: kernel '{kernel.__name__}' has {len(params)} parameter(s) "
                         f"({', '.join(p.name for p in params)}), got {len(activity)} activities")
    for param, kind in zip(params, activity):
        if kind not in ACTIVITIES:
            raise ValueError(f"activity of parameter '{param.name}': {kind!r} is none of {', '.join(ACTIVITIES)}")
        if kind != "const" and not _differentiable(param.type):
            raise ValueError(f"activity of parameter '{param.name}': its type {param.type} is never {kind}, only const")
        if kind == "dup" and not isinstance(param.type, ArrayType):
            raise ValueError(f"activity of parameter '{param.name}': a scalar is active or const, not dup")
        if kind == "active" and isinstance(param.type, ArrayType):
            raise ValueError(f"activity of parameter '{param.name}': an array is dup or const, not active")
    return activity


def written_parameters(kernel: Kernel) -> frozenset[int]:
    """The positions of the array parameters the kernel (or a kernel it calls) may write."""
    module, function = kernel.lower()
    return writable_parameters(module, function)


def _weights(index: int, array: np.ndarray) -> np.ndarray:
    return np.random.default_rng(SEED_WEIGHTS + index).random(array.shape).astype(array.dtype)


def _label(params: Sequence[Parameter], args: tuple) -> str:
    """A row's label: the shapes of the arrays and the values of the integer scalars."""
    parts = []
    for param, value in zip(params, args):
        if isinstance(value, np.ndarray):
            parts.append(f"{param.name}[{'x'.join(str(n) for n in value.shape)}]")
        elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            parts.append(f"{param.name}={value}")
    return " ".join(parts) or "scalars"


def user_benchmark(kernel: Kernel, rows: Sequence[tuple], activity: Sequence[str] | None = None,
                   reference: str = "python") -> suite.Benchmark:
    """The kernel as a `Benchmark` of the suite, one size per argument tuple of `rows` (module docstring);
    bad arguments or activities are a ValueError (or TypeError) naming the parameter."""
    params, return_type = kernel.signature()
    kinds = checked_activity(kernel, activity)
    rows = [tuple(args) for args in rows]
    for args in rows:
        check_arguments(kernel.__name__, params, args)
    outputs = sorted(written_parameters(kernel))
    written = [i for i in outputs if kinds[i] == "dup"]
    if "dup" not in kinds and "active" not in kinds:
        raise ValueError(f"kernel '{kernel.__name__}': no parameter is dup or active, there is no gradient")
    if not return_type.is_float and not written:
        raise ValueError(f"kernel '{kernel.__name__}' returns no float and writes no dup array: its gradient "
                         f"is zero; mark an array it writes dup")
    if reference not in ("python", "O0"):
        raise ValueError(f"reference: 'python' or 'O0', got {reference!r}")
    primal: Callable[..., object] = kernel.py_func if reference == "python" else \
        kernel.compile("llvm", "O0").entry
    single = _precision(kernel) == np.float32

    def run_reference(*args: object) -> suite.Primal:
        copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
        value = primal(*copies)
        kept = float(value) if return_type.is_float else value
        return suite.Primal(kept, {i: copies[i] for i in outputs})  # type: ignore[arg-type]

    return suite.Benchmark(
        name=kernel.__name__, kernel=kernel, activity=kinds,
        sizes={"user": tuple({"row": i} for i in range(len(rows)))},
        make_args=lambda row, seed=0: tuple(a.copy() if isinstance(a, np.ndarray) else a for a in rows[row]),
        reference=run_reference,
        label=lambda size: _label(params, rows[size["row"]]),
        scale=lambda size: float(max(1, sum(a.size for a in rows[size["row"]] if isinstance(a, np.ndarray)))),
        seeds=lambda args: {k: _weights(k, args[k]) for k in written},
        description=f"the user's kernel {kernel.__name__}",
        primal_tolerance=F32_TOLERANCE if single else suite.PRIMAL_TOLERANCE,
        gradient_tolerance=F32_TOLERANCE if single else suite.GRADIENT_TOLERANCE)


def objective(bench: suite.Benchmark, args: tuple) -> float:
    """L on `args` with the compiled primal (module docstring), summed in f64, the inputs left as they were."""
    copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
    value = bench.kernel(*copies)
    total = bench.seed_return * float(value) if isinstance(value, (float, np.floating)) else 0.0
    for index, weights in bench.seeds(args).items():
        total += float(np.sum(weights.astype(np.float64) * copies[index].astype(np.float64)))
    return total


def _entries(gradient: np.ndarray, count: int, rng: np.random.Generator) -> list[int]:
    """Flat indices to check: the largest derivative, then random others."""
    flat = np.abs(gradient.ravel())
    if not flat.size:
        return []
    chosen = [int(np.argmax(flat))]
    for index in rng.integers(0, flat.size, 2 * count).tolist():  # no permutation of a large array
        if index not in chosen:
            chosen.append(index)
    return chosen[:count]


def finite_difference_check(bench: suite.Benchmark, args: tuple, gradient: Mapping[int | str, object],
                            entries: int = 3) -> Check:
    """The gradient (`Gradient.results()` of `args`) against central differences of `objective`, per "dup" or
    "active" parameter: along a random direction, and (in f64) at up to `entries` entries (`FD_CHECKS`)."""
    precision = _precision(bench.kernel)
    tolerance, reason = FD_CHECKS[precision]
    check = Check(f"{bench.name} gradient (opt=pre on llvm) against central finite differences", tolerance, reason)
    params, _ = bench.kernel.signature()
    rng = np.random.default_rng(0)
    step = float(np.finfo(precision).eps) ** (1.0 / 3.0)
    floor = 1e-6 * abs(objective(bench, args))
    error = 0.0
    for index, kind in enumerate(bench.activity):
        if kind == "const":
            continue
        derivative = np.asarray(gradient[index], dtype=np.float64)
        value = np.asarray(args[index], dtype=np.float64)
        direction = _direction(derivative, rng)
        error = max(error, _difference_error(bench, args, index, params[index], derivative, direction, step, floor))
        if precision == np.float64:
            scale = max(float(np.max(np.abs(derivative))) if derivative.size else 0.0, floor)
            for entry in _entries(derivative, entries, rng):
                unit = np.zeros(value.shape)
                unit.ravel()[entry] = 1.0
                error = max(error, _difference_error(bench, args, index, params[index], derivative, unit, step, scale))
    check.record(error if math.isfinite(error) else math.inf)
    return check


def _direction(derivative: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """v = sign(g) u, u uniform on [0.5, 1] (a random sign where g is 0): <g, v> = sum |g v| has no
    cancellation, so a gradient off by a factor, or of a wrong sign anywhere, is off by as much along v."""
    signs = np.where(derivative != 0.0, np.sign(derivative), rng.choice((-1.0, 1.0), derivative.shape))
    return signs * rng.uniform(0.5, 1.0, derivative.shape)


def _precision(kernel: Kernel) -> type[np.floating]:
    """float32 if a float parameter or the return value of `kernel` is f32, else float64."""
    params, return_type = kernel.signature()
    types = [p.type.element if isinstance(p.type, ArrayType) else p.type for p in params] + [return_type]
    return np.float32 if any(ty.is_float and ty.numpy_dtype == np.float32 for ty in types) else np.float64


def _difference_error(bench: suite.Benchmark, args: tuple, index: int, param: Parameter, derivative: np.ndarray,
                      direction: np.ndarray, step: float, floor: float) -> float:
    """|L(x + h v) - L(x - h v) - <g, x+ - x->| / (sum |g| |x+ - x-| or `floor` |x+ - x-|, the larger): the
    central difference along v of parameter `index`, x+ and x- as rounded to its type, against the gradient g
    (first order in the step actually taken, so rounding the step to f32 costs nothing)."""
    ty = param.type.element if isinstance(param.type, ArrayType) else param.type
    value = np.asarray(args[index], dtype=np.float64)
    h = step * max(1.0, float(np.max(np.abs(value))) if value.size else 1.0)
    plus = (value + h * direction).astype(ty.numpy_dtype)
    minus = (value - h * direction).astype(ty.numpy_dtype)
    moved = plus.astype(np.float64) - minus.astype(np.float64)

    def at(point: np.ndarray) -> float:
        replaced = point if isinstance(args[index], np.ndarray) else float(point)
        return objective(bench, args[:index] + (replaced,) + args[index + 1:])
    difference = at(plus) - at(minus)
    expected = float(np.sum(derivative * moved))
    scale = max(float(np.sum(np.abs(derivative * moved))), floor * float(np.max(np.abs(moved), initial=0.0)), 1e-300)
    return abs(difference - expected) / scale


def ir_sizes(kernel: Kernel, activity: Sequence[str]) -> dict[str, int]:
    """Instructions (phis and terminators included) over the kernel and its callees at each of `IR_STAGES`."""
    sizes = {}
    for column, stage, opt in IR_STAGES:
        text = show_ir(kernel, stage, opt, activity if stage.startswith("grad") else None)
        sizes[column] = sum(len(block.instructions) for function in parse_module(text, f"<{stage}>")
                            for block in function.blocks)
    return sizes


def compare_rows(kernel: Kernel, rows: Sequence[tuple], activity: Sequence[str] | None = None,
                 reference: str = "python", min_time: float = 0.2, fd_entries: int = 3,
                 stream: Any = sys.stderr) -> list[Row]:
    """Measure and check `kernel` on each argument tuple of `rows` (module docstring); every row gets the
    finite-difference check and the IR sizes."""
    bench = user_benchmark(kernel, rows, activity, reference)

    def finite_differences(args: tuple, references: Any) -> dict[str, Check]:
        return {"finite differences": finite_difference_check(bench, args, references.gradient, fd_entries)}
    measured = measure_rows([(bench, size) for size in bench.sizes["user"]], min_time, stream=stream,
                            extra_checks=finite_differences)
    sizes = ir_sizes(kernel, bench.activity)  # after the timing: building these IRs compiles nothing it uses
    for row in measured:
        row.ir_sizes = dict(sizes)
    return measured


def compare(kernel: Kernel, *args: object, activity: Sequence[str] | None = None, backend: str | None = None,
            reference: str = "python", min_time: float = 0.2, fd_entries: int = 3, verbose: bool = False,
            check: bool = True) -> Row:
    """`iz.compare`: the bench's row for `kernel` on `args` (module docstring): timings (`row.timings`:
    "primal", "post", "pre"), `row.speedup` (pre/post), `row.ratio` (gradient/primal), `row.ir_sizes`,
    `row.checks`. `verbose` prints the table and the IR sizes; with `check` (default) a failed check raises
    AssertionError after that, naming the checks."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"compare needs an @iz.kernel, got {type(kernel).__name__}")
    rows = _bench_environment(backend, lambda: compare_rows(kernel, [args], activity, reference, min_time, fd_entries,
                                                       sys.stderr if verbose else _Silent()))
    if verbose:
        print(format_table(rows))
        print(format_ir_sizes(rows))
    failed = [str(c) for c in rows[0].checks.values() if not c.passed]
    if check and failed:
        raise AssertionError("iz.compare: " + "; ".join(failed))
    return rows[0]


class _Silent:
    """A stream that drops the progress bar."""

    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


def _bench_environment(backend: str | None, run: Callable[[], list[Row]]) -> list[Row]:
    """`run()` as the command runs it: the disk cache off (compile times are real) and `ISOZYME_BACKEND` set
    to `backend` (when given); the variables are restored after."""
    import os

    wanted = {"ISOZYME_CACHE": "off", **({"ISOZYME_BACKEND": backend} if backend is not None else {})}
    before = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        return run()
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def format_ir_sizes(rows: Sequence[Row]) -> str:
    """The IR sizes of the kernels of `rows` (once per kernel), a column per stage."""
    seen: dict[str, dict[str, int]] = {}
    for row in rows:
        if row.ir_sizes:
            seen.setdefault(row.benchmark, row.ir_sizes)
    header = ["IR instructions"] + [column for column, _, _ in IR_STAGES]
    lines = [header] + [[name] + [str(sizes[column]) for column, _, _ in IR_STAGES] for name, sizes in seen.items()]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            for line in lines]
    return "\n".join(text)


# --- the command line ---------------------------------------------------------------------------------------

def evaluate_arguments(text: str, module_globals: Mapping[str, object], count: int) -> tuple:
    """`--args` (module docstring) as the argument tuple of a kernel of `count` parameters."""
    import isozyme

    scope = {**module_globals, "np": np, "rng": np.random.default_rng(0), "iz": isozyme}
    try:
        value = eval(text, scope)  # the user's own expression, as `python -c` would run it
    except Exception as error:  # any error of the user's expression is a usage error
        raise BenchUsageError(f"--args {text!r}: {type(error).__name__}: {error}") from None
    args = value if isinstance(value, tuple) else (value,)
    if len(args) != count:
        raise BenchUsageError(f"--args {text!r} gives {len(args)} argument(s), the kernel takes {count}")
    return args


def load_user_kernel(spec: str) -> tuple[Kernel, dict[str, object]]:
    """`FILE.py:kernel` -> the kernel and its module's globals; BenchUsageError when either is missing."""
    from isozyme.kernel_files import load_module

    path, colon, name = spec.rpartition(":")
    if not colon or not path.endswith(".py") or not name:
        raise BenchUsageError(f"{spec!r}: expected FILE.py:kernel")
    try:
        module_globals = load_module(path)
    except OSError as error:
        raise BenchUsageError(f"{spec}: cannot read {path} ({error})") from None
    kernel = module_globals.get(name)
    if not isinstance(kernel, Kernel):
        kernels = [key for key, value in module_globals.items() if isinstance(value, Kernel)]
        raise BenchUsageError(f"{path} has no kernel '{name}' (kernels: {', '.join(kernels) or 'none'})")
    return kernel, module_globals


def command_compare(args: argparse.Namespace) -> int:
    """`isozyme bench FILE.py:kernel ...` (module docstring): 0, 1 on a failed check, 2 on bad input."""
    try:
        if args.peers or args.only or args.suite or args.jobs is not None:
            raise BenchUsageError("--suite, --only, --peers and --jobs are for the benchmarks of the suite, not a "
                                  "kernel's")
        if not args.args:
            raise BenchUsageError(f"{args.kernel}: give the kernel's arguments with --args EXPR")
        kernel, module_globals = load_user_kernel(args.kernel)
        params, _ = kernel.signature()
        rows = [evaluate_arguments(text, module_globals, len(params)) for text in args.args]
        activity = tuple(args.activity.split(",")) if args.activity else None
        bench = user_benchmark(kernel, rows, activity, args.reference)  # checks arguments and activity
    except (BenchUsageError, TypeError, ValueError) as error:
        print(f"isozyme bench: {error}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    measured = compare_rows(kernel, rows, bench.activity, args.reference, args.min_time)
    print(f"isozyme bench {args.kernel} --backend {args.backend}, activity {','.join(bench.activity)}: "
          f"{len(measured)} row(s) in {time.perf_counter() - started:.0f} s (median per call; compile = first "
          f"call less the median)")
    print(format_table(measured))
    print(format_ir_sizes(measured))
    for row in measured:
        print(f"{row.benchmark} {row.label}: pre/post {row.speedup:.2f}x, gradient/primal {row.ratio:.2f}")
    if args.json:
        results.write_document(args.json, to_json(measured, "user", args.backend, {
            "kernel": args.kernel, "activity": list(bench.activity), "args": list(args.args),
            "reference": args.reference, "min_time": args.min_time}))
    if args.plot and not plot_svg(measured, args.plot):
        print("isozyme bench: no plot written, no row's results matched the references", file=sys.stderr)
    return exit_status((check for row in measured for check in row.checks.values()), "isozyme bench")
