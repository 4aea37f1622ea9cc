"""Compiled kernels as shared libraries: object code linked by the system linker, loaded with `ctypes`.

A warm start that loads a cached kernel through MCJIT must import llvmlite, which loads LLVM (about 30 ms).
Linked into a shared library instead, the module's code loads with `dlopen` in well under a millisecond,
and the process never loads LLVM. `llvm_jit.emit_object(..., position_independent=True)` emits the object
code for this.

`link(object_code)` runs `ld -shared` (else `cc -shared`), found on `PATH`, in a temporary directory with
a time limit, links the C math library (the code calls `exp`, `log`, ... and `malloc`/`free`/`calloc` from
the C library; glibc's `libm.so` is a linker script that also links its vector math library, libmvec, as
needed: "afn" code calls it, `codegen/llvm_vector_math.py`) and returns the library's bytes, or None when
no linker is there or it fails: the caller then emits the module for MCJIT instead.
`load(image, symbols, scratch)` loads the library whose bytes are `image` (checked by the caller) from a
private copy: a new file in the directory `scratch`, which only this user may write, under a name this
process never used before (the C library would return a library loaded before under the same name),
removed once loaded. What runs is `image`, whatever happens to the
file it was read from. (A memfd's path, `/proc/self/fd/N`, comes back once its descriptor is closed and
the number reused, and the C library then returns the first library; kept open, one descriptor per kernel
would add up.) It opens the library with `RTLD_LOCAL` (its symbols, unique per cache key anyway,
stay out of the process's namespace) and `RTLD_NOW` (an unresolved symbol fails here, not at a call) and
returns the handle, which must be kept (a library is unloaded with its last handle), and the symbols'
addresses. A library is never unloaded: compiled entries live as long as the process.
"""

from __future__ import annotations

import ctypes
import itertools
import os
from pathlib import Path

LINKERS: tuple[tuple[str, ...], ...] = (("ld", "-shared"), ("cc", "-shared"))
"""Commands tried in turn; `ld` alone is about three times faster than the compiler driver."""
LINK_TIMEOUT_S = 60.0


def linker() -> str | None:
    """The first of `LINKERS` on `PATH`, or None (always on hosts without `dlopen`)."""
    import shutil  # only on a cache miss: keep it off the warm path

    if os.name != "posix":
        return None
    return next((command for command, *_ in LINKERS if shutil.which(command)), None)


def link(object_code: bytes, name: str = "kernel") -> bytes | None:
    """A shared library of `object_code` with the C math library, or None when it cannot be linked."""
    import shutil  # only on a cache miss: keep these imports off the warm path
    import subprocess
    import tempfile

    for command, *flags in LINKERS:
        program = shutil.which(command) if os.name == "posix" else None
        if program is None:
            continue
        try:
            with tempfile.TemporaryDirectory(prefix="isozyme-link-") as directory:
                objects, library = Path(directory) / f"{name}.o", Path(directory) / f"{name}.so"
                objects.write_bytes(object_code)
                done = subprocess.run([program, *flags, "-o", str(library), str(objects), "-lm"],
                                      capture_output=True, timeout=LINK_TIMEOUT_S, check=False)
                if done.returncode == 0:
                    return library.read_bytes()
        except (OSError, subprocess.SubprocessError):
            continue
    return None


def load(image: bytes, symbols: list[str], scratch: str) -> tuple[ctypes.CDLL, dict[str, int]]:
    """Load the library `image` from a private copy in the directory `scratch` (module docstring); its
    handle and the addresses of `symbols`. OSError when it cannot be written or opened, or lacks a symbol."""
    path = _private_copy(image, scratch)
    try:
        library = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    finally:
        os.unlink(path)  # the mapping stays
    return library, _addresses(library, symbols, path)


_copies = itertools.count()
"""Numbers the private copies: no name is loaded twice in a process."""


def _private_copy(image: bytes, scratch: str) -> str:
    path = f"{scratch}/.isozyme-load-{os.getpid()}-{next(_copies)}-{os.urandom(4).hex()}.so"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(path, flags, 0o600), "wb") as file:
        try:
            file.write(image)
        except BaseException:
            os.unlink(path)
            raise
    return path


def _addresses(library: ctypes.CDLL, symbols: list[str], path: str) -> dict[str, int]:
    addresses = {}
    for symbol in symbols:
        try:
            addresses[symbol] = ctypes.cast(library[symbol], ctypes.c_void_p).value or 0
        except AttributeError:
            addresses[symbol] = 0
    missing = [symbol for symbol, address in addresses.items() if not address]
    if missing:
        raise OSError(f"symbols missing from {path}: {', '.join(missing)}")
    return addresses
