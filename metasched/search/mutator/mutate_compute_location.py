"""``MutateComputeLocation``: another legal location for a block's ``sample_compute_location``
(MetaSchedule's ``mutate_compute_location.cc``)."""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from metasched.lang.workload import Workload
from metasched.schedule import Schedule, Trace, analysis, replay
from metasched.schedule.instruction import Instruction
from metasched.schedule.sampling import repair_compute_location
from metasched.search.mutator.mutator import Mutator

__all__ = ["MutateComputeLocation"]


@dataclasses.dataclass(frozen=True)
class MutateComputeLocation(Mutator):
    """MetaSchedule's ``mutate_compute_location.cc``: replays the trace's sampling part on
    ``workload``, asking at each decided ``sample_compute_location`` which locations are
    legal there (``analysis.compute_locations``); one such instruction with a legal location
    other than its own is chosen uniformly, and one of those locations, uniformly. Later
    instructions may still fail with it: replay says so."""

    workload: Workload

    def apply(self, trace: Trace, rng: np.random.Generator) -> Optional[Trace]:
        decisions = trace.decisions
        decided = [index for index in decisions if trace[index].kind == "SampleComputeLocation"]
        if not decided:
            return None
        choices: list[tuple[int, list[int]]] = []

        def ask(sch: Schedule, index: int, inst: Instruction, inputs: list, decision: object) -> object:
            if index in decisions and inst.kind == "SampleComputeLocation":
                candidates = analysis.compute_locations(sch, inputs[0])
                current = repair_compute_location(decision, candidates)  # the location replay takes
                others = [c for c in candidates if c != current]
                if others:
                    choices.append((index, others))
            return decision

        last = max(decided)
        prefix = Trace(trace.insts[:last + 1], {i: d for i, d in decisions.items() if i <= last})
        replay(self.workload, prefix, decision_provider=ask)
        if not choices:
            return None
        index, others = choices[rng.integers(len(choices))]
        return trace.with_decision(index, others[rng.integers(len(others))])
