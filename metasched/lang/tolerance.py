"""The one rule by which a kernel's outputs are compared with the reference.

For each output, element by element::

    |got - want| <= atol + rtol * |want|
    rtol = 16 * eps(dtype) * sqrt(L)
    atol = rtol * max|want|

``eps`` is the machine epsilon of the workload's dtype and ``L`` the longest reduction of the
workload (``Workload.max_reduce_length``, 1 when there is none). Why: a kernel may add the
terms of a reduction in any order (tiles, vector lanes, rfactor), and each order rounds
differently. The rounding errors of ``L`` additions behave like a random walk whose spread
grows like ``sqrt(L) * eps`` of the magnitudes involved; 16 leaves room for the few
operations around the reduction and for the reference computing in float64. ``atol`` scales
with the output's largest magnitude, because a sum that cancels to nearly zero carries the
absolute error of its large terms, not a relative one of its small result.

Shapes and dtypes must match exactly; a NaN must be NaN in both; an infinity must be the same
infinity in both.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from metasched.errors import MismatchError

if TYPE_CHECKING:
    from metasched.lang.workload import Workload


def tolerance(workload: "Workload") -> float:
    """The relative tolerance ``rtol = 16 * eps(dtype) * sqrt(max_reduce_length)``."""
    return 16 * float(np.finfo(workload.dtype).eps) * math.sqrt(workload.max_reduce_length)


def assert_outputs_close(workload: "Workload", got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> None:
    """Raise ``MismatchError`` naming the output, the worst index, both values and the allowed
    error unless every output of ``got`` matches ``want`` by the rule of this module."""
    names = [t.name for t in workload.outputs]
    if len(got) != len(want) or len(want) != len(names):
        raise MismatchError(f"{workload.name} has {len(names)} output(s) ({', '.join(names)}); "
                            f"got {len(got)} array(s) to compare with {len(want)}")
    rtol = tolerance(workload)
    for name, g, w in zip(names, got, want):
        _compare(name, np.asarray(g), np.asarray(w), rtol)


def outputs_close(workload: "Workload", got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> bool:
    """Whether ``assert_outputs_close`` would pass."""
    try:
        assert_outputs_close(workload, got, want)
    except MismatchError:
        return False
    return True


def _compare(name: str, got: np.ndarray, want: np.ndarray, rtol: float) -> None:
    if got.shape != want.shape or got.dtype != want.dtype:
        raise MismatchError(f"output {name}: got {got.dtype}{list(got.shape)}, "
                            f"want {want.dtype}{list(want.shape)}")
    if got.size == 0:
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    atol = rtol * float(np.max(np.abs(w[finite]), initial=0.0))
    allowed = atol + rtol * np.abs(w)
    with np.errstate(invalid="ignore"):
        excess = np.abs(g - w) - allowed
    # Where want is NaN or infinite only an identical value passes.
    excess[~finite] = np.where((np.isnan(g) & np.isnan(w)) | (g == w), -np.inf, np.inf)[~finite]
    excess[np.isnan(excess)] = np.inf  # got NaN (or inf) where a finite value was wanted
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    if excess[worst] > 0:
        index = tuple(int(i) for i in worst)
        bad = int(np.count_nonzero(excess > 0))
        g_worst, w_worst = float(g[worst]), float(w[worst])
        raise MismatchError(
            f"output {name} differs from the reference at {bad} of {w.size} element(s); worst at "
            f"index {index}: got {g_worst!r}, want {w_worst!r}, error {abs(g_worst - w_worst):.3g} "
            f"> allowed {float(allowed[worst]):.3g} (rtol {rtol:.3g}, atol {atol:.3g})")
