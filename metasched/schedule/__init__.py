"""Schedules: the primitives that transform a workload's loops, recorded as traces."""
from metasched.errors import ScheduleError
from metasched.schedule import analysis
from metasched.schedule.instruction import BlockRV, ExprRV, Instruction, LoopRV, RV
from metasched.schedule.replay import repaired_decisions, replay
from metasched.schedule.schedule import Schedule
from metasched.schedule.trace import Trace

__all__ = ["BlockRV", "ExprRV", "Instruction", "LoopRV", "RV", "Schedule", "ScheduleError", "Trace", "analysis",
           "repaired_decisions", "replay"]
