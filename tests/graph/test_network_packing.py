"""A tuned program that copies a weight into another layout: the network makes the copy once,
when it binds its weights (``lower.prepack``), and still matches onnxruntime, saved and loaded
too; a call site of its own per layer that shares the task."""
from __future__ import annotations

import numpy as np

from onnx_cases import assert_matches_onnxruntime, random
from metasched.database import Database
from metasched.graph import Call, examples, import_onnx, plan
from metasched.lower.prepack import hoist_constant_copies
from metasched.network import compile_network, load_network
from metasched.space import cpu_default
from metasched.tune.target import host_target


def packing_schedule(workload, constants):
    """A program of the default space that copies a weight (the first seed that gives one)."""
    for seed in range(50):
        sch = cpu_default().sample(workload, rng=seed)
        if hoist_constant_copies(sch.lower(), constants).packings:
            return sch
    raise AssertionError(f"no program of {workload.name} in 50 samples copies a weight")


def test_weights_copied_by_tuned_programs_are_packed_once_and_the_network_matches(tmp_path):
    # Two layers of the same shapes: one task, two call sites, each packing its own weights.
    made = examples.mlp(batch=8, sizes=(64, 64, 64, 5))
    the_plan = plan(import_onnx(made))
    shared = next(k for k, task in enumerate(the_plan.tasks) if task.weight == 2)
    workload = the_plan.tasks[shared].workload
    call = next(s for s in the_plan.steps if isinstance(s, Call) and s.task == shared)
    constants = [t.name for t, constant in zip(workload.inputs, call.constant) if constant]
    sch = packing_schedule(workload, constants)
    db_path = tmp_path / "net.db"
    with Database(db_path) as db:
        db.commit(workload, sch.trace, target=host_target(None), seconds=[1e-3])
    network = compile_network(made, database=db_path)
    assert network.kernels[shared].tuned and network.kernels[shared].packs
    feeds = {"x": random(np.random.default_rng(4), 8, 64)}
    assert_matches_onnxruntime(made, feeds, network)
    path = tmp_path / "net.msn"
    network.save(path)
    again = load_network(path)
    assert again.kernels[shared].packs
    for a, b in zip(again(**feeds), network(**feeds)):
        np.testing.assert_array_equal(a, b)
    assert sum(network.profile(feeds)) > 0
