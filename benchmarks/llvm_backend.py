"""The `llvm` backend against its targets and against numba and numpy, side by side in one run.

    python benchmarks/llvm_backend.py [--runs 5] [--sizes 10x25x1000,64x50x1000] [--json FILE]

1. Cold compile: `examples/norm.py:norm` and `examples/gmm.py:gmm_objective`, each in a fresh process whose
   `ISOZYME_CACHE_DIR` is a new empty directory. The child times (`time.perf_counter`) `import isozyme`, and
   separately the kernel's first call, which lowers, optimizes, runs LLVM, stores the object code and loads
   it; the example module's import and the inputs are not timed. numba: the same in a fresh process, with
   isozyme/benchmark_suite/numba_peers.py (`cache=True`, `NUMBA_CACHE_DIR` a new empty directory).
2. Warm load: a second fresh process on the same cache directory; the first call again (target: at most
   20 ms, without loading llvmlite). The children report `isozyme.runtime.disk_cache.stats` and whether
   llvmlite was imported: the cold one must show a miss and a store, the warm one a hit and no miss, else
   the script stops. An instrumented child per kernel and mode then shows where the first call's time goes
   (the wrapped internals are named in `PHASES`; the warm child wraps only modules a warm start imports).
3. Per-call overhead of trivial kernels (`ident(a: f64) -> f64`, `first(x: Array[f64]) -> f64`) against
   numba's `@njit` and a plain Python function: timeit, `--number` calls per sample, `--repeat` samples,
   variants interleaved; microseconds per call (target: at most 5 us).
4. GMM objective (examples/gmm.py, `gmm_data` inputs) against `numba_peers.gmm_objective` (the same loops)
   and the example's `gmm_objective_numpy`: warm-up, then rounds of one call of each variant in turn until
   every variant has run for `--min-time` seconds (and at least 5 rounds); median and min (target: isozyme
   within 1.5x of numba).

Checks (`isozyme/benchmark_checks.py`; `CHECKS`): what the timed calls computed is compared with a
reference outside the timers: the first and second call of every child (norm's output, GMM's objective,
on the same inputs for both tools) with numpy's; a call of each trivial kernel before and after its samples
with the value it must return (exactly); every GMM call of every variant, the warm-up included, with
`gmm_objective_numpy` computed once beforehand. Tolerance `RTOL`, 1e-10 relative in the max-norm (the same
math, rounded in another order: numpy's pairwise sums and einsum against the loops). A failed check is
marked MISMATCH in its table and in the "targets" table, written to the JSON ("checks", each
{"passed": false, ...}, and "passed": false), and the script exits with status 1 after printing and writing
everything. (A cold or warm child whose disk cache events are not the expected ones stops the script.)

The children run with bytecode cached in a temporary `PYTHONPYCACHEPREFIX`, filled by one untimed child per
tool and kernel, so imports cost what they cost in an ordinary install, even where the environment sets
`PYTHONDONTWRITEBYTECODE` (which would otherwise compile isozyme from source in every child).

numba is optional: without it the numba columns say "skipped". Ratios are isozyme / peer, so below 1
means isozyme is faster. Timings are of this machine only; the host is printed first.

`--json` writes the results schema (`isozyme/benchmark_suite/results.py`, `result_rows`): rows of the first
calls (cold and warm), of the per-call overhead and of the GMM objective, isozyme's "natural", numba's,
numpy's and plain Python's "peer"; the host, the imports, the phases and the targets under "extra".
"""

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUMBA_PEERS = os.path.join(ROOT, "isozyme", "benchmark_suite", "numba_peers.py")
"""The numba versions of the kernels, loaded by path: importing them needs numba, never isozyme."""
CHILD_GMM_SIZE = (3, 5, 20)
"""d, K, n of the inputs of the compile-time children: the first call's run time is negligible."""
PHASES = [
    # (object path, attribute, label): wrapped with a timer in the instrumented child, in call order. Only
    # the outermost wrapped call is timed (compile_to_object, where it exists, calls prepare, optimize and
    # emit_object; recall and remember read and write the disk cache); an attribute that does not exist,
    # or whose module the child has not imported (a warm start never imports llvm_jit), is skipped, and
    # its time shows in "rest".
    ("isozyme.runtime.source_key", "source_key", "source key (host, compiler, kernel source)"),
    ("isozyme.runtime.source_key", "recall", "source index: read, replay the reads"),
    ("isozyme.runtime.kernel:Kernel", "lower", "lower to SSA"),
    ("isozyme.runtime.llvm_backend", "cache_key", "cache key (print SSA, hash)"),
    ("isozyme.runtime.disk_cache", "load", "disk cache read (entry, library checksum)"),
    ("isozyme.runtime.kernel:Kernel", "run_pipeline", "O2 pipeline"),
    ("isozyme.runtime.llvm_backend", "emit_llvm", "emit LLVM IR"),
    ("isozyme.runtime.llvm_jit", "compile_to_object", "LLVM: parse, O3, machine code"),
    ("isozyme.runtime.llvm_jit", "prepare", "LLVM: parse and verify IR"),
    ("isozyme.runtime.llvm_jit", "optimize", "LLVM: O3"),
    ("isozyme.runtime.llvm_jit", "emit_object", "LLVM: machine code"),
    ("isozyme.runtime.shared_library", "link", "link a shared library (ld)"),
    ("isozyme.runtime.disk_cache", "store", "disk cache write"),
    ("isozyme.runtime.source_key", "remember", "source index write"),
    ("isozyme.runtime.shared_library", "load", "load the shared library (dlopen)"),
    ("isozyme.runtime.llvm_jit", "load_object", "load object (MCJIT)"),
    ("isozyme.runtime.llvm_backend", "make_entry", "build the call entry"),
]
IMPORT_PHASE = "import llvm backend (no llvmlite)"
LLVM_PHASE = "import llvmlite and codegen, LLVM init (cold only)"


# ---------------------------------------------------------------------------------------------------------
# The child: run as `llvm_backend.py --child TOOL KERNEL [--phases]` in a fresh interpreter. Only the
# standard library is imported above this point, so `import isozyme` / `import numba` is timed in full.
# ---------------------------------------------------------------------------------------------------------

def _load_example(name: str):
    import importlib.util
    path = os.path.join(ROOT, "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"isozyme_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _load_numba_peers():
    import importlib.util
    spec = importlib.util.spec_from_file_location("numba_peers", NUMBA_PEERS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _child_inputs(kernel: str) -> tuple:
    """The arguments of a child's calls, the same for both tools, made with numpy alone (numba's child never
    imports isozyme): norm's (out, x, n); GMM's `gmm_data(d, K, n)` of examples/gmm.py (the same draws from
    the same seeded generator, gamma = 1, m = 0) and its `log_gamma_distrib` constant."""
    import math

    import numpy as np
    if kernel == "norm":
        x = np.random.default_rng(0).random(1000)
        return (np.empty_like(x), x, 1000)
    d, K, n = CHILD_GMM_SIZE
    rng = np.random.default_rng(0)
    alphas, means = rng.standard_normal(K), rng.uniform(0.0, 1.0, (K, d))
    icf, x = rng.standard_normal((K, d + d * (d - 1) // 2)), rng.standard_normal((n, d))
    gamma, m = 1.0, 0
    a = 0.5 * (d + m + 1)
    log_gamma_d = 0.25 * d * (d - 1) * math.log(math.pi) + sum(math.lgamma(a + 0.5 * (1 - j)) for j in range(1, d + 1))
    return (alphas, means, icf, x, gamma, m, log_gamma_d)


def _child_result(kernel: str, args: tuple, returned: object) -> list[float]:
    """What a child's call computed: norm's output array, GMM's objective."""
    return args[0].tolist() if kernel == "norm" else [float(returned)]


def _instrument(totals: dict[str, float]) -> None:
    import time as clock

    depth = [0]
    for path, attribute, label in PHASES:
        module_name, _, class_name = path.partition(":")
        owner = sys.modules.get(module_name)
        if owner is None:
            continue
        owner = getattr(owner, class_name) if class_name else owner
        original = getattr(owner, attribute, None)
        if original is None:
            continue

        def timed(*args, __original=original, __label=label, **kwargs):
            if depth[0]:
                return __original(*args, **kwargs)
            depth[0] += 1
            start = clock.perf_counter()
            try:
                return __original(*args, **kwargs)
            finally:
                totals[__label] = totals.get(__label, 0.0) + clock.perf_counter() - start
                depth[0] -= 1
        setattr(owner, attribute, timed)


def child(tool: str, kernel: str, phases: bool, cold: bool) -> dict:
    sys.path.insert(0, ROOT)
    result: dict = {}
    start = time.perf_counter()
    if tool == "isozyme":
        import isozyme  # noqa: F401
    else:
        import numba  # noqa: F401
    result["import_s"] = time.perf_counter() - start
    if tool == "isozyme":
        module = _load_example(kernel)
        function = module.norm if kernel == "norm" else module.gmm_objective
    else:
        numba_peers = _load_numba_peers()
        function = getattr(numba_peers, "norm" if kernel == "norm" else "gmm_objective")
    args = _child_inputs(kernel)
    if phases:
        totals: dict[str, float] = {}
        start = time.perf_counter()
        import isozyme.runtime.llvm_backend  # noqa: F401  (what a warm start imports: no llvmlite)
        import isozyme.runtime.source_key  # noqa: F401
        totals[IMPORT_PHASE] = time.perf_counter() - start
        if cold:  # a miss imports llvmlite and the code generator, and starts LLVM
            start = time.perf_counter()
            import isozyme.codegen.llvm  # noqa: F401
            from isozyme.runtime import llvm_jit
            llvm_jit.host()
            totals[LLVM_PHASE] = time.perf_counter() - start
        _instrument(totals)
    results = []
    for call in ("first_call_s", "second_call_s"):
        if kernel == "norm":
            args[0].fill(float("nan"))  # so that a call that writes nothing fails its check
        start = time.perf_counter()
        returned = function(*args)
        result[call] = time.perf_counter() - start
        results.append(_child_result(kernel, args, returned))
    result["results"] = results
    if phases:
        result["phases_s"] = totals
    if tool == "isozyme":
        from isozyme.runtime import disk_cache
        result["cache_stats"] = dict(disk_cache.stats)
        result["llvmlite_loaded"] = "llvmlite" in sys.modules
    return result


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    _, _, _tool, _kernel, *_flags = sys.argv
    print(json.dumps(child(_tool, _kernel, "--phases" in _flags, "--cold" in _flags)))
    sys.exit(0)


# ---------------------------------------------------------------------------------------------------------
# The driver.
# ---------------------------------------------------------------------------------------------------------

import argparse  # noqa: E402
import gc  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import timeit  # noqa: E402
from collections.abc import Iterable  # noqa: E402

import llvmlite  # noqa: E402
import llvmlite.binding as llvm  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, ROOT)  # the driver's isozyme is this checkout's, whose commit the results record

import isozyme as iz  # noqa: E402
from isozyme import Array, f64  # noqa: E402
from isozyme.benchmark_checks import MISMATCH, Check, exit_status  # noqa: E402
from isozyme.benchmark_suite import results as results_schema  # noqa: E402

try:
    import numba

    numba_peers = _load_numba_peers()
except ImportError as _error:
    numba = numba_peers = None
    NUMBA_MISSING = str(_error)
else:
    NUMBA_MISSING = ""

WARM_TARGET_S = 20e-3
CALL_TARGET_S = 5e-6
GMM_TARGET_RATIO = 1.5
RTOL = 1e-10
RTOL_REASON = "the same math in f64, rounded in another order (numpy's pairwise sums and einsum against loops)"
CHECKS: dict[str, Check] = {}
"""Every check of this run by name (module docstring), filled as the sections run."""


def check(name: str, what: str, tolerance: float = RTOL, reason: str = RTOL_REASON) -> Check:
    """The check `name` of `CHECKS`, made at its first use."""
    return CHECKS.setdefault(name, Check(what, tolerance, reason))


def child_reference(kernel: str) -> list[float]:
    """What a child's call must compute (`_child_result`), by numpy on the same inputs."""
    args = _child_inputs(kernel)
    if kernel == "norm":
        return (args[1] / np.sqrt(np.sum(args[1] * args[1]))).tolist()
    gmm = sys.modules.get("isozyme_example_gmm") or _load_example("gmm")
    return [gmm.gmm_objective_numpy(gmm.GMMInput(*args[:6]))]


@iz.kernel
def ident(a: f64) -> f64:
    return a


@iz.kernel
def first(x: Array[f64]) -> f64:
    return x[0]


def python_ident(a):
    return a


# --- formatting ------------------------------------------------------------------------------------------

def ms(seconds: float | None) -> str:
    return "skipped" if seconds is None else f"{1e3 * seconds:.1f} ms"


def us(seconds: float | None) -> str:
    return "skipped" if seconds is None else f"{1e6 * seconds:.3f} us"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}x"


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    fmt = [f"{cell:<{w}}" if i == 0 else f"{cell:>{w}}" for i, (cell, w) in enumerate(zip(header, widths))]
    out = ["  ".join(fmt), line]
    for row in rows:
        out.append("  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(out)


def section(title: str) -> None:
    print(f"\n== {title} ==")


def mark(checks: Iterable[Check]) -> str:
    """"ok", or MISMATCH (the failed checks are listed at the end)."""
    return "ok" if all(c.passed for c in checks) else MISMATCH


# --- host --------------------------------------------------------------------------------------------------

def host_info() -> dict:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    info = {
        "platform": platform.platform(), "machine": platform.machine(), "processor": platform.processor(),
        "python": platform.python_version(), "cpu_count": os.cpu_count(), "cpus_usable": affinity,
        "llvm_host_cpu": llvm.get_host_cpu_name(), "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)), "numpy": np.__version__,
        "numba": numba.__version__ if numba else None, "isozyme": iz.__version__,
    }
    section("host")
    print(f"platform {info['platform']} ({info['machine']}), python {info['python']}")
    print(f"cpus {info['cpu_count']} (usable {info['cpus_usable']}), LLVM host cpu {info['llvm_host_cpu']}")
    print(f"isozyme {info['isozyme']}, llvmlite {info['llvmlite']} (LLVM {info['llvm']}), numpy {info['numpy']}, "
          f"numba {info['numba'] or 'not importable: numba columns skipped (' + NUMBA_MISSING + ')'}")
    return info


# --- 1 and 2: cold compile and warm load in fresh processes ----------------------------------------------

PYCACHE_PREFIX = ""
"""The children's bytecode cache (`PYTHONPYCACHEPREFIX`, a temporary directory made by `main`), filled by
`prime_children` before any timing."""


def run_child(tool: str, kernel: str, cache_dir: str, phases: bool = False, cold: bool = False) -> dict:
    # No inherited backend, IR printing or cache setting; bytecode cached (as in an ordinary install) but
    # outside the source tree, even where PYTHONDONTWRITEBYTECODE is set.
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ISOZYME_", "NUMBA_")) and key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = PYCACHE_PREFIX
    if tool == "isozyme":
        env["ISOZYME_CACHE_DIR"] = cache_dir
    else:
        env["NUMBA_CACHE_DIR"] = cache_dir
        env["ISOZYME_BENCH_NUMBA_CACHE"] = "1"
    command = [sys.executable, os.path.abspath(__file__), "--child", tool, kernel] + (["--phases"] if phases else []) \
        + (["--cold"] if cold else [])
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"child {' '.join(command[2:])} failed ({done.returncode}):\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    checked = check(f"{kernel} {tool} child", f"{kernel}: the {tool} child's first and second calls against numpy")
    for returned in result.pop("results"):
        checked.compare(returned, child_reference(kernel))
    return result


def check_cache_stats(kernel: str, mode: str, stats: dict) -> None:
    if mode == "cold":
        ok = stats.get("misses", 0) >= 1 and stats.get("stores", 0) >= 1 and not stats.get("hits")
    else:
        ok = stats.get("hits", 0) >= 1 and not stats.get("misses") and not stats.get("corrupt")
    if not ok:
        raise SystemExit(f"{kernel} {mode}: unexpected isozyme disk cache events {stats}")


def prime_children(tools: list[str]) -> None:
    """One untimed child per tool and kernel: fills the bytecode cache and the OS file cache."""
    for tool in tools:
        for kernel in ("norm", "gmm"):
            directory = tempfile.mkdtemp(prefix=f"llvm_backend_{tool}_")
            try:
                run_child(tool, kernel, directory)
            finally:
                shutil.rmtree(directory, ignore_errors=True)


def measure_compile(runs: int) -> dict:
    section(f"1-2. first call in a fresh process: cold (empty cache) and warm (same cache dir); median (min) of "
            f"{runs} run{'s' if runs != 1 else ''}")
    results: dict = {}
    tools = ["isozyme"] + (["numba"] if numba else [])
    prime_children(tools)
    print(f"children: {sys.executable}, bytecode cached in {PYCACHE_PREFIX} (primed by one untimed child per "
          "tool and kernel), each first call on a new empty cache dir (cold) and then the same dir (warm)")
    for kernel in ("norm", "gmm"):
        per: dict = {tool: {"cold": [], "warm": []} for tool in tools}
        for _ in range(runs):
            for tool in tools:
                directory = tempfile.mkdtemp(prefix=f"llvm_backend_{tool}_")
                try:
                    for mode in ("cold", "warm"):
                        result = run_child(tool, kernel, directory)
                        if tool == "isozyme":
                            check_cache_stats(kernel, mode, result["cache_stats"])
                        per[tool][mode].append(result)
                finally:
                    shutil.rmtree(directory, ignore_errors=True)
        results[kernel] = per
    rows = []
    for kernel, per in results.items():
        for mode in ("cold", "warm"):
            def stat(tool: str, key: str, fn=statistics.median, mode=mode, per=per) -> float | None:
                return fn(r[key] for r in per[tool][mode]) if tool in per else None
            iz_first, nb_first = stat("isozyme", "first_call_s"), stat("numba", "first_call_s")
            stats = per["isozyme"][mode][-1]["cache_stats"]
            loaded = sum(r["llvmlite_loaded"] for r in per["isozyme"][mode])
            rows.append([f"{kernel} {mode}", f"{ms(iz_first)} ({ms(stat('isozyme', 'first_call_s', min))})",
                         us(stat("isozyme", "second_call_s")),
                         ms(nb_first) + (f" ({ms(stat('numba', 'first_call_s', min))})" if nb_first else ""),
                         ratio(iz_first, nb_first), f"{loaded}/{len(per['isozyme'][mode])}",
                         " ".join(f"{k}={v}" for k, v in sorted(stats.items())),
                         mark(CHECKS[f"{kernel} {tool} child"] for tool in per)])
    print(table(["kernel", "isozyme 1st call", "2nd call", "numba 1st call", "iz/numba", "llvmlite loaded",
                 "isozyme cache stats", "check"], rows))
    iz_import = statistics.median(r["import_s"] for p in results.values() for m in ("cold", "warm")
                                  for r in p["isozyme"][m])
    nb_import = statistics.median(r["import_s"] for p in results.values() for m in ("cold", "warm")
                                  for r in p["numba"][m]) if numba else None
    print(f"imports in the children (median, not in the times above): import isozyme {ms(iz_import)}, "
          f"import numba {ms(nb_import)}")
    if numba:
        print("numba's cold run compiles and writes its cache (cache=True); its warm run loads from that cache.")
    summary = {
        kernel: {tool: {mode: {"first_call_median_s": statistics.median(r["first_call_s"] for r in per[tool][mode]),
                               "first_call_min_s": min(r["first_call_s"] for r in per[tool][mode]),
                               "second_call_median_s": statistics.median(r["second_call_s"] for r in per[tool][mode]),
                               "runs": per[tool][mode]}
                        for mode in ("cold", "warm")} for tool in per}
        for kernel, per in results.items()}
    return {"import_isozyme_median_s": iz_import, "import_numba_median_s": nb_import, "kernels": summary}


def measure_phases() -> dict:
    section("where the isozyme first call goes (one instrumented fresh process per row; timers add a little)")
    labels = [IMPORT_PHASE, LLVM_PHASE, *[label for _, _, label in PHASES]]
    columns, results = [], {}
    for kernel in ("norm", "gmm"):
        directory = tempfile.mkdtemp(prefix="llvm_backend_phases_")
        try:
            for mode in ("cold", "warm"):
                result = run_child("isozyme", kernel, directory, phases=True, cold=mode == "cold")
                check_cache_stats(kernel, mode, result["cache_stats"])
                phases = result["phases_s"]
                total = result["first_call_s"] + phases[IMPORT_PHASE] + phases.get(LLVM_PHASE, 0.0)
                phases["rest of the first call"] = total - sum(phases.values())
                results[f"{kernel} {mode}"] = {"total_s": total, "phases_s": phases}
                columns.append(f"{kernel} {mode}")
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    rows = []
    for label in [*labels, "rest of the first call"]:
        cells = [results[c]["phases_s"].get(label) for c in columns]
        if any(cell is not None for cell in cells):
            rows.append([label, *("-" if cell is None else ms(cell) for cell in cells)])
    rows.append(["total (what the first call costs)", *(ms(results[c]["total_s"]) for c in columns)])
    print(table(["phase", *columns], rows))
    return results


# --- 3: per-call overhead ---------------------------------------------------------------------------------

def measure_overhead(number: int, repeat: int) -> dict:
    section(f"3. per-call overhead: timeit, {number} calls x {repeat} samples (interleaved), per call")
    x = np.arange(8, dtype=np.float64)
    variants = {"ident(1.0)": [("isozyme", ident, 1.0), ("numba", numba_peers and numba_peers.ident, 1.0),
                               ("python", python_ident, 1.0)],
                "first(x)": [("isozyme", first, x), ("numba", numba_peers and numba_peers.first, x)]}
    results: dict = {}
    rows = []
    for label, entries in variants.items():
        timers, checked = {}, {}
        expected = 1.0 if label.startswith("ident") else x[0]
        for tool, function, argument in entries:
            if function is None:
                continue
            checked[tool] = (check(f"{label} {tool}", f"{label} on {tool}: a call before and after the samples",
                                   0.0, "it returns its argument, or an element of it"), function, argument)
            timers[tool] = timeit.Timer("f(a)", globals={"f": function, "a": argument})
        for tool_check, function, argument in checked.values():
            tool_check.compare(function(argument), expected)
        samples: dict[str, list[float]] = {tool: [] for tool in timers}
        for timer in timers.values():
            timer.timeit(number // 10)  # warm-up
        for _ in range(repeat):
            for tool, timer in timers.items():
                samples[tool].append(timer.timeit(number) / number)
        for tool_check, function, argument in checked.values():
            tool_check.compare(function(argument), expected)
        stats = {tool: {"min_s": min(s), "median_s": statistics.median(s), "samples_s": s}
                 for tool, s in samples.items()}
        results[label] = stats

        def get(tool: str, key: str, stats=stats) -> float | None:
            return stats[tool][key] if tool in stats else None
        rows.append([label, us(get("isozyme", "median_s")), us(get("isozyme", "min_s")),
                     us(get("numba", "median_s")), us(get("numba", "min_s")),
                     ratio(get("isozyme", "median_s"), get("numba", "median_s")),
                     us(get("python", "median_s")) if "python" in stats else "-",
                     mark(c for c, _, _ in checked.values())])
    print(table(["call", "isozyme median", "isozyme min", "numba median", "numba min", "iz/numba (median)",
                 "plain Python def", "check"], rows))
    return results


# --- 4: GMM objective ---------------------------------------------------------------------------------------

def measure_gmm(sizes: list[tuple[int, int, int]], min_time: float, min_rounds: int) -> dict:
    section(f"4. GMM objective: rounds of one call per variant until each has run {min_time} s "
            f"(at least {min_rounds} rounds); median (min)")
    gmm = sys.modules.get("isozyme_example_gmm") or _load_example("gmm")
    results: dict = {}
    rows = []
    for d, K, n in sizes:
        data = gmm.gmm_data(d, K, n)
        args = (data.alphas, data.means, data.icf, data.x, data.gamma, data.m,
                gmm.log_gamma_distrib(0.5 * (d + data.m + 1), d))
        variants = {"isozyme": lambda args=args: gmm.gmm_objective(*args),
                    "numpy": lambda data=data: gmm.gmm_objective_numpy(data)}
        if numba_peers:
            variants["numba"] = lambda args=args: numba_peers.gmm_objective(*args)
        reference = gmm.gmm_objective_numpy(data)
        checks = {tool: check(f"gmm d={d} K={K} n={n} {tool}", f"GMM d={d} K={K} n={n}: every call of {tool} "
                              "against gmm_objective_numpy") for tool in variants}
        values = {tool: fn() for tool, fn in variants.items()}  # also the warm-up (numba compiles here)
        for tool, value in values.items():
            checks[tool].compare(value, reference)
        for fn in variants.values():
            fn()
        samples: dict[str, list[float]] = {tool: [] for tool in variants}
        gc.disable()
        try:
            while len(samples["isozyme"]) < min_rounds or min(sum(s) for s in samples.values()) < min_time:
                for tool, fn in variants.items():
                    start = time.perf_counter()
                    value = fn()
                    samples[tool].append(time.perf_counter() - start)
                    checks[tool].compare(value, reference)
        finally:
            gc.enable()
        stats = {tool: {"median_s": statistics.median(s), "min_s": min(s), "rounds": len(s), "value": values[tool]}
                 for tool, s in samples.items()}
        results[f"d={d} K={K} n={n}"] = stats

        def cell(tool: str, stats=stats) -> str:
            return f"{ms(stats[tool]['median_s'])} ({ms(stats[tool]['min_s'])})" if tool in stats else "skipped"

        def rat(tool: str, key: str, stats=stats) -> str:
            return ratio(stats["isozyme"][key], stats[tool][key]) if tool in stats else "-"
        rows.append([f"d={d} K={K} n={n}", cell("isozyme"), cell("numba"), cell("numpy"),
                     f"{rat('numba', 'median_s')} ({rat('numba', 'min_s')})",
                     f"{rat('numpy', 'median_s')} ({rat('numpy', 'min_s')})", str(len(samples["isozyme"])),
                     mark(checks.values())])
        print(f"d={d} K={K} n={n}: objective {reference:.10g} (numpy); every call of every variant within "
              f"{max(c.error for c in checks.values()):.1e} of it, relative")
    print(table(["size", "isozyme", "numba", "numpy", "iz/numba", "iz/numpy", "rounds", "check"], rows))
    return results


# --- targets and main ---------------------------------------------------------------------------------------

def targets(compile_results: dict, overhead: dict, gmm_results: dict) -> list[dict]:
    checks = []
    for kernel, per in compile_results["kernels"].items():
        value = per["isozyme"]["warm"]["first_call_median_s"]
        checks.append({"target": f"warm load of {kernel} from the disk cache <= {ms(WARM_TARGET_S)}",
                       "value": ms(value), "met": value <= WARM_TARGET_S})
        loaded = sum(run["llvmlite_loaded"] for run in per["isozyme"]["warm"]["runs"])
        checks.append({"target": f"warm load of {kernel} does not import llvmlite",
                       "value": f"imported in {loaded} of {len(per['isozyme']['warm']['runs'])} runs",
                       "met": loaded == 0})
    for label, stats in overhead.items():
        value = stats["isozyme"]["median_s"]
        checks.append({"target": f"per-call overhead {label} <= {us(CALL_TARGET_S)}", "value": us(value),
                       "met": value <= CALL_TARGET_S})
    for size, stats in gmm_results.items():
        if "numba" in stats:
            value = stats["isozyme"]["median_s"] / stats["numba"]["median_s"]
            checks.append({"target": f"GMM {size} isozyme/numba <= {GMM_TARGET_RATIO}", "value": f"{value:.2f}x",
                           "met": value <= GMM_TARGET_RATIO})
        else:
            checks.append({"target": f"GMM {size} isozyme/numba <= {GMM_TARGET_RATIO}", "value": "skipped",
                           "met": None})
    section("targets")
    failed = [c for c in CHECKS.values() if not c.passed]
    rows = [[c["target"], c["value"], {True: "yes", False: "NO", None: "-"}[c["met"]]] for c in checks]
    rows.append([f"every result within its tolerance ({len(CHECKS)} checks)",
                 f"{len(failed)} failed" if failed else "all passed", "yes" if not failed else MISMATCH])
    print(table(["target", "measured", "met"], rows))
    return checks


def result_rows(results: dict, args: argparse.Namespace) -> list[dict]:
    """The measurements of `run` as rows of the results schema (module docstring)."""
    def kind(tool: str) -> str:
        return "natural" if tool == "isozyme" else "peer"
    made = []
    for kernel, per in results["compile"]["kernels"].items():
        for tool, modes in per.items():
            for mode, stats in modes.items():
                made.append(results_schema.row(
                    f"{kernel} first call in a new process", f"{mode} disk cache", tool, kind(tool),
                    stats["first_call_median_s"] * 1e3, CHECKS[f"{kernel} {tool} child"].as_dict(),
                    min_ms=stats["first_call_min_s"] * 1e3, calls=len(stats["runs"]),
                    details={"second_call_median_s": stats["second_call_median_s"]}))
    for label, per in results["overhead"].items():
        for tool, stats in per.items():
            made.append(results_schema.row("per-call overhead", label, tool, kind(tool), stats["median_s"] * 1e3,
                                           CHECKS[f"{label} {tool}"].as_dict(), min_ms=stats["min_s"] * 1e3,
                                           calls=args.number * args.repeat))
    for size, per in results["gmm"].items():
        for tool, stats in per.items():
            made.append(results_schema.row("gmm objective", size, tool, kind(tool), stats["median_s"] * 1e3,
                                           CHECKS[f"gmm {size} {tool}"].as_dict(), min_ms=stats["min_s"] * 1e3,
                                           calls=stats["rounds"]))
    return made


def parse_sizes(text: str) -> list[tuple[int, int, int]]:
    sizes = []
    for part in text.split(","):
        d, K, n = (int(v) for v in part.lower().split("x"))
        sizes.append((d, K, n))
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh-process runs per kernel and tool (default 5)")
    parser.add_argument("--number", type=int, default=100_000, help="calls per overhead sample (default 100000)")
    parser.add_argument("--repeat", type=int, default=7, help="overhead samples (default 7)")
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("10x25x1000,64x50x1000"),
                        help="GMM sizes dxKxn, comma-separated (default 10x25x1000,64x50x1000)")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per GMM variant (default 0.2)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    global PYCACHE_PREFIX
    PYCACHE_PREFIX = tempfile.mkdtemp(prefix="llvm_backend_pycache_")
    try:
        run(args)
    finally:
        shutil.rmtree(PYCACHE_PREFIX, ignore_errors=True)
    return exit_status(CHECKS.values(), "llvm_backend.py")


def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    results: dict = {"host": host_info()}
    results["compile"] = measure_compile(args.runs)
    results["first_call_phases"] = measure_phases()
    results["overhead"] = measure_overhead(args.number, args.repeat)
    results["gmm"] = measure_gmm(args.sizes, args.min_time, min_rounds=5)
    results["targets"] = targets(results["compile"], results["overhead"], results["gmm"])
    results["passed"] = all(c.passed for c in CHECKS.values())
    results["checks"] = {name: c.as_dict() for name, c in CHECKS.items()}
    results["wall_s"] = time.perf_counter() - started
    print(f"\nwall time {results['wall_s']:.1f} s")
    if args.json:
        extra = {key: results[key] for key in ("host", "first_call_phases", "targets", "wall_s")}
        extra.update({key: results["compile"][key] for key in ("import_isozyme_median_s", "import_numba_median_s")})
        results_schema.write(args.json, "llvm_backend", result_rows(results, args),
                             {"runs": args.runs, "number": args.number, "repeat": args.repeat,
                              "sizes": ["x".join(map(str, size)) for size in args.sizes], "min_time": args.min_time},
                             extra, passed=results["passed"])
        print(f"results written to {args.json}")


if __name__ == "__main__":
    raise SystemExit(main())
