"""What the mutators read of a trace: its sampling part replayed, an instruction's attributes and
inputs by name, and the ``sample_categorical`` instructions whose values annotations take.

The mutators that need the schedule's state at a sampling instruction (the legal compute
locations, the loops a parallel limit cuts, whether an annotated block still exists) replay
the trace's sampling part on the workload they were made for, as MetaSchedule's do with the
module of their tuning context; free sampling instructions are then drawn with seed 0, as
``apply_mutant`` draws them. Only decided instructions are ever mutated.
"""
from __future__ import annotations

import functools
from typing import Optional, Sequence

from metasched.lang.workload import Workload
from metasched.schedule import RV, BlockRV, Schedule, Trace, replay
from metasched.schedule.instruction import KINDS, Instruction

__all__ = ["annotated_block", "annotation_samples", "attr", "input_value", "sampling_part"]


def sampling_part(workload: Workload, trace: Trace) -> Schedule:
    """``trace`` replayed on ``workload`` up to its postprocessors' instructions."""
    return replay(workload, trace, remove_postproc=True)


def annotation_samples(trace: Trace, keys: Sequence[str]) -> list[tuple[int, int]]:
    """``(sampling, annotate)`` instruction indices for each decided ``sample_categorical``
    of more than one candidate whose value an annotation with one of ``keys`` takes, in the
    trace's sampling part."""
    decisions = trace.decisions
    made: dict[RV, int] = {}  # the output of a sampling -> its index
    found = []
    for index, inst in enumerate(trace):
        if inst.kind == "EnterPostproc":
            break
        if inst.kind == "SampleCategorical" and index in decisions and len(attr(inst, "candidates")) > 1:
            made[inst.outputs[0]] = index
        elif inst.kind == "Annotate" and attr(inst, "key") in keys and input_value(inst, "value") in made:
            found.append((made[input_value(inst, "value")], index))
    return found


def annotated_block(sch: Schedule, annotate: Instruction) -> Optional[str]:
    """The name of the block an annotate instruction of ``sch``'s trace annotates (None for
    a loop)."""
    target = input_value(annotate, "block_or_loop")
    return sch.get(target) if isinstance(target, BlockRV) else None


@functools.lru_cache(maxsize=None)
def _positions(kind: str, role: str) -> dict[str, int]:
    """Parameter name -> its position among the attributes (``role="attr"``) or inputs
    (``"input"``) of an instruction of ``kind``."""
    names = [p.name for p in KINDS[kind].params if p.role == role]
    return {name: position for position, name in enumerate(names)}


def attr(inst: Instruction, name: str) -> object:
    """The attribute ``name`` of ``inst`` (as its kind's parameters name it)."""
    return inst.attrs[_positions(inst.kind, "attr")[name]]


def input_value(inst: Instruction, name: str) -> object:
    """The input ``name`` of ``inst`` (as its kind's parameters name it)."""
    return inst.inputs[_positions(inst.kind, "input")[name]]
