"""The results of a benchmark run as data: the one JSON schema that `python -m isozyme bench --json` and every
timing script of `benchmarks/` write (issue 60, item 3). A tool module: no part of the compiler imports it.

A document (`write` makes it, `validate` checks it):

    {"schema": "isozyme-benchmark-results/1", "benchmark": "gmm_cpu",
     "commit": "<40 hex digits>" | null, "dirty": false | true | null, "date": "2026-12-01T10:00:00Z",
     "isozyme_version": "0.1.0", "python": "3.12.3", "command": "python benchmarks/gmm_cpu.py --json ...",
     "environment": {"ISOZYME_OPENCL_DEVICE": "nvidia", ...},
     "machine": {"cpu": "AMD EPYC", "cores_used": 2, "cores_total": 2, "load_average": 0.4, "gpu": null,
                 "gpu_driver": null, "opencl_device": null, "kind": "epyc-2cores"},
     "peers": {"jax": "0.4.30", "jaxlib": "0.4.30", "torch": null, "numba": null, "numpy": "2.1.0"},
     "passed": true, "parameters": {...}, "rows": [ROW, ...], "extra": {...}}

- `commit` is `git rev-parse HEAD` of the checkout the `isozyme` package was imported from (null outside
  one), `dirty` whether `git status --porcelain` lists anything there (the results folder,
  `benchmarks/results/`, apart: a run that writes its results must not make the next one dirty). A copy of
  a checkout without its `.git` (sent to another machine to run there) has them from whoever copied it:
  `ISOZYME_SOURCE_COMMIT` (40 hex digits) and `ISOZYME_SOURCE_DIRTY` (0 or 1), which the "environment"
  then shows (`source_state`).
- `date` is when this process imported this module (the run's start), UTC, ISO 8601.
- `command` is `sys.argv` as run (`python -m isozyme ...` for the package's `__main__`); `environment` the
  variables that change what runs (`ENVIRONMENT`), as they were at that import.
- `machine`: the CPU model (`/proc/cpuinfo`), the cores this process may use (`os.sched_getaffinity`) and
  the machine's, the load average over the minute before the run started (`os.getloadavg`: on a shared
  machine, how many other processes wanted the cores; null where unknown); the GPU and its driver where the
  run used one (the OpenCL device isozyme chose, or CUDA through PyTorch or JAX, named by `nvidia-smi`), and
  the OpenCL device whatever its type; `kind` a short name of the machine for file names ("h200",
  "xeon-2cores"; `ISOZYME_MACHINE_KIND` overrides it).
- `peers`: the versions of the peer packages installed (null where not), read from their metadata.
- `parameters`: the run's options; `extra`: what the script measured beyond rows (memory plans, targets).
- `passed`: false if a row's check failed (or one outside the rows: the script says).

A row (`row` makes one): {"problem", "size", "variant", "kind", "median_ms", "check"} and optionally
"min_ms", "calls", "compile_ms", "first_call_s", "warm_first_call_s" (a first call in a new process with the
disk cache filled), "ratios" ({name: number}, computed in the run, such as pre/post) and "details" (anything
else). `kind` is one of `KINDS`:

- `natural`: the kernel as a user writes it: the examples' and the suite's kernels, with only `prange` and
  documented `fastmath=` flags added;
- `tuned`: rewritten for a device by hand (`benchmarks/tuned/`, and the suite's `gmm_by_component`, whose
  loops are swapped by hand); shown only beside the natural row of the same problem and size;
- `peer`: another tool (JAX, PyTorch, numba, numpy...).

Rows compare within one problem and size: the same quantity (a gradient, a primal) on the same inputs.
`check` is `isozyme.benchmark_checks.Check.as_dict()` ({"passed", "error", "tolerance", ...}), several of
them (`checks_json`: {"passed", "checks": {name: ...}}), or `unchecked(reason)` ({"passed": null,
"reason"}) for a row that is itself the reference or is recorded as data only.
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SCHEMA = "isozyme-benchmark-results/1"
KINDS = ("natural", "tuned", "peer")
PEERS = ("jax", "jaxlib", "torch", "numba", "numpy")
ENVIRONMENT = re.compile(r"(?:ISOZYME|JAX)_\w+|XLA_FLAGS|OMP_NUM_THREADS|CUDA_VISIBLE_DEVICES")
"""The variables recorded with the command: every isozyme and JAX setting by its prefix (but the cache
folder, `UNRECORDED`: a fresh folder's path says nothing), XLA's flags and the thread and device choices."""
UNRECORDED = frozenset({"ISOZYME_CACHE_DIR"})
PACKAGE = Path(__file__).resolve().parents[1]
"""The `isozyme` package: its checkout is the one whose commit is recorded."""
RESULTS_FOLDER = "benchmarks/results"
"""Where the results are kept, relative to the checkout: not counted as a change of the tree."""

STARTED = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
ENVIRONMENT_AT_START = {name: value for name, value in sorted(os.environ.items())
                        if ENVIRONMENT.fullmatch(name) and name not in UNRECORDED}
LOAD_AT_START = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

TIMING_FIELDS = ("min_ms", "compile_ms", "first_call_s", "warm_first_call_s")
"""Optional numbers of a row (null allowed: a process that failed)."""
ROW_FIELDS = {"problem", "size", "variant", "kind", "median_ms", "check", "calls", "ratios", "details",
              *TIMING_FIELDS}
DOCUMENT_FIELDS = {"schema", "benchmark", "commit", "dirty", "date", "isozyme_version", "python", "command",
                   "environment", "machine", "peers", "passed", "parameters", "rows", "extra"}
MACHINE_FIELDS = {"cpu", "cores_used", "cores_total", "load_average", "gpu", "gpu_driver", "opencl_device", "kind"}


# --- rows and checks ------------------------------------------------------------------------------------------

def row(problem: str, size: str, variant: str, kind: str, median_ms: float | None, check: Mapping[str, Any],
        **fields: Any) -> dict[str, Any]:
    """A row of a document (module docstring); `fields` are its optional entries."""
    return {"problem": problem, "size": size, "variant": variant, "kind": kind, "median_ms": median_ms,
            "check": dict(check), **fields}


def unchecked(reason: str) -> dict[str, Any]:
    """The check of a row that nothing is compared with: the reference itself, or data recorded as data."""
    return {"passed": None, "reason": reason}


def document_passed(rows: Sequence[Mapping[str, Any]]) -> bool:
    """No row's check failed."""
    return all(entry["check"].get("passed") is not False for entry in rows)


# --- the stamp ------------------------------------------------------------------------------------------------

def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(directory: Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout that tracks `directory`'s files; (None, None) outside one (an installed
    package, or a folder git does not track)."""
    top = _git(directory, "rev-parse", "--show-toplevel")
    if top is None or not _git(directory, "ls-files", "--", "."):
        return None, None
    commit = (_git(directory, "rev-parse", "HEAD") or "").strip() or None
    status = _git(Path(top.strip()), "status", "--porcelain", "--", ".", f":(exclude){RESULTS_FOLDER}")
    return commit, None if status is None or commit is None else bool(status.strip())  # None: unknown


def source_state(directory: Path, environ: Mapping[str, str]) -> tuple[str | None, bool | None]:
    """The commit and dirtiness `environ` declares for a copy of a checkout (module docstring), else
    `git_state(directory)`, else (None, None). A declaration comes first: a copy sent to another machine may
    carry a stale `.git` of that machine's own (on the device machine, the checkout the copy was laid over),
    whose HEAD is not the code that runs."""
    declared = environ.get("ISOZYME_SOURCE_COMMIT", "")
    if re.fullmatch(r"[0-9a-f]{40}", declared):
        return declared, {"0": False, "1": True}.get(environ.get("ISOZYME_SOURCE_DIRTY", ""))
    return git_state(directory)


@functools.cache
def _package_git_state() -> tuple[str | None, bool | None]:
    """The package's checkout, once per process, at the first stamp: before this run wrote its results."""
    return source_state(PACKAGE, ENVIRONMENT_AT_START)


def command_line(argv: Sequence[str]) -> str:
    """`argv` as a command: `python -m isozyme ...` for the package's `__main__`, `python SCRIPT ...` else."""
    if argv and Path(argv[0]).resolve() == PACKAGE / "__main__.py":
        return shlex.join(["python", "-m", "isozyme", *argv[1:]])
    return shlex.join(["python", *argv])


def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo`; `platform.processor()` or the architecture elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.split(":")[0].strip() in ("model name", "Model", "Hardware"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def nvidia_smi() -> tuple[str, str] | None:
    """(name, driver) of the first GPU `nvidia-smi` lists, None without one."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines() if done.returncode == 0 else []
    if not lines or "," not in lines[0]:
        return None
    name, driver = (part.strip() for part in lines[0].rsplit(",", 1))
    return name, driver


def _cuda_used() -> bool:
    """Did PyTorch or JAX run on a CUDA GPU in this process (neither is imported here)?"""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return True
        jax = sys.modules.get("jax")
        return jax is not None and any(d.platform == "gpu" for d in jax.devices())
    except Exception:  # a peer's own error says nothing about the machine
        return False


def accelerators() -> dict[str, str | None]:
    """The GPU (and driver) and the OpenCL device this process used, None where it used none."""
    found: dict[str, str | None] = {"gpu": None, "gpu_driver": None, "opencl_device": None}
    opencl = sys.modules.get("isozyme.runtime.opencl_device")
    if opencl is not None and opencl.device.cache_info().currsize:  # isozyme chose a device: it ran there
        chosen = opencl.device()
        found["opencl_device"] = chosen.name
        if chosen.is_gpu:
            found["gpu"] = chosen.name.split(": ", 1)[-1]
            found["gpu_driver"] = chosen.context.devices[0].driver_version
    if found["gpu"] is None and _cuda_used() and nvidia_smi() is not None:
        found["gpu"], found["gpu_driver"] = nvidia_smi()
    return found


VENDOR_WORDS = {"nvidia", "amd", "intel", "genuine", "authentic", "corporation", "geforce", "tesla", "processor",
                "cpu", "r", "tm"}


def _short_name(model: str, gpu: bool) -> str:
    """A model name's first word that is no vendor's (a GPU's first with a digit): "h100" for "NVIDIA H100 80GB
    HBM3", "epyc" for "AMD EPYC 7763 64-Core Processor"."""
    words = [w for w in re.findall(r"[a-z0-9]+", model.lower()) if w not in VENDOR_WORDS] or ["machine"]
    return next((w for w in words if any(c.isdigit() for c in w)), words[0]) if gpu else words[0]


def machine_kind(cpu: str, cores_used: int, gpu: str | None) -> str:
    """`ISOZYME_MACHINE_KIND`, else the GPU's short name, else the CPU's and the cores used: "xeon-2cores"."""
    return os.environ.get("ISOZYME_MACHINE_KIND") or (_short_name(gpu, True) if gpu else
                                                      f"{_short_name(cpu, False)}-{cores_used}cores")


def machine() -> dict[str, Any]:
    used = accelerators()
    cpu, cores = cpu_model(), len(os.sched_getaffinity(0))
    return {"cpu": cpu, "cores_used": cores, "cores_total": os.cpu_count() or cores,
            "load_average": None if LOAD_AT_START is None else round(LOAD_AT_START, 2), **used,
            "kind": machine_kind(cpu, cores, used["gpu"])}


def peer_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PEERS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def stamp(benchmark: str, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Everything of a document but its rows, `passed`, `parameters` and `extra` (module docstring)."""
    from isozyme.runtime.version import VERSION

    commit, dirty = _package_git_state()
    return {"schema": SCHEMA, "benchmark": benchmark, "commit": commit, "dirty": dirty, "date": STARTED,
            "isozyme_version": VERSION, "python": platform.python_version(),
            "command": command_line(sys.argv if argv is None else argv), "environment": dict(ENVIRONMENT_AT_START),
            "machine": machine(), "peers": peer_versions()}


def document(benchmark: str, rows: Sequence[Mapping[str, Any]], parameters: Mapping[str, Any] | None = None,
             extra: Mapping[str, Any] | None = None, passed: bool = True) -> dict[str, Any]:
    """The stamped document of `rows`; `passed` false for a failed check outside the rows. Raises ValueError
    naming what `validate` found wrong."""
    made = json_safe({**stamp(benchmark), "passed": bool(passed) and document_passed(rows),
                      "parameters": dict(parameters or {}), "rows": [dict(r) for r in rows],
                      "extra": dict(extra or {})})
    problems = validate(made)
    if problems:
        raise ValueError(f"the results of {benchmark} do not follow {SCHEMA}: " + "; ".join(problems))
    return made


def write(path: str | os.PathLike[str], benchmark: str, rows: Sequence[Mapping[str, Any]],
          parameters: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None,
          passed: bool = True) -> dict[str, Any]:
    """Write `document(...)` to `path` and return it."""
    return write_document(path, document(benchmark, rows, parameters, extra, passed))


def write_document(path: str | os.PathLike[str], made: dict[str, Any]) -> dict[str, Any]:
    """Write a document (`document`) to `path` as JSON, its folder made if missing (NaN refused: `json_safe`)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(made, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return made


def json_safe(value: Any) -> Any:
    """`value` as JSON holds it: numpy scalars as Python's, tuples as lists, an infinite or NaN float as null
    (an error that cannot be measured, as `Check.as_dict` writes it)."""
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "shape", None) == ():
        value = value.item()  # a numpy scalar
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def file_name(benchmark: str, kind: str) -> str:
    """`<benchmark>_<machine kind>.json`: the results folder keeps the latest run of each."""
    return f"{benchmark}_{kind}.json"


# --- the validator --------------------------------------------------------------------------------------------

def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is(value: object, kinds: tuple[type, ...]) -> bool:
    """`float` means a finite number (an int too); `bool` is no `int` unless named."""
    if kinds == (float,):
        return _number(value)
    return isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))


def _expect(problems: list[str], where: str, value: object, kinds: tuple[type, ...], nullable: bool = False) -> bool:
    """Is `value` of `kinds` (or None, if `nullable`)? A message in `problems` if not."""
    if (value is None and nullable) or _is(value, kinds):
        return True
    names = "a finite number" if kinds == (float,) else " or ".join(k.__name__ for k in kinds)
    problems.append(f"{where}: expected {names}{' or null' if nullable else ''}, got {value!r:.60}")
    return False


def _unknown(problems: list[str], where: str, value: Mapping[str, Any], known: set[str]) -> None:
    problems.extend(f"{where}: unknown field {key!r}" for key in sorted(set(value) - known))


def validate_check(check: object, where: str) -> list[str]:
    """What is wrong with a row's `check` (module docstring); a check that passed must be within its
    tolerance, one of several checks that passed must have every one pass."""
    problems: list[str] = []
    if not isinstance(check, dict) or "passed" not in check:
        return [f"{where}: a check is an object with 'passed'"]
    passed = check["passed"]
    if passed is None:
        _expect(problems, f"{where}.reason", check.get("reason"), (str,))
    elif not isinstance(passed, bool):
        problems.append(f"{where}.passed: expected true, false or null")
    elif "checks" in check:
        if not isinstance(check["checks"], dict) or not check["checks"]:
            return [f"{where}.checks: expected a non-empty object"]
        for name, inner in check["checks"].items():
            problems += validate_check(inner, f"{where}.checks[{name!r}]")
        if passed and any(isinstance(c, dict) and c.get("passed") is False for c in check["checks"].values()):
            problems.append(f"{where}: passed, but one of its checks failed")
    else:
        if _expect(problems, f"{where}.tolerance", check.get("tolerance"), (float,)) and \
                _expect(problems, f"{where}.error", check.get("error", "missing"), (float,), nullable=True):
            if passed and (check["error"] is None or check["error"] > check["tolerance"]):
                problems.append(f"{where}: passed with error {check['error']} over tolerance {check['tolerance']}")
        if "calls" in check and _expect(problems, f"{where}.calls", check["calls"], (int,)) and passed \
                and check["calls"] < 1:
            problems.append(f"{where}: passed without a call compared")
    return problems


def validate_row(entry: object, where: str) -> list[str]:
    if not isinstance(entry, dict):
        return [f"{where}: a row is an object"]
    problems: list[str] = []
    _unknown(problems, where, entry, ROW_FIELDS)
    for key in ("problem", "size", "variant"):
        if _expect(problems, f"{where}.{key}", entry.get(key), (str,)) and not entry[key]:
            problems.append(f"{where}.{key}: empty")
    if entry.get("kind") not in KINDS:
        problems.append(f"{where}.kind: one of {', '.join(KINDS)}, got {entry.get('kind')!r}")
    if _expect(problems, f"{where}.median_ms", entry.get("median_ms", "missing"), (float,), nullable=True) and \
            entry["median_ms"] is not None and entry["median_ms"] < 0:
        problems.append(f"{where}.median_ms: negative")
    for key in TIMING_FIELDS:
        if key in entry:
            _expect(problems, f"{where}.{key}", entry[key], (float,), nullable=True)
    if "calls" in entry:
        _expect(problems, f"{where}.calls", entry["calls"], (int,))
    if "ratios" in entry and _expect(problems, f"{where}.ratios", entry["ratios"], (dict,)):
        for name, value in entry["ratios"].items():
            _expect(problems, f"{where}.ratios[{name!r}]", value, (float,), nullable=True)
    if "details" in entry:
        _expect(problems, f"{where}.details", entry["details"], (dict,))
    return problems + validate_check(entry.get("check"), f"{where}.check")


def validate_machine(value: object) -> list[str]:
    if not isinstance(value, dict):
        return ["machine: expected an object"]
    problems: list[str] = []
    _unknown(problems, "machine", value, MACHINE_FIELDS)
    _expect(problems, "machine.cpu", value.get("cpu"), (str,))
    for key in ("cores_used", "cores_total"):
        if _expect(problems, f"machine.{key}", value.get(key), (int,)) and value[key] < 1:
            problems.append(f"machine.{key}: at least 1")
    for key in ("gpu", "gpu_driver", "opencl_device"):
        _expect(problems, f"machine.{key}", value.get(key, "missing"), (str,), nullable=True)
    if _expect(problems, "machine.load_average", value.get("load_average", "missing"), (float,), nullable=True) \
            and (value["load_average"] or 0.0) < 0:
        problems.append("machine.load_average: negative")
    if _expect(problems, "machine.kind", value.get("kind"), (str,)) and \
            not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", value["kind"]):
        problems.append(f"machine.kind: lower-case letters, digits, '.', '_' and '-' (a file name), "
                        f"got {value['kind']!r}")
    return problems


def validate(document: object) -> list[str]:
    """Every way `document` departs from the schema (module docstring), as messages; [] when it follows it."""
    if not isinstance(document, dict):
        return ["a document is a JSON object"]
    problems: list[str] = []
    if document.get("schema") != SCHEMA:
        problems.append(f"schema: expected {SCHEMA!r}, got {document.get('schema')!r}")
    _unknown(problems, "document", document, DOCUMENT_FIELDS)
    for key in ("benchmark", "isozyme_version", "python", "command"):
        _expect(problems, key, document.get(key), (str,))
    commit = document.get("commit", "missing")
    if commit is not None and not (isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit)):
        problems.append(f"commit: 40 hex digits or null, got {commit!r}")
    dirty = document.get("dirty", "missing")
    if dirty not in ((True, False, None) if commit is not None else (None,)):
        problems.append(f"dirty: {'true, false or null' if commit is not None else 'null outside a checkout'}, "
                        f"got {dirty!r}")
    date = document.get("date")
    try:
        parsed = datetime.datetime.fromisoformat(str(date).replace("Z", "+00:00"))
        if parsed.utcoffset() != datetime.timedelta(0):
            problems.append(f"date: UTC, got {date!r}")
    except ValueError:
        problems.append(f"date: ISO 8601, got {date!r}")
    problems += validate_machine(document.get("machine"))
    for key in ("environment", "peers"):
        if _expect(problems, key, document.get(key), (dict,)):
            for name, value in document[key].items():
                _expect(problems, f"{key}[{name!r}]", value, (str,), nullable=key == "peers")
    for key in ("parameters", "extra"):
        if key in document:
            _expect(problems, key, document[key], (dict,))
    rows = document.get("rows")
    if not isinstance(rows, list) or not rows:
        return problems + ["rows: expected a non-empty list"]
    seen: set[tuple[object, ...]] = set()
    for index, entry in enumerate(rows):
        problems += validate_row(entry, f"rows[{index}]")
        key = tuple(entry.get(k) for k in ("problem", "size", "variant")) if isinstance(entry, dict) else ()
        if key in seen:
            problems.append(f"rows[{index}]: a second row of problem {key[0]!r}, size {key[1]!r}, variant {key[2]!r}")
        seen.add(key)
    well_formed = all(isinstance(entry, dict) and isinstance(entry.get("check"), dict) for entry in rows)
    if _expect(problems, "passed", document.get("passed"), (bool,)) and document["passed"] and well_formed \
            and not document_passed(rows):
        problems.append("passed: true, but a row's check failed")
    return problems
