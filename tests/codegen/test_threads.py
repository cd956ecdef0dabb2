"""One kernel called from several Python threads at once.

ctypes releases the GIL while machine code runs, so calls from two threads overlap for real;
a kernel's workspaces (intermediates it is passed) must then not be shared between them. The
kernel here is a parallel rfactor column sum: its partial sums live in a workspace, which two
overlapping calls sharing it would add into together. Its input is large enough (8 MB) that a
call outlasts the Python between two calls, so calls overlap often (with one shared set of
workspaces, every parametrization failed dozens of its 400 checks).
"""
import threading

import numpy as np
import pytest

import metasched
from metasched import handwritten, workloads
from metasched.codegen import CodegenOptions
from metasched.codegen.runtime import gomp_available, pthread_available

THREADS, CALLS = 4, 100
LAUNCHERS = [t for t, ok in (("gomp", gomp_available()), ("pthread", pthread_available())) if ok]
WORKLOAD = workloads.get("reduce_cols", M=2048, N=1024)


def build(**options) -> metasched.Kernel:
    kernel = metasched.build(handwritten.rfactor_column_sum(WORKLOAD), CodegenOptions(**options))
    assert kernel.func.workspaces, "the test needs a kernel with workspaces"
    return kernel


def wrong_calls_per_thread(kernel, extra=None) -> list[int]:
    """``THREADS`` threads, each on its own inputs, call ``kernel`` ``CALLS`` times at once
    (half through ``run`` into their own outputs, half through ``__call__``); how many calls
    of each gave outputs that differ from the reference. ``extra(kernel)``, when given, runs
    in one more thread at the same time."""
    start = threading.Barrier(THREADS + (extra is not None))
    wrong = [0] * THREADS
    failures = []

    def check(k: int) -> None:
        try:
            inputs = WORKLOAD.random_inputs(seed=k)
            want = WORKLOAD.reference(*inputs)
            outputs = [np.empty(t.shape, t.dtype) for t in WORKLOAD.outputs]
            start.wait()
            for _ in range(CALLS):
                if k % 2:
                    got = kernel(*inputs)
                else:
                    kernel.run(*inputs, *outputs)
                    got = outputs
                try:
                    metasched.assert_outputs_close(WORKLOAD, got, want)
                except AssertionError:
                    wrong[k] += 1
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)

    def run_extra() -> None:
        try:
            start.wait()
            extra(kernel)
        except BaseException as error:  # noqa: BLE001
            failures.append(error)

    threads = [threading.Thread(target=check, args=(k,)) for k in range(THREADS)]
    if extra is not None:
        threads.append(threading.Thread(target=run_extra))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    return wrong


@pytest.mark.parametrize("options", [dict(threading=t) for t in LAUNCHERS]
                         + [dict(threading="serial"), dict(threading=LAUNCHERS[0], poison=True)],
                         ids=lambda o: "-".join(str(v) for v in o.values()))
def test_concurrent_calls_each_get_correct_outputs(options):
    kernel = build(**options)
    assert wrong_calls_per_thread(kernel) == [0] * THREADS


def test_timing_in_one_thread_while_others_call():
    kernel = build()
    seconds = []

    def time_repeatedly(k) -> None:
        inputs = WORKLOAD.random_inputs(seed=99)
        for _ in range(5):
            seconds.append(k.time(*inputs, repeat=2, min_repeat_seconds=0.005))

    assert wrong_calls_per_thread(kernel, extra=time_repeatedly) == [0] * THREADS
    assert len(seconds) == 5 and all(0 < s < 0.05 for s in seconds)


def test_each_thread_keeps_its_own_workspaces():
    # Allocated on a thread's first call and reused by its later ones: no allocation per call.
    kernel = build()
    inputs = WORKLOAD.random_inputs(seed=0)
    kernel(*inputs)
    mine = kernel._workspaces()
    kernel(*inputs)
    assert kernel._workspaces() is mine
    theirs = []
    worker = threading.Thread(target=lambda: theirs.append(kernel._workspaces()))
    worker.start()
    worker.join()
    assert all(a.ctypes.data != b.ctypes.data for a, b in zip(mine, theirs[0]))
