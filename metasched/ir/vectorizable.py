"""When a vectorized loop really runs as vector instructions.

``vector_fallback_reason`` is the one predicate: code generation (``codegen.vector``) runs a
loop it refuses as a serial loop, and the schedule verifier (``space.postprocs.VerifyKernel``)
rejects such a program, so the two can never disagree about which loops vectorize.
"""
from __future__ import annotations

from typing import Callable, Optional

from metasched.ir.access import offset_in, stmt_loads, sub_stmts
from metasched.ir.expr import Expr
from metasched.ir.stmt import Allocate, Buffer, For, Store


def vector_fallback_reason(loop: For, buffer: Callable[[str], Buffer]) -> Optional[str]:
    """Why ``loop`` cannot run as vector lanes, or None when it can. ``buffer`` gives the
    ``Buffer`` (its shape) of a name used in the body.

    It cannot when its body holds a ``For`` or an ``Allocate``; when a store's offset does not
    depend on the loop variable, or not linearly (lanes could write one element, whose serial
    order a vector store loses); and when a buffer written in the body is also stored or read
    at another offset (a dependence between iterations that running lanes together breaks)."""
    stored: dict[str, tuple[int, Expr]] = {}
    for node in sub_stmts(loop.body):
        if isinstance(node, (For, Allocate)):
            return "the body contains a loop or an allocation"
        if not isinstance(node, Store):
            continue
        form = offset_in(buffer(node.buffer), node.indices, loop.var)
        if form is None or form[0] == 0:
            return f"lanes may store to one element of {node.buffer}"
        if stored.setdefault(node.buffer, form) != form:
            return f"{node.buffer} is stored at two different offsets"
    for load in stmt_loads(loop.body):
        if load.buffer in stored:
            form = offset_in(buffer(load.buffer), load.indices, loop.var)
            if form != stored[load.buffer]:
                return f"{load.buffer} is read at another offset than it is written"
    return None
