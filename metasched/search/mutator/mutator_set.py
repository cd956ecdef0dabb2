"""``MutatorSet``: mutators drawn by probability; ``default_mutators``, MetaSchedule's CPU mix."""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional

import numpy as np

from metasched.lang.workload import Workload
from metasched.schedule import Trace
from metasched.schedule.sampling import sample_categorical
from metasched.search.mutator.mutate_compute_location import MutateComputeLocation
from metasched.search.mutator.mutate_parallel import MutateParallel
from metasched.search.mutator.mutate_tile_size import MutateTileSize
from metasched.search.mutator.mutate_unroll import MutateUnroll
from metasched.search.mutator.mutator import Mutator

__all__ = ["MutatorSet", "default_mutators"]


@dataclasses.dataclass
class MutatorSet:
    """Mutators with their probabilities (weights: they need not sum to 1)."""

    probabilities: Mapping[Mutator, float]

    def __post_init__(self) -> None:
        weights = list(self.probabilities.values())
        if not weights or not all(isinstance(m, Mutator) for m in self.probabilities) or \
                not all(math.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"a MutatorSet needs Mutators with finite, non-negative probabilities, "
                             f"not all zero; got {dict(self.probabilities)!r}")

    def mutate(self, trace: Trace, rng: np.random.Generator) -> Optional[Trace]:
        """The mutant of one mutator drawn by probability; when it returns None, another is
        drawn from those not tried (their probabilities renormalised), until one gives a
        mutant. None when none does."""
        mutators = list(self.probabilities)
        weights = [float(w) for w in self.probabilities.values()]
        while sum(weights) > 0:
            chosen = sample_categorical(rng, weights)
            mutant = mutators[chosen].apply(trace, rng)
            if mutant is not None:
                return mutant
            weights[chosen] = 0.0
        return None


def default_mutators(workload: Workload) -> MutatorSet:
    """MetaSchedule's mutators for CPUs with its probabilities (``Mutator::DefaultLLVM``)."""
    return MutatorSet({
        MutateTileSize(): 0.90,
        MutateComputeLocation(workload): 0.05,
        MutateUnroll(workload): 0.03,
        MutateParallel(workload): 0.02,
    })
