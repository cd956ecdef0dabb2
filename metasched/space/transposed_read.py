"""``TransposedReadTiling``: a spatial block that reads a tensor across its memory order (a
transpose), tiled in two so that the lines of both tensors are used whole while they are in
cache. Not one of MetaSchedule's rules: its CPU space tiles only blocks with data reuse, so the
best program of ``C[i, j] = A[i, j] + B[j, i]`` there walks ``B`` a column at a time, one
element of each 64-byte line used per row of ``C`` (the line evicted long before the next row
comes back to it)."""
from __future__ import annotations

import dataclasses
from typing import Optional

from metasched.schedule import BlockRV, Schedule, analysis
from metasched.schedule.annotations import TILING_STRUCTURE
from metasched.space.base import ScheduleRule
from metasched.space.contiguous_reduction import axis_extents, loops_are_axes, streamed_reads


@dataclasses.dataclass
class TransposedReadTiling(ScheduleRule):
    """Forks a tiled form of a spatial block at the root, loops still its axes, one of whose
    reads has its last (contiguous) dimension indexed by an axis other than the block's
    innermost one: the *crossing* axis. The crossing axis and the innermost axis are split
    in two (sampled, the inner part at most ``max_tile``) and ordered ``outer parts (the
    axes' order), crossing inner, innermost inner``: a tile's reads of the crossed tensor
    use ``inner`` consecutive elements of each line, and its writes whole rows of the tile.
    That is ``handwritten.tiled_transpose``. The block's plain form stays as the other fork
    (small tensors, whose lines all stay in cache, may run faster untiled)."""

    max_tile: int = 64

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        info = analysis.block(sch, block)
        crossing = crossing_axis(info)
        if crossing is None:
            return [sch]
        names = [a.name for a in info.spatial]
        tiled = sch.copy()
        loops = tiled.get_loops(block)
        inner_parts = []
        outer = list(loops)
        for name in (crossing, info.innermost_axis):
            k = names.index(name)
            loop = loops[k]
            part_outer, part_inner = tiled.split(
                loop, tiled.sample_perfect_tile(loop, n=2, max_innermost_factor=self.max_tile))
            outer[k] = part_outer
            inner_parts.append(part_inner)
        tiled.reorder(*outer, *inner_parts)
        return [sch, tiled]


def crossing_axis(info: analysis.BlockInfo) -> Optional[str]:
    """The axis (of extent above 1) that indexes the last dimension of a streamed read of
    ``info`` (one indexed by every axis of extent above 1) and is not its innermost axis
    (also of extent above 1), where ``info`` is a spatial block at the root whose loops are
    still its axes, serial, untouched by another rule; else None. Of several such reads, the
    first."""
    if (info.is_reduction or info.attached_to is not None or len(info.spatial) < 2
            or TILING_STRUCTURE in info.annotations or not loops_are_axes(info)
            or any(lp.kind != "serial" or lp.attached for lp in info.loops)):
        return None
    extents = axis_extents(info)
    innermost = info.innermost_axis
    if extents[innermost] < 2:
        return None
    for access in streamed_reads(info):
        last = access.axes[-1]
        if last is not None and last != innermost and extents.get(last, 1) > 1:
            return last
    return None
