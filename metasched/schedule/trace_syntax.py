"""The syntax of a trace's text (``grammar/trace.lark``): plain dataclasses built from lark's tree.

Map of this file:
  * the nodes - ``Constant``, ``Name``, ``ListValue`` (the values), ``Arg``, ``Call`` and
    ``Line`` (``targets = receiver.method(args)``); each knows its line and column (1-based).
  * ``SourceError`` - a mistake at a line and column; ``trace_text`` turns it into a ``TraceError``.
  * ``parse_lines`` - text to lines: the lark parser (LALR, built once), the Transformer, and
    lark's exceptions reworded for a person.
Nothing here knows what a method or a name means; that is ``trace_text``'s job.
"""
from __future__ import annotations

import functools
import importlib.resources
import re
from dataclasses import dataclass
from typing import Any, Optional, Union

from lark import Lark, Token, Transformer, UnexpectedCharacters, UnexpectedInput, v_args
from lark.exceptions import VisitError
from lark.lexer import PatternStr

from metasched.ir.limits import INT64_MAX, INT64_MIN, fits_int64


@dataclass(frozen=True)
class Node:
    """Base of the syntax nodes: where the node starts."""

    line: int
    column: int


@dataclass(frozen=True)
class Constant(Node):
    """A number, string, None, True or False."""

    value: Any


@dataclass(frozen=True)
class Name(Node):
    name: str


@dataclass(frozen=True)
class ListValue(Node):
    """``[items]``: a list argument, or a tuple constant."""

    items: tuple["Value", ...]


Value = Union[Constant, Name, ListValue]


@dataclass(frozen=True)
class Arg(Node):
    """``value`` or ``keyword=value``."""

    keyword: Optional[str]
    value: Value


@dataclass(frozen=True)
class Call(Node):
    """``receiver.method(args)``; the position is the method's (the receiver may be None)."""

    receiver: Optional[Name]
    method: str
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class Line(Node):
    """One instruction: ``targets = call`` (no targets: a bare call)."""

    targets: tuple[Name, ...]
    tuple_targets: bool  # written with a comma: the call returns a list to unpack
    call: Call


class SourceError(Exception):
    """A mistake at a place in the text; ``trace_text`` adds the line's text."""

    def __init__(self, message: str, node: Union[Node, Token]) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, node.line, node.column


def _name(token: Token) -> Name:
    return Name(token.line, token.column, str(token))


_UNESCAPE = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t", "0": "\0",
             "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_ESCAPE_SEQUENCE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")


def _unquote(token: Token) -> str:
    def replace(match: re.Match) -> str:
        code = match.group(1)
        if len(code) > 1 and int(code[1:], 16) <= 0x10FFFF:
            return chr(int(code[1:], 16))
        if code in _UNESCAPE:
            return _UNESCAPE[code]
        where = Token("STRING", "", line=token.line, column=token.column + 1 + match.start())
        raise SourceError(f"unknown escape sequence '\\{code}' in a string", where)
    return _ESCAPE_SEQUENCE.sub(replace, str(token)[1:-1])


class _ToSyntax(Transformer):
    """lark tree -> syntax nodes; one method per rule or alias of ``grammar/trace.lark``."""

    def start(self, children: list) -> tuple[Line, ...]:
        return tuple(children)

    def instruction(self, children: list) -> Line:
        call = children[0]
        return Line(call.line, call.column, (), False, call)

    def assign_one(self, children: list) -> Line:
        target, call = children
        return Line(target.line, target.column, (_name(target),), False, call)

    def assign_tuple(self, children: list) -> Line:
        *targets, call = children
        return Line(targets[0].line, targets[0].column, tuple(map(_name, targets)), True, call)

    def bare_call(self, children: list) -> Call:
        method, *args = children
        return Call(method.line, method.column, None, str(method), tuple(args))

    def call(self, children: list) -> Call:
        receiver, method, *args = children
        return Call(method.line, method.column, _name(receiver), str(method), tuple(args))

    def arg(self, children: list) -> Arg:
        value = children[0]
        return Arg(value.line, value.column, None, value)

    def keyword_arg(self, children: list) -> Arg:
        keyword, value = children
        return Arg(keyword.line, keyword.column, str(keyword), value)

    @v_args(meta=True)
    def list(self, meta, children: list) -> ListValue:
        return ListValue(meta.line, meta.column, tuple(children))

    def int(self, children: list) -> Constant:
        value = int(children[0])
        if not fits_int64(value):
            raise SourceError(f"the integer {children[0]} does not fit in 64 bits "
                              f"(from {INT64_MIN} to {INT64_MAX})", children[0])
        return Constant(children[0].line, children[0].column, value)

    def float(self, children: list) -> Constant:
        return Constant(children[0].line, children[0].column, float(children[0]))

    def string(self, children: list) -> Constant:
        return Constant(children[0].line, children[0].column, _unquote(children[0]))

    def name(self, children: list) -> Name:
        return _name(children[0])

    def none(self, children: list) -> Constant:
        return Constant(children[0].line, children[0].column, None)

    def true(self, children: list) -> Constant:
        return Constant(children[0].line, children[0].column, True)

    def false(self, children: list) -> Constant:
        return Constant(children[0].line, children[0].column, False)


@functools.lru_cache(maxsize=None)
def _lark() -> Lark:
    grammar = (importlib.resources.files("metasched.grammar") / "trace.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="basic", propagate_positions=True, keep_all_tokens=False)


def parse_lines(text: str) -> tuple[Line, ...]:
    """The syntax of ``text``, one ``Line`` per instruction. Raises ``SourceError``."""
    try:
        return _ToSyntax().transform(_lark().parse(text))
    except VisitError as e:  # lark wraps what a Transformer raises (a bad escape in a string)
        raise e.orig_exc from None
    except UnexpectedInput as e:
        raise _syntax_error(e, text) from None


_WORDS = {"NAME": "a name", "INT": "a number", "FLOAT": "a number", "STRING": "a string",
          "_NL": "end of line", "$END": "end of text"}


def _syntax_error(e: UnexpectedInput, text: str) -> SourceError:
    if isinstance(e, UnexpectedCharacters):
        where = Token("CHAR", "", line=e.line, column=e.column)
        return SourceError(f"unexpected character {text[e.pos_in_stream]!r}", where)
    token = e.token
    if token.type == "$END":  # lark puts it at the last token; the text ends further on
        lines = text.split("\n")
        token = Token("$END", "", line=len(lines), column=len(lines[-1]) + 1)
    found = _WORDS.get(token.type) if token.type in ("_NL", "$END") else f"'{token.value}'"
    parser = getattr(e, "interactive_parser", None)
    expected = sorted({_word(t) for t in (parser.accepts() if parser else e.expected)})
    wanted = "; expected " + (f"{', '.join(expected[:-1])} or {expected[-1]}" if len(expected) > 1
                              else expected[0]) if expected else ""
    return SourceError(f"unexpected {found}{wanted}", token)


def _word(terminal: str) -> str:
    if terminal in _WORDS:
        return _WORDS[terminal]
    pattern = _lark().get_terminal(terminal).pattern
    return f"'{pattern.value}'" if isinstance(pattern, PatternStr) else terminal.lower()
