"""Idiomatic numpy versions of the built-in workloads: the yardstick kernels are timed against
(numpy calls OpenBLAS for matmuls). Each takes the workload's inputs and returns its outputs."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from metasched.lang.workload import Workload
from metasched.workloads import builtin


def _softmax(x: np.ndarray) -> list[np.ndarray]:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return [e / e.sum(axis=1, keepdims=True)]


def _layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> list[np.ndarray]:
    mean = x.mean(axis=1, keepdims=True)
    var = (x * x).mean(axis=1, keepdims=True) - mean * mean
    return [(x - mean) / np.sqrt(var + np.float32(1e-5)) * gamma + beta]


def _conv2d(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    # im2col with stride tricks, then one matmul: the usual way to write a conv in numpy.
    n, c, h, wd = x.shape
    f, _, r, s = w.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - r + 1, wd + 2 * pad - s + 1
    cols = np.lib.stride_tricks.sliding_window_view(padded, (r, s), axis=(2, 3))  # n c oh ow r s
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * r * s)
    out = cols @ w.reshape(f, c * r * s).T
    return out.reshape(n, oh, ow, f).transpose(0, 3, 1, 2)


def _depthwise(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    c, r, s = w.shape
    out = np.zeros((x.shape[0], c, x.shape[2] + 2 * pad - r + 1, x.shape[3] + 2 * pad - s + 1), x.dtype)
    for dr in range(r):
        for ds in range(s):
            out += padded[:, :, dr:dr + out.shape[2], ds:ds + out.shape[3]] * w[None, :, dr, ds, None, None]
    return out


BASELINES: dict[str, Callable[..., list[np.ndarray]]] = {
    "matmul": lambda wl, a, b: [a @ b],
    "matmul_relu": lambda wl, a, b: [np.maximum(a @ b, 0)],
    "batch_matmul": lambda wl, a, b: [a @ b],
    "dense_bias_relu": lambda wl, x, w, bias: [np.maximum(x @ w + bias, 0)],
    "transpose_add": lambda wl, a, b: [a + b.T],
    "reduce_cols": lambda wl, x: [x.sum(axis=0)],
    "softmax": lambda wl, x: _softmax(x),
    "layernorm": lambda wl, x, g, b: _layernorm(x, g, b),
    "conv2d_bias_relu": lambda wl, x, w, bias: [
        np.maximum(_conv2d(x, w, wl.params["PAD"]) + bias[None, :, None, None], 0)],
    "depthwise_conv2d": lambda wl, x, w: [_depthwise(x, w, wl.params["PAD"])],
}


def numpy_baseline(workload: Workload) -> Optional[Callable[..., list[np.ndarray]]]:
    """The numpy version of a built-in workload (``workloads.builtin``: its program, not just
    its name), or None for any other workload."""
    fn = BASELINES.get(builtin(workload))
    if fn is None:
        return None
    return lambda *inputs: fn(workload, *inputs)
