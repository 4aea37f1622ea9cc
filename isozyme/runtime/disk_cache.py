"""The on-disk cache of compiled code: one file per key under `ISOZYME_CACHE_DIR` (default
`~/.cache/isozyme`); `ISOZYME_CACHE=off` turns it off.

An entry is `MAGIC`, the SHA-256 of the body, then the body: the length of a JSON metadata block, the block
(which repeats the key) and the payload (object code). Entries are written to a temporary file in the same
directory and renamed into place (`os.replace` is atomic), so a reader sees a whole entry or none, even
with concurrent writers. An entry that is truncated, altered or written for another key is detected by the
checksum and the key check, deleted, counted in `stats["corrupt"]` and reported as a miss: the caller
recompiles and writes a fresh one. No cache failure is fatal: an unwritable directory only costs a
recompilation next time (`stats["write_errors"]`).

`stats` counts `hits misses stores corrupt write_errors` for the process; `isozyme.cache` logs one line
per event at DEBUG level (`ISOZYME_CACHE_LOG=1` prints them to stderr).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import sys
from collections import Counter
from pathlib import Path

MAGIC = b"ISOZYME-CACHE-1\n"
SUFFIX = ".izc"
log = logging.getLogger("isozyme.cache")
stats: Counter[str] = Counter()
"""Cache events of this process: hits, misses, stores, corrupt, write_errors."""


def cache_directory() -> Path | None:
    """Where entries live, or None when the disk cache is off."""
    if os.environ.get("ISOZYME_CACHE", "").lower() in ("0", "off", "false", "no"):
        return None
    configured = os.environ.get("ISOZYME_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "isozyme"


def _event(kind: str, message: str) -> None:
    stats[kind] += 1
    log.debug("%s: %s", kind, message)
    if os.environ.get("ISOZYME_CACHE_LOG"):
        print(f"isozyme cache {kind}: {message}", file=sys.stderr)


def entry_path(directory: Path, key: str) -> Path:
    return directory / f"{key}{SUFFIX}"


def encode(key: str, metadata: dict[str, object], payload: bytes) -> bytes:
    meta = json.dumps({"key": key, **metadata}, sort_keys=True).encode()
    body = struct.pack("<Q", len(meta)) + meta + payload
    return MAGIC + hashlib.sha256(body).digest() + body


def decode(key: str, data: bytes) -> tuple[dict[str, object], bytes]:
    """The metadata and payload of an entry; ValueError saying what is wrong with a damaged one."""
    if not data.startswith(MAGIC):
        raise ValueError("bad header")
    digest, body = data[len(MAGIC):len(MAGIC) + 32], data[len(MAGIC) + 32:]
    if hashlib.sha256(body).digest() != digest:
        raise ValueError("checksum mismatch")
    (length,) = struct.unpack("<Q", body[:8])
    metadata = json.loads(body[8:8 + length])
    if metadata.pop("key", None) != key:
        raise ValueError("entry of another key")
    return metadata, body[8 + length:]


def load(key: str, what: str = "") -> tuple[dict[str, object], bytes] | None:
    """The entry for `key`, or None (a miss, or a damaged entry, which is removed)."""
    directory = cache_directory()
    if directory is None:
        return None
    path = entry_path(directory, key)
    try:
        data = path.read_bytes()
    except OSError:
        _event("misses", f"{what} {key[:16]}")
        return None
    try:
        entry = decode(key, data)
    except (ValueError, KeyError, json.JSONDecodeError, struct.error) as error:
        _event("corrupt", f"{what} {path} ({error}); recompiling")
        try:
            path.unlink()
        except OSError:
            pass
        return None
    _event("hits", f"{what} {key[:16]} from {path}")
    return entry


def store(key: str, metadata: dict[str, object], payload: bytes, what: str = "") -> None:
    """Write the entry for `key` atomically (temporary file, then rename)."""
    directory = cache_directory()
    if directory is None:
        return
    import tempfile  # writes are rare: keep the import off the warm path

    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{key[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(encode(key, metadata, payload))
            os.replace(temporary, entry_path(directory, key))
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as error:
        _event("write_errors", f"{what} {directory}: {error}")
        return
    _event("stores", f"{what} {key[:16]}")
