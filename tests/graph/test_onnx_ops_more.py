"""ConvTranspose on awkward shapes drawn by hypothesis, compiled with default schedules and
compared with onnxruntime (and, in 3-D, which onnxruntime does not run, with its definition)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_cases import assert_matches_onnxruntime, helper, model, random
from metasched import ModelError
from metasched.graph import import_onnx
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
