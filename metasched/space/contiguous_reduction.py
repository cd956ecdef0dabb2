"""``ContiguousReduction``: reductions without data reuse, reshaped so that their innermost loop
runs along memory and can be vectorised. Not one of MetaSchedule's rules: its CPU space holds
no fast program of a column sum (the reduction loop is never put outside a vectorised column
loop) nor a vectorised row reduction (softmax, layer norm), because a reduction loop cannot be
vectorised and nothing moves it out of the innermost place."""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

from metasched.schedule import BlockRV, LoopRV, Schedule, analysis
from metasched.space.add_rfactor import is_free_root_reduction, partial_buffer_fits
from metasched.space.base import ScheduleRule


@dataclasses.dataclass
class ContiguousReduction(ScheduleRule):
    """Puts a vectorisable, memory-contiguous spatial loop innermost in a reduction that reads
    every input element once.

    Applies to a reduction block at the root with no data reuse (``has_data_reuse`` False:
    it streams its input, so cache tiling has nothing to gain and the speed is that of the
    innermost loop), or whose reuse is of a small operand beside one it streams (a dense
    layer at batch 1: each weight read once, the input row reused; ``MultiLevelTiling``
    leaves such a block untiled with ``leave_streaming_blocks``), whose loops are still one
    per axis, serial, untiled and not factorised by ``AddRFactor``. Its *streamed* reads (those indexed by every axis of extent above 1)
    must all be indexed in their last, contiguous dimension by one axis, the *contiguous
    axis*, of extent above 1. Then:

    * column form, the contiguous axis is the block's innermost spatial axis (a column sum
      ``S[j] += X[i, j]``), or that axis slides a window along the last dimension of the
      streamed reads (pooling's ``X[n, c, y * 2 + r, x * 2 + s]``, its lanes two elements
      apart): the axis is tiled in three (``j0, j1, j2``, ``j2`` at most
      ``max_lanes``), the reduction loops fused and tiled in two (``i1`` at most
      ``max_unrolled_reduction``), in the order ``j0, i0, j1, i1, j2``, other spatial loops
      outside: each step folds ``i1`` rows (short, for the postprocessor to unroll) into a
      ``j2``-lane slice of the sums (for it to vectorise), and ``j0`` can run in parallel.
      That is ``handwritten.streamed_column_sum``.
    * row form, the contiguous axis is a reduction axis (a row reduction ``s[i] += X[i, j]``):
      it is split into ``[j0, lanes]`` (``lanes`` at most ``max_lanes``) and factorised over
      ``lanes``: a partial block reduces into ``s_rf[i, lanes]`` (lanes last, contiguous)
      with its reduction loops moved outside the lanes loop, so the postprocessor vectorises
      it; the original block then sums ``lanes`` values per row. With
      ``compute_partial_at_consumer``, a second fork computes the partial block at the
      original block's innermost spatial loop, so that its buffer shrinks to ``lanes``
      values that stay in registers.

    The rule replaces the block's plain form (whose innermost loop is a reduction, or a
    strided one) rather than forking it. With ``AddRFactor`` before it in the rule list,
    the two divide the work: AddRFactor's factorised forks are left alone (a second
    factorisation of the same reduction gains nothing), and its unfactorised fork gets
    this rule's forms."""

    max_lanes: int = 64
    max_unrolled_reduction: int = 16
    compute_partial_at_consumer: bool = True

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        info = analysis.block(sch, block)
        if not is_free_root_reduction(info) or (info.has_data_reuse and not streamed_reads(info)) \
                or not loops_are_axes(info) or math.prod(a.extent for a in info.reduction) < 2:
            return [sch]
        axis = contiguous_axis(info)
        num_spatial = len(info.spatial)
        if (axis is not None and axis == info.innermost_axis) or (axis is None and is_window(info)):
            loops = sch.get_loops(block)
            return [self._column_form(sch, loops[num_spatial - 1], loops[num_spatial:])]
        reductions = [a.name for a in info.reduction]
        if axis in reductions and partial_buffer_fits(info):
            row = sch.get_loops(block)[num_spatial + reductions.index(axis)]
            return self._row_forms(sch, block, row, num_spatial)
        return [sch]

    def _column_form(self, sch: Schedule, column: LoopRV, reductions: list[LoopRV]) -> Schedule:
        rows = sch.fuse(*reductions) if len(reductions) > 1 else reductions[0]
        j0, j1, j2 = sch.split(column, sch.sample_perfect_tile(column, n=3, max_innermost_factor=self.max_lanes))
        i0, i1 = sch.split(rows, sch.sample_perfect_tile(rows, n=2, max_innermost_factor=self.max_unrolled_reduction))
        sch.reorder(j0, i0, j1, i1, j2)
        return sch

    def _row_forms(self, sch: Schedule, block: BlockRV, row: LoopRV, num_spatial: int) -> list[Schedule]:
        _, lanes = sch.split(row, sch.sample_perfect_tile(row, n=2, max_innermost_factor=self.max_lanes))
        partial = sch.rfactor(lanes, num_spatial)  # lanes become the partial buffer's last axis
        forks = [sch]
        if self.compute_partial_at_consumer:
            fork = sch.copy()
            fork.compute_at(partial, fork.get_loops(block)[num_spatial - 1])
            forks.append(fork)
        for fork in forks:  # compute_at makes new loops: reorder after it
            _lanes_innermost(fork, partial, num_spatial)
        return forks


def _lanes_innermost(sch: Schedule, partial: BlockRV, num_spatial: int) -> None:
    """Move the lanes loop of a partial block (its last spatial loop) inside its reduction
    loops, so that the reduction runs outside a contiguous, vectorisable loop."""
    own = sch.get_loops(partial)[-len(analysis.block(sch, partial).loops):]
    sch.reorder(*own[num_spatial + 1:], own[num_spatial])


def contiguous_axis(info: analysis.BlockInfo) -> Optional[str]:
    """The axis that indexes the last dimension of every streamed read of ``info``
    (``streamed_reads``), when there is one, of extent above 1."""
    streamed = {acc.axes[-1] for acc in streamed_reads(info)}
    if len(streamed) != 1:
        return None
    axis = streamed.pop()
    return axis if axis is not None and axis_extents(info)[axis] > 1 else None


def is_window(info: analysis.BlockInfo) -> bool:
    """Whether the innermost spatial axis (of extent above 1) indexes the last dimension of
    every streamed read of ``info`` together with reduction axes only: a window sliding along
    memory, as pooling's ``X[n, c, y * 2 + r, x * 2 + s]`` slides with ``x``."""
    axis, extents = info.innermost_axis, axis_extents(info)
    if axis is None or extents[axis] < 2:
        return False
    needed = {name for name, extent in extents.items() if extent > 1}
    streamed = [acc for acc in info.accesses if needed <= acc.uses]
    allowed = {a.name for a in info.reduction} | {axis}
    return bool(streamed) and all(axis in acc.last_uses and acc.last_uses <= allowed for acc in streamed)


def streamed_reads(info: analysis.BlockInfo) -> list[analysis.Access]:
    """The reads of ``info`` indexed by every axis of extent above 1 (not a broadcast row or
    column): those that stream the block's iteration space through memory."""
    needed = {name for name, extent in axis_extents(info).items() if extent > 1}
    return [acc for acc in info.accesses if acc.axes and needed <= set(acc.axes)]


def axis_extents(info: analysis.BlockInfo) -> dict[str, int]:
    """Each axis of ``info`` (spatial and reduction) by name: its extent."""
    return {a.name: a.extent for a in info.spatial + info.reduction}


def loops_are_axes(info: analysis.BlockInfo) -> bool:
    """Whether ``info``'s loops are still its axes, one loop each in the statement's order
    (spatial, then reduction), as before any loop primitive."""
    axes = info.spatial + info.reduction
    expected = [(a.extent, k >= len(info.spatial)) for k, a in enumerate(axes)]
    return [(lp.extent, lp.is_reduction) for lp in info.loops] == expected
