"""Split a model file into its ``MODEL ( ... );`` header and its query, and parse the header.

The header uses SQLMesh's syntax: ``key value`` pairs separated by commas, where a value is a literal,
a (dotted) name, a ``[list]``, a ``(tuple)``, a call such as ``INCREMENTAL_BY_TIME_RANGE (...)`` or
``not_null(columns := [id])``, or ``key = value`` / ``key := value`` pairs inside parentheses.
Tokens come from sqlglot's tokenizer so every value keeps its line number and its exact source text.

>>> props = parse_header("MODEL (name a.b, kind FULL, tags [x, y])", "m.sql").properties
>>> [(p.key, type(p.value).__name__) for p in props]
[('name', 'Name'), ('kind', 'Name'), ('tags', 'Items')]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Union

from sqlglot.dialects import Dialect
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from incremental_assets.errors import ModelFileError
from incremental_assets.load.sql_text import QUOTES, parentheses, skip_space_and_comments
from incremental_assets.load.text import read_utf8  # noqa: F401  (model files are read through it)


@dataclass(frozen=True)
class Literal:
    """A string, number, boolean or NULL."""

    value: object
    line: int
    text: str


@dataclass(frozen=True)
class Name:
    """An identifier or dotted name, e.g. ``sushi.orders`` or ``FULL``."""

    value: str
    line: int
    text: str


@dataclass(frozen=True)
class Items:
    """``[a, b]`` (brackets) or ``(a, b)`` (parentheses)."""

    items: tuple["Value", ...]
    bracket: str
    line: int
    text: str


@dataclass(frozen=True)
class Call:
    """``NAME ( ... )``, e.g. a kind with properties or an audit with arguments."""

    name: str
    args: tuple["Value", ...]
    line: int
    text: str


@dataclass(frozen=True)
class Pair:
    """``key = value`` or ``key := value``."""

    key: str
    value: "Value"
    line: int
    text: str


@dataclass(frozen=True)
class Seq:
    """Several values side by side, e.g. ``id INT`` in a column list."""

    values: tuple["Value", ...]
    line: int
    text: str


Value = Union[Literal, Name, Items, Call, Pair, Seq]


@dataclass(frozen=True)
class Property:
    key: str
    value: Value
    line: int


@dataclass(frozen=True)
class Header:
    properties: tuple[Property, ...]
    line: int


@dataclass(frozen=True)
class SplitFile:
    header_text: str
    header_line: int
    query_text: str
    query_line: int
    query_offset: int


def _line_at(text: str, i: int) -> int:
    return text.count("\n", 0, i) + 1


def split_model_file(text: str, path: str | Path) -> SplitFile:
    """Find the ``MODEL (...)`` block at the top of the file and the query after it."""
    i = skip_space_and_comments(text, 0)
    if not text[i : i + 5].upper() == "MODEL" or (i + 5 < len(text) and (text[i + 5].isalnum() or text[i + 5] == "_")):
        raise ModelFileError(
            path,
            _line_at(text, i),
            "the file does not start with a MODEL ( ... ); header",
            hint="begin the file with MODEL (name schema.table, kind FULL); then the query",
        )
    start = i
    i = skip_space_and_comments(text, i + 5)
    if i >= len(text) or text[i] != "(":
        raise ModelFileError(path, _line_at(text, i), "expected '(' after MODEL", hint="write MODEL ( ... );")
    depth = 0
    for at, ch in parentheses(text, i):
        if ch in QUOTES:
            raise ModelFileError(path, _line_at(text, at), f"unterminated quote {ch} in the MODEL header")
        depth += 1 if ch == "(" else -1
        if depth == 0:
            i = at + 1
            break
    else:
        raise ModelFileError(
            path,
            _line_at(text, start),
            "the MODEL header is not closed",
            hint="balance the parentheses of MODEL ( ... );",
        )
    header_text = text[start:i]
    n = len(text)
    j = skip_space_and_comments(text, i)
    if j < n and text[j] == ";":
        j += 1
    elif j < n:  # a header alone (a SEED model) may omit its ';'
        raise ModelFileError(
            path, _line_at(text, i), "the MODEL header must end with ';'", hint="add ';' after the closing parenthesis"
        )
    return SplitFile(header_text, _line_at(text, start), text[j:], _line_at(text, j), j)


# A hand-written model is a few kilobytes; parsing and analysing a 10 MB one takes a minute and gigabytes.
MAX_MODEL_FILE_BYTES = 1_000_000


def check_file_size(path: Path) -> None:
    """Refuse a project file over :data:`MAX_MODEL_FILE_BYTES` before reading it."""
    try:
        size = path.stat().st_size
    except OSError:
        return  # reading it reports the problem
    if size > MAX_MODEL_FILE_BYTES:
        raise ModelFileError(
            path,
            None,
            f"the file is {size:,} bytes; a model or audit file may be at most {MAX_MODEL_FILE_BYTES:,}",
            hint="keep data in a source or SEED table, not in the SQL; split a generated query into several models",
        )


MAX_HEADER_DEPTH = 32  # brackets in a header nest two or three deep; the parser recurses once per level


class _Parser:
    def __init__(self, tokens: list[Token], source: str, path: str | Path, line_offset: int):
        self.tokens = tokens
        self.source = source
        self.path = path
        self.offset = line_offset
        self.i = 0
        self.depth = 0

    def error(self, message: str, token: Token | None = None, hint: str | None = None) -> ModelFileError:
        tok = token or (self.tokens[self.i] if self.i < len(self.tokens) else self.tokens[-1])
        return ModelFileError(self.path, tok.line + self.offset, message, hint=hint)

    def peek(self) -> Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> Token:
        tok = self.peek()
        if tok is None:
            raise self.error("the MODEL header ends too early")
        self.i += 1
        return tok

    def span(self, first: Token, last: Token) -> str:
        return self.source[first.start : last.end + 1]

    def line(self, tok: Token) -> int:
        return tok.line + self.offset

    def expect(self, kind: TokenType, what: str) -> Token:
        tok = self.take()
        if tok.token_type != kind:
            raise self.error(f"expected {what}, found '{tok.text}'", tok)
        return tok

    def sequence(self, close: TokenType) -> tuple[Value, ...]:
        self.depth += 1
        if self.depth > MAX_HEADER_DEPTH:
            raise self.error(
                f"brackets nest more than {MAX_HEADER_DEPTH} deep in the MODEL header",
                self.tokens[self.i - 1],
                hint="a property value is a name, a literal, a list or a call with arguments",
            )
        try:
            return self._sequence(close)
        finally:
            self.depth -= 1

    def _sequence(self, close: TokenType) -> tuple[Value, ...]:
        items: list[Value] = []
        while True:
            tok = self.peek()
            if tok is None:
                raise self.error("unclosed bracket in the MODEL header")
            if tok.token_type == close:
                self.take()
                return tuple(items)
            items.append(self.item(close))
            tok = self.peek()
            if tok is not None and tok.token_type == TokenType.COMMA:
                self.take()

    def item(self, close: TokenType) -> Value:
        first = self.peek()
        assert first is not None
        values: list[Value] = []
        while True:
            tok = self.peek()
            if tok is None or tok.token_type in (TokenType.COMMA, close):
                break
            if tok.token_type in (TokenType.EQ, TokenType.COLON_EQ) and values and isinstance(key := values[-1], Name):
                self.take()
                values.pop()
                value = self.item(close)
                values.append(Pair(key.value, value, key.line, self.span(first, self.tokens[self.i - 1])))
                continue
            values.append(self.value())
        if not values:
            raise self.error("empty value in the MODEL header", first)
        if len(values) == 1:
            return values[0]
        return Seq(tuple(values), self.line(first), self.span(first, self.tokens[self.i - 1]))

    def value(self) -> Value:
        tok = self.take()
        tt = tok.token_type
        if tt == TokenType.L_BRACKET:
            items = self.sequence(TokenType.R_BRACKET)
            return Items(items, "[", self.line(tok), self.span(tok, self.tokens[self.i - 1]))
        if tt == TokenType.L_PAREN:
            items = self.sequence(TokenType.R_PAREN)
            return Items(items, "(", self.line(tok), self.span(tok, self.tokens[self.i - 1]))
        if tt == TokenType.STRING:
            return Literal(tok.text, self.line(tok), self.span(tok, tok))
        if tt == TokenType.NUMBER:
            number: object = float(tok.text) if any(c in tok.text for c in ".eE") else int(tok.text)
            return Literal(number, self.line(tok), tok.text)
        if tt in (TokenType.TRUE, TokenType.FALSE):
            return Literal(tt == TokenType.TRUE, self.line(tok), tok.text)
        if tt == TokenType.NULL:
            return Literal(None, self.line(tok), tok.text)
        if tt == TokenType.DASH:
            digits = self.take()
            if digits.token_type != TokenType.NUMBER:
                raise self.error(f"unexpected '-' before '{digits.text}'", tok)
            number = -(float(digits.text) if "." in digits.text else int(digits.text))
            return Literal(number, self.line(tok), self.span(tok, digits))
        if tt in (TokenType.COMMA, TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.SEMICOLON):
            raise self.error(f"unexpected '{tok.text}' in the MODEL header", tok)
        # Identifiers, keywords used as names (FULL, VIEW, INT ...), dotted names, calls.
        parts = [tok.text]
        last = tok
        while (nxt := self.peek()) is not None and nxt.token_type == TokenType.DOT:
            self.take()
            last = self.take()
            parts.append(last.text)
        name = ".".join(parts)
        nxt = self.peek()
        if (
            nxt is not None
            and nxt.token_type == TokenType.L_PAREN
            and nxt.start == last.end + 1
            or (nxt is not None and nxt.token_type == TokenType.L_PAREN and name.isupper())
        ):
            self.take()
            args = self.sequence(TokenType.R_PAREN)
            return Call(name, args, self.line(tok), self.span(tok, self.tokens[self.i - 1]))
        return Name(name, self.line(tok), self.span(tok, last))

    def properties(self) -> tuple[Property, ...]:
        out: list[Property] = []
        while True:
            tok = self.peek()
            if tok is None:
                raise self.error("the MODEL header is not closed")
            if tok.token_type == TokenType.R_PAREN:
                self.take()
                return tuple(out)
            key_tok = self.take()
            if key_tok.token_type in (TokenType.COMMA,):
                continue
            if not key_tok.text or not (key_tok.text[0].isalpha() or key_tok.text[0] == "_"):
                raise self.error(
                    f"expected a property name, found '{key_tok.text}'",
                    key_tok,
                    hint="write properties as `key value,`",
                )
            nxt = self.peek()
            if nxt is not None and nxt.token_type in (TokenType.EQ, TokenType.COLON_EQ):
                self.take()
            nxt = self.peek()
            if nxt is None or nxt.token_type in (TokenType.COMMA, TokenType.R_PAREN):
                raise self.error(
                    f"property '{key_tok.text}' has no value", key_tok, hint=f"write `{key_tok.text} <value>`"
                )
            value = self.item(TokenType.R_PAREN)
            if isinstance(value, Seq):
                # `name a.b <newline> kind FULL`: a forgotten comma glues two properties together.
                stray = next((v for v in value.values[1:] if v.line > value.values[0].line), None)
                if stray is not None:
                    raise ModelFileError(
                        self.path,
                        stray.line,
                        f"expected ',' or ')' after property '{key_tok.text}', found '{stray.text.split()[0]}'",
                        hint="separate properties with commas",
                    )
            out.append(Property(key_tok.text.lower(), value, self.line(key_tok)))
            nxt = self.peek()
            if nxt is not None and nxt.token_type == TokenType.COMMA:
                self.take()
            elif nxt is not None and nxt.token_type != TokenType.R_PAREN:
                raise self.error(
                    f"expected ',' or ')' after property '{key_tok.text}', found '{nxt.text}'",
                    nxt,
                    hint="separate properties with commas",
                )


def _tokenize(text: str, path: str | Path, line_offset: int) -> list[Token]:
    try:
        tokens = list(Dialect.get_or_raise("spark").tokenize(text))
    except TokenError as exc:
        raise ModelFileError(path, line_offset + 1, f"cannot read the MODEL header: {exc}") from None
    return _join_doubled_quotes(tokens, text)


def _join_doubled_quotes(tokens: list[Token], text: str) -> list[Token]:
    """A doubled quote inside a string (``'it''s'``) is one quote, as in SQLMesh's dialects: Spark's
    tokenizer reads two strings that touch, which are joined back here.

    >>> [t.text for t in _join_doubled_quotes(_tokenize("('it''s', 'a' 'b')", "f", 0), "('it''s', 'a' 'b')")]
    ['(', "it's", ',', 'a', 'b', ')']
    """
    out: list[Token] = []
    for tok in tokens:
        last = out[-1] if out else None
        if (
            last is not None
            and tok.token_type == TokenType.STRING == last.token_type
            and tok.start == last.end + 1
            and text[last.end] == text[tok.start]
        ):
            quote = text[tok.start]
            out[-1] = Token(TokenType.STRING, last.text + quote + tok.text, last.line, tok.col, last.start, tok.end)
            continue
        out.append(tok)
    return out


def parse_header(header_text: str, path: str | Path, line_offset: int = 0) -> Header:
    """Parse ``MODEL ( ... )`` text into properties with their line numbers.

    ``line_offset`` is the number of lines before the header in its file.
    """
    tokens = _tokenize(header_text, path, line_offset)
    parser = _Parser(tokens, header_text, path, line_offset)
    model = parser.take()
    if model.text.upper() != "MODEL":
        raise parser.error("expected MODEL", model)
    parser.expect(TokenType.L_PAREN, "'(' after MODEL")
    props = parser.properties()
    if (extra := parser.peek()) is not None:
        raise parser.error(f"unexpected '{extra.text}' after the MODEL header")
    return Header(props, model.line + line_offset)
