"""``tune_tasks``: many workloads tuned under one trial budget, a task scheduler choosing which
task gets each round (propose ▶ build ▶ measure ▶ remember: ``loop.TaskLoop``); ``tune`` is the
one-task case. Every task shares the builder, the runner, the database and the load guard;
tasks of one ``Workload.kind`` share their cost model."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import numpy as np

from metasched.codegen import CodegenOptions
from metasched.database import Database, TuningDatabase
from metasched.errors import WarmStartError, check_integer, check_type
from metasched.lang.workload import Workload
from metasched.measure import Builder, LocalBuilder, LocalRunner, Runner
from metasched.measure.guard import LoadGuard
from metasched.measure.machine import Machine
from metasched.search import (
    DEFAULT_STRATEGY, STRATEGIES, CostModel, EvolutionarySearch, GBTModel, SearchContext, SearchStrategy,
    make_strategy,
)
from metasched.search.scoring import InProcess
from metasched.space import SpaceGenerator, cpu_default
from metasched.tune.loop import ProgressCallback, TaskLoop, WorkerTasks
from metasched.tune.result import TasksResult, TuneResult, weighted_seconds
from metasched.tune.scheduler import SCHEDULERS, RoundRobin, TaskScheduler, make_scheduler
from metasched.tune.target import machine_target
from metasched.tune.task import RoundRecord, TaskState, TuneTask
from metasched.tune.warm_start import checked, warm_start as warm_model

# Called after every round of ``tune_tasks`` with what the run found so far.
TasksProgress = Callable[[TasksResult], None]
# A cost model for every task of a kind, or a function that makes one per kind.
ModelArgument = Union[None, CostModel, Callable[[], CostModel]]
DatabaseArgument = Union[None, str, os.PathLike, TuningDatabase]


def tune(workload: Workload, trials: int = 64, database: DatabaseArgument = None,
         seed: int = 0, strategy: Union[str, SearchStrategy] = DEFAULT_STRATEGY, *,
         space: Optional[SpaceGenerator] = None, options: Optional[CodegenOptions] = None, batch_size: Optional[int] = None,
         builder: Optional[Builder] = None, runner: Optional[Runner] = None,
         progress: Union[bool, ProgressCallback] = False, confirm: int = 4,
         warm_start: Union[bool, Sequence[Workload]] = True, model: ModelArgument = None) -> TuneResult:
    """Tune ``workload`` until the database holds ``trials`` trials of it on this target:
    ``tune_tasks`` with one task.

    ``trials`` is the budget of the workload on this target, counting what ``database`` (a
    path, a ``Database``, or None for one in memory) already holds: a run that stopped early,
    run again with the same database and seed, measures the trials it had not reached, never
    a program already measured (a program is its trace with decisions, simplified; traces
    that lower to one kernel are one program: ``SearchContext.claim``).
    ``strategy`` names a strategy of ``metasched.search.STRATEGIES`` or is one; ``space``
    defaults to ``cpu_default()``; ``options`` are the code generator's (and decide the
    target's thread count; a given ``builder``'s own options win). ``builder`` and ``runner``
    default to fresh local ones, closed at the end; given ones stay open for the caller. The
    target is the runner's machine (``Runner.machine``: a cluster's runner, as
    ``metasched.measure.dask.DaskRunner``, reports its own), and the builder builds for it.
    ``batch_size``: programs built and measured per proposal (default: the strategy's, 16 for
    evolutionary search, 8 for random). ``progress``: True draws a progress bar; a callable is
    called with each trial and the best median seconds so far.

    ``confirm``: when the run measured anything, the ``confirm`` fastest programs (and the
    winner of the last confirmation) are timed again at the end, in turns, and the database
    records it (``Database.confirm``): it decides the best. 0 or 1: no confirmation.

    ``warm_start`` (``tune.warm_start``): the cost model of evolutionary search starts
    trained on the records of other workloads in ``database`` measured on this target: with
    True, those of the workload of this one's kind with the most records, if one has
    ``WARM_MIN_RECORDS``; with a list of workloads, theirs; with False, none.
    ``result.warm_start`` says what it was trained on. ``model``: the cost model of
    evolutionary search (a ``CostModel``; default ``GBTModel``).
    """
    trials, confirm = check_integer(trials, "tune", "trials", 0), check_integer(confirm, "tune", "confirm", 0)
    check_type(workload, "tune", "workload", Workload, "a Workload (metasched.parse, load or workloads.get)")
    _check_arguments("tune", database, seed, strategy, options, batch_size, model)
    if not (isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"tune: progress must be True, False or a callable(trial, best_seconds), "
                        f"not {progress!r} ({type(progress).__name__})")
    check_type(space, "tune", "space", (type(None), SpaceGenerator), "None or a SpaceGenerator")
    task = TuneTask(workload, space=space, strategy=strategy)
    _check_warm_start("tune", [task], strategy, warm_start, model)
    started = time.perf_counter()
    result = _Run(database, options, builder, runner, seed, model, warm_start, trials, RoundRobin(), None,
                  strategy, batch_size, confirm, progress, None).tune([task])
    outcome = result.tasks[0]
    outcome.wall_seconds = time.perf_counter() - started
    return outcome


def tune_tasks(tasks: Sequence[Union[TuneTask, Workload]], trials: int, database: DatabaseArgument = None,
               seed: int = 0, scheduler: Union[str, TaskScheduler] = "gradient", *,
               trials_per_task: Optional[int] = None, strategy: Union[str, SearchStrategy] = DEFAULT_STRATEGY,
               model: ModelArgument = None, options: Optional[CodegenOptions] = None,
               batch_size: Optional[int] = None, builder: Optional[Builder] = None,
               runner: Optional[Runner] = None, progress: Union[bool, TasksProgress] = False,
               confirm: int = 4, warm_start: Union[bool, Sequence[Workload]] = True) -> TasksResult:
    """Tune ``tasks`` (``TuneTask``s, or workloads of weight 1) until the database holds
    ``trials`` trials of them on this target, over all tasks (what ``database`` already holds
    counts: a stopped run goes on where it stopped), each task at most ``trials_per_task``.

    Each round the ``scheduler`` (``"gradient"``: ``GradientBased``, ``"round-robin"``, or a
    ``TaskScheduler``) picks a task, whose strategy proposes a batch that is built, measured
    and recorded as ``tune`` does. A task whose strategy finds nothing new is finished.
    ``seed``: every task's search draws from its own generator of that seed, so a task's
    proposals depend on the seed and its own measurements, not on the other tasks; ties
    between tasks are drawn from one more. ``model``: a cost model shared by every task of
    evolutionary search, or a function that makes one per ``Workload.kind`` (default: a
    ``GBTModel`` per kind, warm-started as ``tune`` says). ``progress``: True prints the task
    table after every round; a callable is called with the ``TasksResult`` so far. The other
    arguments are ``tune``'s."""
    trials, confirm = check_integer(trials, "tune_tasks", "trials", 0), check_integer(confirm, "tune_tasks",
                                                                                      "confirm", 0)
    tasks = _tasks(tasks)
    _check_arguments("tune_tasks", database, seed, strategy, options, batch_size, model)
    if isinstance(seed, np.random.Generator):
        raise TypeError("tune_tasks: seed must be an integer (each task draws from its own generator of it)")
    if trials_per_task is not None:
        check_integer(trials_per_task, "tune_tasks", "trials_per_task", 1)
    if not isinstance(scheduler, TaskScheduler) and scheduler not in SCHEDULERS:
        raise ValueError(f"tune_tasks: scheduler must be one of {', '.join(map(repr, sorted(SCHEDULERS)))} or a "
                         f"TaskScheduler, not {scheduler!r}")
    if not (isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"tune_tasks: progress must be True, False or a callable(TasksResult), not {progress!r}")
    if isinstance(strategy, SearchStrategy) and sum(t.strategy is None for t in tasks) > 1:
        raise ValueError("tune_tasks: one SearchStrategy cannot search several tasks (it keeps one task's state); "
                         "pass a strategy's name, or give each TuneTask its own")
    _check_warm_start("tune_tasks", tasks, strategy, warm_start, model)
    started = time.perf_counter()
    if progress is True:
        from metasched.tune.progress import TaskTable
        progress = TaskTable()
    result = _Run(database, options, builder, runner, seed, model, warm_start, trials, make_scheduler(scheduler),
                  trials_per_task, strategy, batch_size, confirm, False, progress or None).tune(tasks)
    result.wall_seconds = time.perf_counter() - started
    return result


def _tasks(tasks: object) -> list[TuneTask]:
    """``tune_tasks``'s tasks, checked: a non-empty sequence of ``TuneTask``s or workloads,
    each workload once."""
    if isinstance(tasks, (str, bytes, Workload, TuneTask)) or not isinstance(tasks, Sequence) or not tasks:
        raise TypeError(f"tune_tasks: tasks must be a non-empty list of TuneTasks or Workloads, not {tasks!r}")
    out, seen = [], {}
    for i, task in enumerate(tasks):
        if isinstance(task, Workload):
            task = TuneTask(task)
        check_type(task, "tune_tasks", f"tasks[{i}]", TuneTask, "a TuneTask or a Workload")
        if task.workload.key in seen:
            raise ValueError(f"tune_tasks: tasks {seen[task.workload.key]} and {i} are one workload "
                             f"({task.workload.label}); give it once, its weight the sum of theirs")
        seen[task.workload.key] = i
        out.append(task)
    return out


def _check_arguments(where: str, database: object, seed: object, strategy: object, options: object,
                     batch_size: object, model: object) -> None:
    """The checks at the door shared by ``tune`` and ``tune_tasks``: a wrong argument is a
    one-line ``TypeError`` or ``ValueError`` naming it, before anything is opened or started."""
    check_type(database, where, "database", (type(None), str, os.PathLike, TuningDatabase),
               "None, a path or a Database")
    if not isinstance(seed, np.random.Generator):
        check_integer(seed, where, "seed", 0)
    names = ", ".join(map(repr, sorted(STRATEGIES)))
    if isinstance(strategy, str):
        if strategy not in STRATEGIES:
            raise ValueError(f"{where}: strategy must be one of {names} or a SearchStrategy, not {strategy!r}")
    else:
        check_type(strategy, where, "strategy", SearchStrategy, f"one of {names} or a SearchStrategy")
    check_type(options, where, "options", (type(None), CodegenOptions), "None or a CodegenOptions")
    if batch_size is not None:
        check_integer(batch_size, where, "batch_size", 1)
    if not (model is None or isinstance(model, CostModel) or callable(model)):
        raise TypeError(f"{where}: model must be None, a CostModel or a function that makes one, not {model!r}")


def _check_warm_start(where: str, tasks: list[TuneTask], strategy: object, warm_start: object, model: object) -> None:
    """A warm start or a model is for evolutionary search by name: refused for a run whose
    tasks all search otherwise."""
    strategies = {t.strategy or strategy for t in tasks}
    evolutionary = "evolutionary" in strategies
    for task in tasks:
        if checked(warm_start, task.workload) and not evolutionary:
            raise WarmStartError(f"warm_start trains the cost model of evolutionary search; the strategy "
                                 f"{strategy!r} has none of its own making")
    if model is not None and not evolutionary:
        raise ValueError(f"{where}: model is the cost model of evolutionary search (strategy 'evolutionary'); "
                         f"the strategy {strategy!r} has none")


@dataclass
class _Run:
    """One tuning run's arguments, checked (``tune_tasks``'s; ``cap`` is ``trials_per_task``,
    ``task_progress`` ``tune``'s bar or callable, False for many tasks, ``run_progress`` the
    callable after every round); ``models`` the cost model made per kind."""

    database: DatabaseArgument
    options: Optional[CodegenOptions]
    builder: Optional[Builder]
    runner: Optional[Runner]
    seed: Union[int, np.random.Generator]
    model: ModelArgument
    warm_start: Union[bool, Sequence[Workload]]
    trials: int
    scheduler: TaskScheduler
    cap: Optional[int]
    strategy: Union[str, SearchStrategy]
    batch_size: Optional[int]
    confirm: int
    task_progress: Union[bool, ProgressCallback]
    run_progress: Optional[TasksProgress]
    models: dict[str, tuple] = field(default_factory=dict)  # kind -> (model, what it was warm-started on)

    def tune(self, tasks: list[TuneTask]) -> TasksResult:
        """Open the database (unless given one), and tune ``tasks`` until the budget is spent."""
        db = self.database if isinstance(self.database, TuningDatabase) else Database(self.database or ":memory:")
        owned: list = [] if isinstance(self.database, TuningDatabase) else [db]
        try:
            options = self.builder.options if self.builder else (self.options or CodegenOptions())
            # The runner's machine: a cluster's runner reports its own (a ClusterError when it cannot).
            machine = self.runner.machine() if isinstance(self.runner, Runner) else Machine.here()
            target = machine_target(machine, options)
            results = []
            for task in tasks:
                db.add_workload(task.workload)
                best = db.best(task.workload, target)
                results.append(TuneResult(task.workload, target, best, earlier_trials=len(db.records(task.workload,
                                                                                                       target)),
                                          earlier_best=best))
            result = TasksResult(target, results, [t.weight for t in tasks])
            cap = self.cap
            if sum(r.earlier_trials for r in results) < self.trials and any(cap is None or r.earlier_trials < cap
                                                                            for r in results):
                self._rounds(db, target, machine, options, tasks, result, owned)
        finally:
            for thing in reversed(owned):
                thing.close()
        return result

    def _rounds(self, db, target, machine: Machine, options, tasks: list[TuneTask], result: TasksResult,
                owned: list) -> None:
        """The rounds of the run, then the confirmation of every task that measured anything;
        builder and runner made here go into ``owned``, for ``tune`` to close; the builder
        builds for the runner's ``machine``."""
        trials, scheduler, cap, batch_size = self.trials, self.scheduler, self.cap, self.batch_size
        task_progress, run_progress = self.task_progress, self.run_progress
        keys = {t.workload.key for t in tasks}
        searches = [self._search(db, target, task, result.tasks[i], keys) for i, task in enumerate(tasks)]
        show = None
        if task_progress is not False:  # ``tune``: one task, a bar or a callable per trial
            show = _progress(task_progress, tasks[0].workload, trials, result.tasks[0])
            if result.tasks[0].warm_start is not None and hasattr(show, "note"):
                show.note(str(result.tasks[0].warm_start))
        note = getattr(show or run_progress, "note", None)
        builder, runner = self.builder, self.runner
        if builder is None:
            builder = LocalBuilder(options=options)
            owned.append(builder)
        if runner is None:
            runner = LocalRunner()
            owned.append(runner)
        if isinstance(builder, Builder):
            builder.build_for(machine)
        builder.start()
        runner.start()
        lend = WorkerTasks(builder.workers) if isinstance(builder, LocalBuilder) else InProcess()
        guard = LoadGuard(note=note)
        loops, states = [], []
        for i, (task, search) in enumerate(zip(tasks, searches)):
            batch = batch_size or search.batch_size
            context = SearchContext(task.workload, task.space or cpu_default(), np.random.default_rng(self.seed),
                                    db.measured(task.workload, target), db, target, lend, batch_size=batch)
            search.start(context)
            loop = TaskLoop(task.workload, db, target, builder, runner, search, context, result.tasks[i], show,
                            guard, batch, constants=task.constants, keep=self.confirm)
            loops.append(loop)
            states.append(TaskState(i, task, loop.recorded(), _history(db, task.workload, target, loop.batch_size)))
            if cap is not None and states[-1].trials >= cap:
                states[-1].finished, states[-1].why = True, "cap"
        scheduler.start(states, self.seed if isinstance(self.seed, int) else 0)
        try:
            while (left := trials - sum(loop.recorded() for loop in loops)) > 0:
                index = scheduler.next_task(states)
                if index is None:
                    break
                _check_pick(scheduler, index, states)
                state, loop = states[index], loops[index]
                count = min(loop.batch_size, left, left if cap is None else cap - state.trials)
                proposed = loop.round(count)
                state.trials = loop.recorded()
                if not proposed:
                    state.finished, state.why = True, "exhausted"
                    continue
                state.history.append(loop.result.best_seconds)
                if cap is not None and state.trials >= cap:
                    state.finished, state.why = True, "cap"
                scheduler.tuned(state)
                result.rounds.append(RoundRecord(index, sum(s.trials for s in states),
                                                 weighted_seconds(result.weights, [s.best_seconds for s in states])))
                if run_progress is not None:
                    run_progress(result)
        finally:
            if hasattr(show, "close"):
                show.close()
            if hasattr(run_progress, "close"):
                run_progress.close()
        for loop in loops:
            if self.confirm > 1 and loop.result.history:
                loop.result.confirmation = loop.confirm(self.confirm)
            loop.result.best_record = db.best(loop.workload, target)
            loop.result.concurrent_trials = (loop.recorded() - loop.result.earlier_trials
                                             - len(loop.result.history))

    def _search(self, db, target, task: TuneTask, result: TuneResult, keys: set[str]) -> SearchStrategy:
        """The task's strategy: its own, or the run's; evolutionary search by name gets the
        cost model of the task's kind (warm-started once per kind: ``_model``)."""
        spec = task.strategy or self.strategy
        if spec != "evolutionary":
            return make_strategy(spec)
        model, result.warm_start = self._model(db, target, task.workload, keys)
        return EvolutionarySearch(model=model)

    def _model(self, db, target, workload: Workload, keys: set[str]):
        """The cost model of ``workload``'s kind, made (and warm-started: ``warm_start``) for the
        first task of that kind, and what it was warm-started on."""
        kind = workload.kind
        if kind not in self.models:
            given = self.model
            if isinstance(given, CostModel):
                made = given
            else:
                made = given() if given is not None else None
            warmed, warm = warm_model(db, workload, target, self.warm_start, made, exclude=keys)
            model = next((m for m in (warmed, made) if m is not None), None)
            self.models[kind] = (GBTModel() if model is None else model, warm)
        return self.models[kind]


def _check_pick(scheduler: TaskScheduler, index: object, states: list[TaskState]) -> None:
    """A scheduler's pick must be the index of an unfinished task: a ``ValueError`` naming the
    scheduler otherwise (a scheduler of one's own may get it wrong)."""
    name = type(scheduler).__name__
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(states):
        raise ValueError(f"{name}.next_task returned {index!r}: the index of a task (0 to {len(states) - 1}) "
                         f"or None to end the run")
    if states[index].finished:
        raise ValueError(f"{name}.next_task picked task {index} ({states[index].workload.label}), which is "
                         f"finished ({states[index].why}); pick an unfinished one or None")


def _history(db, workload: Workload, target, batch_size: int) -> list[Optional[float]]:
    """A task's history rebuilt from its records in the order measured: the best median after
    each ``batch_size`` of them (None while none ran correctly)."""
    history, best = [], None
    records = db.records(workload, target)
    for i, record in enumerate(records):
        if record.ok and (best is None or record.median < best):
            best = record.median
        if (i + 1) % batch_size == 0 or i + 1 == len(records):
            history.append(best)
    return history


def _progress(progress: Union[bool, ProgressCallback], workload: Workload, trials: int,
              result: TuneResult) -> Optional[ProgressCallback]:
    if progress is True:
        from metasched.tune.progress import ProgressBar
        return ProgressBar(workload, trials, result.earlier_trials, result)
    return progress or None
