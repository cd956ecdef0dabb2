"""How well one timing of a program ranks it against another program's timing: the ceiling
that measurement noise puts on the cost model's pairwise ranking accuracy (issue 9 asks for
0.85 on held-out records of matmul_relu and conv2d_bias_relu).

    python bench/repeatability.py [--workload matmul_relu] [--trials 96] [--passes 6]
    python bench/repeatability.py --db A.db [--db B.db ...] [--workload ...]

Tunes the workload (evolutionary search, seed 0, ``--trials``) or reads the records of existing
databases (those ``bench/tune.py --keep DIR --seeds 1`` writes, ``DIR/W.0.evo.db`` and
``DIR/W.0.rand.db``, are the records the bench's accuracy is computed on), builds every program
measured, and times them all again in ``--passes`` passes, each in a new random order, each
program as the runner times a trial (after a warm-up run, ``TimingConfig``'s repeats, their
median). Printed for all pairs of programs and for those whose mean times lie within 10% and
further apart:

* one pass against another: how often two timings of the same programs order a pair alike;
* one pass against the mean of the others: about what a model that knew every program's true
  time would score against a record, which is one timing;
* the tuning run's recorded time against a pass.

A pair whose times lie within the noise counts half in expectation whatever a model predicts,
so the share of such pairs among a run's records sets how high any model's accuracy can go. The
per-pass line shows the machine's phases: a pass whose median is far from the others' ran in a
slow spell (on this shared VM, seconds-long spells at twice the time).

Measured (znver4, 2 cores, 2026-11-28), 6 passes over the 256 records of one seed of
``bench/tune.py`` (where the model scored 0.816 on matmul_relu and 0.828 on conv2d_bias_relu):

| workload | pairs within 10% | pass vs pass (within 10%) | pass vs mean of others | recorded vs pass |
|---|---|---|---|---|
| matmul_relu | 11% | 0.920 (0.573) | 0.926 | 0.897 |
| conv2d_bias_relu | 9% | 0.942 (0.555) | 0.954 | 0.908 |

So the noise leaves room above the model: a record agrees with a quiet timing on about 0.90 of
the pairs. The model's misses were mostly pairs more than 10% apart (matmul_relu, out of
fold: it ordered 0.868 of them as recorded, where the records and a quiet timing agreed on
0.954). Of 96 programs of a single evolutionary run, 37% of the pairs lay within 10%, and a
pass agreed with the mean of the others on 0.846 of all pairs: the nearer a run's programs,
the lower the ceiling.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from pathlib import Path

import numpy as np

from common import build_checked, environment, replayed_records
from metasched import tune, workloads
from metasched.measure.runner import TimingConfig


def timed_passes(kernels: list, passes: int, seed: int = 0) -> np.ndarray:
    """Median seconds of each kernel (``(kernel, inputs, outputs)``) in each pass, as the
    runner times a trial: ``passes`` x ``len(kernels)``."""
    config = TimingConfig()
    rng = np.random.default_rng(seed)
    times = np.zeros((passes, len(kernels)))
    for p in range(passes):
        for k in rng.permutation(len(kernels)):
            kernel, inputs, outputs = kernels[k]
            times[p, k] = statistics.median(kernel.timings(*inputs, *outputs, repeat=config.repeat,
                                                           number=config.number,
                                                           min_repeat_seconds=config.min_repeat_seconds))
    return times


def agreement(a: np.ndarray, b: np.ndarray, pairs: np.ndarray) -> float:
    """The share of ``pairs`` (rows of two indices) that times ``a`` and ``b`` order alike."""
    first, second = pairs[:, 0], pairs[:, 1]
    return float(np.mean(np.sign(a[first] - a[second]) == np.sign(b[first] - b[second])))


def report(recorded: np.ndarray, times: np.ndarray) -> None:
    passes, n = times.shape
    mean = times.mean(axis=0)
    print(f"\n{n} programs, {passes} passes; each pass's median time relative to the median over passes: "
          + ", ".join(f"{m:.2f}" for m in np.median(times / np.median(times, axis=0), axis=1)))
    pairs = np.array(list(itertools.combinations(range(n), 2)))
    close = np.abs(mean[pairs[:, 0]] / mean[pairs[:, 1]] - 1) < 0.10
    print("| pairs | share | pass vs pass | pass vs mean of the others | recorded vs pass |\n|---|---|---|---|---|")
    for label, chosen in (("all", pairs), ("within 10%", pairs[close]), ("further apart", pairs[~close])):
        if not len(chosen):
            continue
        two = np.mean([agreement(times[i], times[j], chosen)
                       for i, j in itertools.combinations(range(passes), 2)])
        rest = np.mean([agreement(times[i], np.delete(times, i, axis=0).mean(axis=0), chosen)
                        for i in range(passes)])
        rec = np.mean([agreement(recorded, times[i], chosen) for i in range(passes)])
        print(f"| {label} | {len(chosen) / len(pairs):.0%} | {two:.3f} | {rest:.3f} | {rec:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="matmul_relu")
    parser.add_argument("--db", action="append", help="read this database's records instead of tuning "
                        "(more than one: all their records)")
    parser.add_argument("--trials", type=int, default=96)
    parser.add_argument("--passes", type=int, default=6)
    args = parser.parse_args()
    if args.passes < 2:
        parser.error("--passes must be at least 2")
    print(environment())
    wl = workloads.get(args.workload)
    with tempfile.TemporaryDirectory() as scratch:
        paths = args.db or [str(Path(scratch) / "tuning.db")]
        if not args.db:
            tune(wl, trials=args.trials, database=paths[0], seed=0)
        measured = [(sch, statistics.median(record.seconds)) for path in paths
                    for sch, record in replayed_records(wl, path) if record.ok]
    if len(measured) < 2:
        parser.error(f"{args.workload}: fewer than two measured programs to compare")
    kernels = [build_checked(sch) for sch, _ in measured]
    report(np.array([seconds for _, seconds in measured]), timed_passes(kernels, args.passes))


if __name__ == "__main__":
    main()
