"""The operator suite of ``bench/ops/``: real layers of real networks, one ``.tensor`` file
each, and each one's PyTorch equivalent written as the network's users call that layer.

``torch_op(wl)`` is the yardstick for timing and the check of meaning: at any parameters, it
and ``wl.reference`` must agree (``tests/test_ops_suite.py``). It reads every size, stride,
padding and group count from ``wl.params``; the epsilons and activations are the layers' own.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Optional

import numpy as np

import metasched
from metasched.lang import Workload

try:  # PyTorch is a yardstick, never a dependency
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

OPS = Path(__file__).parent / "ops"


# Each layer with few channels and a small image or sequence, so that the reference is quick,
# and otherwise as it is: the same kernel sizes, strides, padding and dilation (the files'
# defaults), extents that powers of two do not divide (splits overshoot and exercise the
# guards). Grouped convolutions keep several channels a group, with a different count in and
# out so that a mix-up of the two would show.
# The tests' sizes (tests/test_ops_suite.py) and tvm_te.py --check's: odd, and large enough
# for every fork of the default space (9 output channels fill a vector; 9 rows pay for a
# transposed panel).
SMALL = {
    "bert_av": dict(HEADS=2, SEQ=7, D=5),
    "bert_dense_b1": dict(M=1, K=13, N=10),
    "bert_ffn_b1": dict(M=1, K=11, N=14),
    "bert_ffn_b128": dict(M=9, K=11, N=14),
    "bert_layernorm": dict(M=5, N=13),
    "bert_output_b128": dict(M=9, K=14, N=11),
    "bert_qk": dict(HEADS=2, SEQ=9, D=6),
    "bert_softmax": dict(HEADS=2, SEQ=9),
    "dcgan_conv_transpose": dict(C=3, H=4, W=5, F=5),
    "deeplab_dilated_conv": dict(C=3, H=7, W=6, F=9),
    "densenet_avgpool": dict(C=3, H=7, W=6),
    "mobilenet_v2_depthwise": dict(C=5, H=7, W=6),
    "mobilenet_v2_depthwise_s2": dict(C=5, H=9, W=8),
    "mobilenet_v2_pointwise": dict(C=3, H=5, W=7, F=10),
    "r3d18_conv3d": dict(C=3, T=2, H=5, W=4, F=9),
    "resnet18_conv_bn_relu": dict(C=3, H=6, W=5, F=9),
    "resnet50_conv1x1": dict(C=7, H=5, W=6, F=4),
    "resnet50_conv3x3": dict(C=3, H=6, W=5, F=9),
    "resnet50_conv3x3_s2": dict(C=3, H=9, W=8, F=9),
    "resnet50_downsample": dict(C=5, H=9, W=8, F=9),
    "resnet50_global_avgpool": dict(C=5, H=7, W=7),
    "resnet50_maxpool": dict(C=3, H=9, W=8),
    "resnet50_stem": dict(C=3, H=13, W=12, F=9),
    "resnext50_group_conv": dict(C=12, H=6, W=5, F=6, G=3),
    "resnext50_group_conv_s2": dict(C=8, H=9, W=8, F=6, G=2),
    "wav2vec2_conv1d": dict(C=5, L=19, F=9),
}

def layer_inputs(wl: Workload, seed: int = 0) -> list[np.ndarray]:
    """Random inputs with a batch norm's variances made positive, as a layer's are: random
    ones are negative about half the time, and such a channel is NaN everywhere alike, so it
    would check nothing."""
    inputs = wl.random_inputs(seed)
    for decl, x in zip(wl.inputs, inputs):
        if decl.name == "var":
            np.abs(x, out=x)
    return inputs


def suite() -> list[str]:
    """The names of the suite's workloads (one file each), sorted."""
    return sorted(path.stem for path in OPS.glob("*.tensor"))


def load(name: str, **params: int) -> Workload:
    """The workload of ``bench/ops/{name}.tensor`` with parameter overrides ``params``."""
    path = OPS / f"{name}.tensor"
    return metasched.lang.parse(path.read_text(), name, file=str(path), **params)


def _conv_bn_relu(p: dict) -> Callable:
    stride = p.get("ST", 1)
    return lambda x, w, mean, var, gamma, beta: F.relu(F.batch_norm(
        F.conv2d(x, w, stride=stride, padding=p["PAD"]), mean, var, gamma, beta, training=False, eps=1e-5))


def _conv_bias_relu(p: dict) -> Callable:
    # A batch norm folded into the convolution's bias, as inference runtimes run these layers.
    return lambda x, w, b: F.relu(F.conv2d(x, w, b, stride=p.get("ST", 1), padding=p["PAD"],
                                           dilation=p.get("DIL", 1), groups=p.get("G", 1)))


def _pointwise(activation: Callable) -> Callable:
    # The suite keeps a 1x1 kernel as [F, C]; PyTorch's is [F, C, 1, 1] (a view of the same data).
    return lambda p: lambda x, w, b: activation(F.conv2d(x, w[:, :, None, None], b, stride=p.get("ST", 1)))


def _depthwise(p: dict) -> Callable:
    # [C, R, S] in the suite; PyTorch's depthwise weight is [C, 1, R, S].
    return lambda x, w, b: F.relu6(F.conv2d(x, w.unsqueeze(1), b, stride=p.get("ST", 1),
                                            padding=p["PAD"], groups=p["C"]))


def _linear(activation: Callable) -> Callable:
    return lambda p: lambda x, w, b: activation(F.linear(x, w, b))


def _identity(x):
    return x


def _exact_gelu(x):
    return F.gelu(x, approximate="none")


# name -> (params -> the layer's call on torch tensors, in the workload's input order)
_OPS: dict[str, Callable[[dict], Callable]] = {
    "bert_av": lambda p: torch.matmul,
    "bert_dense_b1": _linear(_identity),
    "bert_ffn_b1": _linear(_exact_gelu),
    "bert_ffn_b128": _linear(_exact_gelu),
    "bert_layernorm": lambda p: lambda x, gamma, beta: F.layer_norm(x, (p["N"],), gamma, beta, eps=1e-12),
    "bert_output_b128": _linear(_identity),
    # As BERT scores attention: Q K^T / sqrt(head size).
    "bert_qk": lambda p: lambda q, k: torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(p["D"]),
    "bert_softmax": lambda p: lambda x: F.softmax(x, dim=-1),
    "dcgan_conv_transpose": lambda p: lambda x, w, b: F.relu(F.conv_transpose2d(
        x, w, b, stride=p["ST"], padding=p["PAD"])),
    "deeplab_dilated_conv": _conv_bias_relu,
    "densenet_avgpool": lambda p: lambda x: F.avg_pool2d(x, (p["R"], p["S"]), stride=p["ST"]),
    "mobilenet_v2_depthwise": _depthwise,
    "mobilenet_v2_depthwise_s2": _depthwise,
    "mobilenet_v2_pointwise": _pointwise(F.relu6),
    "r3d18_conv3d": lambda p: lambda x, w, b: F.relu(F.conv3d(x, w, b, padding=p["PAD"])),
    "resnet18_conv_bn_relu": _conv_bn_relu,
    "resnet50_conv1x1": _pointwise(F.relu),
    "resnet50_conv3x3": _conv_bias_relu,
    "resnet50_conv3x3_s2": _conv_bias_relu,
    "resnet50_downsample": _pointwise(_identity),
    # torchvision's ResNet: avgpool to 1x1, then flatten for the classifier.
    "resnet50_global_avgpool": lambda p: lambda x: torch.flatten(F.adaptive_avg_pool2d(x, 1), 1),
    "resnet50_maxpool": lambda p: lambda x: F.max_pool2d(x, (p["R"], p["S"]), stride=p["ST"], padding=p["PAD"]),
    "resnet50_stem": _conv_bn_relu,
    "resnext50_group_conv": _conv_bias_relu,
    "resnext50_group_conv_s2": _conv_bias_relu,
    "wav2vec2_conv1d": lambda p: lambda x, w: _exact_gelu(F.conv1d(x, w, stride=p["ST"])),
}


def torch_op(wl: Workload) -> Optional[Callable]:
    """PyTorch's version of suite workload ``wl``: a callable on the workload's numpy inputs
    (taken without a copy) returning the output tensor; None without PyTorch or for a
    workload not of the suite."""
    if torch is None or wl.name not in _OPS:
        return None
    op = _OPS[wl.name](dict(wl.params))
    return lambda *inputs: op(*(torch.from_numpy(x) for x in inputs))
