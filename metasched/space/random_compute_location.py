"""``RandomComputeLocation``: MetaSchedule's ``random_compute_location.cc``, the search-time
form of Ansor's compute-location choices.

Where a producer runs trades memory traffic against recomputation: at the root it is computed
once and stored whole; inside a loop of its consumer it computes just what one iteration reads,
while that data is still in cache. Rather than enumerate the choices as sketches, the rule
leaves one ``sample_compute_location`` in the trace, and search mutates its decision.
"""
from __future__ import annotations

import dataclasses

from metasched.schedule import BlockRV, Schedule, analysis
from metasched.schedule.analysis import BlockInfo
from metasched.schedule.annotations import RANDOM_COMPUTE_PRODUCER, TILING_STRUCTURE
from metasched.space.base import ScheduleRule


@dataclasses.dataclass
class RandomComputeLocation(ScheduleRule):
    """``compute_at`` a block at a sampled location: inline (where legal), the root, or a loop
    of its consumer (of the consumer its other consumers are computed in, as the rule reaches
    producers after their consumers: softmax's ``e`` in the row loop of its output, beside the
    row's sum). As in MetaSchedule, a block that ``AddRFactor`` factorised (annotated
    ``meta_schedule.random_compute_producer``) then has the location of its partial block
    sampled too, and loses the annotation."""

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        info = analysis.block(sch, block)
        if not has_free_location(sch, block, info):
            return [sch]
        if RANDOM_COMPUTE_PRODUCER in info.annotations:
            sch.unannotate(block, RANDOM_COMPUTE_PRODUCER)
        _compute_at_sampled(sch, block)
        for name in info.producers if RANDOM_COMPUTE_PRODUCER in info.annotations else ():
            producer = sch.get_block(name)
            if has_free_location(sch, producer, analysis.block(sch, producer)):
                _compute_at_sampled(sch, producer)
        return [sch]


def _compute_at_sampled(sch: Schedule, block: BlockRV) -> None:
    sch.compute_at(block, sch.sample_compute_location(block))


def has_free_location(sch: Schedule, block: BlockRV, info: BlockInfo) -> bool:
    """TVM's conditions: the block is at the root, has loops with no other block computed at
    them, is not tiled by ``MultiLevelTiling`` and is not an output; and it has a loop to choose
    besides the root: one consumer, or one that all its other consumers are computed in."""
    return (info.attached_to is None and bool(info.loops) and not any(loop.attached for loop in info.loops)
            and TILING_STRUCTURE not in info.annotations and not info.is_output
            and analysis.has_reader_loops(sch, block))
