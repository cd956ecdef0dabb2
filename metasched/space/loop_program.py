"""What the postprocessors read of a schedule's lowered loop program, each part worked out once.

* ``Lowered``: a loop program as lowered, the kinds of the loops changed since, its
  statements walked once (``sites``), and the answers of ``ir.vectorizable`` already asked
  of its loops (most read off the body by ``plainly_vectorizes``, without flattening
  offsets); ``lowered(sch)`` gives the one of a schedule's current state, and ``remember``
  lets a postprocessor that holds it hand it to the next, so that a sample is lowered as
  few times as possible (lowering costs about as much as replaying the trace).
* ``with_kinds(func, kinds)`` (from ``metasched.lower``): the program with some loops of another
  kind, which is all the ``parallel``, ``vectorize`` and ``unroll`` primitives change.
* ``MAX_UNROLLED_WORK`` and ``UnrolledWork``: the estimate of the code LLVM must optimise and
  the most of it worth compiling. The rewrite that unrolls loops and the verifier that
  rejects programs ask this one estimate, with this one limit; the rewrite follows it
  loop by loop with ``Unrolling``.
* ``walk(stmt, scope)``: every statement with the buffers in scope and the loops around it;
  ``slope(index, var)``: the coefficient of a loop variable in an index, where it is plain
  (``slopes``: of every variable at once);
  ``index_terms`` and ``flat_terms``: an index, a flat offset as a linear combination of
  atoms, memoised.
"""
from __future__ import annotations

import dataclasses
import functools
import weakref
from types import MappingProxyType
from typing import AbstractSet, Iterator, Mapping, Optional

from metasched.errors import CodegenError
from metasched.ir import access
from metasched.ir.access import Terms
from metasched.ir.analysis import free_vars, loads
from metasched.ir.expr import INDEX, BinOp, Expr, IntImm, Load, Var, node_count
from metasched.ir.stmt import Allocate, Buffer, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store
from metasched.lower import with_kinds
from metasched.ir.vectorizable import chunk_plan, dtype_lanes, vector_fallback_reason
from metasched.schedule import Schedule

Scope = Mapping[str, Buffer]
Around = tuple[tuple[For, Scope], ...]

# The most unrolled work (``UnrolledWork``) worth compiling. Measured with ``metasched.build``
# (O3, llvmlite 0.50, LLVM 22, the 2-core znver4 machine) on 30 programs sampled from
# ``cpu_default()`` for the built-in workloads, unrolled work -> compile seconds:
# 3,000 -> 0.2; 10,000 -> 0.4; 17,000 -> 0.7; 24,000 -> 1.0; 31,000 -> 1.3; 38,000 -> 1.0;
# 41,000 -> 0.6-1.2; 46,000 -> 1.1; 54,000 -> 2.0-2.3; 75,000-80,000 -> 2.5-2.6;
# 89,000 -> 3.3; 96,000 -> 4.4; 113,000-121,000 -> 3.9-4.6; 140,000-153,000 -> 6.0-7.8;
# 251,000-257,000 -> 9.2-10.8; 361,000 -> 11.1 (an outlier: 15,000 -> 1.5, where LLVM
# unrolled short serial loops itself). 60,000 accepts builds of up to about 2 s and leaves
# out the multi-second tail. (Those counts took a vectorized loop as one copy per power-of-two
# piece of its extent; it is now one per 16-lane chunk, as code generation emits it. On a
# 2-core znver3 (AVX2), 45 of 2,048 recorded matmul_relu builds had taken over 3 s, up to the
# 30 s limit, at 22,000-45,000 by the old count: loops of 32 or 64 lanes unrolled 256 to 512
# times. The chunk count puts 15 of them, 259 of their 474 s, above 60,000, and no build
# under 1 s nor the best program of any of the 26 runs. The other 30 are of several kinds,
# scalar updates unrolled a few hundred times among them.)
MAX_UNROLLED_WORK = 60_000


# -- one lowering per state ---------------------------------------------------------------------
@dataclasses.dataclass
class _Facts:
    """What postprocessors work out of one lowered program, shared by the programs that differ
    from it only in loop kinds: its statements (``walk`` of it, in order), its
    ``UnrolledWork``, and the answers of ``vector_fallback_reason`` for its loops by
    ``id(body)``: (body, loop variable, scope, reason); the body is kept, so ids stay unique."""

    sites: Optional[tuple[tuple[Stmt, Scope, Around], ...]] = None
    work: Optional[UnrolledWork] = None
    vector_reasons: dict[int, tuple[Stmt, str, Scope, Optional[str]]] = dataclasses.field(default_factory=dict)


class Lowered:
    """A loop program as lowered (``lowered``), with the kinds of some loops changed since
    (``kinds``: all that the ``parallel``, ``vectorize`` and ``unroll`` primitives change),
    and what postprocessors worked out of it. ``func`` is the program with those kinds
    (``with_kinds``), made only when asked for: the postprocessors read the program as
    lowered, and take each loop's kind from ``kind``.

    What they work out does not depend on kinds, so the programs that ``changed`` makes
    share it: the statements (the tree is the same but for the ``For`` nodes on the way to
    a changed loop), the unrolled work (updated by ``UnrolledWork.with_kinds``), and the
    answers of ``ir.vectorizable.vector_fallback_reason``, which depend only on a loop's
    variable, its body and the buffers in scope: the rewrite asks about a loop before
    vectorizing it, the verifier after, and the predicate runs once."""

    def __init__(self, lowered: PrimFunc, kinds: Mapping[str, ForKind] = MappingProxyType({}),
                 facts: Optional[_Facts] = None) -> None:
        self.lowered, self.kinds = lowered, kinds
        self._facts = _Facts() if facts is None else facts
        self._func: Optional[PrimFunc] = None if kinds else lowered
        self._work: Optional[UnrolledWork] = None
        self._total: Optional[int] = None

    @property
    def func(self) -> PrimFunc:
        """The program: ``lowered`` with the loops in ``kinds`` of those kinds."""
        if self._func is None:
            self._func = with_kinds(self.lowered, self.kinds)
        return self._func

    def kind(self, loop: For) -> ForKind:
        """The kind in ``func`` of a loop of ``lowered``."""
        return self.kinds.get(loop.var, loop.kind)

    def sites(self) -> tuple[tuple[Stmt, Scope, Around], ...]:
        """``walk`` of ``lowered`` from the top of its body, worked out once."""
        facts = self._facts
        if facts.sites is None:
            facts.sites = tuple(walk(self.lowered.body, params(self.lowered)))
        return facts.sites

    def vector_fallback_reason(self, loop: For, scope: Scope) -> Optional[str]:
        """``vector_fallback_reason(loop, scope.__getitem__)``, asked once per loop body (and
        only where ``plainly_vectorizes`` cannot tell that it is None)."""
        reasons = self._facts.vector_reasons
        known = reasons.get(id(loop.body))
        if known is not None and known[0] is loop.body and known[1] == loop.var and _same(known[2], scope):
            return known[3]
        reason = None if plainly_vectorizes(loop, scope) else vector_fallback_reason(loop, scope.__getitem__)
        reasons[id(loop.body)] = (loop.body, loop.var, scope, reason)
        return reason

    def unrolled_work(self) -> UnrolledWork:
        """``UnrolledWork.of(self.func)``, worked out once."""
        if self._work is None:
            facts = self._facts
            if facts.work is None:
                facts.work = UnrolledWork.of(self.lowered)
            self._work = facts.work.with_kinds(self.kinds)
        return self._work

    def unrolled_total(self) -> int:
        """``unrolled_work().total()``, worked out once (or given to ``changed``)."""
        if self._total is None:
            self._total = self.unrolled_work().total()
        return self._total

    def changed(self, kinds: Mapping[str, ForKind], unrolled_total: Optional[int] = None) -> Lowered:
        """The program with the loops in ``kinds`` of those kinds, and what is known of it;
        ``unrolled_total``, its ``unrolled_total()`` when the caller kept count of it (the
        rewrite follows the work loop by loop as it unrolls, ``Unrolling``), which spares the
        verifier a count over every statement."""
        program = Lowered(self.lowered, {**self.kinds, **kinds}, self._facts) if kinds else self
        if unrolled_total is not None:
            program._total = unrolled_total
        return program


def _same(a: Scope, b: Scope) -> bool:
    return a is b or (a.keys() == b.keys() and all(a[name] is b[name] for name in a))


def plainly_vectorizes(loop: For, scope: Scope) -> bool:
    """Whether ``ir.vectorizable.vector_fallback_reason`` surely finds nothing against ``loop``,
    read off its body without flattening any offset (which the predicate does for every
    access): no loop or allocation inside; every store's offset moves with the loop
    variable (its ``slope``s, weighted by the strides, sum to a nonzero coefficient: the one
    ``linear_in`` finds); and each buffer stored to is stored and read at one tuple of
    indices only, so at one offset, and the forms the predicate compares are equal. False
    when unsure (a variable entering non-linearly, two tuples of indices): then ask the
    predicate, which also gives the reason."""
    stored: dict[str, tuple[Expr, ...]] = {}
    read: list[Load] = []
    stack = [loop.body]
    while stack:
        stmt = stack.pop()
        kind = type(stmt)
        if kind is Seq:
            stack.extend(stmt.stmts)
        elif kind is IfThenElse:
            stack.append(stmt.then_body)
            if stmt.else_body is not None:
                stack.append(stmt.else_body)
            read.extend(loads(stmt.cond))
        elif kind is Store:
            indices = stored.setdefault(stmt.buffer, stmt.indices)
            if indices is not stmt.indices and indices != stmt.indices:
                return False
            buffer = scope.get(stmt.buffer)
            if buffer is None or len(buffer.shape) != len(indices):
                return False
            slopes = [slope(index, loop.var) for index in indices]
            if None in slopes or not sum(k * stride for k, stride in zip(slopes, buffer.strides)):
                return False
            read.extend(loads(stmt.value))  # its indices read no tensor (``loads``)
        else:  # a loop or an allocation
            return False
    return all(ld.buffer not in stored or ld.indices is stored[ld.buffer] or ld.indices == stored[ld.buffer]
               for ld in read)


def slope(index: Expr, var: str) -> Optional[int]:
    """The coefficient of ``var`` in ``index`` when it enters only through ``+``, ``-`` and
    products with an integer literal (0 when it does not enter), else None. Then it is the
    coefficient ``ir.access.index_terms`` finds: no atom of those holds ``var``."""
    coefficients, nonlinear = slopes(index)
    return None if var in nonlinear else coefficients.get(var, 0)


@functools.lru_cache(maxsize=1 << 14)
def slopes(index: Expr) -> tuple[Mapping[str, int], frozenset[str]]:
    """``slope`` of ``index`` for every variable at once: the coefficients of the variables
    it reads through ``+``, ``-`` and products with an integer literal, and the variables it
    reads otherwise (whose ``slope`` is None). Memoised: the postprocessors ask it of every
    index for several loops, and the indices of a lowered program are the very objects
    simplification memoises (their hashes known), which sample after sample repeats.
    Callers must not change the dict returned."""
    kind = type(index)
    if kind is Var:
        return {index.name: 1}, frozenset()
    if kind is IntImm:
        return {}, frozenset()
    if kind is BinOp and index.dtype_ == INDEX:
        if index.op in ("+", "-"):
            (a, a_nonlinear), (b, b_nonlinear) = slopes(index.a), slopes(index.b)
            sign = 1 if index.op == "+" else -1
            merged = dict(a)
            for name, k in b.items():
                merged[name] = merged.get(name, 0) + sign * k
            return merged, a_nonlinear | b_nonlinear
        if index.op == "*" and (type(index.a) is IntImm or type(index.b) is IntImm):
            literal, other = (index.a, index.b) if type(index.a) is IntImm else (index.b, index.a)
            found, nonlinear = slopes(other)
            return {name: k * literal.value for name, k in found.items()}, nonlinear
    return {}, free_vars(index)


# Memoised by value, as ``ir.access.canonical`` is: the samples of one workload share many
# accesses (a third of them in random samples, more between a trace and its mutants), and
# working out the terms of an index costs ten times as much as hashing it. Callers must not
# change the dicts returned.
index_terms = functools.lru_cache(maxsize=1 << 12)(access.index_terms)


@functools.lru_cache(maxsize=1 << 12)
def flat_terms(buffer: Buffer, indices: tuple[Expr, ...]) -> Terms:
    """``index_terms`` of the row-major element offset of ``buffer[indices]``: the terms of
    ``flat_index(buffer, indices)`` (which is their canonical expression), without the round
    trip through it."""
    if len(indices) != len(buffer.shape):
        raise CodegenError(f"{buffer.name} has {len(buffer.shape)} dimensions, indexed with {len(indices)}")
    total: Expr = IntImm(0)
    for index, stride in zip(indices, buffer.strides):
        total = BinOp("+", total, BinOp("*", index, IntImm(stride)))
    return access.index_terms(total)


# Schedule -> (instructions in its trace when the program was lowered, the program). Every
# primitive that changes a schedule appends an instruction, so an entry whose count still
# matches holds the program of the schedule's current state.
_LOWERED: weakref.WeakKeyDictionary[Schedule, tuple[int, Lowered]] = weakref.WeakKeyDictionary()


def remember(sch: Schedule, program: Lowered) -> None:
    """Record ``program`` as the loop program of ``sch`` in its current state; the caller
    knows it is: ``sch.lower()`` now, or such a program with the kinds of the loops that
    primitives made parallel, vectorized or unrolled since changed by ``with_kinds``."""
    _LOWERED[sch] = (len(sch.trace.insts), program)


def lowered(sch: Schedule) -> Lowered:
    """The loop program of ``sch``: the remembered one while no primitive has run since,
    else ``sch.lower()`` (then remembered)."""
    count = len(sch.trace.insts)
    known = _LOWERED.get(sch)
    if known is not None and known[0] == count:
        return known[1]
    program = Lowered(sch.lower())
    _LOWERED[sch] = (count, program)
    return program


# -- walking ------------------------------------------------------------------------------------
def params(func: PrimFunc) -> dict[str, Buffer]:
    """The buffers in scope at the top of ``func``'s body."""
    return {b.name: b for b in func.params}


def walk(stmt: Stmt, scope: Scope, around: Around = ()) -> Iterator[tuple[Stmt, Scope, Around]]:
    """Every statement inside ``stmt``, parents first, with the buffers in scope where it runs
    and the loops around it inside ``stmt`` (outermost first, each with its own scope)."""
    stack = [(stmt, scope, around)]
    while stack:
        item = stack.pop()
        yield item
        stmt, scope, around = item
        if isinstance(stmt, Seq):
            stack.extend((child, scope, around) for child in reversed(stmt.stmts))
        elif isinstance(stmt, For):
            stack.append((stmt.body, scope, around + ((stmt, scope),)))
        elif isinstance(stmt, Allocate):
            stack.append((stmt.body, {**scope, stmt.buffer.name: stmt.buffer}, around))
        elif isinstance(stmt, IfThenElse):
            if stmt.else_body is not None:
                stack.append((stmt.else_body, scope, around))
            stack.append((stmt.then_body, scope, around))


def exprs(stmt: Stmt) -> tuple[Expr, ...]:
    """The expressions one statement evaluates itself (not those of the statements inside it)."""
    if isinstance(stmt, Store):
        return (*stmt.indices, stmt.value)
    if isinstance(stmt, IfThenElse):
        return (stmt.cond,)
    return ()


# -- unrolled work ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class UnrolledWork:
    """An estimate of the code LLVM must optimise for a program, in expression nodes: every
    statement's own nodes (a store's indices and value, a condition) times the copies code
    generation emits of it. An unrolled loop copies its body once per iteration; a vectorized
    loop once per chunk (``ir.vectorizable.chunk_plan``: a chunk of 16 float32 lanes or 8
    float64 ones, as code generation emits them, whatever the host's registers, then the
    lanes left in power-of-two pieces, as it emits them without AVX-512; with AVX-512 it emits
    them as one chunk, so there the count may exceed what is compiled by up to three copies
    of the body, on the safe side, and stays the same on every host; the width is
    read from the dtypes at the roots of the statement's expressions, so a float32 store of a
    value computed in float64, which code generation emits 8 lanes at a time, counts as 16:
    reading every node's dtype took 0.4 ms per conv2d program, eight times the whole
    estimate). Serial loops LLVM unrolls on its own are not counted. O3 time grows with it,
    roughly a second per 25,000 to 40,000 (see ``MAX_UNROLLED_WORK``).

    Made once per program (``of``), it answers for the program as it is and as it would be
    with more of its loops unrolled (``total``): the rewrite picks the loops it unrolls with
    it, and the verifier checks the program with it."""

    # Per statement: its own nodes, its vector chunk width and the loops around it, as
    # (name, kind, extent).
    statements: tuple[tuple[int, int, tuple[tuple[str, ForKind, int], ...]], ...]
    # The loops whose kind changed since (``with_kinds``), by name: applied when the work is
    # first counted, so that a change costs nothing until then.
    kinds: Mapping[str, ForKind] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, func: PrimFunc) -> UnrolledWork:
        found: list[tuple[int, int, tuple[tuple[str, ForKind, int], ...]]] = []
        stack: list[tuple[Stmt, tuple[tuple[str, ForKind, int], ...]]] = [(func.body, ())]
        while stack:  # ``walk``'s order, without the buffers in scope
            stmt, loops = stack.pop()
            kind = type(stmt)
            if kind is Seq:
                stack.extend((child, loops) for child in reversed(stmt.stmts))
            elif kind is For:
                stack.append((stmt.body, loops + ((stmt.var, stmt.kind, stmt.extent),)))
            elif kind is Allocate:
                stack.append((stmt.body, loops))
            else:
                own = exprs(stmt)
                nodes = sum(node_count(e) for e in own)
                if nodes:
                    found.append((nodes, dtype_lanes({e.dtype for e in own}), loops))
                if kind is IfThenElse:
                    if stmt.else_body is not None:
                        stack.append((stmt.else_body, loops))
                    stack.append((stmt.then_body, loops))
        return cls(tuple(found))

    def with_kinds(self, kinds: Mapping[str, ForKind]) -> UnrolledWork:
        """The estimate of the program with the loops in ``kinds`` of those kinds."""
        return UnrolledWork(self.statements, {**self.kinds, **kinds}) if kinds else self

    def total(self, unrolled: AbstractSet[str] = frozenset()) -> int:
        """The work of the program with the serial or parallel loops named in ``unrolled``
        unrolled too."""
        work = 0
        for copies, once in self._parts:
            for name, extent in once:
                if name in unrolled:
                    copies *= extent
            work += copies
        return work

    def unrolling(self) -> Unrolling:
        """The work as loops are unrolled one after another, from the program as it is."""
        return Unrolling(self._parts)

    @functools.cached_property
    def _parts(self) -> tuple[tuple[int, tuple[tuple[str, int], ...]], ...]:
        """Per statement: its nodes times the copies of the loops around it, and the loops
        around it that make one copy (serial, parallel) with their extents."""
        parts = []
        changed = self.kinds
        for nodes, lanes, loops in self.statements:
            once = []
            for name, kind, extent in loops:
                kind = changed.get(name, kind)
                if kind is ForKind.SERIAL or kind is ForKind.PARALLEL:
                    once.append((name, extent))
                elif kind is ForKind.VECTORIZED:
                    full, rests = chunk_plan(extent, lanes, whole_rest=False)
                    nodes *= full + len(rests)
                elif kind is ForKind.UNROLLED:
                    nodes *= extent
            parts.append((nodes, tuple(once)))
        return tuple(parts)


class Unrolling:
    """A running account of ``UnrolledWork.total`` as loops are unrolled one after another,
    which is how the rewrite builds its unroll chains: ``total_with(loop)`` is
    ``total(unrolled | {loop})`` and ``unroll(loop)`` adds the loop to ``unrolled``, each at the
    cost of the statements inside the loop rather than of the whole program."""

    def __init__(self, parts: tuple[tuple[int, tuple[tuple[str, int], ...]], ...]) -> None:
        self._copies = [copies for copies, _ in parts]  # per statement, with ``unrolled``
        self.total = sum(self._copies)
        # Per serial or parallel loop: the statements inside it, with its extent.
        self._inside: dict[str, list[tuple[int, int]]] = {}
        for position, (_, once) in enumerate(parts):
            for name, extent in once:
                self._inside.setdefault(name, []).append((position, extent))
        self._unrolled: set[str] = set()

    def total_with(self, loop: str) -> int:
        """The work with ``loop`` unrolled too."""
        if loop in self._unrolled:
            return self.total
        return self.total + sum(self._copies[k] * (extent - 1) for k, extent in self._inside.get(loop, ()))

    def unroll(self, loop: str) -> None:
        """Unroll ``loop`` too."""
        if loop in self._unrolled:
            return
        self._unrolled.add(loop)
        for k, extent in self._inside.get(loop, ()):
            self.total += self._copies[k] * (extent - 1)
            self._copies[k] *= extent


def unrolled_work(func: PrimFunc) -> int:
    """``UnrolledWork`` of ``func`` as it is."""
    return UnrolledWork.of(func).total()
