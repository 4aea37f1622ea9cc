"""What a killed process, a slip of the hand or a read-only mount leaves in the disk cache costs a rebuild at
most, never a wait, a silently disabled cache or a cold start (issue 62, docs/cache_security.md): a damaged
key file is replaced with one warning and no waiting, by exactly one of the processes that find it damaged;
a key that is a symbolic link is refused loudly; temporary files and load copies a kill left behind are
removed once they are an hour old; a cache directory that cannot be written loads its libraries through a
private temporary directory, a warm start still."""

from __future__ import annotations

import os
import stat
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest
from test_disk_cache_native import expected, needs_linker, write_program
from test_disk_cache_security import run_script

from isozyme.runtime import disk_cache, private_files, shared_library

KEY = "0" * 64


@pytest.fixture
def cache_at(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("ISOZYME_CACHE_DIR", str(cache))
    monkeypatch.delenv("ISOZYME_CACHE", raising=False)
    return cache


@pytest.fixture
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any sleep fails the test: a damaged key must not be waited for (it once was, 2 s per operation)."""
    def sleep(seconds: float) -> None:
        raise AssertionError(f"slept {seconds} s")
    monkeypatch.setattr(time, "sleep", sleep)


# --- a damaged key is replaced --------------------------------------------------------------------------


def damage(key: Path, how: str) -> None:
    key.unlink()
    if how == "empty":
        key.write_bytes(b"")  # a process killed between creating the key and writing it
    elif how == "short":
        key.write_bytes(b"k" * 7)
    elif how == "long":
        key.write_bytes(b"k" * 64)
    elif how == "fifo":
        os.mkfifo(key)  # whose open, without O_NONBLOCK, would wait for a writer for ever
    else:
        key.mkdir()
        if how == "directory with files":
            (key / "notes").write_text("kept")
    if key.is_file():
        key.chmod(0o600)


@pytest.mark.parametrize("how", ["empty", "short", "long", "fifo", "directory", "directory with files"])
def test_a_damaged_key_is_replaced_at_once_with_one_warning(cache_at: Path, no_waiting: None, how: str) -> None:
    assert disk_cache.store(KEY, {}, b"payload")
    key = cache_at / disk_cache.KEY_FILE
    damage(key, how)
    before = dict(disk_cache.stats)
    with pytest.warns(disk_cache.ReplacedKeyWarning, match=f"{key}.*replaced"):
        assert disk_cache.load(KEY) is None  # made under the old key: it fails its check ...
    assert disk_cache.stats["corrupt"] == before.get("corrupt", 0) + 1
    assert disk_cache.stats["key_replaced"] == before.get("key_replaced", 0) + 1
    status = key.lstat()
    assert stat.S_ISREG(status.st_mode) and stat.S_IMODE(status.st_mode) == 0o600 and status.st_size == 32
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning: the new key is a key
        assert disk_cache.store(KEY, {}, b"payload")  # ... and is rebuilt
        assert disk_cache.load(KEY) is not None and disk_cache.cache_directory() == cache_at
    assert disk_cache.stats["refused"] == before.get("refused", 0)
    set_aside = list(cache_at.glob(f".{disk_cache.KEY_FILE}.*.damaged"))
    if how == "directory with files":  # what was in it is not deleted
        assert len(set_aside) == 1 and (set_aside[0] / "notes").read_text() == "kept"
    else:
        assert set_aside == []


def keys_found_at_once(path: Path, finders: int) -> list[private_files.SecretKey]:
    """What `finders` threads get from `secret_key` in `path`, started together; each holds its own lock
    descriptor (`directory_lock`), as processes do."""
    directory = private_files.open_directory(path, create=True)
    start, keys = threading.Barrier(finders), []

    def find() -> None:
        start.wait()
        keys.append(private_files.secret_key(directory, "key", 32))
    threads = [threading.Thread(target=find) for _ in range(finders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    os.close(directory)
    return keys


def test_processes_that_find_the_key_damaged_agree_on_one_replacement(tmp_path: Path, no_waiting: None) -> None:
    for attempt in range(5):
        path = tmp_path / str(attempt)
        path.mkdir(mode=0o700)
        (path / "key").write_bytes(b"")
        (path / "key").chmod(0o600)
        keys = keys_found_at_once(path, 8)
        assert len(keys) == 8 and len({key.value for key in keys}) == 1
        assert [key.replaced for key in keys if key.replaced] == ["holds 0 bytes, not 32"]  # one replaced it
        assert (path / "key").read_bytes() == keys[0].value


def test_a_key_mended_while_waiting_for_the_lock_is_used_not_replaced(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    directory = private_files.open_directory(tmp_path, create=True)
    (tmp_path / "key").write_bytes(b"")
    (tmp_path / "key").chmod(0o600)
    lock, mended = private_files.directory_lock, b"m" * 32

    def lock_after_another_process_mended_it(descriptor: int) -> int:
        private_files.replace(descriptor, "key", mended, ".key")  # as the process that held the lock did
        return lock(descriptor)
    monkeypatch.setattr(private_files, "directory_lock", lock_after_another_process_mended_it)
    try:
        assert private_files.secret_key(directory, "key", 32) == private_files.SecretKey(mended, None)
    finally:
        os.close(directory)


def test_a_new_key_is_never_seen_half_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = private_files.open_directory(tmp_path, create=True)
    seen = []
    write_new = private_files.write_new

    def write_and_look(descriptor: int, name: str, data: bytes) -> None:
        write_new(descriptor, name, data)
        seen.append(sorted(path.name for path in tmp_path.iterdir()))  # what a reader would find meanwhile
    monkeypatch.setattr(private_files, "write_new", write_and_look)
    try:
        key = private_files.secret_key(directory, "key", 32)
    finally:
        os.close(directory)
    assert len(seen) == 1 and "key" not in seen[0]  # written under another name, then renamed into place
    assert (tmp_path / "key").read_bytes() == key.value and key.replaced is None


# --- a symbolic link as the key is refused ----------------------------------------------------------------


def test_a_symlinked_key_is_refused_loudly_once(cache_at: Path, tmp_path: Path) -> None:
    assert disk_cache.store(KEY, {}, b"payload")
    key, elsewhere = cache_at / disk_cache.KEY_FILE, tmp_path / "elsewhere"
    key.rename(elsewhere)  # a key that is a key, but not this directory's file
    key.symlink_to(elsewhere)
    before = dict(disk_cache.stats)
    with pytest.warns(disk_cache.InsecureCacheWarning, match=f"{cache_at}.*hmac-key is a symbolic link"):
        assert not disk_cache.store("1" * 64, {}, b"payload")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per directory and process
        assert disk_cache.load(KEY) is None and disk_cache.cache_directory() is None
        assert not disk_cache.store("1" * 64, {}, b"payload")
    assert disk_cache.stats["refused"] == before.get("refused", 0) + 1
    assert disk_cache.stats["write_errors"] == before.get("write_errors", 0)  # refused, not failing quietly
    assert key.is_symlink() and (cache_at / f"{KEY}.izc").exists()  # nothing replaced or deleted


# --- leftovers of a kill ------------------------------------------------------------------------------------


def leftovers(cache: Path) -> dict[str, Path]:
    """What processes killed in the middle of a store, a key's creation or a library's load leave behind."""
    load_copy = Path(shared_library._private_copy(b"\x7fELF", str(cache)))  # killed before its unlink
    return {"entry temporary": cache / f".{KEY[:16]}.{os.urandom(6).hex()}.tmp",
            "key temporary": cache / f".{disk_cache.KEY_FILE}.{os.urandom(6).hex()}.tmp", "load copy": load_copy}


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def test_leftovers_of_a_kill_older_than_an_hour_are_removed_when_a_process_opens_the_cache(cache_at: Path) -> None:
    assert disk_cache.store(KEY, {}, b"payload")
    disk_cache._swept.discard(cache_at)  # as in a new process
    old, young = leftovers(cache_at), leftovers(cache_at)
    for path in (*old.values(), *young.values()):
        path.touch()
    for path in old.values():
        age(path, 2 * 3600)
    for path in young.values():
        age(path, 50 * 60)  # perhaps a live process's: kept
    kept = [cache_at / f"{KEY}.izc", cache_at / disk_cache.KEY_FILE, cache_at / "notes.tmp"]
    (cache_at / "notes.tmp").touch()  # not a name isozyme makes
    for path in kept:
        age(path, 2 * 3600)
    before = disk_cache.stats["leftovers_removed"]
    assert disk_cache.load(KEY) is not None
    assert [what for what, path in old.items() if path.exists()] == []
    assert disk_cache.stats["leftovers_removed"] == before + 1
    assert all(path.exists() for path in (*young.values(), *kept))
    again = leftovers(cache_at)["entry temporary"]
    again.touch()
    age(again, 2 * 3600)
    assert disk_cache.load(KEY) is not None and again.exists()  # once per process: opens stay cheap


# --- a read-only cache directory ------------------------------------------------------------------------------

READ_ONLY_MOUNT = '''
import errno, os, runpy, sys

cache = os.path.realpath(os.environ["ISOZYME_CACHE_DIR"])

def inside(path, dir_fd=None):
    base = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else ""
    where = os.path.realpath(os.path.join(base, os.fsdecode(path)))
    return where == cache or where.startswith(cache + os.sep)

def refuse(path):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))

def read_only(call, paths=1):
    def checked(*args, dir_fd=None, src_dir_fd=None, dst_dir_fd=None, **kwargs):
        fds = [dir_fd] if paths == 1 else [src_dir_fd, dst_dir_fd]
        for path, fd in zip(args[:paths], fds):
            if inside(path, fd):
                refuse(path)
        more = {"dir_fd": dir_fd} if paths == 1 else {"src_dir_fd": src_dir_fd, "dst_dir_fd": dst_dir_fd}
        return call(*args, **{name: fd for name, fd in more.items() if fd is not None}, **kwargs)
    return checked

if os.environ.get("READ_ONLY"):  # the cache directory as on a file system mounted read-only
    open_ = os.open
    def open_checked(path, flags, mode=0o777, *, dir_fd=None):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC) and inside(path, dir_fd):
            refuse(path)
        return open_(path, flags, mode, dir_fd=dir_fd)
    os.open = open_checked
    os.unlink = os.remove = read_only(os.unlink)
    os.rmdir, os.mkdir = read_only(os.rmdir), read_only(os.mkdir)
    os.replace, os.rename, os.link = (read_only(call, 2) for call in (os.replace, os.rename, os.link))
    os.supports_dir_fd |= {os.open, os.unlink, os.rmdir, os.mkdir, os.replace, os.rename, os.link}
sys.argv = [sys.argv[0]]
runpy.run_path(os.path.join(os.path.dirname(__file__), "main.py"), run_name="__main__")
'''


@pytest.fixture
def filled(tmp_path: Path) -> tuple[Path, Path]:
    """The fresh-process program of test_disk_cache_native.py, started through `READ_ONLY_MOUNT`, and the cache
    it filled."""
    directory = tmp_path / "program"
    directory.mkdir()
    write_program(directory)
    (directory / "read_only.py").write_text(textwrap.dedent(READ_ONLY_MOUNT))
    cache = tmp_path / "cache"
    cold = run_script(directory / "read_only.py", cache)
    assert cold["value"] == expected() and cold.get("stores") == 1 and cold.get("library_loads") == 1
    return directory, cache


def assert_warm_start(run: dict[str, object]) -> None:
    assert run["value"] == expected()
    assert run.get("source_hits") == 1 and run.get("hits") == 1 and run.get("library_loads") == 1
    assert not any(run.get(event) for event in ("misses", "stores", "corrupt", "library_errors", "object_loads",
                                                "write_errors", "refused")), run
    assert not run["llvmlite"]


@needs_linker
def test_a_cache_on_a_read_only_file_system_gives_a_warm_start(filled: tuple[Path, Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    directory, cache = filled
    before = sorted(path.name for path in cache.iterdir())
    monkeypatch.setenv("READ_ONLY", "1")
    assert_warm_start(run_script(directory / "read_only.py", cache))
    assert sorted(path.name for path in cache.iterdir()) == before


@needs_linker
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a directory whatever its mode: see the read-only "
                                              "file system test")
def test_a_cache_directory_without_write_permission_gives_a_warm_start(filled: tuple[Path, Path]) -> None:
    directory, cache = filled
    before = sorted(path.name for path in cache.iterdir())
    cache.chmod(0o500)
    try:
        assert_warm_start(run_script(directory / "read_only.py", cache))
    finally:
        cache.chmod(0o700)
    assert sorted(path.name for path in cache.iterdir()) == before
