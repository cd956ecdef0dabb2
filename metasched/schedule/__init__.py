"""Schedules: the primitives that transform a workload's loops."""
from metasched.errors import ScheduleError
from metasched.schedule.schedule import BlockRV, LoopRV, RV, Schedule

__all__ = ["BlockRV", "LoopRV", "RV", "Schedule", "ScheduleError"]
