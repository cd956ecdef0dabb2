"""Terse constructors for hand-written loop programs in the codegen tests."""
from __future__ import annotations

from metasched.ir import (
    BinOp, Buffer, Call, Cast, Expr, FloatImm, For, ForKind, IfThenElse, IntImm, Load, PrimFunc,
    Select, Store, Var, seq,
)

S, P, V, U = ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED


def buf(name: str, *shape: int, dtype: str = "float32") -> Buffer:
    return Buffer(name, tuple(shape), dtype)


def v(name: str) -> Var:
    return Var(name)


def f(value: float, dtype: str = "float32") -> FloatImm:
    return FloatImm(float(value), dtype)


def ld(b: Buffer, *indices) -> Load:
    return Load(b.name, tuple(IntImm(i) if isinstance(i, int) else i for i in indices), b.dtype)


def st(b: Buffer, indices, value: Expr) -> Store:
    return Store(b.name, tuple(IntImm(i) if isinstance(i, int) else i for i in indices), value)


def loop(var: str, extent: int, kind: ForKind, *body) -> For:
    return For(var, extent, kind, seq(*body))


def op(o: str, a, b) -> BinOp:
    wrap = lambda x: IntImm(x) if isinstance(x, int) else x  # noqa: E731
    return BinOp(o, wrap(a), wrap(b))


def call(name: str, *args: Expr) -> Call:
    return Call(name, tuple(args))


def func(name: str, inputs, outputs, body, workspaces=()) -> PrimFunc:
    return PrimFunc(name, tuple(inputs), tuple(outputs), tuple(workspaces), body)


__all__ = ["S", "P", "V", "U", "buf", "v", "f", "ld", "st", "loop", "op", "call", "func",
           "Cast", "Select", "IfThenElse", "IntImm"]
