"""Vectorized loops: the loop's iterations become the lanes of LLVM vector instructions.

Map: ``emit_vectorized`` splits the iterations into chunks (a loop over full-width chunks, then
the lanes left: one chunk of them all on a host with AVX-512, else power-of-two chunks; a
one-lane chunk is plain scalar code: ``ir.vectorizable.chunk_plan``) · ``ChunkEmitter`` emits the
body once per chunk: statements (``_STMT``) and expressions (``_EXPR``) that depend on the
vector variable become vectors, the rest stays scalar (``uniform``) and is splatted where it
meets a vector.

Memory: an offset ``1*var + rest`` is a contiguous vector load/store, ``0*var + rest`` a scalar
load (splatted), a load of ``c*var + rest`` with a small stride ``c`` whole-register loads and a
shuffle, anything else a gather/scatter. Conditions on the vector variable become lane
masks (``mask``, AND-ed when nested): loads under a mask are masked loads/gathers, stores masked
stores/scatters, so an inactive lane never touches memory (this is how padding and guards of
imperfect splits stay in bounds). Uniform conditions become real branches.

Falls back to a serial loop (which LLVM's own loop vectorizer may still vectorize) where
``metasched.ir.vectorizable.vector_fallback_reason`` says why it must: the body holds a loop or
an allocation, lanes could store to one element, or iterations depend on each other. The
schedule verifier asks the same predicate, so it rejects exactly the loops that fall back.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from llvmlite import ir

from metasched.codegen import ops
from metasched.codegen.llvmutil import (
    ELEMENT_BYTES, I1, I32, PTR, VOID, const, i64, i64_vector, lane_ids,
    lanes_of, llvm_type, splat,
)
from metasched.codegen.target import host_vector_bits
from metasched.ir.access import flat_index, linear_in
from metasched.ir.analysis import free_vars, loads, substitute
from metasched.ir.expr import BinOp, Call, Cast, Expr, IntImm, Load, Neg, Not, Select, Var
from metasched.ir.stmt import For, IfThenElse, Seq, Stmt, Store
from metasched.ir.vectorizable import chunk_plan, lane_limit, vector_fallback_reason

# Loads whose lanes lie at most this many elements apart are shuffled out of contiguous loads
# (``ChunkEmitter._strided``); farther apart, gathered.
MAX_SHUFFLED_STRIDE = 4

if TYPE_CHECKING:
    from metasched.codegen.emit import FunctionEmitter

def emit_vectorized(fe: FunctionEmitter, loop: For) -> None:
    """Emit ``loop`` (kind VECTORIZED) at ``fe``'s builder."""
    if vector_fallback_reason(loop, lambda name: fe.buffer(name)[0]) is not None:
        fe.serial_loop(loop)
        return
    width = lane_limit(loop)
    full, rests = chunk_plan(loop.extent, width, whole_rest=host_vector_bits() >= 512)
    if full == 1:
        ChunkEmitter(fe, loop.var, width, i64(0)).stmt(loop.body)
    elif full > 1:
        with fe.loop(i64(0), i64(full), name=f"{loop.var}.chunk") as chunk:
            base = fe.builder.mul(chunk, i64(width), flags=("nsw",))
            ChunkEmitter(fe, loop.var, width, base).stmt(loop.body)
    offset = full * width
    for lanes in rests:
        if lanes == 1:
            with fe.bind(loop.var, i64(offset)):
                fe.stmt(loop.body)
        else:
            ChunkEmitter(fe, loop.var, lanes, i64(offset)).stmt(loop.body)
        offset += lanes


class ChunkEmitter:
    """Emits a vectorized loop body for the lanes ``base .. base+lanes-1`` of ``var``."""

    def __init__(self, fe: FunctionEmitter, var: str, lanes: int, base: ir.Value) -> None:
        self.fe, self.b = fe, fe.builder
        self.var, self.lanes, self.base = var, lanes, base
        # Built here, in the chunk's first block, so that it dominates every use in the chunk.
        self.lane_index = self.b.add(splat(self.b, base, lanes), lane_ids(lanes), flags=("nsw",))
        self.mask: Optional[ir.Value] = None
        self._depends: dict[int, tuple[Expr, bool]] = {}

    # --- helpers -----------------------------------------------------------------------------
    def depends(self, e: Expr) -> bool:
        """Whether ``e`` varies across lanes (memoised; the entry keeps ``e`` alive so that its
        id cannot be reused by another node)."""
        hit = self._depends.get(id(e))
        if hit is None:
            hit = self._depends[id(e)] = (e, self.var in free_vars(e))
        return hit[1]

    def vector(self, value: ir.Value) -> ir.Value:
        if lanes_of(value):
            return value
        return self.fe.values.numbered(("splat", self.lanes), (value,),
                                       lambda: splat(self.b, value, self.lanes))

    @contextmanager
    def masked(self, cond: ir.Value) -> Iterator[None]:
        """Narrow the active lanes to those where ``cond`` holds while the block runs."""
        saved = self.mask
        self.mask = cond if saved is None else self.b.and_(saved, cond)
        try:
            yield
        finally:
            self.mask = saved

    def full_mask(self) -> ir.Value:
        return self.mask if self.mask is not None else const(ir.VectorType(I1, self.lanes), 1)

    def any_active(self) -> ir.Value:
        bits = self.b.bitcast(self.mask, ir.IntType(self.lanes))
        return self.b.icmp_unsigned("!=", bits, ir.Constant(ir.IntType(self.lanes), 0))

    def uniform(self, e: Expr) -> ir.Value:
        """A lane-invariant expression as a scalar. Its loads may be out of bounds when no lane
        is active (a padded border), so under a mask they run only if some lane is."""
        if self.mask is None or not loads(e):
            return self.fe.expr(e)
        zero = const(llvm_type(e.dtype), 0)
        return self.fe.choose(self.any_active(), lambda: self.fe.expr(e), lambda: zero)

    def offsets(self, offset: Expr) -> tuple[Optional[ir.Value], Optional[ir.Value]]:
        """(lane 0's offset when lanes are contiguous, else None; per-lane offsets or None)."""
        form = linear_in(offset, self.var)
        if form is None:
            return None, self.vector(self.expr(offset))
        coefficient, rest = form
        first = self.first_offset(coefficient, rest)
        if coefficient == 1:
            return first, None
        steps = i64_vector([coefficient * k for k in range(self.lanes)], "index step")
        return None, self.b.add(splat(self.b, first, self.lanes), steps)

    def first_offset(self, coefficient: int, rest: Expr) -> ir.Value:
        """Lane 0's offset of ``coefficient * var + rest``."""
        return ops.int_arith(self.b, "+", self.fe.expr(rest), ops.int_arith(self.b, "*", self.base, i64(coefficient)))

    def pointers(self, base: ir.Value, element: ir.Type, offsets: ir.Value) -> ir.Value:
        # `getelementptr T, ptr %base, <N x i64> %offsets` yields <N x ptr>; llvmlite cannot
        # infer that type, so it is set by hand. No `inbounds`: inactive lanes may point
        # outside the buffer.
        gep = self.b.gep(base, [offsets], source_etype=element)
        gep.type = ir.VectorType(PTR, self.lanes)
        return gep

    # --- statements --------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        _STMT[type(s)](self, s)

    def _seq(self, s: Seq) -> None:
        for child in s.stmts:
            self.stmt(child)

    def _if(self, s: IfThenElse) -> None:
        cond = self.expr(s.cond)
        if lanes_of(cond) is None:
            if s.else_body is None:
                with self.fe.if_then(cond):
                    self.stmt(s.then_body)
                return
            else_body = s.else_body
            self.fe.if_else(cond, lambda: self.stmt(s.then_body), lambda: self.stmt(else_body))
            return
        with self.masked(cond):
            self.stmt(s.then_body)
        if s.else_body is not None:
            with self.masked(self.b.not_(cond)):
                self.stmt(s.else_body)

    def _store(self, s: Store) -> None:
        buffer, base = self.fe.buffer(s.buffer)
        vector_type = llvm_type(buffer.dtype, self.lanes)
        value = self.vector(ops.convert(self.b, self.expr(s.value), buffer.dtype))
        align = ir.Constant(I32, ELEMENT_BYTES[buffer.dtype])
        first, spread = self.offsets(flat_index(buffer, s.indices))
        ctx = self.fe.ctx
        if first is not None:
            pointer = self.b.gep(base, [first], source_etype=llvm_type(buffer.dtype))
            if self.mask is None:
                self.b.store(value, pointer, align=ELEMENT_BYTES[buffer.dtype])
                return
            element = llvm_type(buffer.dtype)
            for start, lanes in self._register_parts(buffer.dtype):
                part_type = llvm_type(buffer.dtype, lanes)
                fn = ctx.intrinsic("llvm.masked.store", VOID, [part_type, PTR, I32, ir.VectorType(I1, lanes)],
                                   [part_type, PTR])
                part = self.b.gep(pointer, [i64(start)], source_etype=element)
                self.b.call(fn, [self._lanes(value, start, lanes), part, align, self._lanes(self.mask, start, lanes)])
            return
        pointers = self.pointers(base, llvm_type(buffer.dtype), spread)
        fn = ctx.intrinsic("llvm.masked.scatter", VOID,
                           [vector_type, pointers.type, I32, ir.VectorType(I1, self.lanes)],
                           [vector_type, pointers.type])
        self.b.call(fn, [value, pointers, align, self.full_mask()])

    # --- expressions -------------------------------------------------------------------------
    def expr(self, e: Expr) -> ir.Value:
        """A vector where ``e`` varies across lanes, else a scalar."""
        if not self.depends(e):
            return self.uniform(e)
        return _EXPR[type(e)](self, e)

    def _var(self, e: Var) -> ir.Value:
        return self.lane_index

    def _binop(self, e: BinOp) -> ir.Value:
        a, b = self.vector(self.expr(e.a)), self.vector(self.expr(e.b))
        return ops.binop_value(self.fe.ctx, self.b, e, a, b)

    def _neg(self, e: Neg) -> ir.Value:
        return ops.negate(self.b, self.expr(e.a))

    def _not(self, e: Not) -> ir.Value:
        return self.b.not_(self.expr(e.a))

    def _cast(self, e: Cast) -> ir.Value:
        return ops.convert(self.b, self.expr(e.value), e.dtype)

    def _call(self, e: Call) -> ir.Value:
        args = [self.vector(ops.convert(self.b, self.expr(a), e.dtype)) for a in e.args]
        return ops.math_call(self.fe.ctx, self.b, e.func, args)

    def _select(self, e: Select) -> ir.Value:
        cond = self.expr(e.cond)

        def side(x: Expr) -> Callable[[], ir.Value]:
            return lambda: self.vector(ops.convert(self.b, self.expr(x), e.dtype))

        if lanes_of(cond) is None:
            if loads(e.true_value) or loads(e.false_value):
                return self.fe.choose(cond, side(e.true_value), side(e.false_value))
            return self.b.select(cond, side(e.true_value)(), side(e.false_value)())
        with self.masked(cond):
            true_value = side(e.true_value)()
        with self.masked(self.b.not_(cond)):
            false_value = side(e.false_value)()
        return self.b.select(cond, true_value, false_value)

    def _register_parts(self, dtype: str) -> list[tuple[int, int]]:
        """(first lane, lanes) of each vector register's worth of this chunk's lanes: a
        masked load or store is emitted a register at a time. LLVM 22, left to split a wider
        one, made a half whose mask loop unrolling had made all false into a plain load on
        AVX2 (a wrong answer reading before the tensor); one of a register's width it folds
        away whole."""
        width = _register_lanes(dtype)
        return [(start, min(width, self.lanes - start)) for start in range(0, self.lanes, width)]

    def _lanes(self, vector: ir.Value, start: int, lanes: int) -> ir.Value:
        """Lanes ``start`` to ``start + lanes`` of ``vector`` (itself when that is all of it)."""
        if start == 0 and lanes == self.lanes:
            return vector
        return self.b.shuffle_vector(vector, vector, _indices(range(start, start + lanes)))

    def _joined(self, parts: list[ir.Value]) -> ir.Value:
        """The vectors ``parts`` end to end, as one vector."""
        joined = parts[0]
        for part in parts[1:]:
            have, more = lanes_of(joined), lanes_of(part)
            if more < have:  # shufflevector joins vectors of one width: widen the short one
                part = self.b.shuffle_vector(part, part, _indices([min(k, more - 1) for k in range(have)]))
            joined = self.b.shuffle_vector(joined, part, _indices([*range(have), *range(have, have + more)]))
        return joined

    def _strided(self, base: ir.Value, dtype: str, stride: int, rest: Expr) -> ir.Value:
        """The lanes of a load whose elements lie ``stride`` apart (a convolution's input
        under stride 2): every element from lane 0's to the last lane's loaded as one vector,
        then every ``stride``-th taken by a shuffle. That is a few contiguous loads and
        shuffles where a gather costs a load per lane, and it reads nothing outside the
        tensor: only elements between two that the program reads."""
        span = (self.lanes - 1) * stride + 1
        element = llvm_type(dtype)
        pointer = self.b.gep(base, [self.first_offset(stride, rest)], source_etype=element)
        align = ELEMENT_BYTES[dtype]
        width = _register_lanes(dtype)
        if span <= width:
            whole = self.b.load(pointer, align=align, typ=llvm_type(dtype, span))
            return self.b.shuffle_vector(whole, whole, _indices(range(0, span, stride)))
        # Whole registers: one at each multiple of the width, the last one ending at the last
        # lane's element (overlapping the one before it rather than reading past the span).
        starts = [*range(0, span - width, width), span - width]
        parts = [self.b.load(self.b.gep(pointer, [i64(start)], source_etype=element), align=align,
                             typ=llvm_type(dtype, width)) for start in starts]
        last = (len(starts) - 1) * width
        where = [e if e < last else last + e - starts[-1] for e in range(0, span, stride)]
        joined = self._joined(parts)
        return self.b.shuffle_vector(joined, joined, _indices(where))

    def _load(self, e: Load) -> ir.Value:
        buffer, base = self.fe.buffer(e.buffer)
        offset = flat_index(buffer, e.indices)
        form = linear_in(offset, self.var)
        if form is not None and form[0] == 0:  # the same element for every lane
            return self.uniform(substitute(e, {self.var: IntImm(0)}))
        element = llvm_type(buffer.dtype)
        vector_type = llvm_type(buffer.dtype, self.lanes)
        align = ir.Constant(I32, ELEMENT_BYTES[buffer.dtype])
        zero = const(vector_type, 0.0)
        if form is not None and 1 < form[0] <= MAX_SHUFFLED_STRIDE and self.mask is None:
            return ops.convert(self.b, self._strided(base, buffer.dtype, *form), e.dtype)
        first, spread = self.offsets(offset)
        ctx = self.fe.ctx
        if first is not None:
            pointer = self.b.gep(base, [first], source_etype=element)
            if self.mask is None:
                value = self.b.load(pointer, align=ELEMENT_BYTES[buffer.dtype], typ=vector_type)
            else:
                parts = []
                for start, lanes in self._register_parts(buffer.dtype):
                    part_type = llvm_type(buffer.dtype, lanes)
                    fn = ctx.intrinsic("llvm.masked.load", part_type,
                                       [PTR, I32, ir.VectorType(I1, lanes), part_type], [part_type, PTR])
                    parts.append(self.b.call(fn, [self.b.gep(pointer, [i64(start)], source_etype=element), align,
                                                  self._lanes(self.mask, start, lanes), const(part_type, 0.0)]))
                value = self._joined(parts)
        else:
            pointers = self.pointers(base, element, spread)
            mask_type = ir.VectorType(I1, self.lanes)
            fn = ctx.intrinsic("llvm.masked.gather", vector_type,
                               [pointers.type, I32, mask_type, vector_type],
                               [vector_type, pointers.type])
            value = self.b.call(fn, [pointers, align, self.full_mask(), zero])
        return ops.convert(self.b, value, e.dtype)


def _register_lanes(dtype: str) -> int:
    """How many elements of ``dtype`` one vector register of this host holds."""
    return max(1, host_vector_bits() // (8 * ELEMENT_BYTES[dtype]))


def _indices(lanes) -> ir.Constant:
    """A shufflevector's mask: the lanes to take, in order."""
    lanes = list(lanes)
    return ir.Constant(ir.VectorType(I32, len(lanes)), lanes)


_STMT = {Seq: ChunkEmitter._seq, IfThenElse: ChunkEmitter._if, Store: ChunkEmitter._store}
_EXPR = {
    Var: ChunkEmitter._var,
    BinOp: ChunkEmitter._binop,
    Neg: ChunkEmitter._neg,
    Not: ChunkEmitter._not,
    Cast: ChunkEmitter._cast,
    Call: ChunkEmitter._call,
    Select: ChunkEmitter._select,
    Load: ChunkEmitter._load,
}
