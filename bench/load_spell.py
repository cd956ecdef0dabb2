"""A spell of load made on purpose during a tuning run: are the programs timed in it recorded
at their own time?

    python bench/load_spell.py [--workload conv2d_bias_relu] [--trials 64] [--start 8] [--length 12] [--duty 1]

Tunes ``--workload`` (evolutionary search, ``--seed``) into a new database while another
process spins on one core from ``--start`` to ``--start + --length`` seconds after the run
begins (``--duty`` of every 4 ms, all of it by default): a parallel kernel then waits for
that core at every barrier, as in the spells of a shared machine (``bench/spells.py``). Then
every record is built again and timed ``--rounds`` times in turns on the quiet machine, and its
recorded median is compared with the median of those: printed, the run's wall time,
``TuneResult.retimed`` and ``lasting_loads``, and each record 1.3 times its time or more,
marked when it was recorded in the spell. What it checks is ``tune``'s load guard
(``metasched.measure.guard.LoadGuard``). Run it in two checkouts (``PYTHONPATH=<checkout>``) to
compare them, never two at once. ``--length 40`` makes a load that outlasts the guard's first
15.5 s of waits (``LoadGuard``'s docstring has what it gave).

On the 2-core znver4 VM (2026-11-29, conv2d_bias_relu, 64 trials, 12 s of spin from 8 s), the
guard that looked at most every 2 s and waited 3.5 s: 31 of 64 records, two whole batches, at
1.5-6.4 times their time, all in the spell; wall 25.6 s. The guard that holds a batch's
programs until it looks at its end and waits up to 15.5 s: none in the spell (10 records at 1.3
times or more, none in it, the slowest at 5.5 times), wall 39.3 s. matmul_relu the same way:
20 records at 1.3 times or more, 16 of them in the spell, wall 26.5 s; then 1, not in it,
wall 36.0 s.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time

from common import environment
from metasched import Database, tune, workloads
from metasched.measure import LocalBuilder, LocalRunner
from metasched.tune import host_target


def spin(start: float, until: float, duty: float) -> None:
    """Spin from ``start`` to ``until`` (times of ``time.time``), ``duty`` of every 4 ms."""
    time.sleep(max(0.0, start - time.time()))
    while time.time() < until:
        began = time.time()
        while time.time() < began + 0.004 * duty:
            pass
        if duty < 1:
            time.sleep(0.004 * (1 - duty))


def retimed(wl, path: str, rounds: int) -> list[tuple[object, float]]:
    """(record, its recorded median over the median of ``rounds`` timings in turns now)."""
    with Database(path) as db:
        records = [r for r in db.records(wl, host_target()) if r.ok]
    with LocalBuilder() as builder, LocalRunner() as runner:
        built = [(r, b.artifact) for r, b in zip(records, builder.build(wl, [r.trace for r in records])) if b.ok]
        times: dict[int, list[float]] = {r.id: [] for r, _ in built}
        for k in range(rounds):
            turn = built if k % 2 == 0 else built[::-1]
            for (record, _), run in zip(turn, runner.run(wl, [a for _, a in turn])):
                if run.ok:
                    times[record.id].append(run.median)
    return [(r, r.median / statistics.median(times[r.id])) for r, _ in built if times[r.id]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="conv2d_bias_relu")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--start", type=float, default=8.0, help="seconds into the run the spell begins")
    parser.add_argument("--length", type=float, default=12.0, help="seconds the spell lasts")
    parser.add_argument("--duty", type=float, default=1.0, help="share of the time the spinner spins (0-1]")
    parser.add_argument("--rounds", type=int, default=6, help="timings in turns of each record afterwards")
    args = parser.parse_args()
    print(environment())
    wl = workloads.get(args.workload)
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "spell.db")
        began = time.time()
        spell = (began + args.start, began + args.start + args.length)
        spinner = multiprocessing.Process(target=spin, args=(*spell, args.duty), daemon=True)
        spinner.start()
        result = tune(wl, trials=args.trials, database=path, seed=args.seed)
        spinner.join()
        print(f"{args.workload}, {args.trials} trials, spinning from {args.start:.0f} to "
              f"{args.start + args.length:.0f} s: wall {result.wall_seconds:.1f} s, retimed {result.retimed}, "
              f"loads taken as lasting {[round(s, 2) for s in result.lasting_loads]}, "
              f"best {result.best_seconds * 1e3:.3f} ms", flush=True)
        found = retimed(wl, path, args.rounds)
    slow = [(r, ratio) for r, ratio in found if ratio >= 1.3]
    inside = [(r, ratio) for r, ratio in slow if spell[0] <= r.created <= spell[1] + 1.0]
    print(f"{len(found)} records timed again {args.rounds} times: {len(slow)} recorded at 1.3 times their time "
          f"or more, {len(inside)} of them in the spell")
    for record, ratio in slow:
        mark = " (in the spell)" if (record, ratio) in inside else ""
        print(f"  record {record.id}, recorded {record.created - began:.1f} s into the run: {ratio:.2f}{mark}")


if __name__ == "__main__":
    main()
