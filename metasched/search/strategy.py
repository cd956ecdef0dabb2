"""``SearchStrategy``: what a tuning run asks for the programs to measure next, and tells the
results. The tuner owns measuring and the database; a strategy only proposes and learns."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import numpy as np

from metasched.database import Database, Target, program_key
from metasched.errors import ScheduleError
from metasched.ir import func_digest
from metasched.lang.workload import Workload
from metasched.schedule import Schedule, replay
from metasched.search.scoring import Candidate, InProcess, Tasks
from metasched.space import SpaceGenerator

# What a strategy proposes: a post-processed program, by its ``trace``.
Proposal = Union[Schedule, Candidate]


@dataclass
class SearchContext:
    """What a strategy searches: the ``workload``, its ``space``, the random generator of the
    run, and ``measured``, the program keys (``database.program_key``) already measured or
    proposed, which the strategy must not propose again and adds its proposals to. A learning
    strategy may read the earlier records of the workload in ``database`` on ``target``
    (``earlier``), and run its bulk work in ``tasks`` (the tuner lends its builder's worker
    processes; default: this process).

    A program is its loop program (``ir.func_digest``), not only its key: decisions that differ
    can make one kernel (an unroll depth past what the rewrite unrolls, a parallel extent the
    loops cannot take), and ``claim`` refuses such a program once one of them is measured or
    proposed, as MetaSchedule refuses a module structurally equal to one measured: without
    it, runs measured the same kernel again (bench/README.md, Design history)."""

    workload: Workload
    space: SpaceGenerator
    rng: np.random.Generator
    measured: set[str] = field(default_factory=set)
    database: Optional[Database] = None
    target: Optional[Target] = None
    tasks: Tasks = field(default_factory=InProcess)
    # Programs the tuner measures per proposal, when it says (a strategy may size its search to it).
    batch_size: Optional[int] = None
    rejected: int = 0  # samples the postprocessors refused
    repeated: int = 0  # samples that were programs already measured or proposed
    # The digests of the loop programs measured or proposed; those of the database's records
    # are added when first needed (``earlier`` replays them).
    _programs: Optional[set[str]] = field(default=None, init=False, repr=False)

    def claim(self, sch: Schedule) -> bool:
        """Whether ``sch`` (post-processed) is a new program, by its key and by its loop
        program; if so it counts as proposed from now on."""
        return self.claim_program(program_key(sch.trace), lambda: func_digest(sch.lower()))

    def claim_program(self, key: str, digest: Union[str, Callable[[], str]]) -> bool:
        """``claim`` for a program known by its program ``key`` and the ``digest`` of its loop
        program (``ir.func_digest``; or a function that computes it, called only when the
        key is new): a search that computed both where it made the program need not replay
        it."""
        if key in self.measured:
            self.repeated += 1
            return False
        if self._programs is None:
            self.earlier()
        if callable(digest):
            digest = digest()
        if digest in self._programs:
            self.repeated += 1
            return False
        self.measured.add(key)
        self._programs.add(digest)
        return True

    def earlier(self) -> list[tuple[Schedule, Optional[float]]]:
        """The workload's records in ``database`` on ``target``, replayed, with their median
        seconds (None: the run failed); a record that no longer replays is left out (its key
        still counts as measured). Each call replays them; the first also notes their loop
        programs as measured."""
        found: list[tuple[Schedule, Optional[float]]] = []
        if self.database is not None:
            for record in self.database.records(self.workload, self.target):
                try:
                    found.append((replay(self.workload, record.trace), record.median))
                except ScheduleError:
                    continue
        if self._programs is None:
            self._programs = {func_digest(sch.lower()) for sch, _ in found}
        return found


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
    def propose(self, count: int) -> list[Proposal]:
        """Up to ``count`` new programs, none measured or proposed before; fewer (even none)
        when the strategy finds no more. A program is a post-processed ``Schedule`` or
        anything else with its post-processed ``trace`` (``scoring.Candidate``): the tuner
        builds, measures and records the trace."""

    def notify(self, proposals: Sequence[Proposal], seconds: Sequence[Optional[float]]) -> None:
        """The measured median seconds of the last proposals, the very objects ``propose``
        returned (None for a failed one)."""
