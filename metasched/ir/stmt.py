"""The loop program: what ``lower`` produces and ``codegen`` compiles.

A ``PrimFunc`` takes its input, output and workspace buffers as dense row-major arrays and runs
a statement tree of loops (``For``, each of one ``ForKind``), guards (``IfThenElse``), sequences
(``Seq``), scratch allocations (``Allocate``) and element stores (``Store``). Every loop starts
at 0 and has a constant extent. Loads inside expressions name buffers by ``Buffer.name``.
"""
from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from math import prod
from typing import Optional, Union

from metasched.ir.expr import Expr, expr_str


class ForKind(enum.Enum):
    """How a loop runs: one iteration after another, spread over threads, as the lanes of
    vector instructions, or copied out once per iteration."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"


@dataclass(frozen=True)
class Buffer:
    """A dense row-major array."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides of each dimension."""
        strides, step = [], 1
        for extent in reversed(self.shape):
            strides.append(step)
            step *= extent
        return tuple(reversed(strides))


class Stmt:
    """Base of statement nodes."""

    __slots__ = ()

    def __str__(self) -> str:
        return stmt_str(self)


@dataclass(frozen=True, repr=False)
class Store(Stmt):
    """``buffer[indices] = value``."""

    buffer: str
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, repr=False)
class For(Stmt):
    """``for var in range(extent)`` run as ``kind``; ``annotations`` are (key, value) pairs."""

    var: str
    extent: int
    kind: ForKind
    body: Stmt
    annotations: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True, repr=False)
class IfThenElse(Stmt):
    """Run ``then_body`` where ``cond`` holds, else ``else_body`` (if any)."""

    cond: Expr
    then_body: Stmt
    else_body: Optional[Stmt] = None


@dataclass(frozen=True, repr=False)
class Seq(Stmt):
    """Statements run in order."""

    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, repr=False)
class Allocate(Stmt):
    """A scratch buffer that lives while ``body`` runs (on the stack of the running thread)."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, repr=False)
class PrimFunc:
    """A kernel: ``inputs`` are read, ``outputs`` written, ``workspaces`` are intermediates
    allocated by the caller; ``body`` runs once per call."""

    name: str
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    workspaces: tuple[Buffer, ...]
    body: Stmt
    attrs: dict = field(default_factory=dict, compare=False)

    @property
    def params(self) -> tuple[Buffer, ...]:
        """Every argument buffer, in calling order: inputs, outputs, workspaces."""
        return self.inputs + self.outputs + self.workspaces

    def __str__(self) -> str:
        return func_str(self)


def seq(*stmts: Union[Stmt, None]) -> Stmt:
    """A ``Seq`` of the non-empty statements, flattened; a single statement stands alone."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


# -- text: what str(schedule) shows a person -------------------------------------------------
def _lines(s: Stmt, depth: int, out: list[str]) -> None:
    pad = "    " * depth
    if isinstance(s, Seq):
        for sub in s.stmts:
            _lines(sub, depth, out)
    elif isinstance(s, For):
        rng = f"range({s.extent})" if s.kind is ForKind.SERIAL else f"{s.kind.value}({s.extent})"
        notes = "".join(f"  # {k} = {v!r}" for k, v in s.annotations)
        out.append(f"{pad}for {s.var} in {rng}:{notes}")
        _lines(s.body, depth + 1, out)
    elif isinstance(s, IfThenElse):
        out.append(f"{pad}if {expr_str(s.cond)}:")
        _lines(s.then_body, depth + 1, out)
        if s.else_body is not None:
            out.append(f"{pad}else:")
            _lines(s.else_body, depth + 1, out)
    elif isinstance(s, Allocate):
        b = s.buffer
        out.append(f"{pad}{b.name} = allocate({list(b.shape)}, {b.dtype!r})")
        _lines(s.body, depth, out)
    elif isinstance(s, Store):
        idx = ", ".join(expr_str(i) for i in s.indices)
        out.append(f"{pad}{s.buffer}[{idx}] = {expr_str(s.value)}")
    else:
        raise TypeError(f"not a statement: {s!r}")


def stmt_str(s: Stmt, depth: int = 0) -> str:
    """A statement tree as indented Python-like text."""
    out: list[str] = []
    _lines(s, depth, out)
    return "\n".join(out)


def func_str(f: PrimFunc) -> str:
    """A whole kernel: its signature, its workspaces, its body."""
    def sig(b):
        return f"{b.name}: {b.dtype}[{', '.join(map(str, b.shape))}]"

    params = ", ".join(sig(b) for b in f.inputs + f.outputs)
    lines = [f"def {f.name}({params}):"]
    for block, notes in f.attrs.get("block_annotations", {}).items():
        lines.extend(f"    # block {block}: {k} = {v!r}" for k, v in notes.items())
    for w in f.workspaces:
        lines.append(f"    {w.name} = allocate({list(w.shape)}, {w.dtype!r})")
    lines.append(stmt_str(f.body, 1))
    return "\n".join(lines)


# -- identity: what makes two loop programs one kernel -----------------------------------------
def func_digest(f: PrimFunc) -> str:
    """A digest (32 hex digits of SHA-256) of everything in ``f`` that code generation reads:
    its name, buffers and statement tree, every expression in full (``repr``: dtypes and
    constants exact), every loop's kind and annotations; not ``attrs`` (notes for a person).
    Two programs with one digest compile to one kernel. Names count, so two programs alike but
    for a loop variable's name get two digests: it may tell apart programs that compile alike,
    never the converse."""
    out: list[str] = [repr((f.name, f.inputs, f.outputs, f.workspaces))]
    stack: list[Union[Stmt, str]] = [f.body]
    while stack:
        s = stack.pop()
        if isinstance(s, str):
            out.append(s)
        elif isinstance(s, Seq):
            out.append(f"seq {len(s.stmts)}")
            stack.extend(reversed(s.stmts))
        elif isinstance(s, For):
            out.append(f"for {s.var!r} {s.extent} {s.kind.value} {s.annotations!r}")
            stack.append(s.body)
        elif isinstance(s, IfThenElse):
            out.append(f"if {s.cond!r}")
            stack.extend(("end if", s.else_body if s.else_body is not None else "no else", "then", s.then_body))
        elif isinstance(s, Allocate):
            out.append(f"allocate {s.buffer!r}")
            stack.append(s.body)
        elif isinstance(s, Store):
            out.append(f"store {s.buffer!r} {s.indices!r} {s.value!r}")
        else:
            raise TypeError(f"not a statement: {s!r}")
    return hashlib.sha256("\n".join(out).encode()).hexdigest()[:32]
