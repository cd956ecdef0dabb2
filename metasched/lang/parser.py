"""``parse`` and ``load``: workload text to ``Workload``.

The lark parser (LALR, basic lexer, the ``Continuation`` post-lexer) is built once, on first
use. lark's exceptions are turned into ``ParseError``s worded for a person: what was found,
what was expected, and an unclosed bracket reported where it was opened. Whatever the caller
passes - a wrong type, a file that cannot be read or is not UTF-8 - ends in a ``ParseError``
too, never in a Python exception from deep inside.
"""
from __future__ import annotations

import functools
import importlib.resources
import os
from typing import Optional, Union

from lark import Lark, Token, UnexpectedCharacters, UnexpectedInput
from lark.lexer import PatternStr

from metasched.errors import ParseError
from metasched.lang.check import check
from metasched.lang.syntax import CLOSING, OPENING, Continuation, SourceError, ToAst, WorkloadDef
from metasched.lang.workload import Workload

# How error messages name the terminals that are not plain strings.
_WORDS = {"NAME": "a name", "INT": "an integer", "FLOAT": "a number", "_NL": "end of line",
          "$END": "end of file"}
# Names and numbers first, punctuation next, ends of lines and files last.
_ORDER = {"NAME": 0, "INT": 1, "FLOAT": 1, "_NL": 3, "$END": 3}
_OPERATORS = frozenset({"PLUS", "MINUS", "STAR", "SLASH", "SLASH_SLASH", "PERCENT", "LESS",
                        "LESS_EQUAL", "MORE", "MORE_EQUAL", "EQUAL_EQUAL", "NOT_EQUAL", "AND",
                        "OR", "IF"})
_HINTS = {"&": " (write 'and')", "|": " (write 'or')", "!": " (write 'not', or '!=')"}


@functools.lru_cache(maxsize=None)
def _lark() -> Lark:
    grammar = (importlib.resources.files("metasched.grammar") / "tensor.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="basic", postlex=Continuation(),
                propagate_positions=True, maybe_placeholders=False)


# A byte-order mark: editors on Windows may start a UTF-8 file with one. It is not part of the text.
_BOM = "\ufeff"


def parse(text: str, name: Optional[str] = None, *, file: str = "<string>", **params: int) -> Workload:
    """The workload ``name`` of ``text`` (the only one when ``name`` is None) with parameter
    overrides ``params`` (integers).

    Raises ``ParseError`` (``file:line:column: message``, the line and a caret) for any error
    in the text, for an unknown ``name``, for an override of an unknown parameter or one that
    is not an integer, and for arguments of the wrong type. A leading byte-order mark is
    skipped."""
    _check_arguments(text, name)
    if text.startswith(_BOM):
        # Editors do not show the mark: line 1's columns count from the first visible character.
        text = text[len(_BOM):]
    try:
        definition = _pick(_definitions(text), name)
        return check(definition, params, source=text, file=file)
    except SourceError as e:
        lines = text.split("\n")  # as lark counts lines; splitlines() would also split at \f
        shown = lines[e.line - 1].rstrip("\r") if 1 <= e.line <= len(lines) else None
        raise ParseError(e.message, file, e.line, e.column, shown) from None


def load(path: Union[str, os.PathLike], name: Optional[str] = None, **params: int) -> Workload:
    """``parse`` the UTF-8 file at ``path`` (errors name the path).

    Raises ``ParseError`` as ``parse`` does, and also for a file that is missing, a directory,
    unreadable, or not valid UTF-8 (saying where the first bad byte is)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise ParseError(f"load needs the path of a .tensor file (a str or os.PathLike), "
                         f"got {type(path).__name__}; to parse text use metasched.parse(text)")
    path = os.fsdecode(path)
    return parse(_read_text(path), name, file=path, **params)


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ParseError("no such file", path) from None
    except IsADirectoryError:
        raise ParseError("this is a directory, not a .tensor file", path) from None
    except PermissionError:
        raise ParseError("permission denied: cannot read this file", path) from None
    except OSError as e:  # anything else the system refuses (a broken device, a name too long)
        raise ParseError(f"cannot read this file: {e.strerror or e}", path) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8(data, e.start, path) from None


def _not_utf8(data: bytes, offset: int, path: str) -> ParseError:
    """Where the first byte that is not UTF-8 is: its byte offset, and its line and column
    (counted in characters, as every position is), with the line shown as far as it decodes."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    if line_start == 0 and data.startswith(_BOM.encode()):
        line_start = len(_BOM.encode())  # parse skips the mark, so columns do not count it
    line_end = data.find(b"\n", offset)
    line = data.count(b"\n", 0, offset) + 1
    column = len(data[line_start:offset].decode("utf-8")) + 1
    shown = data[line_start:line_end if line_end >= 0 else len(data)].decode("utf-8", errors="replace")
    message = (f"not valid UTF-8: byte 0x{data[offset]:02x} at byte offset {offset}; a .tensor "
               f"file must be UTF-8 text")
    return ParseError(message, path, line, column, shown.rstrip("\r"))


def _check_arguments(text: object, name: object) -> None:
    if not isinstance(text, str):
        if isinstance(text, (bytes, bytearray)):
            hint = "; decode bytes first, e.g. parse(data.decode(\"utf-8\"))"
        elif isinstance(text, os.PathLike):
            hint = "; to read a file use metasched.load(path)"
        else:
            hint = " (to read a file use metasched.load(path))"
        got = "None" if text is None else type(text).__name__
        raise ParseError(f"parse needs the workload's text as a str, got {got}{hint}")
    if name is not None and not isinstance(name, str):
        raise ParseError(f"the workload's name must be a str (or None for the only one), "
                         f"got {type(name).__name__}")


def _definitions(text: str) -> tuple[WorkloadDef, ...]:
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(e, text) from None
    return ToAst().transform(tree)


def _pick(definitions: tuple[WorkloadDef, ...], name: Optional[str]) -> WorkloadDef:
    seen: dict[str, WorkloadDef] = {}
    for d in definitions:
        if d.name in seen:
            raise SourceError(f"a second workload named {d.name} (the first is at line "
                              f"{seen[d.name].line})", d.line, d.column)
        seen[d.name] = d
    if not definitions:
        raise SourceError("no workload here: expected 'workload NAME(PARAM = INT, ...) { ... }'", 1, 1)
    names = ", ".join(seen)
    if name is None:
        if len(definitions) > 1:
            raise SourceError(f"this text holds several workloads ({names}); pick one by name", 0, 0)
        return definitions[0]
    if name not in seen:
        raise SourceError(f"no workload named {name!r}; this text holds: {names}", 0, 0)
    return seen[name]


def _syntax_error(e: UnexpectedInput, text: str) -> SourceError:
    # The interactive parser tries each terminal, so it knows exactly what could come next
    # (the LALR table's lookahead set of the state is wider).
    parser = getattr(e, "interactive_parser", None)
    expected = parser.accepts() if parser is not None else getattr(e, "expected", None) or ()
    wanted = f"; expected {_expected(expected)}" if expected else ""
    if isinstance(e, UnexpectedCharacters):
        char = text[e.pos_in_stream]
        return SourceError(f"unexpected character {char!r}{_HINTS.get(char, '')}{wanted}", e.line, e.column)
    token = getattr(e, "token", None)
    at_end = token is None or token.type == "$END"
    line, column = _end_of_text(text) if at_end else (token.line, token.column)
    opener = _unclosed_bracket(text, line, column)
    if opener is not None and (at_end or opener.line < line):
        return SourceError(f"'{opener}' was never closed", opener.line, opener.column)
    return SourceError(f"unexpected {'end of file' if at_end else _describe(token)}{wanted}", line, column)


def _describe(token: Token) -> str:
    if token.type in ("_NL", "$END"):
        return _WORDS[token.type]
    if token.type == "NAME":
        return f"name {token.value!r}"
    if token.type in ("INT", "FLOAT"):
        return f"number {token.value}"
    return f"'{token.value}'"


def _expected(terminals) -> str:
    """Terminal names in plain words: "an operator, ']' or end of line"."""
    names = set(terminals)
    if "FLOAT" in names:
        names.discard("INT")  # "a number" covers both
    words = []
    if len(names & _OPERATORS) >= 3:  # a long list of operators reads worse than one word
        names -= _OPERATORS
        words.append("an operator")
    for name in sorted(names, key=lambda n: (_ORDER.get(n, 2), n)):
        if name in _WORDS:
            words.append(_WORDS[name])
            continue
        pattern = _lark().get_terminal(name).pattern
        words.append(f"'{pattern.value}'" if isinstance(pattern, PatternStr) else name.lower())
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _unclosed_bracket(text: str, line: int, column: int) -> Optional[Token]:
    """The innermost bracket still open just before ``line:column``."""
    stack: list[Token] = []
    try:
        for token in _lark().lex(text):
            if (token.line, token.column) >= (line, column):
                break
            if token.type in OPENING:
                stack.append(token)
            elif token.type in CLOSING and stack:
                stack.pop()
    except UnexpectedInput:
        pass  # a bad character further on; the brackets before it are counted
    return stack[-1] if stack else None


def _end_of_text(text: str) -> tuple[int, int]:
    """Line and column just past the last character that is not blank."""
    lines = text.rstrip().split("\n")
    return len(lines), len(lines[-1].rstrip("\r")) + 1
