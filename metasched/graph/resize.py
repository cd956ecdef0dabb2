"""Where each output element of an ONNX ``Resize`` (or ``Upsample``) reads, per resized axis.

An axis's map is what onnxruntime computes: each output index's original coordinate in
float32 (its order of operations), rounded as the nearest mode says or split into the two
neighbours of a linear interpolation with their float32 weights. Matching it bit for bit
matters because a coordinate that lands on a half (or a whole) in exact arithmetic may fall
either side in float32, and a different pixel is a large error, not a rounding one.

The workload language has no index read from a tensor, so a map's index table goes back into
text as pieces ``(a * o + b) // c`` over ranges of ``o`` (``pieces``): one piece where the
table is the floor of a line, a few more where it is clamped at the edges or float32 rounds
a coordinate across a boundary. The weights of a linear map are constants of the node."""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

import numpy as np

COORDINATE_MODES = ("half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners", "tf_half_pixel_for_nn",
                    "half_pixel_symmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
# onnxruntime resolves a coordinate within this of a half as the half (measured: its maps of
# thousands of random sizes, scales and modes agree with this rule and not with exact float32).
HALF_TOLERANCE = 1e-6

f32 = np.float32


@dataclass(frozen=True)
class AxisMap:
    """One resized axis: output ``o`` reads input index ``sources[t][o]`` for each tap ``t``
    (one for nearest, two for linear) with weight ``weights[o, t]`` (None: one tap, weight 1)."""

    sources: tuple[np.ndarray, ...]
    weights: Optional[np.ndarray]
    slope: Fraction  # the exact input positions per output position, for fitting the pieces


def coordinates(mode: str, out: int, size: int, scale: float) -> np.ndarray:
    """The original (input) coordinate of each output index, in float32 as onnxruntime
    computes it."""
    o, s, half = np.arange(out, dtype=f32), f32(scale), f32(0.5)
    if mode == "asymmetric":
        return o / s
    if mode == "half_pixel" or (mode == "pytorch_half_pixel" and out > 1):
        return (o + half) / s - half
    if mode == "pytorch_half_pixel":
        return np.zeros(out, f32)
    if mode == "tf_half_pixel_for_nn":
        return (o + half) / s
    if mode == "align_corners":
        return np.zeros(out, f32) if out == 1 else o * f32(size - 1) / f32(out - 1)
    if mode == "half_pixel_symmetric":  # onnxruntime computes this one in double
        adjustment = f32(out) / (s * f32(size))
        offset = f32(f32(size) / f32(2)) * (f32(1) - adjustment)
        return (float(offset) + (o.astype(np.float64) + 0.5) / float(s) - 0.5).astype(f32)
    raise ValueError(mode)


def slope(mode: str, out: int, size: int, scale: Fraction) -> Fraction:
    """The exact growth of the coordinate per output index."""
    if mode == "align_corners":
        return Fraction(size - 1, out - 1) if out > 1 else Fraction(0)
    if mode == "pytorch_half_pixel" and out == 1:
        return Fraction(0)
    return 1 / scale


def nearest_map(mode: str, nearest: str, out: int, size: int, scale: float, exact: Fraction) -> AxisMap:
    """The input index each output index copies. ``nearest`` is one of ``NEAREST_MODES`` or
    ``"simple"`` (opset 10 and ``Upsample``: the ceiling when shrinking, else truncation)."""
    x = coordinates(mode, out, size, scale).astype(np.float64)
    low = np.floor(x)
    half = np.abs(x - low - 0.5) <= HALF_TOLERANCE
    rounded = np.floor(x + 0.5)
    index = {"round_prefer_floor": np.where(half, low, rounded), "round_prefer_ceil": np.where(half, low + 1, rounded),
             "floor": low, "ceil": np.ceil(x),
             "simple": np.ceil(x) if scale < 1 else np.trunc(x)}[nearest]
    return AxisMap((np.clip(index, 0, size - 1).astype(np.int64),), None, slope(mode, out, size, exact))


def linear_map(mode: str, out: int, size: int, scale: float, exact: Fraction) -> AxisMap:
    """The two neighbours each output index interpolates between and their weights, as
    onnxruntime's bilinear kernel has them (clamped to the input; a lone neighbour weighs
    0.5 twice)."""
    x = np.minimum(np.maximum(coordinates(mode, out, size, scale), f32(0)), f32(size - 1))
    first = np.minimum(x.astype(np.int64), size - 1)
    second = np.minimum(first + 1, size - 1)
    to_first, to_second = np.abs(x - first.astype(f32)), np.abs(x - second.astype(f32))
    weights = np.stack([to_second, to_first], axis=1).astype(f32)
    weights[first == second] = f32(0.5)
    return AxisMap((first, second), weights, slope(mode, out, size, exact))


def simplest_fraction(value: float) -> Fraction:
    """The fraction of smallest denominator that rounds to ``value`` in float32 (13/10 for
    1.3f): the scale a model's author meant."""
    target = f32(value)
    for bits in range(1, 25):
        candidate = Fraction(float(target)).limit_denominator(1 << bits)
        if f32(candidate.numerator / candidate.denominator) == target:
            return candidate
    return Fraction(float(target))


@dataclass(frozen=True)
class Piece:
    """``index = (a * o + b) // c`` for ``start <= o < end``."""

    start: int
    end: int
    a: int
    b: int
    c: int


def pieces(table: np.ndarray, rate: Fraction) -> list[Piece]:
    """``table`` (integers over ``o = 0, 1, ...``) as few pieces as a greedy cover finds: from
    each start, the longest run that one line of slope ``rate`` (or a constant) floors to."""
    o = np.arange(len(table), dtype=np.int64)
    candidates = [(0, 1)] + [(rate.numerator * m, rate.denominator * m) for m in (1, 2) if rate]
    found, start = [], 0
    while start < len(table):
        best = None
        for a, c in candidates:
            lo = c * table[start:] - a * o[start:]  # a * o + b must lie in [lo, lo + c - 1]
            top, bottom = np.maximum.accumulate(lo), np.minimum.accumulate(lo + c - 1)
            length = int(np.argmax(top > bottom)) if (top > bottom).any() else len(lo)
            if best is None or length > best[0]:
                best = (length, a, int(top[length - 1]), c)
        length, a, b, c = best
        g = math.gcd(a, c)
        found.append(Piece(start, start + length, a // g, b // g, c // g))
        start += length
    return found
