"""The printer of the IR text form (DESIGN section 3).

Names are deterministic: a value or block whose name hint is free gets it (`%s.next`, `bb1`); a repeated
hint gets a suffix (`%i.1`); values without a hint are numbered (`%0`), blocks without one `bb<N>`. A
name that some later value holds as its exact hint is never handed out as a suffix or a number, so the
parser's output (whose hints are the printed names) prints back identically. Blocks with several
predecessors carry a `; preds` comment, which the parser drops.

Constants print as literals: `3` (i64), `2.5` (f64), `true` (i1); other types add a suffix: `3:i32`,
`2.5:f32`. Floats print their shortest round-tripping form, so the text is exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import numpy as np

from isozyme.ssa.cfg import predecessors
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Module, Phi, Value
from isozyme.ssa.ops import OP_INFO, Syntax
from isozyme.ssa.types import F64, I1, I64, VOID

PREDS_COMMENT_COLUMN = 39
_NAME_OK = re.compile(r"[^A-Za-z0-9_.]")


def sanitize_name(hint: str | None) -> str | None:
    """A hint made printable: characters outside `[A-Za-z0-9_.]` become `_`; empty hints are None."""
    if not hint:
        return None
    return _NAME_OK.sub("_", hint)


def _assign_names(items: list, hints: list[str | None], unnamed: Callable[[int], str]) -> dict:
    reserved = {h for h in hints if h}
    taken: set[str] = set()
    names = {}
    counter = 0
    suffixes: dict[str, int] = {}  # the suffix to try next per hint: thousands of values may share one
    for item, hint in zip(items, hints):
        if item in names:  # listed twice (invalid IR): one object, one name
            continue
        if hint and hint not in taken:
            name = hint
        elif hint:
            suffix = suffixes.get(hint, 1)
            while f"{hint}.{suffix}" in taken or f"{hint}.{suffix}" in reserved:
                suffix += 1
            suffixes[hint] = suffix + 1
            name = f"{hint}.{suffix}"
        else:
            while unnamed(counter) in taken or unnamed(counter) in reserved:
                counter += 1
            name = unnamed(counter)
        taken.add(name)
        names[item] = name
    return names


class Namer:
    """The printed names of one function's values and blocks."""

    def __init__(self, function: Function) -> None:
        values: list[Value] = list(function.args)
        values += [inst for inst in function.instructions() if not inst.type.is_void]
        self.values = _assign_names(values, [sanitize_name(v.name) for v in values], str)
        blocks = list(function.blocks)
        self.blocks = _assign_names(blocks, [sanitize_name(b.name) for b in blocks], lambda n: f"bb{n}")

    def block(self, block: Block) -> str:
        return self.blocks.get(block, f"<{block.name or 'detached block'}>")

    def value(self, value: Value) -> str:
        """`%name` for a local value, the literal for a constant."""
        if isinstance(value, Constant):
            return format_constant(value)
        if value in self.values:
            return f"%{self.values[value]}"
        # Not part of this function (invalid IR): still printable, never parseable.
        return f"%<foreign {sanitize_name(value.name) or type(value).__name__}>"


def format_float(value: float, bits: int = 64) -> str:
    """The shortest text that reads back as exactly `value` at the given precision."""
    return str(np.float32(value)) if bits == 32 else repr(float(value))


def format_constant(constant: Constant) -> str:
    ty, value = constant.type, constant.value
    if ty == I1:
        return "true" if value else "false"
    if ty.is_int:
        text = str(value)
    else:
        text = format_float(value, ty.bits)  # type: ignore[arg-type]
    default = I64 if ty.is_int else F64
    return text if ty == default else f"{text}:{ty}"


def _operand_list(namer: Namer, values: Iterable[Value]) -> str:
    return ", ".join(namer.value(v) for v in values)


def _indexed(namer: Namer, array: Value, indices: Iterable[Value]) -> str:
    return f"{namer.value(array)}[{_operand_list(namer, indices)}]"


def _print_operands(inst: Instruction, n: Namer) -> str:
    return f"{inst.op} {_operand_list(n, inst.operands)}".rstrip()


def _print_cast(inst: Instruction, n: Namer) -> str:
    return f"{inst.op} {n.value(inst.operands[0])} to {inst.type}"


def _print_load(inst: Instruction, n: Namer) -> str:
    return f"load {_indexed(n, inst.operands[0], inst.operands[1:])}"


def _print_store(inst: Instruction, n: Namer) -> str:
    return f"{inst.op} {n.value(inst.operands[0])}, {_indexed(n, inst.operands[1], inst.operands[2:])}"


def _print_dim(inst: Instruction, n: Namer) -> str:
    return f"dim {n.value(inst.operands[0])}, {inst.attrs.get('axis')}"


def _print_alloc(inst: Instruction, n: Namer) -> str:
    element = inst.type.element if inst.type.is_array else inst.type  # type: ignore[attr-defined]
    return f"alloc {element}[{_operand_list(n, inst.operands)}]"


def _print_view(inst: Instruction, n: Namer) -> str:
    *extents, arena, offset = inst.operands
    return f"view {inst.type.element}[{_operand_list(n, extents)}] {n.value(arena)}, {n.value(offset)}"  # type: ignore[attr-defined]


def _print_call(inst: Instruction, n: Namer) -> str:
    callee = inst.attrs.get("callee")
    name = callee.name if isinstance(callee, Function) else "<no callee>"
    return f"call @{name}({_operand_list(n, inst.operands)})"


def _print_assert(inst: Instruction, n: Namer) -> str:
    message = inst.attrs.get("message") or ""
    error = inst.attrs.get("error")
    text = f"assert {n.value(inst.operands[0])}" if inst.operands else "assert"
    if error is not None:
        return f"{text}, {quote(message)}, {error}"
    return f"{text}, {quote(message)}" if message else text


def _print_phi(inst: Instruction, n: Namer) -> str:
    assert isinstance(inst, Phi)
    incoming = ", ".join(f"{n.block(b)}: {n.value(v)}" for b, v in inst.incoming)
    return f"phi {inst.type} [{incoming}]"


def _print_br(inst: Instruction, n: Namer) -> str:
    return f"br {', '.join(n.block(b) for b in inst.successors)}"


def _print_cbr(inst: Instruction, n: Namer) -> str:
    parts = [n.value(v) for v in inst.operands] + [n.block(b) for b in inst.successors]
    return f"cbr {', '.join(parts)}"


def _print_ret(inst: Instruction, n: Namer) -> str:
    return f"ret {n.value(inst.operands[0])}" if inst.operands else "ret"


PRINTERS: dict[Syntax, Callable[[Instruction, Namer], str]] = {
    Syntax.OPERANDS: _print_operands,
    Syntax.CAST: _print_cast,
    Syntax.LOAD: _print_load,
    Syntax.STORE: _print_store,
    Syntax.DIM: _print_dim,
    Syntax.ALLOC: _print_alloc,
    Syntax.VIEW: _print_view,
    Syntax.GROW: _print_operands,
    Syntax.CALL: _print_call,
    Syntax.ASSERT: _print_assert,
    Syntax.PHI: _print_phi,
    Syntax.BR: _print_br,
    Syntax.CBR: _print_cbr,
    Syntax.RET: _print_ret,
}


def quote(text: str) -> str:
    """A string literal of the text form (double quotes, backslash escapes)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def print_instruction(inst: Instruction, namer: Namer) -> str:
    """One instruction without indentation: `%r = op ...` plus its flags."""
    text = PRINTERS[OP_INFO[inst.op].syntax](inst, namer)
    if inst.flags:
        text += " " + " ".join(sorted(inst.flags))
    if inst.type.is_void:
        return text
    return f"{namer.value(inst)} = {text}"


def _block_label(block: Block, namer: Namer, preds: list[Block]) -> str:
    label = f"{namer.block(block)}:"
    if len(preds) < 2:
        return label
    comment = "; preds " + " ".join(namer.block(p) for p in preds)
    return f"{label.ljust(PREDS_COMMENT_COLUMN - 1)} {comment}"


def _signature(function: Function, namer: Namer) -> str:
    params = ", ".join(f"{namer.value(a)}: {a.type}" for a in function.args)
    text = f"func @{function.name}({params})"
    if function.return_type != VOID:
        text += f" -> {function.return_type}"
    if function.flags:
        text += " " + " ".join(sorted(function.flags))
    return text


def print_function(function: Function) -> str:
    """The text form of `function`, ending with `}` (no trailing newline)."""
    namer = Namer(function)
    preds = predecessors(function)
    lines = [_signature(function, namer) + " {"]
    for block in function.blocks:
        lines.append(_block_label(block, namer, preds.get(block, [])))
        lines.extend("  " + print_instruction(inst, namer) for inst in block.instructions)
    lines.append("}")
    return "\n".join(lines)


def print_module(module: Module) -> str:
    """Every function of `module`, separated by blank lines, ending with a newline."""
    return "\n\n".join(print_function(f) for f in module) + "\n"
