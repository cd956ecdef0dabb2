"""Search spaces: schedule rules and postprocessors composed by a space generator."""
from metasched.space.base import Postproc, PostOrderApply, ScheduleRule, SpaceGenerator, describe, host_cores

__all__ = ["PostOrderApply", "Postproc", "ScheduleRule", "SpaceGenerator", "describe", "host_cores"]
