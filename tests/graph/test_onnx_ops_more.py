"""ConvTranspose, Resize and Upsample on awkward shapes drawn by hypothesis, compiled with
default schedules and compared with onnxruntime (ConvTranspose in 3-D, which onnxruntime does
not run, with its definition); a LayerNorm that older exporters write out is one task, and
its look-alikes are left alone."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_cases import assert_matches_onnxruntime, helper, model, random
from metasched import ModelError
from metasched.graph import import_onnx, plan
from metasched.network import compile_network

FEW = settings(max_examples=4)
MORE = settings(max_examples=40)
seeds = st.integers(0, 2**16)


# ---- ConvTranspose --------------------------------------------------------------------------------

@st.composite
def conv_transpose_cases(draw, dims=st.sampled_from([1, 2, 2])):
    dims = draw(dims)
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg, fg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 4)) for _ in range(dims)]
    strides = [draw(st.integers(1, 3)) for _ in range(dims)]
    dilations = [draw(st.integers(1, 2)) for _ in range(dims)]
    extra = [draw(st.integers(0, s - 1)) for s in strides]  # output_padding below the stride
    sizes = [draw(st.integers(1, 6)) for _ in range(dims)]
    full = [(n - 1) * s + (k - 1) * d + 1 + a for n, s, k, d, a in zip(sizes, strides, kernel, dilations, extra)]
    attrs = dict(group=groups, kernel_shape=kernel, strides=strides, dilations=dilations, output_padding=extra)
    how = draw(st.sampled_from(["pads", "pads", "SAME_UPPER", "SAME_LOWER", "VALID", "output_shape"]))
    if how == "pads":
        cuts = [[draw(st.integers(0, 2)), draw(st.integers(0, 2))] for _ in range(dims)]
        cuts = [[min(b, f - 1), min(a, f - 1 - min(b, f - 1))] for (b, a), f in zip(cuts, full)]
        attrs["pads"] = [b for b, _ in cuts] + [a for _, a in cuts]
    elif how == "output_shape":
        attrs["output_shape"] = [f - draw(st.integers(0, min(3, f - 1))) for f in full]
    else:
        attrs["auto_pad"] = how
    return groups, cg, fg, kernel, sizes, attrs, draw(st.booleans())


def conv_transpose_model(rng, case, relu: bool):
    groups, cg, fg, kernel, sizes, attrs, bias = case
    x = random(rng, 1, cg * groups, *sizes)
    weights = {"w": random(rng, cg * groups, fg, *kernel)}
    if bias:
        weights["b"] = random(rng, fg * groups)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"] if bias else ["x", "w"], ["c"], **attrs),
             helper.make_node("Relu" if relu else "Neg", ["c"], ["y"])]
    return model(nodes, {"x": list(x.shape)}, {"y": None}, weights), x


@FEW
@given(case=conv_transpose_cases(), seed=seeds, relu=st.booleans())
def test_conv_transpose(case, seed, relu):
    rng = np.random.default_rng(seed)
    made, x = conv_transpose_model(rng, case, relu)
    network = assert_matches_onnxruntime(made, {"x": x})
    assert len(network.plan.tasks) == 1  # the element-wise epilogue fuses into the anchor


@pytest.mark.slow
@MORE
@given(case=conv_transpose_cases(), seed=seeds, relu=st.booleans())
def test_conv_transpose_more(case, seed, relu):
    test_conv_transpose.hypothesis.inner_test(case, seed, relu)


def scattered(x, w, strides, dilations, pads, groups):
    """ConvTranspose by its definition: each input element adds its weighted kernel into the
    output, which the pads then crop."""
    n, c, *sizes = x.shape
    fg, kernel = w.shape[1], w.shape[2:]
    full = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(sizes, strides, kernel, dilations)]
    y = np.zeros((n, fg * groups, *full))
    cg = c // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg].astype(np.float64)
        for tap in np.ndindex(*kernel):
            part = np.einsum("nc...,cf->nf...", xs, w[g * cg:(g + 1) * cg, :, *tap])
            where = tuple(slice(t * d, t * d + (i - 1) * s + 1, s)
                          for t, d, i, s in zip(tap, dilations, sizes, strides))
            y[(slice(None), slice(g * fg, (g + 1) * fg), *where)] += part
    dims = len(sizes)
    return y[(slice(None), slice(None), *(slice(b, f - a) for b, a, f in zip(pads[:dims], pads[dims:], full)))]


def test_conv_transpose_3d_against_its_definition():
    """onnxruntime runs ConvTranspose in 1-D and 2-D only."""
    rng = np.random.default_rng(7)
    x, w = random(rng, 1, 4, 3, 2, 3), random(rng, 4, 3, 2, 3, 2)
    attrs = dict(group=2, strides=[2, 1, 3], dilations=[1, 2, 1], pads=[1, 0, 1, 0, 2, 1])
    made = model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)], {"x": list(x.shape)}, {"y": None},
                 {"w": w})
    got = compile_network(made)(x)[0]
    want = scattered(x, w, attrs["strides"], attrs["dilations"], attrs["pads"], 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_transpose_output_shape_beyond_the_full_output_is_a_one_line_error():
    made = model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2], output_shape=[20], name="up")],
                 {"x": [1, 2, 5]}, {"y": None}, {"w": np.ones((2, 3, 3), np.float32)})
    with pytest.raises(ModelError, match=r"node 'up' \(ConvTranspose\): output_shape \[20\] is larger"):
        import_onnx(made)


# ---- Resize and Upsample --------------------------------------------------------------------------

SCALES = [0.5, 0.6, 0.75, 1.0, 1.3, 1.5, 2.0, 3.0]
COORDINATES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
ROUNDING = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


@st.composite
def resize_cases(draw):
    rank = draw(st.sampled_from([2, 4, 4]))
    shape = [draw(st.integers(1, 3)) for _ in range(rank - 2)] + [draw(st.integers(1, 7)) for _ in range(2)]
    mode = draw(st.sampled_from(["nearest", "linear"]))
    attrs = dict(mode=mode, coordinate_transformation_mode=draw(st.sampled_from(COORDINATES)))
    if mode == "nearest":
        attrs["nearest_mode"] = draw(st.sampled_from(ROUNDING))
    resized = [draw(st.sampled_from(SCALES)) for _ in range(2)]
    if draw(st.booleans()):  # scales (an output of at least one element on each axis)
        resized = [s if int(np.float32(s) * np.float32(n)) > 0 else 1.0 for s, n in zip(resized, shape[-2:])]
        given = ("scales", np.array([1.0] * (rank - 2) + resized, np.float32))
    else:
        given = ("sizes", np.array(shape[:-2] + [draw(st.integers(1, 12)) for _ in range(2)], np.int64))
    return shape, attrs, given


@FEW
@given(case=resize_cases(), seed=seeds)
def test_resize(case, seed):
    shape, attrs, (kind, value) = case
    inputs = ["x", "", "scales"] if kind == "scales" else ["x", "", "", "sizes"]
    nodes = [helper.make_node("Resize", inputs, ["r"], **attrs), helper.make_node("Relu", ["r"], ["y"])]
    made = model(nodes, {"x": shape}, {"y": None}, {kind: value}, opset=13)
    assert_matches_onnxruntime(made, {"x": random(np.random.default_rng(seed), *shape)})


@pytest.mark.slow
@MORE
@given(case=resize_cases(), seed=seeds)
def test_resize_more(case, seed):
    test_resize.hypothesis.inner_test(case, seed)


@pytest.mark.parametrize("op, opset, mode", [("Upsample", 9, "nearest"), ("Upsample", 7, "linear"),
                                             ("Resize", 10, "nearest"), ("Resize", 10, "linear")])
def test_upsample_and_resize_of_opset_10(op, opset, mode):
    rng = np.random.default_rng(opset)
    scales = [1.0, 1.0, 0.5 if op == "Resize" else 1.5, 3.0]
    weights, inputs, attrs = {}, ["x"], {"mode": mode}
    if opset < 9:
        attrs["scales"] = scales
    else:
        weights["scales"] = np.array(scales, np.float32)
        inputs.append("scales")
    made = model([helper.make_node(op, inputs, ["y"], **attrs)], {"x": [1, 2, 5, 3]}, {"y": None}, weights, opset=opset)
    assert_matches_onnxruntime(made, {"x": random(rng, 1, 2, 5, 3)})


def test_resize_of_opset_18_with_axes_and_a_kept_aspect_ratio():
    rng = np.random.default_rng(18)
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", axes=[3, 2],
                              keep_aspect_ratio_policy="not_larger")]
    made = model(nodes, {"x": [1, 2, 5, 4]}, {"y": None}, {"sizes": np.array([9, 7], np.int64)}, opset=18)
    assert_matches_onnxruntime(made, {"x": random(rng, 1, 2, 5, 4)})


@pytest.mark.parametrize("attrs, message", [
    (dict(mode="cubic"), r"mode 'cubic' is not supported"),
    (dict(coordinate_transformation_mode="tf_crop_and_resize"), r"'tf_crop_and_resize' is not supported"),
    (dict(nearest_mode="nearest"), r"nearest_mode 'nearest' is not supported")])
def test_unsupported_resize_attributes_are_one_line_errors_naming_the_node(attrs, message):
    made = model([helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up", **attrs)], {"x": [1, 1, 2, 2]},
                 {"y": None}, {"scales": np.array([1, 1, 2, 2], np.float32)})
    with pytest.raises(ModelError, match=r"^node 'up' \(Resize\): .*" + message) as caught:
        import_onnx(made)
    assert "\n" not in str(caught.value)


def test_a_resize_and_a_conv_transpose_of_constants_fold_at_import():
    rng = np.random.default_rng(5)
    node = helper.make_node
    nodes = [node("Resize", ["c", "", "scales"], ["r"], mode="linear"), node("ConvTranspose", ["r", "w"], ["t"]),
             node("Add", ["t", "x"], ["y"])]
    weights = {"c": random(rng, 1, 2, 3, 2), "scales": np.array([1, 1, 2, 2], np.float32), "w": random(rng, 2, 3, 2, 2)}
    made = model(nodes, {"x": [1, 3, 7, 5]}, {"y": None}, weights)
    assert [n.op for n in import_onnx(made).nodes] == ["Add"]
    assert_matches_onnxruntime(made, {"x": random(rng, 1, 3, 7, 5)})


# ---- LayerNorm written out ----------------------------------------------------------------------

def decomposed_layer_norm(shape, axis: int, exponent: float = 2.0, second_axis=None, mean_read_elsewhere=False,
                          eps: float = 1e-5, opset: int = 13, seed: int = 0):
    """PyTorch's export of LayerNorm before opset 17, over the axes from ``axis`` on."""
    rng = np.random.default_rng(seed)
    axes = list(range(axis, len(shape)))
    node = helper.make_node
    nodes = [node("ReduceMean", ["x"], ["mean"], axes=axes), node("Sub", ["x", "mean"], ["d"]),
             node("Pow", ["d", "exponent"], ["p"]),
             node("ReduceMean", ["p"], ["var"], axes=axes if second_axis is None else [second_axis]),
             node("Add", ["var", "eps"], ["v"]), node("Sqrt", ["v"], ["s"]), node("Div", ["d", "s"], ["n"]),
             node("Mul", ["n", "gamma"], ["m"]), node("Add", ["m", "beta"], ["y"])]
    outputs = {"y": None}
    if mean_read_elsewhere:
        nodes.append(node("Neg", ["mean"], ["negated"]))
        outputs["negated"] = None
    weights = {"exponent": np.array(exponent, np.float32), "eps": np.array(eps, np.float32),
               "gamma": random(rng, *shape[axis:]), "beta": random(rng, *shape[-1:])}
    return model(nodes, {"x": shape}, outputs, weights, opset=opset), random(rng, *shape)


@FEW
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data(), seed=seeds)
def test_a_decomposed_layer_norm_is_one_layer_normalization_and_one_task(shape, data, seed):
    axis = data.draw(st.integers(0, len(shape) - 1))
    made, x = decomposed_layer_norm(shape, axis, seed=seed)
    graph = import_onnx(made)
    assert [n.op for n in graph.nodes] == ["LayerNormalization"]
    assert len(plan(graph).tasks) == 1
    assert_matches_onnxruntime(made, {"x": x})


@pytest.mark.parametrize("variant", ["other axes", "mean read elsewhere", "cube"])
def test_look_alikes_of_a_layer_norm_are_left_alone_and_still_correct(variant):
    kwargs = {"other axes": dict(second_axis=1), "mean read elsewhere": dict(mean_read_elsewhere=True),
              "cube": dict(exponent=3.0, eps=10.0)}[variant]  # eps keeps the mean of cubes + eps positive
    made, x = decomposed_layer_norm([2, 3, 5], 2, **kwargs)
    graph = import_onnx(made)
    assert "LayerNormalization" not in [n.op for n in graph.nodes]
    assert len(plan(graph).tasks) >= 2
    assert_matches_onnxruntime(made, {"x": x}, fuse=False)  # onnxruntime's own fusion takes the cube


@pytest.mark.parametrize("scale", [[6], [1, 6], [1, 1, 6], [4, 6]])
def test_layer_norm_scales_broadcast_to_the_input(scale):
    # A scale of more axes than the normalized ones (per row, or with leading ones) broadcasts.
    rng = np.random.default_rng(0)
    made = model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)], {"x": [2, 4, 6]},
                 {"y": None}, {"s": random(rng, *scale), "b": random(rng, 6)}, opset=17)
    assert_matches_onnxruntime(made, {"x": random(rng, 2, 4, 6)})
