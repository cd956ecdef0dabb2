"""Scheduled state -> loop program: loop nests, guards for overshooting splits, reduction
initialisation, buffers. Knows nothing of search or of code generation."""
from metasched.lower.lower import lower, lower_stage
from metasched.lower.state import Fuse, IterVar, Relation, ScheduleState, Split, StageState

__all__ = ["Fuse", "IterVar", "Relation", "ScheduleState", "Split", "StageState", "lower", "lower_stage"]
