"""Candidates in bulk: fresh samples and mutants made into post-processed programs with their
feature rows, in this process or spread over worker processes.

Evolutionary search spends its time here: each candidate is a replay, the postprocessors, a
lowering and the per-store features (milliseconds of Python), and a search round makes hundreds.
The work of one candidate depends only on what the parent process sends (a sample's seed, a
mutant's trace), so any split over processes gives the same candidates in the same order, and
a seeded search stays deterministic.

* ``Candidate``: a post-processed program as the search keeps it: its program key, trace and
  feature row (``cost_model.program_features``); ``schedule()`` replays it when it is chosen.
* ``Tasks``: how a batch of tasks runs. ``InProcess`` runs them here; the tuner lends its
  builder's worker processes, which are idle while the search works.
* ``Scorer``: the workload and space of a run, and ``samples(seeds)`` / ``mutants(traces)``.
"""
from __future__ import annotations

import hashlib
import math
import pickle
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from metasched.database import program_key
from metasched.errors import ScheduleError
from metasched.lang.workload import Workload
from metasched.schedule import Schedule, Trace, replay
from metasched.search.cost_model import program_features
from metasched.search.mutators import apply_mutant
from metasched.space import SpaceGenerator


@dataclass(frozen=True)
class Candidate:
    """A post-processed program: its ``key`` (``database.program_key``), its ``trace`` (with
    the postprocessors' instructions) and its feature ``row``."""

    key: str
    trace: Trace
    row: np.ndarray

    @classmethod
    def of(cls, sch: Schedule) -> Candidate:
        """The candidate of a post-processed schedule."""
        trace = sch.trace
        return cls(program_key(trace), trace, program_features(sch))

    def schedule(self, workload: Workload) -> Schedule:
        """The program as a ``Schedule`` (its trace replayed as recorded)."""
        return replay(workload, self.trace)


class Tasks(Protocol):
    """Runs ``fn(*args)`` for each ``args`` of ``tasks`` and returns the results in order;
    ``workers`` is how many run at once (the size to split a batch for)."""

    workers: int

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple]) -> list:
        ...


class InProcess:
    """Every task in this process, one after another."""

    workers = 1

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple]) -> list:
        return [fn(*args) for args in tasks]


class _Shared:
    """The workload and space of a run as tasks carry them: pickled once in the parent, and
    unpickled once per worker process (kept by their digest), not once per task."""

    def __init__(self, workload: Workload, space: SpaceGenerator) -> None:
        self.workload, self.space = workload, space
        self._blob: Optional[bytes] = None

    def __getstate__(self) -> dict:
        if self._blob is None:
            self._blob = pickle.dumps((self.workload, self.space))
        return {"blob": self._blob}

    def __setstate__(self, state: dict) -> None:
        blob = state["blob"]
        digest = hashlib.sha256(blob).digest()
        if digest not in _UNPICKLED:
            _UNPICKLED.clear()  # a worker serves one run at a time
            _UNPICKLED[digest] = pickle.loads(blob)
        self.workload, self.space = _UNPICKLED[digest]
        self._blob = blob


_UNPICKLED: dict[bytes, tuple[Workload, SpaceGenerator]] = {}


def _samples(shared: _Shared, seeds: Sequence[int]) -> list[Optional[Candidate]]:
    """A fresh sample of the space per seed; None where a postprocessor rejected it."""
    out: list[Optional[Candidate]] = []
    for seed in seeds:
        try:
            sch = shared.space.sample(shared.workload, np.random.default_rng(seed))
        except ScheduleError:
            out.append(None)
            continue
        out.append(Candidate.of(sch))
    return out


def _mutants(shared: _Shared, traces: Sequence[Trace]) -> list[Optional[Candidate]]:
    """Each mutant trace replayed (its sampling part) and post-processed again; None where
    replay or a postprocessor refused it."""
    out: list[Optional[Candidate]] = []
    for trace in traces:
        sch = apply_mutant(shared.workload, trace, shared.space)
        out.append(None if sch is None else Candidate.of(sch))
    return out


class Scorer:
    """Makes candidates of ``workload`` in ``space``, in ``tasks`` (default: this process)."""

    def __init__(self, workload: Workload, space: SpaceGenerator, tasks: Optional[Tasks] = None) -> None:
        self.workload, self.space = workload, space
        self.tasks = tasks or InProcess()
        self._shared = _Shared(workload, space)

    def samples(self, seeds: Sequence[int]) -> list[Optional[Candidate]]:
        """One fresh sample per seed (``space.sample`` with ``default_rng(seed)``), in order;
        None for one the postprocessors rejected."""
        return self._run(_samples, [int(s) for s in seeds])

    def mutants(self, traces: Sequence[Trace]) -> list[Optional[Candidate]]:
        """Each mutant (``mutators.apply_mutant``), in order; None for one that was dropped."""
        return self._run(_mutants, list(traces))

    def _run(self, fn: Callable, items: list) -> list[Optional[Candidate]]:
        if not items:
            return []
        # A few chunks per worker: large enough that sending one costs little, small enough
        # that the workers finish together.
        size = max(1, math.ceil(len(items) / (4 * self.tasks.workers)))
        chunks = [items[k:k + size] for k in range(0, len(items), size)]
        return [c for part in self.tasks.map(fn, [(self._shared, chunk) for chunk in chunks]) for c in part]
