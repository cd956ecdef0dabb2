"""The limits a workload stays within, so that whatever the checker accepts compiles and runs.

Integers. Generated code computes indices, loop counters, extents and byte offsets in signed
64-bit integers. Every integer of a workload - parameter values (defaults and overrides),
integer literals, lets, ``where`` bounds, dimensions, and the bounds of every sub-expression of
an index expression - must lie strictly between ``-INT_LIMIT`` and ``INT_LIMIT`` (2**62), and so
must each tensor's byte size and each statement's iteration domain (the product of the extents
of all its variables). Half of the int64 range leaves room for what a schedule does to these
numbers: a split that overshoots can nearly double the reach of an index, fusing loops multiplies
their extents (at most the whole domain), and a byte offset is an element offset times the
item size (a byte size below 2**62 keeps every offset below it).

Depth. The checker, the IR passes, lowering and code generation walk expressions recursively,
about three Python frames per level. ``MAX_DEPTH`` bounds how deep an expression may nest, well
inside Python's default recursion limit (1000) with room for the callers' frames. A long chain of
one operator (``a + b + ... ``) is built as a balanced tree (``chain``), so its depth grows with
the logarithm of its length: a sum of 10,000 terms is about 20 levels deep.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, TypeVar

import numpy as np

from metasched.ir.expr import Expr, children
from metasched.ir.limits import MAX_BUFFER_BYTES
from metasched.lang.syntax import (
    Binary, Expression, InputDecl, LetDecl, Node, Number, Require, SourceError, StatementDef, int_text,
    preorder, syntax_children,
)
from metasched.lang.workload import Axis

INT_LIMIT = 2**62
INT_LIMIT_TEXT = "2**62"
MAX_DEPTH = 100
# Chains of up to this many operands stay left to right, exactly as written (and as printed);
# longer ones are split in halves until the pieces are this short.
CHAIN_RUN = 8

# The operators that continue a left-associative chain of the same precedence level.
CHAIN_CLASSES = ({"+", "-"}, {"*", "/", "//", "%"}, {"and"}, {"or"})

WHY_64_BITS = (f"integers in a workload must lie strictly between -{INT_LIMIT_TEXT} and "
               f"{INT_LIMIT_TEXT} (generated code computes in signed 64-bit integers)")

T = TypeVar("T")


def fits(value: int) -> bool:
    """Whether ``value`` is an integer a workload may hold (strictly inside +-2**62)."""
    return -INT_LIMIT < value < INT_LIMIT


def too_large(what: str, value: int) -> str:
    """The message for an integer that does not fit: ``what`` names it."""
    return f"{what} is {int_text(value)}, too large: {WHY_64_BITS}"


def too_deep(depth: int, inlined: str = "") -> str:
    """The message for an expression deeper than ``MAX_DEPTH``; ``inlined`` says through what."""
    return (f"this expression nests {depth} levels deep{inlined}; the limit is {MAX_DEPTH} (a long "
            f"chain such as a + b + c + ... is fine, but brackets around operations, calls, "
            f"conditionals and unary minus nest)")


def check_size(name: str, shape: tuple[int, ...], dtype: str, line: int, column: int) -> None:
    """A tensor's byte size must stay below 2**62: then every byte offset into it, and any
    small multiple of one, fits a signed 64-bit integer."""
    itemsize = np.dtype(dtype).itemsize
    elements = math.prod(shape)
    if elements * itemsize >= MAX_BUFFER_BYTES:
        raise SourceError(f"tensor {name} is too large: {' x '.join(map(str, shape))} = "
                          f"{int_text(elements)} elements of {itemsize} bytes = "
                          f"{int_text(elements * itemsize)} bytes; a tensor must be smaller than "
                          f"{INT_LIMIT_TEXT} bytes, so that generated code can address it with "
                          f"64-bit integers", line, column)


def check_domain(target: str, axes: tuple[Axis, ...], line: int, column: int) -> None:
    """A schedule may fuse all of a statement's loops into one, whose extent is the whole
    iteration domain: that must fit as well."""
    points = math.prod(a.extent for a in axes)
    if points >= INT_LIMIT:
        extents = ", ".join(f"{a.name}: {a.extent}" for a in axes)
        raise SourceError(f"statement {target} iterates over {int_text(points)} points ({extents}), "
                          f"too many: a statement's iteration domain must be smaller than "
                          f"{INT_LIMIT_TEXT}, so that its loops fused into one fit a 64-bit counter",
                          line, column)


def check_item(item: Node) -> None:
    """Refuse an expression of ``item`` nested deeper than ``MAX_DEPTH`` (chains counting once:
    they are built as balanced trees), before any recursive pass walks it, and an integer
    literal that does not fit, wherever it is (a dimension, an index, a value)."""
    if isinstance(item, InputDecl):
        expressions = item.dims
    elif isinstance(item, LetDecl):
        expressions = (item.value,)
    elif isinstance(item, Require):
        expressions = (item.cond,)
    elif isinstance(item, StatementDef):
        expressions = (*item.indices, item.value, *(e for r in item.ranges for e in (r.lo, r.hi)))
    else:
        raise TypeError(f"not an item of a workload: {item!r}")
    for expression in expressions:
        depth = syntax_depth(expression)
        if depth > MAX_DEPTH:
            raise SourceError(too_deep(depth), expression.line, expression.column)
    for expression in expressions:
        for node in preorder(expression):
            if isinstance(node, Number) and isinstance(node.value, int) and not fits(node.value):
                raise SourceError(f"the integer {int_text(node.value)} is too large: {WHY_64_BITS}",
                                  node.line, node.column)


def check_depth(expr: Expr, at: Node) -> None:
    """Refuse IR deeper than ``MAX_DEPTH``, built from the expression at ``at``."""
    depth = ir_depth(expr)
    if depth > MAX_DEPTH:
        raise SourceError(too_deep(depth), at.line, at.column)


def chain_class(op: str) -> Optional[set[str]]:
    """The operators that chain with ``op`` (None for an operator that does not chain)."""
    return next((c for c in CHAIN_CLASSES if op in c), None)


def chain_operands(node: Binary) -> tuple[Expression, list[tuple[Binary, Expression]]]:
    """A left-associative chain ``x0 op1 x1 op2 x2 ...`` as its first operand and, in text
    order, each operator's ``Binary`` node with its right operand. Found by a loop down the left
    spine, so a chain of any length costs no recursion."""
    ops = chain_class(node.op) or {node.op}
    links: list[tuple[Binary, Expression]] = []
    first: Expression = node
    while isinstance(first, Binary) and first.op in ops:
        links.append((first, first.right))
        first = first.left
    links.reverse()
    return first, links


def chain(first: T, links: Sequence[tuple[str, T]], make: Callable[[str, T, T], T],
          pair: Optional[tuple[str, str]] = None) -> T:
    """``first op1 x1 op2 x2 ...`` built with ``make(op, left, right)``: left to right when it
    has at most ``CHAIN_RUN`` operands, otherwise as a balanced tree of such runs.

    Regrouping needs associativity. ``pair`` is an operator and its inverse (``("+", "-")``,
    ``("*", "/")``), so that ``L - (a - b)`` stands for ``L - a + b``; it is None for a chain
    of one associative operator (``and``, ``or``, integer ``*``)."""
    if len(links) < CHAIN_RUN:
        result = first
        for op, operand in links:
            result = make(op, result, operand)
        return result
    mid = (len(links) + 1) // 2  # operands 0 .. mid-1 on the left, the rest on the right
    left = chain(first, links[:mid - 1], make, pair)
    join, head = links[mid - 1]
    rest = list(links[mid:])
    if pair is not None and join == pair[1]:
        swap = {pair[0]: pair[1], pair[1]: pair[0]}
        rest = [(swap[op], operand) for op, operand in rest]
    return make(join, left, chain(head, rest, make, pair))


def ir_depth(expr: Expr) -> int:
    """The depth of an IR expression (a leaf is 1), without recursion."""
    deepest = 0
    stack = [(expr, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children(node))
    return deepest


def syntax_depth(expr: Expression) -> int:
    """How deep a syntax tree nests, without recursion: every node is a level, except that a
    chain of one precedence level (``a + b - c``) counts as one however long it is."""
    deepest = 0
    stack = [(expr, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, Binary) and chain_class(node.op) is not None:
            first, links = chain_operands(node)
            stack.append((first, depth + 1))
            stack.extend((operand, depth + 1) for _, operand in links)
        else:
            stack.extend((child, depth + 1) for child in syntax_children(node))
    return deepest
