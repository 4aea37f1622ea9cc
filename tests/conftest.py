"""Test-session setup: compiled code goes to a fresh disk cache, never to the user's `~/.cache/isozyme`.

Tests that study the cache itself point `ISOZYME_CACHE_DIR` at their own directories."""

from __future__ import annotations

import os
import tempfile


def pytest_configure(config: object) -> None:
    os.environ["ISOZYME_CACHE_DIR"] = tempfile.mkdtemp(prefix="isozyme-test-cache-")
