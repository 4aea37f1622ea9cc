"""The shape of the package stays as it is made: no module over 600 lines, and each package's `__init__`
docstring lists its modules in the same layers as its `lint-imports` contract in `pyproject.toml` (which
`.ci/run` checks against the imports themselves)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "isozyme"
MAX_LINES = 600
PACKAGES = ("ssa", "frontend", "optimize", "enzyme_ad", "codegen", "runtime")


def contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["containers"][0]: c for c in config["tool"]["importlinter"]["contracts"] if "containers" in c}


def docstring_layers(package: str) -> list[set[str]]:
    """The layers an `__init__` docstring lists: a line "- `module`: what it holds" starts a layer, and
    each line "  `module`: ..." under it adds one module to that layer."""
    text = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text(encoding="utf-8"))) or ""
    layers: list[set[str]] = []
    for line in text.splitlines():
        entry = re.match(r"(- |  )`(\w+)`:", line)
        if entry and (entry[1] == "- " or layers):
            if entry[1] == "- ":
                layers.append(set())
            layers[-1].add(entry[2])
    return layers


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_600_lines(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_has_a_layers_contract_listing_every_module(package: str) -> None:
    contract = contracts()[f"isozyme.{package}"]
    assert contract["type"] == "layers" and contract["exhaustive"] is True
    listed = [name.strip() for layer in contract["layers"] for name in layer.split("|")]
    modules = sorted(p.stem for p in (PACKAGE / package).glob("*.py") if p.stem != "__init__")
    assert sorted(listed) == modules
    assert not any(":" in layer for layer in contract["layers"]), "siblings in a layer are independent"


@pytest.mark.parametrize("package", PACKAGES)
def test_the_init_docstring_states_the_contract_layers(package: str) -> None:
    contract = contracts()[f"isozyme.{package}"]
    expected = [{name.strip() for name in layer.split("|")} for layer in contract["layers"]]
    assert docstring_layers(package) == expected
