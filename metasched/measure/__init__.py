"""Measuring candidates safely: a ``Builder`` builds batches of traces and a ``Runner`` times
batches of kernels (small abstract classes: a cluster's are subclasses). ``LocalBuilder``
compiles traces in parallel worker processes, ``LocalRunner`` checks and times the kernels one
at a time in another; a crash, a hang, an overrun time limit or a wrong answer is a failed
result with its reason, never the end of a run. Workers are spawned (libgomp hangs after
``fork``). ``LoadGuard`` tells when the machine was busy while timing, and ``Confirmation``
times a run's fastest programs again in turns at its end. A runner says which ``Machine`` it
times on (the target of the records), and the builder builds for it: ``metasched.measure.dask``
(the ``dask`` extra) has a builder and a runner on a Dask cluster."""
from metasched.measure.builder import BuildResult, Builder, LocalBuilder, Packed
from metasched.measure.confirm import Confirmation
from metasched.measure.guard import LoadGuard
from metasched.measure.machine import Machine
from metasched.measure.runner import LocalRunner, RunResult, Runner, TimingConfig

__all__ = ["BuildResult", "Builder", "Confirmation", "LoadGuard", "LocalBuilder", "LocalRunner", "Machine",
           "Packed", "RunResult", "Runner", "TimingConfig"]
