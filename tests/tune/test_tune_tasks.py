"""``tune_tasks`` under a builder, runner and cost model written here (the interfaces a cluster
or a user's model plugs into): the budget over all tasks, the cap per task, a task whose space
runs out, resume from a database (each task's history rebuilt from its records), determinism,
shared cost models per kind; and ``tune`` is the one-task case, with the very records it made
before ``tune_tasks`` existed."""
import hashlib
import json
import pathlib

import numpy as np
import pytest

from metasched import Database, TuneTask, tune, tune_tasks, workloads
from metasched.codegen import CodegenOptions
from metasched.database import program_key
from metasched.measure import BuildResult, Builder, RunResult, Runner
from metasched.search import CostModel, EvolutionaryConfig, EvolutionarySearch
from metasched.search.cost_model import FeatureExtractor
from metasched.tune import GradientBased, RoundRobin, TaskScheduler, host_target

DATA = pathlib.Path(__file__).parent / "data"
MATMUL = workloads.get("matmul_relu", M=64, N=64, K=64)
CONV = workloads.get("conv2d_bias_relu", N=1, C=3, H=6, W=5, F=4, R=3, S=3, PAD=1)
SOFTMAX = workloads.get("softmax", M=5, N=13)
SMALL = EvolutionaryConfig(population_size=24, init_min_unmeasured=8, genetic_num_iters=2)


class HashBuilder(Builder):
    """Compiles nothing: each trace is its own artifact."""

    def __init__(self):
        self.options = CodegenOptions()
        self.batches = 0

    def build(self, workload, traces):
        self.batches += 1
        return [BuildResult(trace, None, 0.0) for trace in traces]


class HashRunner(Runner):
    """Times a program by a hash of its key (one in 11 fails): deterministic, unrelated to its
    features."""

    def __init__(self):
        self.workloads = []

    def run(self, workload, artifacts, best=None):
        self.workloads.append(workload.key)
        out = []
        for trace in artifacts:
            h = int(hashlib.sha256(program_key(trace).encode()).hexdigest()[:8], 16)
            out.append(RunResult((1e-3 * (1 + h % 1000 / 100),) * 3, None) if h % 11 else RunResult((), "run: boom"))
        return out


class LengthExtractor(FeatureExtractor):
    """A row of two numbers: the trace's length and its number of decisions."""

    version = "length-1"

    def __call__(self, sch):
        return np.array([len(sch.trace), len(sch.trace.decisions)], dtype=float)


class CountingModel(CostModel):
    """Scores by the trace's length; counts what it learned, by workload."""

    extractor = LengthExtractor()

    def __init__(self):
        self.learned: dict[str, int] = {}

    def update(self, rows, results):
        assert len(rows) == len(results) and rows.shape[1] == 2
        for result in results:
            self.learned[result.workload] = self.learned.get(result.workload, 0) + 1

    def predict(self, rows):
        return -rows[:, 0]


class LengthModel(CostModel):
    """Scores a program by the throughput measured of programs with as long a trace (of all
    programs, for a length not seen): exact Python arithmetic, so that a seed's proposals are
    the same on every host. Scikit-learn's trees are not: their fits move with numpy's SIMD
    code for the host's CPU and with the threads OpenMP runs, and so do the programs the
    search proposes from them."""

    extractor = LengthExtractor()

    def __init__(self):
        self.times: dict[int, list[float]] = {}

    def update(self, rows, results):
        for row, result in zip(rows, results):
            self.times.setdefault(int(row[0]), []).append(1.0 if result.seconds is None else result.seconds)

    def predict(self, rows):
        every = [s for times in self.times.values() for s in times]
        default = sum(every) / len(every) if every else 1e-3
        means = [sum(self.times[n]) / len(self.times[n]) if n in self.times else default
                 for n in (int(row[0]) for row in rows)]
        return np.array([round(1e-3 / m, 6) for m in means])


@pytest.fixture
def small_search(monkeypatch):
    """Evolutionary search by name runs with ``SMALL``'s population (quick, in this process)."""
    from metasched.search import evolutionary
    monkeypatch.setattr(evolutionary, "EvolutionaryConfig", lambda: SMALL)


def _records(db, wl):
    return [[r.program, list(r.seconds), r.error] for r in db.records(wl)]


@pytest.mark.parametrize("name, seed, strategy", [
    ("matmul_relu", 0, "evolutionary"), ("conv2d_bias_relu", 0, "evolutionary"), ("matmul_relu", 0, "replay"),
    pytest.param("conv2d_bias_relu", 0, "replay", marks=pytest.mark.slow),
    pytest.param("matmul_relu", 1, "evolutionary", marks=pytest.mark.slow),
    pytest.param("conv2d_bias_relu", 1, "evolutionary", marks=pytest.mark.slow),
    pytest.param("matmul_relu", 1, "replay", marks=pytest.mark.slow),
    pytest.param("conv2d_bias_relu", 1, "replay", marks=pytest.mark.slow),
])
def test_tune_records_what_it_recorded_before_tune_tasks(name, seed, strategy):
    before = json.loads((DATA / "tune_before_tasks.json").read_text())["runs"][f"{name} seed {seed} {strategy}"]
    wl = MATMUL if name == "matmul_relu" else CONV
    db = Database(":memory:")
    chosen = EvolutionarySearch(model=LengthModel()) if strategy == "evolutionary" else strategy
    tune(wl, trials=40, database=db, seed=seed, strategy=chosen, builder=HashBuilder(), runner=HashRunner(),
         warm_start=False)
    assert _records(db, wl) == before


def test_tune_is_tune_tasks_with_one_task(small_search):
    one, many = Database(":memory:"), Database(":memory:")
    alone = tune(MATMUL, trials=24, database=one, seed=2, builder=HashBuilder(), runner=HashRunner())
    result = tune_tasks([MATMUL], trials=24, database=many, seed=2, builder=HashBuilder(), runner=HashRunner())
    assert _records(one, MATMUL) == _records(many, MATMUL)
    assert [t.trace for t in alone.history] == [t.trace for t in result[0].history]
    assert result[0].best_seconds == alone.best_seconds
    assert result.weighted_seconds == alone.best_seconds


def test_the_budget_is_over_all_tasks_and_the_cap_per_task():
    db = Database(":memory:")
    result = tune_tasks([MATMUL, TuneTask(CONV, weight=4), SOFTMAX], trials=80, database=db, seed=0,
                        trials_per_task=32, builder=HashBuilder(), runner=HashRunner(), batch_size=8,
                        strategy="replay")
    target = result.target
    counts = [len(db.records(wl, target)) for wl in (MATMUL, CONV, SOFTMAX)]
    assert sum(counts) == 80 and max(counts) <= 32 and min(counts) >= 8
    assert sum(len(r.history) for r in result.tasks) == 80 == result.trials
    assert [r.task for r in result.rounds[:3]] == [0, 1, 2]  # the warm-up
    assert result.rounds[-1].trials == 80
    sums = [r.weighted_seconds for r in result.rounds if r.weighted_seconds is not None]
    assert sums and all(b <= a for a, b in zip(sums, sums[1:]))
    assert result.weighted_seconds == pytest.approx(sum(w * r.best_seconds for w, r in zip((1, 4, 1), result.tasks)))


def test_a_task_whose_space_runs_out_is_finished_and_the_rest_get_the_budget(tiny_add):
    db = Database(":memory:")
    result = tune_tasks([tiny_add, MATMUL], trials=48, database=db, seed=0, builder=HashBuilder(),
                        runner=HashRunner(), batch_size=8, scheduler="round-robin", strategy="replay")
    tiny = len(db.records(tiny_add, result.target))
    assert result[0].exhausted and tiny < 24  # a space of a few programs
    assert tiny + len(db.records(MATMUL, result.target)) == 48


class Recording(TaskScheduler):
    """Round-robin that keeps what it saw at the start of the run."""

    def start(self, tasks, seed):
        self.seen = [(t.index, t.trials, list(t.history)) for t in tasks]
        self.inner = RoundRobin()
        self.inner.start(tasks, seed)

    def next_task(self, tasks):
        return self.inner.next_task(tasks)


def test_a_second_run_goes_on_from_the_database_with_each_task_s_history(tmp_path, small_search):
    path = tmp_path / "tuning.db"
    first = tune_tasks([MATMUL, SOFTMAX], trials=32, database=path, seed=0, builder=HashBuilder(),
                       runner=HashRunner(), batch_size=8, confirm=0)
    scheduler = Recording()
    again = tune_tasks([MATMUL, SOFTMAX], trials=48, database=path, seed=0, builder=HashBuilder(),
                       runner=HashRunner(), batch_size=8, scheduler=scheduler, confirm=0)
    assert [r.earlier_trials for r in again.tasks] == [len(r.history) for r in first.tasks]
    for index, trials, history in scheduler.seen:
        rounds = [r for r in first.rounds if r.task == index]
        assert trials == len(first[index].history) and len(history) == len(rounds)
        assert history[-1] == first[index].best_seconds  # the best after its last round
    assert again.trials == 16
    with Database(path) as db:
        keys = [r.program for wl in (MATMUL, SOFTMAX) for r in db.records(wl)]
    assert len(keys) == len(set(keys)) == 48
    done = tune_tasks([MATMUL, SOFTMAX], trials=48, database=path, builder=HashBuilder(), runner=HashRunner())
    assert done.trials == 0 and not done.rounds


def test_the_same_seed_gives_the_same_run_and_a_task_s_proposals_do_not_depend_on_the_others(small_search):
    def run(tasks, seed, strategy):
        db = Database(":memory:")
        tune_tasks(tasks, trials=48, database=db, seed=seed, builder=HashBuilder(), runner=HashRunner(),
                   batch_size=8, confirm=0, strategy=strategy)
        return {wl.name: _records(db, wl) for wl in (MATMUL, CONV, SOFTMAX)}

    first = run([MATMUL, CONV, SOFTMAX], 1, "evolutionary")
    assert run([MATMUL, CONV, SOFTMAX], 1, "evolutionary") == first
    assert run([MATMUL, CONV, SOFTMAX], 2, "evolutionary") != first
    # Random search learns nothing: a task's proposals are its own generator's alone.
    with_others, alone = run([MATMUL, CONV, SOFTMAX], 1, "replay")["matmul_relu"], run([MATMUL], 1, "replay")
    assert with_others and alone["matmul_relu"][:len(with_others)] == with_others


def test_a_builder_runner_and_cost_model_of_your_own(small_search):
    builder, runner, model = HashBuilder(), HashRunner(), CountingModel()
    small = workloads.get("matmul_relu", M=32, N=48, K=16)  # the same kind as MATMUL
    result = tune_tasks([MATMUL, small, SOFTMAX], trials=48, seed=0, builder=builder, runner=runner,
                        model=model, batch_size=8)
    assert builder.batches >= 6 and set(runner.workloads) == {MATMUL.key, small.key, SOFTMAX.key}
    # one model for every task: it learned each task's measured programs from their rows
    assert model.learned == {r.workload.key: len(r.history) for r in result.tasks}
    assert all(r.best_record is not None for r in result.tasks)


def test_tasks_of_one_kind_share_a_cost_model_and_others_have_their_own(small_search):
    made = []

    def per_kind():
        made.append(CountingModel())
        return made[-1]

    small = workloads.get("matmul_relu", M=32, N=48, K=16)
    result = tune_tasks([MATMUL, small, SOFTMAX], trials=48, seed=0, builder=HashBuilder(), runner=HashRunner(),
                        model=per_kind, batch_size=8)
    assert len(made) == 2
    by_kind = {frozenset(m.learned) for m in made}
    assert by_kind == {frozenset({MATMUL.key, small.key}), frozenset({SOFTMAX.key})}
    assert sum(sum(m.learned.values()) for m in made) == result.trials


def test_a_gradient_run_tunes_the_heavy_task_more():
    result = tune_tasks([TuneTask(MATMUL, weight=50), SOFTMAX, TuneTask(CONV, weight=0.01)], trials=96, seed=0,
                        builder=HashBuilder(), runner=HashRunner(), batch_size=8, scheduler=GradientBased(),
                        strategy="replay")
    trials = [len(r.history) for r in result.tasks]
    assert trials[0] > trials[1] and trials[0] > trials[2]


@pytest.mark.parametrize("arguments, error, says", [
    (dict(tasks=[]), TypeError, "tasks must be"),
    (dict(tasks=MATMUL), TypeError, "tasks must be"),
    (dict(tasks=[MATMUL, "conv"]), TypeError, "tasks[1] must be"),
    (dict(tasks=[MATMUL, TuneTask(MATMUL, 2)]), ValueError, "tasks 0 and 1 are one workload"),
    (dict(scheduler="fair"), ValueError, "scheduler must be"),
    (dict(trials_per_task=0), ValueError, "trials_per_task"),
    (dict(seed=np.random.default_rng(0)), TypeError, "seed must be an integer"),
    (dict(strategy=EvolutionarySearch(SMALL)), ValueError, "one SearchStrategy cannot search several tasks"),
    (dict(model="gbt"), TypeError, "model must be"),
    (dict(strategy="replay", model=CountingModel()), ValueError, "model is the cost model of evolutionary"),
    (dict(progress="yes"), TypeError, "progress must be"),
])
def test_a_wrong_argument_is_named_in_one_line(arguments, error, says):
    arguments = {"tasks": [MATMUL, SOFTMAX], "trials": 8, **arguments}
    with pytest.raises(error) as raised:
        tune_tasks(**arguments)
    assert str(raised.value).startswith("tune_tasks: ") and says in str(raised.value), str(raised.value)


@pytest.mark.parametrize("weight", [0, -1, float("nan"), float("inf"), "2", True])
def test_a_task_s_weight_is_a_positive_number(weight):
    with pytest.raises(ValueError, match="weight must be a positive number"):
        TuneTask(MATMUL, weight)


def test_the_target_is_this_host_s():
    result = tune_tasks([SOFTMAX], trials=8, builder=HashBuilder(), runner=HashRunner(), strategy="replay")
    assert result.target == host_target(CodegenOptions())


def test_the_task_table_names_every_task():
    from metasched.tune.progress import task_table
    result = tune_tasks([MATMUL, TuneTask(SOFTMAX, 2)], trials=16, seed=0, builder=HashBuilder(),
                        runner=HashRunner(), batch_size=8, strategy="replay")
    lines = task_table(result)
    assert any("matmul_relu" in line for line in lines) and any("softmax" in line for line in lines)
    assert lines[-1].startswith(f"total weighted latency: {result.weighted_seconds * 1e3:.4g} ms")



class Stubborn(TaskScheduler):
    """Always picks the same index, finished or not."""

    def __init__(self, index):
        self.index = index

    def next_task(self, tasks):
        return self.index


@pytest.mark.parametrize("index, says", [(7, "returned 7: the index of a task"), ("0", "returned '0'"),
                                         (0, "picked task 0 (tiny(N=8)), which is finished (exhausted)")])
def test_a_scheduler_that_picks_no_task_or_a_finished_one_is_named(tiny_add, index, says):
    with pytest.raises(ValueError) as raised:
        tune_tasks([tiny_add, SOFTMAX], trials=64, builder=HashBuilder(), runner=HashRunner(), strategy="replay",
                   scheduler=Stubborn(index), batch_size=8)
    assert str(raised.value).startswith("Stubborn.next_task") and says in str(raised.value)
