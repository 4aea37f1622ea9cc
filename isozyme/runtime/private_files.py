"""Files only this user can have written: a directory checked to be private, files in it read through one
descriptor without following links, written under fresh names and renamed into place.

Whoever can write a directory whose shared libraries a process loads runs code in that process, so the
disk cache (`disk_cache.py`) keeps its files here. `open_directory` returns a descriptor of a directory
this user owns and no one else may write (`Untrusted` otherwise), creating it and its missing parents
with mode 0700; everything else works relative to that descriptor, so a directory swapped in under the
same name later is never used. `read_regular` opens a name with `O_NOFOLLOW | O_NONBLOCK` and reads only
a regular file, at most a size limit, from that one descriptor: a symbolic link (to `/dev/zero`, or to
another user's file), a FIFO (whose open would wait for a writer), a device or a directory is an error,
never read or waited for. `replace` writes a new file (`O_CREAT | O_EXCL`, mode 0600) and renames it over
the name. `secret_key` reads the directory's random key, which no one else may read or write, or creates
it, or replaces a damaged one (empty, short, a FIFO, a directory), never waiting: of processes creating or
replacing it at once, the first to hold the directory's `flock` writes it and the others read its key. A
key that is a symbolic link is Untrusted. `remove_stale` removes what killed processes left behind.

POSIX only (descriptors relative to a directory, owners and modes): elsewhere the disk cache is off.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

OPEN_DIRECTORY = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
OPEN_FILE = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
"""Never follows a link or waits for a FIFO's writer: what is found is checked before it is read."""
CREATE_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
GROUP_OR_OTHERS_WRITE = 0o022
GROUP_OR_OTHERS_ANY = 0o077


class Untrusted(Exception):
    """A file or directory another user owns or may write (a key: read), whose use could run their code;
    or a key file that is a symbolic link (to a file that may be anyone's)."""


def supported() -> bool:
    """Can files be checked and opened as this module does (POSIX with `dir_fd` and `O_NOFOLLOW`)?"""
    return os.name == "posix" and hasattr(os, "O_NOFOLLOW") and os.open in os.supports_dir_fd


def check_owner_and_mode(status: os.stat_result, what: str, forbidden: int) -> None:
    """Untrusted unless this user owns the file of `status` and its mode has none of the bits `forbidden`."""
    user = os.geteuid()
    if status.st_uid != user:
        raise Untrusted(f"{what} is owned by user {status.st_uid}, not by this user ({user})")
    if status.st_mode & forbidden:
        may = "write" if forbidden == GROUP_OR_OTHERS_WRITE else "read or write"
        raise Untrusted(f"{what} has mode {stat.S_IMODE(status.st_mode):04o}: group or others may {may} it")


def make_directories(path: Path) -> None:
    """Create `path` and each missing parent with mode 0700 (as XDG asks of `~/.cache`)."""
    missing = []
    for directory in (path, *path.parents):
        if os.path.lexists(directory):
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:  # made by another process meanwhile (the last one is checked when opened)
            pass


def open_directory(path: Path, create: bool) -> int:
    """A descriptor of the directory `path`, which this user owns and no one else may write (Untrusted
    otherwise); created with its missing parents when it is missing and `create` (FileNotFoundError
    otherwise)."""
    try:
        descriptor = os.open(path, OPEN_DIRECTORY)
    except FileNotFoundError:
        if not create:
            raise
        make_directories(path)
        descriptor = os.open(path, OPEN_DIRECTORY)
    try:
        check_owner_and_mode(os.fstat(descriptor), f"the directory {path}", GROUP_OR_OTHERS_WRITE)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def read_regular(directory: int, name: str, limit: int, secret: bool = False) -> bytes:
    """The bytes of the regular file `name` in `directory` (a descriptor), from one descriptor opened
    without following a link or waiting for a writer. FileNotFoundError when there is none; ValueError for
    anything but a regular file, or one over `limit` bytes; with `secret`, Untrusted unless the file is
    this user's and no one else may read or write it."""
    descriptor = os.open(name, OPEN_FILE, dir_fd=directory)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise ValueError(f"{name} is not a regular file")
        if secret:
            check_owner_and_mode(status, f"the key file {name}", GROUP_OR_OTHERS_ANY)
        if status.st_size > limit:
            raise ValueError(f"{name} has {status.st_size} bytes, more than the {limit} an entry may have")
        data = _read_at_most(descriptor, status.st_size + 1)
    finally:
        os.close(descriptor)
    if len(data) != status.st_size:
        raise ValueError(f"{name} changed while it was read")
    return data


def _read_at_most(descriptor: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.read(descriptor, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_new(directory: int, name: str, data: bytes) -> None:
    """Create the file `name` in `directory` with mode 0600 and write `data` (FileExistsError when the name
    is taken: nothing is touched then); a file left half-written by an error is removed."""
    descriptor = os.open(name, CREATE_FILE, 0o600, dir_fd=directory)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
    except BaseException:
        os.unlink(name, dir_fd=directory)
        raise


def replace(directory: int, name: str, data: bytes, prefix: str) -> None:
    """Write `data` to a new temporary file named `prefix...` and rename it over `name` (atomic: a reader
    sees the old file or the new one)."""
    temporary = f"{prefix}.{os.urandom(6).hex()}.tmp"
    write_new(directory, temporary, data)
    try:
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        os.unlink(temporary, dir_fd=directory)
        raise


def unlink_quietly(directory: int, name: str) -> None:
    """Remove the file, link, FIFO or empty directory `name` in `directory`, if it can be removed."""
    try:
        os.unlink(name, dir_fd=directory)
    except IsADirectoryError:
        try:
            os.rmdir(name, dir_fd=directory)
        except OSError:  # not empty: it is no entry, and none can be written there
            pass
    except OSError:  # gone already
        pass


def remove_stale(directory: int, is_leftover: Callable[[str], bool], older_than: float) -> int:
    """Remove the regular files of `directory` whose names are `is_leftover` and which were last modified
    before the time `older_than` (what killed processes left: no live one takes that long); how many. What
    cannot be removed (a read-only directory) stays."""
    removed = 0
    with os.scandir(directory) as entries:
        names = [entry.name for entry in entries if is_leftover(entry.name)]
    for name in names:
        try:
            status = os.stat(name, dir_fd=directory, follow_symlinks=False)
            if stat.S_ISREG(status.st_mode) and status.st_mtime < older_than:
                os.unlink(name, dir_fd=directory)
                removed += 1
        except OSError:  # gone meanwhile, or not removable here
            pass
    return removed


def secret_key(directory: int, name: str, size: int) -> SecretKey:
    """The `size` random bytes of the key file `name` in `directory` (`read_key`), made when it is missing
    and made anew when it is damaged, without waiting: a new key is written under another name and renamed
    into place, so no reader sees part of one (a key file that is not a key was left by a process killed
    while it wrote one, or by an earlier version that wrote it in place). Of the processes that find it
    missing or damaged, the first to hold the directory's lock writes it and the others read its key.
    Untrusted when it is a symbolic link, or not this user's alone."""
    try:
        return SecretKey(read_key(directory, name, size))
    except (FileNotFoundError, DamagedKey):
        pass
    lock = directory_lock(directory)
    try:
        try:  # made, or mended, by another process while this one waited for the lock
            return SecretKey(read_key(directory, name, size))
        except FileNotFoundError:
            problem = None
        except DamagedKey as damaged:
            problem = str(damaged) + _move_directory_aside(directory, name)
        key = os.urandom(size)
        replace(directory, name, key, f".{name}")
    finally:
        os.close(lock)
    return SecretKey(key, problem)


@dataclass(frozen=True)
class SecretKey:
    """A directory's key as `secret_key` found or made it."""

    value: bytes
    replaced: str | None = None
    """What was wrong with the key file this call replaced; None when it read a key or made a missing one."""


class DamagedKey(Exception):
    """A key file that holds no key: not a regular file, or not of a key's size."""


def read_key(directory: int, name: str, size: int) -> bytes:
    """The key in the file `name` of `directory`, checked before it is opened (a FIFO is never opened):
    FileNotFoundError, DamagedKey (saying what is wrong), or Untrusted when it is a symbolic link or a
    file others may read or write."""
    status = os.stat(name, dir_fd=directory, follow_symlinks=False)
    if stat.S_ISLNK(status.st_mode):
        raise Untrusted(f"the key file {name} is a symbolic link: the key must be this directory's own file, "
                        f"which only this user can read (delete the link)")
    if not stat.S_ISREG(status.st_mode):
        raise DamagedKey(f"is {FILE_TYPES.get(stat.S_IFMT(status.st_mode), 'a special file')}, not a file")
    if status.st_size != size:
        raise DamagedKey(f"holds {status.st_size} bytes, not {size}")
    try:
        data = read_regular(directory, name, size, secret=True)
    except ValueError as error:  # replaced since the check: by another process mending it, most likely
        raise DamagedKey(str(error)) from None
    if len(data) != size:
        raise DamagedKey(f"holds {len(data)} bytes, not {size}")
    return data


FILE_TYPES = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
              stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


def directory_lock(directory: int) -> int:
    """A new descriptor of `directory` holding its exclusive `flock`: close it to release the lock, which
    the system releases too when the process dies (no lock outlives a kill). A descriptor of its own, as a
    lock belongs to an open file description: threads sharing `directory` would share it. Where the file
    system has no such locks (some network mounts), the descriptor holds none: processes mending a key at
    once then each write one, the last rename wins, and entries written under the others are rebuilt."""
    import fcntl  # only where a key is missing or damaged

    descriptor = os.open(".", OPEN_DIRECTORY, dir_fd=directory)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
    except OSError:
        pass
    return descriptor


def _move_directory_aside(directory: int, name: str) -> str:
    """Make way for a key where a directory is (a file cannot be renamed over one): an empty one is removed,
    another moved to a name of its own and kept. What was done, for the warning ("" for no directory)."""
    if not stat.S_ISDIR(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode):
        return ""
    aside = f".{name}.{os.urandom(6).hex()}.damaged"
    os.rename(name, aside, src_dir_fd=directory, dst_dir_fd=directory)
    try:
        os.rmdir(aside, dir_fd=directory)
    except OSError:
        return f" (moved to {aside}, with what it holds)"
    return ""
