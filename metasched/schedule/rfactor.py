"""Reduction factorisation: split one reduction into a partial reduction that keeps one
reduction loop as a new spatial axis, and a final reduction over that axis. The partial one
parallelises (or vectorises) over the new axis; the final one is short."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from metasched.errors import ScheduleError
from metasched.ir.analysis import substitute
from metasched.ir.limits import MAX_BUFFER_BYTES
from metasched.ir.expr import BinOp, Expr, FloatImm, Load, Select, Var
from metasched.lang.workload import Axis, Statement, reduce_init
from metasched.lower import IterVar, ScheduleState, Split, StageState
from metasched.lower.lower import loop_values


def rfactor(state: ScheduleState, stage: StageState, loop: IterVar, factor_axis: int) -> StageState:
    primitive = "rfactor"
    st = stage.statement
    if not st.is_reduction:
        raise ScheduleError(f"{primitive}: block {stage.name} is not a reduction")
    if not loop.is_reduce:
        raise ScheduleError(f"{primitive}: loop {loop.name} of block {stage.name} is not a reduction loop")
    if stage.attach is not None or state.attached_at(stage):
        raise ScheduleError(f"{primitive}: block {stage.name} must be at the root with no block computed at "
                            f"its loops")
    n = len(st.axes)
    if not isinstance(factor_axis, int) or not -(n + 1) <= factor_axis <= n:
        raise ScheduleError(f"{primitive}: factor_axis must lie in [{-(n + 1)}, {n}], got {factor_axis!r}")
    if factor_axis < 0:
        factor_axis += n + 1
    size = math.prod(a.extent for a in st.axes) * loop.extent * np.dtype(st.dtype).itemsize
    if size >= MAX_BUFFER_BYTES:
        raise ScheduleError(f"{primitive}: the partial results of block {stage.name} over loop {loop.name} "
                            f"would take {size} bytes, beyond the {MAX_BUFFER_BYTES} a buffer may hold")

    value, guards = loop_values(stage)
    reduce_leaves = [lv for lv in stage.leaves if lv.is_reduce]
    others = [lv for lv in reduce_leaves if lv is not loop]
    # The partial reduction: the body over the leaf loops, the factored loop a spatial axis.
    mapping = {a.name: value[iv.name] for a, iv in zip(st.reduce_axes, stage.axes[n:])}
    body: Expr = substitute(st.body, mapping)
    reduce_guards = [g for g, is_reduce in guards if is_reduce]
    if reduce_guards:
        cond = reduce_guards[0]
        for g in reduce_guards[1:]:
            cond = BinOp("and", cond, g)
        body = Select(cond, body, FloatImm(reduce_init(st.reduce_op), st.dtype))
    for iv in stage.all_loops():
        if iv.is_reduce:
            state.names.discard(iv.name)  # consumed below: the partial reduction reuses the names
    rf_axis = Axis(loop.name, loop.extent)
    rf_axes = st.axes[:factor_axis] + (rf_axis,) + st.axes[factor_axis:]
    rf_name = state.fresh_name(f"{st.name}_rf")
    rf_statement = Statement(rf_name, rf_axes, tuple(Axis(lv.name, lv.extent) for lv in others),
                             st.reduce_op, body, st.dtype, False)
    rf_loops = [IterVar(state.fresh_name(a.name), a.extent, False) for a in rf_axes]
    rf_loops += [IterVar(state.fresh_name(lv.name), lv.extent, True) for lv in others]
    rf_stage = StageState(rf_name, rf_statement, rf_loops, [], list(rf_loops))

    # The final reduction keeps its spatial loops and reduces over the factored axis.
    final = IterVar(state.fresh_name(loop.name), loop.extent, True)
    spatial = [Var(a.name) for a in st.axes]
    load = Load(rf_name, tuple(spatial[:factor_axis] + [Var(final.name)] + spatial[factor_axis:]), st.dtype)
    stage.statement = replace(st, reduce_axes=(Axis(final.name, final.extent),), body=load)
    first = stage.leaves.index(reduce_leaves[0])
    for iv in stage.all_loops():
        if iv.is_reduce:
            iv.consumed_by = primitive
    stage.relations = [r for r in stage.relations if not (r.parent if isinstance(r, Split) else r.fused).is_reduce]
    leaves = [lv for lv in stage.leaves if not lv.is_reduce]
    leaves.insert(first, final)
    stage.axes = stage.axes[:n] + [final]
    stage.leaves = leaves
    state.stages.insert(state.stages.index(stage), rf_stage)
    return rf_stage
