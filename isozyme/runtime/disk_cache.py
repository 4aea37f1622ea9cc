"""The on-disk cache of compiled code: files named by key under `ISOZYME_CACHE_DIR` (default
`~/.cache/isozyme`); `ISOZYME_CACHE=off` turns it off.

Whoever can write the cache runs code in each process that uses it (libraries are loaded with `dlopen`),
so the cache trusts nothing it did not write itself (docs/cache_security.md):

- The directory must be this user's and writable by no one else; it is created with mode 0700, as are the
  parents it lacks. Else, or when its key file is not this user's alone or is a symbolic link, the cache
  is refused: an `InsecureCacheWarning` (once per directory and process, `stats["refused"]`), and kernels
  are compiled in memory, as with the cache off. Every operation opens the directory, checks it and works
  relative to that descriptor (`private_files.py`); without POSIX descriptors of this kind the cache is off.
- An entry (`KEY.izc`) is `MAGIC`, an HMAC-SHA256 of its kind and body under the directory's secret key
  (`KEY_FILE`: 32 random bytes, mode 0600, made by the first process that needs it), then the body: the
  length of a JSON metadata block, the block (which repeats the key) and the payload. Only this user can
  read the key, so no one else can write an entry that passes. A key file that holds no key (empty or
  short from a kill, a FIFO, a directory) is replaced at once (`private_files.secret_key`) with a
  `ReplacedKeyWarning` (`stats["key_replaced"]`): the entries made under the old key fail their check.
- The compiled code is a shared library beside the entry (`KEY.so`), whose SHA-256 the metadata holds, and
  then the payload is empty; or, where no library could be made or loaded, object code for MCJIT in the
  payload. Source index entries (`KEY.izs`, `source_key.py`) have the same format and an empty payload;
  OpenCL programs (`opencl_backend.py`) hold their OpenCL C in the payload.
- Each file is read from one descriptor, opened without following a link or waiting for a FIFO's writer:
  a regular file of at most `MAX_FILE_BYTES`, or it counts as damaged. A library is checked against its
  digest and then loaded from a private copy of the bytes checked (`load_library`), never again by its
  name: a library replaced after the check is never run. A freshly linked library loads from its bytes.

Files are written to a temporary file in the same directory and renamed into place (`os.replace` is
atomic; a library is written before the entry that names it), so a reader sees a whole file or none, even
with concurrent writers. An entry, or its library, that is truncated, altered, written without the key,
written for another key or kind, or not a regular file is detected; both files are deleted, counted in
`stats["corrupt"]` and reported as a miss: the caller recompiles and writes a fresh entry. No cache
failure is fatal: an unwritable directory only costs a recompilation next time (`stats["write_errors"]`),
and its libraries load through a private temporary directory instead (`load_library`), so a read-only
cache still gives warm starts. The temporary files and load copies a killed process leaves are removed
when they are an hour old, the first time a process opens the directory (`LEFTOVERS`).

`stats` counts the events of this process: `hits misses stores corrupt write_errors` of compiled code,
the same prefixed with `source_` for the source index (and `source_stale`, `source_unkeyable`), `refused`,
`key_replaced`, `leftovers_removed`, and from the backend `library_loads object_loads link_errors
library_errors`. `isozyme.cache` logs one line per event at DEBUG level once the program has imported
`logging` (`ISOZYME_CACHE_LOG=1` prints them to stderr). SHA-256 is CPython's built-in one where there is
one, and the HMAC is built on it (RFC 2104): `hashlib` and `hmac` load OpenSSL, 2.5 ms of a warm start.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import sys
import time
from _operator import _compare_digest as same_digest  # what `hmac.compare_digest` is, without OpenSSL
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from isozyme.runtime import private_files

try:  # CPython's own SHA-256, as `random` imports it: hashlib loads OpenSSL, 2.5 ms of a warm start
    from _sha256 import sha256  # Python 3.11
except ImportError:
    try:
        from _sha2 import sha256  # Python 3.12 and later
    except ImportError:
        from hashlib import sha256

MAGIC = b"ISOZYME-CACHE-2\n"
"""2: entries authenticated by an HMAC (1 had a plain SHA-256: an entry of that format is damaged)."""
LIBRARY_SUFFIX = ".so"
LIBRARY_DIGEST = "library_sha256"
"""Metadata field: the SHA-256 of the entry's shared library, when it has one."""
KEY_FILE = "hmac-key"
KEY_BYTES = 32
MAX_FILE_BYTES = 256 << 20
"""The largest entry or library read (a kernel's library is tens of kilobytes)."""
stats: Counter[str] = Counter()
"""Cache events of this process (module docstring)."""


class InsecureCacheWarning(UserWarning):
    """The cache directory, or its key, is not this user's alone: it is not used."""


class ReplacedKeyWarning(UserWarning):
    """The cache directory's key file held no key (left by a killed process, or not a file): a new key
    replaced it, and the entries made under the old one are compiled again."""


@dataclass(frozen=True)
class EntryKind:
    """A kind of entry: its file name suffix and the prefix of its events in `stats`."""

    suffix: str
    events: str


COMPILED = EntryKind(".izc", "")
"""Compiled code: a shared library beside the entry, or object code in it."""
SOURCE_INDEX = EntryKind(".izs", "source_")
"""From a kernel's source key to the key of its compiled code (`source_key.py`)."""


def configured_directory() -> Path | None:
    """Where entries are to live, or None when the disk cache is off (by choice or on this system)."""
    if os.environ.get("ISOZYME_CACHE", "").lower() in ("0", "off", "false", "no"):
        return None
    if not private_files.supported():
        return None
    configured = os.environ.get("ISOZYME_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "isozyme"


def cache_directory() -> Path | None:
    """Where entries live, or None when the disk cache is off or refused (module docstring)."""
    path = configured_directory()
    if path is None:
        return None
    try:
        directory = _open(path, create=False)
    except OSError:  # missing (a store creates it) or unreadable (a store counts the error)
        return path
    if directory is None:
        return None
    os.close(directory.descriptor)
    return path


def event(kind: str, message: str) -> None:
    """Count and log one cache event."""
    stats[kind] += 1
    logging = sys.modules.get("logging")  # not imported (2 ms at a warm start): then no handler can log it
    if logging is not None:
        logging.getLogger("isozyme.cache").debug("%s: %s", kind, message)  # type: ignore[attr-defined]
    if os.environ.get("ISOZYME_CACHE_LOG"):
        print(f"isozyme cache {kind}: {message}", file=sys.stderr)


def entry_name(key: str, kind: EntryKind = COMPILED) -> str:
    return f"{key}{kind.suffix}"


def library_name(key: str) -> str:
    return f"{key}{LIBRARY_SUFFIX}"


def hmac_sha256(key: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104) of the concatenated `parts` under `key`, as `hmac.digest(key, msg, "sha256")`."""
    if len(key) > 64:  # SHA-256's block size
        key = sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner = sha256(bytes(byte ^ 0x36 for byte in key))
    for part in parts:
        inner.update(part)
    return sha256(bytes(byte ^ 0x5C for byte in key) + inner.digest()).digest()


def encode(key: str, metadata: dict[str, object], payload: bytes, secret: bytes,
           kind: EntryKind = COMPILED) -> bytes:
    """The entry of `key` (module docstring), authenticated under the directory's `secret`."""
    meta = json.dumps({"key": key, **metadata}, sort_keys=True).encode()
    body = struct.pack("<Q", len(meta)) + meta + payload
    return MAGIC + hmac_sha256(secret, kind.suffix.encode(), body) + body


def decode(key: str, data: bytes, secret: bytes, kind: EntryKind = COMPILED) -> tuple[dict[str, object], bytes]:
    """The metadata and payload of an entry; ValueError saying what is wrong with a damaged or forged one."""
    if not data.startswith(MAGIC):
        raise ValueError("bad header")
    tag, body = data[len(MAGIC):len(MAGIC) + 32], data[len(MAGIC) + 32:]
    if not same_digest(tag, hmac_sha256(secret, kind.suffix.encode(), body)):
        raise ValueError("authentication failed: damaged, or not written with this cache's key")
    (length,) = struct.unpack("<Q", body[:8])
    metadata = json.loads(body[8:8 + length])
    if metadata.pop("key", None) != key:
        raise ValueError("entry of another key")
    return metadata, body[8 + length:]


@dataclass(frozen=True)
class OpenDirectory:
    """The cache directory, opened and checked for one operation, with its secret key."""

    path: Path
    descriptor: int
    secret: bytes


def _open(path: Path, create: bool) -> OpenDirectory | None:
    """`path` opened (`private_files.open_directory`) with its key, made when missing or damaged (warned);
    None when it is not to be trusted (warned once). The first time in a process, leftovers are removed
    (`LEFTOVERS`). OSError when it cannot be opened or its key made; the caller closes the descriptor."""
    try:
        descriptor = private_files.open_directory(path, create)
    except private_files.Untrusted as problem:
        _refuse(path, problem)
        return None
    try:
        key = private_files.secret_key(descriptor, KEY_FILE, KEY_BYTES)
    except private_files.Untrusted as problem:
        os.close(descriptor)
        _refuse(path, problem)
        return None
    except BaseException:
        os.close(descriptor)
        raise
    if key.replaced is not None:
        _replaced_key(path, key.replaced)
    if path not in _swept:
        _swept.add(path)
        _remove_leftovers(path, descriptor)
    return OpenDirectory(path, descriptor, key.value)


_swept: set[Path] = set()
"""Directories whose leftovers this process has removed."""
LEFTOVERS = ((".", ".tmp"), (".isozyme-load-", LIBRARY_SUFFIX))
"""The (prefix, suffix) of the names of files that exist only while a process works on them: temporary
files renamed into place (`private_files.replace`) and private copies of libraries being loaded
(`shared_library._private_copy`). A process killed meanwhile leaves them behind."""
LEFTOVER_AGE_S = 3600.0
"""How old a leftover is when it is removed: a live process holds one for milliseconds."""


def _remove_leftovers(path: Path, descriptor: int) -> None:
    try:
        removed = private_files.remove_stale(descriptor, _is_leftover, time.time() - LEFTOVER_AGE_S)
    except OSError:  # the directory cannot be listed: the operation itself fails, or says so
        return
    if removed:
        event("leftovers_removed", f"{removed} files older than {LEFTOVER_AGE_S:.0f} s in {path}")


def _is_leftover(name: str) -> bool:
    return any(name.startswith(prefix) and name.endswith(suffix) for prefix, suffix in LEFTOVERS)


def _replaced_key(path: Path, problem: str) -> None:
    import warnings

    message = (f"the key file {path / KEY_FILE} of isozyme's disk cache {problem}: it has been replaced by a new "
               f"key (a process killed while it wrote the key leaves it empty or short). Entries made under the "
               f"old key fail their check and are compiled again.")
    event("key_replaced", message)
    warnings.warn(message, ReplacedKeyWarning, stacklevel=3)


_refused: set[Path] = set()
"""Directories warned about in this process."""


def _refuse(path: Path, problem: private_files.Untrusted) -> None:
    if path in _refused:
        return
    _refused.add(path)
    import warnings

    message = (f"isozyme is not using the disk cache {path}: {problem}. Whoever can write a cache can run "
               f"code in the processes that use it, so kernels are compiled in memory. Make the directory "
               f"yours alone (chmod 700), or set ISOZYME_CACHE_DIR to a directory of your own.")
    event("refused", message)
    warnings.warn(message, InsecureCacheWarning, stacklevel=3)


@dataclass
class Entry:
    """A cache entry as read back, every part of it checked."""

    metadata: dict[str, object]
    payload: bytes
    """Object code for MCJIT; empty when there is a library."""
    library: bytes | None
    """The shared library linked from the object code, when one was stored; its SHA-256 has been checked.
    Load these very bytes (`load_library`), never the file they were read from."""


DAMAGE = (ValueError, KeyError, TypeError, json.JSONDecodeError, struct.error, OSError)
"""What reading a damaged entry raises (a file that is not there is a miss, not damage)."""


def load(key: str, what: str = "", kind: EntryKind = COMPILED) -> Entry | None:
    """The entry for `key`, or None (a miss, or a damaged entry, which is removed with its library)."""
    path = configured_directory()
    try:
        directory = _open(path, create=False) if path is not None else None
    except OSError:
        event(f"{kind.events}misses", f"{what} {key[:16]}")
        return None
    if directory is None:
        return None
    try:
        return _load_from(directory, key, what, kind)
    finally:
        os.close(directory.descriptor)


def _load_from(directory: OpenDirectory, key: str, what: str, kind: EntryKind) -> Entry | None:
    name = entry_name(key, kind)
    try:
        data = private_files.read_regular(directory.descriptor, name, MAX_FILE_BYTES)
    except FileNotFoundError:
        event(f"{kind.events}misses", f"{what} {key[:16]}")
        return None
    except DAMAGE as error:
        return _damaged(directory, key, what, kind, error)
    try:
        metadata, payload = decode(key, data, directory.secret, kind)
        library = _checked_library(directory, key, metadata)
    except DAMAGE as error:
        return _damaged(directory, key, what, kind, error)
    event(f"{kind.events}hits", f"{what} {key[:16]} from {directory.path / name}")
    return Entry(metadata, payload, library)


def _damaged(directory: OpenDirectory, key: str, what: str, kind: EntryKind, error: Exception) -> None:
    event(f"{kind.events}corrupt", f"{what} {directory.path / entry_name(key, kind)} ({error}); recompiling")
    _remove_in(directory, key, kind)  # a library is checked by its entry: both go


def _checked_library(directory: OpenDirectory, key: str, metadata: dict[str, object]) -> bytes | None:
    """The bytes of the entry's shared library, their SHA-256 checked; ValueError or OSError when it is
    damaged or missing."""
    digest = metadata.pop(LIBRARY_DIGEST, None)
    if digest is None:
        return None
    library = private_files.read_regular(directory.descriptor, library_name(key), MAX_FILE_BYTES)
    if sha256(library).hexdigest() != digest:
        raise ValueError(f"checksum mismatch of {library_name(key)}")
    return library


def remove(key: str, kind: EntryKind = COMPILED) -> None:
    """Delete the entry of `key` and its library, if they exist."""
    path = configured_directory()
    try:
        directory = _open(path, create=False) if path is not None else None
    except OSError:
        return
    if directory is not None:
        _remove_in(directory, key, kind)
        os.close(directory.descriptor)


def _remove_in(directory: OpenDirectory, key: str, kind: EntryKind) -> None:
    for name in (entry_name(key, kind), library_name(key)):
        private_files.unlink_quietly(directory.descriptor, name)


def store(key: str, metadata: dict[str, object], payload: bytes, what: str = "", library: bytes | None = None,
          kind: EntryKind = COMPILED) -> bool:
    """Write the entry for `key` atomically (temporary file, then rename), after its shared library when
    there is one (without one, a library left by an earlier entry of `key` is removed); was it written?"""
    path = configured_directory()
    if path is None:
        return False
    try:
        directory = _open(path, create=True)
        if directory is None:
            return False
        try:
            _write(directory, key, metadata, payload, library, kind)
        finally:
            os.close(directory.descriptor)
    except OSError as error:
        event(f"{kind.events}write_errors", f"{what} {path}: {error}")
        return False
    event(f"{kind.events}stores", f"{what} {key[:16]}")
    return True


def _write(directory: OpenDirectory, key: str, metadata: dict[str, object], payload: bytes,
           library: bytes | None, kind: EntryKind) -> None:
    descriptor, temporary = directory.descriptor, f".{key[:16]}"
    if library is not None:
        private_files.replace(descriptor, library_name(key), library, temporary)
        metadata = {**metadata, LIBRARY_DIGEST: sha256(library).hexdigest()}
    entry = encode(key, metadata, payload, directory.secret, kind)
    private_files.replace(descriptor, entry_name(key, kind), entry, temporary)
    if library is None and kind is COMPILED:
        try:  # after the entry that no longer names it
            os.unlink(library_name(key), dir_fd=descriptor)
        except FileNotFoundError:
            pass


def load_library(image: bytes, symbols: list[str]) -> tuple[object, dict[str, int]]:
    """`shared_library.load` of `image`, a library `load` checked or one just linked, from a private copy
    in the cache directory (never the entry's file), or, where this process cannot write the directory
    (`UNWRITABLE`), in a private temporary directory. OSError when it does not load, or the cache is off."""
    from isozyme.runtime import shared_library  # ctypes: only where there is a library

    path = configured_directory()
    directory = _open(path, create=True) if path is not None else None
    if directory is None:
        raise OSError("the disk cache is off or refused: no private directory to load a library from")
    try:
        return shared_library.load(image, symbols, _through_descriptor(directory.descriptor, directory.path))
    except OSError as error:
        if error.errno not in UNWRITABLE:  # written, but it did not load
            raise
    finally:
        os.close(directory.descriptor)
    return _load_through_temporary_directory(image, symbols)


UNWRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})
"""What writing the private copy raises in a directory this process may read but not write: no write
permission, a read-only mount, a full disk or quota."""


def _load_through_temporary_directory(image: bytes, symbols: list[str]) -> tuple[object, dict[str, int]]:
    """`shared_library.load` from a new directory in the system's temporary one (`tempfile.mkdtemp`: made
    by this process, mode 0700, checked as the cache directory is), removed once the library is loaded."""
    import tempfile

    from isozyme.runtime import shared_library

    scratch = Path(tempfile.mkdtemp(prefix="isozyme-load-"))
    try:
        descriptor = private_files.open_directory(scratch, create=False)
        try:
            return shared_library.load(image, symbols, _through_descriptor(descriptor, scratch))
        finally:
            os.close(descriptor)
    except private_files.Untrusted as problem:
        raise OSError(f"no private directory to load a library from: {problem}") from None
    finally:
        os.rmdir(scratch)  # empty: the copy is removed once loaded


def _through_descriptor(descriptor: int, path: Path) -> str:
    """A path to the directory through its open descriptor where the system has one: the directory checked,
    not one swapped in under its name since."""
    proc = f"/proc/self/fd/{descriptor}"
    return proc if os.path.isdir(proc) else str(path)
