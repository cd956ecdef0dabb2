"""Tuning: ``tune_tasks`` spends one trial budget over many workloads, a task scheduler
(``GradientBased``, ``RoundRobin`` or your own ``TaskScheduler``) choosing which gets each
round; ``tune`` tunes one. Progress bars, the task table and a plot of the best speed by trial."""
from metasched.tune.result import TasksResult, Trial, TuneResult
from metasched.tune.scheduler import SCHEDULERS, GradientBased, RoundRobin, TaskScheduler
from metasched.tune.target import host_target, machine_target
from metasched.tune.task import RoundRecord, TaskState, TuneTask
from metasched.tune.tune import tune, tune_tasks
from metasched.tune.warm_start import WARM_RECORDS, WarmStart

__all__ = ["GradientBased", "RoundRecord", "RoundRobin", "SCHEDULERS", "TaskScheduler", "TaskState", "TasksResult",
           "Trial", "TuneResult", "TuneTask", "WARM_RECORDS", "WarmStart", "host_target",
           "machine_target", "tune", "tune_tasks"]
