"""The progress bar of a tuning run (tqdm, on stderr): trials done, the best speed in GFLOP/s
and against numpy, the failed trials."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from tqdm import tqdm

from metasched.lang.workload import Workload
from metasched.timing import format_gflops, median_seconds
from metasched.workloads.baselines import numpy_baseline

if TYPE_CHECKING:
    from metasched.tune.tune import Trial, TuneResult


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
