"""Bound inference: which region of a tensor one iteration of a loop touches.

An index expression is split into the part that reads loops outside the attach point (fixed
for one iteration) and the part that reads loops inside it (ranging over their extents). For
an affine index the region is ``outer + [lo, hi]`` with a constant size; where the indices of
several accesses share the same outer part their regions join; anything else (a non-affine
index that reads inner loops, accesses whose outer parts differ) falls back to the whole
dimension, which is always correct, only redundant.
"""
from __future__ import annotations

from typing import Optional, Sequence

from metasched.ir.analysis import as_affine, free_vars, from_affine, simplify
from metasched.ir.expr import Expr, IntImm

# A region of one dimension: (start expression, constant extent).
Span = tuple[Expr, int]


def _span(index: Expr, inner: dict[str, int]) -> tuple[Expr, int, int] | None:
    """(outer part, lo, hi) with the index in ``outer + [lo, hi]``; None if that is unknown."""
    if not (free_vars(index) & inner.keys()):
        return simplify(index), 0, 0
    form = as_affine(index)
    if form is None:
        return None
    coeffs, const = form
    outer = {v: c for v, c in coeffs.items() if v not in inner}
    lo = hi = 0
    for v, c in coeffs.items():
        if v in inner:
            reach = c * (inner[v] - 1)
            lo, hi = lo + min(0, reach), hi + max(0, reach)
    return from_affine((outer, const)), lo, hi


def region(accesses: Sequence[Sequence[Expr]], inner: dict[str, int], shape: Sequence[int],
           exact: bool = False) -> Optional[list[Span]]:
    """The region of a tensor of ``shape`` that ``accesses`` (index tuples) cover while the
    variables in ``inner`` (name -> extent) take all their values and every other variable is
    fixed. Each dimension's extent is a constant no larger than the dimension. With ``exact``,
    None where a dimension would have to fall back to its whole extent without knowing that
    the accesses reach all of it (a consumer that runs after a region is written must not read
    past it)."""
    result: list[Span] = []
    for d, dim in enumerate(shape):
        spans = [_span(acc[d], inner) for acc in accesses]
        whole = (IntImm(0), dim)
        if not spans or any(s is None for s in spans) or len({s[0] for s in spans}) > 1:
            if exact:
                return None
            result.append(whole)
            continue
        outer = spans[0][0]
        lo = min(s[1] for s in spans)
        hi = max(s[2] for s in spans)
        start, extent = simplify(outer + lo), hi - lo + 1
        # Collapsing to the whole dimension drops ``start``; only an exact region that covers
        # the dimension from a constant position may do that (a consumer computed after each
        # iteration must not recompute elements from iterations that produced nothing).
        covers = isinstance(start, IntImm) and start.value <= 0 and start.value + extent >= dim
        result.append(whole if extent >= dim and (covers or not exact) else (start, extent))
    return result
