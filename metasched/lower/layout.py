"""Buffer layouts: an intermediate buffer stored with its dimensions in another order
(``Schedule.transform_layout``). Lowering builds the program in each statement's own index
order, then ``permuted`` reorders the indices of every access to such a buffer and the shape
of its allocation, so that no other pass needs to know of layouts."""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from metasched.ir.analysis import transform
from metasched.ir.expr import Expr, Load
from metasched.ir.stmt import Allocate, Buffer, For, IfThenElse, PrimFunc, Seq, Stmt, Store

Layouts = Mapping[str, tuple[int, ...]]


def reordered(items: Sequence, order: Sequence[int]) -> tuple:
    """``items`` in ``order``: dimension ``k`` of the result is ``items[order[k]]``."""
    return tuple(items[k] for k in order)


def permuted(func: PrimFunc, layouts: Layouts) -> PrimFunc:
    """``func`` with each buffer named in ``layouts`` stored in that order of its dimensions."""
    if not layouts:
        return func
    workspaces = tuple(_buffer(b, layouts) for b in func.workspaces)
    return dataclasses.replace(func, workspaces=workspaces, body=_stmt(func.body, layouts))


def _buffer(buffer: Buffer, layouts: Layouts) -> Buffer:
    order = layouts.get(buffer.name)
    return buffer if order is None else Buffer(buffer.name, reordered(buffer.shape, order), buffer.dtype)


def _expr(e: Expr, layouts: Layouts) -> Expr:
    def fn(node: Expr):
        if isinstance(node, Load) and node.buffer in layouts:
            return Load(node.buffer, reordered(node.indices, layouts[node.buffer]), node.dtype_)
        return None

    return transform(e, fn)


def _stmt(s: Stmt, layouts: Layouts) -> Stmt:
    if isinstance(s, Store):
        indices = s.indices
        if s.buffer in layouts:
            indices = reordered(indices, layouts[s.buffer])
        return Store(s.buffer, indices, _expr(s.value, layouts))
    if isinstance(s, Seq):
        return Seq(tuple(_stmt(x, layouts) for x in s.stmts))
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, _stmt(s.body, layouts), s.annotations)
    if isinstance(s, Allocate):
        return Allocate(_buffer(s.buffer, layouts), _stmt(s.body, layouts))
    if isinstance(s, IfThenElse):
        other = None if s.else_body is None else _stmt(s.else_body, layouts)
        return IfThenElse(_expr(s.cond, layouts), _stmt(s.then_body, layouts), other)
    raise TypeError(f"permuted: unexpected statement {type(s).__name__}")
