"""Whole models tuned (a few trials per task, every task) and compiled from their records:
the tuned programs, their weights' copies packed once, still match onnxruntime. Slow: each
model's every task is built and measured."""
from __future__ import annotations

import numpy as np
import pytest

from onnx_cases import assert_matches_onnxruntime, random
from metasched.graph import examples, import_onnx, plan
from metasched.network import compile_network, tune_network

MODELS = {
    "mlp": lambda: examples.mlp(batch=8, sizes=(64, 96, 96, 10)),
    "bottleneck": lambda: examples.bottleneck(channels=32, width=16, size=14),
    "bert_layer": lambda: examples.bert_layer(seq=16, hidden=64, heads=4, ffn=128),
    **{name: (lambda name=name: examples.light_model(name, seed=7))
       for name in ["squeezenet", "resnet50", "inception_v1", "shufflenet", "densenet121"]},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_a_tuned_model_matches_onnxruntime(name, tmp_path):
    made = MODELS[name]()
    graph = import_onnx(made)
    tasks = len(plan(graph).tasks)
    db = tmp_path / "net.db"
    result = tune_network(graph, trials=2 * tasks, trials_per_task=2, database=db, seed=1)
    assert tasks <= result.trials <= 2 * tasks  # a task whose space holds one program stops at it
    network = compile_network(graph, database=db)
    assert all(entry.tuned for entry in network.kernels)
    rng = np.random.default_rng(11)
    feeds = {k: random(rng, *shape) for k, shape in graph.inputs.items()}
    assert_matches_onnxruntime(made, feeds, network)
