"""Where a block computes: inline, at the root, or inside a loop of another block.

Rules kept simple enough to hold for every schedule (each violation is a ``ScheduleError``):
* a block computed at a loop of another (``compute_at``) is read by that block and by blocks
  that run inside one iteration of the loop (computed at it or at a loop inside it: TVM's rule
  that every consumer lies under the loop), and computes exactly the region they read there
  (``lower.bounds``); those other readers then stay where they are (``_pinned``);
* a block computed after another (``reverse_compute_at``) is element-wise, reads the other
  with its own spatial variables, and runs outside the other's reduction loops so that it
  only sees finished values;
* a block whose loops a primitive regenerates must have no other block computed at them.
"""
from __future__ import annotations

import functools
from dataclasses import replace
from typing import Optional

from metasched.errors import ScheduleError
from metasched.ir.analysis import loads, substitute, transform
from metasched.ir.expr import Expr, IntImm, Load, Var
from metasched.lower import Attach, IterVar, ScheduleState, StageState
from metasched.lower.bounds import axis_indices, loop_reach, region


def _no_attached(state: ScheduleState, stage: StageState, primitive: str) -> None:
    attached = state.attached_at(stage)
    if attached:
        names = ", ".join(s.name for s in attached)
        raise ScheduleError(f"{primitive}: block(s) {names} are computed at loops of block {stage.name}; "
                            f"move them first (compute_at them elsewhere or to the root)")


def regenerate_loops(state: ScheduleState, stage: StageState, extents: list[int], why: str) -> None:
    """Give ``stage`` fresh loops: spatial axes of ``extents``, its reduction axes whole."""
    st = stage.statement
    for iv in stage.all_loops():
        iv.consumed_by = why
        state.names.discard(iv.name)  # nothing can refer to them any more: the names are free
    axes = [IterVar(state.fresh_name(a.name), e, False) for a, e in zip(st.axes, extents)]
    axes += [IterVar(state.fresh_name(a.name), a.extent, True) for a in st.reduce_axes]
    stage.axes, stage.relations, stage.leaves = axes, [], list(axes)


def _pinned(state: ScheduleState, stage: StageState, primitive: str) -> None:
    """Refuse to move ``stage`` (or change what it reads) while it reads a block computed at a
    loop of another block: that block computes the region ``stage`` reads there, and only
    there."""
    for producer in state.producers(stage):
        attach = producer.attach
        if attach is not None and not attach.after and attach.target is not stage:
            raise ScheduleError(f"{primitive}: block {stage.name} reads {producer.buffer}, which block "
                                f"{producer.name} computes inside loop {attach.loop.name} of {attach.target.name} "
                                f"for it too; move {producer.name} first (compute it at the root)")


def _chain(stage: StageState, target: StageState) -> Optional[list[StageState]]:
    """The blocks from ``stage`` out to the one computed at a loop of ``target`` (``stage``
    computed at a loop of the next, and so on): None when ``stage`` does not run inside
    ``target``'s loops."""
    chain = [stage]
    while chain[-1].attach is not None and not chain[-1].attach.after:
        if chain[-1].attach.target is target:
            return chain
        chain.append(chain[-1].attach.target)
    return None


def under(state: ScheduleState, stage: StageState) -> Optional[tuple[StageState, int]]:
    """The consumer of ``stage`` that every other consumer runs inside (computed at its loops,
    or at loops of a block computed there), and the position of the outermost loop of it
    they run in (its last loop when there is no other consumer): the loops ``stage`` may be
    computed at. None when there is no such consumer."""
    consumers = state.consumers(stage)
    for target in consumers:
        chains = [_chain(c, target) for c in consumers if c is not target]
        if all(chain is not None for chain in chains):
            return target, min((target.leaves.index(chain[-1].attach.loop) for chain in chains),
                               default=len(target.leaves) - 1)
    return None


def can_inline(state: ScheduleState, stage: StageState) -> bool:
    st = stage.statement
    return not st.is_output and not st.is_reduction and not state.attached_at(stage)


def compute_inline(state: ScheduleState, stage: StageState) -> None:
    st = stage.statement
    if st.is_output:
        raise ScheduleError(f"compute_inline: block {stage.name} writes output {st.name}; outputs must be stored")
    if st.is_reduction:
        raise ScheduleError(f"compute_inline: block {stage.name} is a reduction; only element-wise blocks inline")
    _no_attached(state, stage, "compute_inline")
    _pinned(state, stage, "compute_inline")
    names = tuple(a.name for a in st.axes)
    for consumer in state.consumers(stage):
        consumer.statement = replace(consumer.statement,
                                     body=_inlined(consumer.statement.body, st.name, names, st.body))
    state.stages.remove(stage)


@functools.lru_cache(maxsize=1024)
def _inlined(body: Expr, buffer: str, names: tuple[str, ...], value: Expr) -> Expr:
    """``body`` with each load of ``buffer`` replaced by ``value`` (an expression of the
    variables ``names``) at that load's indices. Cached: every sample and mutant of a design
    space inlines the same statement into the same body again (the expressions are the
    workload's, which never change, so the result can be shared)."""

    def inline(e: Expr):
        if isinstance(e, Load) and e.buffer == buffer:
            return substitute(value, dict(zip(names, e.indices)))
        return None

    return transform(body, inline)


def _loads_of(body: Expr, buffer: str) -> list[Load]:
    return [load for load in loads(body) if load.buffer == buffer]


def reverse_compute_inline(state: ScheduleState, stage: StageState) -> None:
    st = stage.statement
    primitive = "reverse_compute_inline"
    if st.is_reduction:
        raise ScheduleError(f"{primitive}: block {stage.name} is a reduction; only element-wise blocks inline")
    _no_attached(state, stage, primitive)
    _pinned(state, stage, primitive)
    producers = state.producers(stage)
    if len(producers) != 1:
        names = ", ".join(p.name for p in producers) or "none"
        raise ScheduleError(f"{primitive}: block {stage.name} must read the output of exactly one block "
                            f"(it reads {names})")
    producer = producers[0]
    pst = producer.statement
    own = tuple(Var(a.name) for a in st.axes)
    if any(load.indices != own for load in _loads_of(st.body, pst.name)) or pst.shape != st.shape:
        raise ScheduleError(f"{primitive}: block {stage.name} must read {pst.name} at exactly its own indices "
                            f"[{', '.join(a.name for a in st.axes)}]")
    if pst.is_reduction:
        raise ScheduleError(f"{primitive}: producer {producer.name} is a reduction; its values are complete "
                            f"only after its reduction loops (use reverse_compute_at)")
    if pst.is_output:
        raise ScheduleError(f"{primitive}: producer {producer.name} writes output {pst.name}, which must stay")
    if state.consumers(producer) != [stage]:
        raise ScheduleError(f"{primitive}: {pst.name} is read by blocks other than {stage.name}")
    if producer.attach is not None or any(s.attach.after for s in state.attached_at(producer)):
        raise ScheduleError(f"{primitive}: producer {producer.name} must be computed at the root with no "
                            f"block computed after it")
    renames = tuple((a.name, p.name) for a, p in zip(st.axes, pst.axes))
    body = _folded(st.body, renames, pst.name, pst.body)
    producer.statement = replace(pst, name=st.name, body=body, is_output=st.is_output)
    producer.scope = stage.scope
    producer.layout = stage.layout  # the producer now writes the block's buffer
    state.stages.remove(stage)


@functools.lru_cache(maxsize=1024)
def _folded(body: Expr, renames: tuple[tuple[str, str], ...], buffer: str, value: Expr) -> Expr:
    """``body`` with its variables renamed (``renames``: old name, new name) and each load of
    ``buffer`` replaced by ``value``. Cached as ``_inlined`` is, for the same reason."""

    def fold(e: Expr):
        if isinstance(e, Load) and e.buffer == buffer:
            return value
        return None

    return transform(substitute(body, {old: Var(new) for old, new in renames}), fold)


def compute_root(state: ScheduleState, stage: StageState) -> None:
    if stage.attach is None:
        return
    _no_attached(state, stage, "compute_at")
    _pinned(state, stage, "compute_at")
    # At the root a block runs in its place in ``state.stages``: after every block it reads.
    # Its place may be before one of them: ``cache_read`` puts its copy before the root block
    # whose loops hold the reader, which was after this block while it was held there. (None of
    # them can be inside the block that held this one: that block reads this one's output.)
    last = max((state.stages.index(producer.root) for producer in state.producers(stage)), default=-1)
    if state.stages.index(stage) < last:
        state.stages.remove(stage)
        state.stages.insert(last, stage)
    stage.attach = None
    regenerate_loops(state, stage, list(stage.statement.shape), "compute_at")


def compute_at(state: ScheduleState, stage: StageState, target: StageState, loop: IterVar) -> None:
    primitive = "compute_at"
    if target is stage:
        raise ScheduleError(f"{primitive}: block {stage.name} cannot be computed at its own loop")
    if stage.statement.is_output:
        raise ScheduleError(f"{primitive}: block {stage.name} writes output {stage.buffer}, which must be "
                            f"computed whole; {target.name} may read only part of it")
    consumers = state.consumers(stage)
    if target not in consumers:
        names = ", ".join(c.name for c in consumers) or "none"
        raise ScheduleError(f"{primitive}: block {target.name} does not read {stage.buffer}, the output of "
                            f"{stage.name} (its readers: {names})")
    position = target.leaves.index(loop)
    # What one iteration of the loop reads: the target's accesses while the loops inside it
    # run, and every access of the other readers, whose loops (and those of the blocks they
    # are computed in, out to the target) all run inside it.
    accesses, reach = [], loop_reach(target, loop)
    for reader in consumers:
        chain = [] if reader is target else _chain(reader, target)
        if chain is None or (chain and target.leaves.index(chain[-1].attach.loop) < position):
            raise ScheduleError(f"{primitive}: block {reader.name} also reads {stage.buffer} and does not run inside "
                                f"loop {loop.name} of {target.name}; every block that reads {stage.name} must "
                                f"(compute {reader.name} at that loop or inside it first)")
        for running in chain:  # blocks computed at one loop run in stage order
            if state.stages.index(running) < state.stages.index(stage):
                raise ScheduleError(f"{primitive}: block {running.name} runs before {stage.name} in "
                                    f"loop {loop.name}; compute {running.name} at the root and back again")
        for running in chain:
            reach.update(loop_reach(running, None))
        spatial, reduce = axis_indices(reader)
        rst = reader.statement
        mapping = dict(zip([a.name for a in rst.axes], spatial))
        mapping.update(zip([a.name for a in rst.reduce_axes], reduce))
        accesses += [[substitute(i, mapping) for i in load.indices] for load in _loads_of(rst.body, stage.buffer)]
    _no_attached(state, stage, primitive)
    _pinned(state, stage, primitive)
    spans = region(accesses, reach, stage.statement.shape)
    regenerate_loops(state, stage, [extent for _, extent in spans], primitive)
    stage.attach = Attach(target, loop, False, tuple(start for start, _ in spans),
                          compact=not stage.statement.is_output)


def reverse_compute_at(state: ScheduleState, stage: StageState, target: StageState, loop: IterVar) -> None:
    primitive = "reverse_compute_at"
    st, tst = stage.statement, target.statement
    if target is stage:
        raise ScheduleError(f"{primitive}: block {stage.name} cannot be computed at its own loop")
    if st.is_reduction:
        raise ScheduleError(f"{primitive}: block {stage.name} is a reduction; only element-wise blocks can "
                            f"follow a producer's loop")
    if not stage.reads(tst.name):
        raise ScheduleError(f"{primitive}: block {stage.name} does not read {tst.name}, the output of "
                            f"{target.name}")
    if target.attach is not None:
        raise ScheduleError(f"{primitive}: block {target.name} must be computed at the root")
    _no_attached(state, stage, primitive)
    _pinned(state, stage, primitive)
    position = target.leaves.index(loop)
    first_reduce = next((k for k, lv in enumerate(target.leaves) if lv.is_reduce), len(target.leaves))
    if position >= first_reduce:
        raise ScheduleError(f"{primitive}: loop {loop.name} lies inside the reduction loops of {target.name}; "
                            f"{stage.name} would read partial sums")
    order = state.stages.index(target)
    for other in state.producers(stage):
        if other is not target and (other.attach is not None or state.stages.index(other) > order):
            raise ScheduleError(f"{primitive}: block {stage.name} also reads {other.buffer}, which is not "
                                f"computed before {target.name}")
    # Which of the stage's axes each dimension of the target's tensor is read with.
    axis_of_dim: dict[int, int] = {}
    names = [a.name for a in st.axes]
    for load in _loads_of(st.body, tst.name):
        for d, index in enumerate(load.indices):
            if not (isinstance(index, Var) and index.name in names) or axis_of_dim.get(d, index.name) != index.name:
                raise ScheduleError(f"{primitive}: block {stage.name} must read {tst.name} with its own "
                                    f"spatial variables, one per dimension (it reads {load})")
            axis_of_dim[d] = index.name
    spatial, _ = axis_indices(target)  # at the root: its axes run over the whole tensor
    # The region reads the spatial axes alone: the splits of the reduction axes need no reach.
    wanted = frozenset(iv.name for iv in target.axes[:len(tst.axes)])
    spans = region([spatial], loop_reach(target, loop, wanted), tst.shape, exact=True)
    if spans is None:
        raise ScheduleError(f"{primitive}: the elements of {tst.name} that one iteration of loop {loop.name} "
                            f"completes are not one box that {stage.name} could copy: the loops inside it "
                            f"skip elements (a reorder across split parts, an imperfect split cut short in "
                            f"some iterations only, a fused loop partly outside); reverse_compute_at at "
                            f"another loop, or first, then split, reorder or fuse")
    starts: list[Expr] = [IntImm(0)] * len(names)
    shape = st.shape
    extents = list(shape)
    for d, name in axis_of_dim.items():
        a = names.index(name)
        starts[a], extents[a] = spans[d][0], min(spans[d][1], shape[a])
    regenerate_loops(state, stage, extents, primitive)
    stage.attach = Attach(target, loop, True, tuple(starts), compact=False)


def locations(state: ScheduleState, stage: StageState) -> tuple[list[int], list[IterVar]]:
    """The candidate decisions of ``sample_compute_location`` (sorted: -2 inline where legal,
    -1 root, then loop indices) and the loops those indices name.

    The loops are those of the consumer the others run inside (``under``; the only consumer,
    where there is one) down to the outermost loop the others are computed at, those that
    MetaSchedule's ``CollectComputeLocation`` keeps: no unit loop (computing there is
    computing at the root, but inside a loop that stops the parallel rewrite's prefix, so the
    whole program would run on one core); no data-parallel loop after a reduction loop; no
    reduction loop after the last data-parallel one (recomputing the producer per step of the
    innermost reduction)."""
    candidates = ([-2] if can_inline(state, stage) else []) + [-1]
    found = under(state, stage)
    if found is not None and not state.attached_at(stage) and not stage.statement.is_output:
        target, deepest = found
        loops = list(target.leaves)
        last_spatial = max((i for i, loop in enumerate(loops) if not loop.is_reduce), default=-1)
        reduced = False
        for i, loop in enumerate(loops[:deepest + 1]):
            if loop.extent == 1:
                continue
            if loop.is_reduce:
                reduced = True
                if i > last_spatial:
                    break
            elif reduced:
                break
            candidates.append(i)
        return candidates, loops
    return candidates, []
