"""Loading kernels from Python files for the command line (`isozyme ir FILE.py:kernel`, `isozyme bench`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from isozyme.runtime.kernel import Kernel


def load_kernels(path: str) -> dict[str, Kernel]:
    """Import the Python file at `path` and return its kernels by name, in definition order."""
    return {key: value for key, value in load_module(path).items() if isinstance(value, Kernel)}


def load_module(path: str) -> dict[str, object]:
    """Import the Python file at `path` (its folder on `sys.path` while it runs) and return its globals."""
    file = Path(path).resolve()
    name = f"_isozyme_cli_{file.stem}_{abs(hash(str(file)))}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise OSError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(file.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(file.parent))
    return vars(module)


def find_kernels(spec: str) -> list[Kernel]:
    """`FILE.py:kernel` -> [that kernel]; `FILE.py` -> every kernel of the file, in definition order."""
    path, _, wanted = spec.rpartition(":") if spec.rpartition(":")[0].endswith(".py") else (spec, "", "")
    kernels = load_kernels(path)
    if not wanted:
        return list(kernels.values())
    if wanted not in kernels:
        raise LookupError(f"{path} has no kernel '{wanted}' (kernels: {', '.join(kernels) or 'none'})")
    return [kernels[wanted]]
