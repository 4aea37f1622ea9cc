"""What compiled code depends on besides its own IR, described without importing llvmlite: the cache keys'
host and compiler descriptions.

Object code is compiled by the installed llvmlite (and the LLVM linked into it) for the host CPU with all
its features (`llvm_jit.py`), by the installed isozyme. A cache key must change whenever any of these
changes, and a warm start must compute it without loading LLVM (importing `llvmlite.binding` costs about
30 ms), so they are identified by what the file system and the kernel say:

- llvmlite: its version file and the size, modification time and inode of `libllvmlite.so` (which contains
  LLVM), found with `importlib.util.find_spec`, which does not import the package;
- the target: `sys.platform`, `platform.machine()` and the C library's version;
- the CPU: the first processor's entry of `/proc/cpuinfo` (vendor, family, model, stepping, microcode and
  the feature flags the kernel enables), which determines the CPU name and features LLVM detects; the
  fields that change while the machine runs (clock, core numbering) are left out;
- isozyme: its version and the size and modification time of every module of the package, so that an
  edited compiler never serves code it compiled before the edit.

Where `/proc/cpuinfo` or llvmlite's files cannot be read, the description falls back on
`llvm_jit.host_description()`, which asks LLVM itself (and imports llvmlite).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import sys
from pathlib import Path

from isozyme.runtime.disk_cache import sha256
from isozyme.runtime.version import VERSION

VOLATILE_CPUINFO_FIELDS = frozenset({"processor", "cpu MHz", "bogomips", "BogoMIPS", "physical id", "siblings",
                                     "core id", "cpu cores", "apicid", "initial apicid"})
"""Fields of `/proc/cpuinfo` that differ between the processors of one machine or change while it runs."""


@functools.cache
def host_description() -> str:
    """llvmlite's installation, the target and the CPU (module docstring), as one line."""
    llvmlite, cpu = llvmlite_installation(), cpu_identity()
    if llvmlite is None or cpu is None:
        from isozyme.runtime import llvm_jit  # no cheap description on this host: ask LLVM

        return f"llvm: {llvm_jit.host_description()}"
    libc = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else ""
    return f"{llvmlite}; {sys.platform} {platform.machine()} {libc}; cpu {cpu}"


def llvmlite_installation() -> str | None:
    """llvmlite's version file and its LLVM library's size, modification time and inode; None when absent."""
    spec = importlib.util.find_spec("llvmlite")
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    try:
        version = (package / "_version.py").read_bytes()
        library = next((package / "binding").glob("*llvmlite*"))
        status = library.stat()
    except (OSError, StopIteration):
        return None
    return (f"llvmlite {sha256(version).hexdigest()[:16]} {library} {status.st_size} "
            f"{status.st_mtime_ns} {status.st_ino}")


def cpu_identity(path: str = "/proc/cpuinfo") -> str | None:
    """The first processor's stable fields of `/proc/cpuinfo`, hashed; None when it cannot be read."""
    try:
        with open(path, "rb", buffering=0) as file:
            text = b""
            while b"\n\n" not in text:  # the kernel formats one processor per read: stop after the first
                chunk = file.read(16384)
                if not chunk:
                    break
                text += chunk
    except OSError:
        return None
    fields = []
    for line in text.split(b"\n\n", 1)[0].decode(errors="replace").splitlines():
        name, _, value = line.partition(":")
        if name.strip() not in VOLATILE_CPUINFO_FIELDS:
            fields.append(f"{name.strip()}={value.strip()}")
    if not fields:
        return None
    return sha256("\n".join(fields).encode()).hexdigest()


@functools.cache
def compiler_description() -> str:
    """isozyme's version and the size and modification time of each of its modules."""
    package = Path(__file__).resolve().parent.parent
    try:
        stamps = _module_stamps(package, "")
    except OSError:  # not a directory of modules (a zip archive): the version alone
        return f"isozyme {VERSION}"
    digest = sha256("\n".join(sorted(stamps)).encode()).hexdigest()
    return f"isozyme {VERSION} {package} {digest}"


def _module_stamps(directory: Path, prefix: str) -> list[str]:
    """`path size mtime` of every `.py` file under `directory`, subpackages included."""
    stamps = []
    with os.scandir(directory) as scan:
        for entry in scan:
            if entry.name.endswith(".py"):
                status = entry.stat()
                stamps.append(f"{prefix}{entry.name} {status.st_size} {status.st_mtime_ns}")
            elif entry.is_dir() and entry.name != "__pycache__":
                stamps += _module_stamps(Path(entry.path), f"{prefix}{entry.name}/")
    return stamps
