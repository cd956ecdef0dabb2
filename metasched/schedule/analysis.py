"""Read-only facts about a schedule's blocks and loops, for schedule rules and postprocessors.

Every answer is a frozen value computed from the schedule's current state: holding one never
lets a caller change the schedule, and it does not change when the schedule does (ask again).
Search-space modules use these and the ``Schedule`` primitives, never ``Schedule._state``.

* ``loop(sch, loop_rv)`` -> ``LoopInfo``; ``block(sch, block_rv)`` -> ``BlockInfo``
* ``blocks(sch)``: the names of the blocks in post-order (consumers before their producers,
  the outputs first), the order in which ``PostOrderApply`` visits them
* ``compute_locations(sch, block_rv)``: the candidate decisions of ``sample_compute_location``
* ``has_reader_loops(sch, block_rv)``: whether the block has loops of a reader to be computed at

What the block facts mean, for a block ``T[axes] (op)= body``:
* *spatial* axes index ``T``; *reduction* axes are the body's other variables;
* ``is_elementwise``: no reduction, and every tensor of the same rank as ``T`` is read at
  exactly ``T``'s own indices (broadcasts such as ``bias[f]`` are fine);
* ``has_data_reuse`` (Ansor's condition for multi-level tiling): the block reads some tensor
  element more than once, i.e. two of its reads each miss a spatial axis (``A[i, k]`` misses
  ``j``, ``B[k, j]`` misses ``i`` in a matmul), or it is a reduction and one read misses a
  spatial axis. A column sum or a softmax row reduction reads every element once: no reuse.
* ``Access.axes``: per dimension of a read, the axis whose variable alone indexes it (a
  constant offset allowed), or None for any other index; ``Access.exact``: every index is its
  axis variable with no offset (what ``reverse_compute_inline`` and ``reverse_compute_at``
  require of the block that follows);
* ``functions``: the functions the body applies (``exp``, ``max``, ...).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Optional

from metasched.ir.analysis import as_affine, free_vars, loads, walk
from metasched.ir.expr import BINARY_CALLS, UNARY_CALLS, BinOp, Call, Select, Var
from metasched.lang.workload import Statement
from metasched.lower import IterVar, ScheduleState, StageState
from metasched.schedule.compute_location import locations, under

INLINE = -2  # the decisions of sample_compute_location that are not loops
ROOT = -1
# Every function a workload can apply: the math calls, and max and min (binary operators in
# the IR, functions in the workload language).
FUNCTION_NAMES = frozenset(UNARY_CALLS + BINARY_CALLS + ("max", "min"))


@dataclass(frozen=True)
class LoopInfo:
    """A loop: its name in the program, its extent, its kind (``"serial"``, ``"parallel"``,
    ``"vectorized"``, ``"unrolled"``), whether it iterates a reduction axis, its annotations,
    the block whose loop it is and the blocks computed at it."""

    name: str
    extent: int
    kind: str
    is_reduction: bool
    annotations: Mapping[str, object]
    block: str
    attached: tuple[str, ...]


@dataclass(frozen=True)
class AxisInfo:
    """An axis of a block's statement (spatial or reduction) and its extent."""

    name: str
    extent: int


@dataclass(frozen=True)
class Access:
    """One read of a tensor: its name, and per dimension the axis (by name) that indexes it
    alone, or None; ``exact`` when every index is an axis variable with no offset; ``uses``
    every axis its indices read, ``last_uses`` those its last (contiguous) index reads."""

    buffer: str
    axes: tuple[Optional[str], ...]
    exact: bool
    uses: frozenset[str] = frozenset()
    last_uses: frozenset[str] = frozenset()


@dataclass(frozen=True)
class BlockInfo:
    """A block and how it computes (see the module's docstring for the terms).

    ``loops`` are the block's own loops, outermost first; ``attached_to`` is ``(block, loop)``
    when it is computed at another block's loop, None at the root. ``producers`` and
    ``consumers`` are block names; ``reads`` the tensors the body loads, inputs included."""

    name: str
    buffer: str
    shape: tuple[int, ...]
    spatial: tuple[AxisInfo, ...]
    reduction: tuple[AxisInfo, ...]
    reduce_op: Optional[str]
    loops: tuple[LoopInfo, ...]
    accesses: tuple[Access, ...]
    reads: tuple[str, ...]
    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    is_output: bool
    is_elementwise: bool
    has_data_reuse: bool
    has_conditional: bool
    functions: frozenset[str]
    scope: str
    attached_to: Optional[tuple[str, str]]
    annotations: Mapping[str, object]

    @property
    def is_reduction(self) -> bool:
        return self.reduce_op is not None

    def reads_at_own_indices(self, buffer: str) -> bool:
        """Whether the block reads ``buffer``, and every time at exactly its own spatial
        variables in order (``T[i, j]`` in a block over ``i, j``)."""
        own = tuple(a.name for a in self.spatial)
        reads = [acc for acc in self.accesses if acc.buffer == buffer]
        return bool(reads) and all(acc.exact and acc.axes == own for acc in reads)

    @property
    def innermost_axis(self) -> Optional[str]:
        """The spatial axis that indexes the last dimension of the block's tensor (contiguous in
        memory), or None for a scalar."""
        return self.spatial[-1].name if self.spatial else None


def _state(sch) -> ScheduleState:
    return sch._state


def _stage(sch, block_rv) -> StageState:
    return sch._stage(block_rv, "analysis")


# Most loops have no annotations; their facts share one empty (read-only) mapping.
_NO_ANNOTATIONS: Mapping[str, object] = MappingProxyType({})


def _loop_info(iv: IterVar, owner: StageState, attached_at_owner: list[StageState]) -> LoopInfo:
    """``attached_at_owner``: the stages attached at loops of ``owner``. (A postprocessor asks
    for the facts of every block, loops and all, for each candidate: this is kept cheap.)"""
    attached = tuple(s.name for s in attached_at_owner if s.attach.loop is iv) if attached_at_owner else ()
    annotations = MappingProxyType(dict(iv.annotations)) if iv.annotations else _NO_ANNOTATIONS
    return LoopInfo(iv.name, iv.extent, iv.kind.value, iv.is_reduce, annotations, owner.name, attached)


def loop(sch, loop_rv) -> LoopInfo:
    """What ``loop_rv`` is now (``ScheduleError`` if it no longer exists)."""
    iv, owner = sch._loop(loop_rv, "analysis")
    return _loop_info(iv, owner, _state(sch).attached_at(owner))


def _index_axis(index, names: set[str]) -> Optional[str]:
    form = as_affine(index)
    if form is None or len(form[0]) != 1:
        return None
    (var, coefficient), = form[0].items()
    return var if coefficient == 1 and var in names else None


def _block_info(state: ScheduleState, stage: StageState) -> BlockInfo:
    st = stage.statement
    spatial, reduction, accesses, elementwise, reuse, conditional, functions = _statement_facts(st)
    attach = None if stage.attach is None else (stage.attach.target.name, stage.attach.loop.name)
    attached_here = state.attached_at(stage)
    return BlockInfo(
        stage.name, stage.buffer, st.shape, spatial, reduction, st.reduce_op,
        tuple(_loop_info(iv, stage, attached_here) for iv in stage.leaves), accesses, tuple(st.reads()),
        tuple(s.name for s in state.producers(stage)), tuple(s.name for s in state.consumers(stage)),
        st.is_output, elementwise, reuse, conditional, functions, stage.scope, attach,
        MappingProxyType(dict(stage.annotations)))


# What a block's facts take from its statement alone, worked out once per statement: a stage's
# statement never changes, and replaying a trace makes equal ones again (inlining and caches
# make new statements in every replay), so they are memoised by value. Hashing a statement
# costs a few microseconds, reading its body a hundred.
_StatementFacts = tuple[tuple[AxisInfo, ...], tuple[AxisInfo, ...], tuple[Access, ...], bool, bool, bool,
                        frozenset[str]]


@functools.lru_cache(maxsize=1024)
def _statement_facts(st: Statement) -> _StatementFacts:
    """The statement's spatial and reduction axes, its accesses, whether it is elementwise and
    has data reuse, whether it holds a conditional, and the functions it applies."""
    spatial = tuple(AxisInfo(a.name, a.extent) for a in st.axes)
    reduction = tuple(AxisInfo(a.name, a.extent) for a in st.reduce_axes)
    names = {a.name for a in st.axes + st.reduce_axes}
    body_loads = loads(st.body)
    accesses = tuple(Access(ld.buffer, tuple(_index_axis(i, names) for i in ld.indices),
                            all(isinstance(i, Var) and i.name in names for i in ld.indices),
                            frozenset().union(*(free_vars(i) for i in ld.indices)) & names,
                            frozenset(free_vars(ld.indices[-1]) if ld.indices else ()) & names)
                     for ld in body_loads)
    own = tuple(a.name for a in st.axes)
    elementwise = not st.is_reduction and all(
        acc.axes == own for acc in accesses if len(acc.axes) == len(own))
    missing = 0
    reuse = False
    for buffer in dict.fromkeys(acc.buffer for acc in accesses):
        used: set[str] = set()
        for ld in body_loads:
            if ld.buffer == buffer:
                for index in ld.indices:
                    used |= free_vars(index)
        if any(a.extent > 1 and a.name not in used for a in st.axes):
            missing += 1
        if missing >= 2 or (missing >= 1 and st.is_reduction):
            reuse = True
            break
    conditional = any(isinstance(e, Select) for e in walk(st.body))
    return spatial, reduction, accesses, elementwise, reuse, conditional, _functions(st.body)


def _functions(body) -> frozenset[str]:
    called = {e.func for e in walk(body) if isinstance(e, Call)}
    called |= {e.op for e in walk(body) if isinstance(e, BinOp) and e.op in ("max", "min")}
    return frozenset(called)


def block(sch, block_rv) -> BlockInfo:
    """What ``block_rv`` is now (``ScheduleError`` if it was inlined)."""
    return _block_info(_state(sch), _stage(sch, block_rv))


def blocks(sch) -> tuple[str, ...]:
    """The names of the schedule's blocks in post-order: every block after all the blocks that
    read its tensor, so the outputs come first and the first stages last (among blocks with no
    order between them, later statements first), as MetaSchedule visits them."""
    state = _state(sch)
    order: list[str] = []
    done: set[int] = set()

    def visit(stage: StageState) -> None:
        if id(stage) in done:
            return
        done.add(id(stage))
        for consumer in reversed(state.consumers(stage)):
            visit(consumer)
        order.append(stage.name)

    for stage in reversed(state.stages):
        visit(stage)
    return tuple(order)


def compute_locations(sch, block_rv) -> tuple[int, ...]:
    """The decisions ``sample_compute_location`` may take for ``block_rv`` now: ``INLINE`` (-2)
    where inlining is legal, ``ROOT`` (-1), then the indices of the loops of its consumer (the
    one its other consumers run inside) that MetaSchedule keeps (``compute_location.locations``: no unit loop, none past the
    reductions). Mutators replay a trace with a decision provider that asks this."""
    return tuple(locations(_state(sch), _stage(sch, block_rv))[0])


def has_reader_loops(sch, block_rv) -> bool:
    """Whether the block has loops of a reader to be computed at: it has one reader, or one
    that all its other readers are computed in (``compute_location.under``)."""
    return under(_state(sch), _stage(sch, block_rv)) is not None
