"""Measurement benchmark: random search with the real builder, runner and database, every
figure measured in this run.

    python bench/measure.py [--trials 64]

For matmul_relu 512 and conv2d_bias_relu: ``tune(strategy="replay")`` with ``--trials`` trials
into a fresh database, then the best program re-measured in a fresh process (built from the
database, checked against the reference, then timed in turns with numpy, and with PyTorch when
installed, each side after a pause that lets the other's thread pool go quiet). Printed per workload: the
best time as the tuner recorded it and as re-measured, their difference, the ratio to numpy
(and PyTorch: baseline time / ours, above 1 we are faster), the tuning wall time, the mean wall
time per trial, the share of it spent outside building and measuring, and the failed trials.

Goals (issue 8): mean wall per trial <= 0.3 s (TVM MetaSchedule: 0.65 to 1.1 s on this
machine); share outside building and measuring < 30%; the re-measured best within 10% of the
tuner's time.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from threadpoolctl import threadpool_limits

from common import environment, torch, torch_baseline
from metasched import Database, assert_outputs_close, build, tune, workloads
from metasched.arrays import aligned_empty
from metasched.timing import paired_times
from metasched.tune import host_target
from metasched.workloads.baselines import numpy_baseline

CASES = [("matmul_relu", dict(M=512, N=512, K=512)), ("conv2d_bias_relu", {})]
SETTLE_SECONDS = 0.3


def remeasure(db_path: str, name: str, params: dict) -> dict:
    """In this (fresh) process: the database's best, built, checked and timed, then the
    baselines. Seconds: ours and each baseline in turns, 7 rounds of 3 repeats of at least
    50 ms, medians (a burst of load on this shared machine then hits both sides alike)."""
    wl = workloads.get(name, **params)
    with Database(db_path) as db:
        record = db.best(wl, host_target())
    kernel = build(wl, database=db_path)
    inputs = wl.random_inputs(seed=0)
    outputs = [aligned_empty(b.shape, b.dtype) for b in kernel.func.outputs]
    with threadpool_limits(limits=1):  # no BLAS threads left spinning while ours is timed
        assert_outputs_close(wl, kernel(*inputs, poison=True), wl.reference(*inputs))
    figures = {"tuned": record.median}
    ours = []
    for label, baseline in (("numpy", numpy_baseline(wl)), ("torch", torch_baseline(wl))):
        if baseline is not None:
            mine, figures[label], _ = paired_times(
                lambda: kernel.run(*inputs, *outputs), lambda: baseline(*inputs), rounds=7,
                repeat=3, min_repeat_seconds=0.05, settle_seconds=SETTLE_SECONDS)
            ours.append(mine)
    figures["ours"] = statistics.median(ours)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--remeasure", nargs=3, metavar=("DB", "NAME", "PARAMS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.remeasure:
        db_path, name, params = args.remeasure
        print(json.dumps(remeasure(db_path, name, json.loads(params))))
        return
    print(f"{environment()}" + (f", torch {torch.__version__}" if torch else ", PyTorch not installed"))
    print(f"random search ('replay'), {args.trials} trials per workload\n")
    print("| workload | best (tuner) | best (fresh process) | diff | vs numpy | vs PyTorch | tuning wall "
          "| wall per trial | outside build+measure | failed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name, params in CASES:
            wl = workloads.get(name, **params)
            db_path = str(Path(folder) / f"{name}.db")
            result = tune(wl, trials=args.trials, database=db_path, seed=0, strategy="replay")
            out = subprocess.run([sys.executable, __file__, "--remeasure", db_path, name, json.dumps(params)],
                                 check=True, capture_output=True, text=True).stdout
            fresh = json.loads(out)
            diff = fresh["ours"] / fresh["tuned"] - 1
            torch_ratio = f"{fresh['torch'] / fresh['ours']:.2f}" if "torch" in fresh else "-"
            print(f"| {name} | {fresh['tuned'] * 1e3:.3f} ms | {fresh['ours'] * 1e3:.3f} ms "
                  f"({wl.flops / fresh['ours'] / 1e9:.0f} GFLOP/s) | {diff:+.1%} "
                  f"| {fresh['numpy'] / fresh['ours']:.2f} | {torch_ratio} | {result.wall_seconds:.1f} s "
                  f"| {result.wall_seconds / len(result.history):.3f} s | {result.overhead_share:.1%} "
                  f"| {len(result.failures)} |", flush=True)
            for trial in result.failures:
                print(f"    failed trial {trial.index}: {trial.error}")


if __name__ == "__main__":
    main()
