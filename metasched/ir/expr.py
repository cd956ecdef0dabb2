"""Expression nodes shared by workloads, schedules, loop programs and code generation.

Expressions are immutable, hashable values. Two kinds live side by side:

* index expressions (dtype ``int64``): integers, variables, ``+ - * // % max min``;
* value expressions (dtype ``float32``/``float64``): float constants, loads, arithmetic, calls,
  conditionals; an index expression used as a value is wrapped in ``Cast``;
* conditions (dtype ``bool``): comparisons of index expressions joined by ``and``/``or``/``not``.

``//`` and ``%`` round toward negative infinity, as in Python.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

INDEX = "int64"
BOOL = "bool"
FLOAT_DTYPES = ("float32", "float64")

ARITH_OPS = ("+", "-", "*", "/", "//", "%", "max", "min")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC_OPS = ("and", "or")
# Math functions of one argument, and of two.
UNARY_CALLS = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "erf")
BINARY_CALLS = ("pow",)


class Expr:
    """Base of every expression node. Arithmetic operators build index expressions."""

    __slots__ = ()

    @property
    def dtype(self) -> str:  # pragma: no cover - every node overrides it
        raise TypeError(f"{type(self).__name__} has no dtype")

    def __add__(self, other: ExprLike) -> Expr:
        return BinOp("+", self, as_expr(other))

    def __radd__(self, other: ExprLike) -> Expr:
        return BinOp("+", as_expr(other), self)

    def __sub__(self, other: ExprLike) -> Expr:
        return BinOp("-", self, as_expr(other))

    def __rsub__(self, other: ExprLike) -> Expr:
        return BinOp("-", as_expr(other), self)

    def __mul__(self, other: ExprLike) -> Expr:
        return BinOp("*", self, as_expr(other))

    def __rmul__(self, other: ExprLike) -> Expr:
        return BinOp("*", as_expr(other), self)

    def __floordiv__(self, other: ExprLike) -> Expr:
        return BinOp("//", self, as_expr(other))

    def __mod__(self, other: ExprLike) -> Expr:
        return BinOp("%", self, as_expr(other))

    def __str__(self) -> str:
        return expr_str(self)


ExprLike = Union[Expr, int]


@dataclass(frozen=True, eq=True, repr=False)
class IntImm(Expr):
    """An integer constant (an index or a shape)."""

    value: int

    @property
    def dtype(self) -> str:
        return INDEX

    def __repr__(self) -> str:
        return f"IntImm({self.value})"


@dataclass(frozen=True, eq=True, repr=False)
class FloatImm(Expr):
    """A floating-point constant of the given dtype."""

    value: float
    dtype_: str = "float32"

    @property
    def dtype(self) -> str:
        return self.dtype_

    def __repr__(self) -> str:
        return f"FloatImm({self.value!r}, {self.dtype_!r})"


@dataclass(frozen=True, eq=True, repr=False)
class Var(Expr):
    """An integer variable: an axis of a statement or a loop of a loop program."""

    name: str

    @property
    def dtype(self) -> str:
        return INDEX

    def __repr__(self) -> str:
        return f"Var({self.name!r})"


@dataclass(frozen=True, eq=True, repr=False)
class Load(Expr):
    """``buffer[indices]``: one element of a tensor (or buffer) of the given dtype."""

    buffer: str
    indices: tuple[Expr, ...]
    dtype_: str = "float32"

    @property
    def dtype(self) -> str:
        return self.dtype_

    def __repr__(self) -> str:
        return f"Load({self.buffer!r}, {self.indices!r}, {self.dtype_!r})"


_ARITH_OPS = frozenset(ARITH_OPS)
_BOOL_OPS = frozenset(COMPARE_OPS + LOGIC_OPS)


@dataclass(frozen=True, eq=True, repr=False, init=False)
class BinOp(Expr):
    """``a op b`` for arithmetic, comparison (result bool) and logical (bool operands) ops."""

    op: str
    a: Expr
    b: Expr
    # Worked out once: analyses ask for it on every node, and trees are deep.
    dtype_: str = field(init=False, compare=False, repr=False)

    def __init__(self, op: str, a: Expr, b: Expr) -> None:
        # Written out rather than generated: the generated ``__init__`` of a frozen dataclass
        # sets each field through ``object.__setattr__``, which doubles the cost of the node
        # that index arithmetic builds most (hundreds per lowered program).
        if op in _ARITH_OPS:
            da, db = a.dtype, b.dtype
            dtype = da if da in FLOAT_DTYPES else db if db in FLOAT_DTYPES else INDEX
        elif op in _BOOL_OPS:
            dtype = BOOL
        else:
            raise ValueError(f"unknown binary operator {op!r}")
        fields = self.__dict__
        fields["op"], fields["a"], fields["b"], fields["dtype_"] = op, a, b, dtype

    @property
    def dtype(self) -> str:
        return self.dtype_

    def __hash__(self) -> int:
        # The generated hash, remembered: memoised analyses and term dictionaries hash the same
        # deep index expressions again and again, and each hash would walk the whole tree.
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash((self.op, self.a, self.b))
        return h

    @property
    def nodes(self) -> int:
        """The nodes of this expression (``node_count``), remembered as the hash is: the
        postprocessors count the nodes of every statement, whose index expressions are
        shared by many statements and programs."""
        n = self.__dict__.get("_nodes")
        if n is None:
            n = self.__dict__["_nodes"] = 1 + node_count(self.a) + node_count(self.b)
        return n

    def __getstate__(self) -> dict:
        # Without the remembered hash (a string's hash differs from one process to another),
        # nor the node count (worked out again where asked for).
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "_nodes")}

    def __repr__(self) -> str:
        return f"BinOp({self.op!r}, {self.a!r}, {self.b!r})"


@dataclass(frozen=True, eq=True, repr=False)
class Neg(Expr):
    """``-a``."""

    a: Expr

    @property
    def dtype(self) -> str:
        return self.a.dtype

    def __repr__(self) -> str:
        return f"Neg({self.a!r})"


@dataclass(frozen=True, eq=True, repr=False)
class Not(Expr):
    """``not a`` for a condition."""

    a: Expr

    @property
    def dtype(self) -> str:
        return BOOL

    def __repr__(self) -> str:
        return f"Not({self.a!r})"


@dataclass(frozen=True, eq=True, repr=False)
class Call(Expr):
    """A math function (``exp``, ``pow``, ...) applied to value expressions."""

    func: str
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if self.func in UNARY_CALLS:
            want = 1
        elif self.func in BINARY_CALLS:
            want = 2
        else:
            raise ValueError(f"unknown function {self.func!r}")
        if len(self.args) != want:
            raise ValueError(f"{self.func} takes {want} argument(s), got {len(self.args)}")

    @property
    def dtype(self) -> str:
        return self.args[0].dtype

    def __repr__(self) -> str:
        return f"Call({self.func!r}, {self.args!r})"


@dataclass(frozen=True, eq=True, repr=False)
class Select(Expr):
    """``true_value if cond else false_value``; only the taken branch's loads are performed."""

    cond: Expr
    true_value: Expr
    false_value: Expr

    @property
    def dtype(self) -> str:
        return self.true_value.dtype

    def __repr__(self) -> str:
        return f"Select({self.cond!r}, {self.true_value!r}, {self.false_value!r})"


@dataclass(frozen=True, eq=True, repr=False)
class Cast(Expr):
    """An index expression converted to a float dtype."""

    dtype_: str
    value: Expr

    @property
    def dtype(self) -> str:
        return self.dtype_

    def __repr__(self) -> str:
        return f"Cast({self.dtype_!r}, {self.value!r})"


def as_expr(value: ExprLike) -> Expr:
    """An ``Expr`` from an expression or a Python int."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an expression or an int, got {value!r}")
    return IntImm(value)


def node_count(expr: Expr) -> int:
    """The nodes of ``expr`` (a sub-expression met twice counts twice)."""
    kind = type(expr)
    if kind is BinOp:
        return expr.nodes
    if kind is Var or kind is IntImm or kind is FloatImm:
        return 1
    return 1 + sum(node_count(child) for child in children(expr))


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of a node."""
    if isinstance(expr, BinOp):  # the commonest node with children, then the leaves
        return (expr.a, expr.b)
    if isinstance(expr, (IntImm, FloatImm, Var)):
        return ()
    if isinstance(expr, Load):
        return expr.indices
    if isinstance(expr, (Neg, Not)):
        return (expr.a,)
    if isinstance(expr, Call):
        return expr.args
    if isinstance(expr, Select):
        return (expr.cond, expr.true_value, expr.false_value)
    if isinstance(expr, Cast):
        return (expr.value,)
    raise TypeError(f"not an expression: {expr!r}")


def rebuild(expr: Expr, new_children: tuple[Expr, ...]) -> Expr:
    """A node like ``expr`` with its children replaced (in the order of ``children``)."""
    if isinstance(expr, (IntImm, FloatImm, Var)):
        return expr
    if isinstance(expr, Load):
        return Load(expr.buffer, tuple(new_children), expr.dtype_)
    if isinstance(expr, BinOp):
        return BinOp(expr.op, new_children[0], new_children[1])
    if isinstance(expr, Neg):
        return Neg(new_children[0])
    if isinstance(expr, Not):
        return Not(new_children[0])
    if isinstance(expr, Call):
        return Call(expr.func, tuple(new_children))
    if isinstance(expr, Select):
        return Select(*new_children)
    if isinstance(expr, Cast):
        return Cast(expr.dtype_, new_children[0])
    raise TypeError(f"not an expression: {expr!r}")


# -- text (metasched.ir.stmt prints loop programs with it) ------------------------------------
# Binding strength, loosest first, as in Python.
_PRECEDENCE = {
    "if": 0, "or": 1, "and": 2, "not": 3,
    "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
    "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6, "neg": 7, "atom": 8,
}


def _prec(e: Expr) -> int:
    if isinstance(e, BinOp) and e.op not in ("max", "min"):
        return _PRECEDENCE[e.op]
    if isinstance(e, Select):
        return _PRECEDENCE["if"]
    if isinstance(e, Not):
        return _PRECEDENCE["not"]
    if isinstance(e, Neg):
        return _PRECEDENCE["neg"]
    if isinstance(e, IntImm) and e.value < 0:
        return _PRECEDENCE["neg"]
    return _PRECEDENCE["atom"]


def _wrap(e: Expr, min_prec: int) -> str:
    text = expr_str(e)
    return f"({text})" if _prec(e) < min_prec else text


def expr_str(e: Expr) -> str:
    """One expression as Python-like text."""
    if isinstance(e, IntImm):
        return str(e.value)
    if isinstance(e, FloatImm):
        return repr(float(e.value))
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Load):
        return f"{e.buffer}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, BinOp):
        if e.op in ("max", "min"):
            return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
        p = _PRECEDENCE[e.op]
        # Left-associative: the right operand needs brackets at equal precedence.
        return f"{_wrap(e.a, p)} {e.op} {_wrap(e.b, p + 1)}"
    if isinstance(e, Neg):
        return f"-{_wrap(e.a, _PRECEDENCE['neg'])}"
    if isinstance(e, Not):
        return f"not {_wrap(e.a, _PRECEDENCE['not'])}"
    if isinstance(e, Call):
        return f"{e.func}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, Select):
        return f"{_wrap(e.true_value, 1)} if {_wrap(e.cond, 1)} else {_wrap(e.false_value, 0)}"
    if isinstance(e, Cast):
        return f"{e.dtype_}({expr_str(e.value)})"
    raise TypeError(f"not an expression: {e!r}")
