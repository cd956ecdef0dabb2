"""What building and measuring on a Dask cluster costs against doing it here, measured in one run.

    python bench/cluster.py [--candidates 32] [--rounds 3]

Two ``LocalCluster``s on this machine, of one and of two worker processes (one thread each,
the last worker holding the runner resource), against the local builder (a process per core)
and the local runner:

(a), (b) build throughput: candidates per second of a batch of ``--candidates`` distinct
    programs of matmul_relu 128 (random samples of the default space), built by
    ``DaskBuilder`` on 1 and on 2 worker processes against ``LocalBuilder``; the three take
    turns, ``--rounds`` batches each, and the median counts
(c) a batch of 16 builds of a tiny kernel, ``DaskBuilder`` on 2 worker processes against
    ``LocalBuilder``: what Dask adds to a build is the difference over 16 (a tuning run builds
    in batches)
(d) one measurement: ``DaskRunner.run`` of one tiny kernel (timed once, so that what is
    measured is the way there and back) against ``LocalRunner.run``, one after another as a
    tuning run times its programs
(e) what Dask adds to a trial: (c)'s difference over 16 and (d)'s; the goal is under 20 ms

(c) and (d) are timed in turns (``paired_times``). The cluster's worker processes are started
(and their build and timing processes spawned) before anything is timed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import distributed

from common import HEADER, report, row
from metasched import parse, workloads
from metasched.errors import ScheduleError
from metasched.measure import LocalBuilder, LocalRunner, TimingConfig
from metasched.measure.dask import RUNNER_RESOURCE, DaskBuilder, DaskRunner
from metasched.schedule import Schedule
from metasched.space import cpu_default
from metasched.timing import paired_times

TINY = """\
workload tiny(N = 8) {
  input A: float32[N]
  input B: float32[N]
  output C[i] = A[i] + B[i]
}
"""
GOAL_SECONDS = 0.020  # what Dask may add to a trial (build + measurement)
BATCH = 16  # builds of (c)
ONCE = TimingConfig(repeat=1, number=1)  # a measurement that is mostly the way there and back


def samples(count: int) -> tuple:
    """``count`` distinct random programs of matmul_relu 128."""
    wl = workloads.get("matmul_relu", M=128, N=128, K=128)
    traces, seen = [], set()
    seed = 0
    while len(traces) < count:
        try:
            sch = cpu_default().sample(wl, seed)
        except ScheduleError:
            seed += 1
            continue
        if str(sch.trace) not in seen:
            seen.add(str(sch.trace))
            traces.append(sch.trace)
        seed += 1
    return wl, traces


def cluster(workers: int) -> distributed.Client:
    """A client of a LocalCluster of ``workers`` processes of one thread, the last holding the
    runner resource."""
    local = distributed.LocalCluster(n_workers=workers - 1, threads_per_worker=1, dashboard_address=None)
    local.new_spec["options"]["resources"] = {RUNNER_RESOURCE: 1}
    local.scale(workers)
    client = distributed.Client(local, set_as_default=False)
    client.wait_for_workers(workers, timeout=120)
    return client


def throughput(builders: dict, wl, traces, rounds: int) -> dict:
    """Candidates per second of each builder on ``traces``, the builders taking turns: the
    median over ``rounds``. Every build must succeed."""
    rates: dict[str, list[float]] = {name: [] for name in builders}
    for round_ in range(rounds):
        order = list(builders.items()) if round_ % 2 == 0 else list(builders.items())[::-1]
        for name, builder in order:
            started = time.perf_counter()
            built = builder.build(wl, traces)
            seconds = time.perf_counter() - started
            failed = [b.error for b in built if not b.ok]
            assert not failed, failed
            rates[name].append(len(traces) / seconds)
    return {name: statistics.median(r) for name, r in rates.items()}


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="Port 8787 is already in use")  # the second cluster's
    one, two = cluster(1), cluster(2)
    local = LocalBuilder()
    builders = {"local": local, "dask-1": DaskBuilder(one), "dask-2": DaskBuilder(two)}
    for builder in builders.values():
        builder.start()
    wl, traces = samples(args.candidates)
    throughput(builders, wl, traces[:4], 1)  # every build process has imported what it needs
    rates = throughput(builders, wl, traces, args.rounds)

    tiny = parse(TINY)
    batch = [Schedule(tiny).trace] * BATCH
    there, here = builders["dask-2"], local
    build_dask, build_local, _ = paired_times(lambda: there.build(tiny, batch), lambda: here.build(tiny, batch),
                                              rounds=7, repeat=3, min_repeat_seconds=0.2)
    artifact = here.build(tiny, batch[:1])[0].artifact
    runner, local_runner = DaskRunner(two, runner=LocalRunner(timing=ONCE)), LocalRunner(timing=ONCE)
    runner.start()
    local_runner.start()
    run_dask, run_local, _ = paired_times(lambda: runner.run(tiny, [artifact]),
                                          lambda: local_runner.run(tiny, [artifact]),
                                          rounds=7, repeat=3, min_repeat_seconds=0.2)
    added = (build_dask - build_local) / BATCH + (run_dask - run_local)

    lines = list(HEADER)
    for workers in (1, 2):
        rate = rates[f"dask-{workers}"]
        lines.append(row(f"({'ab'[workers - 1]}) build throughput, {workers} worker process{'es' * (workers > 1)} "
                         f"vs the local builder ({len(local.workers.workers)} processes), candidates/s",
                         f"{rate:.1f}", f"{rates['local']:.1f}", rate / rates["local"], "(report)", True))
    lines.append(row(f"(c) a batch of {BATCH} builds, 2 worker processes vs the local builder", ms(build_dask),
                     ms(build_local), build_dask / build_local, "(report)", True))
    lines.append(row("(d) one measurement, timed once", ms(run_dask), ms(run_local), run_dask / run_local,
                     "(report)", True))
    lines.append(row(f"(e) what Dask adds to a trial: (c)'s difference / {BATCH} + (d)'s", ms(added), "-",
                     added / GOAL_SECONDS, f"< {ms(GOAL_SECONDS)}", added < GOAL_SECONDS))
    report(lines, "(a), (b) candidates per second on Dask / the local builder's, matmul_relu 128, "
                  f"{args.candidates} candidates, median of {args.rounds} rounds in turns; (c), (d) Dask's "
                  "latency / the local one's; (e) the time Dask adds / the goal")
    for thing in (runner, local_runner, local):
        thing.close()
    for client in (one, two):
        client.cluster.close()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
