"""The environment variables that choose which compiled code a call runs, read fast enough for every call.

A derivative is looked up per call under a key built from the backend (`ISOZYME_BACKEND`), checked mode
(`ISOZYME_BOUNDSCHECK`), loop fusion (`ISOZYME_LOOP_FUSION`) and race checking (`ISOZYME_CHECK_RACES`), each
read from the environment by the code that uses it (`kernel.py`, `optimize/loop_fusion.py`,
`race_detector.py`). Building that key costs more than the call itself, so the call path keeps what it built
under `selection()`, the raw values of those variables: while they are unchanged, so is the key.

`os.environ.get` costs about half a microsecond a variable; `selection()` reads CPython's own dictionary
behind `os.environ` (`os.environ._data`, which `os.environ[...] = ...`, `del` and `monkeypatch.setenv` all
update), falling back to `os.environ.get` where that dictionary is not there. A variable changed through
`os.putenv` alone is invisible to both, as it is to `os.environ.get`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

SELECTING = ("ISOZYME_BACKEND", "ISOZYME_BOUNDSCHECK", "ISOZYME_LOOP_FUSION", "ISOZYME_CHECK_RACES")
"""The variables that choose a compiled derivative (`tests/test_dispatch.py` changes each between calls)."""


def _reader() -> Callable[[], tuple[object, ...]]:
    raw, encode = getattr(os.environ, "_data", None), getattr(os.environ, "encodekey", None)
    if not isinstance(raw, dict) or not callable(encode):
        return lambda: tuple([os.environ.get(name) for name in SELECTING])
    get = raw.get
    backend, boundscheck, fusion, races = (encode(name) for name in SELECTING)  # unrolled: 0.1 us, not 0.4
    return lambda: (get(backend), get(boundscheck), get(fusion), get(races))


selection: Callable[[], tuple[object, ...]] = _reader()
"""The raw values of the `SELECTING` variables now (None for an unset one)."""
