"""Tuning on a Dask cluster (``metasched.measure.dask``) on a ``LocalCluster`` of two worker
processes, one of them holding the runner resource: a run through the cluster proposes and,
under a fake timer, records what a local run does; a segfault, a hang or a compile past its
time limit costs one failed result and the workers live on; a worker killed mid-batch is
replaced and its batch done again, once; a scheduler that goes away ends the run with a clear
error and keeps every record; bad input is one line. docs/cluster.md is written from these."""
import contextlib
import dataclasses
import functools
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from metasched import ClusterError, Database, tune, workloads
from metasched.cli import main
from metasched.codegen import CodegenOptions, compile_artifact
from metasched.database import Target, program_key
from metasched.measure import LocalBuilder, LocalRunner, RunResult, Runner
from metasched.measure.machine import Machine
from metasched.schedule import Schedule
from metasched.search import EvolutionaryConfig, EvolutionarySearch, ReplaySearch, SearchContext
from metasched.space import cpu_default
from metasched.tune import machine_target

from cluster_faults import Broken, FakeTimer, misbehave, nap, tag_faults

distributed = pytest.importorskip("distributed")
import dask  # noqa: E402  (comes with distributed)

from metasched.measure.dask import RUNNER_RESOURCE, DaskBuilder, DaskRunner, connect  # noqa: E402

SIZES = dict(M=16, N=16, K=16)
WL = workloads.get("matmul_relu", **SIZES)
FAST = CodegenOptions(opt_level=0)  # quick to compile, for runs whose times are fake
SMALL = EvolutionaryConfig(population_size=24, init_min_unmeasured=8, genetic_num_iters=2)
ELSEWHERE = Machine(("x86_64-unknown-linux-gnu", "znver9", "+avx2,+fma"), 64, "faraway")


@pytest.fixture(scope="module")
def cluster():
    """A client of a LocalCluster of two worker processes of one thread, the second holding
    the runner resource. The scheduler runs a task whose worker died once more, then gives up
    on it (``allowed-failures``, as docs/cluster.md sets it)."""
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        local = distributed.LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None)
    local.new_spec["options"]["resources"] = {RUNNER_RESOURCE: 1}  # the worker added next
    local.scale(2)
    client = distributed.Client(local, set_as_default=False)
    client.wait_for_workers(2, timeout=120)
    yield client
    client.close()
    local.close()


def workers(client) -> dict[str, dict]:
    return client.scheduler_info(n_workers=-1)["workers"]


def runner_worker(client) -> str:
    (address,) = [a for a, w in workers(client).items() if w["resources"]]
    return address


def pids(client) -> set[int]:
    return set(client.run(os.getpid).values())


def proposals(seed: int, count: int) -> list[str]:
    """The program keys replay search proposes first for ``seed``, as tune() draws them."""
    search = ReplaySearch()
    search.start(SearchContext(WL, cpu_default(), np.random.default_rng(seed)))
    return [program_key(s.trace) for s in search.propose(count)]


def records(result) -> list[tuple]:
    return [(program_key(t.trace), t.seconds, t.error) for t in result.history]


def test_a_run_on_the_cluster_proposes_and_records_what_a_local_run_does(cluster):
    # Evolutionary search: its proposals depend on the times measured, the same under the fake timer.
    with LocalBuilder(options=FAST) as builder:
        here = tune(WL, trials=12, seed=4, strategy=EvolutionarySearch(SMALL), builder=builder,
                    runner=FakeTimer(), batch_size=6)
    runner = DaskRunner(cluster, runner=FakeTimer())
    there = tune(WL, trials=12, seed=4, strategy=EvolutionarySearch(SMALL), builder=DaskBuilder(cluster, options=FAST),
                 runner=runner, batch_size=6)
    runner.close()
    assert records(there) == records(here) and len(there.history) == 12
    assert there.confirmation.times == here.confirmation.times  # the fastest, timed again on the runner
    assert there.target == here.target == machine_target(runner.machine())


class Elsewhere(Runner):
    """Times on a machine of another CPU (so it says), by the length of a trace."""

    def machine(self):
        return ELSEWHERE

    def run(self, workload, artifacts, best=None):
        return [RunResult((1e-3 * len(trace),), None) for trace in artifacts]


def test_the_records_target_is_the_runners_machine_never_this_one(fake_builder):
    result = tune(WL, trials=4, seed=0, strategy="replay", builder=fake_builder, runner=Elsewhere(), confirm=0)
    assert result.target == Target("znver9", "+avx2,+fma", 64)
    assert {r.target for r in [result.best_record]} == {result.target}


def test_kernels_are_built_for_the_runners_cpu_or_not_at_all(cluster):
    with pytest.raises(ClusterError, match=r"no worker of the Dask cluster .* has the runner's CPU \(faraway: znver9"):
        DaskBuilder(cluster).build_for(ELSEWHERE)
    with pytest.raises(ClusterError, match=r"LocalBuilder compiles here .* but the runner times on faraway"):
        LocalBuilder(workers=1).build_for(ELSEWHERE)
    # A kernel's thread count is the runner machine's cores, whatever the builder has.
    builder = DaskBuilder(cluster)
    builder.build_for(Machine.here())
    (built,) = builder.build(WL, [Schedule(WL).trace])
    assert built.ok and built.artifact.num_threads == Machine.here().cores


def test_a_segfault_a_hang_and_a_slow_compile_each_cost_one_trial_and_the_workers_live_on(cluster):
    keys = proposals(seed=3, count=6)
    faults = {keys[1]: "segfault", keys[2]: "hang", keys[4]: "slow_compile"}
    builder = DaskBuilder(cluster, timeout=2.0, options=FAST, hook=functools.partial(tag_faults, faults=faults))
    runner = DaskRunner(cluster, runner=LocalRunner(timeout=2.0, hook=misbehave))
    before = pids(cluster)
    result = tune(WL, trials=6, seed=3, strategy="replay", builder=builder, runner=runner, confirm=0)
    runner.close()
    assert [program_key(t.trace) for t in result.history] == keys
    reasons = {program_key(t.trace): t.error for t in result.history if not t.ok}
    assert set(reasons) == set(faults), reasons  # an unexpected failure says why
    assert reasons[keys[1]] == "run: the worker crashed with SIGSEGV"
    assert reasons[keys[2]] == "run: the run took longer than its time limit of 2 s"
    assert reasons[keys[4]] == "build: the build took longer than its time limit of 2 s"
    assert pids(cluster) == before


def tagged(fault: str = ""):
    """The unscheduled kernel of ``WL``, its name carrying ``fault`` to ``misbehave``."""
    func = Schedule(WL).lower()
    if fault:
        func = dataclasses.replace(func, name=f"{func.name}__{fault}")
    return compile_artifact(func)


def kill_when_started(client, attempts, count: int) -> None:
    """Kill the runner worker's process when ``attempts`` has ``count`` lines (the slow kernel
    started ``count`` times)."""
    deadline = time.monotonic() + 120
    while not (attempts.exists() and len(attempts.read_text().splitlines()) >= count):
        assert time.monotonic() < deadline, "the slow kernel never started"
        time.sleep(0.05)
    (pid,) = client.run(os.getpid, workers=[runner_worker(client)]).values()
    os.kill(pid, signal.SIGKILL)


def test_a_runner_worker_killed_mid_batch_is_replaced_and_the_batch_timed_again_once(cluster, tmp_path):
    attempts = tmp_path / "attempts"
    batch = [tagged(), tagged("slow"), tagged()]
    runner = DaskRunner(cluster, runner=LocalRunner(hook=functools.partial(misbehave, attempts=str(attempts))))
    for kills in (1, 2):
        attempts.unlink(missing_ok=True)
        results = []
        timing = threading.Thread(target=lambda: results.extend(runner.run(WL, batch)))
        timing.start()
        for count in range(1, kills + 1):
            kill_when_started(cluster, attempts, count)
        timing.join(timeout=180)
        if kills == 1:  # replaced by its nanny, which timed the batch again
            assert len(attempts.read_text().splitlines()) == 2
            assert [r.ok for r in results] == [True] * 3, results
        else:  # died twice: the batch fails, with the reason
            assert all(r.error.startswith("run: the Dask worker doing it died, 2 time(s)") for r in results), results
    runner.close()
    cluster.wait_for_workers(2, timeout=120)


@pytest.mark.slow  # 10 s; a killed runner is the fast suite's
def test_a_builder_killed_mid_batch_is_replaced_and_its_builds_done_again(cluster, tmp_path):
    started = tmp_path / "started"
    traces = [cpu_default().sample(WL, seed).trace for seed in range(4)]
    builder = DaskBuilder(cluster, hook=functools.partial(nap, started=str(started)))
    built = []
    building = threading.Thread(target=lambda: built.extend(builder.build(WL, traces)))
    building.start()
    deadline = time.monotonic() + 120
    while not (started.exists() and len(started.read_text().splitlines()) >= 2):  # both workers build
        assert time.monotonic() < deadline, "the builds never started"
        time.sleep(0.05)
    (other,) = [a for a, w in workers(cluster).items() if not w["resources"]]
    (pid,) = cluster.run(os.getpid, workers=[other]).values()
    os.kill(pid, signal.SIGKILL)
    building.join(timeout=180)
    assert [b.ok for b in built] == [True] * 4, built
    assert len(started.read_text().splitlines()) == 5  # the build it was doing, once more
    cluster.wait_for_workers(2, timeout=120)


def test_the_cli_tunes_on_the_cluster_for_the_runners_cpu(cluster, tmp_path, capsys, monkeypatch):
    # DaskRunner's default runner, as the command makes it: quick, and no waits of the load guard.
    monkeypatch.setattr("metasched.measure.dask.LocalRunner", FakeTimer)
    db = tmp_path / "tuning.db"
    sizes = [f"-p{name}={value}" for name, value in SIZES.items()]
    assert main(["tune", "matmul_relu", *sizes, "--trials", "4", "--strategy", "replay", "--db", str(db),
                 "--cluster", cluster.scheduler.address]) == 0
    assert "timed on the cluster's runner" in capsys.readouterr().out
    with Database(db) as opened:
        assert {r.target for r in opened.records(WL)} == {machine_target(DaskRunner(cluster).machine())}


def test_bad_clusters_are_one_line(cluster, monkeypatch, capsys, tmp_path):
    with pytest.raises(ClusterError, match=r"^no worker of the Dask cluster at tcp://.* holds the resource gpu=1 to "
                                           r"time kernels: start one on each machine that measures, `dask worker"):
        DaskRunner(cluster, resources={"gpu": 1}).machine()
    with pytest.raises(ClusterError, match=r"^a worker of the Dask cluster at tcp://.* failed timing: RuntimeError: "
                                           r"a bug \(does it run the same metasched"):
        DaskRunner(cluster, runner=Broken()).run(WL, [tagged()])
    monkeypatch.setattr("metasched.measure.dask.CONNECT_SECONDS", 0.5)
    tune_on = ["tune", "matmul_relu", "--db", str(tmp_path / "tuning.db"), "--cluster"]
    assert main([*tune_on, "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("metasched: cannot reach the Dask scheduler at tcp://127.0.0.1:1 (") and err.count("\n") == 1
    monkeypatch.setitem(sys.modules, "metasched.measure.dask", None)  # not installed
    assert main([*tune_on, "tcp://127.0.0.1:1"]) == 2
    assert capsys.readouterr().err == "metasched: --cluster needs Dask's distributed: pip install 'metasched[dask]'\n"
    assert not (tmp_path / "tuning.db").exists()  # nothing made before the cluster answers


@pytest.fixture
def dask_command():
    """Starts ``dask ARGS...`` (as docs/cluster.md does on each machine), each in a process
    group of its own, all killed at the end."""
    started = []

    def start(*args, **env):
        here = pathlib.Path(__file__).parent
        # The workers import metasched, and cluster_faults for the fake timer.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parents[1])]), **env}
        process = subprocess.Popen([sys.executable, "-m", "dask", *map(str, args)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        started.append(process)
        return process

    yield start
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_scheduler_that_goes_away_ends_the_run_in_one_line_and_keeps_every_record(dask_command, tmp_path,
                                                                                      capsys):
    file, db = tmp_path / "scheduler.json", tmp_path / "tuning.db"
    scheduler = dask_command("scheduler", "--scheduler-file", file, "--port", "0", "--no-dashboard",
                             DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="1")
    deadline = time.monotonic() + 120
    while not file.exists():
        assert time.monotonic() < deadline and scheduler.poll() is None, "the scheduler did not start"
        time.sleep(0.1)
    time.sleep(0.2)  # written whole
    address = json.loads(file.read_text())["address"]
    # No worker holds the runner resource yet.
    assert main(["tune", "matmul_relu", "--trials", "4", "--db", str(db), "--cluster", address]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no worker of the Dask cluster at {address} holds the resource " \
                                    f"metasched-runner=1" in err
    assert not db.exists()
    dask_command("worker", address, "--nthreads", "1", "--resources", "metasched-runner=1", "--no-dashboard")
    client = connect(address, timeout=2.0)  # how long it tries to reconnect, too
    client.wait_for_workers(1, timeout=120)
    seen = []

    def progress(trial, best):
        seen.append(program_key(trial.trace))
        if len(seen) == 5:
            os.killpg(scheduler.pid, signal.SIGKILL)

    with pytest.raises(ClusterError, match=r"^the Dask scheduler at .* went away while (timing|building) .*; what "
                                           r"was measured before is in the database$"):
        tune(WL, trials=40, database=db, seed=1, strategy="replay", builder=DaskBuilder(client, options=FAST),
             runner=DaskRunner(client, runner=FakeTimer()), progress=progress, batch_size=8, confirm=0)
    client.close()
    with Database(db) as opened:
        kept = opened.records(WL)
    assert [r.program for r in kept] == seen and len(seen) >= 5
    assert all(r.ok or r.error == "run: boom" for r in kept)  # timed by the fake timer, on the worker
    # The next run, here, goes on where it stopped.
    more = tune(WL, trials=len(seen) + 2, database=db, seed=1, strategy="replay", options=FAST, runner=FakeTimer(),
                confirm=0)
    assert more.earlier_trials == len(seen) and len(more.history) == 2
    assert seen + [program_key(t.trace) for t in more.history] == proposals(1, len(seen) + 2)


def test_a_tasks_constants_are_packed_on_the_cluster_as_here(cluster):
    from conftest import panel_copy
    from metasched.lang import parse
    from metasched.measure import Packed
    workload = parse("""workload dense() {
    input X: float32[5, 9]
    input W: float32[9, 16]
    T[i, j] += X[i, k] * W[k, j] where i in 0..5, j in 0..16, k in 0..9
    output Y[i, j] = T[i, j] where i in 0..5, j in 0..16
}""")
    trace = panel_copy(workload).trace
    runner = DaskRunner(cluster)
    builder = DaskBuilder(cluster, options=FAST)
    builder.build_for(runner.machine())
    (built,) = builder.build(workload, [trace], constants=["W"])
    assert isinstance(built.artifact, Packed)
    (run,) = runner.run(workload, [built.artifact])  # the packs made on the runner, the outputs checked
    runner.close()
    assert run.ok, run.error
