"""Compiled kernels as shared libraries: object code linked by the system linker, loaded with `ctypes`.

A warm start that loads a cached kernel through MCJIT must import llvmlite, which loads LLVM (about 30 ms).
Linked into a shared library instead, the module's code loads with `dlopen` in well under a millisecond,
and the process never loads LLVM. `llvm_jit.emit_object(..., position_independent=True)` emits the object
code for this.

`link(object_code)` runs `ld -shared` (else `cc -shared`), found on `PATH`, in a temporary directory with
a time limit, links the C math library (the code calls `exp`, `log`, ... and `malloc`/`free`/`calloc` from
the C library) and returns the library's bytes, or None when no linker is there or it fails: the caller
then emits the module for MCJIT instead. `load(path, symbols)` opens a library with `RTLD_LOCAL` (its
symbols, unique per cache key anyway, stay out of the process's namespace) and `RTLD_NOW` (an unresolved
symbol fails here, not at a call) and returns the handle, which must be kept (a library is unloaded with
its last handle), and the symbols' addresses. A library is never unloaded: compiled entries live as long
as the process.
"""

from __future__ import annotations

import ctypes
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


def load(path: Path, symbols: list[str]) -> tuple[ctypes.CDLL, dict[str, int]]:
    """Open the library at `path`; its handle and the addresses of `symbols`. OSError when it cannot be
    opened or lacks a symbol."""
    library = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL | os.RTLD_NOW)
    addresses = {}
    for symbol in symbols:
        try:
            addresses[symbol] = ctypes.cast(library[symbol], ctypes.c_void_p).value or 0
        except AttributeError:
            addresses[symbol] = 0
    missing = [symbol for symbol, address in addresses.items() if not address]
    if missing:
        raise OSError(f"symbols missing from {path}: {', '.join(missing)}")
    return library, addresses
