"""Spells of load on this machine: how often a kernel runs slow, and for how long.

    python bench/spells.py [--seconds 480] [--workload matmul_relu] [--factor 1.5]

Times the hand-written schedule of a workload (a parallel kernel, as tuning measures them)
back to back for ``--seconds``: each sample is the median of 3 repeats of 5 runs. A spell is a
run of samples slower than ``--factor`` times the lower quartile of all samples (a single quiet
sample inside one does not end it). Printed: the samples' median and lower quartile, the share
of slow samples, the spells' count and duration quantiles, and each spell longer than a second.

What it is for: ``tune``'s load guard (``metasched.measure.guard.LoadGuard``) waits ``waits``
seconds, then up to ``patience`` in all, for a slow canary before it takes the load as lasting
and lets the programs timed in it count; spells longer than that wait leave programs recorded
at their slow times, which the cost model then learns from. On a 2-core znver4 VM (2026-11-29,
480 s): 22,306 samples, 1.8% slow, 38 spells, of which 36 shorter than 0.4 s and two of 9.7 s
and 2.2 s at 1.9x; the guard waited 3.5 s then (15.5 s, then 120 s, since;
``bench/load_spell.py`` makes a spell on purpose). A second probe, 900 s the next hour: 42,939
samples, 1.0% slow, 122 spells, the longest 1.0 s: the long spells come and go by the hour.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from common import environment
from metasched import build, handwritten, workloads
from metasched.arrays import aligned_empty
from metasched.codegen import host_vector_bits


def samples(workload: str, seconds: float) -> np.ndarray:
    """(time since the start, seconds per run) of each sample."""
    wl = workloads.get(workload)
    schedule = handwritten.for_workload(wl, host_vector_bits())
    if schedule is None:
        raise SystemExit(f"{workload} has no hand-written schedule; choose one that has")
    kernel = build(schedule)
    arrays = [*wl.random_inputs(seed=0), *(aligned_empty(t.shape, t.dtype) for t in wl.outputs)]
    kernel.time(*arrays)  # warm
    found, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        found.append((time.perf_counter() - start, kernel.time(*arrays, number=5, repeat=3)))
    return np.array(found)


def spells(log: np.ndarray, factor: float) -> tuple[float, list[tuple[float, float, float]]]:
    """The lower quartile of the samples' times, and each spell: (start, duration, its median
    time over that quartile)."""
    t, s = log[:, 0], log[:, 1]
    base = float(np.quantile(s, 0.25))
    slow = s > factor * base
    step = float(np.median(np.diff(t))) if len(t) > 1 else 0.0
    found, k = [], 0
    while k < len(s):
        if not slow[k]:
            k += 1
            continue
        j = k
        while j + 1 < len(s) and (slow[j + 1] or (j + 2 < len(s) and slow[j + 2])):
            j += 1
        found.append((float(t[k]), float(t[j] - t[k]) + step, float(np.median(s[k:j + 1]) / base)))
        k = j + 1
    return base, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=480.0)
    parser.add_argument("--workload", default="matmul_relu")
    parser.add_argument("--factor", type=float, default=1.5)
    args = parser.parse_args()
    print(environment())
    log = samples(args.workload, args.seconds)
    base, found = spells(log, args.factor)
    slow = log[:, 1] > args.factor * base
    print(f"{len(log)} samples over {log[-1, 0]:.0f} s: median {np.median(log[:, 1]) * 1e3:.3f} ms, lower quartile "
          f"{base * 1e3:.3f} ms; {slow.mean():.1%} slower than {args.factor}x that")
    durations = np.array([d for _, d, _ in found])
    print(f"{len(found)} spells", end="")
    if len(found):
        q = np.quantile(durations, [0.5, 0.9, 1.0])
        print(f"; durations: median {q[0]:.2f} s, 90% {q[1]:.2f} s, longest {q[2]:.1f} s")
        for start, duration, ratio in found:
            if duration > 1.0:
                print(f"  at {start:.0f} s: {duration:.1f} s at {ratio:.2f}x")
    else:
        print()


if __name__ == "__main__":
    main()
