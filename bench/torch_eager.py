"""PyTorch eager as a baseline for whole networks: an imported graph's operators run one after
another as ``torch.nn.functional`` calls, the way a module's ``forward`` runs them (no fusion,
no graph compiler), on the same folded weights as ours (batch norms folded into convolutions,
as ``torch.ao``'s eval-mode fusion does).

    runner = torch_eager(graph)      # None when torch is not installed
    outputs = runner(feeds)          # numpy in, numpy out

Only the operators of bench/network.py's models are written; another raises ``KeyError``
naming it.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np


def torch_eager(graph, threads: int = 2) -> Optional[Callable[[dict], list[np.ndarray]]]:
    """A function running ``graph`` (``metasched.graph.Graph``) with PyTorch, or None."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    torch.set_num_threads(threads)
    constants = {name: torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
                 for name, value in graph.constants.items()}

    def pads2d(node):
        pads = list(node.attrs.get("pads") or [0, 0, 0, 0])
        if pads[:2] != pads[2:]:
            raise KeyError(f"{node}: asymmetric pads")
        return pads[:2]

    def conv(node, x, w, b=None):
        return F.conv2d(x, w, b, stride=node.attrs.get("strides", [1, 1]), padding=pads2d(node),
                        dilation=node.attrs.get("dilations", [1, 1]), groups=node.attrs.get("group", 1))

    def gemm(node, a, b, c=None):
        if node.attrs.get("transA", 0) or node.attrs.get("alpha", 1.0) != 1.0 or node.attrs.get("beta", 1.0) != 1.0:
            raise KeyError(f"{node}: Gemm with transA, alpha or beta")
        return F.linear(a, b if node.attrs.get("transB", 0) else b.t(), c)

    def layer_norm(node, x, scale, bias=None):
        axis = node.attrs.get("axis", -1) % x.dim()
        return F.layer_norm(x, x.shape[axis:], scale, bias, node.attrs.get("epsilon", 1e-5))

    ops = {
        "Conv": conv,
        "Gemm": gemm,
        "MatMul": lambda node, a, b: torch.matmul(a, b),
        "Relu": lambda node, x: F.relu(x),
        "Erf": lambda node, x: torch.erf(x),
        "Identity": lambda node, x: x,
        "Add": lambda node, a, b: a + b,
        "Sub": lambda node, a, b: a - b,
        "Mul": lambda node, a, b: a * b,
        "Div": lambda node, a, b: a / b,
        "Sum": lambda node, *xs: sum(xs[1:], xs[0]),
        "MaxPool": lambda node, x: F.max_pool2d(x, node.attrs["kernel_shape"], node.attrs.get("strides"),
                                                pads2d(node)),
        "AveragePool": lambda node, x: F.avg_pool2d(x, node.attrs["kernel_shape"], node.attrs.get("strides"),
                                                    pads2d(node),
                                                    count_include_pad=bool(node.attrs.get("count_include_pad", 0))),
        "GlobalAveragePool": lambda node, x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True),
        "Reshape": lambda node, x, shape: x.reshape(graph.shapes[node.outputs[0]]),
        "Flatten": lambda node, x: x.reshape(graph.shapes[node.outputs[0]]),
        "Transpose": lambda node, x: x.permute(*node.attrs["perm"]),
        "Softmax": lambda node, x: F.softmax(x, dim=node.attrs.get("axis", -1)),
        "LayerNormalization": layer_norm,
    }
    missing = sorted({node.op for node in graph.nodes} - set(ops))
    if missing:
        raise KeyError(f"torch_eager has no {', '.join(missing)}")

    def run(feeds: dict) -> list[np.ndarray]:
        with torch.inference_mode():
            values = dict(constants)
            values.update({name: torch.from_numpy(feeds[name]) for name in graph.inputs})
            for node in graph.nodes:
                args = [values[name] if name else None for name in node.inputs]
                while args and args[-1] is None:
                    args.pop()
                values[node.outputs[0]] = ops[node.op](node, *args)
            return [values[name].numpy() for name in graph.outputs]

    return run
