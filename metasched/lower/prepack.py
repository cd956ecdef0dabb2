"""Copies of constant inputs taken out of a loop program, to be made once (TVM's RewriteLayout).

A schedule often copies a weight into a buffer of another layout before reading it (a packed
panel of a matrix product, a convolution's weights transposed): ``cache_read`` with
``compute_at`` and ``transform_layout``. When that input is a constant of a network, the copy
gives the same values in every call. ``hoist_constant_copies`` splits such a program in two: a
*pack* program that makes every copy the kernel would make, into one array whose leading axes
are the loops the copy depends on, and the kernel, which reads that array instead and no
longer copies. The network runs each pack program once, when it binds its weights.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

from metasched.ir import (
    Allocate, Buffer, Expr, For, ForKind, IfThenElse, Load, Not, PrimFunc, Seq, Stmt, Store, Var, free_vars, loads,
    seq, transform,
)

# A packed array may hold at most this many times the elements of the constants it copies
# (what an imperfect tile pads); more means the copies repeat the same values.
MAX_GROWTH = 1.5


@dataclass(frozen=True)
class Packing:
    """One hoisted copy: ``func`` reads ``sources`` (the kernel's constant inputs, by name)
    and writes ``packed``, which the kernel now takes as an input after its others."""

    func: PrimFunc
    sources: tuple[str, ...]
    packed: Buffer


@dataclass(frozen=True)
class Prepacked:
    """A kernel whose constant copies are hoisted (``kernel``) and what makes its extra
    inputs (``packings``, in the order the kernel takes them)."""

    kernel: PrimFunc
    packings: tuple[Packing, ...]


def hoist_constant_copies(func: PrimFunc, constants: Sequence[str]) -> Prepacked:
    """``func`` with every copy of inputs named in ``constants`` that can be made once taken
    out, one at a time. A copy qualifies when it is a statement of a sequence that no
    earlier statement of it touches its buffer (a scratch or workspace buffer), it alone
    writes that buffer, only the statements after it in that sequence read it, it reads
    nothing but constants, and the guards it runs under read only the loops it depends on
    (the packed array's leading axes)."""
    packings: list[Packing] = []
    constants = frozenset(b.name for b in func.inputs if b.name in constants)
    while True:
        found = _first_copy(func, constants, len(packings))
        if found is None:
            return Prepacked(func, tuple(packings))
        func, packing = found
        packings.append(packing)


def _first_copy(func: PrimFunc, constants: frozenset[str], number: int) -> Optional[tuple[PrimFunc, Packing]]:
    scratch = {b.name: b for b in func.workspaces}
    for path, sequence, k in _sequences(func.body, []):
        copy = sequence.stmts[k]
        target = _copy_target(copy, constants)
        if target is None:
            continue
        buffer = scratch.get(target) or next((s.buffer for s in path if isinstance(s, Allocate)
                                              and s.buffer.name == target), None)
        if buffer is None or any(target in _buffers_in(s) for s in sequence.stmts[:k]):
            continue
        if _count(func.body, target) != _count(Seq(sequence.stmts[k:]), target):
            continue  # written or read outside this sequence
        if _stores(func.body, target) != _stores(copy, target):
            continue  # written by another statement too
        made = _packing(func, path, copy, buffer, number)
        if made is None:
            continue
        packing, index = made
        body = _rewrite(func.body, sequence, k, buffer.name, packing.packed.name, index)
        kernel = PrimFunc(func.name, func.inputs + (packing.packed,), func.outputs,
                          tuple(b for b in func.workspaces if b.name != buffer.name), body, func.attrs)
        return kernel, packing
    return None


def _sequences(stmt: Stmt, path: list[Stmt]) -> Iterator[tuple[list[Stmt], Seq, int]]:
    """Every (enclosing For/IfThenElse/Allocate nodes, sequence, position) of the tree; an
    else branch's guard is on the path with its condition negated."""
    if isinstance(stmt, Seq):
        for k, inner in enumerate(stmt.stmts):
            yield path, stmt, k
            yield from _sequences(inner, path)
    elif isinstance(stmt, (For, Allocate)):
        yield from _sequences(stmt.body, path + [stmt])
    elif isinstance(stmt, IfThenElse):
        yield from _sequences(stmt.then_body, path + [stmt])
        if stmt.else_body is not None:  # on the path as the guard it runs under
            yield from _sequences(stmt.else_body, path + [IfThenElse(Not(stmt.cond), stmt.else_body)])


def _copy_target(stmt: Stmt, constants: frozenset[str]) -> Optional[str]:
    """The buffer ``stmt`` writes if it is a copy: loops, guards and stores to one buffer of
    values that load constants only (and at least one)."""
    targets, read = set(), set()
    for node in _nodes(stmt):
        if isinstance(node, Store):
            targets.add(node.buffer)
            read.update(load.buffer for load in loads(node.value))
        elif not isinstance(node, (For, IfThenElse, Seq)):
            return None
    if len(targets) != 1 or not read or not read <= constants:
        return None
    return targets.pop()


def _nodes(stmt: Stmt) -> Iterator[Stmt]:
    yield stmt
    if isinstance(stmt, Seq):
        for inner in stmt.stmts:
            yield from _nodes(inner)
    elif isinstance(stmt, (For, Allocate)):
        yield from _nodes(stmt.body)
    elif isinstance(stmt, IfThenElse):
        yield from _nodes(stmt.then_body)
        if stmt.else_body is not None:
            yield from _nodes(stmt.else_body)


def _buffers_in(stmt: Stmt) -> set[str]:
    names = set()
    for node in _nodes(stmt):
        if isinstance(node, Store):
            names.add(node.buffer)
            names.update(load.buffer for load in loads(node.value))
        elif isinstance(node, IfThenElse):
            names.update(load.buffer for load in loads(node.cond))
    return names


def _count(stmt: Stmt, name: str) -> int:
    """How many stores to and loads of ``name`` ``stmt`` holds."""
    total = 0
    for node in _nodes(stmt):
        if isinstance(node, Store):
            total += (node.buffer == name) + sum(load.buffer == name for load in loads(node.value))
        elif isinstance(node, IfThenElse):
            total += sum(load.buffer == name for load in loads(node.cond))
    return total


def _stores(stmt: Stmt, name: str) -> int:
    return sum(isinstance(node, Store) and node.buffer == name for node in _nodes(stmt))


def _own_vars(stmt: Stmt) -> set[str]:
    return {node.var for node in _nodes(stmt) if isinstance(node, For)}


def _free_vars(stmt: Stmt) -> set[str]:
    names = set()
    for node in _nodes(stmt):
        if isinstance(node, Store):
            names.update(free_vars(node.value))
            for index in node.indices:
                names.update(free_vars(index))
        elif isinstance(node, IfThenElse):
            names.update(free_vars(node.cond))
    return names - _own_vars(stmt)


def _packing(func: PrimFunc, path: Sequence[Stmt], copy: Stmt, buffer: Buffer,
             number: int) -> Optional[tuple[Packing, tuple[Expr, ...]]]:
    """The pack program of ``copy`` and the index of the packed array's leading axes (the
    enclosing loops the copied values depend on, outermost first)."""
    used = _free_vars(copy)
    loops = [s for s in path if isinstance(s, For) and s.var in used]
    if used - {s.var for s in loops}:
        return None  # reads a variable no enclosing loop defines
    guards = [s for s in path if isinstance(s, IfThenElse)]
    if any(not set(free_vars(g.cond)) <= used for g in guards):
        return None  # runs for only some values of a loop it does not depend on
    sources = sorted({load.buffer for node in _nodes(copy) if isinstance(node, Store) for load in loads(node.value)})
    inputs = {b.name: b for b in func.inputs}
    packed = Buffer(f"{buffer.name}_packed{number}", tuple(s.extent for s in loops) + buffer.shape, buffer.dtype)
    if packed.size > MAX_GROWTH * sum(inputs[name].size for name in sources):
        return None
    index = tuple(Var(s.var) for s in loops)
    body = _retarget(copy, buffer.name, packed.name, index)
    # The enclosing loops and guards, serial, in their order (a guard reads only these loops).
    for node in reversed([s for s in path if s in loops or s in guards]):
        if isinstance(node, For):
            body = For(node.var, node.extent, ForKind.SERIAL, body)
        else:
            body = IfThenElse(node.cond, body)
    pack = PrimFunc(f"{func.name}_pack{number}", tuple(inputs[name] for name in sources), (packed,), (), body)
    return Packing(pack, tuple(sources), packed), index


def _retarget(stmt: Stmt, name: str, packed: str, index: tuple[Expr, ...]) -> Stmt:
    """``stmt`` with its stores to ``name`` made to ``packed`` at ``index`` + their indices."""
    if isinstance(stmt, Store):
        return Store(packed, index + stmt.indices, stmt.value) if stmt.buffer == name else stmt
    if isinstance(stmt, Seq):
        return Seq(tuple(_retarget(s, name, packed, index) for s in stmt.stmts))
    if isinstance(stmt, For):
        return For(stmt.var, stmt.extent, stmt.kind, _retarget(stmt.body, name, packed, index), stmt.annotations)
    if isinstance(stmt, IfThenElse):
        else_body = None if stmt.else_body is None else _retarget(stmt.else_body, name, packed, index)
        return IfThenElse(stmt.cond, _retarget(stmt.then_body, name, packed, index), else_body)
    raise TypeError(f"a copy holds no {type(stmt).__name__}")


def _rewrite(stmt: Stmt, sequence: Seq, k: int, name: str, packed: str, index: tuple[Expr, ...]) -> Stmt:
    """The kernel's body: the copy (``sequence``'s statement ``k``) gone, the buffer's
    allocation gone, its loads reading ``packed`` at ``index`` + their indices."""
    def reads(expr: Expr) -> Expr:
        return transform(expr, lambda e: Load(packed, index + e.indices, e.dtype_)
                         if isinstance(e, Load) and e.buffer == name else None)

    def visit(s: Stmt) -> Stmt:
        if s is sequence:
            return seq(*(visit(inner) for j, inner in enumerate(s.stmts) if j != k))
        if isinstance(s, Store):
            return Store(s.buffer, s.indices, reads(s.value))
        if isinstance(s, Seq):
            return seq(*(visit(inner) for inner in s.stmts))
        if isinstance(s, For):
            return For(s.var, s.extent, s.kind, visit(s.body), s.annotations)
        if isinstance(s, IfThenElse):
            return IfThenElse(reads(s.cond), visit(s.then_body), None if s.else_body is None else visit(s.else_body))
        if isinstance(s, Allocate):
            body = visit(s.body)
            return body if s.buffer.name == name else Allocate(s.buffer, body)
        raise TypeError(f"unknown statement {type(s).__name__}")

    return visit(stmt)
