"""One task's rounds in a tuning run: its strategy proposes a batch, the shared builder
builds it, the shared runner times each program, and each result goes to the database once
the shared load guard has seen the machine quiet after it (``measure.guard.LoadGuard``), at
the latest at the end of the batch: a run that is killed loses at most the timings of the
batch it was timing (one stopped with Ctrl-C, or by a cluster that went away, records them)."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from metasched.database import Confirmation, Database, Target, program_key
from metasched.errors import ClusterError
from metasched.lang.workload import Workload
from metasched.measure import BuildResult, Builder, Runner
from metasched.measure.confirm import Confirmation as Confirming
from metasched.measure.guard import LoadGuard
from metasched.measure.worker import WorkerPool
from metasched.schedule import Trace
from metasched.search import SearchContext, SearchStrategy
from metasched.search.strategy import Proposal
from metasched.tune.result import Trial, TuneResult

SEARCH_TASK_SECONDS = 120.0  # a batch of candidates for one worker takes well under a second

# Called with each trial of a task and the best median seconds so far.
ProgressCallback = Callable[[Trial, Optional[float]], None]


class WorkerTasks:
    """The search's bulk work (``search.scoring``) in the builder's worker processes, which
    are idle while it searches. A task that fails there (its worker died, say) runs again in
    this process: a bug then raises here with its own traceback."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool, self.workers = pool, len(pool.workers)

    def map(self, fn: Callable, tasks: Sequence[tuple]) -> list:
        outcomes = self.pool.map(fn, tasks, SEARCH_TASK_SECONDS, what="search task")
        return [o.value if o.ok else fn(*args) for o, args in zip(outcomes, tasks)]


@dataclass
class _Held:
    """A program timed and not yet recorded: its ``runs`` (seconds per repeat) or ``error``,
    and whether it was a new best when timed."""

    proposal: Proposal
    built: BuildResult
    runs: tuple[float, ...] = ()
    error: Optional[str] = None
    new_best: bool = False


@dataclass
class TaskLoop:
    """The rounds of one task (``workload``), its trials going to ``result``; ``builder``,
    ``runner``, ``db`` and ``guard`` are shared by every task of the run."""

    workload: Workload
    db: Database
    target: Target
    builder: Builder
    runner: Runner
    search: SearchStrategy
    context: SearchContext
    result: TuneResult
    progress: Optional[ProgressCallback]
    guard: LoadGuard
    batch_size: int
    constants: tuple[str, ...] = ()  # inputs whose copies are made once (``TuneTask.constants``)

    # The programs timed since the machine was last seen quiet, not yet recorded (``LoadGuard``).
    held: list[_Held] = field(default_factory=list)
    # The median seconds (None: failed) of each program of the batch recorded so far, in order.
    batch_seconds: list[Optional[float]] = field(default_factory=list)
    # The fastest programs this run built, by program key: (median, build), at most ``keep``,
    # so that the confirmation times them without building them again.
    kept: dict[str, tuple[float, BuildResult]] = field(default_factory=dict)
    keep: int = 0

    def recorded(self) -> int:
        """The trials the database holds of the workload on the target, another run's included."""
        return len(self.db.measured(self.workload, self.target))

    def round(self, count: int) -> int:
        """Propose up to ``count`` programs, build, measure and record them; the number
        proposed (0: the strategy found no new program)."""
        self.context.measured |= self.db.measured(self.workload, self.target)  # another run's too
        proposals = self.search.propose(count)
        if not proposals:
            self.result.exhausted = True
            return 0
        built = self._build([p.trace for p in proposals])
        self.batch_seconds = []
        try:
            for proposal, result in zip(proposals, built):
                self._measure(proposal, result)
            self._settle(now=True)
        except (KeyboardInterrupt, ClusterError):
            self._record_held()  # what was measured is kept, checked or not
            raise
        self.search.notify(proposals, self.batch_seconds)
        if hasattr(self.progress, "sync"):  # a bar: what the database holds, another run's records too
            self.progress.sync(self.recorded(), self.result.best_seconds)
        self._report_round()
        return len(proposals)

    def confirm(self, count: int) -> Optional[Confirmation]:
        """Builds the ``count`` fastest records (by their medians) and the winner of the last
        confirmation (those this run built and kept are not built again), times them in turns
        (``measure.confirm``) and records it: the confirmation, or None when fewer than two
        ran or the machine stayed busy."""
        done = sorted((r for r in self.db.records(self.workload, self.target) if r.ok), key=lambda r: (r.median, r.id))
        chosen = done[:count]
        previous = self.db.confirmation(self.workload, self.target)
        if previous is not None and previous.winner not in {r.id for r in chosen}:
            chosen += [r for r in done if r.id == previous.winner]
        confirming = Confirming(self._build_or_kept, self._run, self._sleep, self.guard.factor)
        times = confirming.times(chosen)
        self.result.unconfirmed += confirming.notes
        return None if times is None else self.db.confirm(self.workload, self.target, times)

    def _report_round(self) -> None:
        """What a strategy that keeps ``rounds`` (``EvolutionarySearch``) did in its last one,
        shown above the progress bar."""
        rounds = getattr(self.search, "rounds", None)
        if rounds:
            self.result.rounds.append(str(rounds[-1]))
            if hasattr(self.progress, "note"):
                self.progress.note(f"round {len(self.result.rounds)}: {rounds[-1]}")

    def _build(self, traces: list[Trace]) -> list[BuildResult]:
        started = time.perf_counter()
        # Only a task with constants passes them: a builder of before they existed still builds.
        built = (self.builder.build(self.workload, traces, constants=self.constants) if self.constants
                 else self.builder.build(self.workload, traces))
        self.result.build_seconds += time.perf_counter() - started
        return built

    def _build_or_kept(self, traces: list[Trace]) -> list[BuildResult]:
        """``_build``, but a program this run built and kept (``kept``) is not built again."""
        keys = [program_key(trace) for trace in traces]
        missing = [trace for trace, key in zip(traces, keys) if key not in self.kept]
        built = iter(self._build(missing) if missing else [])
        return [self.kept[key][1] if key in self.kept else next(built) for key in keys]

    def _keep(self, trace: Trace, built: BuildResult, median: float) -> None:
        """Keep ``built`` if it is among the ``keep`` fastest this run recorded."""
        if self.keep <= 0:
            return
        self.kept[program_key(trace)] = (median, built)
        if len(self.kept) > self.keep:
            del self.kept[max(self.kept, key=lambda key: self.kept[key][0])]

    def _run(self, artifacts: list, best: Optional[float] = None, workload: Optional[Workload] = None) -> list:
        started = time.perf_counter()
        measured = self.runner.run(workload or self.workload, artifacts, best)
        self.result.run_seconds += time.perf_counter() - started
        return measured

    def _sleep(self, seconds: float) -> None:
        self.guard.sleep(seconds)
        self.result.run_seconds += seconds

    def _canary_seconds(self, canary: tuple) -> Optional[float]:
        """The median seconds of the guard's canary: (its workload, its artifact), another
        task's best as often as this one's."""
        workload, artifact = canary
        (measured,) = self._run([artifact], workload=workload)
        return measured.median

    def _measure(self, proposal: Proposal, built: BuildResult) -> None:
        """Time one built candidate and hold it; when it is not a new best and the guard is due
        to look, settle what is held (``_settle``)."""
        held = _Held(proposal, built)
        self._time_held(held)
        self.held.append(held)
        if held.error is None and not held.new_best:
            self._settle(now=False)

    def _time_held(self, held: _Held) -> None:
        """Time a held program (a failed build is its error), against the best known, this
        batch's held programs included; a new best is timed again before it counts, so that
        one lucky repeat on a noisy machine does not decide it."""
        built = held.built
        held.runs, held.error, held.new_best = (), built.error, False
        if not built.ok:
            return
        best = self._best_seconds()
        (measured,) = self._run([built.artifact], best)
        held.runs, held.error = measured.seconds, measured.error
        if measured.ok and (best is None or measured.median < best):
            (again,) = self._run([built.artifact])
            held.runs, held.error = (held.runs + again.seconds, None) if again.ok else ((), again.error)
            if again.ok:
                held.new_best = True
                self.guard.new_best((self.workload, built.artifact), statistics.median(held.runs))

    def _best_seconds(self) -> Optional[float]:
        """The best median known: the database's best, or a held program's."""
        known = [statistics.median(h.runs) for h in self.held if h.error is None and h.runs]
        if self.result.best_seconds is not None:
            known.append(self.result.best_seconds)
        return min(known, default=None)

    def _settle(self, now: bool) -> None:
        """Unless the guard is not due to look (at once with ``now``), ask it whether the
        machine was busy; if so, time every held program that ran again, now that it is quiet
        (or the load has been taken as lasting). Then record them all, in order."""
        if not self.held or not (now or self.guard.due()):
            return
        ran = [h for h in self.held if h.error is None]
        if ran and self._busy():
            for held in ran:
                held.runs = ()  # not the best known any more while it is timed again
            for held in ran:
                self.result.retimed += 1
                self._time_held(held)
        self._record_held()

    def _busy(self) -> bool:
        """The guard's answer now; its canary's timings and its waits count as measuring time
        (waiting for a quiet machine is part of timing on it, not search)."""
        started, measured = time.perf_counter(), self.result.run_seconds
        busy = self.guard.busy(self._canary_seconds)
        self.result.run_seconds = measured + time.perf_counter() - started
        self.result.lasting_loads[:] = self.guard.lasting
        return busy

    def _record_held(self) -> None:
        held, self.held = self.held, []
        for h in held:
            if h.runs or h.error is not None:  # not one whose timing again was interrupted
                self._record(h.proposal.trace, h.built, h.runs, h.error)

    def _record(self, trace: Trace, built: BuildResult, runs: tuple[float, ...], error: Optional[str]) -> None:
        """Record one measured program (``runs``, or its ``error``) and report it. One that
        another run tuning into the database recorded first is not this run's trial. The best
        is the database's, so that what another run found counts here too."""
        record = self.db.commit(self.workload, trace, target=self.target, seconds=runs,
                                error=error, build_seconds=built.seconds)
        median = statistics.median(runs) if error is None else None  # as Record.median
        self.batch_seconds.append(median)
        if median is not None:
            self._keep(trace, built, median)
        self.result.best_record = self.db.best(self.workload, self.target)
        if record is None:
            return
        trial = Trial(len(self.result.history), trace, median, error, tuple(runs), built.seconds)
        self.result.history.append(trial)
        if self.progress is not None:
            self.progress(trial, self.result.best_seconds)
