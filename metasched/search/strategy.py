"""``SearchStrategy``: what a tuning run asks for the programs to measure next, and tells the
results. The tuner owns measuring and the database; a strategy only proposes and learns."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from metasched.database import Database, Target, program_key
from metasched.lang.workload import Workload
from metasched.schedule import Schedule
from metasched.search.scoring import InProcess, Tasks
from metasched.space import SpaceGenerator


@dataclass
class SearchContext:
    """What a strategy searches: the ``workload``, its ``space``, the random generator of the
    run, and ``measured``, the program keys (``database.program_key``) already measured or
    proposed, which the strategy must not propose again and adds its proposals to. A learning
    strategy may read the earlier records of the workload in ``database`` on ``target``, and
    run its bulk work in ``tasks`` (the tuner lends its builder's worker processes; default:
    this process)."""

    workload: Workload
    space: SpaceGenerator
    rng: np.random.Generator
    measured: set[str] = field(default_factory=set)
    database: Optional[Database] = None
    target: Optional[Target] = None
    tasks: Tasks = field(default_factory=InProcess)
    rejected: int = 0  # samples the postprocessors refused
    repeated: int = 0  # samples that were programs already measured or proposed

    def claim(self, sch: Schedule) -> bool:
        """Whether ``sch`` is a new program; if so it counts as proposed from now on."""
        return self.claim_key(program_key(sch.trace))

    def claim_key(self, key: str) -> bool:
        """Whether the program of ``key`` is new; if so it counts as proposed from now on."""
        if key in self.measured:
            self.repeated += 1
            return False
        self.measured.add(key)
        return True


class SearchStrategy(ABC):
    """Proposes post-processed programs to measure. ``start`` is called once per tuning run,
    then ``propose`` and ``notify`` alternate."""

    context: SearchContext
    # Programs measured between two proposals when the tuner is not told: a learning strategy
    # wants more, to spread the cost of a search round over more trials.
    batch_size: int = 8

    def start(self, context: SearchContext) -> None:
        self.context = context

    @abstractmethod
    def propose(self, count: int) -> list[Schedule]:
        """Up to ``count`` new programs, none measured or proposed before; fewer (even none)
        when the strategy finds no more."""

    def notify(self, schedules: Sequence[Schedule], seconds: Sequence[Optional[float]]) -> None:
        """The measured median seconds of the last proposals (None for a failed one)."""
