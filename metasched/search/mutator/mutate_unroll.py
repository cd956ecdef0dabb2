"""``MutateUnroll``: another unroll depth for a block, by changing the decision of the
``sample_categorical`` its unroll annotation takes its value from (MetaSchedule's
``mutate_unroll.cc``)."""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from metasched.lang.workload import Workload
from metasched.schedule import Trace, analysis
from metasched.schedule.annotations import UNROLL_EXPLICIT, UNROLL_IMPLICIT
from metasched.schedule.sampling import sample_categorical
from metasched.search.mutator.mutator import Mutator
from metasched.search.mutator.trace_reading import annotated_block, annotation_samples, attr, sampling_part

__all__ = ["MutateUnroll"]


@dataclasses.dataclass(frozen=True)
class MutateUnroll(Mutator):
    """MetaSchedule's ``mutate_unroll.cc``: a ``sample_categorical`` whose value annotates a
    block with ``meta_schedule.unroll_explicit`` or ``unroll_implicit`` (the unroll depth
    ``ParallelizeVectorizeUnroll`` draws), chosen uniformly, takes another candidate, drawn
    with the probabilities of the others.

    Unlike MetaSchedule, it replays the trace's sampling part on ``workload`` and leaves out
    the annotations of blocks that a later rule inlined (matmul_relu's ReLU, folded into the
    copy-out of its cache): changing those changes no program."""

    workload: Workload

    def apply(self, trace: Trace, rng: np.random.Generator) -> Optional[Trace]:
        samples = annotation_samples(trace, (UNROLL_EXPLICIT, UNROLL_IMPLICIT))
        if not samples:
            return None
        sch = sampling_part(self.workload, trace)
        alive = set(analysis.blocks(sch))
        replayed = sch.trace
        decisions = trace.decisions
        choices = [index for index, annotate in samples if annotated_block(sch, replayed[annotate]) in alive
                   and _others(attr(trace[index], "probs"), decisions[index])]
        if not choices:
            return None
        index = choices[rng.integers(len(choices))]
        others = _others(attr(trace[index], "probs"), decisions[index])
        return trace.with_decision(index, others[sample_categorical(rng, [p for _, p in others])][0])


def _others(probs: Sequence[float], decision: int) -> list[tuple[int, float]]:
    """The other candidates' indices and probabilities, those of probability 0 left out."""
    return [(index, prob) for index, prob in enumerate(probs) if index != decision and prob > 0]
