"""The load guard's canary on a quiet machine: does a kernel timed alone after the runner has
been idle read as its own time?

    python bench/canary.py [--workload bert_softmax] [--trials 32] [--idle 0 0.3 2] [--times 40] [--runs 1]

Tunes ``--workload`` (a built-in, or a file of ``bench/ops/``) with ``--trials`` trials into a
new database, then times its best kernel in a runner worker ``--times`` times per idle gap:
``--runs`` timings in one runner call after each gap, the last one kept, as the guard would
read its canary (``LoadGuard.busy``: slower than 1.5 times its recorded time is busy). Prints,
per gap, the median and the share of timings the guard would call busy. bench/README.md ("The
load guard and small parallel kernels") has what it showed.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import environment
from metasched import Database, load, tune, workloads
from metasched.measure import LocalBuilder, LocalRunner
from metasched.tune import host_target

OPS = Path(__file__).parent / "ops"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="bert_softmax")
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--idle", type=float, nargs="+", default=[0.0, 0.3, 2.0])
    parser.add_argument("--times", type=int, default=40)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    file = OPS / f"{args.workload}.tensor"
    wl = load(file) if file.exists() else workloads.get(args.workload)
    print(f"# bench/canary.py: {args.workload}; {environment()}")
    with tempfile.TemporaryDirectory() as folder:
        db_path = f"{folder}/canary.db"
        tune(wl, trials=args.trials, database=db_path, warm_start=False)
        with Database(db_path, read_only=True) as db:
            best = db.best(wl, host_target())
        with LocalBuilder() as builder, LocalRunner() as runner:
            (built,) = builder.build(wl, [best.trace])
            for idle in args.idle:
                seconds = []
                for _ in range(args.times):
                    time.sleep(idle)
                    seconds.append(runner.run(wl, [built.artifact] * args.runs)[-1].median)
                busy = sum(s > 1.5 * best.median for s in seconds) / len(seconds)
                print(f"idle {idle:g} s: recorded {best.median * 1e3:.3f} ms, now median "
                      f"{statistics.median(seconds) * 1e3:.3f} ms (min {min(seconds) * 1e3:.3f}, max "
                      f"{max(seconds) * 1e3:.3f}); busy to the guard {busy:.0%}")


if __name__ == "__main__":
    main()
