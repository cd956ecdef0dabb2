"""``ParallelizeVectorizeUnroll``: mark blocks for parallel, vector and unrolled loops, with a
sampled unroll depth (MetaSchedule's ``parallel_vectorize_unroll.cc``)."""
from __future__ import annotations

import dataclasses
from typing import Optional

from metasched.schedule import BlockRV, Schedule, analysis
from metasched.schedule.annotations import PARALLEL, UNROLL_EXPLICIT, UNROLL_IMPLICIT, VECTORIZE
from metasched.space.base import ScheduleRule, host_cores

# The share of the probability that the parallel limit's sampling gives ``max_jobs_per_core``.
DEFAULT_JOBS_WEIGHT = 0.8


@dataclasses.dataclass
class ParallelizeVectorizeUnroll(ScheduleRule):
    """Annotates each block at the root with how the postprocessor may parallelise, vectorise
    and unroll its loops; the rule itself changes no loop.

    MetaSchedule annotates the function's root block once; metasched has no root block, so
    every block at the root (not computed at another block) gets its own annotations:

    * ``meta_schedule.parallel``: the most parallel iterations worth making, ``jobs * cores``
      with ``jobs`` drawn by a ``sample_categorical`` from the powers of two below
      ``max_jobs_per_core`` and ``max_jobs_per_core`` itself (1, 2, 4, 8, 16 by default).
      MetaSchedule annotates the constant ``max_jobs_per_core * cores`` and its
      ``MutateParallel`` rewrites the annotation; here the value is a decision, so that
      search tunes it by changing decisions only. ``max_jobs_per_core`` keeps
      ``DEFAULT_JOBS_WEIGHT`` of the probability (MetaSchedule's value, which random samples
      should mostly keep), the others share the rest.
    * ``meta_schedule.vectorize`` = ``max_vectorize_extent``: the longest loop worth
      vectorising.
    * ``meta_schedule.unroll_explicit`` (or ``meta_schedule.unroll_implicit`` when
      ``unroll_explicit`` is False): the unroll depth, drawn uniformly from
      ``unroll_max_steps`` by a ``sample_categorical`` so that search tunes it. As in
      MetaSchedule (its ``IsSpatialPrimFunc`` test), a workload without any reduction gets no
      unroll depth.

    Blocks that rules create (caches, partial reductions) are not visited; they take the
    annotations of their nearest annotated consumer in the postprocessor. As in MetaSchedule,
    ``max_jobs_per_core`` or ``max_vectorize_extent`` of -1 (any value below 1) leaves that
    annotation out, and an empty ``unroll_max_steps`` the unroll depth. ``num_cores=None``:
    ``host_cores()``."""

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
            jobs = jobs_per_core_choices(self.max_jobs_per_core)
            limit = sch.sample_categorical([j * cores for j in jobs], jobs_per_core_probs(len(jobs)))
            sch.annotate(block, PARALLEL, limit)
        if self.max_vectorize_extent > 0:
            sch.annotate(block, VECTORIZE, self.max_vectorize_extent)
        if self.unroll_max_steps and any(st.is_reduction for st in sch.workload.statements):
            steps = list(self.unroll_max_steps)
            depth = sch.sample_categorical(steps, [1 / len(steps)] * len(steps))
            sch.annotate(block, UNROLL_EXPLICIT if self.unroll_explicit else UNROLL_IMPLICIT, depth)
        return [sch]


def jobs_per_core_choices(max_jobs_per_core: int) -> list[int]:
    """The jobs per core the parallel limit is drawn from: the powers of two below
    ``max_jobs_per_core``, then ``max_jobs_per_core`` (``[1, 2, 4, 8, 16]`` for 16)."""
    powers = [1 << k for k in range(max_jobs_per_core.bit_length()) if 1 << k < max_jobs_per_core]
    return powers + [max_jobs_per_core]


def jobs_per_core_probs(count: int) -> list[float]:
    """The probabilities of ``count`` choices of ``jobs_per_core_choices``: the last (the
    default) ``DEFAULT_JOBS_WEIGHT``, the others the rest in equal parts."""
    if count == 1:
        return [1.0]
    # Rounded, so that the trace shows 0.05 rather than 0.04999999999999999.
    return [round((1 - DEFAULT_JOBS_WEIGHT) / (count - 1), 9)] * (count - 1) + [DEFAULT_JOBS_WEIGHT]
