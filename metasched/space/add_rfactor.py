"""``AddRFactor``: factorise a reduction whose spatial loops cannot keep the cores busy (Ansor's
rule 6, MetaSchedule's ``add_rfactor.cc``)."""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

from metasched.ir.limits import MAX_BUFFER_BYTES
from metasched.schedule import BlockRV, LoopRV, Schedule, analysis
from metasched.schedule.annotations import RANDOM_COMPUTE_PRODUCER, TILING_STRUCTURE
from metasched.space.base import ScheduleRule, host_cores

# Bytes per element assumed when checking that a partial buffer fits: the widest dtype.
_WIDEST_ITEM = 8


@dataclasses.dataclass
class AddRFactor(ScheduleRule):
    """Forks a reduction block into ``rfactor`` variants, as MetaSchedule does on CPU.

    Applies to a reduction block at the root whose loops are all serial, none hosting another
    block and none tiled by ``MultiLevelTiling`` yet, when MetaSchedule's
    ``NeedsRFactorOrCrossThreadReduction`` holds, with ``space`` and ``reduce`` the products
    of the spatial and the reduction extents and ``max_parallel = max_jobs_per_core * cores``:

    * with data reuse (a matmul-like block, ``analysis``'s ``has_data_reuse``), only when the
      spatial loops offer little parallelism: not (``space >= reduce`` or
      ``space > max_parallel``);
    * without data reuse (a row or column sum), whenever ``reduce > cores``: its parallelism
      may have to come from the reduction.

    The reduction loops are moved innermost and fused, the fused loop is split in two with a
    sampled tile (inner factor at most ``max_innermost_factor``), and one fork per split loop
    factorises the reduction over it: a partial block reduces everything else into a buffer
    with that loop as its last spatial axis, and the original block sums that buffer. Each
    such block is annotated ``meta_schedule.random_compute_producer`` so that
    RandomComputeLocation samples where the partial block runs. The unfactorised block is
    kept as a third fork, as MetaSchedule keeps it. ``num_cores=None``: ``host_cores()``."""

    max_jobs_per_core: int = 16
    max_innermost_factor: int = 64
    num_cores: Optional[int] = None

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        info = analysis.block(sch, block)
        if not self._needs_rfactor(info):
            return [sch]
        original = sch.copy()
        fused = reorder_and_fuse_reductions(sch, block)
        factors = sch.sample_perfect_tile(fused, n=2, max_innermost_factor=self.max_innermost_factor)
        forks = []
        for loop in sch.split(fused, factors):
            fork = sch.copy()
            fork.rfactor(loop, len(info.spatial))  # the factored axis last in the partial buffer
            fork.annotate(block, RANDOM_COMPUTE_PRODUCER, 1)
            forks.append(fork)
        return forks + [original]

    def _needs_rfactor(self, info: analysis.BlockInfo) -> bool:
        if not is_free_root_reduction(info) or not partial_buffer_fits(info):
            return False
        cores = host_cores() if self.num_cores is None else self.num_cores
        space = math.prod(a.extent for a in info.spatial)
        reduce = math.prod(a.extent for a in info.reduction)
        if info.has_data_reuse:
            return not (space >= reduce or space > self.max_jobs_per_core * cores)
        return reduce > cores


def is_free_root_reduction(info: analysis.BlockInfo) -> bool:
    """Whether ``info`` is a reduction at the root that the reduction rules may still reshape:
    its loops serial with no block computed at them (what ``reorder``, ``fuse`` and
    ``rfactor`` require), not tiled by ``MultiLevelTiling``, not factorised by a rule."""
    return (info.is_reduction and info.attached_to is None
            and TILING_STRUCTURE not in info.annotations and RANDOM_COMPUTE_PRODUCER not in info.annotations
            and all(lp.kind == "serial" and not lp.attached for lp in info.loops))


def partial_buffer_fits(info: analysis.BlockInfo) -> bool:
    """Whether a partial buffer over all of ``info``'s iterations stays within the buffer
    limit: then ``rfactor`` over any reduction loop, at any sampled tile, is legal."""
    points = math.prod(a.extent for a in info.spatial + info.reduction)
    return points * _WIDEST_ITEM < MAX_BUFFER_BYTES


def reorder_and_fuse_reductions(sch: Schedule, block: BlockRV) -> LoopRV:
    """Move ``block``'s reduction loops after its spatial loops (if they are not there yet)
    and fuse them into one (if there are several), as MetaSchedule's
    ``ReorderAndFuseReductionLoops``. Returns the one reduction loop. The block's loops must be
    serial with no block computed at them."""
    loops = sch.get_loops(block)
    kinds = [lp.is_reduction for lp in analysis.block(sch, block).loops]
    spatial = [lp for lp, is_reduction in zip(loops, kinds) if not is_reduction]
    reduction = [lp for lp, is_reduction in zip(loops, kinds) if is_reduction]
    if spatial + reduction != loops:
        sch.reorder(*spatial, *reduction)
    fused = sch.fuse(*reduction) if len(reduction) > 1 else reduction[0]
    return fused
