"""The task scheduler: ten built-in workloads tuned as one weighted set, gradient against
round-robin.

    python bench/tasks.py [--trials 320] [--seeds 0 1 2] [--batch 8] [--png tasks.png]

The weights are what a small CNN with attention would give them (``WEIGHTS``). Each scheduler
tunes the set with ``--trials`` in all, in rounds of ``--batch``, once per seed, into a fresh
database. The weighted
latency (sum of weight x best seconds) at 80, 160 and 320 trials is then taken from timings in
turns, in this process, of every best program at each checkpoint (each run's own timings were
taken at different moments of a shared machine's load), and the geometric mean over seeds is
compared. It also prints each run's wall time and the share of it outside building and
measuring, and saves the weighted latency by trial (the runs' own timings) as a PNG.
Goal: gradient ahead of round-robin at 160 and 320 trials; under 15% outside build and measure.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import metasched
from metasched import Database, TuneTask, tune_tasks, workloads
from metasched.measure import LocalBuilder, LocalRunner
from metasched.tune import host_target

sys.path.insert(0, str(Path(__file__).parent))
from common import environment  # noqa: E402

WEIGHTS = {"conv2d_bias_relu": 12, "dense_bias_relu": 4, "depthwise_conv2d": 3, "matmul_relu": 2,
           "batch_matmul": 2, "softmax": 2, "layernorm": 2, "matmul": 1, "transpose_add": 1, "reduce_cols": 1}
SCHEDULERS = ("gradient", "round-robin")
ROUNDS = 3  # rounds of timing in turns of the checkpoints' best programs


def tasks() -> list[TuneTask]:
    return [TuneTask(workloads.get(name), weight) for name, weight in WEIGHTS.items()]


def run(scheduler: str, seed: int, trials: int, batch: int, folder: Path) -> dict:
    """One tuning run into a fresh database: its result and its records in the order measured."""
    path = folder / f"{scheduler}-{seed}.db"
    result = tune_tasks(tasks(), trials=trials, database=path, seed=seed, scheduler=scheduler, batch_size=batch)
    with Database(path, read_only=True) as db:
        target = host_target()
        records = sorted((r for t in tasks() for r in db.records(t.workload, target)), key=lambda r: r.id)
    return {"result": result, "records": records}


def best_at(records: list, count: int) -> dict:
    """Per workload key, the fastest correct record among the first ``count`` measured."""
    best: dict = {}
    for record in records[:count]:
        if record.ok and (record.workload_key not in best or record.median < best[record.workload_key].median):
            best[record.workload_key] = record
    return best


def retime(chosen: dict) -> dict:
    """``chosen`` maps (workload key, program) to (workload, trace): each program's median
    seconds over ``ROUNDS`` rounds of timing them all in turns (in one order, then the other)."""
    items = list(chosen.items())
    times: dict = {key: [] for key, _ in items}
    with LocalBuilder() as builder, LocalRunner() as runner:
        artifacts = {}
        for key, (wl, trace) in items:
            (built,) = builder.build(wl, [trace])
            if not built.ok:
                raise RuntimeError(f"{wl.label}: a recorded best no longer builds: {built.error}")
            artifacts[key] = built.artifact
        for round_ in range(ROUNDS):
            for key, (wl, _) in (items if round_ % 2 == 0 else items[::-1]):
                (measured,) = runner.run(wl, [artifacts[key]])
                if not measured.ok:
                    raise RuntimeError(f"{wl.label}: a recorded best failed when timed again: {measured.error}")
                times[key].append(measured.median)
    return {key: statistics.median(t) for key, t in times.items()}


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def plot(runs: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for (scheduler, seed), outcome in sorted(runs.items()):
        rounds = [r for r in outcome["result"].rounds if r.weighted_seconds is not None]
        ax.plot([r.trials for r in rounds], [r.weighted_seconds * 1e3 for r in rounds],
                color="tab:blue" if scheduler == "gradient" else "tab:orange", alpha=0.8,
                label=scheduler if seed == min(s for sch, s in runs if sch == scheduler) else None)
    ax.set_xlabel("trials, all tasks")
    ax.set_ylabel("weighted latency, ms (the run's own timings)")
    ax.set_yscale("log")
    ax.set_title("ten built-in workloads, weighted: gradient vs round-robin")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=320)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--png", type=Path, default=Path("tasks.png"))
    parser.add_argument("--batch", type=int, default=8, help="trials per round (8: the warm-up, a round per "
                        "task, ends at 80 trials)")
    args = parser.parse_args()
    checkpoints = [c for c in (80, 160, 320) if c <= args.trials] or [args.trials]
    print(f"# bench/tasks.py: {len(WEIGHTS)} workloads, {args.trials} trials, seeds {args.seeds}; {environment()}")
    runs = {}
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            for scheduler in SCHEDULERS:  # in turns, so that a slow spell of the machine hits both
                started = time.perf_counter()
                runs[scheduler, seed] = run(scheduler, seed, args.trials, args.batch, Path(folder))
                result = runs[scheduler, seed]["result"]
                print(f"{scheduler:>11} seed {seed}: {time.perf_counter() - started:.0f} s, "
                      f"{100 * result.overhead_share:.1f}% outside build and measure, trials per task "
                      f"{[len(t.history) for t in result.tasks]}", flush=True)
    by_key = {t.workload.key: t for t in tasks()}
    chosen = {}
    for outcome in runs.values():
        outcome["best"] = {c: best_at(outcome["records"], c) for c in checkpoints}
        for best in outcome["best"].values():
            for key, record in best.items():
                chosen[key, record.program] = (by_key[key].workload, record.trace)
    print(f"timing the {len(chosen)} best programs of the checkpoints in turns, {ROUNDS} rounds", flush=True)
    seconds = retime(chosen)

    def weighted(outcome, checkpoint):
        best = outcome["best"][checkpoint]
        if len(best) < len(by_key):
            return None
        return sum(by_key[key].weight * seconds[key, r.program] for key, r in best.items())

    print()
    print("| scheduler | seed | " + " | ".join(f"ms @ {c}" for c in checkpoints) + " | wall s | outside build+measure |")
    print("|---|---|" + "---|" * len(checkpoints) + "---|---|")
    sums = {}
    for (scheduler, seed), outcome in sorted(runs.items()):
        values = [weighted(outcome, c) for c in checkpoints]
        sums[scheduler, seed] = values
        result = outcome["result"]
        cells = " | ".join("-" if v is None else f"{v * 1e3:.3f}" for v in values)
        print(f"| {scheduler} | {seed} | {cells} | {result.wall_seconds:.0f} | {100 * result.overhead_share:.1f}% |")
    means = {}
    for scheduler in SCHEDULERS:
        means[scheduler] = []
        for i in range(len(checkpoints)):
            values = [sums[scheduler, s][i] for s in args.seeds]
            means[scheduler].append(None if None in values else geomean(values))
    for scheduler in SCHEDULERS:
        cells = " | ".join("-" if v is None else f"{v * 1e3:.3f}" for v in means[scheduler])
        walls = [runs[scheduler, s]["result"].wall_seconds for s in args.seeds]
        shares = [runs[scheduler, s]["result"].overhead_share for s in args.seeds]
        print(f"| {scheduler}, geometric mean | - | {cells} | {statistics.mean(walls):.0f} | "
              f"{100 * statistics.mean(shares):.1f}% |")
    print()
    for i, c in enumerate(checkpoints):
        g, r = means["gradient"][i], means["round-robin"][i]
        if g is not None and r is not None:
            goal = " (goal: below 1)" if c in (160, 320) else ""
            print(f"gradient / round-robin at {c} trials: {g / r:.3f}{goal}")
    plot(runs, args.png)
    print(f"saved {args.png}; metasched {metasched.__version__}")


if __name__ == "__main__":
    main()
