"""What the cluster tests ship to Dask workers, who unpickle it by module and name (so it lives
in a module of its own, not in a test file): a fake timer, and hooks that make chosen kernels
misbehave for real on a worker (a segfault, a hang, a slow compile, a slow run that counts
its attempts)."""
import ctypes
import dataclasses
import hashlib
import pathlib
import time

from metasched.database import program_key
from metasched.measure import RunResult, Runner

class FakeTimer(Runner):
    """Times a kernel by a hash of its loop program, which the same trace lowers to on any
    machine (one in 11 fails): the same record wherever it was built and run."""

    def run(self, workload, artifacts, best=None):
        out = []
        for artifact in artifacts:
            h = int(hashlib.sha256(str(artifact.func).encode()).hexdigest()[:8], 16)
            out.append(RunResult((1e-3 * (1 + h % 1000 / 100),) * 3, None) if h % 11 else RunResult((), "run: boom"))
        return out


class Broken(Runner):
    """A runner with a bug: what a worker that cannot time kernels at all looks like."""

    def run(self, workload, artifacts, best=None):
        raise RuntimeError("a bug")


def tag_faults(workload, trace, func, *, faults):
    """A build hook: ``faults`` maps program keys to one of ``FAULTS``; the kernel's name
    carries it to ``misbehave`` on the runner ("slow_compile" sleeps here)."""
    fault = faults.get(program_key(trace))
    if fault == "slow_compile":
        time.sleep(600)
    return func if fault is None else dataclasses.replace(func, name=f"{func.name}__{fault}")


def misbehave(artifact, *, attempts=None):
    """A run hook: the fault the kernel's name carries. "slow" appends a line to the file
    ``attempts`` and sleeps 2.5 s (time to kill the worker)."""
    name = artifact.func.name
    if name.endswith("__segfault"):
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if name.endswith("__hang"):
        time.sleep(600)
    if name.endswith("__slow"):
        with pathlib.Path(attempts).open("a") as log:
            log.write("started\n")
        time.sleep(2.5)


def nap(workload, trace, func, *, started):
    """A build hook: appends a line to the file ``started`` and sleeps 2 s (time to kill the
    worker)."""
    with pathlib.Path(started).open("a") as log:
        log.write("started\n")
    time.sleep(2)
    return func
