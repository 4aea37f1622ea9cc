"""The version of isozyme, in one place: `pyproject.toml` reads it, `isozyme.__version__` is it, and it is
part of every cache key (`host_identity.py`). It lives in the runtime, the lowest package that needs it, so
that no package imports the top-level modules above it; it imports nothing.
"""

VERSION = "0.1.0"
