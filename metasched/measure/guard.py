"""``LoadGuard``: whether the machine was busy while programs were timed, by a reference
kernel timed again; the tuning loop holds its timings back until the guard has seen the machine
quiet after them."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass
class LoadGuard:
    """Keeps a burst of load on the machine from making good programs look slow.

    When another process takes a core, a parallel kernel waits for it at every barrier: one
    run can take several times its time, and spells of seconds at twice the time come and go
    on a shared machine. The search would then drop a good program's neighbourhood and the
    cost model learn from false labels.

    So the programs timed since the machine was last seen quiet are held back by the tuning
    loop until a reference kernel (the *canary*: the last new best of the run, as an opaque
    object the loop knows how to time) is timed again: after a program that is not a new
    best, at most every ``interval`` seconds, and at the end of every batch. Slower than
    ``factor`` times its own time means busy: the guard waits for the canary to recover
    (``waits`` between tries, then the last of them until ``patience`` seconds in all,
    telling ``note``), and the held programs are timed again. A load that outlasts that is
    lasting: the canary's slower time becomes its own, so that a loaded machine is not waited
    for at every program, and a canary faster than its own time later makes that its own
    again. ``bench/README.md`` ("Design history: the load guard") has the spells measured
    and what each constant bought.
    """

    factor: float = 1.5
    interval: float = 2.0
    waits: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    patience: float = 120.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.perf_counter
    note: Optional[Callable[[str], None]] = None  # tells the user what the guard waits for
    _canary: Optional[tuple[object, float]] = field(default=None, init=False, repr=False)  # (artifact, median s)
    _quiet_at: float = field(default=-float("inf"), init=False, repr=False)  # when the canary ran at its time
    # Per load taken as lasting, how many times its own time (as the guard knew it: after an
    # earlier lasting load, that load's) the canary still took after the waits; the programs
    # timed after it ran at that loaded speed (``TuneResult.lasting_loads``).
    lasting: list[float] = field(default_factory=list, init=False)

    def new_best(self, artifact: object, seconds: float) -> None:
        self._canary = (artifact, seconds)

    def due(self) -> bool:
        """Whether it is time to look (``busy``) after a program: there is a canary, and it
        ran quiet ``interval`` seconds ago or more. (At the end of a batch the loop looks
        anyway.)"""
        return self._canary is not None and self.clock() - self._quiet_at >= self.interval

    def busy(self, time_canary: Callable[[object], Optional[float]]) -> bool:
        """Whether the machine is busy, by the canary timed now (then it has waited for it to
        calm down: ``waits``, then the last of them again until ``patience``);
        ``time_canary(artifact)`` gives the canary's median seconds (None when it failed).
        Without a canary the machine counts as quiet."""
        if self._canary is None:
            return False
        artifact, reference = self._canary
        seconds, waited, tries = time_canary(artifact), 0.0, 0
        while seconds is None or seconds > self.factor * reference:
            if tries < len(self.waits):
                wait = self.waits[tries]
            elif self.waits and self.waits[-1] > 0 and waited < self.patience:
                if tries == len(self.waits):
                    slow = "fails" if seconds is None else f"runs at {seconds / reference:.1f}x its time"
                    self._tell(f"the machine is busy: the best kernel {slow}; waiting up to {self.patience:g} s "
                               "in all for it to calm down (Ctrl-C stops the run and keeps its records)")
                wait = min(self.waits[-1], self.patience - waited)
            else:
                break
            self.sleep(wait)
            waited, tries = waited + wait, tries + 1
            seconds = time_canary(artifact)
        else:  # quiet
            self._quiet_at = self.clock()
            if seconds < reference:  # quieter than it was: a lasting load has gone
                self._canary = (artifact, seconds)
            return tries > 0
        # Still busy: the load is lasting, not a burst. Its times are the machine's times
        # for now; waiting at every program would only stall the run.
        if seconds is not None:
            self.lasting.append(seconds / reference)
            self._canary, self._quiet_at = (artifact, seconds), self.clock()
            self._tell(f"the machine stays busy: the best kernel runs at {seconds / reference:.1f}x its time "
                       f"after {waited:.4g} s of waiting; timing goes on at that speed")
        return True

    def _tell(self, text: str) -> None:
        if self.note is not None:
            self.note(text)
