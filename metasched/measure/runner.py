"""``Runner``: artifacts → checked run times, one at a time in an isolated worker process.

Each kernel first runs once on random inputs with its outputs and workspaces filled with NaN,
and its outputs are compared with the numpy reference (the tolerance rule of
``assert_outputs_close``); only a kernel that computes the right answer is timed, in the style
of TVM's ``time_evaluator``. A kernel that crashes its process, hangs, or computes a wrong
answer is a failed result with the reason; the worker is replaced and the next one runs.
"""
from __future__ import annotations

import statistics
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import numpy as np
from threadpoolctl import threadpool_limits

from metasched.codegen import Artifact, load_kernel
from metasched.errors import MismatchError
from metasched.lang import assert_outputs_close
from metasched.lang.workload import Workload
from metasched.measure.machine import Machine
from metasched.measure.builder import Packed, make_packed
from metasched.measure.service import Service
from metasched.measure.worker import WorkerPool

# A test-only hook, run in the worker after loading a kernel and before running it: it may
# misbehave (crash, hang) to show how the tuner copes. A module-level function.
RunHook = Callable[[Artifact], None]


@dataclass(frozen=True)
class RunResult:
    """One kernel's measurement: ``seconds`` per run in each repeat, or ``error`` saying why
    there are none."""

    seconds: tuple[float, ...]
    error: Optional[str]

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def median(self) -> Optional[float]:
        return statistics.median(self.seconds) if self.seconds else None


@dataclass(frozen=True)
class TimingConfig:
    """How a kernel is timed: after a warm-up run, ``repeat`` repeats of ``number`` back-to-back
    runs (``number`` None: enough to last ``min_repeat_seconds``).

    A clear loser is timed once: when one warm run takes ``slow_factor`` times the best median
    so far (``Runner.run``'s ``best``) or longer, that run is its measurement, because timing
    it properly would cost more than the answer is worth (were it the best after all, the
    tuner times it again in full). Only a run of ``min_single_run_seconds`` or longer counts
    so: a shorter one is mostly the call's own cost, not the kernel's (an 8-element vector
    add whose runs take 0.33 us timed 1.8 to 3.3 us alone, so every trial after the first
    was a "clear loser" and recorded that), and timing it in full costs at most
    ``repeat * min_repeat_seconds``."""

    repeat: int = 3
    number: Optional[int] = None
    min_repeat_seconds: float = 0.02
    slow_factor: float = 3.0
    min_single_run_seconds: float = 1e-4

    def __post_init__(self) -> None:
        if self.repeat < 1 or (self.number is not None and self.number < 1):
            raise ValueError(f"repeat and number must be positive, got {self.repeat} and {self.number}")
        if not self.min_single_run_seconds >= 0:
            raise ValueError(f"min_single_run_seconds must be >= 0, got {self.min_single_run_seconds}")


# In a runner worker: each workload's inputs and reference outputs, made once.
_REFERENCES: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}


def _reference(workload: Workload, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    key = f"{workload.key}:{seed}"
    if key not in _REFERENCES:
        inputs = workload.random_inputs(seed=seed)
        # On one BLAS thread: a pool of BLAS threads would keep spinning after the reference
        # is made, and a kernel timed meanwhile would wait for the cores (see timing.py).
        with threadpool_limits(limits=1):
            _REFERENCES[key] = (inputs, workload.reference(*inputs))
    return _REFERENCES[key]


def run_artifact(workload: Workload, artifact: Union[Artifact, Packed], config: TimingConfig, seed: int,
                 best: Optional[float] = None, hook: Optional[RunHook] = None) -> tuple[float, ...]:
    """Load, check and time one kernel: what a runner worker runs. A ``Packed`` one runs its
    packs first, untimed, as a network does when it binds its weights."""
    packs = ()
    if isinstance(artifact, Packed):
        artifact, packs = artifact.kernel, artifact.packs
    kernel = load_kernel(artifact)
    if hook is not None:
        hook(artifact)
    inputs, expected = _reference(workload, seed)
    inputs = inputs + [make_packed(load_kernel(pack), [inputs[k] for k in sources]) for pack, sources in packs]
    try:
        assert_outputs_close(workload, kernel(*inputs, poison=True), expected)
    except MismatchError as err:
        raise MismatchError(f"wrong result: {err}") from None
    # The checking run warmed the caches up; one timed run says whether it is worth more.
    (once,) = kernel.timings(*inputs, number=1, repeat=1, warm_seconds=0.0)
    if best is not None and once >= max(config.slow_factor * best, config.min_single_run_seconds):
        return (once,)
    return tuple(kernel.timings(*inputs, number=config.number, repeat=config.repeat,
                                min_repeat_seconds=config.min_repeat_seconds, warm_seconds=once))


class Runner(Service, ABC):
    """Checks and times batches of artifacts, one at a time. A runner of your own (a
    cluster's, say) is a subclass with ``run``; ``start`` and ``close`` bracket a tuning
    run's use of it."""

    @abstractmethod
    def run(self, workload: Workload, artifacts: Sequence[Artifact],
            best: Optional[float] = None) -> list[RunResult]:
        """Check and time each artifact; results in their order, a failure as its reason.
        ``best``, the best median seconds known, lets a clear loser be timed once."""

    def machine(self) -> Machine:
        """The machine the kernels are timed on: what they are built for, and whose CPU is the
        target of the records. This one; a runner elsewhere (a cluster's) says which."""
        return Machine.here()


class LocalRunner(Runner):
    """Times kernels one at a time in one spawned worker process (a measurement runs alone:
    DESIGN.md, "Measuring"), each limited to ``timeout`` seconds including its check."""

    def __init__(self, timeout: float = 10.0, timing: Optional[TimingConfig] = None,
                 seed: int = 0, hook: Optional[RunHook] = None) -> None:
        if timeout <= 0:
            raise ValueError(f"the run time limit must be positive, got {timeout}")
        self.timeout = timeout
        self.timing = timing or TimingConfig()
        self.seed = seed  # of the random inputs the outputs are checked on
        self.hook = hook
        self._pool = WorkerPool(1, "metasched-runner")

    def start(self) -> None:
        """Start the worker process now rather than at the first run."""
        self._pool.start()

    def run(self, workload: Workload, artifacts: Sequence[Artifact],
            best: Optional[float] = None) -> list[RunResult]:
        """Check and time each artifact, one after another; results in their order. ``best``,
        the best median seconds known, lets a clear loser be timed once (``TimingConfig``)."""
        tasks = [(workload, artifact, self.timing, self.seed, best, self.hook)
                 for artifact in artifacts]
        outcomes = self._pool.map(run_artifact, tasks, self.timeout, what="run")
        return [RunResult(o.value if o.ok else (), None if o.ok else f"run: {o.error}")
                for o in outcomes]

    def close(self) -> None:
        self._pool.close()

    def __getstate__(self) -> dict:
        """Its settings, without its worker process: a copy (a cluster's runner worker gets
        one) starts its own."""
        return {k: v for k, v in self.__dict__.items() if k != "_pool"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._pool = WorkerPool(1, "metasched-runner")
