"""Task schedulers: which task of a run gets the next round of trials.

``RoundRobin`` takes the tasks in turn. ``GradientBased`` is Ansor's scheduler (OSDI'20,
section 6) as MetaSchedule keeps it (``gradient_based.cc``): after a round-robin warm-up it
tunes the task whose next round is expected to cut the weighted latency most, from how its
best time fell over its last rounds and how far it is from what similar tasks reached. A
scheduler of your own is a subclass with ``next_task`` (and, if it keeps state, ``start`` and
``tuned``)."""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import defaultdict
from typing import Optional, Sequence, Union

import numpy as np

from metasched.tune.task import TaskState


class TaskScheduler(ABC):
    """Picks the task that gets the next round. ``start`` is called once per run, then
    ``next_task`` and ``tuned`` alternate until ``next_task`` returns None or the budget is
    spent. Finished tasks stay in the list (``TaskState.finished``): never pick one."""

    def start(self, tasks: Sequence[TaskState], seed: int) -> None:
        """A new run over ``tasks`` (some may already have rounds, rebuilt from the
        database); ``seed`` for any random choice."""

    @abstractmethod
    def next_task(self, tasks: Sequence[TaskState]) -> Optional[int]:
        """The index of the unfinished task to tune next; None ends the run."""

    def tuned(self, task: TaskState) -> None:
        """``task`` had its round (its ``history`` has grown by one)."""


class RoundRobin(TaskScheduler):
    """The unfinished tasks in turn, starting with the first."""

    def start(self, tasks: Sequence[TaskState], seed: int) -> None:
        self._last = -1

    def next_task(self, tasks: Sequence[TaskState]) -> Optional[int]:
        n = len(tasks)
        for step in range(1, n + 1):
            i = (self._last + step) % n
            if not tasks[i].finished:
                self._last = i
                return i
        return None


class GradientBased(TaskScheduler):
    """Ansor's gradient scheduler with MetaSchedule's and Ansor's default constants.

    First every task gets a round, in order (one that already has rounds from the database
    is skipped); a task with no correct program yet comes first after that. Then each task's
    gradient is ``weight x (alpha x backward + (1 - alpha) x forward)``, the expected cut in
    weighted latency of one more round, and the largest wins (ties: a seeded random pick):

    - backward: how much its best time fell per round over the last ``window`` rounds;
    - forward: the larger of ``best / rounds`` (gains shrink as rounds add up) and
      ``best - beta x flops / best_similar_flops``, the time it would save reaching within
      ``beta`` of the best FLOP/s a similar task reached.

    Similar tasks share a ``Workload.kind`` and a FLOP count within a factor of
    ``flop_base`` (Ansor's tag: the kind and ``int(log(flops + 1, flop_base))``); a task that
    stays below ``1 / beta`` of its group's best speed after more than 5 rounds beyond every
    other member is taken out of the group, as Ansor does."""

    def __init__(self, alpha: float = 0.2, window: int = 3, beta: float = 2.0, flop_base: float = 1.618) -> None:
        self.alpha, self.window, self.beta, self.flop_base = alpha, window, beta, flop_base

    def start(self, tasks: Sequence[TaskState], seed: int) -> None:
        self._rng, self._tasks = np.random.default_rng(seed), tasks  # the run updates the states in place
        groups: dict[tuple, list[int]] = defaultdict(list)
        for t in tasks:
            groups[(t.workload.kind, int(math.log(t.workload.flops + 1, self.flop_base)))].append(t.index)
        self._group = {i: members for members in groups.values() for i in members}

    def next_task(self, tasks: Sequence[TaskState]) -> Optional[int]:
        alive = [t for t in tasks if not t.finished]
        if not alive:
            return None
        for t in alive:  # the warm-up, then any task still without a correct program
            if t.rounds == 0 or t.best_seconds is None:
                return t.index
        gradients = [self.gradient(t, tasks) for t in alive]
        if max(gradients) == min(gradients):
            return alive[int(self._rng.integers(len(alive)))].index
        return alive[int(np.argmax(gradients))].index

    def gradient(self, task: TaskState, tasks: Sequence[TaskState]) -> float:
        """The expected cut in weighted latency, in seconds, of one more round of ``task``
        (which has a best time)."""
        history, best, w = task.history, task.best_seconds, self.window
        before = history[-1 - w] if len(history) > w else None
        backward = (before - best) / w if before is not None else 0.0
        forward = best / task.rounds
        similar = self._best_similar_flops(task, tasks)
        if similar:  # None, or 0 for tasks of no floating-point work (a copy)
            forward = max(forward, best - self.beta * task.workload.flops / similar)
        return task.weight * (self.alpha * backward + (1 - self.alpha) * forward)

    def tuned(self, task: TaskState) -> None:
        members = self._group.get(task.index, [])
        others = [i for i in members if i != task.index]
        if not others or task.best_seconds is None:
            return
        tasks = self._tasks
        best = max((tasks[i].workload.flops / tasks[i].best_seconds for i in members
                    if tasks[i].best_seconds is not None), default=None)
        mine = task.workload.flops / task.best_seconds
        if best and mine < best / self.beta and task.rounds > 5 + max(tasks[i].rounds for i in others):
            members.remove(task.index)
            self._group[task.index] = [task.index]

    def _best_similar_flops(self, task: TaskState, tasks: Sequence[TaskState]) -> Optional[float]:
        members = self._group.get(task.index, [])
        if len(members) < 2:
            return None
        return max((tasks[i].workload.flops / tasks[i].best_seconds for i in members
                    if tasks[i].best_seconds is not None), default=None)


SCHEDULERS = {"gradient": GradientBased, "round-robin": RoundRobin}


def make_scheduler(scheduler: Union[str, TaskScheduler]) -> TaskScheduler:
    """A scheduler by name (``SCHEDULERS``), or the given instance."""
    if isinstance(scheduler, TaskScheduler):
        return scheduler
    if isinstance(scheduler, str) and scheduler in SCHEDULERS:
        return SCHEDULERS[scheduler]()
    raise ValueError(f"scheduler must be one of {', '.join(map(repr, sorted(SCHEDULERS)))} or a TaskScheduler, "
                     f"not {scheduler!r}")
