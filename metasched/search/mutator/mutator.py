"""``Mutator``, the extension point of evolutionary search's changes, and ``apply_mutant``, the
program a mutant stands for (MetaSchedule's ``src/meta_schedule/mutator``).

A mutator picks one sampling instruction of a trace and returns the trace with that decision
changed (``Trace.with_decision``), or None when it finds nothing to change; it never edits an
instruction. Whether the mutant is still a program is for replay to say: ``apply_mutant``
replays the mutant's sampling part and runs the space's postprocessors again, and a
``ScheduleError`` drops it.
"""
from __future__ import annotations

import abc
from typing import Optional

import numpy as np

from metasched.errors import ScheduleError
from metasched.lang.workload import Workload
from metasched.schedule import Schedule, Trace
from metasched.search.mutator.trace_reading import sampling_part
from metasched.space import SpaceGenerator

__all__ = ["Mutator", "apply_mutant"]


class Mutator(abc.ABC):
    """Changes one decision of a trace. Subclasses are frozen dataclasses (their fields are
    their arguments) and implement ``apply``."""

    @abc.abstractmethod
    def apply(self, trace: Trace, rng: np.random.Generator) -> Optional[Trace]:
        """``trace`` with the decision of one sampling instruction changed to another value,
        drawn from ``rng`` alone (one trace and one generator state give one mutant), or None
        when this mutator finds no decision to change. Never changes an instruction."""


def apply_mutant(workload: Workload, trace: Trace, space: SpaceGenerator) -> Optional[Schedule]:
    """The program a mutant of a sampled trace stands for: its sampling part replayed on
    ``workload`` (what its postprocessors did before no longer holds) and post-processed again
    by ``space``, as ``space.sample`` does; None when replay or a postprocessor raises
    ``ScheduleError`` (a dropped mutant)."""
    try:
        return space.postprocess(sampling_part(workload, trace))
    except ScheduleError:
        return None
