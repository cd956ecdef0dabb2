"""Every operator alone, on awkward shapes drawn by hypothesis (odd sizes, strides, padding,
groups, broadcasting), compiled with default schedules and compared with onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_cases import assert_matches_onnxruntime, conv_out, helper, model, random

FEW = settings(max_examples=4)
seeds = st.integers(0, 2**16)


UNARY = ["Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Abs", "Neg", "Softplus", "HardSwish", "Identity"]


@pytest.mark.parametrize("op", UNARY + ["LeakyRelu", "HardSigmoid", "Sqrt", "Log", "Reciprocal"])
@FEW
@given(shape=st.lists(st.integers(1, 7), min_size=1, max_size=4), seed=seeds)
def test_unary(op, shape, seed):
    rng = np.random.default_rng(seed)
    positive = op in ("Sqrt", "Log", "Reciprocal")
    x = random(rng, *shape, low=0.1 if positive else -3.0, high=3.0)
    attrs = {"alpha": 0.3} if op in ("LeakyRelu", "HardSigmoid") else {}
    made = model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": shape}, {"y": None})
    assert_matches_onnxruntime(made, {"x": x})


@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), seed=seeds,
       approximate=st.sampled_from(["none", "tanh"]), low=st.floats(-2, 0), span=st.floats(0, 2))
@FEW
def test_gelu_and_clip(shape, seed, approximate, low, span):
    rng = np.random.default_rng(seed)
    x = random(rng, *shape, low=-4, high=4)
    bounds = {"lo": np.float32(low), "hi": np.float32(low + span)}
    made = model([helper.make_node("Gelu", ["x"], ["g"], approximate=approximate),
                  helper.make_node("Clip", ["g", "lo", "hi"], ["y"])],
                 {"x": shape}, {"y": None}, bounds, opset=20)
    assert_matches_onnxruntime(made, {"x": x})


def broadcastable(draw, rank_max=4):
    out = draw(st.lists(st.integers(1, 5), min_size=1, max_size=rank_max))
    shapes = []
    for _ in range(2):
        rank = draw(st.integers(1, len(out)))
        own = [d if draw(st.booleans()) else 1 for d in out[len(out) - rank:]]
        shapes.append(own)
    return shapes


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"])
@FEW
@given(data=st.data(), seed=seeds, weight=st.booleans())
def test_binary_broadcast(op, data, seed, weight):
    rng = np.random.default_rng(seed)
    a_shape, b_shape = broadcastable(data.draw)
    if op == "PRelu":  # the slope broadcasts to the input, not the other way round
        a_shape = list(np.broadcast_shapes(tuple(a_shape), tuple(b_shape)))
    a = random(rng, *a_shape, low=0.5 if op == "Pow" else -2, high=2)
    b = random(rng, *b_shape, low=0.5, high=2) if op in ("Div", "Pow") else random(rng, *b_shape)
    inputs, weights = {"a": a_shape}, {}
    if weight:
        weights["b"] = b
    else:
        inputs["b"] = b_shape
    made = model([helper.make_node(op, ["a", "b"], ["y"])], inputs, {"y": None}, weights)
    feeds = {"a": a} if weight else {"a": a, "b": b}
    assert_matches_onnxruntime(made, feeds)


@st.composite
def conv_cases(draw):
    dims = draw(st.sampled_from([1, 2, 2, 3]))
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    depthwise = draw(st.booleans()) and groups > 1
    cg = 1 if depthwise else draw(st.integers(1, 3))
    fg = 1 if depthwise else draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(dims)]
    strides = [draw(st.integers(1, 3)) for _ in range(dims)]
    dilations = [draw(st.integers(1, 2)) for _ in range(dims)]
    pads = [draw(st.integers(0, 2)) for _ in range(2 * dims)]
    sizes = [draw(st.integers((k - 1) * d + 1, 9)) for k, d in zip(kernel, dilations)]
    return dims, groups, cg, fg, kernel, strides, dilations, pads, sizes, draw(st.booleans())


@given(case=conv_cases(), seed=seeds, relu=st.booleans())
@settings(max_examples=8)
def test_conv(case, seed, relu):
    dims, groups, cg, fg, kernel, strides, dilations, pads, sizes, bias = case
    rng = np.random.default_rng(seed)
    c, f = cg * groups, fg * groups
    x = random(rng, 1, c, *sizes)
    weights = {"w": random(rng, f, cg, *kernel)}
    inputs = ["x", "w"]
    if bias:
        weights["b"] = random(rng, f)
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c"], group=groups, kernel_shape=kernel, strides=strides,
                              dilations=dilations, pads=pads)]
    nodes.append(helper.make_node("Relu" if relu else "Identity", ["c"], ["y"]))
    made = model(nodes, {"x": list(x.shape)}, {"y": None}, weights)
    assert_matches_onnxruntime(made, {"x": x})


@FEW
@given(data=st.data(), seed=seeds, weight=st.booleans())
def test_matmul(data, seed, weight):
    rng = np.random.default_rng(seed)
    m, k, n = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 7)), data.draw(st.integers(1, 6))
    batch_a = data.draw(st.lists(st.integers(1, 3), max_size=2))
    kept = data.draw(st.integers(0, len(batch_a)))  # b's batch: the last ``kept`` of a's, some of them 1
    batch_b = [d if data.draw(st.booleans()) else 1 for d in batch_a][len(batch_a) - kept:]
    a_shape = batch_a + [m, k] if data.draw(st.integers(0, 4)) else [k]
    b_shape = batch_b + [k, n] if data.draw(st.integers(0, 4)) else [k]
    a, b = random(rng, *a_shape), random(rng, *b_shape)
    inputs, weights = {"a": a_shape}, {}
    if weight:
        weights["b"] = b
    else:
        inputs["b"] = b_shape
    made = model([helper.make_node("MatMul", ["a", "b"], ["y"])], inputs, {"y": None}, weights)
    assert_matches_onnxruntime(made, {"a": a} if weight else {"a": a, "b": b})


@FEW
@given(m=st.integers(1, 6), k=st.integers(1, 7), n=st.integers(1, 6), trans_a=st.booleans(),
       trans_b=st.booleans(), alpha=st.sampled_from([1.0, 0.5]), beta=st.sampled_from([1.0, 2.0, 0.0]),
       c_shape=st.sampled_from(["none", "row", "full", "scalar"]), seed=seeds)
def test_gemm(m, k, n, trans_a, trans_b, alpha, beta, c_shape, seed):
    rng = np.random.default_rng(seed)
    a = random(rng, *((k, m) if trans_a else (m, k)))
    weights = {"b": random(rng, *((n, k) if trans_b else (k, n)))}
    inputs = ["a", "b"]
    if c_shape != "none":
        weights["c"] = random(rng, *{"row": (n,), "full": (m, n), "scalar": (1,)}[c_shape])
        inputs.append("c")
    made = model([helper.make_node("Gemm", inputs, ["y"], transA=int(trans_a), transB=int(trans_b),
                                   alpha=alpha, beta=beta)], {"a": list(a.shape)}, {"y": None}, weights)
    assert_matches_onnxruntime(made, {"a": a})


@st.composite
def pool_cases(draw):
    dims = draw(st.sampled_from([1, 2, 2, 3]))
    kernel = [draw(st.integers(1, 3)) for _ in range(dims)]
    strides = [draw(st.integers(1, 3)) for _ in range(dims)]
    pads = [draw(st.integers(0, k // 2)) for k in kernel] * 2  # onnxruntime: pad < kernel
    sizes = [draw(st.integers(k, 9)) for k in kernel]
    return dims, kernel, strides, pads, sizes, draw(st.booleans()), draw(st.booleans())


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@FEW
@given(case=pool_cases(), seed=seeds)
def test_pool(op, case, seed):
    dims, kernel, strides, pads, sizes, ceil, include = case
    rng = np.random.default_rng(seed)
    x = random(rng, 1, 2, *sizes)
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads, ceil_mode=int(ceil))
    if op == "AveragePool":
        attrs["count_include_pad"] = int(include)
    made = model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": list(x.shape)}, {"y": None})
    assert_matches_onnxruntime(made, {"x": x})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@FEW
@given(sizes=st.lists(st.integers(1, 7), min_size=1, max_size=3), seed=seeds)
def test_global_pool(op, sizes, seed):
    x = random(np.random.default_rng(seed), 2, 3, *sizes)
    made = model([helper.make_node(op, ["x"], ["y"])], {"x": list(x.shape)}, {"y": None})
    assert_matches_onnxruntime(made, {"x": x})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 17])
@FEW
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data(), seed=seeds)
def test_softmax(op, opset, shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = random(np.random.default_rng(seed), *shape, low=-5, high=5)
    made = model([helper.make_node(op, ["x"], ["y"], axis=axis)], {"x": shape}, {"y": None}, opset=opset)
    assert_matches_onnxruntime(made, {"x": x})


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL2"])
@FEW
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data(), seed=seeds,
       keepdims=st.booleans())
def test_reduce(op, shape, data, seed, keepdims):
    axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), max_size=len(shape),
                              unique_by=lambda a: a % len(shape)))
    x = random(np.random.default_rng(seed), *shape)
    weights = {"axes": np.array(axes, dtype=np.int64)} if axes else {}
    made = model([helper.make_node(op, ["x", "axes"] if axes else ["x"], ["y"], keepdims=int(keepdims))],
                 {"x": shape}, {"y": None}, weights, opset=18)
    assert_matches_onnxruntime(made, {"x": x})


@FEW
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data(), seed=seeds,
       bias=st.booleans())
def test_layer_normalization(shape, data, seed, bias):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(seed)
    x = random(rng, *shape, low=-3, high=3)
    param = shape[axis % len(shape):]
    weights = {"scale": random(rng, *param)}
    inputs = ["x", "scale"]
    if bias:
        weights["bias"] = random(rng, *param)
        inputs.append("bias")
    made = model([helper.make_node("LayerNormalization", inputs, ["y"], axis=axis, epsilon=1e-5)],
                 {"x": shape}, {"y": None}, weights)
    assert_matches_onnxruntime(made, {"x": x})


@FEW
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=4), seed=seeds)
def test_batch_normalization_alone(shape, seed):
    rng = np.random.default_rng(seed)
    c = shape[1]
    weights = {"s": random(rng, c), "b": random(rng, c), "m": random(rng, c), "v": random(rng, c, low=0.5, high=2)}
    made = model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
                 {"x": shape}, {"y": None}, weights)
    assert_matches_onnxruntime(made, {"x": random(rng, *shape)})


@FEW
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data(), seed=seeds)
def test_reshapes_and_transpose(shape, data, seed):
    """Reshape (with 0 and -1), Flatten, Unsqueeze, Squeeze and Transpose, each after an
    element-wise operator so that it is computed, not only a view."""
    rng = np.random.default_rng(seed)
    x = random(rng, *shape)
    size = int(np.prod(shape))
    divisors = [d for d in range(1, size + 1) if size % d == 0]
    first = data.draw(st.sampled_from(divisors))
    target = np.array([first, -1], dtype=np.int64)
    perm = data.draw(st.permutations(range(len(shape))))
    axis = data.draw(st.integers(0, len(shape)))
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["a"]),
             helper.make_node("Relu", ["x"], ["r2"]),
             helper.make_node("Flatten", ["r2"], ["b"], axis=axis),
             helper.make_node("Unsqueeze", ["b", "axes"], ["c"]),
             helper.make_node("Squeeze", ["c", "axes"], ["d"]),
             helper.make_node("Transpose", ["x"], ["t"], perm=list(perm)),
             helper.make_node("Neg", ["t"], ["e"])]
    weights = {"shape": target, "axes": np.array([1], dtype=np.int64)}
    made = model(nodes, {"x": shape}, {"a": None, "d": None, "e": None}, weights)
    assert_matches_onnxruntime(made, {"x": x})


@FEW
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data(), seed=seeds)
def test_concat_slice_split_pad(shape, data, seed):
    rng = np.random.default_rng(seed)
    rank = len(shape)
    axis = data.draw(st.integers(0, rank - 1))
    other = list(shape)
    other[axis] = data.draw(st.integers(1, 4))
    x, y = random(rng, *shape), random(rng, *other)
    total = shape[axis] + other[axis]
    start = data.draw(st.integers(-total, total - 1))
    end = data.draw(st.integers(-total - 1, total + 2))
    step = data.draw(st.sampled_from([1, 2, 3, -1, -2]))
    if len(range(*slice(start, end, step).indices(total))) == 0:
        end, step = total, 1
        start = min(max(start, 0), total - 1)
    pads = [data.draw(st.integers(0, 2)) for _ in range(2 * rank)]
    sizes = [total - 1, 1] if total > 1 else [1]
    nodes = [helper.make_node("Concat", ["x", "y"], ["c"], axis=axis),
             helper.make_node("Slice", ["c", "starts", "ends", "axes", "steps"], ["s"]),
             helper.make_node("Pad", ["c", "pads", "value"], ["p"]),
             helper.make_node("Split", ["c", "split"], [f"part{k}" for k in range(len(sizes))], axis=axis)]
    weights = {"starts": np.array([start]), "ends": np.array([end]), "axes": np.array([axis]),
               "steps": np.array([step]), "pads": np.array(pads), "value": np.array(0.5, np.float32),
               "split": np.array(sizes)}
    outputs = {"s": None, "p": None, **{f"part{k}": None for k in range(len(sizes))}}
    made = model(nodes, {"x": shape, "y": other}, outputs, weights)
    assert_matches_onnxruntime(made, {"x": x, "y": y})


@FEW
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data(), seed=seeds)
def test_gather_and_expand(shape, data, seed):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    start = data.draw(st.integers(-n, n - 1)) % n
    step = data.draw(st.integers(-2, 2))
    count = max(1, len(range(start, n if step >= 0 else -1, step or 1)) if step else 2)
    indices = np.array([start + (step * j) for j in range(count)], dtype=np.int64)
    scalar = np.array(data.draw(st.integers(-n, n - 1)), dtype=np.int64)
    x = random(rng, *shape)
    nodes = [helper.make_node("Gather", ["x", "indices"], ["g"], axis=axis),
             helper.make_node("Gather", ["x", "scalar"], ["h"], axis=axis),
             helper.make_node("Expand", ["x", "target"], ["e"])]
    target = np.array([2] + [d if data.draw(st.booleans()) else 1 for d in shape], dtype=np.int64)
    made = model(nodes, {"x": shape}, {"g": None, "h": None, "e": None},
                 {"indices": indices, "scalar": scalar, "target": target})
    assert_matches_onnxruntime(made, {"x": x})


@FEW
@given(c=st.integers(1, 7), size=st.sampled_from([1, 3, 5]), seed=seeds)  # onnxruntime: odd sizes
def test_lrn(c, size, seed):
    x = random(np.random.default_rng(seed), 1, c, 3, 4)
    made = model([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=1e-3, beta=0.75, bias=2.0)],
                 {"x": list(x.shape)}, {"y": None})
    assert_matches_onnxruntime(made, {"x": x})
