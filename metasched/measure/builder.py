"""``Builder``: traces → compiled artifacts, in parallel worker processes, each build under a
time limit. A build that fails (its trace no longer replays, the code generator refuses it, its
worker crashes or it overruns the limit) is a failed result with the reason, never an
exception. Where some inputs are constants (a network's weights), a program's copies of them
are made once, before it runs (``Packed``): what it is timed as is what the network runs."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import numpy as np

from metasched.codegen import Artifact, CodegenOptions, Kernel, aligned_empty, available_cores, compile_artifact
from metasched.ir.stmt import PrimFunc, func_digest
from metasched.errors import ClusterError
from metasched.lang.workload import Workload
from metasched.lower.prepack import hoist_constant_copies
from metasched.measure.machine import Machine
from metasched.measure.service import Service
from metasched.measure.worker import WorkerPool
from metasched.schedule import Trace, replay

# A test-only hook, run in the worker between lowering and compiling: it may return another
# loop program or misbehave (sleep, crash) to show how the tuner copes. A module-level function.
BuildHook = Callable[[Workload, Trace, PrimFunc], PrimFunc]


@dataclass(frozen=True)
class Packed:
    """A program whose copies of constant inputs are made once (``lower.prepack``): the
    ``kernel``, which takes the workload's inputs, then one array per pack, then its outputs;
    and the ``packs``, each the artifact of a program that makes one of those arrays and the
    positions of the workload's inputs it reads."""

    kernel: Artifact
    packs: tuple[tuple[Artifact, tuple[int, ...]], ...]


def make_packed(pack: Kernel, sources: Sequence[np.ndarray]) -> np.ndarray:
    """What a pack program (``Packed.packs``) makes of its ``sources``, in a new array (what
    no copy writes, a padded tile's rest, is zero and read by no one)."""
    (buffer,) = pack.func.outputs
    packed = aligned_empty(buffer.shape, buffer.dtype)
    packed.fill(0.0)
    pack.run(*sources, packed)
    return packed


@dataclass(frozen=True)
class BuildResult:
    """One trace's build: the ``artifact`` (a ``Packed`` one where it copies constants), or
    ``error`` saying why there is none; ``seconds`` is the wall time its worker spent (replay,
    lowering, compiling)."""

    artifact: Optional[Union[Artifact, Packed]]
    error: Optional[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return self.error is None


def build_trace(workload: Workload, trace_json: dict, options: CodegenOptions,
                hook: Optional[BuildHook] = None, constants: Sequence[str] = ()) -> Union[Artifact, Packed]:
    """Replay a trace (post-processing included, as recorded), lower it and compile it: what
    a builder worker runs. With ``constants`` (names of inputs), the program's copies of them
    are taken out to be made once, and the result is ``Packed`` if there were any."""
    trace = Trace.from_json(trace_json)
    func = replay(workload, trace).lower()
    if hook is not None:
        func = hook(workload, trace, func)
    prepacked = hoist_constant_copies(func, constants)
    if not prepacked.packings:
        return compile_artifact(func, options)
    positions = {tensor.name: k for k, tensor in enumerate(workload.inputs)}
    packs = tuple((_pack_artifact(p.func, options), tuple(positions[name] for name in p.sources))
                  for p in prepacked.packings)
    return Packed(compile_artifact(prepacked.kernel, options), packs)


# Pack programs compiled in this process, by their digest and options. A task's candidates
# mostly pack its weights alike (the same tile of the same panel): each layout is compiled once.
_PACKS: dict[tuple[str, CodegenOptions], Artifact] = {}
_PACKS_KEPT = 64


def _pack_artifact(func: PrimFunc, options: CodegenOptions) -> Artifact:
    key = (func_digest(func), options)
    if key not in _PACKS:
        if len(_PACKS) >= _PACKS_KEPT:
            del _PACKS[next(iter(_PACKS))]  # the oldest
        _PACKS[key] = compile_artifact(func, options)
    return _PACKS[key]


def build_in(pool: WorkerPool, tasks: Sequence[tuple], timeout: float) -> list[BuildResult]:
    """``build_trace`` of each task's arguments in ``pool``'s processes, each under ``timeout``
    seconds; results in their order."""
    outcomes = pool.map(build_trace, tasks, timeout, what="build")
    return [BuildResult(o.value, None if o.ok else f"build: {o.error}", o.seconds) for o in outcomes]


class Builder(Service, ABC):
    """Builds batches of traces into artifacts for the target of its ``options``. A builder
    of your own (a cluster's, say) is a subclass with ``build``; ``start`` and ``close``
    bracket a tuning run's use of it."""

    options: CodegenOptions

    @abstractmethod
    def build(self, workload: Workload, traces: Sequence[Trace], constants: Sequence[str] = ()) -> list[BuildResult]:
        """Build each trace; results in the order of ``traces``, a failure as its reason.
        ``constants`` name the inputs whose copies are made once (``build_trace``); a tuning
        run passes it only where a task has some."""

    def build_for(self, machine: Machine) -> None:
        """Build for ``machine`` (the runner's, which the tuning run tells before it builds).
        This builder compiles on this machine, for its CPU: another machine is refused, since
        its runner could not load the kernels (a cluster's builder builds on machines like it)."""
        here = Machine.here()
        if machine != here:
            raise ClusterError(f"{type(self).__name__} compiles here ({here}) for this CPU, but the runner "
                               f"times on {machine}: build on machines like the runner's (DaskBuilder)")


class LocalBuilder(Builder):
    """Compiles candidates in ``workers`` spawned processes (default: one per core), each build
    limited to ``timeout`` seconds. Use as a context manager, or ``close()`` it."""

    def __init__(self, workers: int = 0, timeout: float = 30.0,
                 options: Optional[CodegenOptions] = None, hook: Optional[BuildHook] = None) -> None:
        if timeout <= 0:
            raise ValueError(f"the build time limit must be positive, got {timeout}")
        self.options = options or CodegenOptions()
        self.timeout = timeout
        self.hook = hook
        self._pool = WorkerPool(workers or available_cores(), "metasched-builder")

    def start(self) -> None:
        """Start the worker processes now rather than at the first build."""
        self._pool.start()

    def build(self, workload: Workload, traces: Sequence[Trace], constants: Sequence[str] = ()) -> list[BuildResult]:
        """Build each trace (``constants`` as in ``build_trace``); results in the order of ``traces``."""
        return self.build_many([(workload, trace, constants) for trace in traces])

    def build_many(self, jobs: Sequence[tuple[Workload, Trace, Sequence[str]]]) -> list[BuildResult]:
        """Build each ``(workload, trace, constants)``, the workloads free to differ (a
        network's tasks); results in their order."""
        tasks = [(workload, trace.to_json(), self.options, self.hook, tuple(constants))
                 for workload, trace, constants in jobs]
        return build_in(self._pool, tasks, self.timeout)

    @property
    def workers(self) -> WorkerPool:
        """The worker processes; between builds the tuner lends them to the search."""
        return self._pool

    def close(self) -> None:
        self._pool.close()
