"""The parser of the IR text form (DESIGN section 3): `parse_module(text)` and `parse_function(text)`.

It reads what `printer.py` writes and keeps names as hints, so `print(parse(print(f))) == print(f)`.
Comments (`;` to the end of the line) are dropped. Parsing is in three steps: every function signature
first (so calls may name functions defined later), then each body into statements, then the statements
into IR. Result types are derived with the op table before any instruction is built, so a value may be
used above its definition in the text (in a block that comes later in layout but dominates the use).

The parser checks syntax and names only (undefined values, labels or callees, duplicate definitions).
Whether the IR is valid, dominance and operand types included, is the verifier's business, so invalid
IR can be written down in tests.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Module, Phi, SourceLoc, Value
from isozyme.ssa.ops import OP_INFO, Op, Syntax, result_type
from isozyme.ssa.types import F64, I1, I64, SCALAR_TYPES, VOID, ArrayType, ScalarType, Type


class ParseError(Exception):
    """Malformed IR text; the message reads `file:line:col: error: ...` with the line and a caret."""

    def __init__(self, message: str, loc: SourceLoc, source_line: str = "") -> None:
        self.message = message
        self.loc = loc
        text = f"{loc}: error: {message}"
        if source_line:
            text += f"\n  {source_line}\n  {' ' * loc.col}^"
        super().__init__(text)


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>;.*)
  | (?P<local>%[A-Za-z0-9_.]+)
  | (?P<symbol>@[A-Za-z0-9_.]+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<arrow>->)
  | (?P<number>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|inf\b|nan\b))
  | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[()\[\]{},:=?])
""", re.VERBOSE)


@dataclass
class Token:
    kind: str
    """local, symbol, string, arrow, number, word or punct."""
    text: str
    col: int
    """0-based column in its line."""


@dataclass
class Line:
    tokens: list[Token]
    number: int
    """1-based line number."""
    source: str


def tokenize(text: str, filename: str = "<ir>") -> list[Line]:
    """Non-empty lines of tokens, comments dropped."""
    lines = []
    for number, source in enumerate(text.splitlines(), start=1):
        tokens, pos = [], 0
        while pos < len(source):
            match = _TOKEN.match(source, pos)
            if match is None:
                raise ParseError(f"unexpected character {source[pos]!r}", SourceLoc(filename, number, pos), source)
            kind = match.lastgroup
            if kind not in ("space", "comment"):
                tokens.append(Token(kind, match.group(), pos))  # type: ignore[arg-type]
            pos = match.end()
        if tokens:
            lines.append(Line(tokens, number, source))
    return lines


@dataclass
class ConstRef:
    """A literal operand."""

    constant: Constant


@dataclass
class NameRef:
    """A `%name` operand."""

    name: str
    token: Token


Ref = ConstRef | NameRef


@dataclass
class Statement:
    """One parsed instruction line, before names are resolved."""

    op: Op
    line: Line
    result: str | None = None
    operands: list[Ref] = field(default_factory=list)
    labels: list[Token] = field(default_factory=list)
    """Successor labels, or a phi's incoming labels (parallel to operands)."""
    explicit_type: Type | None = None
    attrs: dict[str, object] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    block: Block | None = None


class _LineReader:
    """Reads the tokens of one line left to right."""

    def __init__(self, line: Line, filename: str) -> None:
        self.line, self.filename, self.pos = line, filename, 0

    def error(self, message: str, token: Token | None = None) -> ParseError:
        if token is None:
            token = self.peek()
        col = token.col if token is not None else len(self.line.source.rstrip())
        return ParseError(message, SourceLoc(self.filename, self.line.number, col), self.line.source)

    def peek(self, offset: int = 0) -> Token | None:
        index = self.pos + offset
        return self.line.tokens[index] if index < len(self.line.tokens) else None

    def at(self, text: str) -> bool:
        token = self.peek()
        return token is not None and token.text == text

    def next(self, what: str = "a token") -> Token:
        token = self.peek()
        if token is None:
            raise self.error(f"expected {what} at the end of the line")
        self.pos += 1
        return token

    def expect(self, text: str) -> Token:
        token = self.next(f"'{text}'")
        if token.text != text:
            raise self.error(f"expected '{text}', found '{token.text}'", token)
        return token

    def expect_kind(self, kind: str, what: str) -> Token:
        token = self.next(what)
        if token.kind != kind:
            raise self.error(f"expected {what}, found '{token.text}'", token)
        return token

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.pos += 1
            return True
        return False

    def done(self) -> bool:
        return self.pos >= len(self.line.tokens)

    def loc(self, token: Token | None = None) -> SourceLoc:
        col = token.col if token is not None else 0
        return SourceLoc(self.filename, self.line.number, col)

    # --- types and operands -------------------------------------------------------------------------------

    def scalar_type(self) -> ScalarType:
        token = self.expect_kind("word", "a type")
        if token.text not in SCALAR_TYPES:
            raise self.error(f"unknown type '{token.text}'", token)
        return SCALAR_TYPES[token.text]

    def type(self) -> Type:
        element = self.scalar_type()
        following = self.peek(1)
        if not (self.at("[") and following is not None and following.text == "?"):
            return element  # `phi i64 [bb0: ...]`: the bracket opens the incoming list
        self.expect("[")
        rank = 1
        self.expect("?")
        while self.accept(","):
            self.expect("?")
            rank += 1
        self.expect("]")
        return ArrayType(element, rank)

    def operand(self) -> Ref:
        token = self.next("an operand")
        if token.kind == "local":
            return NameRef(token.text[1:], token)
        if token.kind == "number" or token.text in ("true", "false"):
            return ConstRef(self._literal(token))
        raise self.error(f"expected an operand, found '{token.text}'", token)

    def _literal(self, token: Token) -> Constant:
        text = token.text
        if text in ("true", "false"):
            ty, value = I1, text == "true"
        elif re.fullmatch(r"-?\d+", text):
            ty, value = I64, int(text)
        else:
            ty, value = F64, float(text)
        if self.accept(":"):
            ty = self.scalar_type()
            if isinstance(value, float) and not ty.is_float:
                raise self.error(f"float literal {text} cannot have type {ty}", token)
        return Constant(ty, value, loc=self.loc(token))

    def operand_list(self, close: str) -> list[Ref]:
        refs: list[Ref] = []
        if self.accept(close):
            return refs
        refs.append(self.operand())
        while self.accept(","):
            refs.append(self.operand())
        self.expect(close)
        return refs


# --- statements, one reader per syntax --------------------------------------------------------------------

def _starts_operand(token: Token | None) -> bool:
    return token is not None and (token.kind in ("local", "number") or token.text in ("true", "false"))


def _read_operands(r: _LineReader, s: Statement) -> None:
    if not _starts_operand(r.peek()):
        return
    s.operands.append(r.operand())
    while r.accept(","):
        s.operands.append(r.operand())


def _read_cast(r: _LineReader, s: Statement) -> None:
    s.operands.append(r.operand())
    r.expect("to")
    s.explicit_type = r.scalar_type()


def _read_indexed(r: _LineReader, s: Statement) -> None:
    array = r.expect_kind("local", "an array value")
    s.operands.append(NameRef(array.text[1:], array))
    r.expect("[")
    s.operands.extend(r.operand_list("]"))


def _read_store(r: _LineReader, s: Statement) -> None:
    s.operands.append(r.operand())
    r.expect(",")
    _read_indexed(r, s)


def _read_dim(r: _LineReader, s: Statement) -> None:
    s.operands.append(r.operand())
    r.expect(",")
    axis = r.expect_kind("number", "an axis number")
    s.attrs["axis"] = int(axis.text)


def _read_alloc(r: _LineReader, s: Statement) -> None:
    element = r.scalar_type()
    r.expect("[")
    s.operands.extend(r.operand_list("]"))
    s.explicit_type = ArrayType(element, max(len(s.operands), 1))


def _read_view(r: _LineReader, s: Statement) -> None:
    _read_alloc(r, s)
    s.operands.append(r.operand())
    r.expect(",")
    s.operands.append(r.operand())


def _read_grow(r: _LineReader, s: Statement) -> None:
    s.operands.append(r.operand())
    r.expect(",")
    s.operands.append(r.operand())


def _read_call(r: _LineReader, s: Statement) -> None:
    s.attrs["callee"] = r.expect_kind("symbol", "a callee @name")
    r.expect("(")
    s.operands.extend(r.operand_list(")"))


def _read_assert(r: _LineReader, s: Statement) -> None:
    s.operands.append(r.operand())
    s.attrs["message"] = ""
    if r.accept(","):
        s.attrs["message"] = ast.literal_eval(r.expect_kind("string", "a message string").text)
        if r.accept(","):
            s.attrs["error"] = r.expect_kind("word", "the name of an exception").text


def _read_phi(r: _LineReader, s: Statement) -> None:
    s.explicit_type = r.type()
    r.expect("[")
    if r.accept("]"):
        return
    while True:
        s.labels.append(r.expect_kind("word", "a block label"))
        r.expect(":")
        s.operands.append(r.operand())
        if not r.accept(","):
            break
    r.expect("]")


def _read_br(r: _LineReader, s: Statement) -> None:
    s.labels.append(r.expect_kind("word", "a block label"))


def _read_cbr(r: _LineReader, s: Statement) -> None:
    s.operands.append(r.operand())
    for _ in range(2):
        r.expect(",")
        s.labels.append(r.expect_kind("word", "a block label"))


def _read_ret(r: _LineReader, s: Statement) -> None:
    if _starts_operand(r.peek()):
        s.operands.append(r.operand())


READERS = {
    Syntax.OPERANDS: _read_operands,
    Syntax.CAST: _read_cast,
    Syntax.LOAD: _read_indexed,
    Syntax.STORE: _read_store,
    Syntax.DIM: _read_dim,
    Syntax.ALLOC: _read_alloc,
    Syntax.VIEW: _read_view,
    Syntax.GROW: _read_grow,
    Syntax.CALL: _read_call,
    Syntax.ASSERT: _read_assert,
    Syntax.PHI: _read_phi,
    Syntax.BR: _read_br,
    Syntax.CBR: _read_cbr,
    Syntax.RET: _read_ret,
}


def _read_statement(r: _LineReader) -> Statement:
    result = None
    if r.peek().kind == "local":  # type: ignore[union-attr]
        result = r.next().text[1:]
        r.expect("=")
    mnemonic = r.expect_kind("word", "an op")
    try:
        op = Op(mnemonic.text)
    except ValueError:
        raise r.error(f"unknown op '{mnemonic.text}'", mnemonic) from None
    statement = Statement(op, r.line, result)
    READERS[OP_INFO[op].syntax](r, statement)
    while not r.done():
        statement.flags.add(r.expect_kind("word", "a flag or the end of the line").text)
    return statement


# --- functions and modules --------------------------------------------------------------------------------

class _FunctionParser:
    """Turns the lines of one function body into IR."""

    def __init__(self, function: Function, lines: list[Line], module: Module, filename: str) -> None:
        self.function, self.lines, self.module, self.filename = function, lines, module, filename
        self.statements: list[Statement] = []
        self.blocks: dict[str, Block] = {}
        self.definitions: dict[str, Statement] = {}
        self.types: dict[str, Type] = {arg.name: arg.type for arg in function.args}  # type: ignore[misc]
        self.values: dict[str, Value] = {arg.name: arg for arg in function.args}  # type: ignore[misc]
        self._resolving: set[str] = set()

    def reader(self, line: Line) -> _LineReader:
        return _LineReader(line, self.filename)

    def parse(self) -> None:
        self._read_lines()
        for statement in self.statements:
            if statement.result is not None:
                self._resolve_type(statement.result, None)
        self._build()

    def _read_lines(self) -> None:
        block = None
        for line in self.lines:
            r = self.reader(line)
            first = line.tokens[0]
            if first.kind == "word" and len(line.tokens) == 2 and line.tokens[1].text == ":":
                if first.text in self.blocks:
                    raise r.error(f"block {first.text} is defined twice", first)
                block = self.blocks[first.text] = self.function.add_block(first.text)
                continue
            if block is None:
                raise r.error("instruction before the first block label", first)
            statement = _read_statement(r)
            statement.block = block
            self._define(statement, r)
            self.statements.append(statement)

    def _define(self, statement: Statement, r: _LineReader) -> None:
        name = statement.result
        if name is None:
            return
        if name in self.definitions or name in self.values:
            raise r.error(f"%{name} is defined twice", statement.line.tokens[0])
        self.definitions[name] = statement

    def _resolve_type(self, name: str, user: Statement | None, token: Token | None = None) -> Type:
        """The type of `%name`, deriving it (recursively) from its definition's operands."""
        if name in self.types:
            return self.types[name]
        statement = self.definitions.get(name)
        if statement is None:
            line = user.line if user is not None else self.lines[0]
            raise self.reader(line).error(f"use of undefined value %{name}", token)
        if name in self._resolving:
            raise self.reader(statement.line).error(f"%{name} is defined in terms of itself",
                                                    statement.line.tokens[0])
        if statement.explicit_type is not None:  # phi, cast, alloc: no need to look at the operands
            ty: Type | None = statement.explicit_type
        elif statement.op is Op.CALL:
            ty = self._callee(statement).return_type
        else:
            self._resolving.add(name)
            operand_types = [self._ref_type(ref, statement) for ref in statement.operands]
            self._resolving.discard(name)
            ty = result_type(statement.op, operand_types)
        if ty is None or ty.is_void:
            raise self.reader(statement.line).error(
                f"cannot derive a result type for {statement.op} from its operands", statement.line.tokens[0])
        self.types[name] = ty
        return ty

    def _ref_type(self, ref: Ref, user: Statement) -> Type:
        if isinstance(ref, ConstRef):
            return ref.constant.type
        return self._resolve_type(ref.name, user, ref.token)

    def _callee(self, statement: Statement) -> Function:
        token = statement.attrs["callee"]
        assert isinstance(token, Token)
        name = token.text[1:]
        if name not in self.module:
            raise self.reader(statement.line).error(f"call of undefined function @{name}", token)
        return self.module[name]

    def _label(self, token: Token, statement: Statement) -> Block:
        if token.text not in self.blocks:
            raise self.reader(statement.line).error(f"branch to undefined block {token.text}", token)
        return self.blocks[token.text]

    def _build(self) -> None:
        placeholders: dict[str, Value] = {}
        for statement in self.statements:
            inst = self._instruction(statement, placeholders)
            statement.block.append(inst)  # type: ignore[union-attr]
            if statement.result is not None:
                self.values[statement.result] = inst
        for name, placeholder in placeholders.items():
            placeholder.replace_all_uses_with(self.values[name])

    def _operand(self, ref: Ref, placeholders: dict[str, Value]) -> Value:
        if isinstance(ref, ConstRef):
            return ref.constant
        if ref.name in self.values:
            return self.values[ref.name]
        if ref.name not in placeholders:
            placeholders[ref.name] = Value(self.types[ref.name])
        return placeholders[ref.name]

    def _instruction(self, s: Statement, placeholders: dict[str, Value]) -> Instruction:
        for ref in s.operands:
            if isinstance(ref, NameRef):
                self._resolve_type(ref.name, s, ref.token)
        operands = tuple(self._operand(ref, placeholders) for ref in s.operands)
        ty = self.types[s.result] if s.result is not None else VOID
        loc = SourceLoc(self.filename, s.line.number, s.line.tokens[0].col)
        attrs = dict(s.attrs)
        if s.op is Op.CALL:
            attrs["callee"] = self._callee(s)
        labels = tuple(self._label(token, s) for token in s.labels)
        if s.op is Op.PHI:
            return Phi(ty, name=s.result, loc=loc, operands=operands, blocks=labels, flags=set(s.flags))
        return Instruction(ty, name=s.result, loc=loc, op=s.op, operands=operands, successors=labels,
                           attrs=attrs, flags=set(s.flags))


def _read_signature(r: _LineReader) -> Function:
    r.expect("func")
    name = r.expect_kind("symbol", "a function name @name").text[1:]
    r.expect("(")
    args: list[Argument] = []
    if not r.accept(")"):
        while True:
            token = r.expect_kind("local", "a parameter %name")
            r.expect(":")
            args.append(Argument(r.type(), name=token.text[1:], loc=r.loc(token)))
            if not r.accept(","):
                break
        r.expect(")")
    return_type: Type = VOID
    if r.accept("->"):
        return_type = r.type()
    flags = set()
    while not r.at("{"):
        flags.add(r.expect_kind("word", "'{' or a function attribute").text)
    r.expect("{")
    if not r.done():
        raise r.error("expected the end of the line after '{'")
    names = [a.name for a in args]
    for arg in args:
        if names.count(arg.name) > 1:
            raise r.error(f"parameter %{arg.name} is defined twice")
    return Function(name, args, return_type, flags=flags, loc=r.loc())


def _split_functions(lines: list[Line], filename: str) -> list[tuple[Line, list[Line]]]:
    """(signature line, body lines) for each function."""
    functions = []
    index = 0
    while index < len(lines):
        header = lines[index]
        if header.tokens[0].text != "func":
            raise _LineReader(header, filename).error("expected 'func'", header.tokens[0])
        end = index + 1
        while end < len(lines) and [t.text for t in lines[end].tokens] != ["}"]:
            if lines[end].tokens[0].text == "func":
                raise _LineReader(lines[end], filename).error("missing '}' before this function")
            end += 1
        if end == len(lines):
            raise _LineReader(header, filename).error("function has no closing '}'", header.tokens[0])
        functions.append((header, lines[index + 1:end]))
        index = end + 1
    return functions


def parse_module(text: str, filename: str = "<ir>") -> Module:
    """Parse a module: functions separated by blank lines, in the text form of DESIGN section 3."""
    module = Module()
    bodies = []
    for header, body in _split_functions(tokenize(text, filename), filename):
        r = _LineReader(header, filename)
        function = _read_signature(r)
        if function.name in module:
            raise r.error(f"function @{function.name} is defined twice", header.tokens[1])
        module.add(function)
        bodies.append((function, body))
    for function, body in bodies:
        _FunctionParser(function, body, module, filename).parse()
    return module


def parse_function(text: str, filename: str = "<ir>") -> Function:
    """Parse text holding exactly one function."""
    module = parse_module(text, filename)
    if len(module.functions) != 1:
        raise ValueError(f"expected one function, found {len(module.functions)}")
    return next(iter(module))
