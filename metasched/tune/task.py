"""Tasks: the workloads of one tuning run, each with its weight (how often a network runs
it), and what a task scheduler reads of each while the run goes on."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Union

from metasched.errors import check_type
from metasched.lang.workload import Workload
from metasched.search import SearchStrategy
from metasched.space import SpaceGenerator


@dataclass(frozen=True)
class TuneTask:
    """A workload to tune, with its ``weight`` in the run's objective (the sum over tasks of
    weight x best seconds: a network that runs a layer 12 times weighs it 12), and its own
    ``space`` and ``strategy`` (None: the run's). ``constants`` name inputs that hold the
    same values in every call (a network's weights): a program's copies of them are made
    once, before it is timed, as the network makes them (``measure.Packed``)."""

    workload: Workload
    weight: float = 1.0
    space: Optional[SpaceGenerator] = None
    strategy: Union[None, str, SearchStrategy] = None
    constants: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_type(self.workload, "TuneTask", "workload", Workload, "a Workload")
        if (isinstance(self.weight, bool) or not isinstance(self.weight, (int, float))
                or not math.isfinite(self.weight) or self.weight <= 0):
            raise ValueError(f"TuneTask: weight must be a positive number, not {self.weight!r}")
        check_type(self.space, "TuneTask", "space", (type(None), SpaceGenerator), "None or a SpaceGenerator")
        check_type(self.strategy, "TuneTask", "strategy", (type(None), str, SearchStrategy),
                   "None, a strategy's name or a SearchStrategy")
        names = [t.name for t in self.workload.inputs]
        unknown = [c for c in self.constants if c not in names]
        if isinstance(self.constants, str) or unknown:
            raise ValueError(f"TuneTask: constants must name inputs of {self.workload.name} "
                             f"({', '.join(names)}), not {self.constants!r}")
        object.__setattr__(self, "constants", tuple(self.constants))  # a list given is kept as a tuple


@dataclass
class TaskState:
    """One task as a task scheduler sees it during a run: its ``index`` in the run, the
    ``trials`` the database holds of it on the target (another run's included), its
    ``history`` (the best median seconds after each of its rounds, None while it has no
    correct program), and whether it is ``finished`` (``why``: its strategy found nothing
    new, or it reached the run's cap per task)."""

    index: int
    task: TuneTask
    trials: int = 0
    history: list[Optional[float]] = field(default_factory=list)
    finished: bool = False
    why: str = ""

    @property
    def workload(self) -> Workload:
        return self.task.workload

    @property
    def weight(self) -> float:
        return self.task.weight

    @property
    def rounds(self) -> int:
        return len(self.history)

    @property
    def best_seconds(self) -> Optional[float]:
        return self.history[-1] if self.history else None


@dataclass(frozen=True)
class RoundRecord:
    """One round of a run: the ``task`` tuned (its index), the ``trials`` held over all tasks
    after it, and the weighted latency then (sum of weight x best seconds; None while a task
    has no correct program)."""

    task: int
    trials: int
    weighted_seconds: Optional[float]
