"""What one candidate of evolutionary search costs, stage by stage: the budget behind the
scoring rate that ``bench/tune.py`` prints (issue 9 asks for 1,000 candidates a second).

    python bench/candidate_cost.py [--workloads matmul_relu,conv2d_bias_relu] [--candidates 240]
    python bench/candidate_cost.py --instructions [--workloads ...]

Per workload, the candidates a search makes (fresh samples of the default space, and mutants
of them by ``default_mutators``), made as the tuner's worker processes make them
(``scoring._samples``, ``scoring._mutants``), after one set of others, which fills the
memoised analyses as a running search has them. Every set is new candidates: made again, a
set costs a tenth less on conv2d_bias_relu (its analyses all known), which a search never
sees. The cycle collector runs as in a worker process (``measure.worker``: its thresholds,
and what a set leaves collected and frozen before the next); with Python's default
thresholds, collections walking the growing heap put a fresh conv2d_bias_relu sample at 5.0
ms where a worker makes it in about 3. Printed per candidate, the median of three sets in this
process: each stage of a mutant (replay of its sampling part, the postprocessors with their
lowering, the feature row, its result pickled there and back) and a fresh sample whole. Two
cores at most give ``2000 / total`` candidates a second, less the search's own work in the
parent process.

``--instructions``: the instructions such candidates take, counted by valgrind's callgrind:
the script runs itself under valgrind twice at once, making a second set of candidates after
a first (as for the timings) and not, and prints the difference per candidate (two minutes a
workload).
Unlike a time, the count hardly moves with the machine's load (two counts of one checkout,
120 conv2d_bias_relu candidates, Xeon: 18.03 and 18.04 million; counted on the first set made
again, as before, 16.2 million), so it can tell a change of a percent or two from noise: run
it in two checkouts (``PYTHONPATH=<checkout>``) and compare. It counts the interpreter's
instructions: a proxy for time, not a time.
"""
from __future__ import annotations

import argparse
import gc
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

from common import environment
from metasched import workloads
from metasched.errors import ScheduleError
from metasched.measure.worker import GC_THRESHOLDS
from metasched.schedule import replay
from metasched.search.cost_model import program_features
from metasched.search.mutator import default_mutators
from metasched.search.scoring import Scorer, _mutants, _samples, _Shared
from metasched.space import cpu_default

STAGES = ("replay", "postprocessors", "features", "pickled")


def candidates(wl, count: int, sets: int) -> tuple[_Shared, list[tuple[list, list[int]]]]:
    """The work of ``sets`` sets of ``count`` candidates each, as a worker receives it: the
    run's workload and space (``_Shared``, pickled and unpickled as a worker gets it) and per
    set a third of them as sample seeds and the rest as mutants of other samples, packed for
    the wire. No two sets share a sample seed, a parent or a mutant's random stream."""
    shared = _Shared(wl, cpu_default())
    worker = pickle.loads(pickle.dumps(shared))
    return worker, [_candidate_set(wl, shared, count, k) for k in range(sets)]


def _candidate_set(wl, shared: _Shared, count: int, k: int) -> tuple[list, list[int]]:
    seeds = list(range(k * count, k * count + count // 3))
    rng = np.random.default_rng(k)
    mutators = default_mutators(wl)
    first = 10**6 + k * count
    parents = [c for c in Scorer(wl, shared.space).samples(range(first, first + count // 3)) if c is not None]
    traces = []
    while parents and len(traces) < count - len(seeds):
        trace = mutators.mutate(parents[len(traces) % len(parents)].trace, rng)
        if trace is not None:
            traces.append(shared.wire.pack(trace, sampling=True))
    return [pickle.loads(pickle.dumps(t)) for t in traces], seeds


def stage_times(worker: _Shared, traces: list, seeds: list[int]) -> dict[str, float]:
    """Seconds per mutant of each stage, and per fresh sample (``"sample"``), in one pass,
    after collecting and freezing what the passes before left (as a worker does between
    tasks)."""
    gc.collect()
    gc.freeze()
    spent = dict.fromkeys(STAGES, 0.0)
    made = 0
    for packed in traces:
        started = time.perf_counter()
        try:
            sch = replay(worker.workload, worker.wire.unpack(packed), remove_postproc=True)
            replayed = time.perf_counter()
            sch = worker.space.postprocess(sch)
        except ScheduleError:
            continue
        done = [started, replayed, time.perf_counter()]
        row = program_features(sch)
        done.append(time.perf_counter())
        pickle.loads(pickle.dumps((worker.wire.pack(sch.trace), row)))
        done.append(time.perf_counter())
        for stage, begin, end in zip(STAGES, done, done[1:]):
            spent[stage] += end - begin
        made += 1
    started = time.perf_counter()
    _samples(worker, seeds)
    sample = (time.perf_counter() - started) / len(seeds)
    return {**{stage: seconds / made for stage, seconds in spent.items()}, "sample": sample}


def instructions(workload: str, count: int) -> float:
    """Instructions per candidate under callgrind (see the module's docstring); the two runs
    go side by side, one per core (a count does not depend on the other's load)."""
    runs = [subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                              __file__, "--make", workload, "--candidates", str(count)] + (["--counted"] if counted else []),
                             env={**os.environ, "PYTHONHASHSEED": "0"}, stderr=subprocess.PIPE, text=True)
            for counted in (True, False)]
    totals = []
    for run in runs:
        _, err = run.communicate()
        if run.returncode:
            raise RuntimeError(f"the run under valgrind failed:\n{err}")
        totals.append(int(next(line for line in err.splitlines() if "Collected :" in line).split()[-1]))
    return (totals[0] - totals[1]) / count


def make(workload: str, count: int, counted: bool) -> None:
    """What ``--instructions`` counts: two sets of candidates prepared, the first made (which
    fills the memoised analyses, as for the timings), then, if ``counted``, the second, their
    results pickled there and back. The run without is subtracted."""
    worker, sets = candidates(workloads.get(workload), count, 2)
    for traces, seeds in sets[:2 if counted else 1]:
        pickle.loads(pickle.dumps((_mutants(worker, traces), _samples(worker, seeds))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="matmul_relu,conv2d_bias_relu")
    parser.add_argument("--candidates", type=int, default=240)
    parser.add_argument("--instructions", action="store_true", help="count instructions under valgrind")
    parser.add_argument("--make", help=argparse.SUPPRESS)  # the run valgrind counts
    parser.add_argument("--counted", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make:
        make(args.make, args.candidates, args.counted)
        return
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind (Debian's package valgrind)")
    print(environment())
    gc.set_threshold(*GC_THRESHOLDS)
    for name in args.workloads.split(","):
        if args.instructions:
            print(f"{name}: {instructions(name, args.candidates) / 1e6:.2f} million instructions per candidate "
                  f"({args.candidates}: a third fresh samples, the rest mutants)", flush=True)
            continue
        worker, sets = candidates(workloads.get(name), args.candidates, 4)
        stage_times(worker, *sets[0])  # fills the memoised analyses
        passes = [stage_times(worker, traces, seeds) for traces, seeds in sets[1:]]
        median = {stage: statistics.median(p[stage] for p in passes) for stage in passes[0]}
        total = sum(median[stage] for stage in STAGES)
        print(f"\n{name}, ms per candidate (median of 3 sets; {len(sets[1][0])} mutants, {len(sets[1][1])} samples each)")
        print("| stage | ms | share of a mutant |\n|---|---|---|")
        for stage in STAGES:
            print(f"| {stage} | {median[stage] * 1e3:.3f} | {median[stage] / total:.0%} |")
        print(f"| a mutant, all | {total * 1e3:.3f} | 100% |\n| a fresh sample, all | {median['sample'] * 1e3:.3f} | - |")
        print(f"at most {2 / total:.0f} mutants a second on two cores, before the search's own work", flush=True)


if __name__ == "__main__":
    main()
