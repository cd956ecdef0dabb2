"""``TuningDatabase``: what a tuning run needs of a database. ``Database`` (SQLite) is one; a
database of your own (in memory, on a server) is a subclass with ``commit`` and ``records``."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Mapping, Optional, Sequence

from metasched.database.records import Confirmation, Record, WorkloadSummary
from metasched.database.target import Target
from metasched.lang import Workload
from metasched.schedule import Trace


class TuningDatabase(ABC):
    """Measured programs by workload and target. ``commit`` and ``records`` are the whole
    contract; the rest has defaults a subclass may improve: ``best`` is the smallest median,
    there are no confirmations, and no stored workloads to warm-start a cost model from."""

    @abstractmethod
    def commit(self, workload: Workload, trace: Trace, *, target: Target, seconds: Sequence[float] = (),
               error: Optional[str] = None, build_seconds: Optional[float] = None) -> Optional[Record]:
        """Record one result of ``trace``: its run times, or the ``error`` that failed it. The
        new ``Record``, or None when the program (``program_key``) is recorded already."""

    @abstractmethod
    def records(self, workload: Workload, target: Optional[Target] = None) -> list[Record]:
        """The records of ``workload``, oldest first; with ``target``, those measured on it."""

    def best(self, workload: Workload, target: Target) -> Optional[Record]:
        """The successful record with the smallest median (the earlier on a tie)."""
        done = [r for r in self.records(workload, target) if r.ok]
        return min(done, key=lambda r: (r.median, r.id), default=None)

    def measured(self, workload: Workload, target: Target) -> set[str]:
        """The program keys recorded for ``workload`` on ``target``, failed ones included."""
        return {r.program for r in self.records(workload, target)}

    def add_workload(self, workload: Workload) -> str:
        """Keep ``workload`` (a database that stores workloads can warm-start from them)."""
        return workload.key

    def workloads(self) -> list[WorkloadSummary]:
        """The stored workloads: none by default."""
        return []

    def confirm(self, workload: Workload, target: Target,
                times: Mapping[int, Sequence[float]]) -> Optional[Confirmation]:
        """Keep a confirmation (records timed again in turns); by default none is kept."""
        return None

    def confirmation(self, workload: Workload, target: Target) -> Optional[Confirmation]:
        """The latest confirmation kept; None by default."""
        return None

    def close(self) -> None:
        """Release what the database holds."""
