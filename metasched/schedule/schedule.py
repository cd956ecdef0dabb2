"""``Schedule``: the user-facing primitives over a scheduled state, recorded as a trace.

Names and argument order follow MetaSchedule. Every primitive checks its preconditions and
raises ``ScheduleError`` saying what is wrong before it changes anything; a successful one
appends an ``Instruction`` to the trace. Map of this file:

* handles: random variables and what they stand for
* queries: get_block, get_loops, get_producers, get_consumers
* loop primitives: split, fuse, reorder, parallel, vectorize, unroll
* stage primitives: compute_at and friends, caches, rfactor (implemented in sibling modules)
* annotations, sampling
* traces: recording, replay, copy
"""
from __future__ import annotations

import itertools
import math
import os
from math import prod
from typing import Any, Optional, Sequence, Union

import numpy as np

from metasched.errors import ScheduleError
from metasched.ir.limits import fits_int64
from metasched.ir.stmt import ForKind, PrimFunc
from metasched.lang.workload import Workload
from metasched.lower import Fuse, IterVar, ScheduleState, Split, StageState, lower, with_kinds
from metasched.schedule import analysis, cache, compute_location, layout, rfactor as rfactor_impl, sampling
from metasched.schedule.instruction import (BlockRV, Decided, ExprRV, Instruction, InstructionKind, LoopRV, RV,
                                            is_int, primitive)
from metasched.schedule.trace import Trace

# What a LoopRV from sample_compute_location may stand for besides a loop.
ROOT = "root"
INLINE = "inline"

# More nested loops than this from one tiling are never useful, and a huge ``n`` would make
# that many random variables.
MAX_TILE_LEVELS = 64

Factor = Union[int, ExprRV, None]
AnnotationValue = Union[int, float, str, ExprRV]
Seed = Union[int, np.random.Generator]
_uids = itertools.count()


def _new_uid() -> int:
    """A number for a new schedule, unique across processes too: this process's id above bit
    40, a count below. A handle keeps its schedule's number when it is pickled (search sends
    traces between processes), and a number counted in another process alone could be one of
    this process's schedules, which would then take the handle for its own."""
    return os.getpid() << 40 | next(_uids)


# The primitives that change only the kind of a loop: a program lowered before them stays the
# program but for those loops' kinds (``lower.with_kinds``).
_KIND_ONLY = frozenset({"Parallel", "Vectorize", "Unroll"})


def _tile_count(inputs: tuple, attrs: tuple) -> Optional[int]:
    return int(attrs[0]) if is_int(attrs[0]) else None  # n factors


def make_rng(seed: Seed, where: str) -> np.random.Generator:
    """The generator of ``seed``: a non-negative integer seeds a new one, a Generator is used as
    it is (so that a caller can pass its own stream down). Anything else is a ``ScheduleError``:
    there is no default drawn from the operating system's entropy."""
    seed = _checked_seed(seed, where)
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _checked_seed(seed: Seed, where: str) -> Seed:
    """``seed`` (an integer as a plain int) after the checks of ``make_rng``."""
    if isinstance(seed, np.random.Generator):
        return seed
    if is_int(seed) and seed >= 0:
        return int(seed)
    raise ScheduleError(f"{where}: seed must be a non-negative integer or a numpy.random.Generator, "
                        f"got {seed!r}")


class Schedule:
    """Transforms a workload's loops; ``str(sch)`` is the current loop program and
    ``sch.trace`` the instructions that made it.

    ``seed`` (a non-negative integer, default 0, or a ``numpy.random.Generator``) drives every
    sampling instruction, so the same seed always draws the same schedule."""

    def __init__(self, workload: Workload, seed: Seed = 0) -> None:
        if not isinstance(workload, Workload):
            raise ScheduleError(f"Schedule needs a Workload (from metasched.parse, load or workloads.get), "
                                f"got {type(workload).__name__}")
        self.workload = workload
        self._state = ScheduleState.initial(workload)
        # The generator is made when first drawn from (``rng``): replaying a trace whose
        # decisions are all given draws nothing, and making one costs as much as a primitive.
        self._seed = _checked_seed(seed, "Schedule")
        self._rng: Optional[np.random.Generator] = None
        self._uid = _new_uid()
        # Every handle this schedule made, by name (names are unique), with what it stands
        # for. Keyed by the name rather than the handle: handles hash and compare in Python,
        # and every primitive looks its handles up.
        self._symbols: dict[str, tuple[RV, object]] = {}
        self._counter = 0
        self._insts: list[Instruction] = []
        self._decisions: dict[int, Any] = {}
        self._applying = False  # inside a primitive (see ``instruction.primitive``)
        # Handles of the schedules this one was copied from, as they were at the copy.
        self._inherited: dict[int, frozenset[str]] = {}
        # The loop program of the current state, once ``lower`` made it, but for the loops in
        # ``_kinds`` whose kind alone changed since (search lowers every sample, and the
        # postprocessors lowered it already); ``_state_changing`` forgets it.
        self._lowered: Optional[PrimFunc] = None
        self._kinds: dict[str, ForKind] = {}

    @property
    def rng(self) -> np.random.Generator:
        """The generator every sampling instruction draws from (made from the seed when first
        used)."""
        if self._rng is None:
            self._rng = make_rng(self._seed, "Schedule")
        return self._rng

    # -- handles ---------------------------------------------------------------------------
    def _new(self, cls: type, target: object) -> RV:
        """A handle for ``target`` with a fresh name (prefix and counter, as MetaSchedule names
        them: b0, l1, v2, ...)."""
        name = f"{cls.prefix}{self._counter}"
        while name in self._symbols:  # a replayed trace may have used it
            self._counter += 1
            name = f"{cls.prefix}{self._counter}"
        self._counter += 1
        rv = cls(name, self._uid)
        self._symbols[name] = (rv, target)
        return rv

    def _target(self, rv: object, cls: type, primitive: str) -> object:
        if not isinstance(rv, cls):
            raise ScheduleError(f"{primitive}: expected a {cls.__name__}, got {rv!r}")
        made, target = self._symbols.get(rv.name, (None, None))
        # ``rv`` is the handle of its name if it is of the same class (handles compare by class
        # and name), and it is this schedule's if made here, by a schedule this one was copied
        # from, or for this schedule's trace.
        if type(made) is not type(rv) or (rv.owner != self._uid and rv.name not in self._inherited.get(rv.owner, ())
                                          and not self._in_trace(rv)):
            raise ScheduleError(f"{primitive}: {rv} does not belong to this schedule")
        return target

    def _in_trace(self, rv: RV) -> bool:
        """Whether ``rv`` is one of the handles in this schedule's trace, which are handles of
        this schedule even when another made them: ``replay`` records the instructions of
        the trace it replays as they are, handles and all (``replay._recorded``)."""
        return any(rv is v for inst in self._insts for handles in (inst.outputs, inst.inputs) for v in handles)

    def _stage(self, block: BlockRV, primitive: str) -> StageState:
        stage = self._target(block, BlockRV, primitive)
        if stage not in self._state.stages:  # StageState compares by identity
            raise ScheduleError(f"{primitive}: block {block} ({stage.name}) no longer exists: it was inlined")
        return stage

    def _loop(self, loop: LoopRV, primitive: str) -> tuple[IterVar, StageState]:
        iv = self._target(loop, LoopRV, primitive)
        if not isinstance(iv, IterVar):
            raise ScheduleError(f"{primitive}: {loop} marks the {iv} location, not a loop")
        if iv.consumed_by is not None:
            raise ScheduleError(
                f"{primitive}: loop {loop} ({iv.name}) no longer exists: a {iv.consumed_by} replaced it; "
                f"use the loops that {iv.consumed_by} returned")
        for stage in self._state.stages:
            if iv in stage.leaves:  # IterVar compares by identity
                return iv, stage
        raise ScheduleError(f"{primitive}: loop {loop} ({iv.name}) no longer exists: its block was inlined "
                            f"or its loops were regenerated by compute_at")

    def _int(self, value: Factor, primitive: str) -> Optional[int]:
        if isinstance(value, ExprRV):
            return self._target(value, ExprRV, primitive)
        return value

    def get(self, rv: RV) -> object:
        """What a handle stands for now: an ExprRV's integer, a BlockRV's block name, a LoopRV's
        loop as a frozen ``analysis.LoopInfo`` (``name``, ``extent``, ``kind``, ...), or for the
        mark of ``sample_compute_location`` ``"root"`` or ``"inline"``. Nothing it returns
        can change the schedule; ``metasched.schedule.analysis`` answers more."""
        target = self._target(rv, RV, "get")
        if isinstance(target, StageState):
            return target.name
        if isinstance(target, IterVar):
            return analysis.loop(self, rv)
        return target

    # -- recording -------------------------------------------------------------------------
    def _state_changing(self, kind: InstructionKind) -> None:
        """Called by ``primitive`` before a primitive that is not pure runs (it may change the
        state even when it fails): the lowered program is forgotten, unless the primitive
        changes only a loop's kind (``_set_kind`` then notes the change)."""
        if kind.name not in _KIND_ONLY:
            self._lowered = None
            self._kinds = {}

    def _record(self, kind: InstructionKind, inst: Instruction, decision: Any) -> None:
        """Called after a successful call of a primitive (by ``primitive``, or by ``replay``)."""
        if kind.sampling:
            self._decisions[len(self._insts)] = decision
        self._insts.append(inst)

    def _rename_outputs(self, outputs: Sequence[RV], names: Sequence[str]) -> list[RV]:
        """Handles a primitive just made, renamed to ``names`` (replay keeps a trace's names,
        and records the call after renaming); returns the renamed handles."""
        if [rv.name for rv in outputs] == list(names):
            return list(outputs)  # the usual case: the trace's names are the ones made anew
        renamed = [type(rv)(name, self._uid) for rv, name in zip(outputs, names)]
        targets = [self._symbols.pop(rv.name)[1] for rv in outputs]
        clash = self._symbols.keys() & set(names)
        if clash:
            raise ScheduleError(f"the trace names {', '.join(sorted(clash))} twice")
        self._symbols.update((rv.name, (rv, target)) for rv, target in zip(renamed, targets))
        return renamed

    @property
    def trace(self) -> Trace:
        """The instructions run so far and their decisions."""
        return Trace(tuple(self._insts), self._decisions)

    def copy(self) -> Schedule:
        """An independent schedule in the same state, with the same trace; the handles made
        so far work on both (handles made later belong to the schedule that made them). The
        copy draws from a stream spawned from this one's, so copying (say, to try a primitive
        and throw the copy away) never changes what this schedule samples next."""
        other = Schedule.__new__(Schedule)
        clones: dict[int, object] = {}
        other.workload = self.workload
        other._state = self._state.copy(clones)
        other._seed = other._rng = self.rng.spawn(1)[0]  # an independent stream; this one's draws do not move
        other._uid = _new_uid()
        other._symbols = {name: (type(rv)(name, other._uid), clones.get(id(target), target))
                          for name, (rv, target) in self._symbols.items()}
        other._counter = self._counter
        other._insts = list(self._insts)
        other._decisions = dict(self._decisions)
        other._applying = False
        other._lowered, other._kinds = self._lowered, dict(self._kinds)  # loop names are copied too
        other._inherited = {**self._inherited, self._uid: frozenset(self._symbols)}
        return other

    # -- queries ---------------------------------------------------------------------------
    @primitive("GetBlock", pure=True)
    def get_block(self, name: str) -> BlockRV:
        """The block named ``name`` (the statement that defines tensor ``name``, or a block
        that a primitive made)."""
        try:
            stage = self._state.stage(name)
        except KeyError:
            names = ", ".join(s.name for s in self._state.stages)
            raise ScheduleError(f"get_block: no block named {name!r}; the blocks are {names}") from None
        rv = self._new(BlockRV, stage)
        return rv

    @primitive("GetLoops", pure=True)
    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """The loops around ``block``, outermost first: those of the blocks it is computed
        inside, down to its attach point, then its own."""
        stage = self._stage(block, "get_loops")
        chain: list[IterVar] = list(stage.leaves)
        attach = stage.attach
        while attach is not None:
            target = attach.target
            chain[:0] = target.leaves[:target.leaves.index(attach.loop) + 1]
            attach = target.attach
        loops = [self._new(LoopRV, iv) for iv in chain]
        return loops

    @primitive("GetProducers", pure=True)
    def get_producers(self, block: BlockRV) -> list[BlockRV]:
        """The blocks whose outputs ``block`` reads."""
        stage = self._stage(block, "get_producers")
        blocks = [self._new(BlockRV, s) for s in self._state.producers(stage)]
        return blocks

    @primitive("GetConsumers", pure=True)
    def get_consumers(self, block: BlockRV) -> list[BlockRV]:
        """The blocks that read the output of ``block``."""
        stage = self._stage(block, "get_consumers")
        blocks = [self._new(BlockRV, s) for s in self._state.consumers(stage)]
        return blocks

    # -- loop primitives -------------------------------------------------------------------
    @primitive("Split", count=lambda inputs, attrs: len(inputs) - 1)
    def split(self, loop: LoopRV, factors: Sequence[Factor]) -> list[LoopRV]:
        """Split ``loop`` into ``len(factors)`` nested loops of those extents, outermost first.
        At most one factor may be None: it becomes the smallest extent that covers the loop.
        A factor may be an ExprRV (from ``sample_perfect_tile``).

        Factors whose product overshoots the loop's extent are fine (lowering guards the extra
        iterations), but only as far as every loop of the split still does some work in each
        of its iterations: factor ``k`` may be at most ``ceil(extent / p)``, where ``p`` is the
        product of the factors inside it. So no factor exceeds the loop's extent, the
        innermost factor may be anything up to the extent, and the split runs fewer than
        twice the loop's iterations. ``split(i, [None, 8])`` on a loop of 5 is refused: write
        ``[None, 5]``."""
        iv, stage = self._loop(loop, "split")
        try:
            if isinstance(factors, (str, bytes)):
                raise TypeError
            given = list(factors)
        except TypeError:
            raise ScheduleError(f"split: factors must be a list with one extent per new loop (None for the "
                                f"one to infer), as in split({loop}, [None, 4]); got {factors!r}") from None
        values = [self._int(f, "split") for f in given]
        if len(values) < 2:
            raise ScheduleError(f"split: loop {loop} ({iv.name}) needs at least 2 factors, got {values}")
        missing = [k for k, f in enumerate(values) if f is None]
        if len(missing) > 1:
            raise ScheduleError(f"split: at most one factor may be None, got {values}")
        for f in values:
            if f is not None and (not is_int(f) or f < 1):
                raise ScheduleError(f"split: factors must be positive integers or None, got {values}")
            if f is not None and f > iv.extent:
                raise ScheduleError(f"split: factor {f} is larger than the extent {iv.extent} of loop {loop} "
                                    f"({iv.name}); a factor beyond the extent only adds iterations that do "
                                    f"nothing (use at most {iv.extent})")
        values = [None if f is None else int(f) for f in values]
        known = prod(f for f in values if f is not None)
        if missing:
            values[missing[0]] = -(-iv.extent // known)
        elif known < iv.extent:
            raise ScheduleError(
                f"split: factors {values} cover {known} iterations, fewer than loop {loop} ({iv.name}) "
                f"has ({iv.extent})")
        inside = 1
        for k in range(len(values) - 1, -1, -1):
            needed = -(-iv.extent // inside)
            if values[k] > needed:
                raise ScheduleError(
                    f"split: factor {values[k]} at position {k} of {values} is too large for loop {loop} "
                    f"({iv.name}, extent {iv.extent}): the factors inside it cover {inside} each, so {needed} "
                    f"cover the loop and {values[k] - needed} more would do nothing")
            inside *= values[k]
        children = tuple(IterVar(self._state.fresh_name(f"{iv.name}_{k}"), f, iv.is_reduce)
                         for k, f in enumerate(values))
        stage.relations.append(Split(iv, children))
        position = stage.leaves.index(iv)
        stage.leaves[position:position + 1] = children
        iv.consumed_by = "split"
        # Stages attached at the split loop now sit inside its innermost part.
        for s in self._state.stages:
            if s.attach is not None and s.attach.loop is iv:
                s.attach.loop = children[-1]
        loops = [self._new(LoopRV, c) for c in children]
        return loops

    @primitive("Fuse")
    def fuse(self, *loops: LoopRV) -> LoopRV:
        """Fuse adjacent loops of one block, given outermost first, into one loop."""
        if len(loops) < 2:
            raise ScheduleError(f"fuse: needs at least 2 loops, got {len(loops)}")
        ivs, stage = self._same_block(loops, "fuse")
        position = stage.leaves.index(ivs[0])
        if stage.leaves[position:position + len(ivs)] != ivs:
            order = ", ".join(lv.name for lv in stage.leaves)
            raise ScheduleError(
                f"fuse: loops {', '.join(iv.name for iv in ivs)} must be adjacent and given outermost "
                f"first; the loops of block {stage.name} are {order}")
        if len({iv.is_reduce for iv in ivs}) > 1:
            raise ScheduleError(
                f"fuse: cannot fuse a spatial loop with a reduction loop ({', '.join(iv.name for iv in ivs)})")
        if any(iv.kind is not ForKind.SERIAL for iv in ivs):
            raise ScheduleError("fuse: loops must be serial (fuse before parallel, vectorize or unroll)")
        for other in self._state.attached_at(stage):
            if other.attach.after and any(other.attach.loop is iv for iv in ivs[:-1]):
                raise ScheduleError(
                    f"fuse: block {other.name} is computed after loop {other.attach.loop.name}; fusing that loop "
                    f"with the loops inside it would run {other.name} before its input is complete")
        extent = prod(iv.extent for iv in ivs)
        if not fits_int64(extent):  # overshooting splits can take a fused domain past 64 bits
            raise ScheduleError(f"fuse: the fused loop would run {extent} iterations, more than a 64-bit "
                                f"counter holds")
        fused = IterVar(self._state.fresh_name("_".join(iv.name for iv in ivs) + "_fused"),
                        extent, ivs[0].is_reduce)
        stage.relations.append(Fuse(tuple(ivs), fused))
        stage.leaves[position:position + len(ivs)] = [fused]
        for iv in ivs:
            iv.consumed_by = "fuse"
        for s in self._state.stages:
            if s.attach is not None and any(s.attach.loop is iv for iv in ivs):
                s.attach.loop = fused
        rv = self._new(LoopRV, fused)
        return rv

    @primitive("Reorder")
    def reorder(self, *ordered_loops: LoopRV) -> None:
        """Put the given loops of one block in the given order, in the places they occupy now;
        the block's other loops stay where they are. No loop may move past a loop at which
        another block is computed."""
        if not ordered_loops:
            raise ScheduleError("reorder: needs at least one loop")
        ivs, stage = self._same_block(ordered_loops, "reorder")
        positions = sorted(stage.leaves.index(iv) for iv in ivs)
        new_leaves = list(stage.leaves)
        for position, iv in zip(positions, ivs):
            new_leaves[position] = iv
        for other in self._state.attached_at(stage):
            p = stage.leaves.index(other.attach.loop)
            if new_leaves[p] is not other.attach.loop or \
                    {id(x) for x in new_leaves[:p]} != {id(x) for x in stage.leaves[:p]}:
                raise ScheduleError(
                    f"reorder: block {other.name} is computed at loop {other.attach.loop.name} of block "
                    f"{stage.name}; loops cannot move past that point")
        stage.leaves[:] = new_leaves

    def _same_block(self, loops: Sequence[LoopRV], primitive: str) -> tuple[list[IterVar], StageState]:
        found = [self._loop(rv, primitive) for rv in loops]
        stages = {id(stage): stage for _, stage in found}
        if len(stages) > 1:
            owners = ", ".join(f"{rv} ({iv.name}) of block {stage.name}" for rv, (iv, stage) in zip(loops, found))
            raise ScheduleError(f"{primitive}: the loops belong to different blocks: {owners}")
        ivs = [iv for iv, _ in found]
        if len({id(iv) for iv in ivs}) < len(ivs):
            raise ScheduleError(f"{primitive}: a loop is given twice: {', '.join(str(rv) for rv in loops)}")
        return ivs, found[0][1]

    def _set_kind(self, loop: LoopRV, kind: ForKind, primitive: str) -> None:
        iv, stage = self._loop(loop, primitive)
        if iv.is_reduce and kind in (ForKind.PARALLEL, ForKind.VECTORIZED):
            what = "threads" if kind is ForKind.PARALLEL else "vector lanes"
            raise ScheduleError(
                f"{primitive}: loop {loop} ({iv.name}) of block {stage.name} is a reduction loop: "
                f"its {what} would all update the same elements of {stage.buffer}")
        if iv.kind is not ForKind.SERIAL and iv.kind is not kind:
            raise ScheduleError(f"{primitive}: loop {loop} ({iv.name}) is already {iv.kind.value}")
        iv.kind = kind
        if self._lowered is not None:
            self._kinds[iv.name] = kind

    @primitive("Parallel")
    def parallel(self, loop: LoopRV) -> None:
        """Run the iterations of ``loop`` on all cores."""
        self._set_kind(loop, ForKind.PARALLEL, "parallel")

    @primitive("Vectorize")
    def vectorize(self, loop: LoopRV) -> None:
        """Run the iterations of ``loop`` as the lanes of vector instructions. A loop whose
        body holds other loops (or a stage computed inside it) runs as an ordinary loop."""
        self._set_kind(loop, ForKind.VECTORIZED, "vectorize")

    @primitive("Unroll")
    def unroll(self, loop: LoopRV) -> None:
        """Copy the body of ``loop`` out once per iteration."""
        self._set_kind(loop, ForKind.UNROLLED, "unroll")

    # -- stage primitives ------------------------------------------------------------------
    @primitive("ComputeInline")
    def compute_inline(self, block: BlockRV) -> None:
        """Substitute the computation of an element-wise, non-output block into every block
        that reads it; the block disappears."""
        compute_location.compute_inline(self._state, self._stage(block, "compute_inline"))

    @primitive("ReverseComputeInline")
    def reverse_compute_inline(self, block: BlockRV) -> None:
        """Fold an element-wise block into its only producer, which then writes the block's
        output; the block disappears."""
        compute_location.reverse_compute_inline(self._state, self._stage(block, "reverse_compute_inline"))

    @primitive("ComputeAt")
    def compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """Compute ``block`` inside ``loop`` of a block that reads it, just the region one
        iteration of that loop reads; its other readers must already run inside that loop
        (computed at it or at a loop inside it), and then stay there. ``loop`` may also be the
        root or inline mark of ``sample_compute_location``."""
        stage = self._stage(block, "compute_at")
        mark = self._target(loop, LoopRV, "compute_at")
        if mark == ROOT:
            compute_location.compute_root(self._state, stage)
        elif mark == INLINE:
            compute_location.compute_inline(self._state, stage)
        else:
            iv, target = self._loop(loop, "compute_at")
            compute_location.compute_at(self._state, stage, target, iv)

    @primitive("ReverseComputeAt")
    def reverse_compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """Compute element-wise ``block`` inside ``loop`` of its producer, right after the
        region of the producer that one iteration of the loop completes."""
        stage = self._stage(block, "reverse_compute_at")
        iv, target = self._loop(loop, "reverse_compute_at")
        compute_location.reverse_compute_at(self._state, stage, target, iv)

    @primitive("CacheRead")
    def cache_read(self, block: BlockRV, read_index: int, scope: str) -> BlockRV:
        """A new block that copies the ``read_index``-th tensor ``block`` reads (in order of
        first use) into a buffer of ``scope`` ("global" or "local"); ``block`` then reads the
        copy. Returns the new block."""
        stage = self._stage(block, "cache_read")
        made = cache.cache_read(self._state, stage, read_index, scope)
        rv = self._new(BlockRV, made)
        return rv

    @primitive("CacheWrite")
    def cache_write(self, block: BlockRV, write_index: int, scope: str) -> BlockRV:
        """``block`` now writes into a new buffer of ``scope``; a new block copies that buffer
        to the tensor ``block`` wrote. Returns the new (copying) block."""
        stage = self._stage(block, "cache_write")
        made = cache.cache_write(self._state, stage, write_index, scope)
        rv = self._new(BlockRV, made)
        return rv

    @primitive("TransformLayout")
    def transform_layout(self, block: BlockRV, order: list[int]) -> None:
        """Store the buffer ``block`` writes (an intermediate) with its dimensions in ``order``:
        dimension ``k`` of the stored buffer is dimension ``order[k]`` as written. Every access
        reads and writes the same elements as before; only their addresses change (TVM's
        ``transform_layout`` with an index map that permutes)."""
        layout.transform_layout(self._state, self._stage(block, "transform_layout"), order)

    @primitive("RFactor")
    def rfactor(self, loop: LoopRV, factor_axis: int) -> BlockRV:
        """Factorise a reduction over ``loop``: a new block reduces everything but ``loop`` into
        a tensor with ``loop`` as a new spatial axis at position ``factor_axis``; the original
        block then reduces that tensor over ``loop``. Returns the new block."""
        iv, stage = self._loop(loop, "rfactor")
        made = rfactor_impl.rfactor(self._state, stage, iv, factor_axis)
        rv = self._new(BlockRV, made)
        return rv

    # -- annotations -----------------------------------------------------------------------
    def _annotated(self, target: Union[BlockRV, LoopRV], primitive: str) -> dict:
        if isinstance(target, BlockRV):
            return self._stage(target, primitive).annotations
        return self._loop(target, primitive)[0].annotations

    @primitive("Annotate")
    def annotate(self, block_or_loop: Union[BlockRV, LoopRV], key: str, value: AnnotationValue) -> None:
        """Attach ``key = value`` to a block or a loop; it shows in the program and travels
        with the loop into the loop program. ``value`` may be an ExprRV."""
        if not isinstance(key, str) or not key:
            raise ScheduleError(f"annotate: the key must be a non-empty string, got {key!r}")
        resolved = self._int(value, "annotate") if isinstance(value, ExprRV) else value
        if not isinstance(resolved, (int, float, str)) or isinstance(resolved, bool) or \
                (isinstance(resolved, float) and not math.isfinite(resolved)) or \
                (isinstance(resolved, int) and not fits_int64(resolved)):
            raise ScheduleError(f"annotate: the value must be a 64-bit int, a finite float, a str or an ExprRV, "
                                f"got {value!r}")
        self._annotated(block_or_loop, "annotate")[key] = resolved

    @primitive("Unannotate")
    def unannotate(self, block_or_loop: Union[BlockRV, LoopRV], key: str) -> None:
        """Remove annotation ``key`` from a block or a loop."""
        annotations = self._annotated(block_or_loop, "unannotate")
        if key not in annotations:
            raise ScheduleError(f"unannotate: {block_or_loop} has no annotation {key!r}")
        del annotations[key]

    # -- sampling --------------------------------------------------------------------------
    @primitive("SamplePerfectTile", pure=True, count=_tile_count)
    def sample_perfect_tile(self, loop: LoopRV, *, n: int, max_innermost_factor: int = 16,
                            decision: Optional[Sequence[int]] = None) -> Decided[list[ExprRV]]:
        """``n`` factors whose product is exactly the loop's extent, the innermost at most
        ``max_innermost_factor``. A given ``decision`` that no longer fits the loop is
        repaired by MetaSchedule's rule (see ``sampling.repair_perfect_tile``)."""
        iv = self._tile_loop(loop, "sample_perfect_tile", n, 1, max_innermost_factor, decision)
        if decision is None and n == 1 and 0 < max_innermost_factor < iv.extent:
            raise ScheduleError(
                f"sample_perfect_tile: with n=1 the one factor is the whole extent {iv.extent} of loop {loop} "
                f"({iv.name}), which exceeds max_innermost_factor={max_innermost_factor}; ask for n >= 2 "
                f"or raise max_innermost_factor")
        if decision is None:
            factors = sampling.sample_perfect_tile(self.rng, iv.extent, n, max_innermost_factor)
        else:
            factors = sampling.repair_perfect_tile(iv.extent, [int(f) for f in decision])
        return Decided([self._new(ExprRV, int(f)) for f in factors], tuple(factors))

    @primitive("SampleImperfectTile", pure=True, count=_tile_count)
    def sample_imperfect_tile(self, loop: LoopRV, *, n: int, max_innermost_factor: int = 16,
                              decision: Optional[Sequence[int]] = None) -> Decided[list[ExprRV]]:
        """``n >= 2`` factors that cover the loop with at most one partial tile: the
        innermost any integer from 1 to ``max_innermost_factor`` (0 or less: to the extent),
        the outer ones a perfect tiling of ``ceil(extent / innermost)``. ``split`` by them
        guards the partial tile: ``[86, 6]`` for a loop of 512 runs 516 iterations, the last
        4 skipped. A given ``decision`` that no longer fits the loop is repaired (see
        ``sampling.repair_imperfect_tile``)."""
        iv = self._tile_loop(loop, "sample_imperfect_tile", n, 2, max_innermost_factor, decision)
        if decision is None:
            factors = sampling.sample_imperfect_tile(self.rng, iv.extent, n, max_innermost_factor)
        else:
            factors = sampling.repair_imperfect_tile(iv.extent, [int(f) for f in decision])
        return Decided([self._new(ExprRV, int(f)) for f in factors], tuple(factors))

    def _tile_loop(self, loop: LoopRV, where: str, n: object, least_n: int, max_innermost_factor: object,
                   decision: object) -> IterVar:
        """The loop a tile-sampling instruction tiles, after the checks its arguments share:
        ``n`` from ``least_n`` to ``MAX_TILE_LEVELS``, an integer bound, and a given decision
        of ``n`` positive integers."""
        iv, _ = self._loop(loop, where)
        if not is_int(n) or not least_n <= n <= MAX_TILE_LEVELS:
            raise ScheduleError(f"{where}: n must be an integer from {least_n} to {MAX_TILE_LEVELS}, got {n!r}")
        if not is_int(max_innermost_factor):
            raise ScheduleError(f"{where}: max_innermost_factor must be an integer (0 or less: no limit), "
                                f"got {max_innermost_factor!r}")
        if decision is not None and (not isinstance(decision, (list, tuple)) or len(decision) != n
                                     or any(not is_int(f) or f < 1 for f in decision)):
            raise ScheduleError(f"{where}: decision {decision!r} is not {n} positive integers")
        return iv

    @primitive("SampleCategorical", pure=True)
    def sample_categorical(self, candidates: Sequence[int], probs: Sequence[float],
                           decision: Optional[int] = None) -> Decided[ExprRV]:
        """One of ``candidates`` drawn with ``probs``; the decision is its index."""
        try:
            candidates, probs = tuple(candidates), tuple(float(p) for p in probs)
        except (TypeError, ValueError):
            raise ScheduleError(f"sample_categorical: candidates must be a list of integers and probs a list of "
                                f"numbers, got {candidates!r} and {probs!r}") from None
        if not all(math.isfinite(p) for p in probs):
            raise ScheduleError(f"sample_categorical: probabilities must be finite, got {list(probs)}")
        if not candidates or len(candidates) != len(probs):
            raise ScheduleError(f"sample_categorical: {len(candidates)} candidates but {len(probs)} probabilities")
        if not all(is_int(c) and fits_int64(c) for c in candidates):
            raise ScheduleError(f"sample_categorical: candidates must be 64-bit integers, got {list(candidates)}")
        if decision is None:
            try:
                decision = sampling.sample_categorical(self.rng, probs)
            except ValueError as err:
                raise ScheduleError(f"sample_categorical: {err}") from None
        if not is_int(decision) or not 0 <= decision < len(candidates):
            raise ScheduleError(f"sample_categorical: decision {decision!r} is not an index into {list(candidates)}")
        rv = self._new(ExprRV, candidates[decision])
        return Decided(rv, int(decision))

    @primitive("SampleComputeLocation", pure=True)
    def sample_compute_location(self, block: BlockRV, decision: Optional[int] = None) -> Decided[LoopRV]:
        """Where to compute ``block``: -2 inline, -1 root, otherwise the index of a loop of its
        consumer (the one its other consumers run inside), among those MetaSchedule samples
        (``compute_location.locations``: no unit loop, none past the reductions; ``compute_at``
        itself takes any). A decision that is no longer a candidate becomes the nearest
        candidate below it (MetaSchedule's rule)."""
        stage = self._stage(block, "sample_compute_location")
        candidates, loops = compute_location.locations(self._state, stage)
        if decision is None:
            decision = int(candidates[self.rng.integers(len(candidates))])
        elif not is_int(decision):
            raise ScheduleError(f"sample_compute_location: decision {decision!r} is not an integer")
        else:
            decision = sampling.repair_compute_location(int(decision), candidates)
        target: object = INLINE if decision == -2 else ROOT if decision == -1 else loops[decision]
        rv = self._new(LoopRV, target)
        return Decided(rv, decision)

    # -- postprocessing --------------------------------------------------------------------
    @primitive("EnterPostproc")
    def enter_postproc(self) -> None:
        """Mark the end of the design space's sampling and the start of postprocessing: what
        the trace holds after this mark, postprocessors derived from what came before it, and
        ``replay(..., remove_postproc=True)`` leaves it out."""

    # -- results ---------------------------------------------------------------------------
    def lower(self) -> PrimFunc:
        """The loop program this schedule describes (made once per state: do not change the
        ``attrs`` of what it returns)."""
        if self._lowered is None:
            self._lowered, self._kinds = lower(self._state), {}
        elif self._kinds:
            self._lowered, self._kinds = with_kinds(self._lowered, self._kinds), {}
        return self._lowered

    def __str__(self) -> str:
        return str(self.lower())

    def __repr__(self) -> str:
        return f"<Schedule of {self.workload!r}, {len(self._insts)} instructions>"
