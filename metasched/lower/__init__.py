"""Scheduled state -> loop program: loop nests, attached stages with inferred regions, guards,
reduction initialisation, buffers. Knows nothing of search or of code generation."""
from metasched.lower.lower import loop_values, lower, stage_axes, with_kinds
from metasched.lower.state import Attach, Fuse, IterVar, Relation, ScheduleState, Split, StageState

__all__ = ["Attach", "Fuse", "IterVar", "Relation", "ScheduleState", "Split", "StageState", "loop_values",
           "lower", "stage_axes", "with_kinds"]
