"""The disk cache cannot be used to run someone else's code (docs/cache_security.md): a directory others
may write is refused, entries are authenticated with a key only this user can read, a library loads from
the very bytes that were checked, and links, FIFOs and directories in place of entries are damage, never
followed, waited for or read without end. Fresh processes show what a later start would load."""

from __future__ import annotations

import hmac
import json
import os
import resource
import shutil
import stat
import struct
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from test_disk_cache_native import expected, needs_linker, write_program

import isozyme as iz
from isozyme import Array, f64, i64
from isozyme.runtime import disk_cache, private_files

ANSWER = '''
import json, os, sys
import isozyme as iz
from isozyme import f64
from isozyme.runtime import disk_cache

if len(sys.argv) > 1:  # replace the library with the file sys.argv[1] right after the cache checked it
    load = disk_cache.load

    def load_then_swap(key, what="", kind=disk_cache.COMPILED):
        entry = load(key, what, kind)
        if entry is not None and kind is disk_cache.COMPILED:
            os.replace(sys.argv[1], os.path.join(os.environ["ISOZYME_CACHE_DIR"], key + ".so"))
        return entry
    disk_cache.load = load_then_swap

@iz.kernel
def answer(x: f64) -> f64:
    return x + 30.0

print(json.dumps({"value": answer(0.0), **disk_cache.stats}))
'''

LOADER = '''
import json, os, sys
from isozyme.runtime import disk_cache, llvm_backend, source_key
from isozyme.runtime.arguments import Parameter

key, loads = sys.argv[1], int(sys.argv[2])
f64 = source_key.parse_type("f64")
signature = llvm_backend.EntrySignature("answer", (Parameter("x", f64),), f64)
cache, results = os.environ["ISOZYME_CACHE_DIR"], []
for load in range(loads):
    llvm_backend._loaded.clear()  # load the library again, as a fresh process would, ...
    os.environ["ISOZYME_CACHE_DIR"] = cache + "/." * load  # ... under a name the C library has not loaded
    entry = llvm_backend.load_compiled(key, "answer", signature)
    results.append(None if entry is None else entry(0.0))
print(json.dumps({"results": results, **disk_cache.stats}))
'''

SWAPPER = '''
import os, sys
cache, key, stop = sys.argv[1], sys.argv[2], sys.argv[3]
good, bad, entry = (open(os.path.join(stop + "-files", name), "rb").read() for name in ("good", "bad", "entry"))

def put(name, data):
    temporary = os.path.join(cache, name + ".swap")
    with open(temporary, "wb") as file:
        file.write(data)
    os.replace(temporary, os.path.join(cache, name))

while not os.path.exists(stop):
    put(key + ".so", bad)
    put(key + ".so", good)
    if not os.path.exists(os.path.join(cache, key + ".izc")):  # removed by the loader after it saw `bad`
        put(key + ".izc", entry)
'''

MEMORY_LIMIT = 4 << 30
"""A process reading `/dev/zero` fails here, not by taking the machine's memory."""


def run_script(script: Path, cache: Path, *args: str, timeout: float = 60) -> dict[str, object]:
    """Run `script` in a fresh process on `cache`, with a time and memory limit; its last line, as JSON."""
    env = {**os.environ, "ISOZYME_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1", "OPENBLAS_NUM_THREADS": "1"}
    for name in ("ISOZYME_CACHE", "ISOZYME_PRINT_IR", "SCALE"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env,
                          cwd=script.parent, timeout=timeout,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT)))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def only(cache: Path, pattern: str) -> Path:
    (path,) = cache.glob(pattern)
    return path


@pytest.fixture
def answer(tmp_path: Path) -> tuple[Path, Path]:
    """The program of the `answer` kernel (30.0 for 0.0) and its cache, filled by a first run."""
    script = tmp_path / "answer.py"
    script.write_text(textwrap.dedent(ANSWER))
    cache = tmp_path / "cache"
    assert run_script(script, cache)["value"] == 30.0
    return script, cache


def patched(library: bytes) -> bytes:
    """`library` returning 50.0 where it returned 30.0: what an attacker who can write the cache plants."""
    thirty, fifty = struct.pack("<d", 30.0), struct.pack("<d", 50.0)
    assert library.count(thirty) == 1
    return library.replace(thirty, fifty)


def body_of(entry: bytes) -> tuple[dict[str, object], bytes]:
    body = entry[len(disk_cache.MAGIC) + 32:]
    (length,) = struct.unpack("<Q", body[:8])
    return json.loads(body[8:8 + length]), body[8 + length:]


def forged(entry: bytes, library: bytes, how: str, secret: bytes) -> bytes:
    """`entry` naming `library` instead, re-encoded as someone without `secret` would (or, for "owner's
    key", with it)."""
    metadata, payload = body_of(entry)
    metadata[disk_cache.LIBRARY_DIGEST] = disk_cache.sha256(library).hexdigest()
    meta = json.dumps(metadata, sort_keys=True).encode()
    body = struct.pack("<Q", len(meta)) + meta + payload
    if how == "owner's key":
        return disk_cache.MAGIC + disk_cache.hmac_sha256(secret, b".izc", body) + body
    if how == "another key":
        return disk_cache.MAGIC + disk_cache.hmac_sha256(os.urandom(32), b".izc", body) + body
    magic = b"ISOZYME-CACHE-1\n" if how == "format 1" else disk_cache.MAGIC
    return magic + disk_cache.sha256(body).digest() + body


# --- the directory (issue 23, item 8) -------------------------------------------------------------------


@pytest.fixture
def cache_at(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("ISOZYME_CACHE_DIR", str(cache))
    monkeypatch.delenv("ISOZYME_CACHE", raising=False)
    return cache


def test_a_new_cache_directory_and_its_missing_parents_are_private(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    cache = tmp_path / "home" / ".cache" / "isozyme"
    monkeypatch.setenv("ISOZYME_CACHE_DIR", str(cache))
    monkeypatch.delenv("ISOZYME_CACHE", raising=False)
    previous = os.umask(0o002)  # the group-writable default of many distributions ...
    try:
        assert disk_cache.store("0" * 64, {}, b"payload")
    finally:
        os.umask(previous)
    for directory in (tmp_path / "home", tmp_path / "home" / ".cache", cache):  # ... changes nothing here
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert stat.S_IMODE((cache / disk_cache.KEY_FILE).stat().st_mode) == 0o600
    assert disk_cache.load("0" * 64) is not None


@iz.kernel
def shifted(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] + 0.5
    return s


def test_a_directory_others_may_write_is_refused(cache_at: Path) -> None:
    cache_at.mkdir()
    cache_at.chmod(0o777)
    before = dict(disk_cache.stats)
    with pytest.warns(disk_cache.InsecureCacheWarning, match=f"{cache_at}.*mode 0777: group or others may write"):
        assert shifted(np.arange(4.0), 4) == 8.0
    assert list(cache_at.iterdir()) == []  # no entry, not even a key
    for event in ("hits", "misses", "stores", "write_errors", "source_misses", "source_stores"):
        assert disk_cache.stats[event] == before.get(event, 0), event
    assert disk_cache.stats["refused"] == before.get("refused", 0) + 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per directory and process
        assert shifted.compile(opt="O0").entry(np.arange(4.0), 4) == 8.0
        assert disk_cache.cache_directory() is None and disk_cache.load("0" * 64) is None
        assert not disk_cache.store("0" * 64, {}, b"payload")


def test_a_directory_of_another_user_is_refused(cache_at: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert disk_cache.store("0" * 64, {}, b"payload")
    someone_else = os.geteuid() + 1
    monkeypatch.setattr(os, "geteuid", lambda: someone_else)
    with pytest.warns(disk_cache.InsecureCacheWarning, match=f"owned by user {someone_else - 1}, not by this user"):
        assert disk_cache.load("0" * 64) is None
    assert disk_cache.cache_directory() is None and not disk_cache.store("1" * 64, {}, b"payload")
    assert not (cache_at / ("1" * 64 + ".izc")).exists()


@pytest.mark.parametrize("mode", [0o644, 0o620])
def test_a_key_file_others_may_read_or_write_is_refused(cache_at: Path, mode: int) -> None:
    assert disk_cache.store("0" * 64, {}, b"payload")
    (cache_at / disk_cache.KEY_FILE).chmod(mode)
    with pytest.warns(disk_cache.InsecureCacheWarning, match=f"hmac-key has mode {mode:04o}"):
        assert disk_cache.load("0" * 64) is None
    assert disk_cache.cache_directory() is None


def status(mode: int, uid: int) -> os.stat_result:
    return os.stat_result((mode, 1, 1, 1, uid, 0, 32, 0, 0, 0))


def test_the_owner_and_mode_check() -> None:
    me, check, write, anything = os.geteuid(), private_files.check_owner_and_mode, 0o022, 0o077
    check(status(stat.S_IFDIR | 0o755, me), "d", write)
    check(status(stat.S_IFREG | 0o600, me), "k", anything)
    for mode, uid, forbidden, message in [(0o700, me + 1, write, f"owned by user {me + 1}"),
                                          (0o600, me + 1, anything, f"owned by user {me + 1}"),
                                          (0o770, me, write, "mode 0770: group or others may write"),
                                          (0o702, me, write, "mode 0702"),
                                          (0o640, me, anything, "mode 0640: group or others may read or write")]:
        with pytest.raises(private_files.Untrusted, match=message):
            check(status(mode, uid), "x", forbidden)


# --- entries authenticated with a key only this user can read (item 9) -----------------------------------


@pytest.mark.parametrize("key_length", [0, 1, 32, 64, 65, 200])
def test_hmac_sha256_is_rfc_2104(key_length: int) -> None:
    key = bytes(range(key_length % 256)) * (1 + key_length // 256)
    parts = [b"", b"The quick brown fox", bytes(1000), b"jumps"]
    assert disk_cache.hmac_sha256(key, *parts) == hmac.new(key, b"".join(parts), "sha256").digest()
    assert disk_cache.hmac_sha256(b"key", b"The quick brown fox jumps over the lazy dog").hex() == \
        "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"  # Wikipedia's example


@needs_linker
@pytest.mark.parametrize("how", ["plain sha256", "another key", "format 1", "owner's key"])
def test_a_patched_library_with_a_re_encoded_entry_is_rejected(answer: tuple[Path, Path], how: str) -> None:
    script, cache = answer
    library, entry = only(cache, "*.so"), only(cache, "*.izc")
    bad = patched(library.read_bytes())
    library.write_bytes(bad)
    entry.write_bytes(forged(entry.read_bytes(), bad, how, (cache / disk_cache.KEY_FILE).read_bytes()))
    attacked = run_script(script, cache)
    if how == "owner's key":  # the attack is real: only the key, which no one else can read, stops it
        assert attacked["value"] == 50.0 and attacked.get("hits") == 1
        return
    assert attacked["value"] == 30.0
    assert attacked.get("corrupt") == 1 and attacked.get("stores") == 1 and attacked.get("library_loads") == 1
    again = run_script(script, cache)
    assert again["value"] == 30.0 and again.get("hits") == 1


def test_a_forged_source_index_entry_is_rejected(cache_at: Path) -> None:
    disk_cache.store("0" * 64, {"compiled": "1" * 64}, b"", kind=disk_cache.SOURCE_INDEX)
    index = cache_at / ("0" * 64 + ".izs")
    metadata, payload = body_of(index.read_bytes())
    meta = json.dumps({**metadata, "compiled": "2" * 64}, sort_keys=True).encode()
    body = struct.pack("<Q", len(meta)) + meta + payload
    index.write_bytes(disk_cache.MAGIC + disk_cache.sha256(body).digest() + body)
    before = disk_cache.stats["source_corrupt"]
    assert disk_cache.load("0" * 64, kind=disk_cache.SOURCE_INDEX) is None
    assert disk_cache.stats["source_corrupt"] == before + 1 and not index.exists()


def test_an_entry_of_another_kind_is_rejected(cache_at: Path) -> None:
    disk_cache.store("0" * 64, {"compiled": "1" * 64}, b"", kind=disk_cache.SOURCE_INDEX)
    shutil.copy(cache_at / ("0" * 64 + ".izs"), cache_at / ("0" * 64 + ".izc"))
    before = disk_cache.stats["corrupt"]
    assert disk_cache.load("0" * 64) is None and disk_cache.stats["corrupt"] == before + 1
    assert disk_cache.load("0" * 64, kind=disk_cache.SOURCE_INDEX) is not None


def keys_created_at_once(path: Path, creators: int) -> list[bytes]:
    """The keys `creators` threads get from `secret_key` in the new directory `path`, started together."""
    directory = private_files.open_directory(path, create=True)
    start, keys = threading.Barrier(creators), []

    def create() -> None:
        start.wait()
        keys.append(private_files.secret_key(directory, "key", 32).value)
    threads = [threading.Thread(target=create) for _ in range(creators)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    os.close(directory)
    return keys


def test_concurrent_creators_of_the_key_share_the_winners(tmp_path: Path) -> None:
    for attempt in range(5):
        keys = keys_created_at_once(tmp_path / str(attempt), 8)
        assert len(keys) == 8 and len(set(keys)) == 1
        assert (tmp_path / str(attempt) / "key").read_bytes() == keys[0]


# --- the bytes checked are the bytes loaded (item 10) ----------------------------------------------------


@needs_linker
def test_a_library_swapped_while_it_loads_never_runs(answer: tuple[Path, Path], tmp_path: Path) -> None:
    script, cache = answer
    library, entry = only(cache, "*.so"), only(cache, "*.izc")
    key = entry.name.removesuffix(".izc")
    stop = tmp_path / "stop"
    files = tmp_path / "stop-files"
    files.mkdir()
    for name, data in (("good", library.read_bytes()), ("bad", patched(library.read_bytes())),
                       ("entry", entry.read_bytes())):
        (files / name).write_bytes(data)
    (tmp_path / "swapper.py").write_text(textwrap.dedent(SWAPPER))
    (tmp_path / "loader.py").write_text(textwrap.dedent(LOADER))
    swapper = subprocess.Popen([sys.executable, str(tmp_path / "swapper.py"), str(cache), key, str(stop)])
    try:
        runs = [run_script(tmp_path / "loader.py", cache, key, "40") for _ in range(4)]
    finally:
        stop.touch()
        swapper.wait(timeout=30)
    results = [value for run in runs for value in run["results"]]  # type: ignore[union-attr]
    assert 50.0 not in results  # never the swapped-in code
    assert results.count(30.0) > 0 and set(results) <= {30.0, None}
    assert not list(cache.glob(".isozyme-load-*"))  # private copies are removed once loaded


@needs_linker
def test_a_library_replaced_right_after_its_check_never_runs(answer: tuple[Path, Path], tmp_path: Path) -> None:
    script, cache = answer
    swapped = tmp_path / "swapped.so"
    swapped.write_bytes(patched(only(cache, "*.so").read_bytes()))
    loaded = run_script(script, cache, str(swapped))
    assert loaded["value"] == 30.0 and loaded.get("hits") == 1 and loaded.get("library_loads") == 1


@needs_linker
def test_a_fresh_library_loads_from_the_bytes_linked(cache_at: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = disk_cache.store

    def store_then_swap(key: str, metadata: dict[str, object], payload: bytes, what: str = "",
                        library: bytes | None = None, kind: disk_cache.EntryKind = disk_cache.COMPILED) -> bool:
        stored = store(key, metadata, payload, what, library, kind)
        if library is not None:
            (cache_at / f"{key}.so").write_bytes(b"not the library that was linked")
        return stored
    monkeypatch.setattr(disk_cache, "store", store_then_swap)
    before = dict(disk_cache.stats)

    @iz.kernel
    def offset(x: Array[f64], n: i64) -> f64:
        s = 0.0
        for i in range(n):
            s += x[i] - 0.75
        return s
    assert offset(np.arange(4.0), 4) == 3.0
    assert disk_cache.stats["library_loads"] == before.get("library_loads", 0) + 1
    assert disk_cache.stats["library_errors"] == before.get("library_errors", 0)


# --- links, FIFOs and directories in place of files (item 11) -------------------------------------------


@pytest.fixture(scope="module")
def warm_program(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The fresh-process program of test_disk_cache_native.py and a cache it has filled."""
    directory = tmp_path_factory.mktemp("program")
    write_program(directory)
    cache = tmp_path_factory.mktemp("warm") / "cache"
    assert run_script(directory / "main.py", cache)["value"] == expected()
    return directory, cache


def put_in_place(path: Path, what: str) -> None:
    path.unlink()
    if what == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif what == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


@needs_linker
@pytest.mark.parametrize("what", ["link to /dev/zero", "fifo", "directory"])
@pytest.mark.parametrize("file", [".izc", ".so", ".izs"])
def test_a_special_file_in_place_of_an_entry_is_damage(warm_program: tuple[Path, Path], tmp_path: Path,
                                                        file: str, what: str) -> None:
    directory, warm = warm_program
    cache = tmp_path / "cache"
    shutil.copytree(warm, cache, symlinks=True)
    put_in_place(only(cache, f"*{file}"), what)
    damaged = run_script(directory / "main.py", cache, timeout=60)  # neither hangs nor reads without end
    assert damaged["value"] == expected()
    assert damaged.get("source_corrupt" if file == ".izs" else "corrupt") == 1
    again = run_script(directory / "main.py", cache)  # rewritten: found again
    assert again["value"] == expected() and again.get("hits") == 1 and again.get("source_hits") == 1


def test_an_entry_over_the_size_limit_is_damage(cache_at: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert disk_cache.store("0" * 64, {}, bytes(1000))
    monkeypatch.setattr(disk_cache, "MAX_FILE_BYTES", 999)
    before = disk_cache.stats["corrupt"]
    assert disk_cache.load("0" * 64) is None and disk_cache.stats["corrupt"] == before + 1
