"""The tuning curve: the best speed found by each trial, failed trials marked (matplotlib)."""
from __future__ import annotations

import os
from typing import Union

from metasched.tune.result import TuneResult


def plot_curve(result: TuneResult, path: Union[str, os.PathLike]) -> None:
    """Save the curve of ``result`` to ``path`` (PNG, SVG or PDF by its extension): GFLOP/s of
    each trial (dots), the best so far (a step line, starting from earlier runs' best) and
    failed trials (red crosses on the axis, with the count in the legend)."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install 'metasched[plot]'") from None
    matplotlib.use("Agg")  # a file, no screen
    import matplotlib.pyplot as plt

    flops = result.workload.flops / 1e9
    trials = result.history
    done = result.earlier_trials
    xs = [done + t.index + 1 for t in trials]
    speeds = [flops / t.seconds if t.ok else None for t in trials]
    earlier = result.earlier_best
    running, best = [], flops / earlier.median if earlier is not None else None
    for speed in speeds:
        if speed is not None and (best is None or speed > best):
            best = speed
        running.append(best)

    fig, ax = plt.subplots(figsize=(7, 4))
    ok = [(x, s) for x, s in zip(xs, speeds) if s is not None]
    if ok:
        ax.plot(*zip(*ok), ".", color="0.6", label="trial")
    ax.step(xs, [float("nan") if b is None else b for b in running], where="post", color="C0",
            label="best so far")
    failed = [x for x, s in zip(xs, speeds) if s is None]
    if failed:
        ax.plot(failed, [0] * len(failed), "x", color="C3", clip_on=False,
                label=f"failed ({len(failed)})")
    ax.set_xlabel("trial")
    ax.set_ylabel("GFLOP/s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{result.workload.name}: {len(trials)} trials on {result.target.cpu}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(os.fspath(path))
    plt.close(fig)
