"""Postprocessors: make real loop kinds of the annotations ``ParallelizeVectorizeUnroll`` leaves,
and reject the programs the code generator cannot make correct or fast enough to be worth a
measurement.

Map of this file:
* ``RewriteParallelVectorizeUnroll``: the limits each block asks for (``_block_limits``), then per
  block the vector run (``_vector_run``), the parallel prefix (``_parallel_count``), MetaSchedule's
  fuse-split form for a block that vectorizes whole, and the unroll chain (``_unroll``);
* ``VerifyKernel`` and its three checks of the lowered program, usable on any ``PrimFunc``:
  ``unrolled_work``, ``vector_fallback``, ``parallel_race`` (with the digit reasoning that proves
  an access belongs to one iteration of a parallel loop);
* walking a loop program with the buffers in scope (``_walk``).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterator, Mapping, Optional, Sequence

from metasched.errors import ScheduleError
from metasched.ir.access import flat_index, from_terms, index_terms, linear_in
from metasched.ir.analysis import Interval, free_vars, int_bounds, loads, walk
from metasched.ir.expr import BinOp, Expr, IntImm, Var
from metasched.ir.stmt import Allocate, Buffer, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store
from metasched.ir.vectorizable import vector_fallback_reason
from metasched.schedule import BlockRV, Schedule, analysis
from metasched.schedule.analysis import BlockInfo, LoopInfo
from metasched.space.base import Postproc
from metasched.space.parallel_vectorize_unroll import PARALLEL, UNROLL_EXPLICIT, UNROLL_IMPLICIT, VECTORIZE

KEYS = (PARALLEL, VECTORIZE, UNROLL_EXPLICIT, UNROLL_IMPLICIT)
Scope = Mapping[str, Buffer]


# -- RewriteParallelVectorizeUnroll -----------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Limits:
    """What a block's annotations ask for; 0 means "not at all"."""

    max_parallel: int
    max_vectorize: int
    max_unroll: int


@dataclasses.dataclass
class RewriteParallelVectorizeUnroll(Postproc):
    """Turns the annotations ``meta_schedule.parallel`` (the most parallel iterations worth
    making), ``meta_schedule.vectorize`` (the longest loop worth vectorizing) and
    ``meta_schedule.unroll_explicit`` / ``unroll_implicit`` (the sampled unroll depth) into loop
    kinds, as MetaSchedule's ``rewrite_parallel_vectorize_unroll.cc`` does, then removes them.

    A block without the annotations takes those of its nearest annotated consumer (the
    blocks rules made: caches, rfactor's partial blocks), and a block computed at another
    block's loop, failing that, those of that block. Then for each block:

    * vector run: the longest run of innermost loops, at most ``vectorize`` iterations in all,
      that are spatial, serial, unannotated and hold no other block, over which the block's
      store is contiguous (stride 1 in its buffer) and every access it makes is linear (each
      loop's stride is the next one's times its extent). The run is fused and vectorized:
      no access is then worse than with the innermost loop vectorized alone, and code
      generation never falls back (``metasched.ir.vectorizable`` is asked too).
    * parallel (blocks at the root only): MetaSchedule's prefix of the outer loops not in the
      vector run: spatial, serial and unannotated, up to and including the first that holds
      another block or takes the product of extents past ``parallel``; fused, made parallel.
      A root block whose every loop could join the store's contiguous run, but whose
      extents multiply past ``vectorize``, takes MetaSchedule's other form instead: all its
      loops fused, split by ``vectorize``, the outer part parallel and the inner vectorized.
    * unroll (reduction blocks only: as in MetaSchedule, a spatial block gains nothing from
      it): from the innermost loop outward, passing over the vectorized one, each serial loop
      while the product of the unrolled extents stays within the depth; the chain stops at a
      loop that holds another block.

    Every primitive is checked against the schedule's facts before it is issued, so the
    rewrite itself never fails on a program the rules made."""

    def apply(self, sch: Schedule) -> bool:
        blocks = {name: sch.get_block(name) for name in analysis.blocks(sch)}
        infos = {name: analysis.block(sch, rv) for name, rv in blocks.items()}
        limits = _block_limits(infos)
        if limits:
            accesses = _accesses(sch.lower())
            for name, limit in limits.items():
                _rewrite_block(sch, blocks[name], limit, accesses.get(infos[name].buffer, _NO_ACCESSES))
        for name, rv in blocks.items():
            for key in KEYS:
                if key in infos[name].annotations:
                    sch.unannotate(rv, key)
        return True


def _own_limits(info: BlockInfo) -> Optional[_Limits]:
    found = {key: info.annotations[key] for key in KEYS if key in info.annotations}
    if not found:
        return None
    for key, value in found.items():
        if not isinstance(value, int):
            raise ScheduleError(f"block {info.name}: annotation {key} must be an integer, got {value!r}")
    unroll = max(found.get(UNROLL_EXPLICIT, 0), found.get(UNROLL_IMPLICIT, 0))
    return _Limits(found.get(PARALLEL, 0), found.get(VECTORIZE, 0), unroll)


def _block_limits(infos: Mapping[str, BlockInfo]) -> dict[str, _Limits]:
    """The limits of every block that has some: its own, else its nearest annotated consumer's
    (breadth first), else those of the block it is computed at."""
    own = {name: _own_limits(info) for name, info in infos.items()}

    def nearest_consumer(name: str) -> Optional[_Limits]:
        frontier, seen = list(infos[name].consumers), {name}
        while frontier:
            found = next((own[c] for c in frontier if own[c] is not None), None)
            if found is not None:
                return found
            seen.update(frontier)
            frontier = [c for f in frontier for c in infos[f].consumers if c not in seen]
        return None

    def resolve(name: str) -> Optional[_Limits]:
        found = own[name] or nearest_consumer(name)
        attached = infos[name].attached_to
        return found if found is not None or attached is None else resolve(attached[0])

    resolved = {name: resolve(name) for name in infos}
    return {name: limit for name, limit in resolved.items() if limit is not None}


@dataclasses.dataclass(frozen=True)
class _Accesses:
    """Where a block's statement touches memory in the lowered program, as flat element
    offsets: its stores (the update and, for a reduction, the initialisation) and the reads of
    its stored value; ``loops`` are the ``For`` nodes of each loop name (a reduction's
    initialisation repeats spatial loops)."""

    stores: tuple[Expr, ...] = ()
    reads: tuple[Expr, ...] = ()
    loops: Mapping[str, tuple[tuple[For, Scope], ...]] = dataclasses.field(default_factory=dict)


_NO_ACCESSES = _Accesses()


def _accesses(func: PrimFunc) -> dict[str, _Accesses]:
    """The accesses of every block, by the buffer it stores to."""
    stores: dict[str, list[Expr]] = {}
    reads: dict[str, list[Expr]] = {}
    loops: dict[str, dict[str, list[tuple[For, Scope]]]] = {}
    for stmt, scope, around in _walk(func.body, _params(func)):
        if not isinstance(stmt, Store):
            continue
        stores.setdefault(stmt.buffer, []).append(flat_index(scope[stmt.buffer], stmt.indices))
        reads.setdefault(stmt.buffer, []).extend(
            flat_index(scope[ld.buffer], ld.indices) for ld in loads(stmt.value))
        for loop, loop_scope in around:
            loops.setdefault(stmt.buffer, {}).setdefault(loop.var, []).append((loop, loop_scope))
    return {buffer: _Accesses(tuple(offsets), tuple(reads[buffer]),
                              {var: tuple(found) for var, found in loops.get(buffer, {}).items()})
            for buffer, offsets in stores.items()}


def _rewrite_block(sch: Schedule, block: BlockRV, limits: _Limits, accesses: _Accesses) -> None:
    """Parallel, vector and unrolled loops for one block (see the class's docstring)."""
    info = analysis.block(sch, block)
    loops = info.loops
    if not loops:
        return
    handles = sch.get_loops(block)[-len(loops):]
    at_root = info.attached_to is None
    if at_root and limits.max_parallel > 0 and _fuses_whole(loops, accesses, limits.max_vectorize):
        fused = sch.fuse(*handles) if len(handles) > 1 else handles[0]
        outer, inner = sch.split(fused, [None, limits.max_vectorize])
        sch.parallel(outer)
        sch.vectorize(inner)
    else:
        run = _vector_run(loops, accesses, limits.max_vectorize)
        count = _parallel_count(loops[:len(loops) - run], limits.max_parallel) if at_root else 0
        if count:
            sch.parallel(sch.fuse(*handles[:count]) if count > 1 else handles[0])
        if run:
            tail = handles[len(handles) - run:]
            sch.vectorize(sch.fuse(*tail) if run > 1 else tail[0])
    if info.is_reduction and limits.max_unroll > 0:
        _unroll(sch, block, limits.max_unroll)


def _rewritable(loop: LoopInfo) -> bool:
    """A loop the rewrite may fuse into a vector run: spatial, serial, unannotated, holding no
    other block."""
    return not loop.is_reduction and loop.kind == "serial" and not loop.annotations and not loop.attached


def _linear_run(loops: Sequence[LoopInfo], offset: Expr, contiguous: bool) -> int:
    """How many of the innermost ``loops`` ``offset`` runs through linearly: each loop's
    coefficient is the next inner one's times that one's extent, so that over the loop their
    fusion makes the offset is ``c * fused + rest``; with ``contiguous``, ``c`` must be 1."""
    count, expected = 0, None
    for loop in reversed(loops):
        form = linear_in(offset, loop.name)
        if form is None or (expected is None and contiguous and form[0] != 1) or \
                (expected is not None and form[0] != expected):
            break
        count += 1
        expected = form[0] * loop.extent
    return count


def _contiguous_loops(loops: Sequence[LoopInfo], accesses: _Accesses) -> int:
    """How many innermost loops are rewritable and run the block's stores contiguously (0
    when code generation would not vectorize the innermost one: the fused loop's accesses are
    the innermost one's, scaled)."""
    innermost = accesses.loops.get(loops[-1].name, ())
    if not accesses.stores or any(vector_fallback_reason(loop, scope.__getitem__) is not None
                                  for loop, scope in innermost):
        return 0
    count = 0
    while count < len(loops) and _rewritable(loops[-1 - count]):
        count += 1
    for offset in accesses.stores:
        count = min(count, _linear_run(loops, offset, contiguous=True))
    return count


def _vector_run(loops: Sequence[LoopInfo], accesses: _Accesses, max_extent: int) -> int:
    """How many innermost loops to fuse and vectorize (0: none)."""
    count = _contiguous_loops(loops, accesses)
    for offset in accesses.reads:
        count = min(count, _linear_run(loops, offset, contiguous=False))
    while count and math.prod(lp.extent for lp in loops[len(loops) - count:]) > max_extent:
        count -= 1
    return count if math.prod(lp.extent for lp in loops[len(loops) - count:]) > 1 else 0


def _fuses_whole(loops: Sequence[LoopInfo], accesses: _Accesses, max_vectorize: int) -> bool:
    """MetaSchedule's fuse-split form: every loop runs the stores contiguously, and together
    they are longer than one vector loop should be (so splitting by ``max_vectorize`` leaves
    an outer part to run in parallel). Reads may then be gathers; without this form the
    block would not be vectorized at all."""
    return max_vectorize > 1 and _contiguous_loops(loops, accesses) == len(loops) and \
        math.prod(lp.extent for lp in loops) > max_vectorize


def _parallel_count(loops: Sequence[LoopInfo], max_extent: int) -> int:
    """MetaSchedule's parallel prefix: how many outer loops to fuse into the parallel loop."""
    count, product = 0, 1
    for loop in loops:
        if loop.is_reduction or loop.kind != "serial" or loop.annotations:
            break
        count += 1
        product *= loop.extent
        if product > max_extent or loop.attached:
            break
    return count if product > 1 and max_extent > 0 else 0


def _unroll(sch: Schedule, block: BlockRV, max_step: int) -> None:
    """Unroll the chain of the block's innermost loops that fits in ``max_step``."""
    loops = analysis.block(sch, block).loops
    handles = sch.get_loops(block)[-len(loops):]
    product = 1
    for position in reversed(range(len(loops))):
        loop = loops[position]
        if position == len(loops) - 1 and loop.kind == "vectorized":
            continue
        if loop.kind != "serial" or loop.attached or product * loop.extent > max_step:
            break
        product *= loop.extent
        sch.unroll(handles[position])


# -- VerifyKernel -----------------------------------------------------------------------------
@dataclasses.dataclass
class VerifyKernel(Postproc):
    """Rejects a program that code generation would not make correct, or not fast enough to be
    worth measuring, saying why: ``apply`` raises ``ScheduleError(reason)`` (the space
    generator reports it with this postprocessor's name) and returns True otherwise;
    ``reason(sch)`` gives the reason, or None, without raising. The checks, on the lowered
    program:

    * unrolled work (``unrolled_work``): an estimate of the code LLVM must optimise. O3 time
      grows with it, roughly a second per 25,000 to 40,000 (see ``max_unrolled_work``);
    * vectorized loops that code generation would run serially (``vector_fallback``: the
      predicate of ``metasched.ir.vectorizable``, the very one code generation asks);
    * races in parallel loops (``parallel_race``).

    ``max_unrolled_work``: the most unrolled work accepted. Measured with ``metasched.build``
    (O3, llvmlite 0.50, LLVM 22, the 2-core znver4 machine) on 30 programs sampled from
    ``cpu_default()`` for the built-in workloads, ``unrolled_work`` -> compile seconds:
    3,000 -> 0.2; 10,000 -> 0.4; 17,000 -> 0.7; 24,000 -> 1.0; 31,000 -> 1.3; 38,000 -> 1.0;
    41,000 -> 0.6-1.2; 46,000 -> 1.1; 54,000 -> 2.0-2.3; 75,000-80,000 -> 2.5-2.6;
    89,000 -> 3.3; 96,000 -> 4.4; 113,000-121,000 -> 3.9-4.6; 140,000-153,000 -> 6.0-7.8;
    251,000-257,000 -> 9.2-10.8; 361,000 -> 11.1 (an outlier: 15,000 -> 1.5, where LLVM
    unrolled short serial loops itself). 60,000 accepts builds of up to about 2 s and rejects
    the multi-second tail: 4.2% of samples at the default sizes (their median work is 700),
    1.7% at small sizes, mostly convolutions whose inlined padding makes a large body."""

    max_unrolled_work: int = 60_000

    def apply(self, sch: Schedule) -> bool:
        reason = self.reason(sch)
        if reason is not None:
            raise ScheduleError(reason)
        return True

    def reason(self, sch: Schedule) -> Optional[str]:
        """Why ``sch`` is rejected, or None when it passes."""
        func = sch.lower()
        work = unrolled_work(func)
        if work > self.max_unrolled_work:
            return (f"its unrolled loops make {work} expression nodes, more than max_unrolled_work="
                    f"{self.max_unrolled_work}: LLVM would take seconds to compile it")
        return vector_fallback(func) or parallel_race(func)


def unrolled_work(func: PrimFunc) -> int:
    """An estimate of the code LLVM must optimise for ``func``, in expression nodes: every
    statement's own nodes (a store's indices and value, a condition) times the copies code
    generation emits of it. An unrolled loop copies its body once per iteration; a vectorized
    loop once per chunk (a loop over full vectors, then power-of-two tails: counted as the
    1 bits of its extent, which needs no lane width). Loops LLVM unrolls on its own are not
    counted."""
    total = 0
    for stmt, _, around in _walk(func.body, _params(func)):
        copies = math.prod(_copies(loop) for loop, _ in around)
        total += copies * sum(1 for e in _exprs(stmt) for _ in walk(e))
    return total


def _copies(loop: For) -> int:
    if loop.kind is ForKind.UNROLLED:
        return loop.extent
    if loop.kind is ForKind.VECTORIZED:
        return bin(loop.extent).count("1")
    return 1


def vector_fallback(func: PrimFunc) -> Optional[str]:
    """Why some vectorized loop of ``func`` would run as a serial loop, or None."""
    for stmt, scope, _ in _walk(func.body, _params(func)):
        if isinstance(stmt, For) and stmt.kind is ForKind.VECTORIZED:
            reason = vector_fallback_reason(stmt, scope.__getitem__)
            if reason is not None:
                return f"vectorized loop {stmt.var} would run serially: {reason}"
    return None


def parallel_race(func: PrimFunc) -> Optional[str]:
    """Why two iterations of some parallel loop of ``func`` may race, or None when none can.

    Sound, never accepting a race: for every parallel loop, each buffer stored to in its body
    and not allocated there (code generation allocates those per thread) must be accessed,
    by every store and load of the body, only at elements that tell which iteration made
    the access (``_owned``). Conditions around accesses are ignored (that only adds
    accesses), and accesses are assumed in bounds, as lowering guarantees."""
    for stmt, scope, _ in _walk(func.body, _params(func)):
        if isinstance(stmt, For) and stmt.kind is ForKind.PARALLEL and stmt.extent > 1:
            reason = _race(stmt, scope)
            if reason is not None:
                return reason
    return None


# An access: its indices and the ranges of the loops inside the parallel loop around it.
_Access = tuple[tuple[Expr, ...], Mapping[str, Interval]]


def _race(loop: For, scope: Scope) -> Optional[str]:
    accesses: dict[str, list[_Access]] = {}
    written: set[str] = set()
    private: set[str] = set()
    for stmt, _, around in _walk(loop.body, scope):
        ranges = {inner.var: (0, inner.extent - 1) for inner, _ in around}
        if isinstance(stmt, Allocate):
            private.add(stmt.buffer.name)
        if isinstance(stmt, Store):
            written.add(stmt.buffer)
            accesses.setdefault(stmt.buffer, []).append((stmt.indices, ranges))
        for e in _exprs(stmt):
            for load in loads(e):
                accesses.setdefault(load.buffer, []).append((load.indices, ranges))
    for buffer in sorted(written - private):
        if not _owned(loop, scope[buffer], accesses[buffer]):
            return (f"parallel loop {loop.var}: two of its iterations may access one element of "
                    f"{buffer}, one of them storing to it")
    return None


# A digit of the parallel variable v: (d, m) stands for (v // d) % m, with m == 0 for v // d.
_Digit = tuple[int, int]


@dataclasses.dataclass(frozen=True)
class _Form:
    """A coordinate of one access, split by what its terms read: ``digits`` of the parallel
    variable with their coefficients, ``outer`` (the terms of enclosing loops: the same in
    every iteration), a constant ``base``, and ``terms`` of inner loops as ``(k, low, high)``,
    ``k`` times a value in ``[low, high]``."""

    digits: tuple[tuple[_Digit, int], ...]
    outer: Expr
    base: int
    terms: tuple[tuple[int, int, int], ...]


def _owned(loop: For, buffer: Buffer, accesses: list[_Access]) -> bool:
    """Whether every access in ``accesses`` touches only elements from which the iteration of
    ``loop`` that made it can be told. An element is seen through coordinates: its flat
    offset and its indices. Where every access gives a coordinate the same digits of the loop
    variable and the same outer terms (``_coordinate_form``), the coordinate tells each digit
    that stands apart from the other terms (``_tells``); the digits told must determine the
    variable (``_determines``)."""
    coordinates = [[flat_index(buffer, indices), *indices] for indices, _ in accesses]
    digits: list[_Digit] = []
    for position in range(len(coordinates[0])):
        forms = [_coordinate_form(coords[position], loop.var, ranges)
                 for coords, (_, ranges) in zip(coordinates, accesses)]
        if any(form is None for form in forms) or len({(f.digits, f.outer) for f in forms}) != 1:
            continue
        digits.extend(digit for digit, k in forms[0].digits if _tells(forms, digit, k, loop.extent))
    return _determines(digits, loop.extent)


def _tells(forms: Sequence[_Form], digit: _Digit, k: int, extent: int) -> bool:
    """Whether the coordinate value tells ``digit`` (coefficient ``k``) in every access: the
    terms below ``|k|`` (other digits and inner terms, with the constant) span ``W < |k|``
    across all accesses, and the terms above are all multiples of some ``M`` with
    ``W + |k| * (largest digit) < M``. Then two accesses to one element agree modulo ``M``
    on the part below and the digit, which lie in a window narrower than ``M``, so they
    agree on it exactly, and the terms below are too narrow to hide a different digit."""
    lows, highs, above = [], [], []
    for form in forms:
        low = high = form.base
        others = [(c, 0, _largest(d, extent)) for d, c in form.digits if d != digit] + list(form.terms)
        for c, a, b in others:
            if abs(c) > abs(k) and a != b:
                above.append(c)
            elif abs(c) == abs(k) and a != b:
                return False
            else:  # below, or a single value
                low, high = low + min(c * a, c * b), high + max(c * a, c * b)
        lows.append(low)
        highs.append(high)
    window = max(highs) - min(lows)
    modulus = math.gcd(*above) if above else math.inf
    return window < abs(k) and window + abs(k) * _largest(digit, extent) < modulus


def _coordinate_form(index: Expr, var: str, ranges: Mapping[str, Interval]) -> Optional[_Form]:
    """``index`` as a ``_Form``, or None when the loop variable enters it other than through
    digits or not at all, or a term mixes inner and enclosing loops or reads memory (which
    the loop may change)."""
    terms = index_terms(index)
    digits: list[tuple[_Digit, int]] = []
    inner: list[tuple[int, int, int]] = []
    outer = {}
    for atom, k in terms.items():
        if atom is None:
            continue
        if loads(atom):
            return None
        names = free_vars(atom)
        if var in names:
            digit = _as_digit(atom, var)
            if digit is None:
                return None
            digits.append((digit, k))
        elif names.isdisjoint(ranges):
            outer[atom] = k
        elif names <= ranges.keys():
            try:
                inner.append((k, *int_bounds(atom, ranges)))
            except (KeyError, ValueError):
                return None
        else:
            return None
    if not digits:
        return None
    return _Form(tuple(sorted(digits)), from_terms(outer), terms.get(None, 0), tuple(inner))


def _largest(digit: _Digit, extent: int) -> int:
    """The largest value ``digit`` takes for ``v`` in ``range(extent)``."""
    d, m = digit
    top = (extent - 1) // d
    return min(top, m - 1) if m else top


def _as_digit(atom: Expr, var: str) -> Optional[_Digit]:
    """``v``, ``v // d``, ``v % m`` or ``(v // d) % m`` as a digit, else None."""
    if atom == Var(var):
        return 1, 0
    if not (isinstance(atom, BinOp) and isinstance(atom.b, IntImm) and atom.b.value > 0):
        return None
    if atom.op == "//" and atom.a == Var(var):
        return atom.b.value, 0
    if atom.op == "%":
        inner = _as_digit(atom.a, var)
        if inner is not None and inner[1] == 0:
            return inner[0], atom.b.value
    return None


def _determines(digits: Sequence[_Digit], extent: int) -> bool:
    """Whether knowing ``digits`` of ``v`` (in ``range(extent)``) tells ``v``. Known so far:
    ``v % low`` and ``v // high`` (at first ``low = 1``, ``high = extent``: ``v // extent`` is 0);
    ``v`` is told once ``high <= low``: ``v // high`` puts it in a window of ``high`` values,
    which ``v % low`` tells apart. ``v // d`` lowers ``high`` to ``d``; ``(v // d) % m`` raises
    ``low`` to ``d * m`` when ``d`` divides ``low``, and lowers ``high`` to ``d`` when ``high``
    divides ``d * m``."""
    low, high = 1, extent
    for _ in range(len(digits) + 1):  # each pass uses one more digit, or nothing changes
        for d, m in digits:
            if m == 0:
                high = min(high, d)
                continue
            if low % d == 0:
                low = math.lcm(low, d * m)
            if (d * m) % high == 0:
                high = min(high, d)
    return high <= low


# -- walking a loop program -------------------------------------------------------------------
def _params(func: PrimFunc) -> dict[str, Buffer]:
    return {b.name: b for b in func.params}


def _walk(stmt: Stmt, scope: Scope, around: tuple[tuple[For, Scope], ...] = ()
          ) -> Iterator[tuple[Stmt, Scope, tuple[tuple[For, Scope], ...]]]:
    """Every statement inside ``stmt``, parents first, with the buffers in scope where it runs
    and the loops around it inside ``stmt`` (outermost first, each with its own scope)."""
    yield stmt, scope, around
    if isinstance(stmt, Seq):
        for child in stmt.stmts:
            yield from _walk(child, scope, around)
    elif isinstance(stmt, For):
        yield from _walk(stmt.body, scope, around + ((stmt, scope),))
    elif isinstance(stmt, Allocate):
        yield from _walk(stmt.body, {**scope, stmt.buffer.name: stmt.buffer}, around)
    elif isinstance(stmt, IfThenElse):
        yield from _walk(stmt.then_body, scope, around)
        if stmt.else_body is not None:
            yield from _walk(stmt.else_body, scope, around)


def _exprs(stmt: Stmt) -> tuple[Expr, ...]:
    """The expressions one statement evaluates itself (not those of the statements inside it)."""
    if isinstance(stmt, Store):
        return (*stmt.indices, stmt.value)
    if isinstance(stmt, IfThenElse):
        return (stmt.cond,)
    return ()
