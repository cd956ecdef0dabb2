"""``ParallelizeVectorizeUnroll``: mark blocks for parallel, vector and unrolled loops, with a
sampled unroll depth (MetaSchedule's ``parallel_vectorize_unroll.cc``)."""
from __future__ import annotations

import dataclasses
from typing import Optional

from metasched.schedule import BlockRV, Schedule, analysis
from metasched.space.base import ScheduleRule, host_cores

# The annotations RewriteParallelVectorizeUnroll reads (and removes) to make real loop kinds.
PARALLEL = "meta_schedule.parallel"
VECTORIZE = "meta_schedule.vectorize"
UNROLL_EXPLICIT = "meta_schedule.unroll_explicit"
UNROLL_IMPLICIT = "meta_schedule.unroll_implicit"


@dataclasses.dataclass
class ParallelizeVectorizeUnroll(ScheduleRule):
    """Annotates each block at the root with how the postprocessor may parallelise, vectorise
    and unroll its loops; the rule itself changes no loop.

    MetaSchedule annotates the function's root block once; metasched has no root block, so
    every block at the root (not computed at another block) gets its own annotations:
    ``meta_schedule.parallel`` = ``max_jobs_per_core * cores`` (the most parallel
    iterations worth making), ``meta_schedule.vectorize`` = ``max_vectorize_extent`` (the
    longest loop worth vectorising) and ``meta_schedule.unroll_explicit`` (or
    ``meta_schedule.unroll_implicit`` when ``unroll_explicit`` is False) = the unroll depth,
    drawn uniformly from ``unroll_max_steps`` by a ``sample_categorical`` so that search
    tunes it. As in MetaSchedule (its ``IsSpatialPrimFunc`` test), a workload without any
    reduction gets no unroll depth. Blocks that rules create (caches, partial reductions) are
    not visited; they take the annotations of their nearest annotated consumer in the
    postprocessor. As in MetaSchedule, ``max_jobs_per_core``
    or ``max_vectorize_extent`` of -1 (any value below 1) leaves that annotation out, and
    an empty ``unroll_max_steps`` the unroll depth. ``num_cores=None``: ``host_cores()``."""

    max_jobs_per_core: int = 16
    max_vectorize_extent: int = 64
    unroll_max_steps: tuple[int, ...] = (0, 16, 64, 512)
    unroll_explicit: bool = True
    num_cores: Optional[int] = None

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        if analysis.block(sch, block).attached_to is not None:
            return [sch]
        cores = host_cores() if self.num_cores is None else self.num_cores
        if self.max_jobs_per_core > 0:
            sch.annotate(block, PARALLEL, self.max_jobs_per_core * cores)
        if self.max_vectorize_extent > 0:
            sch.annotate(block, VECTORIZE, self.max_vectorize_extent)
        if self.unroll_max_steps and any(st.is_reduction for st in sch.workload.statements):
            steps = list(self.unroll_max_steps)
            depth = sch.sample_categorical(steps, [1 / len(steps)] * len(steps))
            sch.annotate(block, UNROLL_EXPLICIT if self.unroll_explicit else UNROLL_IMPLICIT, depth)
        return [sch]
