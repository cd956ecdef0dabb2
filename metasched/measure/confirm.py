"""The end of a tuning run: its fastest programs timed again in turns, so that the best is
decided by timings taken side by side rather than each at its own moment of a shared
machine's load."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Sequence

from metasched.codegen import Artifact
from metasched.measure.builder import BuildResult
from metasched.measure.runner import RunResult
from metasched.schedule import Trace

CONFIRM_ROUNDS = 3  # rounds of timing in turns
# Seconds between tries on a busy machine: shorter than the load guard's, since a confirmation
# given up leaves the best to the medians, which is no false label.
CONFIRM_WAITS = (0.5, 1.0, 2.0)


class Timed(Protocol):
    """A measured program as the confirmation reads it (a database ``Record``)."""

    id: int
    trace: Trace

    @property
    def median(self) -> Optional[float]: ...


@dataclass
class Confirmation:
    """Times measured programs again in turns: ``build`` makes artifacts of traces, ``run``
    times a list of artifacts one after another, ``sleep`` waits. ``notes`` collects why a
    program, or all, went unconfirmed."""

    build: Callable[[list[Trace]], list[BuildResult]]
    run: Callable[[list[Artifact]], list[RunResult]]
    sleep: Callable[[float], None]
    factor: float  # slower than this, in the median, means the machine is busy (``LoadGuard.factor``)
    rounds: int = CONFIRM_ROUNDS
    waits: tuple[float, ...] = CONFIRM_WAITS
    notes: list[str] = field(default_factory=list)

    def times(self, chosen: Sequence[Timed]) -> Optional[dict[int, list[float]]]:
        """Each of ``chosen``'s median seconds per round, by id, timed in turns (in one order,
        then the other), or None when fewer than two ran or the machine stayed busy.

        Busy: the programs ran, in the median, more than ``factor`` times slower than when
        tuned. Which program copes best with another process's load says little about which
        is fastest, so it waits (``waits``) and times them again; a machine still busy after
        that leaves the best to the medians."""
        if len(chosen) < 2:
            return None
        built = []
        for record, result in zip(chosen, self.build([r.trace for r in chosen])):
            if result.ok:
                built.append((record, result.artifact))
            else:
                self.notes.append(f"record {record.id}: {result.error}")
        for wait in (None, *self.waits):
            if wait is not None:
                self.sleep(wait)
            times = self._in_turns(built)
            if len(times) < 2:
                return None
            slowdown = statistics.median(statistics.median(times[r.id]) / r.median for r, _ in built)
            if slowdown <= self.factor:
                return times
        self.notes.append(f"the machine stayed busy: the fastest programs ran {slowdown:.1f} times "
                          "slower than when tuned, so no confirmation was recorded")
        return None

    def _in_turns(self, built: list) -> dict[int, list[float]]:
        """Times the ``(record, artifact)`` pairs of ``built`` in turns, ``rounds`` times: each
        record's median seconds per round, by id. One that fails is noted and dropped from
        ``built``."""
        times: dict[int, list[float]] = {record.id: [] for record, _ in built}
        for round_ in range(self.rounds):
            turn = [(r, a) for r, a in (built if round_ % 2 == 0 else built[::-1]) if r.id in times]
            for (record, _), run in zip(turn, self.run([artifact for _, artifact in turn])):
                if run.ok:
                    times[record.id].append(run.median)
                else:
                    self.notes.append(f"record {record.id}: {run.error}")
                    del times[record.id]
        built[:] = [(r, a) for r, a in built if r.id in times]
        return times
