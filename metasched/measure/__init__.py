"""Measuring candidates safely: a ``Builder`` compiles traces in parallel worker processes, a
``Runner`` checks and times the kernels one at a time in another; a crash, a hang, an overrun
time limit or a wrong answer is a failed result with its reason, never the end of a run.
Workers are spawned (libgomp hangs after ``fork``)."""
from metasched.measure.builder import BuildResult, Builder
from metasched.measure.runner import RunResult, Runner, TimingConfig

__all__ = ["BuildResult", "Builder", "RunResult", "Runner", "TimingConfig"]
