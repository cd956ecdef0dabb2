"""When a vectorized loop really runs as vector instructions.

``vector_fallback_reason`` is the one predicate: code generation (``codegen.vector``) runs a
loop it refuses as a serial loop, and the schedule verifier (``space.postproc.VerifyKernel``)
rejects such a program, so the two can never disagree about which loops vectorize.

``lane_limit`` and ``chunk_plan``: how wide the vector instructions of a loop are and how many
copies of its body code generation emits, which the estimate of a program's compile cost
(``space.loop_program.UnrolledWork``) counts as a host without AVX-512 has them (with AVX-512
the count runs up to three copies over).
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional

from metasched.ir.access import offset_in, stmt_exprs, stmt_loads, sub_stmts
from metasched.ir.analysis import walk
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


# The widest vector instruction code generation emits, in lanes of each dtype (a wider loop is
# emitted in chunks of this width); LLVM splits one into the host's registers.
MAX_LANES = {"float32": 16, "float64": 8}


def dtype_lanes(dtypes: Iterable[str]) -> int:
    """16 lanes of float32 or 8 of float64 (the narrower wins when ``dtypes`` mix them)."""
    return MAX_LANES["float64"] if "float64" in dtypes else MAX_LANES["float32"]


def lane_limit(loop: For) -> int:
    """The width of ``loop``'s vector chunks: ``dtype_lanes`` of the values in its body."""
    return dtype_lanes({node.dtype for e in stmt_exprs(loop.body) for node in walk(e)})


def chunk_plan(extent: int, width: int, whole_rest: bool) -> tuple[int, tuple[int, ...]]:
    """How code generation splits a vectorized loop of ``extent`` lanes: the number of full
    chunks of ``width`` lanes (a loop over them, which LLVM unrolls), then the chunks of the
    lanes left: one of all of them where ``whole_rest``, else power-of-two pieces, widest first.
    A one-lane chunk is scalar code. Each chunk is one copy of the body.

    Code generation takes the whole rest on hosts with AVX-512. There LLVM widens the rest's
    arithmetic to whole registers and splits only its loads and stores, which never touch a
    lane past the loop's end: a loop of 28 float32 lanes (a tile of a 56-wide image) takes two
    instructions per operation where the pieces (16, 8, 4) took three, one of 14 one where they
    took three; held in registers across a reduction loop, 28 lanes take two, not three
    (conv2d_bias_relu's 20 best programs of a run, compiled both ways: 1.09x faster).
    With AVX2 the same programs ran 0.48x as fast: LLVM assembles a 12-lane value there lane
    by lane and spills, and 8-lane registers save no instruction on 12 lanes anyway."""
    full, rest = divmod(extent, width)
    if whole_rest:
        return full, (rest,) if rest else ()
    return full, tuple(1 << k for k in reversed(range(rest.bit_length())) if rest >> k & 1)
