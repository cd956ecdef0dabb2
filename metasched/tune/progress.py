"""The progress of a tuning run, on stderr: for one task a bar (tqdm: trials done, the best
speed in GFLOP/s and against numpy, the failed trials); for many, the task table."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional, TextIO

from tqdm import tqdm

from metasched.lang.workload import Workload
from metasched.timing import format_gflops, median_seconds
from metasched.workloads.baselines import numpy_baseline

if TYPE_CHECKING:
    from metasched.tune.result import TasksResult, Trial, TuneResult


# The bar compares the best kernel's time (its machine code alone, as the runner times it) with
# numpy's as Python calls it only where numpy takes this long: below, what a call costs (a
# microsecond or two) is a share of numpy's time that the kernel's leaves out, and the ratio
# would flatter the kernel. The report after tuning times both as called.
NUMPY_RATIO_MIN_SECONDS = 100e-6


def numpy_seconds(workload: Workload) -> Optional[float]:
    """Median seconds of the workload's numpy baseline on random inputs (None: it has none)."""
    baseline = numpy_baseline(workload)
    if baseline is None:
        return None
    inputs = workload.random_inputs(seed=0)
    return median_seconds(lambda: baseline(*inputs), repeat=5, min_repeat_seconds=0.02)


class ProgressBar:
    """Called with each trial; timed numpy once at the start (before any worker runs), so that
    the bar can say how the best compares."""

    def __init__(self, workload: Workload, trials: int, earlier: int, result: TuneResult) -> None:
        self.workload = workload
        self.numpy = numpy_seconds(workload)
        self.failed = 0
        self.bar = tqdm(total=trials, initial=earlier, desc=f"tuning {workload.name}",
                        unit="trial", dynamic_ncols=True)
        self._show(result.best_seconds)

    def __call__(self, trial: Trial, best: Optional[float]) -> None:
        self.failed += not trial.ok
        self._show(best)
        self.bar.update(1)

    def sync(self, recorded: int, best: Optional[float]) -> None:
        """Show what the database holds: ``recorded`` trials and the ``best`` median seconds,
        another run's tuning into it included."""
        self.bar.n = recorded
        self._show(best)
        self.bar.refresh()

    def _show(self, best: Optional[float]) -> None:
        if best is None:
            text = "no correct program yet"
        else:
            text = f"best {format_gflops(self.workload.flops, best)}"
            if self.numpy is not None and self.numpy >= NUMPY_RATIO_MIN_SECONDS:
                text += f" ({self.numpy / best:.2f}x numpy)"
        self.bar.set_postfix_str(f"{text}, {self.failed} failed", refresh=False)

    def note(self, text: str) -> None:
        """A line printed above the bar."""
        self.bar.write(text, file=self.bar.fp)

    def close(self) -> None:
        self.bar.close()


class TaskTable:
    """The task table of a run of many tasks, in the style of TVM's task scheduler: per task its
    weight, GFLOP, trials, best time, speed and weighted time, and the total weighted latency;
    drawn again after every round (in place on a terminal), on stderr."""

    def __init__(self, stream: Optional[TextIO] = None) -> None:
        self.stream = stream or sys.stderr
        self._drawn = 0  # lines of the last table, to draw over on a terminal

    def __call__(self, result: TasksResult) -> None:
        lines = task_table(result)
        if self._drawn and self.stream.isatty():
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self._drawn = len(lines)

    def note(self, text: str) -> None:
        """A line printed below the table; the next table is drawn after it."""
        self.stream.write(text + "\n")
        self._drawn = 0


def task_table(result: TasksResult) -> list[str]:
    """The lines of ``TaskTable``'s table for ``result``."""
    head = ("ID", "task", "weight", "GFLOP", "trials", "best ms", "GFLOP/s", "weighted ms")
    rows = []
    for i, (task, weight) in enumerate(zip(result.tasks, result.weights)):
        best = task.best_seconds
        trials = task.earlier_trials + len(task.history)
        rows.append((str(i), task.workload.name, f"{weight:g}", f"{task.workload.flops / 1e9:.4g}", str(trials),
                     "-" if best is None else f"{best * 1e3:.4g}",
                     "-" if best is None else f"{task.workload.flops / best / 1e9:.1f}",
                     "-" if best is None else f"{weight * best * 1e3:.4g}"))
    widths = [max(len(h), *(len(r[c]) for r in rows)) for c, h in enumerate(head)]

    def line(cells):
        return " | ".join(cell.ljust(w) if c == 1 else cell.rjust(w) for c, (cell, w) in enumerate(zip(cells, widths)))

    total = result.weighted_seconds
    rule = "-" * len(line(head))
    return [rule, line(head), rule, *map(line, rows), rule,
            f"total weighted latency: {'-' if total is None else f'{total * 1e3:.4g} ms'}, "
            f"{sum(len(t.history) for t in result.tasks)} trials this run"]
