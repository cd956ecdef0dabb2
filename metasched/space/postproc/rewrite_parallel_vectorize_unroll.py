"""``RewriteParallelVectorizeUnroll``: make real loop kinds of the annotations
``ParallelizeVectorizeUnroll`` leaves (MetaSchedule's ``rewrite_parallel_vectorize_unroll.cc``).

How it decides. A block without the annotations takes those of its nearest annotated consumer
(the blocks rules made: caches, rfactor's partial blocks), and a block computed at another
block's loop, failing that, those of that block. Then for each block:

* vector run: the longest run of innermost loops, at most ``vectorize`` iterations in all,
  that are spatial, serial, unannotated and hold no other block, over which the block's
  store is contiguous (stride 1 in its buffer) and every access it makes is linear (each
  loop's stride is the next one's times its extent). The run is fused and vectorized: no
  access is then worse than with the innermost loop vectorized alone, and code generation
  never falls back (``metasched.ir.vectorizable`` is asked too).
* parallel (blocks at the root only): MetaSchedule's prefix of the outer loops not in the
  vector run: spatial, serial and unannotated, up to and including the first that holds
  another block or takes the product of extents past ``parallel``; fused, made parallel. A
  root block whose every loop could join the store's contiguous run, but whose extents
  multiply past ``vectorize``, takes MetaSchedule's other form instead: all its loops fused,
  split by ``vectorize``, the outer part parallel and the inner vectorized.
* unroll (reduction blocks only: as in MetaSchedule, a spatial block gains nothing from it),
  once every block has its parallel and vector loops: from the innermost loop outward,
  passing over the vectorized one, each serial loop while the product of the unrolled
  extents stays within the depth and the program's unrolled work
  (``loop_program.UnrolledWork``, the estimate ``VerifyKernel`` limits) within
  ``max_unrolled_work``; the chain stops at a loop that holds another block or would take
  either past its limit.

Map of this file: the limits each block asks for (``_block_limits``); the parallel loops that
do not depend on a vector run (``_parallel_first``); the accesses of each block in the program
lowered then (``_accesses``, ``_Offset``); per block the vector run (``_vector_run``) and the
parallel prefix (``_parallel_count``) or the fuse-split form; last the unroll chains
(``_unroll``). ``_Loops`` follows a block's loops as the rewrite changes them.

A sample is lowered once where it can be (twice when its vector runs fuse loops, or a block
whose parallel loop depends on its vector run fuses some); the rewrite leaves that program,
with the kinds of the loops changed since, for ``VerifyKernel`` (``loop_program.remember``).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Mapping, Optional, Sequence

from metasched.errors import ScheduleError
from metasched.ir.access import Terms
from metasched.ir.analysis import free_vars, loads
from metasched.ir.expr import Expr, Var
from metasched.ir.stmt import Buffer, For, ForKind, Store
from metasched.schedule import BlockRV, LoopRV, Schedule, analysis
from metasched.schedule.analysis import BlockInfo, LoopInfo
from metasched.schedule.annotations import (PARALLEL, PARALLEL_VECTORIZE_UNROLL, UNROLL_EXPLICIT, UNROLL_IMPLICIT,
                                            VECTORIZE)
from metasched.space.base import Postproc
from metasched.space.loop_program import (MAX_UNROLLED_WORK, Around, Lowered, Scope, UnrolledWork, flat_terms,
                                          remember, slopes)

__all__ = ["RewriteParallelVectorizeUnroll"]


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
    ``meta_schedule.unroll_explicit`` / ``unroll_implicit`` (the sampled unroll depth) into
    parallel, vectorized and unrolled loops, and removes them (the module's docstring says
    how). It unrolls up to the sampled depth but never into code too big to compile quickly:
    with the same ``max_unrolled_work`` (``loop_program.MAX_UNROLLED_WORK`` unless changed;
    keep the two equal), ``VerifyKernel`` never rejects a program for its size because of this
    rewrite. Every primitive is checked against the schedule's facts before it is issued, so
    the rewrite itself never fails on a program the rules made."""

    max_unrolled_work: int = MAX_UNROLLED_WORK

    def apply(self, sch: Schedule) -> bool:
        blocks = {name: sch.get_block(name) for name in analysis.blocks(sch)}
        infos = {name: analysis.block(sch, rv) for name, rv in blocks.items()}
        limits = _block_limits(infos)
        # Read, the annotations go first: the programs lowered below are then the final
        # state's but for the loops the rewrite changes.
        for name, rv in blocks.items():
            for key in PARALLEL_VECTORIZE_UNROLL:
                if key in infos[name].annotations:
                    sch.unannotate(rv, key)
        if not limits:
            return True
        # A block's loops as the rewrite changes them (the rewrite of one block changes no
        # other block's loops, nor where a block is computed).
        loops = {name: _Loops(sch, blocks[name], infos[name].loops) for name in limits}
        # The program is lowered once where it can be: the parallel loops that do not depend
        # on the vector run are made first, the vector runs read from the program lowered
        # then, and it is lowered again only where they fuse loops.
        deferred = set()
        for name, limit in limits.items():
            count = _parallel_first(infos[name], limit)
            if count is None:
                deferred.add(name)
            elif count:
                loops[name].parallelize(count)
        program = Lowered(sch.lower())
        accesses = _accesses(program)
        kinds: dict[str, ForKind] = {}  # loops whose kind alone changed since the lowering
        fused = False
        for name, limit in limits.items():
            fused |= _parallelize_vectorize(infos[name], loops[name], limit, accesses.get(infos[name].buffer),
                                            program, kinds, parallel=name in deferred)
        if fused:
            program, kinds = Lowered(sch.lower()), {}
        unrolling = [(loops[name], limit.max_unroll) for name, limit in limits.items()
                     if infos[name].is_reduction and limit.max_unroll > 0]
        total = None  # the final program's unrolled work, when ``_unroll`` counted it
        if unrolling:
            work = program.changed(kinds).unrolled_work()
            unrolled, total = _unroll(unrolling, work, self.max_unrolled_work)
            kinds.update(dict.fromkeys(unrolled, ForKind.UNROLLED))
        remember(sch, program.changed(kinds, unrolled_total=total))
        return True


class _Loops:
    """A block's own loops, outermost first, as the rewrite fuses them and changes their kinds:
    ``infos`` (what ``analysis`` says of them) and ``handles`` (asked for once)."""

    def __init__(self, sch: Schedule, block: BlockRV, infos: Sequence[LoopInfo]) -> None:
        self.sch, self.block, self.infos = sch, block, list(infos)
        self._handles: Optional[list[LoopRV]] = None

    @property
    def handles(self) -> list[LoopRV]:
        if self._handles is None:
            self._handles = self.sch.get_loops(self.block)[-len(self.infos):]
        return self._handles

    def _fused(self, start: int, stop: int) -> LoopRV:
        """Loops ``start`` to ``stop`` as one loop (fused if more than one)."""
        handles = self.handles
        loop = self.sch.fuse(*handles[start:stop]) if stop - start > 1 else handles[start]
        handles[start:stop] = [loop]
        return loop

    def _update(self, start: int, stop: int, loops: Sequence[LoopRV]) -> None:
        self.infos[start:stop] = [analysis.loop(self.sch, loop) for loop in loops]

    def parallelize(self, count: int) -> None:
        """Fuse the outer ``count`` loops into one parallel loop."""
        loop = self._fused(0, count)
        self.sch.parallel(loop)
        self._update(0, count, [loop])

    def vectorize(self, run: int) -> None:
        """Fuse the inner ``run`` loops into one vectorized loop."""
        start = len(self.infos) - run
        loop = self._fused(start, len(self.infos))
        self.sch.vectorize(loop)
        self._update(start, len(self.infos), [loop])

    def fuse_split(self, factor: int) -> None:
        """MetaSchedule's fuse-split form: every loop fused, split by ``factor``, the outer part
        parallel and the inner vectorized."""
        outer, inner = self.sch.split(self._fused(0, len(self.infos)), [None, factor])
        self.sch.parallel(outer)
        self.sch.vectorize(inner)
        self.handles[:] = [outer, inner]
        self._update(0, len(self.infos), [outer, inner])

    def unroll(self, position: int) -> None:
        self.sch.unroll(self.handles[position])
        self.infos[position] = dataclasses.replace(self.infos[position], kind=ForKind.UNROLLED.value)


def _own_limits(info: BlockInfo) -> Optional[_Limits]:
    found = {key: info.annotations[key] for key in PARALLEL_VECTORIZE_UNROLL if key in info.annotations}
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


class _Offset:
    """The flat element offset of ``buffer[indices]``, asked for its coefficient in several
    loops. Where a loop variable enters every index only through sums and products with
    integer literals, the coefficient is read off the indices (``loop_program.slopes``);
    otherwise it is that of the offset's linear combination of atoms (``flat_terms``, worked
    out once), which also sees through the ``//`` and ``%`` pairs that flattening a fused
    loop makes."""

    def __init__(self, buffer: Buffer, indices: tuple[Expr, ...]) -> None:
        self.buffer, self.indices = buffer, indices
        self._coefficients: dict[str, Optional[int]] = {}
        self._slopes = [slopes(index) for index in indices]
        self._terms: Optional[tuple[Terms, frozenset[str]]] = None

    def coefficient(self, var: str) -> Optional[int]:
        """``linear_in(offset, var)[0]``: the coefficient of ``var``, None where it enters
        non-linearly."""
        if var not in self._coefficients:
            if any(var in nonlinear for _, nonlinear in self._slopes):
                terms, nonlinear = self._atoms()
                found = None if var in nonlinear else terms.get(Var(var), 0)
            else:
                found = sum(coefficients.get(var, 0) * stride
                            for (coefficients, _), stride in zip(self._slopes, self.buffer.strides))
            self._coefficients[var] = found
        return self._coefficients[var]

    def _atoms(self) -> tuple[Terms, frozenset[str]]:
        """The offset's terms, and the variables inside its atoms that are not variables."""
        if self._terms is None:
            terms = flat_terms(self.buffer, self.indices)
            inside = [free_vars(atom) for atom in terms if atom is not None and not isinstance(atom, Var)]
            self._terms = terms, frozenset().union(*inside)
        return self._terms


class _Accesses:
    """Where a block's statement touches memory in the lowered program, as flat element
    offsets (worked out when first asked for): its stores (the update and, for a reduction,
    the initialisation) and the reads in their values; ``innermost(var)``, the ``For`` nodes
    of a loop around its stores (a reduction's initialisation repeats spatial loops)."""

    def __init__(self, offsets: dict[tuple[int, int], _Offset]) -> None:
        # Each distinct access, by the identity of its tuple of indices: lowering gives a
        # block's stores and the read of its own value one tuple, and the program keeps it.
        self._stores: dict[tuple[int, int], tuple[Buffer, tuple[Expr, ...]]] = {}
        self._reads: dict[tuple[int, int], tuple[Buffer, tuple[Expr, ...]]] = {}
        self._offsets = offsets  # shared by the blocks of one program
        self._arounds: dict[int, Around] = {}  # the loops around each store, by identity

    def _offset(self, key: tuple[int, int], buffer: Buffer, indices: tuple[Expr, ...]) -> _Offset:
        if key not in self._offsets:
            self._offsets[key] = _Offset(buffer, indices)
        return self._offsets[key]

    @functools.cached_property
    def stores(self) -> tuple[_Offset, ...]:
        return tuple(self._offset(key, *access) for key, access in self._stores.items())

    @functools.cached_property
    def reads(self) -> tuple[_Offset, ...]:
        return tuple(self._offset(key, *access) for key, access in self._reads.items())

    def innermost(self, var: str) -> Sequence[tuple[For, Scope]]:
        """The ``For`` nodes of loop ``var`` around the stores (each once), with their scopes.
        Asked of a block's innermost loop: it is found from the inside out."""
        found: dict[int, tuple[For, Scope]] = {}
        for around in self._arounds.values():
            for loop, scope in reversed(around):
                if loop.var == var:
                    found.setdefault(id(loop), (loop, scope))
                    break  # loop names are unique along one nest
        return tuple(found.values())


def _accesses(program: Lowered) -> dict[str, _Accesses]:
    """The accesses of every block, by the buffer it stores to."""
    found: dict[str, _Accesses] = {}
    offsets: dict[tuple[int, int], _Offset] = {}
    for stmt, scope, around in program.sites():
        if not isinstance(stmt, Store):
            continue
        block = found.get(stmt.buffer)
        if block is None:
            block = found[stmt.buffer] = _Accesses(offsets)
        buffer = scope[stmt.buffer]
        block._stores[id(buffer), id(stmt.indices)] = (buffer, stmt.indices)
        for ld in loads(stmt.value):
            buffer = scope[ld.buffer]
            block._reads[id(buffer), id(ld.indices)] = (buffer, ld.indices)
        block._arounds.setdefault(id(around), around)
    return found


def _parallel_first(info: BlockInfo, limits: _Limits) -> Optional[int]:
    """How many outer loops of the block to fuse into its parallel loop, when that does not
    depend on its vector run (None when it does). The run is at most the innermost
    rewritable loops whose extents multiply to at most ``vectorize``; if the parallel prefix
    is the same whatever run that leaves, and the fuse-split form cannot apply (some loop
    is not rewritable), the prefix is known before the program is read."""
    loops = info.loops
    if info.attached_to is not None or limits.max_parallel <= 0 or not loops:
        return 0
    rewritable = 0
    while rewritable < len(loops) and _rewritable(loops[-1 - rewritable]):
        rewritable += 1
    if rewritable == len(loops) and _fuses_whole(loops, rewritable, limits.max_vectorize):
        return None
    longest = 0
    while longest < rewritable and math.prod(lp.extent for lp in loops[-1 - longest:]) <= limits.max_vectorize:
        longest += 1
    counts = {_parallel_count(loops[:len(loops) - run], limits.max_parallel) for run in range(longest + 1)}
    return counts.pop() if len(counts) == 1 else None


def _parallelize_vectorize(info: BlockInfo, loops: _Loops, limits: _Limits, accesses: Optional[_Accesses],
                           program: Lowered, kinds: dict[str, ForKind], parallel: bool) -> bool:
    """The vector loop of one block and, with ``parallel``, its parallel loop (see the class's
    docstring); whether it fused loops (else ``kinds`` gains the loops whose kind changed)."""
    if not loops.infos or accesses is None:
        return _parallel_alone(info, loops, limits, kinds) if parallel else False
    contiguous = _contiguous_loops(loops.infos, accesses)
    if parallel and info.attached_to is None and limits.max_parallel > 0 and \
            _fuses_whole(loops.infos, contiguous, limits.max_vectorize) and _vectorizes(loops.infos, accesses, program):
        loops.fuse_split(limits.max_vectorize)
        return True
    run = _vector_run(loops.infos, accesses, contiguous, limits.max_vectorize)
    if run and not _vectorizes(loops.infos, accesses, program):
        run = 0
    fused = run > 1
    if parallel:
        fused |= _parallel_alone(info, loops, limits, kinds, run)
    if run:
        kinds[loops.infos[-1].name] = ForKind.VECTORIZED
        loops.vectorize(run)
    return fused


def _parallel_alone(info: BlockInfo, loops: _Loops, limits: _Limits, kinds: dict[str, ForKind], run: int = 0) -> bool:
    """The parallel prefix of the loops outside the vector run; whether it fused loops."""
    if info.attached_to is not None:
        return False
    count = _parallel_count(loops.infos[:len(loops.infos) - run], limits.max_parallel)
    if count:
        kinds[loops.infos[0].name] = ForKind.PARALLEL
        loops.parallelize(count)
    return count > 1


def _rewritable(loop: LoopInfo) -> bool:
    """A loop the rewrite may fuse into a vector run: spatial, serial, unannotated, holding no
    other block."""
    return not loop.is_reduction and loop.kind == "serial" and not loop.annotations and not loop.attached


def _linear_run(loops: Sequence[LoopInfo], offset: _Offset, contiguous: bool, most: int) -> int:
    """How many of the innermost ``loops`` (at most ``most``) ``offset`` runs through linearly:
    each loop's coefficient is the next inner one's times that one's extent, so that over
    the loop their fusion makes the offset is ``c * fused + rest``; with ``contiguous``, ``c``
    must be 1."""
    count, expected = 0, None
    for loop in reversed(loops):
        if count == most:
            break
        coefficient = offset.coefficient(loop.name)
        if coefficient is None or (expected is None and contiguous and coefficient != 1) or \
                (expected is not None and coefficient != expected):
            break
        count += 1
        expected = coefficient * loop.extent
    return count


def _contiguous_loops(loops: Sequence[LoopInfo], accesses: _Accesses) -> int:
    """How many innermost loops are rewritable and run the block's stores contiguously."""
    count = 0
    while count < len(loops) and _rewritable(loops[-1 - count]):
        count += 1
    if not count or not accesses.stores:
        return 0
    for offset in accesses.stores:
        count = _linear_run(loops, offset, contiguous=True, most=count)
    return count


def _vectorizes(loops: Sequence[LoopInfo], accesses: _Accesses, program: Lowered) -> bool:
    """Whether code generation would vectorize the innermost loop (every ``For`` of it): then
    it vectorizes the fusion of the vector run too, whose accesses are the innermost loop's,
    scaled. Asked last, of a block about to be vectorized: it is the dearest question."""
    innermost = accesses.innermost(loops[-1].name)
    return all(program.vector_fallback_reason(loop, scope) is None for loop, scope in innermost)


def _vector_run(loops: Sequence[LoopInfo], accesses: _Accesses, contiguous: int, max_extent: int) -> int:
    """How many innermost loops to fuse and vectorize (0: none), of the ``contiguous`` ones."""
    count = contiguous
    for offset in accesses.reads:
        count = _linear_run(loops, offset, contiguous=False, most=count)
    while count and math.prod(lp.extent for lp in loops[len(loops) - count:]) > max_extent:
        count -= 1
    return count if math.prod(lp.extent for lp in loops[len(loops) - count:]) > 1 else 0


def _fuses_whole(loops: Sequence[LoopInfo], contiguous: int, max_vectorize: int) -> bool:
    """MetaSchedule's fuse-split form: every loop runs the stores contiguously, and together
    they are longer than one vector loop should be (so splitting by ``max_vectorize`` leaves
    an outer part to run in parallel). Reads may then be gathers; without this form the
    block would not be vectorized at all."""
    return max_vectorize > 1 and contiguous == len(loops) and math.prod(lp.extent for lp in loops) > max_vectorize


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


def _unroll(blocks: Sequence[tuple[_Loops, int]], work: UnrolledWork, max_work: int) -> tuple[set[str], int]:
    """Unroll, for each block with its depth, the chain of its innermost loops that fits in
    the depth and keeps the program's unrolled work (``work`` of the program as it is now)
    within ``max_work``; the names of the loops unrolled, and the program's unrolled work
    with them unrolled (``work.total(names)``, counted along the way)."""
    unrolled: set[str] = set()
    running = work.unrolling()  # ``work.total(unrolled | {loop})``, one loop at a time
    for loops, max_step in blocks:
        product = 1
        for position in reversed(range(len(loops.infos))):
            loop = loops.infos[position]
            if position == len(loops.infos) - 1 and loop.kind == "vectorized":
                continue
            if loop.kind != "serial" or loop.attached or product * loop.extent > max_step or \
                    running.total_with(loop.name) > max_work:
                break
            product *= loop.extent
            unrolled.add(loop.name)
            running.unroll(loop.name)
            loops.unroll(position)
    return unrolled, running.total
