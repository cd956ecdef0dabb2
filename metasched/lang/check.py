"""The meaning of a workload's syntax tree: one pass from ``WorkloadDef`` to ``Workload``.

Map of this file:
  * ``check`` - the entry point: bind parameters, then walk the items in order.
  * ``_Checker`` - one namespace for parameters, lets, inputs and defined tensors; integer
    expressions (shapes, lets, ``require``, ``where`` bounds) evaluate to Python ints.
  * a statement: its left side, its ``where`` ranges, range inference from the loads, then the
    body is built as IR (values, indices, conditions) and every load is proven in bounds.
  * ``_facts``/``_narrow`` - what the condition of an ``a if c else b`` proves about each
    variable's interval in each branch.
  * the limits of ``limits.py``: every integer fits 64-bit code with room to spare, tensors and
    iteration domains stay below 2**62, and expressions nest at most ``MAX_DEPTH`` levels.
    Chains (``a + b + ...``) are read with loops, never recursion, and built as balanced trees.
Every error is a ``SourceError`` at the offending token (line 0: a keyword override, which has
no place in the text).
"""
from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass, replace
from typing import Mapping, Optional

import numpy as np

from metasched.ir.analysis import as_affine, free_vars, int_bounds, simplify, substitute, transform, walk
from metasched.ir.expr import (
    BINARY_CALLS, COMPARE_OPS, FLOAT_DTYPES, UNARY_CALLS,
    BinOp, Call, Cast, Expr, FloatImm, IntImm, Load, Neg, Not, Select, Var,
)
from metasched.lang.limits import (
    MAX_DEPTH, WHY_64_BITS, chain, chain_operands, check_depth, check_domain, check_item,
    check_size, fits, ir_depth, too_deep, too_large,
)
from metasched.lang.syntax import (
    Binary, CallExpr, Conditional, Expression, InputDecl, LetDecl, Name, Node, Number, Require,
    SourceError, StatementDef, Subscript, Unary, WorkloadDef, int_text, preorder, to_text,
)
from metasched.lang.workload import Axis, Statement, TensorDecl, Workload

REDUCE_OPS = {"=": None, "+=": "sum", "*=": "prod", "max=": "max", "min=": "min"}
FUNCTIONS = {**{f: 1 for f in UNARY_CALLS}, **{f: 2 for f in BINARY_CALLS}, "max": 2, "min": 2}
_INT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul,
            "//": operator.floordiv, "%": operator.mod}
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
            "==": operator.eq, "!=": operator.ne}
_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
Interval = tuple[int, int]  # inclusive


def _error(node: Node, message: str) -> SourceError:
    return SourceError(message, node.line, node.column)


def _op_error(node: Binary, message: str) -> SourceError:
    return SourceError(message, node.op_line, node.op_column)


def _shown(value: object) -> str:
    """A caller's value for a message, cut short if its repr is long."""
    text = int_text(value) if isinstance(value, int) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class _Symbol:
    kind: str  # "parameter", "let", "input" or "tensor"
    name: str
    line: int
    value: int = 0  # of a parameter or let
    shape: tuple[int, ...] = ()  # of a tensor

    def describe(self) -> str:
        return f"the {self.kind} {self.name} (line {self.line})"


def check(definition: WorkloadDef, params: Mapping[str, int], *, source: str = "",
          file: str = "<string>") -> Workload:
    """The ``Workload`` of one definition with ``params`` overriding parameter defaults.

    Raises ``SourceError`` for anything docs/language.md forbids, at the offending token."""
    return _Checker(definition).workload(params, source, file)


class _Checker:
    def __init__(self, definition: WorkloadDef) -> None:
        self.definition = definition
        self.names: dict[str, _Symbol] = {}
        # Every name the workload declares, also further down: using one before its declaration
        # is an error, not a fresh variable.
        self.declared: dict[str, Node] = {}
        for item in definition.items:
            if isinstance(item, (InputDecl, LetDecl)):
                self.declared.setdefault(item.name, item)
            elif isinstance(item, StatementDef):
                self.declared.setdefault(item.target, item)
        self.current: Optional[Node] = None
        self.dtype: Optional[str] = None
        self.first_input = ""
        self.inputs: list[TensorDecl] = []
        self.statements: list[Statement] = []
        self.intervals: dict[str, Interval] = {}
        # For each element-wise intermediate, how deep its body is counting what may be inlined
        # into it: a schedule may inline it into every statement that reads it.
        self.inlined_depth: dict[str, int] = {}

    def workload(self, overrides: Mapping[str, int], source: str, file: str) -> Workload:
        d = self.definition
        for p in d.params:
            self._check_free(p.name, p)
            if not fits(p.default.value):
                raise _error(p.default, too_large(f"parameter {p.name}", p.default.value))
            self.names[p.name] = _Symbol("parameter", p.name, p.line, value=p.default.value)
        for name, value in overrides.items():
            # An override comes from the caller, not the text: no position (line 0).
            if name not in self.names:
                known = ", ".join(p.name for p in d.params) or "none"
                raise SourceError(f"workload {d.name} has no parameter {name!r}; its parameters: "
                                  f"{known}", 0, 0)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise SourceError(f"parameter {name} must be an integer, got {_shown(value)}", 0, 0)
            if not fits(int(value)):
                raise SourceError(too_large(f"parameter {name} (given as an override)", int(value)), 0, 0)
            self.names[name] = replace(self.names[name], value=int(value))
        handlers = {InputDecl: self._input, LetDecl: self._let, Require: self._require,
                    StatementDef: self._statement}
        for item in d.items:
            self.current = item
            check_item(item)  # nesting and literals, before any recursive pass walks it
            handlers[type(item)](item)
        if not self.statements:
            raise _error(d, f"workload {d.name} has no statements: it computes nothing")
        if not any(s.is_output for s in self.statements):
            raise _error(d, f"workload {d.name} has no output: mark a statement with 'output'")
        params = {p.name: self.names[p.name].value for p in d.params}
        return Workload(d.name, params, tuple(self.inputs), tuple(self.statements),
                        source=source, file=file)

    # -- names ---------------------------------------------------------------------------------
    def _check_free(self, name: str, node: Node) -> None:
        old = self.names.get(name)
        if old is None:
            return
        if old.kind == "input" and isinstance(node, StatementDef):
            raise _error(node, f"cannot assign to the input {name} (line {old.line}): inputs are read-only")
        if old.kind == "tensor" and isinstance(node, StatementDef):
            raise _error(node, f"tensor {name} is already defined at line {old.line}")
        raise _error(node, f"{name!r} is already {old.describe()}")

    def _lookup(self, name: str, node: Node) -> Optional[_Symbol]:
        """The symbol a name refers to, or None for a variable."""
        symbol = self.names.get(name)
        if symbol is None and name in self.declared:
            where = self.declared[name]
            if where is self.current:
                raise _error(node, f"{name!r} is used in its own definition")
            raise _error(node, f"{name!r} is used before its definition at line {where.line}")
        return symbol

    def _resolve(self, node: Name) -> Optional[_Symbol]:
        """A name inside a statement: a parameter or let (its symbol), or a variable (None)."""
        symbol = self._lookup(node.name, node)
        if symbol is not None and symbol.kind in ("input", "tensor"):
            raise _error(node, f"{node.name!r} is {symbol.describe()}: a tensor is read with "
                               f"indices, {node.name}[...], and a variable may not reuse its name")
        return symbol

    def _tensor_shape(self, node: Subscript) -> tuple[int, ...]:
        symbol = self._lookup(node.name, node)
        if symbol is None:
            raise _error(node, f"unknown tensor {node.name!r}")
        if symbol.kind not in ("input", "tensor"):
            raise _error(node, f"{node.name!r} is {symbol.describe()}, not a tensor")
        if len(node.indices) != len(symbol.shape):
            raise _error(node, f"{node.name} has {len(symbol.shape)} dimension(s) but "
                               f"{to_text(node)} gives {len(node.indices)} index(es)")
        return symbol.shape

    # -- integer expressions -------------------------------------------------------------------
    def _int(self, node: Expression) -> int:
        if isinstance(node, Number):
            if isinstance(node.value, float):
                raise _error(node, f"expected an integer, not {node.value!r}")
            return node.value
        if isinstance(node, Name):
            symbol = self._lookup(node.name, node)
            if symbol is None:
                raise _error(node, f"unknown name {node.name!r}: integer expressions use parameters and lets")
            if symbol.kind in ("input", "tensor"):
                raise _error(node, f"{node.name!r} is {symbol.describe()}, not an integer")
            return symbol.value
        if isinstance(node, Unary) and node.op == "-":
            return -self._int(node.operand)
        if isinstance(node, Binary) and (node.op in _INT_OPS or node.op == "/"):
            # Python's integers are exact, so only the results (a let, a dimension, a bound)
            # need to fit; they are checked where they are used.
            first, links = chain_operands(node)
            value = self._int(first)
            for link, operand in links:
                if link.op == "/":
                    raise _op_error(link, "'/' divides values; integer expressions divide with '//'")
                right = self._int(operand)
                if link.op in ("//", "%") and right == 0:
                    raise _op_error(link, f"'{link.op}' by zero ({to_text(operand)} is 0)")
                value = _INT_OPS[link.op](value, right)
            return value
        raise _error(node, f"expected an integer expression, not {to_text(node)!r}")

    def _truth(self, node: Expression) -> bool:
        if isinstance(node, Binary) and node.op in _COMPARE:
            return _COMPARE[node.op](self._int(node.left), self._int(node.right))
        if isinstance(node, Binary) and node.op in ("and", "or"):
            first, links = chain_operands(node)
            holds = self._truth(first)
            for link, operand in links:  # short-circuit, as Python evaluates them
                if holds == (link.op == "or"):
                    break
                holds = self._truth(operand)
            return holds
        if isinstance(node, Unary) and node.op == "not":
            return not self._truth(node.operand)
        raise _error(node, f"expected a condition (a comparison), not {to_text(node)!r}")

    # -- items ---------------------------------------------------------------------------------
    def _input(self, item: InputDecl) -> None:
        self._check_free(item.name, item)
        dtype = item.dtype.name
        if dtype not in FLOAT_DTYPES:
            raise _error(item.dtype, f"unknown dtype {dtype!r}: the dtypes are float32 and float64")
        if self.dtype is None:
            self.dtype, self.first_input = dtype, item.name
        elif dtype != self.dtype:
            raise _error(item.dtype, f"input {item.name} is {dtype} but {self.first_input} is "
                                     f"{self.dtype}: all inputs of a workload share one dtype")
        shape = []
        for axis, dim in enumerate(item.dims):
            extent = self._int(dim)
            if extent < 1:
                raise _error(dim, f"dimension {axis + 1} of {item.name} is {int_text(extent)} "
                                  f"({to_text(dim)}); a dimension must be at least 1")
            if not fits(extent):
                raise _error(dim, too_large(f"dimension {axis + 1} of {item.name} ({to_text(dim)})", extent))
            shape.append(extent)
        check_size(item.name, tuple(shape), dtype, item.start_line, item.start_column)
        self.names[item.name] = _Symbol("input", item.name, item.line, shape=tuple(shape))
        self.inputs.append(TensorDecl(item.name, tuple(shape), dtype))

    def _let(self, item: LetDecl) -> None:
        self._check_free(item.name, item)
        value = self._int(item.value)
        if not fits(value):
            raise _error(item.value, too_large(f"let {item.name}", value))
        self.names[item.name] = _Symbol("let", item.name, item.line, value=value)

    def _require(self, item: Require) -> None:
        if not self._truth(item.cond):
            used = dict.fromkeys(n.name for n in preorder(item.cond) if isinstance(n, Name))
            values = ", ".join(f"{n} = {self.names[n].value}" for n in used)
            raise _error(item.cond, f"requirement failed: {to_text(item.cond)}"
                                    + (f" ({values})" if values else ""))

    def _statement(self, s: StatementDef) -> None:
        self._check_free(s.target, s)
        left = self._left_side(s)
        where = self._where(s)
        body_vars, places = self._scan(s.value)
        for name, rng in where.items():
            if name not in left and name not in body_vars:
                raise _error(rng[2], f"the where clause ranges {name!r}, which the statement does not use")
        ranges: dict[str, tuple[int, int]] = {}
        for name, first in {**left, **body_vars}.items():
            if name in where:  # stated outright, it may narrow a dimension; loads are checked below
                ranges[name] = where[name][:2]
            elif name in places:
                ranges[name] = (0, self._agreed_extent(name, places[name]))
            else:
                raise _error(first, f"cannot infer the range of variable {name!r}: it never indexes "
                                    f"a tensor dimension alone; give it with 'where {name} in lo..hi'")
        for name in left:
            if ranges[name][0] != 0:
                raise _error(where[name][2], f"{name!r} indexes the left side, so its range must "
                                             f"start at 0, not {ranges[name][0]}")
        reduce = [v for v in body_vars if v not in left]
        op = REDUCE_OPS[s.op]
        if op is None and reduce:
            raise _error(body_vars[reduce[0]], f"variable {reduce[0]!r} is not on the left side: to "
                                               f"combine over it use '+=', '*=', 'max=' or 'min='")
        if op is not None and not reduce:
            raise SourceError(f"'{s.op}' combines over the variables that are not on the left side, "
                              f"and there are none; use '='", s.op_line, s.op_column)
        axes = tuple(Axis(v, ranges[v][1]) for v in left)
        reduce_axes = tuple(Axis(v, ranges[v][1] - ranges[v][0]) for v in reduce)
        check_size(s.target, tuple(a.extent for a in axes), self._dtype(), s.start_line, s.start_column)
        check_domain(s.target, axes + reduce_axes, s.start_line, s.start_column)
        self.intervals = {v: (lo, hi - 1) for v, (lo, hi) in ranges.items()}
        body = self._value(s.value, None)
        check_depth(body, s.value)  # before the recursive passes below walk it
        # A reduction variable ranging over lo..hi becomes an axis of extent hi - lo from 0.
        shift = {v: BinOp("+", Var(v), IntImm(ranges[v][0])) for v in reduce if ranges[v][0]}
        body = transform(substitute(body, shift), _tidy)
        statement = Statement(s.target, axes, reduce_axes, op, body, self._dtype(), s.output, s.line)
        self._check_inlined_depth(s, statement)
        self.names[s.target] = _Symbol("tensor", s.target, s.line, shape=statement.shape)
        self.statements.append(statement)

    def _check_inlined_depth(self, s: StatementDef, statement: Statement) -> None:
        """A schedule may inline an element-wise intermediate into each statement that reads it,
        which stacks the two bodies: the deepest such stack must stay within ``MAX_DEPTH``."""
        own = ir_depth(statement.body)
        deepest, via = own, None
        for name in statement.reads():
            if name in self.inlined_depth and own + self.inlined_depth[name] > deepest:
                deepest, via = own + self.inlined_depth[name], name
        if deepest > MAX_DEPTH:
            inlined = ("" if via is None else
                       f" counting the element-wise tensor {via} (line {self.names[via].line}) that it "
                       f"reads, which a schedule may inline into it")
            raise _error(s.value, too_deep(deepest, inlined))
        if not statement.is_output and not statement.is_reduction:
            self.inlined_depth[s.target] = deepest

    def _dtype(self) -> str:
        return self.dtype or "float32"  # a workload without inputs computes in float32

    # -- a statement's variables ---------------------------------------------------------------
    def _left_side(self, s: StatementDef) -> dict[str, Name]:
        names: dict[str, Name] = {}
        for index in s.indices:
            if not isinstance(index, Name):
                raise _error(index, f"the left side must index with distinct bare variables; "
                                    f"{to_text(index)!r} is not a variable")
            symbol = self._lookup(index.name, index)
            if symbol is not None:
                raise _error(index, f"the left side must index with variables, and {index.name!r} "
                                    f"is {symbol.describe()}")
            if index.name in names:
                raise _error(index, f"variable {index.name!r} appears twice on the left side")
            names[index.name] = index
        return names

    def _where(self, s: StatementDef) -> dict[str, tuple[int, int, Node]]:
        out: dict[str, tuple[int, int, Node]] = {}
        for rng in s.ranges:
            symbol = self._lookup(rng.var, rng)
            if symbol is not None:
                raise _error(rng, f"{rng.var!r} is {symbol.describe()}; a variable may not reuse its name")
            if rng.var in out:
                raise _error(rng, f"a second range for {rng.var!r}")
            lo, hi = self._int(rng.lo), self._int(rng.hi)
            for bound, value in ((rng.lo, lo), (rng.hi, hi)):
                if not fits(value):
                    raise _error(bound, too_large(f"the bound {to_text(bound)} of {rng.var}", value))
            if hi <= lo:
                raise _error(rng, f"the range {rng.var} in {lo}..{hi} is empty")
            out[rng.var] = (lo, hi, rng)
        return out

    def _scan(self, value: Expression) -> tuple[dict[str, Name], dict[str, list]]:
        """The body's variables (first occurrence of each, in text order), and for each variable
        the places where it alone indexes a dimension: (extent, the name, the load)."""
        variables: dict[str, Name] = {}
        places: dict[str, list] = {}
        for node in preorder(value):
            if isinstance(node, Name) and self._resolve(node) is None:
                variables.setdefault(node.name, node)
            elif isinstance(node, Subscript):
                shape = self._tensor_shape(node)
                for index, extent in zip(node.indices, shape):
                    if isinstance(index, Name) and self._resolve(index) is None:
                        places.setdefault(index.name, []).append((extent, index, node))
        return variables, places

    @staticmethod
    def _agreed_extent(name: str, places: list) -> int:
        extent, first, load = places[0]
        for other, node, other_load in places[1:]:
            if other != extent:
                raise _error(node, f"variable {name!r} ranges over 0..{other} in {to_text(other_load)} "
                                   f"but over 0..{extent} in {to_text(load)} (line {first.line}, "
                                   f"column {first.column})")
        return extent

    # -- building the body ---------------------------------------------------------------------
    def _value(self, node: Expression, facts: Optional[tuple[Expr, ...]]) -> Expr:
        """A value expression; ``facts`` are the comparisons known to hold where it is evaluated
        (None outside every conditional)."""
        dtype = self._dtype()
        if isinstance(node, Number):
            return FloatImm(self._float_literal(node), dtype)
        if isinstance(node, Name):
            symbol = self._resolve(node)
            if symbol is None:
                # An index variable used as a value: a cast of the loop counter, handy for masks
                # and ramps (docs/language.md, "Expressions").
                return Cast(dtype, Var(node.name))
            return FloatImm(float(symbol.value), dtype)
        if isinstance(node, Subscript):
            return self._load(node, facts)
        if isinstance(node, CallExpr):
            arity = FUNCTIONS.get(node.func)
            if arity is None:
                raise _error(node, f"unknown function {node.func!r}; the functions are "
                                   f"{', '.join(sorted(FUNCTIONS))}")
            if len(node.args) != arity:
                raise _error(node, f"{node.func} takes {arity} argument{'s' * (arity > 1)}, "
                                   f"got {len(node.args)}")
            args = tuple(self._value(a, facts) for a in node.args)
            return BinOp(node.func, *args) if node.func in ("max", "min") else Call(node.func, args)
        if isinstance(node, Unary) and node.op == "-":
            inner = self._value(node.operand, facts)
            return FloatImm(-inner.value, dtype) if isinstance(inner, FloatImm) else Neg(inner)
        if isinstance(node, Binary) and node.op in ("+", "-", "*", "/", "//", "%"):
            first, links = chain_operands(node)
            start = self._value(first, facts)
            built = []
            for link, operand in links:  # in text order, so the first mistake is reported
                if link.op in ("//", "%"):
                    raise _op_error(link, f"'{link.op}' is for integer indices; values divide with '/'")
                built.append((link.op, self._value(operand, facts)))
            # Regrouping a long chain changes only the rounding, as a reordered reduction does.
            pair = ("+", "-") if node.op in ("+", "-") else ("*", "/")
            return chain(start, built, BinOp, pair)
        if isinstance(node, Conditional):
            cond = self._cond(node.cond)
            known = facts or ()
            return Select(cond, self._value(node.then, known + _facts(cond, True)),
                          self._value(node.otherwise, known + _facts(cond, False)))
        raise _error(node, f"the condition {to_text(node)!r} is not a value; use it in "
                           f"'a if condition else b'")

    def _load(self, node: Subscript, facts: Optional[tuple[Expr, ...]]) -> Load:
        shape = self._tensor_shape(node)
        indices = tuple(self._index(index) for index in node.indices)
        intervals = _narrow(self.intervals, facts or ())
        if intervals is not None:  # None: the guard never holds, so the load never happens
            for axis, (index, extent) in enumerate(zip(indices, shape)):
                lo, hi = int_bounds(index, intervals)
                if lo < 0 or hi >= extent:
                    why = (" even where its condition holds" if facts is not None else
                           "; only a load in a branch of 'a if condition else b' that excludes "
                           "the outside may reach past a tensor's edge")
                    raise _error(node, f"{to_text(node)} may read outside {node.name}: index "
                                       f"{axis + 1} ({to_text(node.indices[axis])}) runs over "
                                       f"{lo}..{hi} but the dimension holds 0..{extent - 1}{why}")
        return Load(node.name, indices, self._dtype())

    def _float_literal(self, node: Number) -> float:
        """A number used as a value must be finite in the workload's dtype (a literal that
        overflows would silently be infinite)."""
        value = float(node.value)
        largest = float(np.finfo(self._dtype()).max)
        if not abs(value) <= largest:
            raise _error(node, f"the number {to_text(node)} is too large for {self._dtype()} "
                               f"(the largest is {largest:.8g})")
        return value

    def _index(self, node: Expression, role: str = "an index") -> Expr:
        """An index expression (or a side of a comparison) as simplified IR; every part of it
        keeps within the 64-bit range where its variables range."""
        built = self._index_expr(node, role)
        check_depth(built, node)  # before simplify walks it recursively
        index = simplify(built)
        # What generated code computes is the simplified form, over the variables' full ranges
        # (a vector lane or a guarded iteration may compute an index it never loads).
        for part in walk(index):
            lo, hi = int_bounds(part, self.intervals)
            if not (fits(lo) and fits(hi)):
                where = "" if part is index else f" (its part {part} runs over {int_text(lo)}..{int_text(hi)})"
                raise _error(node, f"{role} {to_text(node)!r} can reach beyond 64-bit integers{where}: "
                                   f"{WHY_64_BITS}")
        return index

    def _index_expr(self, node: Expression, role: str) -> Expr:
        if isinstance(node, Number):
            if isinstance(node.value, float):
                raise _error(node, f"{role} must be an integer, not {node.value!r}")
            return IntImm(node.value)
        if isinstance(node, Name):
            symbol = self._resolve(node)
            return Var(node.name) if symbol is None else IntImm(symbol.value)
        if isinstance(node, Unary) and node.op == "-":
            return Neg(self._index_expr(node.operand, role))
        if isinstance(node, Binary) and (node.op in _INT_OPS or node.op == "/"):
            return self._index_chain(node, role)
        if isinstance(node, Subscript):
            raise _error(node, f"{role} cannot read a tensor ({to_text(node)})")
        if isinstance(node, CallExpr):
            raise _error(node, f"{role} cannot call a function ({node.func})")
        raise _error(node, f"{to_text(node)!r} cannot be part of {role}")

    def _index_chain(self, node: Binary, role: str) -> Expr:
        """``x0 op x1 op x2 ...`` of one precedence level in an index, checked operator by
        operator from the left as it is written."""
        first, links = chain_operands(node)
        start = self._index_expr(first, role)
        has_vars = bool(free_vars(start))  # of everything left of the current operator
        built = []
        for link, operand in links:
            if link.op == "/":
                raise _op_error(link, f"'/' divides values; {role} divides with '//'")
            right = self._index_expr(operand, role)
            right_vars = bool(free_vars(right))
            if link.op == "*" and has_vars and right_vars:
                raise _op_error(link, f"{role} must be affine in the variables, but "
                                      f"{to_text(link)!r} multiplies two of them")
            if link.op in ("//", "%"):
                if right_vars:
                    raise _op_error(link, f"'{link.op}' needs a positive constant divisor, "
                                          f"not {to_text(operand)!r}")
                divisor = simplify(right)
                if not isinstance(divisor, IntImm) or divisor.value <= 0:
                    raise _op_error(link, f"'{link.op}' needs a positive divisor, but "
                                          f"{to_text(operand)} is {divisor}")
            has_vars = has_vars or right_vars
            built.append((link.op, right))
        ops = {op for op, _ in built}
        if ops <= {"+", "-"}:
            return chain(start, built, BinOp, ("+", "-"))
        if ops == {"*"}:
            return chain(start, built, BinOp)  # integer products regroup exactly
        result = start  # `//` and `%` do not regroup: left to right, as written
        for op, right in built:
            result = BinOp(op, result, right)
        return result

    def _cond(self, node: Expression) -> Expr:
        if isinstance(node, Binary) and node.op in COMPARE_OPS:
            return BinOp(node.op, self._index(node.left, "a condition"),
                         self._index(node.right, "a condition"))
        if isinstance(node, Binary) and node.op in ("and", "or"):
            first, links = chain_operands(node)
            start = self._cond(first)
            return chain(start, [(link.op, self._cond(operand)) for link, operand in links], BinOp)
        if isinstance(node, Unary) and node.op == "not":
            return Not(self._cond(node.operand))
        raise _error(node, f"expected a condition comparing index expressions, not {to_text(node)!r}")


def _tidy(node: Expr) -> Optional[Expr]:
    """Canonical index expressions (after the shift of reduction variables)."""
    if isinstance(node, Load):
        return Load(node.buffer, tuple(simplify(i) for i in node.indices), node.dtype_)
    if isinstance(node, BinOp) and node.op in COMPARE_OPS:
        return BinOp(node.op, simplify(node.a), simplify(node.b))
    if isinstance(node, Cast):
        return Cast(node.dtype_, simplify(node.value))
    return None


def _facts(cond: Expr, holds: bool) -> tuple[Expr, ...]:
    """Comparisons that are certainly true where ``cond`` is ``holds`` (a sound subset:
    ``a and b`` when true gives both, ``a or b`` when false gives both negated)."""
    if isinstance(cond, Not):
        return _facts(cond.a, not holds)
    if isinstance(cond, BinOp) and cond.op in COMPARE_OPS:
        return (cond,) if holds else (BinOp(_NEGATED[cond.op], cond.a, cond.b),)
    if isinstance(cond, BinOp) and cond.op == ("and" if holds else "or"):
        return _facts(cond.a, holds) + _facts(cond.b, holds)
    return ()


def _narrow(intervals: Mapping[str, Interval], facts: tuple[Expr, ...]) -> Optional[dict[str, Interval]]:
    """Each variable's interval under ``facts``, or None if the facts cannot all hold.

    Only facts ``c * v + k CMP 0`` in a single variable narrow; ignoring the others is sound
    (the intervals only stay wider)."""
    out = dict(intervals)
    for fact in facts:
        form = as_affine(BinOp("-", fact.a, fact.b))
        if form is None or len(form[0]) != 1 or fact.op == "!=":
            continue
        (name, c), k = next(iter(form[0].items())), form[1]
        lo, hi = out[name]
        # `c*v + k < 0` is `c*v <= -1 - k`; dividing by a negative c turns the bound around.
        upper = {"<": -1, "<=": 0, "==": 0}.get(fact.op)
        lower = {">": 1, ">=": 0, "==": 0}.get(fact.op)
        if upper is not None:  # c*v <= upper - k
            if c > 0:
                hi = min(hi, (upper - k) // c)
            else:
                lo = max(lo, _ceil_div(upper - k, c))
        if lower is not None:  # c*v >= lower - k
            if c > 0:
                lo = max(lo, _ceil_div(lower - k, c))
            else:
                hi = min(hi, (lower - k) // c)
        if lo > hi:
            return None
        out[name] = (lo, hi)
    return out


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)
