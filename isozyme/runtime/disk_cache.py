"""The on-disk cache of compiled code: files named by key under `ISOZYME_CACHE_DIR` (default
`~/.cache/isozyme`); `ISOZYME_CACHE=off` turns it off.

An entry (`KEY.izc`) is `MAGIC`, the SHA-256 of the body, then the body: the length of a JSON metadata
block, the block (which repeats the key) and the payload. The compiled code is a shared library beside the
entry (`KEY.so`), whose SHA-256 the metadata holds, and then the payload is empty; or, where no library
could be made or loaded, object code for MCJIT in the payload. Source index entries (`KEY.izs`,
`source_key.py`) have the same format and an empty payload. Files are written to a
temporary file in the same directory and renamed into place (`os.replace` is atomic; a library is written
before the entry that names it), so a reader sees a whole file or none, even with concurrent writers, and
a process that has loaded a library keeps its copy when another replaces it. An entry, or its library,
that is truncated, altered or written for another key is detected by the checksums and the key check;
both files are deleted, counted in `stats["corrupt"]` and reported as a miss: the caller recompiles and
writes a fresh entry. No cache failure is fatal: an unwritable directory only costs a recompilation next
time (`stats["write_errors"]`).

`stats` counts the events of this process: `hits misses stores corrupt write_errors` of compiled code,
the same prefixed with `source_` for the source index (and `source_stale`, `source_unkeyable`), and from
the backend `library_loads object_loads link_errors library_errors`. `isozyme.cache` logs one line per
event at DEBUG level once the program has imported `logging` (`ISOZYME_CACHE_LOG=1` prints them to
stderr). SHA-256 is CPython's built-in one where there is one: `hashlib` loads OpenSSL, 2.5 ms of a warm
start.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

try:  # CPython's own SHA-256, as `random` imports it: hashlib loads OpenSSL, 2.5 ms of a warm start
    from _sha256 import sha256  # Python 3.11
except ImportError:
    try:
        from _sha2 import sha256  # Python 3.12 and later
    except ImportError:
        from hashlib import sha256

MAGIC = b"ISOZYME-CACHE-1\n"
LIBRARY_SUFFIX = ".so"
LIBRARY_DIGEST = "library_sha256"
"""Metadata field: the SHA-256 of the entry's shared library, when it has one."""
stats: Counter[str] = Counter()
"""Cache events of this process (module docstring)."""


@dataclass(frozen=True)
class EntryKind:
    """A kind of entry: its file name suffix and the prefix of its events in `stats`."""

    suffix: str
    events: str


COMPILED = EntryKind(".izc", "")
"""Compiled code: a shared library beside the entry, or object code in it."""
SOURCE_INDEX = EntryKind(".izs", "source_")
"""From a kernel's source key to the key of its compiled code (`source_key.py`)."""


def cache_directory() -> Path | None:
    """Where entries live, or None when the disk cache is off."""
    if os.environ.get("ISOZYME_CACHE", "").lower() in ("0", "off", "false", "no"):
        return None
    configured = os.environ.get("ISOZYME_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "isozyme"


def event(kind: str, message: str) -> None:
    """Count and log one cache event."""
    stats[kind] += 1
    logging = sys.modules.get("logging")  # not imported (2 ms at a warm start): then no handler can log it
    if logging is not None:
        logging.getLogger("isozyme.cache").debug("%s: %s", kind, message)  # type: ignore[attr-defined]
    if os.environ.get("ISOZYME_CACHE_LOG"):
        print(f"isozyme cache {kind}: {message}", file=sys.stderr)


def entry_path(directory: Path, key: str, kind: EntryKind = COMPILED) -> Path:
    return directory / f"{key}{kind.suffix}"


def library_path(directory: Path, key: str) -> Path:
    return directory / f"{key}{LIBRARY_SUFFIX}"


def encode(key: str, metadata: dict[str, object], payload: bytes) -> bytes:
    meta = json.dumps({"key": key, **metadata}, sort_keys=True).encode()
    body = struct.pack("<Q", len(meta)) + meta + payload
    return MAGIC + sha256(body).digest() + body


def decode(key: str, data: bytes) -> tuple[dict[str, object], bytes]:
    """The metadata and payload of an entry; ValueError saying what is wrong with a damaged one."""
    if not data.startswith(MAGIC):
        raise ValueError("bad header")
    digest, body = data[len(MAGIC):len(MAGIC) + 32], data[len(MAGIC) + 32:]
    if sha256(body).digest() != digest:
        raise ValueError("checksum mismatch")
    (length,) = struct.unpack("<Q", body[:8])
    metadata = json.loads(body[8:8 + length])
    if metadata.pop("key", None) != key:
        raise ValueError("entry of another key")
    return metadata, body[8 + length:]


@dataclass
class Entry:
    """A cache entry as read back, every part of it checked."""

    metadata: dict[str, object]
    payload: bytes
    """Object code for MCJIT; empty when there is a library."""
    library: Path | None
    """The shared library linked from the object code, when one was stored; its SHA-256 has been checked."""


def load(key: str, what: str = "", kind: EntryKind = COMPILED) -> Entry | None:
    """The entry for `key`, or None (a miss, or a damaged entry, which is removed with its library)."""
    directory = cache_directory()
    if directory is None:
        return None
    path = entry_path(directory, key, kind)
    try:
        data = path.read_bytes()
    except OSError:
        event(f"{kind.events}misses", f"{what} {key[:16]}")
        return None
    try:
        metadata, payload = decode(key, data)
        library = _checked_library(directory, key, metadata)
    except (ValueError, KeyError, json.JSONDecodeError, struct.error, OSError) as error:
        event(f"{kind.events}corrupt", f"{what} {path} ({error}); recompiling")
        remove(key, kind)  # a library is checked by its entry: both go
        return None
    event(f"{kind.events}hits", f"{what} {key[:16]} from {path}")
    return Entry(metadata, payload, library)


def remove(key: str, kind: EntryKind = COMPILED) -> None:
    """Delete the entry of `key` and its library, if they exist."""
    directory = cache_directory()
    if directory is None:
        return
    for path in (entry_path(directory, key, kind), library_path(directory, key)):
        try:
            path.unlink()
        except OSError:
            pass


def _checked_library(directory: Path, key: str, metadata: dict[str, object]) -> Path | None:
    """The entry's shared library, after checking its SHA-256; ValueError (or OSError) when it is damaged."""
    digest = metadata.pop(LIBRARY_DIGEST, None)
    if digest is None:
        return None
    path = library_path(directory, key)
    if sha256(path.read_bytes()).hexdigest() != digest:
        raise ValueError(f"checksum mismatch of {path.name}")
    return path


def store(key: str, metadata: dict[str, object], payload: bytes, what: str = "", library: bytes | None = None,
          kind: EntryKind = COMPILED) -> Path | None:
    """Write the entry for `key` atomically (temporary file, then rename), after its shared library when
    there is one (without one, a library left by an earlier entry of `key` is removed); the library's path
    once written."""
    directory = cache_directory()
    if directory is None:
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        written = None
        if library is not None:
            written = _write_atomically(directory, key, library, library_path(directory, key))
            metadata = {**metadata, LIBRARY_DIGEST: sha256(library).hexdigest()}
        _write_atomically(directory, key, encode(key, metadata, payload), entry_path(directory, key, kind))
        if library is None and kind is COMPILED:
            library_path(directory, key).unlink(missing_ok=True)  # after the entry that no longer names it
    except OSError as error:
        event(f"{kind.events}write_errors", f"{what} {directory}: {error}")
        return None
    event(f"{kind.events}stores", f"{what} {key[:16]}")
    return written


def _write_atomically(directory: Path, key: str, data: bytes, path: Path) -> Path:
    import tempfile  # writes are rare: keep the import off the warm path

    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{key[:16]}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    return path
