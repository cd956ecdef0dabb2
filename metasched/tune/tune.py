"""``tune``: propose ▶ build ▶ measure ▶ remember, for one workload, until the trial budget is
spent. Every result goes to the database once the load guard has seen the machine quiet after
it (``LoadGuard``), at the latest at the end of its batch: a run that is killed loses at most
the timings of the batch it was timing (one stopped with Ctrl-C records them), and the next run
with that database goes on from there."""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Optional, Sequence, Union

import numpy as np

from metasched.codegen import CodegenOptions
from metasched.database import Confirmation, Database, Record, Target
from metasched.errors import WarmStartError, check_integer, check_type
from metasched.lang.workload import Workload
from metasched.measure import BuildResult, Builder, Runner
from metasched.measure.worker import WorkerPool
from metasched.schedule import Schedule, Trace, replay
from metasched.search import (
    DEFAULT_STRATEGY, FEATURE_VERSION, STRATEGIES, EvolutionarySearch, SearchContext, SearchStrategy, make_strategy,
)
from metasched.search.scoring import InProcess
from metasched.space import SpaceGenerator, cpu_default
from metasched.tune.target import host_target
from metasched.tune.warm_start import WarmStart, checked, warm_start as warm_model


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
        if self.wall_seconds <= 0:
            return 0.0
        return max(0.0, 1 - (self.build_seconds + self.run_seconds) / self.wall_seconds)


ProgressCallback = Callable[[Trial, Optional[float]], None]


@dataclass
class LoadGuard:
    """Keeps a burst of load on the machine from making good programs look slow.

    When another process takes a core, a parallel kernel waits for it at every barrier: one run
    can take 5 to 8 times its time, and on this shared VM spells of seconds at twice the time
    come and go. Seen in tuning runs: whole batches of 16 single timings at 5 to 8 times the
    batches around them, programs of 1.3 ms recorded at 14 ms; and whole batches of programs
    timed in full at twice what a quiet timing gives (``bench/repeatability.py``), among them
    the fastest program of a conv2d_bias_relu run, recorded at 2.15 ms where a quiet timing
    gives 1.09, so that the run reported a slower best. The search then drops their
    neighbourhood and the cost model learns from false labels.

    So the programs timed since the machine was last seen quiet are held back (``_Loop``) until
    the best kernel of the run (the *canary*) is timed again: after a program that is not a
    new best (a new best is timed twice anyway), at most every ``interval`` seconds, and at
    the end of every batch. Slower than ``factor`` times its own time means the machine is
    busy. The guard then waits for the canary to recover (``waits`` seconds between tries),
    and the held programs are timed again. When the canary does not recover, the load is
    lasting: its slower time becomes the canary's own, so that a loaded machine is not waited
    for again at every program; a canary that runs faster than its own time later makes that
    its own again, so that the next spell is seen.

    Why every held program, and why the look at a batch's end: in two runs whose programs
    were all timed again 8 times in turns afterwards, a spell that began within a batch left 9
    of a conv2d_bias_relu batch's 16 programs recorded at 1.5-1.7 times their time, unseen,
    since the batch took less than ``interval``; before, a look re-timed only the program it
    followed. Why waits of 15.5 s in all (3.5 s before): in the same runs a spell of about
    14 s left 37 programs of a random search recorded at 1.3-6.5 times their time, some near
    the best as clear losers (a 1.2 ms program at 5 ms); ``bench/spells.py`` saw one of 9.7 s.
    A spell made on purpose (a process spinning on one core for 12 s of a 64-trial
    conv2d_bias_relu run, each record then timed again 6 times in turns;
    ``bench/load_spell.py``): before, 31 of the 64 records, two whole batches, were 1.5-6.4
    times their time; now none of those timed in it, for 14 s more of wall time (the wait).

    A load that outlasts those waits is waited for longer, up to ``patience`` seconds in all
    (the last of ``waits`` between tries), before it counts as lasting; ``note`` (a progress
    bar's) tells the user while it waits. Timings under a load that takes a core are not
    slower so much as scrambled, and the canary does not show how much: a kernel whose
    threads meet at few barriers loses little, one with a barrier per row loses most. A
    process spinning on one core for 40 s of a 64-trial matmul_relu run (``bench/load_spell.py
    --workload matmul_relu --length 40``, Xeon): with 15.5 s of waits only, the guard took
    the load as lasting (the canary at 17.5 times its time), and the 32 programs timed in it
    were recorded at 1.7 to 15 times their time. Spinning 60% of the time (``--duty 0.6``),
    the canary read 1.6 times, and 46 programs were recorded at 1.6 to 15 times (median 2.0).
    With the patience, none timed in either spell; the wall grew by about the spell's length.
    Spinning 30% of the time leaves the canary under ``factor``: 38 of the programs timed
    then read 1.3 to 1.55 times their time and four 1.6 to 5.5, evenly enough that the order
    mostly holds, and they are recorded as the machine's speed. A load that stays costs
    ``patience`` once.
    """

    factor: float = 1.5
    interval: float = 2.0
    waits: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    patience: float = 120.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.perf_counter
    note: Optional[Callable[[str], None]] = None  # tells the user what the guard waits for
    _canary: Optional[tuple[object, float]] = field(default=None, init=False, repr=False)  # (artifact, median s)
    _quiet_at: float = field(default=-float("inf"), init=False, repr=False)  # when the canary ran at its time
    # Per load taken as lasting, how many times its own time (as the guard knew it: after an
    # earlier lasting load, that load's) the canary still took after the waits; the programs
    # timed after it ran at that loaded speed (``TuneResult.lasting_loads``).
    lasting: list[float] = field(default_factory=list, init=False)

    def new_best(self, artifact: object, seconds: float) -> None:
        self._canary = (artifact, seconds)

    def due(self) -> bool:
        """Whether it is time to look (``busy``) after a program: there is a canary, and it
        ran quiet ``interval`` seconds ago or more. (At the end of a batch the loop looks
        anyway.)"""
        return self._canary is not None and self.clock() - self._quiet_at >= self.interval

    def busy(self, time_canary: Callable[[object], Optional[float]]) -> bool:
        """Whether the machine is busy, by the canary timed now (then it has waited for it to
        calm down: ``waits``, then the last of them again until ``patience``);
        ``time_canary(artifact)`` gives the canary's median seconds (None when it failed).
        Without a canary the machine counts as quiet."""
        if self._canary is None:
            return False
        artifact, reference = self._canary
        seconds, waited, tries = time_canary(artifact), 0.0, 0
        while seconds is None or seconds > self.factor * reference:
            if tries < len(self.waits):
                wait = self.waits[tries]
            elif self.waits and self.waits[-1] > 0 and waited < self.patience:
                if tries == len(self.waits):
                    slow = "fails" if seconds is None else f"runs at {seconds / reference:.1f}x its time"
                    self._tell(f"the machine is busy: the best kernel {slow}; waiting up to {self.patience:g} s "
                               "in all for it to calm down (Ctrl-C stops the run and keeps its records)")
                wait = min(self.waits[-1], self.patience - waited)
            else:
                break
            self.sleep(wait)
            waited, tries = waited + wait, tries + 1
            seconds = time_canary(artifact)
        else:  # quiet
            self._quiet_at = self.clock()
            if seconds < reference:  # quieter than it was: a lasting load has gone
                self._canary = (artifact, seconds)
            return tries > 0
        # Still busy: the load is lasting, not a burst. Its times are the machine's times
        # for now; waiting at every program would only stall the run.
        if seconds is not None:
            self.lasting.append(seconds / reference)
            self._canary, self._quiet_at = (artifact, seconds), self.clock()
            self._tell(f"the machine stays busy: the best kernel runs at {seconds / reference:.1f}x its time "
                       f"after {waited:.4g} s of waiting; timing goes on at that speed")
        return True

    def _tell(self, text: str) -> None:
        if self.note is not None:
            self.note(text)


SEARCH_TASK_SECONDS = 120.0  # a batch of candidates for one worker takes well under a second


class WorkerTasks:
    """The search's bulk work (``search.scoring``) in the builder's worker processes, which
    are idle while it searches. A task that fails there (its worker died, say) runs again in
    this process: a bug then raises here with its own traceback."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool, self.workers = pool, len(pool.workers)

    def map(self, fn: Callable, tasks: Sequence[tuple]) -> list:
        outcomes = self.pool.map(fn, tasks, SEARCH_TASK_SECONDS, what="search task")
        return [o.value if o.ok else fn(*args) for o, args in zip(outcomes, tasks)]


CONFIRM_ROUNDS = 3  # rounds of timing in turns at the end of a run (``_Loop.confirm``)
# Seconds between the confirmation's tries on a busy machine: shorter than the load guard's,
# since a confirmation given up leaves the best to the medians, which is no false label.
CONFIRM_WAITS = (0.5, 1.0, 2.0)


def tune(workload: Workload, trials: int = 64, database: Union[None, str, os.PathLike, Database] = None,
         seed: int = 0, strategy: Union[str, SearchStrategy] = DEFAULT_STRATEGY, *,
         space: Optional[SpaceGenerator] = None, options: Optional[CodegenOptions] = None,
         batch_size: Optional[int] = None, builder: Optional[Builder] = None, runner: Optional[Runner] = None,
         progress: Union[bool, ProgressCallback] = False, confirm: int = 4,
         warm_start: Union[bool, Sequence[Workload]] = True) -> TuneResult:
    """Tune ``workload`` until the database holds ``trials`` trials of it on this target.

    ``trials`` is the budget of the workload on this target, counting what ``database`` (a
    path, a ``Database``, or None for one in memory) already holds: a run that stopped early,
    run again with the same database and seed, measures the trials it had not reached, never
    a program already measured (a program is its trace with decisions, simplified; traces
    that lower to one kernel are one program: ``SearchContext.claim``).
    ``strategy`` names a strategy of ``metasched.search.STRATEGIES`` or is one; ``space``
    defaults to ``cpu_default()``; ``options`` are the code generator's (and decide the
    target's thread count; a given ``builder``'s own options win). ``builder`` and ``runner``
    default to fresh ones, closed at the end; given ones stay open for the caller.
    ``batch_size``: programs built and measured per proposal (default: the strategy's, 16 for
    evolutionary search, 8 for random). ``progress``: True draws a progress bar; a callable is
    called with each trial and the best median seconds so far.

    ``confirm``: when the run measured anything, the ``confirm`` fastest programs (and the
    winner of the last confirmation) are built and timed again at the end, in turns, and the
    database records it (``Database.confirm``): it decides the best. Each trial was timed
    alone, at its own moment of a shared machine's load, and the fastest of them is often the
    one timed at a quiet moment, not the fastest program. 0 or 1: no confirmation.

    ``warm_start`` (``tune.warm_start``): the cost model of evolutionary search, the strategy
    named ``"evolutionary"``, starts trained on the records of other workloads in ``database``
    measured on this target, at most ``WARM_RECORDS`` of each: with True, those of the
    workload of this one's kind (``Workload.kind``) with the most records, if one has
    ``WARM_MIN_RECORDS``; with a list of workloads, theirs (``WarmStartError`` when
    they have no records on this target, or when ``strategy`` is not ``"evolutionary"``);
    with False, none. ``result.warm_start`` says what it was trained on, and a progress bar
    prints it.
    """
    trials, confirm = check_integer(trials, "tune", "trials", 0), check_integer(confirm, "tune", "confirm", 0)
    _check_arguments(workload, database, seed, strategy, space, options, batch_size, progress)
    if checked(warm_start, workload) and strategy != "evolutionary":
        raise WarmStartError(f"warm_start trains the cost model of evolutionary search; the strategy "
                             f"{strategy!r} has none of its own making")
    started = time.perf_counter()
    db = database if isinstance(database, Database) else Database(database or ":memory:")
    owned: list = [] if isinstance(database, Database) else [db]
    try:
        options = builder.options if builder else (options or CodegenOptions())
        target = host_target(options)
        db.add_workload(workload)
        earlier = len(db.records(workload, target))
        best = db.best(workload, target)
        result = TuneResult(workload, target, best, earlier_trials=earlier, earlier_best=best)
        if earlier < trials:
            model, result.warm_start = warm_model(db, workload, target, warm_start if strategy == "evolutionary"
                                                  else False)
            search = make_strategy(strategy) if model is None else EvolutionarySearch(model=model)
            show = _progress(progress, workload, trials, earlier, result)
            if result.warm_start is not None and hasattr(show, "note"):
                show.note(str(result.warm_start))
            if builder is None:
                builder = Builder(options=options)
                owned.append(builder)
            if runner is None:
                runner = Runner()
                owned.append(runner)
            builder.start()
            runner.start()
            batch_size = batch_size or search.batch_size
            tasks = WorkerTasks(builder.workers) if isinstance(builder, Builder) else InProcess()
            context = SearchContext(workload, space or cpu_default(), np.random.default_rng(seed),
                                    db.measured(workload, target), db, target, tasks)
            search.start(context)
            loop = _Loop(workload, db, target, builder, runner, search, context, result, show,
                         LoadGuard(note=getattr(show, "note", None)))
            loop.run(trials, batch_size)
            if confirm > 1 and result.history:
                result.confirmation = loop.confirm(confirm, CONFIRM_ROUNDS)
            result.best_record = db.best(workload, target)
            result.concurrent_trials = len(db.measured(workload, target)) - earlier - len(result.history)
    finally:
        for thing in reversed(owned):
            thing.close()
    result.wall_seconds = time.perf_counter() - started
    return result


def _check_arguments(workload: object, database: object, seed: object, strategy: object, space: object,
                     options: object, batch_size: object, progress: object) -> None:
    """``tune``'s checks at the door: a wrong argument is a one-line ``TypeError`` or
    ``ValueError`` naming it, before anything is opened or started."""
    check_type(workload, "tune", "workload", Workload, "a Workload (metasched.parse, load or workloads.get)")
    check_type(database, "tune", "database", (type(None), str, os.PathLike, Database),
               "None, a path or a Database")
    if not isinstance(seed, np.random.Generator):
        check_integer(seed, "tune", "seed", 0)
    if isinstance(strategy, str):
        if strategy not in STRATEGIES:
            raise ValueError(f"tune: strategy must be one of {', '.join(map(repr, sorted(STRATEGIES)))} or a "
                             f"SearchStrategy, not {strategy!r}")
    else:
        check_type(strategy, "tune", "strategy", SearchStrategy,
                   f"one of {', '.join(map(repr, sorted(STRATEGIES)))} or a SearchStrategy")
    check_type(space, "tune", "space", (type(None), SpaceGenerator), "None or a SpaceGenerator")
    check_type(options, "tune", "options", (type(None), CodegenOptions), "None or a CodegenOptions")
    if batch_size is not None:
        check_integer(batch_size, "tune", "batch_size", 1)
    if not (isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"tune: progress must be True, False or a callable(trial, best_seconds), "
                        f"not {progress!r} ({type(progress).__name__})")


def _progress(progress: Union[bool, ProgressCallback], workload: Workload, trials: int,
              earlier: int, result: TuneResult) -> Optional[ProgressCallback]:
    if progress is True:
        from metasched.tune.progress import ProgressBar
        return ProgressBar(workload, trials, earlier, result)
    return progress or None


@dataclass
class _Held:
    """A program timed and not yet recorded: its ``runs`` (seconds per repeat) or ``error``,
    and whether it was a new best when timed."""

    sch: Schedule
    built: BuildResult
    runs: tuple[float, ...] = ()
    error: Optional[str] = None
    new_best: bool = False


@dataclass
class _Loop:
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

    # The programs timed since the machine was last seen quiet, not yet recorded (``LoadGuard``).
    held: list[_Held] = field(default_factory=list)
    # The median seconds (None: failed) of each program of the batch recorded so far, in order.
    batch_seconds: list[Optional[float]] = field(default_factory=list)

    def run(self, trials: int, batch_size: int) -> None:
        """Measure until the database holds ``trials`` trials of the workload on the target,
        another run's included (it may be tuning into the same file)."""
        try:
            while (left := trials - len(recorded := self.db.measured(self.workload, self.target))) > 0:
                self.context.measured |= recorded  # not proposed again: another run may have measured them
                schedules = self.search.propose(min(batch_size, left))
                if not schedules:
                    self.result.exhausted = True
                    return
                built = self._build([sch.trace for sch in schedules])
                self.batch_seconds = []
                for sch, result in zip(schedules, built):
                    self._measure(sch, result)
                self._settle(now=True)
                self.search.notify(schedules, self.batch_seconds)
                if hasattr(self.progress, "sync"):  # a bar: what the database holds, another run's records too
                    self.progress.sync(len(self.db.measured(self.workload, self.target)), self.result.best_seconds)
                self._report_round()
        except KeyboardInterrupt:
            self._record_held()  # what was measured is kept, checked or not
            raise
        finally:
            if hasattr(self.progress, "close"):
                self.progress.close()

    def confirm(self, count: int, rounds: int) -> Optional[Confirmation]:
        """Builds the ``count`` fastest records (by their medians) and the winner of the last
        confirmation, times them in turns (``_in_turns``) and records it; the confirmation, or
        None when fewer than two ran or the machine stayed busy.

        Busy: the programs ran, in the median, more than ``LoadGuard.factor`` times slower
        than when tuned. Another process then holds a core or the memory bandwidth, and which
        program copes best with that says little about which is fastest (seen: four programs
        all at twice their times, the slowest of them before now the fastest). As the load
        guard does, it waits for the machine (``CONFIRM_WAITS``) and times them again; a
        machine still busy after that leaves the best to the medians. (Programs whose trials
        were all timed at quiet moments more than that factor faster look the same, and the
        medians decide for them too, as they would without a confirmation.)"""
        done = sorted((r for r in self.db.records(self.workload, self.target) if r.ok), key=lambda r: (r.median, r.id))
        chosen = done[:count]
        previous = self.db.confirmation(self.workload, self.target)
        if previous is not None and previous.winner not in {r.id for r in chosen}:
            chosen += [r for r in done if r.id == previous.winner]
        if len(chosen) < 2:
            return None
        built = []
        for record, result in zip(chosen, self._build([r.trace for r in chosen])):
            if result.ok:
                built.append((record, result.artifact))
            else:
                self.result.unconfirmed.append(f"record {record.id}: {result.error}")
        for wait in (None, *CONFIRM_WAITS):
            if wait is not None:
                self.guard.sleep(wait)
                self.result.run_seconds += wait
            times = self._in_turns(built, rounds)
            if len(times) < 2:
                return None
            slowdown = statistics.median(statistics.median(times[r.id]) / r.median for r, _ in built)
            if slowdown <= self.guard.factor:
                return self.db.confirm(self.workload, self.target, times)
        self.result.unconfirmed.append(f"the machine stayed busy: the fastest programs ran {slowdown:.1f} times "
                                       "slower than when tuned, so no confirmation was recorded")
        return None

    def _in_turns(self, built: list, rounds: int) -> dict[int, list[float]]:
        """Times the ``(record, artifact)`` pairs of ``built`` in turns, ``rounds`` times (in one
        order, then the other): each record's median seconds per round, by id. One that fails
        is reported and dropped from ``built``."""
        times: dict[int, list[float]] = {record.id: [] for record, _ in built}
        for round_ in range(rounds):
            turn = [(r, a) for r, a in (built if round_ % 2 == 0 else built[::-1]) if r.id in times]
            started = time.perf_counter()
            measured = self.runner.run(self.workload, [artifact for _, artifact in turn])
            self.result.run_seconds += time.perf_counter() - started
            for (record, _), run in zip(turn, measured):
                if run.ok:
                    times[record.id].append(run.median)
                else:
                    self.result.unconfirmed.append(f"record {record.id}: {run.error}")
                    del times[record.id]
        built[:] = [(r, a) for r, a in built if r.id in times]
        return times

    def _report_round(self) -> None:
        """What a strategy that keeps ``rounds`` (``EvolutionarySearch``) did in its last one,
        shown above the progress bar."""
        rounds = getattr(self.search, "rounds", None)
        if rounds:
            self.result.rounds.append(str(rounds[-1]))
            if hasattr(self.progress, "note"):
                self.progress.note(f"round {len(self.result.rounds)}: {rounds[-1]}")

    def _build(self, traces: list[Trace]):
        started = time.perf_counter()
        built = self.builder.build(self.workload, traces)
        self.result.build_seconds += time.perf_counter() - started
        return built

    def _time(self, artifact, best: Optional[float] = None):
        started = time.perf_counter()
        (measured,) = self.runner.run(self.workload, [artifact], best)
        self.result.run_seconds += time.perf_counter() - started
        return measured

    def _canary_seconds(self, artifact) -> Optional[float]:
        return self._time(artifact).median

    def _measure(self, sch: Schedule, built: BuildResult) -> None:
        """Time one built candidate and hold it; when it is not a new best and the guard is due
        to look, settle what is held (``_settle``)."""
        held = _Held(sch, built)
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
        measured = self._time(built.artifact, best)
        held.runs, held.error = measured.seconds, measured.error
        if measured.ok and (best is None or measured.median < best):
            again = self._time(built.artifact)
            held.runs, held.error = (held.runs + again.seconds, None) if again.ok else ((), again.error)
            if again.ok:
                held.new_best = True
                self.guard.new_best(built.artifact, statistics.median(held.runs))

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
                self._record(h.sch, h.built, h.runs, h.error)

    def _record(self, sch: Schedule, built: BuildResult, runs: tuple[float, ...], error: Optional[str]) -> None:
        """Record one measured program (``runs``, or its ``error``) and report it. One that
        another run tuning into the database recorded first is not this run's trial. The best
        is the database's, so that what another run found counts here too."""
        record = self.db.commit(self.workload, sch.trace, target=self.target, seconds=runs,
                                error=error, build_seconds=built.seconds,
                                feature_version=str(FEATURE_VERSION))
        median = statistics.median(runs) if error is None else None  # as Record.median
        self.batch_seconds.append(median)
        self.result.best_record = self.db.best(self.workload, self.target)
        if record is None:
            return
        trial = Trial(len(self.result.history), sch.trace, median, error, tuple(runs), built.seconds)
        self.result.history.append(trial)
        if self.progress is not None:
            self.progress(trial, self.result.best_seconds)
