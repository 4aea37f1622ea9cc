"""The `python` code blocks of docs/*.md run: each page's blocks, in order, as one module written to a
temporary file (kernels need a source file) and imported. Blocks meant only to be read use another
language tag (`text`, `sh`, `py`)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
README = DOCS.parent / "README.md"
PAGES = [*sorted(DOCS.glob("*.md")), README]  # the README's examples run too
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def python_blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def test_the_docs_exist_and_have_code() -> None:
    names = {page.name for page in PAGES}
    assert {"language.md", "ad.md", "walkthrough.md", "comparison.md"} <= names
    assert all(python_blocks(DOCS / name) for name in ("language.md", "ad.md"))


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_code_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = "\n\n".join(python_blocks(page))
    path = tmp_path / f"doc_{page.stem}.py"
    path.write_text(source, encoding="utf-8")
    monkeypatch.chdir(Path(__file__).parent.parent)
    monkeypatch.setattr(sys, "path", list(sys.path))  # a page may import from examples/ ...
    before = set(sys.modules)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, path.stem, module)
    try:
        spec.loader.exec_module(module)
    finally:  # ... and leaves no example module behind, under a name other tests may use
        examples = str(DOCS.parent / "examples")
        for name in set(sys.modules) - before:
            if str(getattr(sys.modules[name], "__file__", "") or "").startswith(examples):
                del sys.modules[name]


def test_the_readme_is_a_front_door() -> None:
    """The README stays short (issue 61: at most 250 lines, the history in CHANGELOG.md), and its test command
    is the one `.ci/run` runs."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    ci = (DOCS.parent / ".ci" / "run").read_text(encoding="utf-8")
    command = next(line for line in text.splitlines() if line.startswith("python -m pip install -e '.[dev"))
    assert command in ci, f"README's test command {command!r} is not what .ci/run runs"
    assert "python -m pip install . && python -m isozyme bench --suite quick" in text


def test_comparison_cites_tests_that_exist() -> None:
    """Every `tests/<file>::<function>` that docs/comparison.md names is a test function of that file, and
    every corpus case it names is a kernel of tests/ad_kernels.py."""
    text = (DOCS / "comparison.md").read_text(encoding="utf-8")
    citations = set(re.findall(r"tests/(\w+\.py)::(\w+)", text))
    assert len(citations) >= 15
    tests = Path(__file__).parent
    for file, function in sorted(citations):
        assert f"def {function}(" in (tests / file).read_text(encoding="utf-8"), f"{file}::{function}"
    corpus = (tests / "ad_kernels.py").read_text(encoding="utf-8")
    for case in re.findall(r"corpus cases? ((?:`\w+`(?:, | and )?)+)", text):
        for name in re.findall(r"`(\w+)`", case):
            assert f"def {name}(" in corpus, name


# --- the reference pages of the site (mkdocs.yml) -------------------------------------------------------------

PACKAGE = DOCS.parent / "isozyme"
VARIABLE = re.compile(r"ISOZYME_[A-Z0-9_]*")


def listed_variables() -> set[str]:
    """The variables docs/environment.md lists: the first cell of each table row."""
    text = (DOCS / "environment.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `(ISOZYME_[A-Z0-9_]+)` \|", text, re.MULTILINE))


def test_every_environment_variable_the_package_names_is_listed() -> None:
    """Any `ISOZYME_*` name in the package's source (a read, a constant, a docstring) is on the page, and
    no name is built at run time (a bare `ISOZYME_` prefix), which this search could not see."""
    named: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in VARIABLE.findall(path.read_text(encoding="utf-8")):
            assert name != "ISOZYME_", f"{path}: a variable name built at run time"
            named.setdefault(name, str(path.relative_to(DOCS.parent)))
    missing = {name: where for name, where in named.items() if name not in listed_variables()}
    assert not missing, f"docs/environment.md does not list {missing}"


def test_every_listed_environment_variable_is_read() -> None:
    """A variable on the page is named in the package, the tests or the benchmarks: no stale entry."""
    sources = [p for folder in ("isozyme", "tests", "benchmarks") for p in (DOCS.parent / folder).rglob("*.py")]
    named = {name for path in sources for name in VARIABLE.findall(path.read_text(encoding="utf-8"))}
    assert listed_variables() - named == set()


def cli_sections() -> dict[str, str]:
    """docs/cli.md's text under each `## \\`isozyme VERB\\`` heading, by verb."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    parts = re.split(r"^## `isozyme (\w+)`\n", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_the_cli_page_documents_every_verb_option_and_choice() -> None:
    """docs/cli.md against the argument parser of `python -m isozyme`: one section per verb, and in each
    section's table every option string, positional argument and choice of the verb, and no other option."""
    import argparse

    from isozyme.__main__ import build_parser

    verbs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    sections = cli_sections()
    assert list(sections) == list(verbs)
    for verb, parser in verbs.items():
        section = sections[verb]
        rows = [line for line in section.splitlines() if line.startswith("| `")]
        first_cells = {name for row in rows for name in re.findall(r"`([^`]+)`", row.split(" | ")[0])}
        options = {s for a in parser._actions if a.option_strings and a.dest != "help" for s in a.option_strings}
        positionals = {a.metavar or a.dest for a in parser._actions if not a.option_strings}
        assert first_cells == options | positionals, verb
        for action in parser._actions:
            for choice in action.choices or ():
                assert f"`{choice}`" in section, f"isozyme {verb} {action.option_strings}: choice {choice}"


def test_the_api_page_names_everything_isozyme_exports() -> None:
    """Every name of `isozyme.__all__` is on docs/api/isozyme.md: rendered from its docstring (`::: isozyme.X`)
    or, for the types and math functions, named as `iz.X`."""
    import isozyme

    text = (DOCS / "api" / "isozyme.md").read_text(encoding="utf-8")
    rendered = set(re.findall(r"^::: isozyme\.(\w+)$", text, re.MULTILINE))
    named = set(re.findall(r"`iz\.(\w+)", text))
    assert set(isozyme.__all__) - rendered - named == set()
    assert rendered <= set(isozyme.__all__)
