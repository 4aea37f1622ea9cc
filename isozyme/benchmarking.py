"""`python -m isozyme bench`: pre- against post-optimization gradients on Enzyme's and ADBench's problems.

    python -m isozyme bench [--suite quick|full] [--backend llvm|opencl] [--peers numba,jax,torch]
                            [--only gmm,ba] [--min-time 0.1] [--jobs N] [--json FILE] [--plot FILE.svg]
    python -m isozyme bench FILE.py:kernel --args EXPR ...   (the user's kernel: isozyme/kernel_comparison.py)

For every benchmark of the suite (`isozyme/benchmark_suite`, installed with the package: the command runs from
any directory) and every size of the chosen suite, one row: the primal time; the gradient's time with
`opt="post"` (AD of the optimized program) and `opt="pre"` (AD of the program as written, optimized
afterwards); their ratio pre/post; the gradient/primal ratio (post); and the compile times of the three.

Compiling (`isozyme/benchmark_compiles.py`): before any timing, every variant of every benchmark makes its
first call, which compiles it, in one of `--jobs` worker processes (by default one per core), on the
benchmark's first row; they store the code in a disk cache made empty for the run, which this process
then loads from. The compile times are real: a variant's is its first call in the worker less the median
of the calls of its first row here. With `--jobs 0` (and always on `--backend opencl`) each variant
compiles at its first call in this process instead, the disk cache off, and its compile time is that first
call less the median of the calls that follow.

Timing (`interleaved`): every variant is called once first, which compiles or loads it and warms it up.
Then the variants of one row take turns, one call at a time, each until it has run for at least
`--min-time` seconds (by default the suite's, `SUITE_MIN_TIME`: 0.1 s quick, 0.2 s full) and 3 calls;
the median and the minimum per call are reported. A round calls the variants in one order and the next
round in the reverse order, and pre/post is the median over the rounds of the ratio of that round's two
calls (`paired_ratio`): a call's neighbour in time is the other variant's, so the machine's drift (other
work, clock changes) cancels, as it does not in a ratio of medians. The inputs a call may write, and fresh
zero shadows for a gradient, are made before each call, outside the timed region. Machines here are shared
and noisy: the variants of one row are measured in one interleaved run so their ratios are fair.

Peers (`--peers`, when installed and when the suite defines them for a benchmark, `isozyme/benchmark_suite/peers.py`):
numba for the primal, JAX `jit(grad)` and PyTorch for gradients; their columns hold their time per call.

Checks (`isozyme/benchmark_checks.py`): the result of every call, the first and every timed one, of every
variant and peer is compared with the row's reference after its timer stopped (the first calls' results
once every variant has made its first call, so that a reference compiled for the check never counts as a
variant's compile time). The references, computed once per row, untimed: for the primal and numba, the
benchmark's numpy `reference` (its return value and the arrays it writes), within the benchmark's
`primal_tolerance` (1e-10: the same math rounded in another order); for the gradients, the gradient of the
program as written on the CPU (`opt="pre"`, `llvm`: on `--backend opencl` the GPU's gradients are checked
against the CPU's; on `llvm` the `pre` variant's calls against their own first result), within its
`gradient_tolerance` (1e-10), for JAX and PyTorch within `peers.PEER_TOLERANCE` (1e-8: the same math
written differently). A row whose check failed is marked MISMATCH in the table, left out of the summary and
the plot, written to the JSON with `"check": {"passed": false, ...}`, and the command exits with status 1
after printing and writing everything.

At the end: a table, the geometric mean of pre/post over the Enzyme-style benchmarks (those whose gradient
the optimizer changes asymptotically or by a constant: all of the suite but norm's n sweep is reported
separately), the JSON of every measurement (`--json`, the schema of `isozyme/benchmark_suite/results.py`:
a row per variant and peer, `to_json`), and a log-log plot as SVG (`--plot`, no plotting
library needed): pre/post and gradient/primal against problem size, one line per benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from isozyme import benchmark_compiles as compiles
from isozyme import benchmark_suite as suite
from isozyme.benchmark_checks import MISMATCH, Check, checks_json, exit_status
from isozyme.benchmark_plot import plot_svg
from isozyme.benchmark_suite import peers as peer_module
from isozyme.benchmark_suite import results

Prepared = Callable[[], object]
Variant = Callable[[], Prepared]
"""A variant of a benchmark: called outside the timed region, it returns the call that is timed."""


@dataclass(frozen=True)
class Timing:
    median: float
    """Seconds per call."""
    min: float
    calls: int
    compile: float
    """Seconds the first call took beyond the median: compilation (and first-touch costs)."""
    samples: tuple[float, ...] = field(default=(), repr=False, compare=False)
    """Seconds of each timed call, in order: call k was in round k of `interleaved` (not in the JSON)."""

    def as_json(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.min, "calls": self.calls, "compile": self.compile}


def paired_ratio(numerator: Timing, denominator: Timing) -> float:
    """The median over the rounds both variants ran in of numerator / denominator (module docstring); the
    ratio of the medians for timings without samples."""
    pairs = [a / b for a, b in zip(numerator.samples, denominator.samples) if b > 0.0]
    return statistics.median(pairs) if pairs else numerator.median / denominator.median


Compare = Callable[[object], object]
"""Checks what one call of a variant returned (and left in the inputs its variant prepared)."""


def interleaved(variants: Mapping[str, Variant], min_time: float, min_calls: int = 3,
                checks: Mapping[str, Compare] | None = None) -> dict[str, Timing]:
    """Time the variants in turns (module docstring); `checks[name]` gets what each call of variant `name`
    returned, after its timer stopped (the first calls' once every variant has made its first call)."""
    checks = checks or {}
    first: dict[str, float] = {}
    returned: dict[str, object] = {}
    for name, variant in variants.items():
        prepared = variant()
        start = time.perf_counter()
        returned[name] = prepared()
        first[name] = time.perf_counter() - start
    for name, value in returned.items():
        if name in checks:
            checks[name](value)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    turn = 0
    while pending := [name for name in variants
                      if sum(samples[name]) < min_time or len(samples[name]) < min_calls]:
        turn += 1
        for name in pending if turn % 2 else reversed(pending):
            prepared = variants[name]()
            start = time.perf_counter()
            value = prepared()
            samples[name].append(time.perf_counter() - start)
            if name in checks:
                checks[name](value)
    timings = {}
    for name, times in samples.items():
        median = statistics.median(times)
        timings[name] = Timing(median, min(times), len(times), max(0.0, first[name] - median), tuple(times))
    return timings


@dataclass
class Row:
    """One benchmark at one size: times in seconds per call."""

    benchmark: str
    label: str
    scale: float
    timings: dict[str, Timing]
    peers: dict[str, Timing] = field(default_factory=dict)
    checks: dict[str, Check] = field(default_factory=dict)
    """The results of every variant and peer against the row's references (module docstring)."""
    ir_sizes: dict[str, int] = field(default_factory=dict)
    """Instructions at each stage of the compiler (a user's kernel, `kernel_comparison.IR_STAGES`)."""

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks.values())

    @property
    def speedup(self) -> float:
        """pre/post: how much faster the gradient of the optimized program is (`paired_ratio`)."""
        return paired_ratio(self.timings["pre"], self.timings["post"])

    @property
    def ratio(self) -> float:
        """gradient (post) / primal."""
        return self.timings["post"].median / self.timings["primal"].median


def _fresh(value: object) -> object:
    return value.copy() if isinstance(value, np.ndarray) else value


def _copies(args: tuple) -> tuple:
    return tuple(_fresh(a) for a in args)


REFERENCE_GRADIENT = {"opt": "pre", "backend": "llvm"}
"""The reference gradient of a row: the program as written, differentiated, on the CPU (module docstring)."""


class References:
    """A row's references, each computed at its first use (untimed, after every variant's first call)."""

    def __init__(self, bench: Any, args: tuple, suite: Any) -> None:
        self.bench, self.args, self.suite = bench, args, suite

    @functools.cached_property
    def primal(self) -> dict[int | str, object]:
        """The numpy reference: the return value ("value") and the written arrays by parameter index."""
        return self.bench.reference(*_copies(self.args)).results()

    @functools.cached_property
    def gradient(self) -> dict[int | str, object]:
        """`REFERENCE_GRADIENT`'s results, the return value under "value"."""
        return self.suite.run_gradient(self.bench, _copies(self.args), **REFERENCE_GRADIENT).results()

    @functools.cached_property
    def derivative(self) -> dict[int | str, object]:
        """The reference gradient without the return value (what the gradient peers compute)."""
        return {key: value for key, value in self.gradient.items() if key != "value"}


@dataclass
class Checked:
    """A variant and its check: `prepare` as `interleaved` times it, `compare` for what each call returned."""

    prepare: Variant
    compare: Compare
    check: Check


PRIMAL_REASON = "the same math in f64, rounded in another order"


def checked_variants(bench: Any, args: tuple, suite: Any, references: References) -> dict[str, Checked]:
    """The primal, and the gradients with opt="post" and "pre", each checked against `references`."""
    return {"primal": _checked_primal(bench, args, suite, references),
            **{opt: _checked_gradient(bench, args, suite, references, opt) for opt in ("post", "pre")}}


def _checked_primal(bench: Any, args: tuple, suite: Any, references: References) -> Checked:
    called: list[tuple] = []  # the arguments of the latest call, which hold the arrays it wrote

    def prepare() -> Prepared:
        fresh = _copies(args)
        called[:] = [fresh]
        return lambda: bench.kernel(*fresh)
    check = Check(f"{bench.name} primal against its numpy reference", bench.primal_tolerance, PRIMAL_REASON)

    def compare(value: object) -> float:
        outputs = {index: called[0][index] for index in references.primal if index != "value"}
        return check.compare(suite.Primal(value, outputs).results(), references.primal)
    return Checked(prepare, compare, check)


def _checked_gradient(bench: Any, args: tuple, suite: Any, references: References, opt: str) -> Checked:
    finishing: list[Callable[[object], Any]] = []  # makes the Gradient of the latest call

    def prepare() -> Prepared:
        call, finish = suite.prepare_gradient(bench, _copies(args), opt)
        finishing[:] = [finish]
        return call
    check = Check(f"{bench.name} gradient (opt={opt}) against opt={REFERENCE_GRADIENT['opt']} on "
                  f"{REFERENCE_GRADIENT['backend']}", bench.gradient_tolerance,
                  "derivatives of the same math, sums taken in another order")
    return Checked(prepare, lambda value: check.compare(finishing[0](value).results(), references.gradient), check)


def _checked_peers(bench: Any, args: tuple, peers: Sequence[str], references: References) -> dict[str, Checked]:
    """The peers of `peers` that are installed and defined for the benchmark, each checked: the gradient
    peers against the reference gradient, numba against the numpy reference."""
    found = {}
    for peer in peers:
        make = peer_module.variant(bench.name, peer)
        if make is not None:
            found[peer] = checked_peer(bench, args, peer, make(args), peer_module, references)
    return found


def checked_peer(bench: Any, args: tuple, peer: str, prepare: Variant, peer_module: Any,
                 references: References) -> Checked:
    """`peer`'s variant (`prepare`) and its check: a gradient peer against the reference gradient within
    `peer_module.PEER_TOLERANCE`, numba against the numpy reference within the primal's tolerance."""
    if peer in peer_module.GRADIENT_PEERS:
        check = Check(f"{bench.name} {peer} gradient against opt={REFERENCE_GRADIENT['opt']} on "
                      f"{REFERENCE_GRADIENT['backend']}", peer_module.PEER_TOLERANCE, peer_module.PEER_REASON)
    else:
        check = Check(f"{bench.name} {peer} primal against its numpy reference", bench.primal_tolerance,
                      PRIMAL_REASON)

    def compare(value: object) -> float:
        reference = references.derivative if peer in peer_module.GRADIENT_PEERS else references.primal
        return check.compare(peer_module.result(bench.name, peer, args, value), reference)
    return Checked(prepare, compare, check)


def measure(checked: Mapping[str, Checked], min_time: float) -> dict[str, Timing]:
    """`interleaved` on the variants, each call's result checked."""
    return interleaved({name: variant.prepare for name, variant in checked.items()}, min_time,
                       checks={name: variant.compare for name, variant in checked.items()})


class Progress:
    """A one-line progress bar on a terminal; a line per step otherwise."""

    def __init__(self, total: int, stream: Any = sys.stderr) -> None:
        self.total, self.done, self.stream = total, 0, stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.start = time.perf_counter()

    def step(self, text: str) -> None:
        width = 30
        filled = width * self.done // max(self.total, 1)
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} " \
               f"{time.perf_counter() - self.start:5.0f}s  {text}"
        if self.tty:
            self.stream.write("\r\033[K" + line[:120])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.done += 1

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.flush()


SUITE_MIN_TIME = {"quick": 0.1, "full": 0.2}
"""`--min-time`'s default per suite. 0.1 s is thousands of calls of a kernel of microseconds, a hundred of
one of a millisecond and a few of one of tens of milliseconds (norm's O(n^2) gradient at n = 4000, BA's
Jacobian): enough for a median and for pre/post's median over the rounds (on a busy machine 0.05 s left
a row's pre/post at the mercy of one burst of other work). The full suite's rows, which the README's
figures come from, run 0.2 s."""


def run_suite(suite_name: str, min_time: float, peers: Sequence[str] = (), only: Iterable[str] | None = None,
              stream: Any = sys.stderr, jobs: int = 0) -> list[Row]:
    """Measure every benchmark of the suite at every size of `suite_name` (module docstring), its variants
    compiled first in `jobs` worker processes (none: each at its first call here)."""
    wanted = set(only) if only else None
    work = [(bench, size) for bench in suite.all_benchmarks() if wanted is None or bench.name in wanted
            for size in bench.sizes[suite_name]]
    if jobs <= 0 or not work:
        return measure_rows(work, min_time, peers, stream)
    with compiles.private_cache():
        todo = compiles.jobs_of(work)
        progress = Progress(len(todo), stream)
        progress.step(f"compiling {len(todo)} variants in {min(jobs, len(todo))} processes")
        first_calls = compiles.first_calls_in_workers(todo, jobs, progress.step)
        progress.finish()
        return measure_rows(work, min_time, peers, stream, first_calls=first_calls)


ExtraChecks = Callable[[tuple, References], Mapping[str, Check]]
"""Checks of a row beyond its variants' (`kernel_comparison.py`'s finite differences), made after the timing
from the row's arguments and references."""


def measure_rows(work: Sequence[tuple[Any, Mapping[str, Any]]], min_time: float, peers: Sequence[str] = (),
                 stream: Any = sys.stderr, extra_checks: ExtraChecks | None = None,
                 first_calls: Mapping[tuple[str, str], float] | None = None) -> list[Row]:
    """A row per (benchmark, size) of `work`, each measured and checked (module docstring), under a
    progress bar on `stream`. `first_calls`: the seconds of the first calls made (and compiled) in worker
    processes, by (benchmark, variant), at the benchmark's first row, whose compile times they give."""
    progress = Progress(len(work), stream)
    rows = []
    seen: set[str] = set()
    for bench, size in work:
        progress.step(f"{bench.name} {bench.label(size)}")
        args = bench.make_args(seed=0, **size)
        references = References(bench, args, suite)
        variants = checked_variants(bench, args, suite, references)
        peer_variants = _checked_peers(bench, args, peers, references) if peers else {}
        timings, peer_timings = measure(variants, min_time), measure(peer_variants, min_time)
        if first_calls and bench.name not in seen:
            timings = compiled_in_workers(bench.name, timings, first_calls)
        seen.add(bench.name)
        checks = {name: variant.check for name, variant in {**variants, **peer_variants}.items()}
        if extra_checks is not None:
            checks.update(extra_checks(args, references))
        rows.append(Row(bench.name, bench.label(size), float(bench.scale(size)), timings, peer_timings, checks))
    progress.step("done")
    progress.finish()
    return rows


def compiled_in_workers(name: str, timings: Mapping[str, Timing], first_calls: Mapping[tuple[str, str], float]
                        ) -> dict[str, Timing]:
    """The timings of benchmark `name`'s first row, each variant's compile time its first call in a worker
    (`first_calls[(name, variant)]`, where there is one) less its median here."""
    return {variant: dataclasses.replace(timing, compile=max(0.0, first_calls[(name, variant)] - timing.median))
            if (name, variant) in first_calls else timing for variant, timing in timings.items()}


def _time(seconds: float) -> str:
    for unit, factor in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= factor or unit == "us":
            return f"{seconds / factor:.3g} {unit}"
    raise AssertionError


def _mark(row: Row) -> str:
    """"ok", or MISMATCH and the variants whose results differ from the reference."""
    failed = [name for name, check in row.checks.items() if not check.passed]
    return f"{MISMATCH} {','.join(failed)}" if failed else "ok"


def format_table(rows: Sequence[Row]) -> str:
    peers = sorted({peer for row in rows for peer in row.peers})
    header = ["benchmark", "size", "primal", "grad post", "grad pre", "pre/post", "grad/primal",
              "compile post", "compile pre"] + peers + ["check"]
    lines = [header]
    compiled: set[str] = set()
    for row in rows:
        t = row.timings
        first = row.benchmark not in compiled  # a kernel compiles once, for every size
        compiled.add(row.benchmark)
        lines.append([row.benchmark, row.label, _time(t["primal"].median), _time(t["post"].median),
                      _time(t["pre"].median), f"{row.speedup:.2f}x", f"{row.ratio:.2f}",
                      _time(t["post"].compile) if first else "", _time(t["pre"].compile) if first else ""]
                     + [_time(row.peers[p].median) if p in row.peers else "-" for p in peers] + [_mark(row)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(text)


def geometric_mean(values: Iterable[float]) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(rows: Sequence[Row]) -> str:
    """The geometric mean of pre/post and norm's sweep, over the rows whose checks passed."""
    passed = [row for row in rows if row.passed]
    enzyme_style = [row.speedup for row in passed if row.benchmark != "norm"]
    norm = [f"{row.label}: {row.speedup:.1f}x" for row in passed if row.benchmark == "norm"]
    lines = [f"geometric mean of pre/post over {len(enzyme_style)} rows (norm's sweep apart): "
             f"{geometric_mean(enzyme_style):.2f}x (Enzyme reports 4.2x on its suite)"]
    if norm:
        lines.append("norm pre/post, O(n^2) against O(n): " + ", ".join(norm))
    if len(passed) < len(rows):
        lines.append(f"{MISMATCH}: {len(rows) - len(passed)} row(s) left out of this summary, their results "
                     f"differ from the references")
    return "\n".join(lines)


SUITE_PROBLEMS = {"gmm_reassoc": ("gmm", "reassoc", "natural"), "gmm_by_component": ("gmm", "by component", "tuned")}
"""The suite's benchmarks that are another's problem measured otherwise: (problem, variant tag, kind). The
rest are their own problem, "natural": `isozyme/benchmark_suite/results.py` says what the kinds mean."""


def result_rows(row: Row) -> list[dict[str, Any]]:
    """`row` as rows of the results schema: the primal and every primal peer under "<problem> primal", the
    gradients under "<problem> gradient"; checks beyond the variants' (a user kernel's finite differences, of
    the reference gradient) go with the `pre` row, the ratios with the `post` row."""
    problem, tag, kind = SUITE_PROBLEMS.get(row.benchmark, (row.benchmark, "", "natural"))
    isozyme = f"isozyme {tag}".strip()
    known = {"primal", "post", "pre", *row.peers}
    extra = {name: check for name, check in row.checks.items() if name not in known}

    def entry(quantity: str, variant: str, kind: str, name: str, check: dict[str, Any],
              **fields: Any) -> dict[str, Any]:
        timing = row.timings.get(name) or row.peers[name]
        return results.row(f"{problem} {quantity}", row.label, variant, kind, timing.median * 1e3, check,
                           min_ms=timing.min * 1e3, calls=timing.calls, compile_ms=timing.compile * 1e3,
                           details={"benchmark": row.benchmark, **fields.pop("details", {})}, **fields)
    made = [entry("primal", isozyme, kind, "primal", row.checks["primal"].as_dict()),
            entry("gradient", f"{isozyme} post", kind, "post", row.checks["post"].as_dict(),
                  ratios={"pre/post": row.speedup, "gradient/primal": row.ratio},
                  details={"scale": row.scale, **({"ir_sizes": row.ir_sizes} if row.ir_sizes else {})}),
            entry("gradient", f"{isozyme} pre", kind, "pre", checks_json({"pre": row.checks["pre"], **extra})
                  if extra else row.checks["pre"].as_dict())]
    for peer in row.peers:
        quantity = "gradient" if peer in peer_module.GRADIENT_PEERS else "primal"
        made.append(entry(quantity, f"{peer} ({row.benchmark})" if tag else peer, "peer", peer,
                          row.checks[peer].as_dict()))
    return made


def to_json(rows: Sequence[Row], suite: str, backend: str, parameters: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
    """Every measurement as a results document (`isozyme/benchmark_suite/results.py`), benchmark
    "bench_<suite>" ("bench_<suite>_opencl" on OpenCL); each row's "check" says whether its results matched
    (module docstring), "passed" whether every row's did."""
    name = f"bench_{suite}" + ("" if backend == "llvm" else f"_{backend}")
    return results.document(name, [entry for row in rows for entry in result_rows(row)],
                            {"suite": suite, "backend": backend, **(parameters or {})})


# --- the plot: two log-log panels as SVG ------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernel", nargs="?", default=None, metavar="FILE.py:kernel",
                        help="measure this kernel instead of the suite (isozyme/kernel_comparison.py), with --args")
    parser.add_argument("--args", action="append", default=[], metavar="EXPR",
                        help="the kernel's arguments: a Python expression with np, rng and the module's globals; "
                             "repeat for more rows")
    parser.add_argument("--activity", default=None, help="const, dup or active per parameter, comma-separated "
                        "(default: float arrays dup, float scalars active, the rest const)")
    parser.add_argument("--reference", choices=("python", "O0"), default="python",
                        help="the kernel's primal reference: the undecorated Python function or the kernel at O0")
    parser.add_argument("--suite", choices=("quick", "full"), default=None, help="default quick")
    parser.add_argument("--backend", choices=("llvm", "opencl"), default="llvm")
    parser.add_argument("--peers", default="", help="comma-separated: numba, jax, torch (those installed)")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--min-time", type=float, default=None,
                        help="seconds each variant runs at least (default: 0.1 quick, 0.2 full and a kernel's)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="processes that compile the suite's variants before the timing (default: one per "
                             "core; 0: each at its first call in this process)")
    parser.add_argument("--json", default=None, metavar="FILE", help="write every measurement as JSON")
    parser.add_argument("--plot", default=None, metavar="FILE.svg", help="write the log-log plot")


def _workers(args: argparse.Namespace) -> int:
    """The compile processes of `--jobs` (module docstring): none on OpenCL, whose programs are built on the
    device in the process that runs them, nor when ISOZYME_PRINT_IR asks for IR (printed as it compiles)."""
    if args.backend != "llvm" or os.environ.get("ISOZYME_PRINT_IR"):
        return 0
    return compiles.default_workers() if args.jobs is None else args.jobs


def command_bench(args: argparse.Namespace) -> int:
    os.environ["ISOZYME_CACHE"] = "off"  # compile times are real, and no stale entry is timed
    os.environ["ISOZYME_BACKEND"] = args.backend
    if args.min_time is None:
        args.min_time = SUITE_MIN_TIME[args.suite or "quick"] if args.kernel is None else SUITE_MIN_TIME["full"]
    if args.kernel is not None:
        from isozyme.kernel_comparison import command_compare
        return command_compare(args)
    if args.args or args.activity:
        print("isozyme bench: --args and --activity are for a kernel (FILE.py:kernel), not the suite",
              file=sys.stderr)
        return 2
    args.suite = args.suite or "quick"
    peers = [p for p in args.peers.split(",") if p]
    only = [o for o in args.only.split(",") if o] or None
    known = [bench.name for bench in suite.all_benchmarks()]
    unknown = [name for name in only or () if name not in known]
    if unknown:
        print(f"isozyme bench: --only: no benchmark {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    started = time.perf_counter()
    rows = run_suite(args.suite, args.min_time, peers, only, jobs=_workers(args))
    print(f"isozyme bench --suite {args.suite} --backend {args.backend}: {len(rows)} rows in "
          f"{time.perf_counter() - started:.0f} s (median per call; compile = first call less the median)")
    print(format_table(rows))
    print(summary(rows))
    if args.json:
        results.write_document(args.json, to_json(rows, args.suite, args.backend,
                                                  {"peers": peers, "only": only, "min_time": args.min_time}))
    if args.plot and not plot_svg(rows, args.plot):
        print("isozyme bench: no plot written, no row's results matched the references", file=sys.stderr)
    return exit_status((check for row in rows for check in row.checks.values()), "isozyme bench")
