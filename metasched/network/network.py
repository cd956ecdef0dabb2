"""``compile_network``: a model's tasks compiled, weights bound once, intermediates allocated
once, every fused kernel called in order."""
from __future__ import annotations

import math
import os
import pickle
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from metasched.codegen import CodegenOptions, Kernel, aligned_empty, load_kernel
from metasched.database import Database
from metasched.errors import CodegenError, ModelError, check_integer
from metasched.graph import Call, Graph, Plan, View, import_onnx, plan
from metasched.lang import Workload
from metasched.measure import LocalBuilder, Packed
from metasched.measure.builder import build_trace, make_packed
from metasched.network.tuning import constant_inputs
from metasched.schedule import Schedule, replay
from metasched.space import AutoInline, ParallelizeVectorizeUnroll, PostOrderApply
from metasched.space.postproc import RewriteParallelVectorizeUnroll, VerifyKernel
from metasched.timing import format_seconds, median
from metasched.tune.target import host_target


def default_schedule(workload: Workload) -> Schedule:
    """The schedule of a task without tuning records: its element-wise stages inlined, the
    outer loops of each stage fused and parallel, the innermost vectorized where it can be
    (``AutoInline`` and ``ParallelizeVectorizeUnroll`` with their postprocessor, seed 0). No
    tiling: a convolution or matrix product runs far slower than tuned."""
    space = PostOrderApply(rules=[AutoInline(), ParallelizeVectorizeUnroll(unroll_max_steps=(0,))],
                           postprocs=[RewriteParallelVectorizeUnroll(), VerifyKernel()])
    return space.sample(workload, rng=0)


@dataclass
class Pack:
    """A program that makes one of a kernel's extra inputs from its weights, once per call
    site (``lower.prepack``): ``sources`` are the positions of the kernel's inputs it reads."""

    kernel: Kernel
    sources: tuple[int, ...]


@dataclass
class TaskKernel:
    """One task of a network compiled: its workload, its kernel, whether it came from a tuning
    record (else the default schedule) and that record's median seconds; ``packs`` make the
    inputs the kernel takes after the workload's, its weights' copies made once."""

    workload: Workload
    kernel: Kernel
    tuned: bool
    record_seconds: Optional[float]
    packs: tuple[Pack, ...] = ()


class Network:
    """A compiled model: ``net(x, ...)`` or ``net(name=x)`` takes numpy arrays and returns the
    model's outputs (a list, in the model's order). Not safe to call from two threads at once:
    intermediates live in buffers allocated once."""

    def __init__(self, graph: Graph, the_plan: Plan, kernels: list[TaskKernel]) -> None:
        self.graph, self.plan, self.kernels = graph, the_plan, kernels
        self._arrays: dict[str, np.ndarray] = {}
        read = {name for step in the_plan.steps if isinstance(step, Call) for name in step.inputs}
        for name, value in graph.constants.items():
            if name in read:
                self._arrays[name] = _bound(value)
        self._allocate()
        for source, target in self._views:  # views of buffers allocated once are made once
            if source in self._arrays:
                self._arrays[target] = self._arrays[source].reshape(_dims(graph.shapes[target]))
        # Per call: its kernel, its arguments with those fixed for good in place, and the
        # (position, tensor) of those each run gives (inputs, outputs, views of inputs).
        self._calls = []
        for k, step in enumerate(the_plan.steps):
            if isinstance(step, Call):
                task = kernels[step.task]
                packed = [self._pack(pack, [self._arrays[step.inputs[j]] for j in pack.sources], f"{k}.{j}")
                          for j, pack in enumerate(task.packs)]
                names = step.inputs + packed + step.outputs
                fixed = [self._arrays.get(n) for n in names]
                per_run = [(j, n) for j, n in enumerate(names) if fixed[j] is None]
                self._calls.append((task.kernel, names, fixed, per_run))

    def _pack(self, pack: Pack, weights: list[np.ndarray], name: str) -> str:
        """Run ``pack`` on a call's ``weights``; bind what it makes, read-only, as ``name``."""
        packed = make_packed(pack.kernel, weights)
        packed.flags.writeable = False
        self._arrays[name] = packed
        return name

    def _allocate(self) -> None:
        """One buffer per computed tensor that is not an output, shared by tensors whose
        lifetimes do not overlap (a view lives as long as the tensor it shows)."""
        steps = self.plan.steps
        root: dict[str, str] = {}
        for step in steps:
            if isinstance(step, View):
                root[step.target] = root.get(step.source, step.source)
        last_use: dict[str, int] = {}
        for k, step in enumerate(steps):
            read = step.inputs if isinstance(step, Call) else [step.source]
            for name in read:
                last_use[root.get(name, name)] = k
        free: list[np.ndarray] = []  # flat float32 buffers
        allocated = 0
        graph = self.graph
        owned: dict[str, np.ndarray] = {}
        for k, step in enumerate(steps):
            if isinstance(step, Call):
                for name in step.outputs:
                    if name in graph.outputs:
                        continue
                    size = int(np.prod(_dims(graph.shapes[name])))
                    fits = [j for j, b in enumerate(free) if b.size >= size]
                    if fits:
                        buffer = free.pop(min(fits, key=lambda j: free[j].size))
                    else:
                        buffer = aligned_empty((size,), np.float32)
                        allocated += buffer.nbytes
                    owned[name] = buffer
                    self._arrays[name] = buffer[:size].reshape(_dims(graph.shapes[name]))
            for name in [n for n, last in last_use.items() if last == k and n in owned]:
                free.append(owned.pop(name))
        self._views = [(s.source, s.target) for s in steps if isinstance(s, View)]
        self.intermediate_bytes = allocated

    @property
    def num_calls(self) -> int:
        """The kernel calls of one run."""
        return len(self._calls)

    @property
    def input_names(self) -> list[str]:
        return list(self.graph.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.graph.outputs)

    def __call__(self, *args: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
        arrays, outputs = self._run_arrays(args, named)
        for kernel, _, fixed, per_run in self._calls:
            if per_run:
                fixed = list(fixed)
                for k, name in per_run:
                    fixed[k] = arrays[name]
            kernel.run(*fixed)
        return [outputs[n].reshape(self.graph.shapes[n]) for n in self.graph.outputs]

    def _run_arrays(self, args: Sequence[np.ndarray], named: Mapping[str, np.ndarray]):
        """(The arrays a run gives: inputs, new outputs and views of them, by name; the outputs.)"""
        arrays = self._bind(args, named)
        outputs = {}
        for name in self.graph.outputs:
            if name in self.graph.constants:
                outputs[name] = np.array(self.graph.constants[name], dtype=np.float32)
            else:
                outputs[name] = aligned_empty(_dims(self.graph.shapes[name]), np.float32)
        arrays.update(outputs)
        for source, target in self._views:
            if target not in self._arrays:
                shown = arrays.get(source, self._arrays.get(source))
                arrays[target] = shown.reshape(_dims(self.graph.shapes[target]))
        return arrays, outputs

    def _bind(self, args: Sequence[np.ndarray], named: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = self.input_names
        if len(args) > len(names):
            raise ModelError(f"the network takes {len(names)} input(s) ({', '.join(names)}), got {len(args)}")
        given = dict(zip(names, args))
        for name, value in named.items():
            if name not in names:
                raise ModelError(f"the network has no input {name!r} (its inputs: {', '.join(names)})")
            if name in given:
                raise ModelError(f"input {name!r} given twice, by position and by name")
            given[name] = value
        missing = [n for n in names if n not in given]
        if missing:
            raise ModelError(f"missing input(s) {', '.join(missing)}")
        arrays = {}
        for name, value in given.items():
            value = np.asarray(value)
            shape = self.graph.inputs[name]
            if value.dtype != np.float32:
                raise ModelError(f"input {name!r} must be float32, got {value.dtype}")
            if tuple(value.shape) != shape:
                raise ModelError(f"input {name!r} must have shape {list(shape)}, got {list(value.shape)}")
            arrays[name] = np.ascontiguousarray(value).reshape(_dims(shape))
        return arrays

    def tolerance(self) -> float:
        """The relative tolerance of a comparison of the outputs with another implementation
        (onnxruntime's): ``lang.tolerance``'s rule with ``L`` the reductions of every call
        added up, as rounding errors add up along the network."""
        total = sum(self.kernels[s.task].workload.max_reduce_length for s in self.plan.steps if isinstance(s, Call))
        return 16 * float(np.finfo(np.float32).eps) * math.sqrt(max(total, 1))

    def save(self, path: Union[str, os.PathLike], overwrite: bool = False) -> None:
        """Write the network (weights, plan, every kernel's object code) to ``path``, so that
        ``load_network`` runs it in another process without compiling. An existing file is
        replaced only with ``overwrite``; the file appears whole or not at all."""
        path = os.fspath(path)
        if os.path.exists(path) and not overwrite:
            raise ModelError(f"{path} exists; save(..., overwrite=True) replaces it")
        state = {"format": SAVED_FORMAT, "version": SAVED_VERSION, "graph": self.graph, "plan": self.plan,
                 "kernels": [(k.workload, k.kernel.artifact, k.tuned, k.record_seconds,
                              [(p.kernel.artifact, p.sources) for p in k.packs]) for k in self.kernels]}
        partial = f"{path}.partial"
        with open(partial, "wb") as file:
            pickle.dump(state, file, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Standard normal float32 inputs of the network's shapes, by name."""
        rng = np.random.default_rng(seed)
        return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in self.graph.inputs.items()}

    def profile(self, inputs: Optional[Mapping[str, np.ndarray]] = None, in_sequence: bool = False,
                runs: int = 10) -> list[float]:
        """Per task, its seconds in one run of the network, its calls added up (after a run on
        ``inputs``, default ``random_inputs()``, on the network's own buffers). Each call is
        timed alone (warm: its weights and inputs in cache), or with ``in_sequence`` as the
        network runs it, between the calls before and after it (what a run costs: weights read
        from memory), the median over ``runs`` runs."""
        check_integer(runs, "Network.profile", "runs", 1)
        feeds = dict(inputs) if inputs is not None else self.random_inputs()
        arrays, _ = self._run_arrays((), feeds)
        arrays.update(self._arrays)
        tasks = [s.task for s in self.plan.steps if isinstance(s, Call)]
        calls = [(kernel, [arrays[n] for n in names]) for kernel, names, _, _ in self._calls]
        seconds = [0.0] * len(self.kernels)
        if in_sequence:
            times = np.empty((runs + 1, len(calls)))
            for run in range(runs + 1):  # the first run warms up
                for i, (kernel, args) in enumerate(calls):
                    start = time.perf_counter()
                    kernel.run(*args)
                    times[run, i] = time.perf_counter() - start
            for task, value in zip(tasks, np.median(times[1:], axis=0)):
                seconds[task] += float(value)
            return seconds
        for task, (kernel, args) in zip(tasks, calls):
            kernel.run(*args)
            seconds[task] += median(kernel.timings(*args, repeat=3, min_repeat_seconds=0.01))
        return seconds

    def report(self, inputs: Optional[Mapping[str, np.ndarray]] = None, in_sequence: bool = False) -> str:
        """Per task: its calls, tuned or the default schedule, its time in one run of the
        network (``profile``, its calls timed alone or ``in_sequence``) and its share of the
        kernels' total."""
        counts: dict[int, int] = {}
        for step in self.plan.steps:
            if isinstance(step, Call):
                counts[step.task] = counts.get(step.task, 0) + 1
        seconds = self.profile(inputs, in_sequence)
        total = sum(seconds) or 1.0
        width = max([4] + [len(k.workload.name) for k in self.kernels])
        lines = [f"{'task':<{width}}  calls  {'time':>10}  share  schedule"]
        for k in sorted(range(len(self.kernels)), key=lambda k: -seconds[k]):
            entry = self.kernels[k]
            how = "tuned" if entry.tuned else "default (untuned)"
            lines.append(f"{entry.workload.name:<{width}}  {counts.get(k, 0):>5}  {format_seconds(seconds[k]):>10}  "
                         f"{seconds[k] / total:>5.1%}  {how}")
        lines.append(f"{'all kernels':<{width}}  {sum(counts.values()):>5}  {format_seconds(sum(seconds)):>10}")
        return "\n".join(lines)


SAVED_FORMAT, SAVED_VERSION = "metasched-network", 2


def load_network(path: Union[str, os.PathLike]) -> Network:
    """A network ``Network.save`` wrote, its kernels linked into this process (no compiling).
    The file is a pickle: load only files you trust, as with any pickle. ``ModelError`` for a
    missing or damaged file, another format, or kernels compiled for another CPU."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as file:
            state = pickle.load(file)
    except FileNotFoundError:
        raise ModelError(f"{path}: no such file") from None
    except Exception as err:
        raise ModelError(f"{path}: not a saved network ({type(err).__name__}: {err})") from None
    if not isinstance(state, dict) or state.get("format") != SAVED_FORMAT:
        raise ModelError(f"{path}: not a network saved by metasched's Network.save")
    if state.get("version") != SAVED_VERSION:
        raise ModelError(f"{path}: saved in format version {state.get('version')}; this metasched reads "
                         f"version {SAVED_VERSION}: compile the model again")
    try:
        kernels = [TaskKernel(wl, load_kernel(artifact), tuned, seconds,
                              tuple(Pack(load_kernel(a), sources) for a, sources in packs))
                   for wl, artifact, tuned, seconds, packs in state["kernels"]]
    except CodegenError as err:
        raise ModelError(f"{path}: {err}") from None
    return Network(state["graph"], state["plan"], kernels)


def _dims(shape) -> tuple[int, ...]:
    return tuple(shape) if shape else (1,)


def _bound(value: np.ndarray) -> np.ndarray:
    array = aligned_empty(_dims(value.shape), np.float32)
    array[...] = np.asarray(value, dtype=np.float32).reshape(array.shape)
    array.flags.writeable = False
    return array


# From this many tasks on, they are compiled in worker processes, one per core (starting the
# workers costs about a second).
PARALLEL_FROM = 12


def _compile_all(plan_: Plan, schedules: Sequence[Schedule],
                 options: Optional[CodegenOptions]) -> list[tuple[Kernel, tuple[Pack, ...]]]:
    """Each task's schedule compiled, its copies of the weights taken out to be made once
    (``measure.build_trace``), and loaded into this process."""
    jobs = [(task.workload, schedule.trace, constant_inputs(plan_, k)) for k, (task, schedule)
            in enumerate(zip(plan_.tasks, schedules))]
    if len(jobs) < PARALLEL_FROM:
        built = [build_trace(workload, trace.to_json(), options or CodegenOptions(), constants=constants)
                 for workload, trace, constants in jobs]
    else:
        with LocalBuilder(options=options) as builder:
            results = builder.build_many(jobs)
        for (workload, *_), result in zip(jobs, results):
            if not result.ok:
                raise ModelError(f"task {workload.name} did not compile: {result.error}")
        built = [result.artifact for result in results]
    loaded = []
    for artifact in built:
        kernel, packs = (artifact.kernel, artifact.packs) if isinstance(artifact, Packed) else (artifact, ())
        loaded.append((load_kernel(kernel), tuple(Pack(load_kernel(a), sources) for a, sources in packs)))
    return loaded


def compile_network(model: Union[str, os.PathLike, bytes, Graph, object], database=None,
                    shapes: Optional[Mapping[str, Sequence[int]]] = None,
                    options: Optional[CodegenOptions] = None) -> Network:
    """Compile ``model`` (an ONNX file, its bytes, a ``ModelProto`` or an imported ``Graph``):
    each task as the fastest program ``database`` (a path or a ``Database``) holds for it on
    this CPU, or, without one, ``default_schedule``."""
    graph = model if isinstance(model, Graph) else import_onnx(model, shapes)
    the_plan = plan(graph)
    db = None
    if database is not None:
        db = database if isinstance(database, Database) else Database(database, read_only=True)
    target = host_target(options)
    records = []
    try:
        for task in the_plan.tasks:
            records.append(db.best(task.workload, target) if db is not None else None)
    finally:
        if db is not None and db is not database:
            db.close()
    schedules = [replay(task.workload, record.trace) if record is not None else default_schedule(task.workload)
                 for task, record in zip(the_plan.tasks, records)]
    compiled = _compile_all(the_plan, schedules, options)
    kernels = [TaskKernel(task.workload, kernel, record is not None, record.median if record is not None else None,
                          packs)
               for task, (kernel, packs), record in zip(the_plan.tasks, compiled, records)]
    return Network(graph, the_plan, kernels)
