"""What a statement touches: flattened element offsets, offsets as ``coefficient * var + rest``,
and the buffers, variables, loads and stores inside a statement tree. Code generation and the
schedule verifier (``metasched.space.postproc``) read programs through these, so that they
agree on what an access is."""
from __future__ import annotations

import functools

from typing import Iterator, Optional

from metasched.ir.analysis import free_vars, loads
from metasched.ir.expr import BinOp, Expr, IntImm, Load, Neg, Var
from metasched.ir.stmt import Allocate, Buffer, For, IfThenElse, Seq, Stmt, Store
from metasched.errors import CodegenError


# An index expression as a linear combination of atoms: {atom: coefficient}, where an atom is
# a variable or a non-linear node (``//``, ``%``, ``max``...) and the key None holds the constant.
Terms = dict[Optional[Expr], int]


def flat_index(buffer: Buffer, indices: tuple[Expr, ...]) -> Expr:
    """The row-major element offset of ``buffer[indices]`` as one canonical index expression."""
    return canonical(_flat_sum(buffer, indices))


@functools.lru_cache(maxsize=1 << 12)
def offset_in(buffer: Buffer, indices: tuple[Expr, ...], var: str) -> Optional[tuple[int, Expr]]:
    """``linear_in(flat_index(buffer, indices), var)``, from the terms of the offset read
    once (the terms of a canonical expression are those it was made of). Memoised: a
    reduction's update loads the element it stores, with the same indices."""
    return _linear(index_terms(_flat_sum(buffer, indices)), var)


def _flat_sum(buffer: Buffer, indices: tuple[Expr, ...]) -> Expr:
    """``sum(index * stride)``, the offset of ``buffer[indices]`` before it is canonical."""
    if len(indices) != len(buffer.shape):
        raise CodegenError(f"{buffer.name} has {len(buffer.shape)} dimensions, "
                         f"indexed with {len(indices)}")
    total: Expr = IntImm(0)
    for index, stride in zip(indices, buffer.strides):
        total = BinOp("+", total, BinOp("*", index, IntImm(stride)))
    return total


@functools.lru_cache(maxsize=1 << 14)
def canonical(expr: Expr) -> Expr:
    """An equal index expression in canonical form: a sum of ``coefficient * atom`` in a fixed
    order, in which ``(a // c) * c + a % c`` has become ``a`` (what flattening the indices of a
    fused loop produces; recognising it turns gathers back into contiguous accesses).
    Memoised, as ``linear_in`` is: code generation asks both of the same indices again and
    again (each unrolled copy of a loop body holds the same expressions)."""
    return from_terms(index_terms(expr))


@functools.lru_cache(maxsize=1 << 14)
def linear_in(expr: Expr, var: str) -> Optional[tuple[int, Expr]]:
    """``expr`` as ``coefficient * var + rest`` with an int coefficient and ``rest`` free of
    ``var``, or None when ``var`` enters non-linearly (``//``, ``%``, ``max``, a product with a
    non-constant). ``rest`` may hold any expression of the other variables."""
    return _linear(index_terms(expr), var)


def _linear(terms: Terms, var: str) -> Optional[tuple[int, Expr]]:
    """``linear_in`` of the expression of ``terms`` (which it takes apart)."""
    coefficient = terms.pop(Var(var), 0)
    if any(atom is not None and var in free_vars(atom) for atom in terms):
        return None
    return coefficient, from_terms(terms)


def from_terms(terms: Terms) -> Expr:
    """The expression of ``terms``: the atoms in a fixed order (by ``repr``), each times its
    coefficient, then the constant. Memoised by the terms: bound inference makes the same
    region starts from the terms of sample after sample, and the expressions it hands out
    are then the same objects, whose hashes are known (their uses are memoised too)."""
    return _from_terms(frozenset(terms.items()))


@functools.lru_cache(maxsize=1 << 14)
def _from_terms(items: frozenset[tuple[Optional[Expr], int]]) -> Expr:
    terms = dict(items)
    total: Optional[Expr] = None
    for atom in sorted((a for a in terms if a is not None), key=repr):
        k = terms[atom]
        term = atom if k == 1 else BinOp("*", atom, IntImm(k))
        total = term if total is None else BinOp("+", total, term)
    constant = terms.get(None, 0)
    if total is None:
        return IntImm(constant)
    return BinOp("+", total, IntImm(constant)) if constant else total


def index_terms(e: Expr) -> Terms:
    """The linear combination of atoms equal to the index expression ``e`` (a new dict)."""
    kind = type(e)
    if kind is Var:
        return {e: 1}
    if kind is IntImm:
        return {None: e.value} if e.value else {}
    if kind is Neg:
        return _scaled(index_terms(e.a), -1)
    if kind is not BinOp or e.dtype != "int64":
        return {e: 1}
    return dict(_binop_terms(e))


@functools.lru_cache(maxsize=1 << 14)
def _binop_terms(e: BinOp) -> Terms:
    """``index_terms`` of an index ``BinOp``, kept unchanged (``index_terms`` hands out
    copies). Memoised: lowering, the postprocessors and the features take apart the same
    indices, and offsets made of them, again and again; a sum's terms then come from those of
    its operands, known already."""
    a, b = index_terms(e.a), index_terms(e.b)
    if e.op in ("+", "-"):
        add_terms(a, b, 1 if e.op == "+" else -1)  # ``a`` is a new dict: merged in place
        return _fold_div_mod_pairs(a)
    b_const, a_const = _constant(b), _constant(a)
    if e.op == "*" and (b_const is not None or a_const is not None):
        return _scaled(a, b_const) if b_const is not None else _scaled(b, a_const)
    if e.op in ("//", "%") and b_const is not None and b_const > 0:
        if a_const is not None:
            value = a_const // b_const if e.op == "//" else a_const % b_const
            return {None: value} if value else {}
        if b_const == 1:
            return a if e.op == "//" else {}
        inner = from_terms(a)
        if (e.op == "//" and isinstance(inner, BinOp) and inner.op == "//"
                and isinstance(inner.b, IntImm) and inner.b.value > 0):
            # (x // c) // d == x // (c * d) for positive c, d
            return {BinOp("//", inner.a, IntImm(inner.b.value * b_const)): 1}
        return {BinOp(e.op, inner, IntImm(b_const)): 1}
    return {BinOp(e.op, from_terms(a), from_terms(b)): 1}


def _constant(terms: Terms) -> Optional[int]:
    """The value of ``terms`` if they hold no atom (only the constant), else None."""
    if not terms:
        return 0
    return terms[None] if len(terms) == 1 and None in terms else None


def _scaled(terms: Terms, k: int) -> Terms:
    return {atom: c * k for atom, c in terms.items()} if k else {}


def add_terms(into: Terms, terms: Terms, scale: int) -> None:
    """``into += scale * terms``, dropping the atoms that cancel."""
    for atom, c in terms.items():
        total = into.get(atom, 0) + scale * c
        if total:
            into[atom] = total
        else:
            into.pop(atom, None)


def _fold_div_mod_pairs(terms: Terms) -> Terms:
    """Replace ``k * (y % c) + k*c * (y // c)`` by ``k * y`` until none is left."""
    # Checked at every ``+`` of a sum: most hold no such pair, and a pair needs both kinds.
    ops = {atom.op for atom in terms if isinstance(atom, BinOp)}
    if "%" not in ops or "//" not in ops:
        return terms
    changed = True
    while changed:
        changed = False
        for atom, k in list(terms.items()):
            if not (isinstance(atom, BinOp) and atom.op == "%" and isinstance(atom.b, IntImm)):
                continue
            y, c = atom.a, atom.b.value
            if isinstance(y, BinOp) and y.op == "//" and isinstance(y.b, IntImm) and y.b.value > 0:
                partner = BinOp("//", y.a, IntImm(y.b.value * c))
            else:
                partner = BinOp("//", y, IntImm(c))
            if terms.get(partner) == k * c:
                del terms[atom], terms[partner]
                add_terms(terms, index_terms(y), k)
                changed = True
                break
    return terms


def sub_stmts(s: Stmt) -> Iterator[Stmt]:
    """``s`` and every statement inside it, parents first."""
    stack = [s]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, Seq):
            stack.extend(reversed(node.stmts))
        elif isinstance(node, (For, Allocate)):
            stack.append(node.body)
        elif isinstance(node, IfThenElse):
            if node.else_body is not None:
                stack.append(node.else_body)
            stack.append(node.then_body)


def stmt_exprs(s: Stmt) -> Iterator[Expr]:
    """The expressions a statement tree evaluates (conditions, indices, stored values)."""
    for node in sub_stmts(s):
        if isinstance(node, Store):
            yield from node.indices
            yield node.value
        elif isinstance(node, IfThenElse):
            yield node.cond


def stmt_loads(s: Stmt) -> Iterator[Load]:
    """Every load in a statement tree, in the order of ``stmt_exprs`` and ``walk``. Only
    stored values read tensors (indices and conditions are index expressions)."""
    for node in sub_stmts(s):
        if isinstance(node, Store):
            yield from loads(node.value)


def used_names(s: Stmt) -> tuple[set[str], set[str]]:
    """(buffers read or written, variables read) anywhere in ``s``."""
    buffers = {node.buffer for node in sub_stmts(s) if isinstance(node, Store)}
    buffers |= {load.buffer for load in stmt_loads(s)}
    variables: set[str] = set()
    for e in stmt_exprs(s):
        variables |= free_vars(e)
    return buffers, variables
