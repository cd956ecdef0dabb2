"""What a tuning run found: per task a ``TuneResult`` (its trials, best program and the time
spent), and for a run of many tasks a ``TasksResult`` that adds the weights and the weighted
latency after every round."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

from metasched.database import Confirmation, Record, Target
from metasched.lang.workload import Workload
from metasched.schedule import Schedule, Trace, replay
from metasched.tune.task import RoundRecord
from metasched.tune.warm_start import WarmStart


@dataclass(frozen=True)
class Trial:
    """One measured program of a tuning run: its ``trace`` and its median ``seconds``, or the
    ``error`` that made it a failed trial (a build or run that failed, crashed, hung, overran
    its time limit or computed a wrong answer)."""

    index: int
    trace: Trace
    seconds: Optional[float]
    error: Optional[str]
    runs: tuple[float, ...] = ()  # seconds per run of each timing repeat
    build_seconds: Optional[float] = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class TuneResult:
    """What a tuning run found. ``best_*`` come from the database (``Database.best``): the
    fastest program ever measured for this workload on this target, this run's or an earlier
    one's, as the run's confirmation decided it (None when none ran correctly). ``history``
    holds this run's trials in order; ``rounds`` what the search did in each of its rounds,
    for a strategy that says (``EvolutionarySearch``)."""

    workload: Workload
    target: Target
    best_record: Optional[Record]
    history: list[Trial] = field(default_factory=list)
    wall_seconds: float = 0.0
    build_seconds: float = 0.0  # wall time spent waiting for builds
    run_seconds: float = 0.0  # wall time spent measuring, the load guard's waits for a quiet machine included
    earlier_trials: int = 0  # trials the database held for this workload and target at the start
    concurrent_trials: int = 0  # trials another run recorded into the database while this one ran
    earlier_best: Optional[Record] = None  # the best of those
    exhausted: bool = False  # the strategy found no more new programs before the budget
    rounds: list[str] = field(default_factory=list)
    retimed: int = 0  # programs timed again because the machine was busy (``LoadGuard``)
    # Per load the guard waited out in vain and took as the machine's state, the slowdown it
    # left (2.0: the best kernel at twice its time): later timings ran at that speed.
    lasting_loads: list[float] = field(default_factory=list)
    confirmation: Optional[Confirmation] = None  # the fastest timed again in turns at the end
    unconfirmed: list[str] = field(default_factory=list)  # why records, or all, were not confirmed
    warm_start: Optional[WarmStart] = None  # what the cost model started trained on, if anything

    @property
    def best_trace(self) -> Optional[Trace]:
        return self.best_record.trace if self.best_record else None

    @property
    def best_seconds(self) -> Optional[float]:
        return self.best_record.median if self.best_record else None

    @cached_property
    def best_schedule(self) -> Optional[Schedule]:
        return replay(self.workload, self.best_trace) if self.best_record else None

    @property
    def best_gflops(self) -> Optional[float]:
        return self.workload.flops / self.best_seconds / 1e9 if self.best_record else None

    @property
    def failures(self) -> list[Trial]:
        return [t for t in self.history if not t.ok]

    @property
    def overhead_share(self) -> float:
        """The share of the wall time spent outside building and measuring."""
        return outside_share(self.wall_seconds, self.build_seconds + self.run_seconds)



@dataclass
class TasksResult:
    """What a run of many tasks found: per task its ``TuneResult`` (``tasks``, in the order
    given) and its weight, and per round which task was tuned, the trials held over all tasks
    and the weighted latency then (``rounds``). ``wall_seconds`` is the whole run's."""

    target: Target
    tasks: list[TuneResult]
    weights: list[float]
    rounds: list[RoundRecord] = field(default_factory=list)
    wall_seconds: float = 0.0

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index: int) -> TuneResult:
        return self.tasks[index]

    @property
    def weighted_seconds(self) -> Optional[float]:
        """The sum over tasks of weight x best seconds; None while a task has no correct program."""
        return weighted_seconds(self.weights, [r.best_seconds for r in self.tasks])

    @property
    def trials(self) -> int:
        """This run's trials, over all tasks."""
        return sum(len(r.history) for r in self.tasks)

    @property
    def build_seconds(self) -> float:
        return sum(r.build_seconds for r in self.tasks)

    @property
    def run_seconds(self) -> float:
        return sum(r.run_seconds for r in self.tasks)

    @property
    def overhead_share(self) -> float:
        """The share of the wall time spent outside building and measuring."""
        return outside_share(self.wall_seconds, self.build_seconds + self.run_seconds)


def weighted_seconds(weights: list[float], seconds: list[Optional[float]]) -> Optional[float]:
    """The sum of weight x seconds; None when any seconds are None."""
    if any(s is None for s in seconds):
        return None
    return sum(w * s for w, s in zip(weights, seconds))


def outside_share(wall_seconds: float, inside_seconds: float) -> float:
    """The share of ``wall_seconds`` not spent in ``inside_seconds`` (building and measuring)."""
    return 0.0 if wall_seconds <= 0 else max(0.0, 1 - inside_seconds / wall_seconds)
