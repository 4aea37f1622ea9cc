"""Compile errors that read like Python's `SyntaxError`: what is wrong, then file, line, column, the source
line and a caret under the construct.

`KernelSource` holds a kernel's source text as parsed (dedented) and maps AST positions back to the file's
absolute lines and columns, so every message points at the real file.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from isozyme.ssa.ir import SourceLoc


class CompileError(Exception):
    """A kernel the frontend cannot compile. Attributes: `msg`, `filename`, `lineno` (1-based),
    `column` (1-based), `text` (the source line)."""

    def __init__(self, msg: str, filename: str = "<unknown>", lineno: int = 0, column: int = 0, text: str = "",
                 width: int = 1) -> None:
        self.msg, self.filename, self.lineno, self.column, self.text = msg, filename, lineno, column, text
        self.width = max(1, width)
        super().__init__(self._render())

    def _render(self) -> str:
        if not self.lineno:
            return self.msg
        where = f'  File "{self.filename}", line {self.lineno}, column {self.column}'
        if not self.text.strip():
            return f"{self.msg}\n{where}"
        stripped = self.text.lstrip()
        indent = len(self.text) - len(stripped)
        caret_col = max(0, self.column - 1 - indent)
        width = max(1, min(self.width, len(stripped.rstrip()) - caret_col))
        return f"{self.msg}\n{where}\n    {stripped.rstrip()}\n    {' ' * caret_col}{'^' * width}"


@dataclass
class KernelSource:
    """A kernel function's source: its AST and the way back to the file's positions."""

    filename: str
    """The file the function was defined in."""
    first_line: int
    """Absolute line number of the first line of `text`."""
    indent: int
    """Columns removed by dedenting (a kernel defined inside a function or class)."""
    file_lines: list[str]
    """The function's source lines as they are in the file."""
    tree: ast.FunctionDef
    """The parsed `def`."""

    @classmethod
    def of(cls, function: Callable) -> KernelSource:
        """The source of `function`; a CompileError when Python cannot show it (e.g. defined in `exec`)."""
        try:
            lines, first_line = inspect.getsourcelines(function)
            filename = inspect.getsourcefile(function) or "<unknown>"
        except (OSError, TypeError) as error:
            raise CompileError(f"cannot read the source of kernel '{function.__name__}': {error} "
                               "(kernels must be defined in a file)") from None
        text = "".join(lines)
        dedented = textwrap.dedent(text)
        indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
        try:
            module = ast.parse(dedented)
        except RecursionError:  # CPython's own parser: its limit is on the nesting of the source
            raise CompileError(f"the source of kernel '{function.__name__}' nests too deeply for Python's "
                               "parser (an expression of thousands of terms?): split it into statements",
                               filename, first_line) from None
        tree = next((n for n in module.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None)
        if not isinstance(tree, ast.FunctionDef):
            raise CompileError(f"kernel '{function.__name__}' must be a plain 'def' function", filename, first_line)
        return cls(filename, first_line, indent, [line.rstrip("\n") for line in lines], tree)

    def line(self, node: ast.AST) -> int:
        return self.first_line + getattr(node, "lineno", 1) - 1

    def column(self, node: ast.AST) -> int:
        """1-based column in the file."""
        return getattr(node, "col_offset", 0) + self.indent + 1

    def loc(self, node: ast.AST) -> SourceLoc:
        return SourceLoc(self.filename, self.line(node), self.column(node) - 1)

    def text_of(self, node: ast.AST) -> str:
        index = getattr(node, "lineno", 1) - 1
        return self.file_lines[index] if 0 <= index < len(self.file_lines) else ""

    def source_text(self, node: ast.expr) -> str:
        """`node` as written in the file, its lines joined by spaces. Read from the lines, where
        `ast.unparse` recurses on the tree and fails on a long expression."""
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        lines = [line[self.indent:].encode() for line in self.file_lines[first:last + 1]]  # ast counts bytes
        if not lines:
            return ""
        lines[-1] = lines[-1][:node.end_col_offset]
        lines[0] = lines[0][node.col_offset:]
        return " ".join(line.decode().strip() for line in lines)

    def error(self, node: ast.AST, msg: str) -> CompileError:
        """A CompileError pointing at `node` (the caret spans the node on its first line)."""
        width = 1
        if getattr(node, "end_lineno", None) == getattr(node, "lineno", None):
            width = node.end_col_offset - node.col_offset  # type: ignore[attr-defined]
        return CompileError(msg, self.filename, self.line(node), self.column(node), self.text_of(node), width)
