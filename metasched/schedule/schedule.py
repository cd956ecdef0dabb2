"""``Schedule``: the user-facing primitives over a scheduled state.

Names and argument order follow MetaSchedule (``get_block``, ``get_loops``, ``split``, ``fuse``,
``reorder``, ``parallel``, ``vectorize``, ``unroll``). A primitive checks its preconditions and
raises ``ScheduleError`` saying what is wrong before it changes anything.
"""
from __future__ import annotations

from math import prod
from typing import Optional, Sequence, Union

from metasched.errors import ScheduleError
from metasched.ir.stmt import ForKind, PrimFunc
from metasched.lang.workload import Workload
from metasched.lower import Fuse, IterVar, ScheduleState, Split, StageState, lower


class RV:
    """A random variable: a handle that a schedule maps to a block, a loop or a value."""

    __slots__ = ("name",)
    prefix = "v"

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"

    def __str__(self) -> str:
        return self.name


class BlockRV(RV):
    """A handle to a block (the computation of one statement)."""

    __slots__ = ()
    prefix = "b"


class LoopRV(RV):
    """A handle to a loop."""

    __slots__ = ()
    prefix = "l"


Factor = Optional[int]


class Schedule:
    """Transforms a workload's loops. ``str(sch)`` is the current loop program."""

    def __init__(self, workload: Workload) -> None:
        if not isinstance(workload, Workload):
            raise TypeError(f"Schedule needs a Workload, got {type(workload).__name__}")
        self.workload = workload
        self.state = ScheduleState.initial(workload)
        self._symbols: dict[RV, object] = {}
        self._counter = 0

    # -- handles ---------------------------------------------------------------------------
    def _new(self, cls: type, target: object) -> RV:
        rv = cls(f"{cls.prefix}{self._counter}")
        self._counter += 1
        self._symbols[rv] = target
        return rv

    def _stage(self, block: BlockRV, primitive: str) -> StageState:
        if not isinstance(block, BlockRV):
            raise ScheduleError(f"{primitive}: expected a BlockRV, got {block!r}")
        stage = self._symbols.get(block)
        if stage is None:
            raise ScheduleError(f"{primitive}: block {block} does not belong to this schedule")
        return stage

    def _loop(self, loop: LoopRV, primitive: str) -> tuple[IterVar, StageState]:
        if not isinstance(loop, LoopRV):
            raise ScheduleError(f"{primitive}: expected a LoopRV, got {loop!r}")
        iv = self._symbols.get(loop)
        if iv is None:
            raise ScheduleError(f"{primitive}: loop {loop} does not belong to this schedule")
        if iv.consumed_by is not None:
            raise ScheduleError(
                f"{primitive}: loop {loop} ({iv.name}) no longer exists: a {iv.consumed_by} replaced it; "
                f"use the loops that {iv.consumed_by} returned")
        for stage in self.state.stages:
            if any(lv is iv for lv in stage.leaves):
                return iv, stage
        raise ScheduleError(f"{primitive}: loop {loop} ({iv.name}) is not a loop of any block")

    def get(self, rv: RV) -> object:
        """What a handle stands for: a loop's name and extent, a block's name."""
        target = self._symbols.get(rv)
        if target is None:
            raise ScheduleError(f"{rv} does not belong to this schedule")
        if isinstance(target, StageState):
            return target.name
        return target

    # -- queries ---------------------------------------------------------------------------
    def get_block(self, name: str) -> BlockRV:
        """The block that computes tensor ``name``."""
        try:
            stage = self.state.stage(name)
        except KeyError:
            names = ", ".join(s.name for s in self.state.stages)
            raise ScheduleError(f"get_block: no block named {name!r}; the blocks are {names}") from None
        return self._new(BlockRV, stage)

    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """The loops around ``block``, outermost first."""
        stage = self._stage(block, "get_loops")
        return [self._new(LoopRV, lv) for lv in stage.leaves]

    # -- loop transformations --------------------------------------------------------------
    def split(self, loop: LoopRV, factors: Sequence[Factor]) -> list[LoopRV]:
        """Split ``loop`` into ``len(factors)`` nested loops of those extents, outermost first.
        At most one factor may be None: it becomes the smallest extent that covers the loop.
        Factors that overshoot the loop's extent are fine: lowering guards the extra iterations."""
        iv, stage = self._loop(loop, "split")
        factors = list(factors)
        if len(factors) < 2:
            raise ScheduleError(f"split: loop {loop} ({iv.name}) needs at least 2 factors, got {factors}")
        missing = [k for k, f in enumerate(factors) if f is None]
        if len(missing) > 1:
            raise ScheduleError(f"split: at most one factor may be None, got {factors}")
        for f in factors:
            if f is not None and (isinstance(f, bool) or not isinstance(f, int) or f < 1):
                raise ScheduleError(f"split: factors must be positive integers or None, got {factors}")
        known = prod(f for f in factors if f is not None)
        if missing:
            factors[missing[0]] = -(-iv.extent // known)
        elif known < iv.extent:
            raise ScheduleError(
                f"split: factors {factors} cover {known} iterations, fewer than loop {loop} ({iv.name}) "
                f"has ({iv.extent})")
        children = tuple(
            IterVar(self.state.fresh_name(f"{iv.name}_{k}"), f, iv.is_reduce) for k, f in enumerate(factors))
        stage.relations.append(Split(iv, children))
        position = stage.leaves.index(iv)
        stage.leaves[position:position + 1] = children
        iv.consumed_by = "split"
        return [self._new(LoopRV, c) for c in children]

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
        fused = IterVar(self.state.fresh_name("_".join(iv.name for iv in ivs) + "_fused"),
                        prod(iv.extent for iv in ivs), ivs[0].is_reduce)
        stage.relations.append(Fuse(tuple(ivs), fused))
        stage.leaves[position:position + len(ivs)] = [fused]
        for iv in ivs:
            iv.consumed_by = "fuse"
        return self._new(LoopRV, fused)

    def reorder(self, *ordered_loops: LoopRV) -> None:
        """Put the given loops of one block in the given order, in the places they occupy now;
        the block's other loops stay where they are."""
        if not ordered_loops:
            raise ScheduleError("reorder: needs at least one loop")
        ivs, stage = self._same_block(ordered_loops, "reorder")
        positions = sorted(stage.leaves.index(iv) for iv in ivs)
        for position, iv in zip(positions, ivs):
            stage.leaves[position] = iv

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

    # -- loop kinds ------------------------------------------------------------------------
    def _set_kind(self, loop: LoopRV, kind: ForKind, primitive: str) -> None:
        iv, stage = self._loop(loop, primitive)
        if iv.is_reduce and kind in (ForKind.PARALLEL, ForKind.VECTORIZED):
            what = "threads" if kind is ForKind.PARALLEL else "vector lanes"
            raise ScheduleError(
                f"{primitive}: loop {loop} ({iv.name}) of block {stage.name} is a reduction loop: "
                f"its {what} would all update the same elements of {stage.name}")
        if iv.kind is not ForKind.SERIAL and iv.kind is not kind:
            raise ScheduleError(f"{primitive}: loop {loop} ({iv.name}) is already {iv.kind.value}")
        iv.kind = kind

    def parallel(self, loop: LoopRV) -> None:
        """Run the iterations of ``loop`` on all cores."""
        self._set_kind(loop, ForKind.PARALLEL, "parallel")

    def vectorize(self, loop: LoopRV) -> None:
        """Run the iterations of ``loop`` as the lanes of vector instructions."""
        self._set_kind(loop, ForKind.VECTORIZED, "vectorize")

    def unroll(self, loop: LoopRV) -> None:
        """Copy the body of ``loop`` out once per iteration."""
        self._set_kind(loop, ForKind.UNROLLED, "unroll")

    # -- results ---------------------------------------------------------------------------
    def lower(self) -> PrimFunc:
        """The loop program this schedule describes."""
        return lower(self.state)

    def __str__(self) -> str:
        return str(self.lower())

    def __repr__(self) -> str:
        return f"<Schedule of {self.workload}>"
