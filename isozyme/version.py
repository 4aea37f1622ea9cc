"""The version of isozyme, in one place: `pyproject.toml` reads it, and it is part of every cache key."""

VERSION = "0.1.0"
