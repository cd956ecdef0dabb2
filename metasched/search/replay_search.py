"""``ReplaySearch``: random search. Each proposal is a fresh sample of the space (a design
space at random, its decisions drawn, post-processed) that is not a program already measured."""
from __future__ import annotations

from dataclasses import dataclass

from metasched.errors import ScheduleError
from metasched.schedule import Schedule
from metasched.search.strategy import SearchStrategy


@dataclass
class ReplaySearch(SearchStrategy):
    """Samples until it has ``count`` new programs, giving up after ``max_attempts`` samples per
    program asked for: a small space may run out of programs it has not measured."""

    max_attempts: int = 64

    def propose(self, count: int) -> list[Schedule]:
        ctx = self.context
        found: list[Schedule] = []
        for _ in range(count * self.max_attempts):
            if len(found) == count:
                break
            try:
                sch = ctx.space.sample(ctx.workload, ctx.rng)
            except ScheduleError:
                ctx.rejected += 1
                continue
            if ctx.claim(sch):
                found.append(sch)
        return found
