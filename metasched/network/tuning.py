"""``tune_network``: a model's tasks tuned under one trial budget by the task scheduler."""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

from metasched.graph import Call, Graph, import_onnx, plan
from metasched.tune import TasksResult, TuneTask, tune_tasks


def tune_network(model, trials: int, trials_per_task: Optional[int] = None, database=None,
                 shapes: Optional[Mapping[str, Sequence[int]]] = None, **options) -> TasksResult:
    """Tune the tasks of ``model`` (an ONNX file, its bytes, a ``ModelProto`` or a ``Graph``),
    each weighted by how often the network calls it, with ``tune_tasks``: ``trials`` over all
    tasks (what ``database`` holds counts, so a stopped run goes on where it stopped),
    ``trials_per_task`` at most per task; ``options`` are ``tune_tasks``'s (``progress=True``
    prints the task table). Records are keyed by workload, so a database serves every model
    that shares a task. A program's copies of the weights are timed as made once, as
    ``compile_network`` makes them."""
    graph = model if isinstance(model, Graph) else import_onnx(model, shapes)
    the_plan = plan(graph)
    tasks = [TuneTask(task.workload, weight=task.weight, constants=constant_inputs(the_plan, k))
             for k, task in enumerate(the_plan.tasks)]
    return tune_tasks(tasks, trials, database, trials_per_task=trials_per_task, **options)


def constant_inputs(the_plan, task: int) -> tuple[str, ...]:
    """The names of task ``task``'s inputs that are weights in every call of it."""
    call = next(s for s in the_plan.steps if isinstance(s, Call) and s.task == task)
    return tuple(t.name for t, constant in zip(the_plan.tasks[task].workload.inputs, call.constant) if constant)
