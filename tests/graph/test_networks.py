"""Whole models: import, fusion into tasks, one executable, against onnxruntime; and the
one-line errors of bad models and bad inputs."""
from __future__ import annotations

import re

import numpy as np
import pytest

from onnx_cases import assert_matches_onnxruntime, helper, model, onnx, random
from metasched import ModelError
from metasched.graph import Call, View, examples, import_onnx, plan
from metasched.lang import parse
from metasched.network import compile_network, load_network


def test_mlp_matches_onnxruntime_and_fuses_each_layer_with_its_relu():
    made = examples.mlp(batch=5, sizes=(13, 17, 9, 4))
    the_plan = plan(import_onnx(made))
    calls = [s for s in the_plan.steps if isinstance(s, Call)]
    assert [len(c.nodes) for c in calls] == [2, 2, 1, 1]  # Gemm + Relu twice, Gemm, Softmax
    assert_matches_onnxruntime(made, {"x": random(np.random.default_rng(0), 5, 13)})


def test_bottleneck_folds_batch_norms_and_fuses_the_residual_add():
    made = examples.bottleneck(channels=12, width=5, size=7)
    graph = import_onnx(made)
    assert not any(n.op == "BatchNormalization" for n in graph.nodes)
    the_plan = plan(graph)
    assert len(the_plan.tasks) == 3
    last = [s for s in the_plan.steps if isinstance(s, Call)][-1]
    assert len(last.nodes) == 3 and last.inputs[0] != "x" and "x" in last.inputs  # conv, add, relu
    assert_matches_onnxruntime(made, {"x": random(np.random.default_rng(1), 1, 12, 7, 7)})


def test_bert_layer_matches_onnxruntime():
    made = examples.bert_layer(seq=6, hidden=16, heads=2, ffn=24)
    network = assert_matches_onnxruntime(made, {"x": random(np.random.default_rng(2), 1, 6, 16)})
    report = network.report()
    assert "default (untuned)" in report and "tuned" not in report.replace("untuned", "")


def test_profile_times_every_called_task_alone_and_in_sequence():
    made = examples.bottleneck(channels=8, width=4, size=5)
    network = compile_network(made)
    feeds = network.random_inputs(seed=5)
    before = network(**feeds)
    called = {s.task for s in network.plan.steps if isinstance(s, Call)}
    for seconds in (network.profile(feeds), network.profile(feeds, in_sequence=True, runs=3)):
        assert len(seconds) == len(network.kernels)
        assert all((t > 0) == (k in called) for k, t in enumerate(seconds))
    for a, b in zip(network(**feeds), before):  # profiling wrote only the network's own buffers
        np.testing.assert_array_equal(a, b)
    assert "all kernels" in network.report(feeds, in_sequence=True)
    with pytest.raises(ValueError, match="runs"):
        network.profile(feeds, in_sequence=True, runs=0)


def test_identical_groups_are_one_task_whose_weight_counts_them():
    node = helper.make_node
    rng = np.random.default_rng(3)
    nodes = [node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), node("Relu", ["a"], ["b"]),
             node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]), node("Relu", ["c"], ["y"])]
    weights = {"w1": random(rng, 3, 3, 3, 3), "w2": random(rng, 3, 3, 3, 3)}
    made = model(nodes, {"x": [1, 3, 5, 5]}, {"y": None}, weights)
    the_plan = plan(import_onnx(made))
    assert [t.weight for t in the_plan.tasks] == [2]
    assert_matches_onnxruntime(made, {"x": random(rng, 1, 3, 5, 5)})


def test_a_task_is_a_workload_of_the_language_that_parses_back():
    the_plan = plan(import_onnx(examples.bottleneck(channels=8, width=4, size=5)))
    for task in the_plan.tasks:
        again = parse(task.workload.source)
        assert again.canonical_text == task.workload.canonical_text


def test_a_reshape_alone_is_a_view_and_intermediates_share_buffers():
    made = examples.mlp(batch=2, sizes=(6, 5, 4, 3))
    network = compile_network(made)
    # h0 -> r0 (fused), h1 -> r1 (fused), h2, y: two intermediates alive at once at most.
    assert network.intermediate_bytes <= 2 * 4 * 5 * 2 + 64 * 2
    node = helper.make_node
    rng = np.random.default_rng(4)
    made = model([node("Conv", ["x", "w"], ["c"]), node("Flatten", ["c"], ["f"]), node("MatMul", ["f", "m"], ["y"])],
                 {"x": [2, 3, 4, 5]}, {"y": None}, {"w": random(rng, 6, 3, 1, 1), "m": random(rng, 120, 7)})
    steps = plan(import_onnx(made)).steps
    assert [type(s).__name__ for s in steps] == ["Call", "View", "Call"]  # the flatten reads the conv's buffer
    assert_matches_onnxruntime(made, {"x": random(rng, 2, 3, 4, 5)})


def test_inputs_by_name_or_position_and_bad_inputs_are_one_line_errors():
    made = examples.mlp(batch=2, sizes=(6, 5, 3))
    network = compile_network(made)
    x = random(np.random.default_rng(5), 2, 6)
    np.testing.assert_array_equal(network(x)[0], network(x=x)[0])
    for call, message in [(lambda: network(x.astype(np.float64)), "must be float32"),
                          (lambda: network(x[:1]), "must have shape [2, 6]"),
                          (lambda: network(), "missing input(s) x"),
                          (lambda: network(x, x), "takes 1 input(s)"),
                          (lambda: network(z=x), "no input 'z'")]:
        with pytest.raises(ModelError, match=re.escape(message)) as err:
            call()
        assert "\n" not in str(err.value)


def test_unsupported_operators_symbolic_shapes_and_damaged_files_are_clear_errors(tmp_path):
    node = helper.make_node
    made = model([node("NonMaxSuppression", ["x", "x"], ["y"])], {"x": [1, 2, 4]}, {"y": None})
    with pytest.raises(ModelError, match=r"node 'NonMaxSuppression_0' \(NonMaxSuppression\): operator "
                                         r"NonMaxSuppression is not supported; supported: .*Conv"):
        import_onnx(made)
    made = model([node("Relu", ["x"], ["y"])], {"x": ["batch", 3]}, {"y": None})
    with pytest.raises(ModelError, match=r"input 'x' has symbolic dimensions \['batch'\].*shapes="):
        import_onnx(made)
    assert import_onnx(made, shapes={"x": [4, 3]}).inputs == {"x": (4, 3)}
    with pytest.raises(ModelError, match=r"shape \[4, 2\] given, the model says \['batch', 3\]"):
        import_onnx(made, shapes={"x": [4, 2]})
    damaged = tmp_path / "damaged.onnx"
    damaged.write_bytes(made.SerializeToString()[:-7] + b"\xff\xff\xff")
    with pytest.raises(ModelError, match="damaged.onnx"):
        import_onnx(damaged)
    with pytest.raises(ModelError, match="no such model file"):
        import_onnx(tmp_path / "missing.onnx")
    made = model([node("Conv", ["x", "w"], ["y"], auto_pad="WRONG")], {"x": [1, 1, 3, 3]}, {"y": None},
                 {"w": np.ones((1, 1, 1, 1), np.float32)})
    with pytest.raises(ModelError, match=r"node 'Conv_0' \(Conv\): auto_pad 'WRONG' is not known"):
        import_onnx(made)


def test_shape_arithmetic_on_constants_is_folded():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as PyTorch exports a flatten."""
    node = helper.make_node
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["n"], axis=0),
             node("Unsqueeze", ["n", "axes"], ["n1"]), node("Concat", ["n1", "minus"], ["target"], axis=0),
             node("Reshape", ["x", "target"], ["r"]), node("Relu", ["r"], ["y"])]
    weights = {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64), "minus": np.array([-1], np.int64)}
    made = model(nodes, {"x": [3, 2, 5]}, {"y": None}, weights)
    graph = import_onnx(made)
    assert [n.op for n in graph.nodes] == ["Reshape", "Relu"]
    assert graph.shapes["y"] == (3, 10)
    assert_matches_onnxruntime(made, {"x": random(np.random.default_rng(6), 3, 2, 5)})


@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "inception_v1", "shufflenet", "densenet121"])
def test_light_models_of_the_onnx_package_import_and_match_onnxruntime(name):
    rng = np.random.default_rng(7)
    made = examples.light_model(name, seed=7)
    graph = import_onnx(made)
    (input_name, shape), = graph.inputs.items()
    network = compile_network(graph)
    assert_matches_onnxruntime(made, {input_name: random(rng, *shape)}, network)
    logits = network(random(rng, *shape))[-1]
    assert np.std(logits) > 1e-3  # not a constant: the comparison means something

def test_tune_network_records_per_task_and_compile_network_uses_them(tmp_path):
    from metasched.network import tune_network
    made = examples.mlp(batch=3, sizes=(10, 12, 5))
    db = tmp_path / "net.db"
    result = tune_network(made, trials=9, database=db, batch_size=3)
    assert result.trials == 9 and len(result.tasks) == 3  # gemm + relu, gemm, softmax
    again = tune_network(made, trials=9, database=db, batch_size=3)  # what the database holds counts
    assert again.trials == 0
    network = assert_matches_onnxruntime(made, {"x": random(np.random.default_rng(8), 3, 10)},
                                         compile_network(made, database=db))
    assert all(entry.tuned for entry in network.kernels)
    assert "default (untuned)" not in network.report()


def test_a_saved_network_runs_in_another_process_without_compiling(tmp_path):
    import subprocess
    import sys
    made = examples.bottleneck(channels=8, width=4, size=5)
    network = compile_network(made)
    path = tmp_path / "net.msn"
    network.save(path)
    with pytest.raises(ModelError, match="exists; save"):
        network.save(path)  # nothing saved is overwritten unless asked
    x = random(np.random.default_rng(9), 1, 8, 5, 5)
    np.save(tmp_path / "x.npy", x)
    script = ("import sys, numpy as np, metasched\n"
              "import metasched.codegen.compiler as c\n"
              "c.compile_artifact = None  # loading must not compile\n"
              f"net = metasched.load_network({str(path)!r})\n"
              f"np.save({str(tmp_path / 'y.npy')!r}, net(np.load({str(tmp_path / 'x.npy')!r}))[0])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), network(x)[0])
    (tmp_path / "bad.msn").write_bytes(b"not a pickle")
    for bad, message in [(tmp_path / "bad.msn", "not a saved network"), (tmp_path / "none.msn", "no such file")]:
        with pytest.raises(ModelError, match=message):
            load_network(bad)


def test_float_operators_on_weights_fold_through_the_reference_evaluator():
    node = helper.make_node
    rng = np.random.default_rng(10)
    made = model([node("Erf", ["w"], ["e"]), node("Softmax", ["e"], ["s"], axis=-1), node("Add", ["x", "s"], ["y"])],
                 {"x": [3, 4]}, {"y": None}, {"w": random(rng, 3, 4)})
    graph = import_onnx(made)
    assert [n.op for n in graph.nodes] == ["Add"]
    assert_matches_onnxruntime(made, {"x": random(rng, 3, 4)})
