"""Small ONNX graphs built with ``onnx.helper``, and running them through onnxruntime (the
oracle) and through ``compile_network``."""
from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from metasched.network import compile_network  # noqa: E402


def model(nodes, inputs: dict, outputs: dict, weights: dict = None, opset: int = 17):
    """A model of ``nodes``; ``inputs``/``outputs`` name -> shape (None: unknown), ``weights``
    name -> array (initializers)."""
    def value(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (weights or {}).items()]
    graph = helper.make_graph(nodes, "case", [value(k, s) for k, s in inputs.items()],
                              [value(k, s) for k, s in outputs.items()], inits)
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    made.ir_version = 8
    return made


def onnxruntime_outputs(made, feeds: dict, fuse: bool = True) -> list[np.ndarray]:
    """onnxruntime's outputs; ``fuse=False`` leaves out its fusions of patterns (its
    LayerNorm fusion takes a ``Pow`` of exponent 3 for a variance)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not fuse:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(made.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_matches_onnxruntime(made, feeds: dict, network=None, fuse: bool = True):
    """Our compiled network's outputs against onnxruntime's, by the tolerance rule of
    ``Network.tolerance``."""
    network = network or compile_network(made)
    want = onnxruntime_outputs(made, feeds, fuse)
    got = network(**feeds)
    rtol = network.tolerance()
    for name, g, w in zip(network.output_names, got, want):
        assert g.shape == w.shape, f"{name}: shape {g.shape}, onnxruntime {w.shape}"
        w64, g64 = w.astype(np.float64), g.astype(np.float64)
        assert np.array_equal(np.isnan(w64), np.isnan(g64)), f"{name}: NaNs differ"
        finite = np.isfinite(w64)
        atol = rtol * float(np.max(np.abs(w64[finite]), initial=0.0))
        err = np.abs(g64 - w64)
        bad = finite & ~(err <= atol + rtol * np.abs(w64))
        if bad.any():
            k = np.unravel_index(int(np.argmax(np.where(bad, err, -1))), g.shape)
            raise AssertionError(f"{name}[{k}]: ours {g[k]!r}, onnxruntime {w[k]!r} "
                                 f"(allowed {atol + rtol * abs(w64[k]):.3g}); {int(bad.sum())} of {g.size} differ")
    return network


def random(rng, *shape, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return rng.uniform(low, high, size=shape).astype(np.float32)


def conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return (size + pad - dilation * (kernel - 1) - 1) // stride + 1


def prod(shape) -> int:
    return math.prod(shape)
