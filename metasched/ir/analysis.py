"""Walking, rewriting and analysing expressions: substitution, free variables, simplification,
affine forms and interval bounds of index expressions."""
from __future__ import annotations

import functools

from typing import Callable, Iterator, Mapping, Optional

from metasched.ir.expr import INDEX, BinOp, Expr, FloatImm, IntImm, Load, Neg, Var, children, rebuild

# An affine form: {variable name: coefficient} and a constant.
Affine = tuple[dict[str, int], int]
# An inclusive integer interval (lo, hi).
Interval = tuple[int, int]


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node of ``expr``, parents before children."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def transform(expr: Expr, fn: Callable[[Expr], Optional[Expr]]) -> Expr:
    """Rebuild ``expr`` bottom-up; ``fn`` returns a replacement for a node, or None to keep it."""
    kind = type(expr)
    # Binary operators and leaves are most nodes of index expressions: they skip the generic
    # ``children`` / ``rebuild`` (lowering rewrites every index of every statement).
    if kind is BinOp:
        a, b = transform(expr.a, fn), transform(expr.b, fn)
        if a is not expr.a or b is not expr.b:
            expr = BinOp(expr.op, a, b)
    elif kind is not Var and kind is not IntImm and kind is not FloatImm:
        kids = children(expr)
        if kids:
            new_kids = tuple(transform(k, fn) for k in kids)
            if any(a is not b for a, b in zip(kids, new_kids)):
                expr = rebuild(expr, new_kids)
    replaced = fn(expr)
    return expr if replaced is None else replaced


def substitute(expr: Expr, mapping: Mapping[str, Expr]) -> Expr:
    """Replace variables by expressions (simultaneously). A variable mapped to itself (an
    equal ``Var``: lowering maps each leaf loop to its own variable) keeps its node, so that
    a tree with nothing to replace comes back as the same object, not an equal copy (whose
    hash and comparisons would walk it again wherever it is memoised)."""
    if not mapping:
        return expr

    def replace(e: Expr) -> Optional[Expr]:
        if type(e) is not Var:
            return None
        new = mapping.get(e.name)
        return None if type(new) is Var and new.name == e.name else new

    return transform(expr, replace)


@functools.lru_cache(maxsize=1 << 14)
def free_vars(expr: Expr) -> frozenset[str]:
    """Names of the variables ``expr`` reads. Memoised: code generation asks it of the same
    expressions again and again (each unrolled copy of a loop body holds the same ones)."""
    return frozenset(e.name for e in walk(expr) if isinstance(e, Var))


def loads(expr: Expr) -> list[Load]:
    """Every load in ``expr`` (both branches of conditionals included), in ``walk`` order.

    The walk does not enter index expressions (``int64``: a load's indices, the operands of
    a condition's comparisons, a cast loop counter), which are most of the nodes of a
    lowered statement: tensors hold floats and nothing turns a float into an index, so an
    index expression reads no tensor."""
    found: list[Load] = []
    stack = [expr]
    while stack:  # the nodes met most first: postprocessors ask this of every statement
        node = stack.pop()
        kind = type(node)
        if kind is BinOp:
            if node.dtype_ != INDEX:
                stack.append(node.b)
                stack.append(node.a)
        elif kind is Load:
            found.append(node)
        elif kind is not Var and kind is not IntImm and kind is not FloatImm:
            stack.extend(child for child in reversed(children(node)) if child.dtype != INDEX)
    return found


def _fold_int(op: str, a: int, b: int) -> Optional[int]:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "//" and b != 0:
        return a // b
    if op == "%" and b != 0:
        return a % b
    if op == "max":
        return max(a, b)
    if op == "min":
        return min(a, b)
    return None


def _simplify_node(e: Expr) -> Optional[Expr]:
    kind = type(e)
    if kind is Var or kind is IntImm:  # most nodes: nothing to fold
        return None
    if isinstance(e, Neg) and isinstance(e.a, IntImm):
        return IntImm(-e.a.value)
    if isinstance(e, Neg) and isinstance(e.a, FloatImm):
        return FloatImm(-e.a.value, e.a.dtype_)
    if not isinstance(e, BinOp):
        return None
    a, b, op = e.a, e.b, e.op
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        folded = _fold_int(op, a.value, b.value)
        if folded is not None:
            return IntImm(folded)
    if e.dtype != "int64":
        return None
    if op == "+":
        if isinstance(b, IntImm) and b.value == 0:
            return a
        if isinstance(a, IntImm) and a.value == 0:
            return b
    elif op == "-":
        if isinstance(b, IntImm) and b.value == 0:
            return a
    elif op == "*":
        if isinstance(b, IntImm) and b.value == 1:
            return a
        if isinstance(a, IntImm) and a.value == 1:
            return b
        if (isinstance(a, IntImm) and a.value == 0) or (isinstance(b, IntImm) and b.value == 0):
            return IntImm(0)
    elif op == "//":
        if isinstance(b, IntImm) and b.value == 1:
            return a
    elif op == "%":
        if isinstance(b, IntImm) and b.value == 1:
            return IntImm(0)
    return None


def simplify(expr: Expr) -> Expr:
    """Fold integer constants and drop identities (``x + 0``, ``x * 1``, ``x // 1``, ...).

    Index expressions that are affine are rewritten into a canonical sum of terms so that
    equal affine expressions print the same way; other nodes keep their structure.
    """
    if expr.dtype == "int64":
        return _simplify_index(expr)
    return transform(expr, _simplify_node)


@functools.lru_cache(maxsize=1 << 14)
def _simplify_index(expr: Expr) -> Expr:
    """``simplify`` of an index expression. Memoised: lowering simplifies the same indices
    again and again (the loop values of one stage in every stage attached to it, expressions
    already simplified, the same loop structure in sample after sample). Only index
    expressions: they hold integers, whose equality is exact, so an equal input may be given
    the output of another (float constants are not: ``0.0 == -0.0``)."""
    folded = transform(expr, _simplify_node)
    if not isinstance(folded, (IntImm, Var)):
        form = as_affine(folded)
        if form is not None:
            return from_affine(form)
    return folded


def as_affine(expr: Expr) -> Optional[Affine]:
    """``expr`` as ``sum(coeff * var) + const``, or None where it is not affine
    (a product of variables, a ``//`` or ``%`` of a variable, a ``max``, ...)."""
    if isinstance(expr, IntImm):
        return {}, expr.value
    if isinstance(expr, Var):
        return {expr.name: 1}, 0
    if isinstance(expr, Neg):
        inner = as_affine(expr.a)
        if inner is None:
            return None
        return {k: -v for k, v in inner[0].items()}, -inner[1]
    if not isinstance(expr, BinOp) or expr.dtype != "int64":
        return None
    op = expr.op
    if op not in ("+", "-", "*", "//", "%"):
        return None
    # The right operand is not looked at when the left is not affine (lowering simplifies
    # long sums whose first term is a ``//`` or ``%`` of a fused loop).
    la = as_affine(expr.a)
    if la is None:
        return None
    lb = as_affine(expr.b)
    if lb is None:
        return None
    if op in ("+", "-"):
        sign = 1 if op == "+" else -1
        coeffs = dict(la[0])
        for name, c in lb[0].items():
            coeffs[name] = coeffs.get(name, 0) + sign * c
        return {k: v for k, v in coeffs.items() if v != 0}, la[1] + sign * lb[1]
    if op == "*":
        if not la[0]:
            la, lb = lb, la
        if lb[0]:
            return None
        k = lb[1]
        return {n: c * k for n, c in la[0].items() if c * k != 0}, la[1] * k
    if lb[0] or lb[1] <= 0:  # ``//`` or ``%`` by something that is not a positive constant
        return None
    if la[0]:
        if op == "//" and lb[1] == 1:
            return la
        return None
    return {}, _fold_int(op, la[1], lb[1])


def from_affine(form: Affine) -> Expr:
    """The expression of an affine form, terms in a stable order (by variable name)."""
    coeffs, const = form
    result: Optional[Expr] = None
    for name in sorted(coeffs):
        c = coeffs[name]
        magnitude: Expr = Var(name) if abs(c) == 1 else BinOp("*", Var(name), IntImm(abs(c)))
        if result is None:
            result = magnitude if c > 0 else BinOp("*", Var(name), IntImm(c))
        else:
            result = BinOp("+" if c > 0 else "-", result, magnitude)
    if result is None:
        return IntImm(const)
    if const > 0:
        return BinOp("+", result, IntImm(const))
    if const < 0:
        return BinOp("-", result, IntImm(-const))
    return result


def int_bounds(expr: Expr, ranges: Mapping[str, Interval]) -> Interval:
    """Inclusive bounds of an index expression when each variable lies in its inclusive range.

    Raises ``KeyError`` for a variable without a range and ``ValueError`` for a node that is not
    an index expression (or a ``//``/``%`` by something that is not a positive constant).
    """
    if isinstance(expr, IntImm):
        return expr.value, expr.value
    if isinstance(expr, Var):
        return ranges[expr.name]
    if isinstance(expr, Neg):
        lo, hi = int_bounds(expr.a, ranges)
        return -hi, -lo
    if not isinstance(expr, BinOp) or expr.dtype != "int64":
        raise ValueError(f"not an index expression: {expr}")
    a = int_bounds(expr.a, ranges)
    op = expr.op
    if op in ("//", "%"):
        b = int_bounds(expr.b, ranges)
        if b[0] != b[1] or b[0] <= 0:
            raise ValueError(f"'{op}' needs a positive constant divisor: {expr}")
        d = b[0]
        if op == "//":
            return a[0] // d, a[1] // d
        if a[0] // d == a[1] // d:  # the whole range lies in one period
            return a[0] % d, a[1] % d
        return 0, d - 1
    b = int_bounds(expr.b, ranges)
    if op == "+":
        return a[0] + b[0], a[1] + b[1]
    if op == "-":
        return a[0] - b[1], a[1] - b[0]
    if op == "*":
        products = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
        return min(products), max(products)
    if op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    if op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    raise ValueError(f"not an index expression: {expr}")
