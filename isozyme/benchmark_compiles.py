"""The compiles of `python -m isozyme bench`, made in worker processes before any timing (issue 60).

Compiling a variant is Python (the frontend, AD, the optimizer, code generation) and then LLVM, whose every
call llvmlite makes behind one process-wide lock: threads cannot overlap compiles, processes can. So, with
`--jobs N` (N > 0; by default one per core), every variant of every benchmark of the run (its primal and
its opt="post" and "pre" gradients) makes its first call in one of N worker processes, on the arguments of
the benchmark's first row, as `benchmarking.interleaved` makes it (`first_call`), once the worker has
loaded what any compile needs (`start_worker`; a process's first compile would count it as its own).

The disk cache is on, in a directory made empty for the run and removed after it (`private_cache`): a
worker stores what it compiles there, and the main process, which times the rows once every compile is
done, loads it from there at its own first call instead of compiling. A worker returns how long its first
call took; the row's compile time is that less the median of the main process's calls
(`benchmarking.compiled_in_workers`), as when the first call compiles in the main process. Nothing else
changes: every call of the main process is checked, and no timed call shares the machine with a compile.

A variant whose first call fails in a worker (a compile error) is left to the main process, which compiles
it (and fails, or not) at its first call, as every variant is with `--jobs 0`, the disk cache off; so is
every variant not yet compiled when the workers cannot start or one dies. Workers are spawned (fresh
interpreters, safe with the parent's BLAS threads; a script that runs the suite needs Python's `if
__name__ == "__main__":` guard), so a worker knows a benchmark by its name in the suite: the kernel of a
user's file (`kernel_comparison.py`) compiles in the main process.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

VARIANTS = ("post", "pre", "primal")
"""The variants a worker compiles, the gradients first: they take longest, and the primals fill the end."""

Job = tuple[str, str, Mapping[str, Any]]
"""A benchmark's name, a variant of `VARIANTS`, and the size of the benchmark's first row."""


def jobs_of(work: Sequence[tuple[Any, Mapping[str, Any]]]) -> list[Job]:
    """A job per variant of every benchmark of `work` (its (benchmark, size) rows), at its first row's size."""
    first_sizes: dict[str, Mapping[str, Any]] = {}
    for bench, size in work:
        first_sizes.setdefault(bench.name, size)
    return [(name, variant, size) for variant in VARIANTS for name, size in first_sizes.items()]


def start_worker() -> None:
    """A worker's start: what a compile needs loaded (the suite, the code generator, LLVM's host target),
    which a process's first compile would otherwise count as its own."""
    from isozyme.codegen import llvm  # noqa: F401 - imported on a first compile only
    from isozyme.runtime import llvm_jit

    _benchmarks()
    llvm_jit.host()


@functools.cache
def _benchmarks() -> dict[str, Any]:
    from isozyme import benchmark_suite as suite

    return {bench.name: bench for bench in suite.all_benchmarks()}


def first_call(job: Job) -> float | None:
    """In a worker: the seconds of the first call of the job's variant (which compiles it), prepared and
    timed as `benchmarking.interleaved` does; None when it raised (the main process will say why)."""
    from isozyme import benchmark_suite as suite
    from isozyme.benchmarking import References, checked_variants

    name, variant, size = job
    try:
        bench = _benchmarks()[name]
        args = bench.make_args(seed=0, **size)
        prepared = checked_variants(bench, args, suite, References(bench, args, suite))[variant].prepare()
        start = time.perf_counter()
        prepared()
        return time.perf_counter() - start
    except Exception:  # noqa: BLE001 - reported by the main process's own first call
        return None


def first_calls_in_workers(jobs: Sequence[Job], workers: int, step: Callable[[str], None]
                           ) -> dict[tuple[str, str], float]:
    """Each job's `first_call` in `workers` spawned processes, by (benchmark, variant); `step` is told of
    each job done. Call it inside `private_cache()`, so that the main process finds what they compiled."""
    first: dict[tuple[str, str], float] = {}
    context = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=max(1, min(workers, len(jobs))), mp_context=context,
                                 initializer=start_worker) as pool:
            running = {pool.submit(first_call, job): job for job in jobs}
            for done in as_completed(running):
                name, variant, _ = running[done]
                seconds = done.result()
                if seconds is not None:
                    first[(name, variant)] = seconds
                step(f"{name} {variant} compiled" if seconds is not None else f"{name} {variant}: left to this process")
    except (BrokenProcessPool, OSError) as error:  # no worker could start, or one died
        step(f"compiling in workers stopped ({type(error).__name__}): the rest compile at their first call")
    return first


CACHE_VARIABLES = ("ISOZYME_CACHE", "ISOZYME_CACHE_DIR")


@contextlib.contextmanager
def private_cache() -> Iterator[str]:
    """The disk cache on, in a new empty directory (mode 0700, `tempfile.mkdtemp`), for this process and
    the workers it spawns; the variables restored and the directory removed after."""
    before = {name: os.environ.get(name) for name in CACHE_VARIABLES}
    directory = tempfile.mkdtemp(prefix="isozyme-bench-")
    os.environ.update({"ISOZYME_CACHE": "on", "ISOZYME_CACHE_DIR": directory})
    try:
        yield directory
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(directory, ignore_errors=True)


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1
