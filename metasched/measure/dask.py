"""Building and timing on a Dask cluster (``distributed``: ``pip install 'metasched[dask]'``).

``DaskBuilder(client)`` fans each batch of builds out over the workers whose CPU is the
runner's, one Dask task per trace. ``DaskRunner(client)`` times kernels on a worker that holds
the runner resource (one such worker per machine: a measurement runs alone there), a batch at
a time. On a worker, every build and every timing runs in a process of its own, spawned by
that worker (``WorkerPool``, ``LocalRunner``): a kernel that crashes, hangs or computes a wrong
answer is one failed result with its reason, as on one machine, and the Dask worker lives on.
A worker that dies (killed, out of memory) is replaced by its nanny and the scheduler runs its
task again, ``distributed.scheduler.allowed-failures`` times (docs/cluster.md sets it to 1);
then the trial fails. A scheduler that cannot be reached or goes away, or a cluster that cannot
time kernels at all, is a ``ClusterError`` saying what to start.

Map: connecting and waiting · what runs on a worker · ``DaskBuilder`` · ``DaskRunner``.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import threading
import uuid
from collections import Counter
from concurrent.futures import CancelledError
from typing import Any, Callable, Optional, Sequence

from distributed import Client, KilledWorker
from distributed.comm import get_address_host

from metasched.codegen import Artifact, CodegenOptions
from metasched.errors import ClusterError
from metasched.lang.workload import Workload
from metasched.measure.builder import BuildHook, BuildResult, Builder, build_in
from metasched.measure.machine import Machine
from metasched.measure.runner import LocalRunner, RunResult, Runner
from metasched.measure.worker import WorkerPool
from metasched.schedule import Trace

RUNNER_RESOURCE = "metasched-runner"  # what a worker that times kernels holds (`dask worker --resources`)
CONNECT_SECONDS = 10.0  # for a scheduler to answer
# How long a batch may go without any of its tasks done before the cluster counts as stuck (no
# worker left to take them): far longer than a build's or a timing's own time limit.
PATIENCE_SECONDS = 300.0
# A client sends the scheduler its messages at least 10 ms apart (Dask's batching): a task let
# go after each measurement puts its release between two submissions and holds the next one back
# (about 17 against 10 ms a measurement: bench/README.md, "bench/cluster.py"). The runner lets
# them go this many at once.
RELEASE_EVERY = 64


# ---- connecting and waiting --------------------------------------------------------------------

def connect(address: str, timeout: Optional[float] = None) -> Client:
    """A client of the Dask scheduler at ``address`` (``tcp://host:8786``); a ``ClusterError``
    when it does not answer within ``timeout`` seconds (default ``CONNECT_SECONDS``)."""
    try:
        return Client(address, timeout=timeout or CONNECT_SECONDS, set_as_default=False)
    except (OSError, ValueError, TimeoutError) as err:
        raise ClusterError(f"cannot reach the Dask scheduler at {address} ({err}); start one there with "
                           f"`dask scheduler` and give its address") from None


def _address(client: Client) -> str:
    return getattr(client.scheduler, "address", None) or "(unknown)"


def _call(client: Client, what: str, fn: Callable, *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)``, a call of the client that talks to the scheduler; a lost
    scheduler is a ``ClusterError`` saying ``what`` was being done."""
    try:
        return fn(*args, **kwargs)
    except (OSError, CancelledError, TimeoutError) as err:
        raise _lost(client, what, err) from None


def _lost(client: Client, what: str, err: BaseException) -> ClusterError:
    reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    return ClusterError(f"the Dask scheduler at {_address(client)} went away while {what} ({reason}); "
                        f"what was measured before is in the database")


def _finish(client: Client, futures: list, patience: float, what: str) -> list[tuple[bool, Any]]:
    """Wait for ``futures``, in order; each one's ``(True, value)``, or ``(False, reason)`` when
    its workers died (``KilledWorker``: a failed trial, the reason after ``build: `` or
    ``run: ``). A ``ClusterError`` when the scheduler goes away, when one waited for is not done
    ``patience`` seconds after the one before (the tasks are cancelled), or when a task raised:
    what runs on a worker turns a trial's faults into results, so an exception there is the
    cluster's (metasched missing on the worker, another version of it or of what the task
    carries)."""
    outcomes = []
    for future in futures:
        try:
            err = future.exception(timeout=patience)
            value = future.result() if err is None else None  # a cancelled future raises its reason
        except TimeoutError:
            client.cancel(futures)
            raise ClusterError(f"the Dask cluster at {_address(client)} did not finish {what} within "
                               f"{patience:g} s: are its workers running?") from None
        except (OSError, CancelledError) as lost:
            raise _lost(client, what, lost) from None
        if err is None:
            outcomes.append((True, value))
        elif isinstance(err, KilledWorker):
            outcomes.append((False, f"the Dask worker doing it died, {err.allowed_failures + 1} time(s) "
                                    f"(the last was {err.last_worker.address})"))
        else:
            client.cancel(futures)
            raise _failed(client, what, err)
    return outcomes


def _failed(client: Client, what: str, err: BaseException) -> ClusterError:
    text = str(err).splitlines()[0] if str(err) else ""
    return ClusterError(f"a worker of the Dask cluster at {_address(client)} failed {what}: {type(err).__name__}: "
                        f"{text} (does it run the same metasched, and can it import what the run gives it?)")


def _on_workers(client: Client, what: str, fn: Callable, *args, workers: Optional[list[str]] = None) -> dict:
    """``fn(*args)`` on each worker (or on ``workers``), by address; a ``ClusterError`` when
    the scheduler goes away or one of them raises."""
    try:
        return _call(client, what, client.run, fn, *args, workers=workers)
    except ClusterError:
        raise
    except Exception as err:  # raised on a worker
        raise _failed(client, what, err) from None


# ---- what runs on a worker --------------------------------------------------------------------

_LOCK = threading.Lock()
_IDLE_BUILD_POOLS: list[WorkerPool] = []  # this worker's build processes not building now
_RUNNERS: dict[str, Runner] = {}  # the runner of the DaskRunner seen last, by its token
_TIMING = threading.Lock()  # one measurement at a time in this worker


def _allow_children() -> None:
    """A nanny starts its worker as a daemonic process, and multiprocessing refuses children
    to those (lest they outlive it). Ours are daemonic themselves, killed when they overrun
    their time limit and ended with the worker: let the worker have them."""
    process = multiprocessing.current_process()
    if process.daemon:
        process.daemon = False


def _take_build_pool() -> WorkerPool:
    with _LOCK:
        if _IDLE_BUILD_POOLS:
            return _IDLE_BUILD_POOLS.pop()
    _allow_children()
    return WorkerPool(1, "metasched-dask-builder")


def _build_on_worker(trace_json: dict, workload: Workload, options: CodegenOptions,
                     hook: Optional[BuildHook], timeout: float, constants: tuple[str, ...] = ()) -> BuildResult:
    """One build, in one of this worker's build processes (as many as it runs tasks at once)."""
    pool = _take_build_pool()
    try:
        (result,) = build_in(pool, [(workload, trace_json, options, hook, constants)], timeout)
    finally:
        with _LOCK:
            _IDLE_BUILD_POOLS.append(pool)
    return result


def _start_build_pools(dask_worker) -> None:
    """Start one build process per task the worker runs at once, before the first batch."""
    pools = [_take_build_pool() for _ in range(dask_worker.state.nthreads)]
    for pool in pools:
        pool.start()
    with _LOCK:
        _IDLE_BUILD_POOLS.extend(pools)


def _runner_here(token: str, runner: Runner) -> Runner:
    """This worker's copy of the runner of the DaskRunner ``token``; the copy of another
    DaskRunner, seen before, is closed (a worker keeps one timing process)."""
    with _LOCK:
        if token not in _RUNNERS:
            for old in _RUNNERS.values():
                old.close()
            _RUNNERS.clear()
            _allow_children()
            _RUNNERS[token] = runner
        return _RUNNERS[token]


def _start_on_worker(token: str, runner: Runner) -> None:
    _runner_here(token, runner).start()


def _run_on_worker(token: str, runner: Runner, workload: Workload, artifacts: list[Artifact],
                   best: Optional[float]) -> list[RunResult]:
    here = _runner_here(token, runner)
    with _TIMING:
        return here.run(workload, artifacts, best)


def _close_on_worker(token: str) -> None:
    with _LOCK:
        runner = _RUNNERS.pop(token, None)
    if runner is not None:
        runner.close()


def _machine_here() -> Machine:
    return Machine.here()


# ---- DaskBuilder ------------------------------------------------------------------------------

class DaskBuilder(Builder):
    """Builds on the workers of a Dask cluster (``client``) whose CPU is the runner's (the
    tuning run says which: ``build_for``; until then this machine's), one task per trace,
    each build limited to ``timeout`` seconds in a process of its worker. ``options`` are the
    code generator's; 0 threads means the runner machine's cores. ``hook``: as ``LocalBuilder``'s.
    ``patience``: seconds a batch may go with no build done before ``ClusterError``."""

    def __init__(self, client: Client, timeout: float = 30.0, options: Optional[CodegenOptions] = None,
                 hook: Optional[BuildHook] = None, patience: float = PATIENCE_SECONDS) -> None:
        if timeout <= 0 or patience <= 0:
            raise ValueError(f"the build time limit and the patience must be positive, got {timeout} and {patience}")
        self.client = client
        self.options = options or CodegenOptions()
        self.timeout = timeout
        self.hook = hook
        self.patience = patience
        self._machine: Optional[Machine] = None
        self._hosts: list[str] = []  # the hosts of the workers that build for it

    def build_for(self, machine: Machine) -> None:
        """Build for ``machine`` from now on: on the workers of its CPU, with its core count
        as the kernels' threads when ``options`` leave that to the machine."""
        machines = _on_workers(self.client, "finding the builders", _machine_here)
        hosts = sorted({get_address_host(address) for address, there in machines.items()
                        if there.host == machine.host})
        if not hosts:
            seen = ", ".join(sorted({str(m) for m in machines.values()})) or "none"
            raise ClusterError(f"no worker of the Dask cluster at {_address(self.client)} has the runner's CPU "
                               f"({machine}) to build for it (the workers: {seen}); start `dask worker` on "
                               f"machines like it")
        self._machine, self._hosts = machine, hosts

    def _ready(self) -> CodegenOptions:
        """The options of the builds, after finding the workers that build (for this machine
        until ``build_for`` says otherwise): ``options`` with the kernels' thread count made
        explicit, since a worker that builds may have other cores than the machine that runs."""
        if self._machine is None:
            self.build_for(Machine.here())
        if self.options.num_threads or self.options.threading == "serial":
            return self.options
        return dataclasses.replace(self.options, num_threads=self._machine.cores)

    def start(self) -> None:
        """Start the build processes of every worker that builds, before the first batch."""
        self._ready()
        info = _call(self.client, "starting the builders", self.client.scheduler_info, n_workers=-1)
        workers = [address for address in info["workers"] if get_address_host(address) in self._hosts]
        if workers:
            _on_workers(self.client, "starting the builders", _start_build_pools, workers=workers)

    def build(self, workload: Workload, traces: Sequence[Trace], constants: Sequence[str] = ()) -> list[BuildResult]:
        """Build each trace on the cluster (``constants`` as in ``build_trace``); results in
        the order of ``traces``."""
        if not traces:
            return []
        options = self._ready()
        futures = _call(self.client, "building", self.client.map, _build_on_worker, [t.to_json() for t in traces],
                        workload=workload, options=options, hook=self.hook, timeout=self.timeout,
                        constants=tuple(constants),
                        workers=self._hosts, allow_other_workers=False, pure=False)
        return [value if ok else BuildResult(None, f"build: {value}", 0.0)
                for ok, value in _finish(self.client, futures, self.patience, "building")]


# ---- DaskRunner -------------------------------------------------------------------------------

class DaskRunner(Runner):
    """Times kernels on a worker of a Dask cluster (``client``) that holds ``resources``
    (default ``{"metasched-runner": 1}``), a batch at a time, with ``runner`` (default a
    ``LocalRunner()``: each kernel checked and timed in a process of that worker; give one
    with other settings, or any picklable ``Runner``). The workers holding the resource must
    be machines of one CPU and core count, one worker per machine; their CPU is the target of
    the records. A run times on one of them, picked at random when it starts (several runs at
    once spread over them), so that its load guard and confirmation compare timings of one
    machine. ``patience``: seconds a batch may wait unfinished (for that machine's runner
    worker to come back, say) before ``ClusterError``."""

    def __init__(self, client: Client, resources: Optional[dict[str, float]] = None,
                 runner: Optional[Runner] = None, patience: float = PATIENCE_SECONDS) -> None:
        if patience <= 0:
            raise ValueError(f"the patience must be positive, got {patience}")
        self.client = client
        self.resources = dict(resources or {RUNNER_RESOURCE: 1})
        self.runner = runner or LocalRunner()
        self.patience = patience
        self._token = uuid.uuid4().hex  # names this runner's copy on the workers
        self._machine: Optional[Machine] = None
        self._host = ""  # of the runner worker that times this run's kernels
        self._done: list = []  # the futures of the measurements done, let go RELEASE_EVERY at once

    def _workers(self) -> list[str]:
        """The addresses of the workers that hold the resources."""
        info = _call(self.client, "finding the runners", self.client.scheduler_info, n_workers=-1)
        return sorted(address for address, worker in info["workers"].items()
                      if all(worker.get("resources", {}).get(k, 0) >= v for k, v in self.resources.items()))

    def machine(self) -> Machine:
        """The machine of the workers that hold the resources; a ``ClusterError`` when there are
        none, when they differ in CPU or cores, or when one machine has two."""
        if self._machine is not None:
            return self._machine
        held = ", ".join(f"{k}={v:g}" for k, v in self.resources.items())
        workers = self._workers()
        if not workers:
            raise ClusterError(f"no worker of the Dask cluster at {_address(self.client)} holds the resource {held} "
                               f"to time kernels: start one on each machine that measures, `dask worker "
                               f"{_address(self.client)} --nthreads 1 --resources {held}`")
        machines = _on_workers(self.client, "finding the runners", _machine_here, workers=workers)
        kinds = set(machines.values())
        if len(kinds) > 1:
            raise ClusterError(f"the workers holding {held} are machines of different CPUs or cores "
                               f"({'; '.join(sorted(map(str, kinds)))}): a run tunes for one; give each kind of "
                               f"machine a resource of its own and DaskRunner(client, resources=...) one of them")
        shared = [host for host, count in Counter(map(get_address_host, workers)).items() if count > 1]
        if shared:
            raise ClusterError(f"{len(workers)} workers on {shared[0]} hold {held}: their measurements would "
                               f"run side by side; give the resource to one worker per machine")
        hosts = sorted(set(map(get_address_host, workers)))
        self._machine, self._host = kinds.pop(), hosts[int(self._token, 16) % len(hosts)]
        return self._machine

    def _placement(self) -> dict:
        """Where a task of this runner runs: on the runner worker of the run's machine (Dask
        2026.8 gives a task whose workers are a preference and that needs a resource to a
        worker without it when the one preferred dies, so they are a requirement)."""
        self.machine()
        return dict(resources=self.resources, workers=[self._host], pure=False)

    def start(self) -> None:
        """Check the runner workers and start the timing process, before the first kernel."""
        self.machine()
        future = _call(self.client, "starting the runner", self.client.submit, _start_on_worker, self._token,
                       self.runner, **self._placement())
        _finish(self.client, [future], self.patience, "starting the runner")

    def run(self, workload: Workload, artifacts: Sequence[Artifact],
            best: Optional[float] = None) -> list[RunResult]:
        """Check and time each artifact, one after another, on one runner worker; results in
        their order."""
        if not artifacts:
            return []
        future = _call(self.client, "timing", self.client.submit, _run_on_worker, self._token, self.runner,
                       workload, list(artifacts), best, **self._placement())
        ((ok, value),) = _finish(self.client, [future], self.patience, "timing")
        self._done.append(future)
        if len(self._done) >= RELEASE_EVERY:
            self._done.clear()
        return value if ok else [RunResult((), f"run: {value}") for _ in artifacts]

    def close(self) -> None:
        """End the timing processes this runner started on the workers (the cluster lives on)."""
        self._done.clear()
        if self.client.status != "running":
            return
        try:
            workers = self._workers()
            if workers:
                self.client.run(_close_on_worker, self._token, workers=workers)
        except Exception:  # the cluster or the worker went away, and the processes with it
            pass
