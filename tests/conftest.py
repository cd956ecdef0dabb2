"""Shared test settings: hypothesis profiles and small parameters for the built-in suite."""
import dataclasses
import os
import shutil
import subprocess
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, settings

from metasched.codegen import CodegenOptions
from metasched.lang import parse
from metasched.measure.builder import BuildResult

# "ci" keeps the suite within CI's budget; "thorough" is for long local runs:
#   METASCHED_HYPOTHESIS=thorough pytest -m slow
settings.register_profile("ci", max_examples=12, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("METASCHED_HYPOTHESIS", "ci"))

# Small sizes of every built-in workload, chosen so that no extent divides evenly by the usual
# powers of two: splits then overshoot and exercise the guards.
SMALL_PARAMS = {
    "batch_matmul": dict(BATCH=2, M=7, K=5, N=9),
    "conv2d_bias_relu": dict(N=1, C=3, H=6, W=5, F=4, R=3, S=3, PAD=1),
    "dense_bias_relu": dict(M=5, K=7, N=10),
    "depthwise_conv2d": dict(N=1, C=3, H=7, W=6, R=3, S=3, PAD=1),
    "layernorm": dict(M=5, N=11),
    "matmul": dict(M=9, N=10, K=7),
    "matmul_relu": dict(M=6, N=11, K=5),
    "reduce_cols": dict(M=13, N=10),
    "softmax": dict(M=5, N=13),
    "transpose_add": dict(M=9, N=14),
}


def panel_copy(workload):
    """A schedule of ``workload`` (its block ``T`` a product reading ``W[k, j]`` as input 1)
    that copies ``W`` into panels of 8 columns, one per outer ``j`` loop (``cache_read`` at
    that loop): a copy of a weight that ``lower.prepack`` takes out."""
    from metasched import Schedule
    sch = Schedule(workload)
    block = sch.get_block("T")
    i, j, k = sch.get_loops(block)
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(j0, i, k, j1)
    sch.compute_at(sch.cache_read(block, 1, "global"), j0)
    return sch


def kill_when_recorded(process, path, count: int, seconds: float = 120.0) -> int:
    """Wait until the database at ``path`` holds ``count`` records (or ``seconds`` pass, or
    ``process`` ends), then SIGKILL ``process``'s group (the tuner and its workers): the
    number of records seen."""
    import signal
    import time

    from metasched.database import Database
    deadline, seen = time.monotonic() + seconds, 0
    while seen < count and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
        if os.path.exists(path):
            with Database(path) as db:
                seen = len(db)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return seen


@pytest.fixture(scope="session")
def tiny_add():
    """An 8-element vector add: a kernel of well under a microsecond, and a space of a few
    programs."""
    return parse("""
workload tiny(N = 8) {
    input A: float32[N]
    input B: float32[N]
    output C[i] = A[i] + B[i]
}
""")

def with_imperfect_rows(space, bound: int = 8):
    """``space`` with its MultiLevelTiling tiling the rows of its blocks (every spatial loop but
    the last) by ``sample_imperfect_tile`` up to ``bound``; the default space keeps perfect tiles."""
    space.rules = [dataclasses.replace(r, max_imperfect_innermost=bound) if hasattr(r, "max_imperfect_innermost")
                   else r for r in space.rules]
    return space


class FakeBuilder:
    """Compiles nothing: each trace is its own artifact, for tests of the tuning loop whose
    fake runner times a program by its trace."""

    options = CodegenOptions()

    def start(self):
        pass

    def close(self):
        pass

    def build(self, workload, traces):
        return [BuildResult(artifact=trace, error=None, seconds=0.0) for trace in traces]


@pytest.fixture
def fake_builder():
    return FakeBuilder()


def record_samples(db, wl, count: int = 60, target=None) -> int:
    """Records in ``db`` (an open ``Database``) of the distinct programs among ``count`` samples
    of ``wl``, on ``target`` (default: this host), with made-up times: nothing is built or
    measured. How many there are."""
    from metasched.database import program_key
    from metasched.errors import ScheduleError
    from metasched.space import cpu_default
    from metasched.tune import host_target

    traces = {}
    for seed in range(count):
        try:
            sch = cpu_default().sample(wl, seed)
        except ScheduleError:
            continue
        traces.setdefault(program_key(sch.trace), sch.trace)
    for k, trace in enumerate(traces.values()):
        db.commit(wl, trace, target=target or host_target(), seconds=[1e-3 * (1 + k % 7)])
    return len(traces)


@contextmanager
def unchangeable(path):
    """``path`` flagged immutable (``chattr +i``): no one may change it, root included, and in
    a folder so flagged no file can be created. Skips where the flag cannot be set."""
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("needs chattr to make a path no one can write")
    done = subprocess.run([chattr, "+i", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i {path} failed: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)
