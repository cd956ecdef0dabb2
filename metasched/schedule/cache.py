"""Cache stages: a copy of a tensor that one block reads (``cache_read``), or a buffer a block
writes before a new block copies it to the tensor (``cache_write``)."""
from __future__ import annotations

from dataclasses import replace

from metasched.errors import ScheduleError
from metasched.ir.analysis import transform
from metasched.ir.expr import Expr, Load, Var
from metasched.lang.workload import Axis, Statement
from metasched.lower import IterVar, ScheduleState, StageState

SCOPES = ("global", "local")


def _check_scope(scope: str, primitive: str) -> None:
    if scope not in SCOPES:
        raise ScheduleError(f"{primitive}: scope must be one of {SCOPES}, got {scope!r}")


def _copy_stage(state: ScheduleState, name: str, source: str, shape: tuple[int, ...], dtype: str,
                is_output: bool, scope: str) -> StageState:
    """A block ``name[ax0, ...] = source[ax0, ...]`` over ``shape``."""
    axes = tuple(Axis(f"ax{d}", extent) for d, extent in enumerate(shape))
    body = Load(source, tuple(Var(a.name) for a in axes), dtype)
    statement = Statement(name, axes, (), None, body, dtype, is_output)
    loops = [IterVar(state.fresh_name(a.name), a.extent, False) for a in axes]
    return StageState(name, statement, loops, [], list(loops), scope)


def cache_read(state: ScheduleState, stage: StageState, read_index: int, scope: str) -> StageState:
    primitive = "cache_read"
    _check_scope(scope, primitive)
    reads = stage.statement.reads()
    if not isinstance(read_index, int) or not 0 <= read_index < len(reads):
        raise ScheduleError(f"{primitive}: block {stage.name} reads {len(reads)} tensor(s) ({', '.join(reads)}); "
                            f"read_index {read_index!r} is out of range")
    source = reads[read_index]
    # The copy runs at the root, before the root block whose loops hold ``stage``: the source
    # must be complete by then.
    root = stage.root
    for producer in state.producers(stage):
        if producer.buffer != source:
            continue
        if producer.attach is not None and producer.attach.target is stage:
            raise ScheduleError(f"{primitive}: {source} is computed at a loop of {stage.name}; "
                                f"cache it before computing it there")
        if producer.attach is not None or state.stages.index(producer) >= state.stages.index(root):
            raise ScheduleError(f"{primitive}: {source} is still being computed where {stage.name} runs "
                                f"(inside the loops of {root.name}); a copy at the root would read it unfinished")
    tensor = state.workload.tensor(source) if source in {t.name for t in state.workload.inputs} \
        else next(s.statement.tensor for s in state.stages if s.buffer == source)
    name = state.fresh_name(f"{source}_{scope}")
    cache = _copy_stage(state, name, source, tensor.shape, tensor.dtype, False, scope)

    def redirect(e: Expr):
        return Load(name, e.indices, e.dtype_) if isinstance(e, Load) and e.buffer == source else None

    stage.statement = replace(stage.statement, body=transform(stage.statement.body, redirect))
    state.stages.insert(state.stages.index(stage.root), cache)
    return cache


def cache_write(state: ScheduleState, stage: StageState, write_index: int, scope: str) -> StageState:
    primitive = "cache_write"
    _check_scope(scope, primitive)
    if write_index != 0:
        raise ScheduleError(f"{primitive}: block {stage.name} writes one tensor ({stage.buffer}); "
                            f"write_index must be 0, got {write_index!r}")
    if stage.attach is not None:
        raise ScheduleError(f"{primitive}: block {stage.name} is computed at a loop of {stage.attach.target.name}; "
                            f"cache its output while it is at the root")
    if any(s.attach.after for s in state.attached_at(stage)):
        raise ScheduleError(f"{primitive}: a block is computed after a loop of {stage.name}; cache first")
    old = stage.statement
    name = state.fresh_name(f"{old.name}_{scope}")
    stage.statement = replace(old, name=name, is_output=False)
    stage.scope = scope
    copy = _copy_stage(state, name, name, old.shape, old.dtype, old.is_output, "global")
    copy.statement = replace(copy.statement, name=old.name)
    copy.layout, stage.layout = stage.layout, None  # the copy now writes the laid-out buffer
    state.stages.insert(state.stages.index(stage) + 1, copy)
    return copy
