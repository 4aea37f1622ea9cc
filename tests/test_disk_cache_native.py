"""Warm starts without LLVM: compiled kernels cached as shared libraries, found by source keys, under a
host description that does not import llvmlite. Fresh processes show what a warm start loads; damaged,
stale and unlinkable entries are recompiled or loaded another way, never wrong."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.runtime import disk_cache, host_identity, llvm_backend, shared_library, source_key

CONSTANTS = "OFFSET = {offset}\n"

HELPERS = '''
import isozyme as iz
from isozyme import f64

@iz.kernel
def square(v: f64) -> f64:
    return v * v * {power}
'''

MAIN = '''
import json, os, sys
import numpy as np
import isozyme as iz
from isozyme import Array, f64, i64
import constants
from helpers import square
from isozyme.runtime import disk_cache

SCALE = float(os.environ.get("SCALE", "1.0"))  # a global that changes while the source does not

@iz.kernel
def weighted(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += square(x[i]) * SCALE + constants.OFFSET
    return iz.sqrt(s)

value = weighted(np.arange(4.0), 4)
print(json.dumps({"value": value, "llvmlite": "llvmlite" in sys.modules,
                  "codegen": "isozyme.codegen.llvm" in sys.modules, **disk_cache.stats}))
'''


def expected(scale: float = 1.0, offset: float = 0.0, power: float = 1.0) -> float:
    return math.sqrt(sum(v * v * power * scale + offset for v in range(4)))


def write_program(directory: Path, offset: float = 0.0, power: float = 1.0) -> None:
    (directory / "constants.py").write_text(CONSTANTS.format(offset=offset))
    (directory / "helpers.py").write_text(textwrap.dedent(HELPERS.format(power=power)))
    (directory / "main.py").write_text(textwrap.dedent(MAIN))


def run(directory: Path, cache: Path, scale: float = 1.0) -> dict[str, object]:
    env = {**os.environ, "ISOZYME_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1", "SCALE": str(scale)}
    env.pop("ISOZYME_CACHE", None)
    env.pop("ISOZYME_PRINT_IR", None)
    done = subprocess.run([sys.executable, str(directory / "main.py")], capture_output=True, text=True, env=env,
                          cwd=directory, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


needs_linker = pytest.mark.skipif(not any(shutil.which(command) for command, *_ in shared_library.LINKERS),
                                  reason="no system linker (ld or cc) on PATH: kernels load through MCJIT")


@pytest.fixture
def program(tmp_path: Path) -> tuple[Path, Path]:
    directory = tmp_path / "program"
    directory.mkdir()
    write_program(directory)
    return directory, tmp_path / "cache"


# --- the warm start ------------------------------------------------------------------------------------


@needs_linker
def test_a_warm_start_loads_a_shared_library_without_llvmlite(program: tuple[Path, Path]) -> None:
    directory, cache = program
    cold = run(directory, cache)
    assert cold["value"] == expected()
    assert cold.get("misses") == 1 and cold.get("stores") == 1 and cold.get("library_loads") == 1
    assert cold.get("source_misses") == 1 and cold.get("source_stores") == 1 and cold["llvmlite"]
    warm = run(directory, cache)
    assert warm["value"] == expected()
    assert warm.get("source_hits") == 1 and warm.get("hits") == 1 and warm.get("library_loads") == 1
    assert not any(warm.get(event) for event in ("misses", "stores", "object_loads", "source_stale", "corrupt"))
    assert not warm["llvmlite"] and not warm["codegen"]  # neither LLVM nor the code generator was loaded
    assert len(list(cache.glob("*.so"))) == 1


@needs_linker
def test_a_truncated_library_is_detected_and_recompiled(program: tuple[Path, Path]) -> None:
    directory, cache = program
    run(directory, cache)
    (library,) = cache.glob("*.so")
    library.write_bytes(library.read_bytes()[:len(library.read_bytes()) // 2])
    recovered = run(directory, cache)
    assert recovered["value"] == expected()
    assert recovered.get("corrupt") == 1 and recovered.get("stores") == 1 and recovered.get("library_loads") == 1
    again = run(directory, cache)
    assert again.get("hits") == 1 and again.get("library_loads") == 1 and not again["llvmlite"]


@needs_linker
def test_a_cached_library_that_no_longer_loads_is_compiled_again(program: tuple[Path, Path]) -> None:
    directory, cache = program
    run(directory, cache)
    (entry,) = cache.glob("*.izc")
    key = entry.name.removesuffix(".izc")
    secret = (cache / disk_cache.KEY_FILE).read_bytes()
    metadata, payload = disk_cache.decode(key, entry.read_bytes(), secret)
    unloadable = b"not an ELF file, but its checksum is right"  # as a library on a noexec mount would be
    (cache / f"{key}.so").write_bytes(unloadable)
    metadata[disk_cache.LIBRARY_DIGEST] = disk_cache.sha256(unloadable).hexdigest()
    entry.write_bytes(disk_cache.encode(key, metadata, payload, secret))
    recovered = run(directory, cache)
    assert recovered["value"] == expected()
    assert recovered.get("library_errors") == 1 and recovered.get("misses") == 1
    assert recovered.get("stores") == 1 and recovered.get("library_loads") == 1
    assert run(directory, cache).get("library_loads") == 1


# --- source keys: what changes a kernel's code changes what a warm start finds --------------------------


@pytest.mark.parametrize("change", [{"scale": 2.5}, {"offset": 0.25}, {"power": 3.0}],
                         ids=["global constant", "module attribute", "callee in another file"])
def test_a_changed_dependency_is_recompiled(program: tuple[Path, Path], change: dict[str, float]) -> None:
    directory, cache = program
    change = dict(change)
    scale = change.pop("scale", 1.0)
    assert run(directory, cache)["value"] == expected()
    write_program(directory, **change)
    changed = run(directory, cache, scale)
    assert changed["value"] == expected(scale, **change)
    assert changed.get("source_stale") == 1 and changed.get("misses") == 1 and changed.get("stores") == 1
    assert run(directory, cache, scale).get("source_hits") == 1  # the index now has the new dependencies
    write_program(directory)  # back to the first version: its compiled code is still there
    back = run(directory, cache)
    assert back["value"] == expected() and back.get("hits") == 1 and not back.get("misses")


def test_an_edit_of_the_kernel_changes_its_source_key(program: tuple[Path, Path]) -> None:
    directory, cache = program
    run(directory, cache)
    main = directory / "main.py"
    main.write_text(main.read_text().replace("s += square(x[i])", "s += 2.0 * square(x[i])"))
    edited = run(directory, cache)
    assert edited["value"] == math.sqrt(2.0 * sum(v * v for v in range(4)))
    assert edited.get("source_misses") == 1 and edited.get("misses") == 1


@iz.kernel
def doubled(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += 2.0 * x[i]
    return s


def test_fingerprints_tell_apart_what_the_lowering_tells_apart() -> None:
    fingerprints = source_key.Fingerprints(doubled.definition)
    values = [1, 1.0, True, np.float32(1.0), np.int32(1), np.float64(1.0), 0.0, -0.0, float("nan"), "f8", None,
              iz.f64, iz.f32, Array[f64], Array[f64, 2], iz.sqrt, math.sqrt, np.sqrt, range, np.float64, iz, np, math]
    prints = [fingerprints.of(value) for value in values]
    assert None not in prints and len(set(prints)) == len(prints)
    assert fingerprints.of(doubled) == f"kernel 0 {source_key.source_identity(doubled.definition)}"

    class Local:
        pass
    for unkeyable in (np.zeros(3), Local, Local(), lambda: 0, object()):
        assert fingerprints.of(unkeyable) is None


def test_a_kernel_is_found_by_its_source_key_in_process() -> None:
    pipeline, options = "O2", doubled.codegen_options()
    key = source_key.source_key(doubled.definition, pipeline, options)
    assert key is not None
    assert doubled(np.arange(5.0), 5) == 20.0
    known = source_key.recall(key, doubled.definition)
    assert known is not None and known.function == "doubled" and [p.name for p in known.params] == ["x", "n"]
    entry = llvm_backend.load_compiled(known.key, "doubled", llvm_backend.EntrySignature(
        known.function, known.params, known.return_type))
    assert entry is not None and entry(np.arange(3.0), 3) == 6.0


def test_types_read_back_as_printed() -> None:
    for ty in (iz.f64, iz.i32, iz.boolean, Array[f64], Array[iz.i64, 3]):
        assert source_key.parse_type(str(ty.ssa)) == ty.ssa
    assert source_key.parse_type("void").is_void


# --- fallbacks: no linker, an unloadable library -----------------------------------------------------------


def test_without_a_linker_kernels_load_through_mcjit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ISOZYME_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(shared_library, "LINKERS", (("isozyme-no-such-linker", "-shared"),))
    before = dict(disk_cache.stats)

    @iz.kernel
    def tripled(x: Array[f64], n: i64) -> f64:
        s = 0.0
        for i in range(n):
            s += 3.0 * x[i] + 0.125
        return s
    assert tripled(np.arange(4.0), 4) == 18.5
    assert disk_cache.stats["link_errors"] == before.get("link_errors", 0) + 1
    assert disk_cache.stats["object_loads"] == before.get("object_loads", 0) + 1
    assert list(tmp_path.glob("*.izc")) and not list(tmp_path.glob("*.so"))


@needs_linker
def test_a_library_that_does_not_load_falls_back_to_mcjit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ISOZYME_CACHE_DIR", str(tmp_path))

    def refuse(image: bytes, symbols: list[str], scratch: str) -> None:
        raise OSError(f"{scratch}: cannot open shared object file")
    monkeypatch.setattr(shared_library, "load", refuse)
    before = dict(disk_cache.stats)

    @iz.kernel
    def halved(x: Array[f64], n: i64) -> f64:
        s = 0.0
        for i in range(n):
            s += 0.5 * x[i] - 0.25
        return s
    assert halved(np.arange(4.0), 4) == 2.0
    assert disk_cache.stats["library_errors"] == before.get("library_errors", 0) + 1
    assert disk_cache.stats["object_loads"] == before.get("object_loads", 0) + 1
    assert list(tmp_path.glob("*.izc")) and not list(tmp_path.glob("*.so"))  # stored again without it


# --- the host description ------------------------------------------------------------------------------------


def test_the_host_description_does_not_import_llvmlite() -> None:
    code = ("import sys, time; from isozyme.runtime import host_identity as h; start = time.perf_counter(); "
            "d = h.host_description(), h.compiler_description(); "
            "print(time.perf_counter() - start, 'llvmlite' in sys.modules, d[0].startswith('llvm:'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    seconds, imported, fallback = done.stdout.split()
    if fallback == "True":
        pytest.skip("no /proc/cpuinfo or llvmlite files on this host: the description asks LLVM")
    assert imported == "False", done.stderr
    assert float(seconds) < 0.05  # about 1 ms; generous for loaded machines


CPUINFO = """processor\t: {n}
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
cpu MHz\t\t: {mhz}
core id\t\t: {n}
flags\t\t: fpu sse2 avx2 {extra}
bogomips\t: 5192.26

processor\t: 1
flags\t\t: something else entirely
"""


@pytest.mark.parametrize(("change", "same"), [({"mhz": "3000.0"}, True), ({"n": "7"}, True),
                                              ({"extra": "avx512f"}, False)])
def test_the_cpu_identity_follows_features_not_clocks(tmp_path: Path, change: dict[str, str], same: bool) -> None:
    base = {"n": "0", "mhz": "2596.1", "extra": ""}
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_text(CPUINFO.format(**base))
    second.write_text(CPUINFO.format(**{**base, **change}))
    assert (host_identity.cpu_identity(str(first)) == host_identity.cpu_identity(str(second))) == same
    assert host_identity.cpu_identity(str(tmp_path / "missing")) is None
