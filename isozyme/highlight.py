"""ANSI syntax highlighting of printed IR for a terminal (`python -m isozyme ir`, `--color=auto|always|never`).

A scanner of regular expressions, one table per language, applied line by line: isozyme's SSA text form
and LLVM IR (`;` comments, `%values`, `label:` lines, an opcode after `=` or at the start of a
statement) and OpenCL C (`//` comments, C keywords and types). The text is unchanged apart from the
escape codes: `strip_ansi(highlight(t)) == t`.
"""

from __future__ import annotations

import re

RESET = "\x1b[0m"
STYLES = {
    "comment": "\x1b[2;37m",   # dim grey
    "label": "\x1b[1;33m",     # bold yellow
    "opcode": "\x1b[1;34m",    # bold blue
    "value": "\x1b[36m",       # cyan
    "type": "\x1b[32m",        # green
    "function": "\x1b[1;35m",  # bold magenta
    "number": "\x1b[35m",      # magenta
    "keyword": "\x1b[1m",      # bold
}
"""The style of each kind of token (SGR codes)."""

_TYPE = r"\b(?:i1|i8|i32|i64|f32|f64|double|float|void|ptr|label)\b(?:\[[?,]*\])?\**"
_SSA_TOKENS = [
    ("comment", r";.*$"),
    ("label", r"^[A-Za-z_$.][\w$.\-]*:(?=\s|$)"),
    ("function", r"@\"?[\w$.\-]+\"?"),
    ("value", r"%\"?[\w$.\-]+\"?"),
    ("opcode", r"(?:(?<==\s)|(?<=^\s\s))[a-z_]+(?:\.[a-z]+)?\b"),
    ("type", _TYPE),
    ("keyword", r"\b(?:func|define|declare|to|zeroed|growable|tape|true|false|internal|noalias)\b"),
    ("number", r"(?<![\w.%@])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?::[if]\d+)?\b"),
]
_C_TOKENS = [
    ("comment", r"//.*$"),
    ("keyword", r"#\w+.*$|\b(?:__kernel|__global|__local|restrict|if|else|for|while|do|return|break|continue|"
                r"goto|const|inline|static)\b"),
    ("type", r"\b(?:void|bool|char|int|uint|long|ulong|float|double|size_t)\b\**"),
    ("label", r"^\s*[A-Za-z_]\w*:(?!:)"),
    ("number", r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?[fFlLuU]*\b"),
]
_SCANNERS = {language: re.compile("|".join(f"(?P<{kind}>{pattern})" for kind, pattern in tokens), re.MULTILINE)
             for language, tokens in (("ssa", _SSA_TOKENS), ("c", _C_TOKENS))}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def highlight(text: str, language: str = "ssa") -> str:
    """`text` with ANSI colors: `language` "ssa" (also LLVM IR) or "c" (OpenCL C)."""
    scanner = _SCANNERS[language]
    return scanner.sub(lambda m: f"{STYLES[m.lastgroup]}{m.group()}{RESET}", text)  # type: ignore[index]


def strip_ansi(text: str) -> str:
    """`text` without ANSI escape codes."""
    return _ANSI.sub("", text)
