"""Small ONNX models built with ``onnx.helper``: the networks of the tests, the benchmark and
the notebook, at any size. Weights are random (seeded); what they compute does not matter,
only that two implementations compute the same."""
from __future__ import annotations

import numpy as np

from metasched.graph.onnx_import import _onnx


def _weights(rng, scale: float = 0.1):
    def make(*shape):
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    return make


def _model(nodes, inputs, outputs, weights, name: str, opset: int = 17):
    onnx = _onnx()
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, name, [value(k, onnx.TensorProto.FLOAT, s) for k, s in inputs.items()],
        [value(k, onnx.TensorProto.FLOAT, s) for k, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def mlp(batch: int = 64, sizes=(784, 1024, 1024, 10), seed: int = 0):
    """Dense layers with ReLU between them (``Gemm``, weights ``[out, in]`` as PyTorch exports
    them), then softmax."""
    node = _onnx().helper.make_node
    w = _weights(np.random.default_rng(seed))
    nodes, weights, x = [], {}, "x"
    for k, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        weights[f"fc{k}.weight"], weights[f"fc{k}.bias"] = w(n_out, n_in), w(n_out)
        nodes.append(node("Gemm", [x, f"fc{k}.weight", f"fc{k}.bias"], [f"h{k}"], transB=1))
        x = f"h{k}"
        if k < len(sizes) - 2:
            nodes.append(node("Relu", [x], [f"r{k}"]))
            x = f"r{k}"
    nodes.append(node("Softmax", [x], ["y"], axis=-1))
    return _model(nodes, {"x": [batch, sizes[0]]}, {"y": [batch, sizes[-1]]}, weights, "mlp")


def bottleneck(channels: int = 256, width: int = 64, size: int = 56, seed: int = 0):
    """ResNet-50's bottleneck block: 1x1, 3x3 and 1x1 convolutions with batch norms and ReLUs,
    the input added back before the last ReLU."""
    node = _onnx().helper.make_node
    rng = np.random.default_rng(seed)
    w = _weights(rng)
    nodes, weights, x = [], {}, "x"
    for k, (c_in, c_out, kernel) in enumerate([(channels, width, 1), (width, width, 3), (width, channels, 1)]):
        weights[f"conv{k}.weight"] = w(c_out, c_in, kernel, kernel)
        for p, value in (("scale", 1 + w(c_out)), ("bias", w(c_out)), ("mean", w(c_out)),
                         ("var", (np.abs(w(c_out)) + 0.5).astype(np.float32))):
            weights[f"bn{k}.{p}"] = value
        pad = kernel // 2
        nodes.append(node("Conv", [x, f"conv{k}.weight"], [f"c{k}"], kernel_shape=[kernel, kernel],
                          pads=[pad] * 4))
        nodes.append(node("BatchNormalization", [f"c{k}"] + [f"bn{k}.{p}" for p in ("scale", "bias", "mean", "var")],
                          [f"n{k}"]))
        x = f"n{k}"
        if k < 2:
            nodes.append(node("Relu", [x], [f"r{k}"]))
            x = f"r{k}"
    nodes.append(node("Add", [x, "x"], ["sum"]))
    nodes.append(node("Relu", ["sum"], ["y"]))
    shape = [1, channels, size, size]
    return _model(nodes, {"x": shape}, {"y": shape}, weights, "bottleneck")


def bert_layer(seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072, seed: int = 0):
    """A BERT-base encoder layer as PyTorch exports it (opset 17): Q, K and V projections,
    reshaped into heads, scaled dot-product attention with softmax, the output projection,
    residual and layer norm, a GELU feed-forward network (``Erf``), residual and layer norm."""
    onnx = _onnx()
    node = onnx.helper.make_node
    w = _weights(np.random.default_rng(seed), scale=0.05)
    d = hidden // heads
    weights = {"heads_shape": np.array([1, seq, heads, d], np.int64),
               "merge_shape": np.array([1, seq, hidden], np.int64),
               "scale": np.array(1 / np.sqrt(d), np.float32), "sqrt2": np.array(np.sqrt(2), np.float32),
               "one": np.array(1, np.float32), "half": np.array(0.5, np.float32)}
    nodes = []

    def dense(name, x, n_in, n_out):
        weights[f"{name}.weight"], weights[f"{name}.bias"] = w(n_in, n_out), w(n_out)
        nodes.append(node("MatMul", [x, f"{name}.weight"], [f"{name}.mm"]))
        nodes.append(node("Add", [f"{name}.mm", f"{name}.bias"], [f"{name}.out"]))
        return f"{name}.out"

    def layer_norm(name, x):
        weights[f"{name}.weight"], weights[f"{name}.bias"] = 1 + w(hidden), w(hidden)
        nodes.append(node("LayerNormalization", [x, f"{name}.weight", f"{name}.bias"], [f"{name}.out"],
                          axis=-1, epsilon=1e-12))
        return f"{name}.out"

    heads_of = {}
    for part, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        out = dense(part, "x", hidden, hidden)
        nodes.append(node("Reshape", [out, "heads_shape"], [f"{part}.heads"]))
        nodes.append(node("Transpose", [f"{part}.heads"], [f"{part}.t"], perm=perm))
        heads_of[part] = f"{part}.t"
    nodes += [node("MatMul", [heads_of["q"], heads_of["k"]], ["scores"]),
              node("Mul", ["scores", "scale"], ["scaled"]),
              node("Softmax", ["scaled"], ["probs"], axis=-1),
              node("MatMul", ["probs", heads_of["v"]], ["context"]),
              node("Transpose", ["context"], ["context.t"], perm=[0, 2, 1, 3]),
              node("Reshape", ["context.t", "merge_shape"], ["context.merged"])]
    attended = dense("attn_out", "context.merged", hidden, hidden)
    nodes.append(node("Add", [attended, "x"], ["res1"]))
    h = layer_norm("ln1", "res1")
    up = dense("ffn_in", h, hidden, ffn)
    nodes += [node("Div", [up, "sqrt2"], ["g.div"]), node("Erf", ["g.div"], ["g.erf"]),
              node("Add", ["g.erf", "one"], ["g.add"]), node("Mul", [up, "g.add"], ["g.mul"]),
              node("Mul", ["g.mul", "half"], ["gelu"])]
    down = dense("ffn_out", "gelu", ffn, hidden)
    nodes.append(node("Add", [down, h], ["res2"]))
    y = layer_norm("ln2", "res2")
    nodes.append(node("Identity", [y], ["y"]))
    shape = [1, seq, hidden]
    return _model(nodes, {"x": shape}, {"y": shape}, weights, "bert_layer")


LIGHT_MODELS = ("resnet50", "squeezenet", "inception_v1", "shufflenet", "densenet121")


def light_model(name: str, seed: int = 0):
    """One of the onnx package's light models (``onnx/backend/test/data/light/``) with random
    weights instead of its constant ones (each weight there is a ``ConstantOfShape`` of 0.02,
    which makes every output the same), scaled by fan-in so that activations keep their size
    through the layers; the logits (the softmax's input, where there is one) an output too."""
    import os
    onnx = _onnx()
    if name not in LIGHT_MODELS:
        raise ValueError(f"light_model: {name!r} is not one of {', '.join(LIGHT_MODELS)}")
    model = onnx.load(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light", f"light_{name}.onnx"))
    rng = np.random.default_rng(seed)
    graph = model.graph
    shapes = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    positive = {n.input[k] for n in graph.node if n.op_type == "BatchNormalization" for k in (1, 4)}
    kept = []
    for node in graph.node:
        if node.op_type != "ConstantOfShape":
            kept.append(node)
            continue
        shape = [int(d) for d in shapes[node.input[0]]]
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 0
        if node.output[0] in positive:  # a batch norm's scale or variance
            value = rng.uniform(0.5, 1.5, shape)
        else:
            value = rng.standard_normal(shape) * (np.sqrt(2.0 / fan_in) if fan_in else 0.1)
        graph.initializer.append(onnx.numpy_helper.from_array(value.astype(np.float32), node.output[0]))
    del graph.node[:]
    graph.node.extend(kept)
    logits = [n.input[0] for n in graph.node if n.op_type == "Softmax"]
    graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in logits)
    return model
