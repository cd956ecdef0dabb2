"""``compile_network``: a model's tasks compiled, weights bound once, intermediates allocated
once, every fused kernel called in order."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from metasched.arrays import aligned_empty
from metasched.codegen import CodegenOptions, Kernel, compile_func
from metasched.database import Database
from metasched.errors import ModelError
from metasched.graph import Call, Graph, Plan, View, import_onnx, plan
from metasched.lang import Workload
from metasched.schedule import Schedule, replay
from metasched.space import AutoInline, ParallelizeVectorizeUnroll, PostOrderApply
from metasched.space.postproc import RewriteParallelVectorizeUnroll, VerifyKernel
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
class _Kernel:
    workload: Workload
    kernel: Kernel
    tuned: bool
    record_seconds: Optional[float]


class Network:
    """A compiled model: ``net(x, ...)`` or ``net(name=x)`` takes numpy arrays and returns the
    model's outputs (a list, in the model's order). Not safe to call from two threads at once:
    intermediates live in buffers allocated once."""

    def __init__(self, graph: Graph, the_plan: Plan, kernels: list[_Kernel]) -> None:
        self.graph, self.plan, self.kernels = graph, the_plan, kernels
        self._arrays: dict[str, np.ndarray] = {}
        for name, value in graph.constants.items():
            if any(isinstance(s, Call) and name in s.inputs for s in the_plan.steps) or name in graph.outputs:
                self._arrays[name] = _bound(value)
        self._allocate()
        self._calls = []  # (kernel.run, [tensor names]) per step; views are set up once
        for step in the_plan.steps:
            if isinstance(step, Call):
                self._calls.append((kernels[step.task].kernel, step.inputs + step.outputs))

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
    def input_names(self) -> list[str]:
        return list(self.graph.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.graph.outputs)

    def __call__(self, *args: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
        arrays = self._bind(args, named)
        outputs = {}
        for name in self.graph.outputs:
            if name in self.graph.constants:
                outputs[name] = np.array(self.graph.constants[name], dtype=np.float32)
            else:
                outputs[name] = aligned_empty(_dims(self.graph.shapes[name]), np.float32)
        arrays.update(outputs)
        for source, target in self._views:
            if target not in arrays:
                arrays[target] = arrays[source].reshape(_dims(self.graph.shapes[target]))
        for kernel, names in self._calls:
            kernel.run(*[arrays[n] for n in names])
        return [outputs[n].reshape(self.graph.shapes[n]) for n in self.graph.outputs]

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
        arrays = dict(self._arrays)
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

    def report(self) -> str:
        """Per task: tuned or default, its calls, its time as the database recorded it."""
        counts: dict[int, int] = {}
        for step in self.plan.steps:
            if isinstance(step, Call):
                counts[step.task] = counts.get(step.task, 0) + 1
        lines = [f"{'task':<40} {'calls':>5}  schedule"]
        for k, entry in enumerate(self.kernels):
            how = (f"tuned, {entry.record_seconds * 1e3:.3f} ms" if entry.tuned else "default (untuned)")
            lines.append(f"{entry.workload.name:<40} {counts.get(k, 0):>5}  {how}")
        return "\n".join(lines)


def _dims(shape) -> tuple[int, ...]:
    return tuple(shape) if shape else (1,)


def _bound(value: np.ndarray) -> np.ndarray:
    array = aligned_empty(_dims(value.shape), np.float32)
    array[...] = np.asarray(value, dtype=np.float32).reshape(array.shape)
    array.flags.writeable = False
    return array


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
    kernels = []
    target = host_target(options)
    try:
        for task in the_plan.tasks:
            record = db.best(task.workload, target) if db is not None else None
            sch = replay(task.workload, record.trace) if record is not None else default_schedule(task.workload)
            kernel = compile_func(sch.lower(), options)
            kernels.append(_Kernel(task.workload, kernel, record is not None,
                                   record.median if record is not None else None))
    finally:
        if db is not None and db is not database:
            db.close()
    return Network(graph, the_plan, kernels)
