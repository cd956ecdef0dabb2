"""The syntax tree of a ``.tensor`` file: plain dataclasses built from lark's parse tree.

Map of this file:
  * ``SourceError`` - an error at a line and column; ``parser`` turns it into a ``ParseError``.
  * the nodes - expressions (``Number``, ``Name``, ``Subscript``, ``CallExpr``, ``Unary``,
    ``Binary``, ``Conditional``) and items (``Param``, ``InputDecl``, ``LetDecl``, ``Require``,
    ``Range``, ``StatementDef``, ``WorkloadDef``). Every node knows its line and column (1-based).
  * ``ToAst`` - the lark ``Transformer``, one method per grammar rule.
  * ``Continuation`` - the post-lexer that joins continued lines.
  * ``preorder`` - an expression's nodes in text order; ``to_text`` - a node back to
    source-like text, for error messages.
Nothing here knows what a name means; that is ``check``'s job.

A chain such as ``a + b + ... + z`` is a left-deep tree as deep as it is long, so nothing here
recurses along it: lark's non-recursive transformer builds it, and ``preorder`` and
``to_text`` loop down the left spine. Nesting (brackets, calls, conditionals) still recurses;
``check`` bounds it first (``limits.MAX_DEPTH``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Union

from lark import Token, Transformer_NonRecursive, v_args


class SourceError(Exception):
    """A problem at a place in the source text; ``parser`` adds the file and the line's text."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


@dataclass(frozen=True)
class Node:
    """Base of the syntax nodes: where the node starts."""

    line: int
    column: int


@dataclass(frozen=True)
class Number(Node):
    value: Union[int, float]


@dataclass(frozen=True)
class Name(Node):
    name: str


@dataclass(frozen=True)
class Subscript(Node):
    """``name[indices]``: a tensor load (or, in a declaration, a shape)."""

    name: str
    indices: tuple["Expression", ...]


@dataclass(frozen=True)
class CallExpr(Node):
    func: str
    args: tuple["Expression", ...]


@dataclass(frozen=True)
class Unary(Node):
    """``-operand`` or ``not operand``."""

    op: str
    operand: "Expression"


@dataclass(frozen=True)
class Binary(Node):
    """Arithmetic, comparison, ``and``/``or``; ``op_line``/``op_column`` locate the operator."""

    op: str
    left: "Expression"
    right: "Expression"
    op_line: int
    op_column: int


@dataclass(frozen=True)
class Conditional(Node):
    """``then if cond else otherwise``."""

    then: "Expression"
    cond: "Expression"
    otherwise: "Expression"


Expression = Union[Number, Name, Subscript, CallExpr, Unary, Binary, Conditional]


@dataclass(frozen=True)
class Param(Node):
    """``name = default``; positioned at the name, ``default`` has its own position."""

    name: str
    default: Number


@dataclass(frozen=True)
class InputDecl(Node):
    """``input name: dtype[dims]``; the node's position is the name's, ``dtype`` has its own,
    ``start_line``/``start_column`` locate the keyword ``input`` that begins it."""

    name: str
    dtype: Name
    dims: tuple[Expression, ...]
    start_line: int
    start_column: int


@dataclass(frozen=True)
class LetDecl(Node):
    name: str
    value: Expression


@dataclass(frozen=True)
class Require(Node):
    cond: Expression


@dataclass(frozen=True)
class Range(Node):
    """``var in lo..hi`` of a ``where`` clause."""

    var: str
    lo: Expression
    hi: Expression


@dataclass(frozen=True)
class StatementDef(Node):
    """``[output] target[indices] op value where ...``; positioned at the target's name,
    ``op_line``/``op_column`` locate the assignment operator, ``start_line``/``start_column``
    the first token (``output`` or the name)."""

    output: bool
    target: str
    indices: tuple[Expression, ...]
    op: str
    value: Expression
    ranges: tuple[Range, ...]
    op_line: int
    op_column: int
    start_line: int
    start_column: int


Item = Union[InputDecl, LetDecl, Require, StatementDef]


@dataclass(frozen=True)
class WorkloadDef(Node):
    """One ``workload name(params) { items }``; positioned at its name."""

    name: str
    params: tuple[Param, ...]
    items: tuple[Item, ...]


def _at(token: Token) -> tuple[int, int]:
    return token.line, token.column


# Python refuses to convert a numeral of more than a few thousand digits (set by
# sys.set_int_max_str_digits, at least 640) in one piece; longer ones are read in pieces so that
# the checker can report them as too large instead of lark reporting a ValueError.
_DIGITS_AT_ONCE = 600


def _integer(text: str) -> int:
    value = 0
    for start in range(0, len(text), _DIGITS_AT_ONCE):
        piece = text[start:start + _DIGITS_AT_ONCE]
        value = value * 10**len(piece) + int(piece)
    return value


def int_text(value: int) -> str:
    """An integer for a message: its digits, or its size when printing it would be absurd
    (and would hit Python's limit on converting long integers to text)."""
    if value.bit_length() <= 256:
        return str(value)
    return f"an integer of about {round(value.bit_length() * 0.30103)} digits"


class ToAst(Transformer_NonRecursive):
    """lark tree -> syntax nodes. One method per rule (or alias) of ``grammar/tensor.lark``.

    Non-recursive: the tree of a long chain ``a + b + ...`` is as deep as the chain is long."""

    def start(self, children: list) -> tuple[WorkloadDef, ...]:
        return tuple(children)

    def workload(self, children: list) -> WorkloadDef:
        name, rest = children[0], children[1:]
        params = tuple(c for c in rest if isinstance(c, Param))
        items = tuple(c for c in rest if not isinstance(c, Param))
        return WorkloadDef(*_at(name), str(name), params, items)

    def param(self, children: list) -> Param:
        name, value = children
        return Param(*_at(name), str(name), Number(*_at(value), _integer(value)))

    @v_args(meta=True)
    def input(self, meta, children: list) -> InputDecl:
        name, dtype, *dims = children
        return InputDecl(*_at(name), str(name), Name(*_at(dtype), str(dtype)), tuple(dims),
                         meta.line, meta.column)

    def let(self, children: list) -> LetDecl:
        name, value = children
        return LetDecl(*_at(name), str(name), value)

    def require(self, children: list) -> Require:
        cond = children[0]
        return Require(cond.line, cond.column, cond)

    @v_args(meta=True)
    def statement(self, meta, children: list) -> StatementDef:
        output = isinstance(children[0], Token) and children[0].type == "OUTPUT"
        if output:
            children = children[1:]
        name, *rest = children
        op_index = next(i for i, c in enumerate(rest) if isinstance(c, Token))
        indices, op, value = rest[:op_index], rest[op_index], rest[op_index + 1]
        ranges = tuple(r for clause in rest[op_index + 2:] for r in clause)
        return StatementDef(*_at(name), output, str(name), tuple(indices), str(op), value, ranges,
                            *_at(op), meta.line, meta.column)

    def assign_op(self, children: list) -> Token:
        return children[0]

    def where(self, children: list) -> list[Range]:
        return list(children)

    def range(self, children: list) -> Range:
        name, lo, hi = children
        return Range(*_at(name), str(name), lo, hi)

    @v_args(meta=True)
    def conditional(self, meta, children: list) -> Conditional:
        then, cond, otherwise = children
        return Conditional(meta.line, meta.column, then, cond, otherwise)

    def _logic(self, op: str, meta, children: list) -> Binary:
        left, right = children
        # `and`/`or` are filtered out of the tree; no error points at them, so the right
        # operand's start stands in for the operator's position.
        return Binary(meta.line, meta.column, op, left, right, right.line, right.column)

    @v_args(meta=True)
    def or_(self, meta, children: list) -> Binary:
        return self._logic("or", meta, children)

    @v_args(meta=True)
    def and_(self, meta, children: list) -> Binary:
        return self._logic("and", meta, children)

    @v_args(meta=True)
    def not_(self, meta, children: list) -> Unary:
        return Unary(meta.line, meta.column, "not", children[0])

    @v_args(meta=True)
    def binary(self, meta, children: list) -> Binary:
        left, op, right = children
        return Binary(meta.line, meta.column, str(op), left, right, *_at(op))

    compare = binary

    @v_args(meta=True)
    def neg(self, meta, children: list) -> Unary:
        return Unary(meta.line, meta.column, "-", children[-1])

    def int(self, children: list) -> Number:
        return Number(*_at(children[0]), _integer(children[0]))

    def float(self, children: list) -> Number:
        return Number(*_at(children[0]), float(children[0]))

    def name(self, children: list) -> Name:
        return Name(*_at(children[0]), str(children[0]))

    def subscript(self, children: list) -> Subscript:
        name, *indices = children
        return Subscript(*_at(name), str(name), tuple(indices))

    def call(self, children: list) -> CallExpr:
        name, *args = children
        return CallExpr(*_at(name), str(name), tuple(args))


def syntax_children(node: Expression) -> tuple[Expression, ...]:
    """The direct sub-expressions of a node, in the order they are written."""
    if isinstance(node, Subscript):
        return node.indices
    if isinstance(node, CallExpr):
        return node.args
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Conditional):
        return (node.then, node.cond, node.otherwise)  # the order they are written in
    return ()


def preorder(node: Expression) -> Iterator[Expression]:
    """Every node in the order it appears in the text (parents first)."""
    stack = [node]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(syntax_children(node)))


# A line ending in one of these continues on the next line.
_CONTINUES = frozenset({
    "COMMA", "IF", "ELSE", "AND", "OR", "NOT", "EQUAL", "PLUS_EQUAL", "STAR_EQUAL", "MAX_EQUAL",
    "MIN_EQUAL", "LESS", "LESS_EQUAL", "MORE", "MORE_EQUAL", "EQUAL_EQUAL", "NOT_EQUAL", "PLUS",
    "MINUS", "STAR", "SLASH", "SLASH_SLASH", "PERCENT", "DOTDOT", "COLON",
})
OPENING = frozenset({"LPAR", "LSQB"})
CLOSING = frozenset({"RPAR", "RSQB"})


class Continuation:
    """lark post-lexer: drops the newlines that do not end a statement (the rules of
    docs/language.md, "Lines").

    Working on tokens keeps each token's line and column exactly as lexed, which a text
    pre-pass joining lines would have to recompute."""

    always_accept = ("_NL",)

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        depth = 0
        previous: Optional[Token] = None
        pending: Optional[Token] = None  # a newline held back until we see whether `where` follows
        for token in stream:
            if token.type == "_NL":
                if depth == 0 and pending is None and (previous is None or previous.type not in _CONTINUES):
                    pending = token
                continue
            if pending is not None:
                if token.type != "WHERE":
                    yield pending
                pending = None
            if token.type in OPENING:
                depth += 1
            elif token.type in CLOSING:
                depth = max(depth - 1, 0)  # an unmatched closer is the parser's error to report
            yield token
            previous = token
        if pending is not None:
            yield pending


_PRECEDENCE = {"if": 0, "or": 1, "and": 2, "not": 3, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4,
               "!=": 4, "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6, "neg": 7, "atom": 8}


def _precedence(node: Expression) -> int:
    if isinstance(node, Binary):
        return _PRECEDENCE[node.op]
    if isinstance(node, Conditional):
        return _PRECEDENCE["if"]
    if isinstance(node, Unary):
        return _PRECEDENCE["not" if node.op == "not" else "neg"]
    return _PRECEDENCE["atom"]


def to_text(node: Expression) -> str:
    """Source-like text of an expression (canonical spacing, only the brackets it needs)."""
    def wrapped(child: Expression, at_least: int) -> str:
        text = to_text(child)
        return f"({text})" if _precedence(child) < at_least else text

    if isinstance(node, Number):
        return int_text(node.value) if isinstance(node.value, int) else repr(node.value)
    if isinstance(node, Name):
        return node.name
    if isinstance(node, Subscript):
        return f"{node.name}[{', '.join(map(to_text, node.indices))}]"
    if isinstance(node, CallExpr):
        return f"{node.func}({', '.join(map(to_text, node.args))})"
    if isinstance(node, Unary):
        if node.op == "not":
            return f"not {wrapped(node.operand, _PRECEDENCE['not'])}"
        return f"-{wrapped(node.operand, _PRECEDENCE['neg'])}"
    if isinstance(node, Binary):
        # A left operand of the same precedence needs no brackets; loop down those instead of
        # recursing, so that a chain of any length prints.
        p = _precedence(node)
        spine = []
        while isinstance(node, Binary) and _precedence(node) == p:
            spine.append(node)
            node = node.left
        links = "".join(f" {b.op} {wrapped(b.right, p + 1)}" for b in reversed(spine))
        return wrapped(node, p) + links
    if isinstance(node, Conditional):
        return f"{wrapped(node.then, 1)} if {wrapped(node.cond, 1)} else {wrapped(node.otherwise, 0)}"
    raise TypeError(f"not an expression node: {node!r}")
