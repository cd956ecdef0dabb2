"""Bound inference: which region of a tensor one iteration of a loop touches.

Two steps. ``loop_reach`` says, for every loop of a stage, which values it takes while the
leaf loops inside an attach point run and those outside stay fixed: ``outer + [lo, hi]``,
``outer`` an expression of the loops outside (fused or not, anything goes there), ``lo`` and
``hi`` constants. It walks the stage's split and fuse relations, so that the guard of an
overshooting split clips its loop's range (``j_2 = 6 * j_2_0 + j_2_1`` over ``35 x 6`` values
takes 205 of them, not 210), and it knows when the values are exactly that range or only lie
in it. ``region`` then reads each index of the accesses as a linear combination of terms
(``metasched.ir.access.index_terms``): terms free of the inner loops belong to the region's
start, the others must be a loop of the reach times a constant, and the extent follows from
their ranges. Where several accesses share the same start their regions join; anything else (a
non-linear term that reads inner loops, accesses whose starts differ) falls back to the whole
dimension, which is always correct, only redundant.
"""
from __future__ import annotations

import functools
from typing import AbstractSet, Mapping, NamedTuple, Optional, Sequence

from metasched.ir.access import Terms, add_terms, from_terms, index_terms
from metasched.ir.analysis import free_vars, int_bounds, simplify, substitute
from metasched.ir.expr import Expr, IntImm, Var
from metasched.lower.state import IterVar, Relation, Split, StageState

# A region of one dimension: (start expression, constant extent).
Span = tuple[Expr, int]


class Reach(NamedTuple):
    """The values one loop takes during one iteration of an attach point: they lie in
    ``outer + lo .. outer + hi``, where ``outer`` (a linear combination of terms, as
    ``index_terms`` gives) reads only loops outside the attach point.
    ``exact``: the loop takes every one of those values, not only some; with ``below`` set,
    every one below it (a stage's own axis, whose guard is repeated as the region guard of a
    stage computed at its loops). ``inner``: some loop inside the attach point is part of
    this loop. (A named tuple: bound inference makes one per loop of a stage, every time a
    region is asked for.)"""

    outer: Terms
    lo: int
    hi: int
    exact: bool
    inner: bool
    below: Optional[int] = None


@functools.lru_cache(maxsize=1 << 12)
def loop_var(name: str) -> Var:
    """The variable of the loop ``name``, one object per name: the values bound inference and
    lowering make of a stage's loops are memoised by the expressions they are made of, and
    a key made of the very objects it was stored with is found without comparing them
    node by node (loop names recur from program to program)."""
    return Var(name)


def axis_indices(stage: StageState) -> tuple[list[Expr], list[Expr]]:
    """The stage's spatial axes as indices of its tensor, and its reduction axes, in terms of
    its axis loops (by name, as ``loop_reach`` knows them) and, for a stage computed at a loop
    of another, of the loops the start of its region reads."""
    n = len(stage.statement.axes)
    spatial: list[Expr] = [loop_var(iv.name) for iv in stage.axes[:n]]
    if stage.attach is not None:
        spatial = [simplify(start + v) for start, v in zip(stage.attach.start, spatial)]
    return spatial, [loop_var(iv.name) for iv in stage.axes[n:]]


def loop_reach(stage: StageState, loop: Optional[IterVar],
               wanted: Optional[AbstractSet[str]] = None) -> dict[str, Reach]:
    """The reach of every loop of ``stage`` (by name; consumed loops included) during one
    iteration of its leaf loop ``loop``: the leaf loops inside it run, the others stay fixed;
    with ``loop`` None, every loop runs (one run of the whole stage). With ``wanted`` (loop names), only the leaf loops and the loops the reach of those is
    made from: a region of a stage's own tensor needs its spatial axes alone, not the splits
    of its reduction axes."""
    relations = stage.relations if wanted is None else _making(stage.relations, wanted)
    reach: dict[str, Reach] = {}
    ranges: dict[str, tuple[int, int]] = {}
    position = -1 if loop is None else stage.leaves.index(loop)
    for k, lv in enumerate(stage.leaves):
        if k > position:
            reach[lv.name] = Reach({}, 0, lv.extent - 1, True, True)
        else:
            reach[lv.name] = Reach({loop_var(lv.name): 1}, 0, 0, True, False)
            ranges[lv.name] = (0, lv.extent - 1)
    axes = {iv.name for iv in stage.axes}
    # As in ``lower.loop_values``: a relation consumes loops made by earlier ones, so walking
    # backwards finds every relation's outputs already known.
    for rel in reversed(relations):
        if isinstance(rel, Split):
            reach[rel.parent.name] = _split_reach(rel, [reach[c.name] for c in rel.children], ranges,
                                                  rel.parent.name in axes)
        else:
            fused = reach[rel.fused.name]
            constant = _constant(fused.outer)
            full = (fused.exact and constant is not None and constant + fused.lo == 0
                    and constant + fused.hi == rel.fused.extent - 1)
            start = from_terms(fused.outer)
            stride = rel.fused.extent
            for k, child in enumerate(rel.children):
                stride //= child.extent
                if fused.lo == fused.hi:  # fixed: each child is an expression of the outer loops
                    terms = _fused_part_terms(start, fused.lo, stride, child.extent if k > 0 else None)
                    reach[child.name] = Reach(dict(terms), 0, 0, fused.exact, fused.inner)
                else:  # every value of each child; exact only when the fused loop runs whole
                    reach[child.name] = Reach({}, 0, child.extent - 1, full, True)
    return reach


@functools.lru_cache(maxsize=1 << 12)
def _fused_part_terms(start: Expr, lo: int, stride: int, extent: Optional[int]) -> Terms:
    """The terms of a fused loop's child where the fused loop is fixed at ``start + lo``:
    ``(start + lo) // stride`` (the outermost child, ``extent`` None), else that ``% extent``.
    Memoised by its inputs (``start`` an index expression, made by ``from_terms``, which
    hands out the same object for the same terms): the same fused loops recur from program
    to program. Callers copy the result (it is shared)."""
    part = start + lo
    part = part // stride if stride > 1 else part
    return index_terms(part % extent if extent is not None else part)


def _making(relations: Sequence[Relation], wanted: AbstractSet[str]) -> list[Relation]:
    """The relations that make the loops in ``wanted`` of the leaf loops: a split whose parent
    is wanted (then its children are), a fuse one of whose children is (then the fused loop
    is). A relation consumes loops made by earlier ones, so one walk forwards finds them."""
    wanted = set(wanted)
    making = []
    for rel in relations:
        if isinstance(rel, Split):
            if rel.parent.name in wanted:
                making.append(rel)
                wanted.update(child.name for child in rel.children)
        elif any(child.name in wanted for child in rel.children):
            making.append(rel)
            wanted.add(rel.fused.name)
    return making


def _split_reach(rel: Split, children: list[Reach], ranges: Mapping[str, tuple[int, int]],
                 is_axis: bool) -> Reach:
    """The reach of a split's parent from its children's, clipped where a guard keeps the
    parent below its extent."""
    outer: Terms = {}
    lo = hi = 0
    stride = 1
    steps: list[tuple[int, int]] = []
    for child, iv in zip(reversed(children), reversed(rel.children)):
        add_terms(outer, child.outer, stride)
        lo, hi = lo + child.lo * stride, hi + child.hi * stride
        steps.append((stride, child.hi - child.lo))
        stride *= iv.extent
    exact = all(c.exact for c in children) and _contiguous(steps)
    inner = any(c.inner for c in children)
    limit, below = rel.parent.extent - 1, None
    if stride > rel.parent.extent:  # overshooting: lowering guards ``parent <= limit``
        constant = _constant(outer)
        if constant is not None:
            hi = max(lo, min(hi, limit - constant))
        elif inner and _upper(from_terms(outer), ranges) + hi > limit:
            # A guard inside the attach point cuts the range short in some of its iterations
            # only: the values lie in the range, but not all of them are taken. (A guard that
            # reads no inner loop skips whole iterations, stages computed there included.)
            if is_axis:
                below = rel.parent.extent
            else:
                exact = False
    return Reach(outer, lo, hi, exact, inner, below)


def _constant(terms: Terms) -> Optional[int]:
    return terms.get(None, 0) if all(atom is None for atom in terms) else None


def _upper(expr: Expr, ranges: Mapping[str, tuple[int, int]]) -> int:
    try:
        return int_bounds(expr, ranges)[1]
    except (KeyError, ValueError):
        return 2**63


def _contiguous(steps: list[tuple[int, int]]) -> bool:
    """Whether ``sum(stride * v)`` with each ``v`` over ``0 .. span`` takes every value between
    its least and its greatest (no gaps: each stride at most one past what the smaller ones
    reach)."""
    covered = 0
    for stride, span in sorted(steps):
        if span == 0:
            continue
        if stride > covered + 1:
            return False
        covered += stride * span
    return True


def _span(index: Expr, reach: Mapping[str, Reach]) -> Optional[tuple[Expr, int, int, bool, Optional[int]]]:
    """(start, lo, hi, exact, below): the index lies in ``start + [lo, hi]`` (and takes each of
    those values, below ``below`` if set, when exact) while the loops of ``reach`` take theirs;
    None if that is unknown."""
    outer: Terms = {}
    lo = hi = 0
    steps: list[tuple[int, int]] = []
    exact, below = True, None
    terms = index_terms(index)
    for atom, coeff in terms.items():
        names = set() if atom is None else free_vars(atom) & reach.keys()
        if not names:
            add_terms(outer, {atom: 1}, coeff)
        elif isinstance(atom, Var):
            r = reach[atom.name]
            add_terms(outer, r.outer, coeff)
            low, high = coeff * r.lo, coeff * r.hi
            lo, hi = lo + min(low, high), hi + max(low, high)
            steps.append((abs(coeff), r.hi - r.lo))
            exact = exact and r.exact
            if r.below is not None:  # exact about the index only if the index is that loop
                below = r.below
                exact = exact and terms == {atom: 1}
        elif all(reach[n].lo == reach[n].hi for n in names):  # e.g. ``f // 4`` of a fixed ``f``
            fixed = substitute(atom, {n: from_terms(reach[n].outer) + reach[n].lo for n in names})
            add_terms(outer, index_terms(fixed), coeff)
            exact = exact and all(reach[n].exact for n in names)
        else:
            return None
    return from_terms(outer), lo, hi, exact and _contiguous(steps), below


def region(accesses: Sequence[Sequence[Expr]], reach: Mapping[str, Reach], shape: Sequence[int],
           exact: bool = False) -> Optional[list[Span]]:
    """The region of a tensor of ``shape`` that ``accesses`` (index tuples) cover while the
    loops in ``reach`` (``loop_reach``) take their values and every other variable is fixed.
    Each dimension's extent is a constant no larger than the dimension. With ``exact``, None
    unless every element of the region is accessed (below the dimension's end; a consumer that
    runs after a region is written must read no element that is not written there)."""
    result: list[Span] = []
    for d, dim in enumerate(shape):
        spans = [_span(acc[d], reach) for acc in accesses]
        whole = (IntImm(0), dim)
        if not spans or any(s is None for s in spans) or len({s[0] for s in spans}) > 1:
            if exact:
                return None
            result.append(whole)
            continue
        if exact and (len(spans) > 1 or not spans[0][3] or spans[0][4] not in (None, dim)):
            return None
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
