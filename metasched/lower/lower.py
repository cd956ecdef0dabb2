"""Scheduled state -> loop program.

For each stage, in statement order:
1. express every original axis in the leaf loops, walking the split/fuse relations backwards;
2. collect a guard ``parent < extent`` for every split whose factors overshoot its loop;
3. build the loop nest of the leaves around the stage's store, each guard placed right inside
   the innermost loop it reads;
4. for a reduction, place the initialisation where TVM's ``decompose_reduction`` would: just
   before the outermost reduction loop, in a nest of the spatial loops that lie inside it.
"""
from __future__ import annotations

from math import prod
from typing import Optional

from metasched.ir.analysis import free_vars, simplify, substitute, transform
from metasched.ir.expr import BinOp, Expr, FloatImm, IntImm, Load, Var
from metasched.ir.stmt import Buffer, For, IfThenElse, PrimFunc, Stmt, Store, seq
from metasched.lang.workload import Statement, reduce_init
from metasched.lower.state import Fuse, IterVar, ScheduleState, Split, StageState

_COMBINE = {"sum": "+", "prod": "*", "max": "max", "min": "min"}


def lower(state: ScheduleState) -> PrimFunc:
    """The loop program of a scheduled state: one loop nest per stage, in statement order."""
    wl = state.workload
    body = seq(*(lower_stage(stage) for stage in state.stages))
    inputs = tuple(Buffer(t.name, t.shape, t.dtype) for t in wl.inputs)
    outputs = tuple(Buffer(t.name, t.shape, t.dtype) for t in wl.outputs)
    workspaces = tuple(Buffer(t.name, t.shape, t.dtype) for t in wl.intermediates)
    return PrimFunc(wl.name, inputs, outputs, workspaces, body)


def axis_values(stage: StageState) -> tuple[dict[int, Expr], list[tuple[Expr, bool]]]:
    """Each loop of the stage (by id) as an expression of its leaf loops, and the guards that
    overshooting splits need, each with whether it bounds a reduction loop."""
    value: dict[int, Expr] = {id(lv): Var(lv.name) for lv in stage.leaves}
    guards: list[tuple[Expr, bool]] = []
    # A relation consumes loops made by earlier ones, so walking backwards finds every
    # relation's outputs already expressed.
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            expr: Expr = IntImm(0)
            stride = 1
            for child in reversed(rel.children):
                expr = value[id(child)] * stride + expr
                stride *= child.extent
            parent_expr = simplify(expr)
            value[id(rel.parent)] = parent_expr
            if stride > rel.parent.extent:
                guards.append((BinOp("<", parent_expr, IntImm(rel.parent.extent)), rel.parent.is_reduce))
        else:
            fused = value[id(rel.fused)]
            stride = prod(c.extent for c in rel.children)
            for k, child in enumerate(rel.children):
                stride //= child.extent
                part = fused // stride if stride > 1 else fused
                if k > 0:
                    part = part % child.extent
                value[id(child)] = simplify(part)
    return value, guards


def _simplify_indices(expr: Expr) -> Expr:
    def fix(e: Expr) -> Optional[Expr]:
        if isinstance(e, Load):
            return Load(e.buffer, tuple(simplify(i) for i in e.indices), e.dtype_)
        return None

    return transform(expr, fix)


def stage_stores(stage: StageState, value: dict[int, Expr]) -> tuple[Optional[Store], Store]:
    """The stage's initialisation store (None unless it reduces) and its main store, indexed by
    the leaf loops."""
    st: Statement = stage.statement
    names = [a.name for a in st.axes] + [a.name for a in st.reduce_axes]
    mapping = {name: value[id(iv)] for name, iv in zip(names, stage.axes)}
    body = _simplify_indices(substitute(st.body, mapping))
    index = tuple(mapping[a.name] for a in st.axes)
    if not st.is_reduction:
        return None, Store(st.name, index, body)
    current = Load(st.name, index, st.dtype)
    update = Store(st.name, index, BinOp(_COMBINE[st.reduce_op], current, body))
    init = Store(st.name, index, FloatImm(reduce_init(st.reduce_op), st.dtype))
    return init, update


def _all(conds: list[Expr]) -> Expr:
    cond = conds[0]
    for c in conds[1:]:
        cond = BinOp("and", cond, c)
    return cond


def _guarded(body: Stmt, conds: Optional[list[Expr]]) -> Stmt:
    return IfThenElse(_all(conds), body) if conds else body


def _depth(leaves: list[IterVar], cond: Expr) -> int:
    """Position of the innermost leaf loop ``cond`` reads (-1: it reads none)."""
    depth = {lv.name: k for k, lv in enumerate(leaves)}
    return max((depth.get(v, -1) for v in free_vars(cond)), default=-1)


def _place(leaves: list[IterVar], guards: list[Expr]) -> dict[int, list[Expr]]:
    """Guards by the depth they go at: right inside the innermost loop they read."""
    placed: dict[int, list[Expr]] = {}
    for cond in guards:
        placed.setdefault(_depth(leaves, cond), []).append(cond)
    return placed


def _loops(leaves: list[IterVar], lo: int, hi: int, body: Stmt, placed: dict[int, list[Expr]]) -> Stmt:
    """Loops ``leaves[lo:hi]`` around ``body``, each depth's guards just inside its loop."""
    for k in reversed(range(lo, hi)):
        lv = leaves[k]
        body = For(lv.name, lv.extent, lv.kind, _guarded(body, placed.get(k)),
                   tuple(sorted(lv.annotations.items())))
    return body


def lower_stage(stage: StageState) -> Stmt:
    """The loop nest of one stage."""
    value, guards = axis_values(stage)
    init, update = stage_stores(stage, value)
    leaves = stage.leaves
    n = len(leaves)
    placed = _place(leaves, [g for g, _ in guards])
    if init is None:
        return _guarded(_loops(leaves, 0, n, update, placed), placed.get(-1))
    first_reduce = next((k for k, lv in enumerate(leaves) if lv.is_reduce), n)
    if first_reduce == n:  # a reduction over no variables: initialise, then combine once
        return _guarded(_loops(leaves, 0, n, seq(init, update), placed), placed.get(-1))
    # The init nest runs the spatial loops inside the outermost reduction loop, under the
    # spatial guards that read them (guards of outer loops already enclose both nests).
    init_leaves = [lv for lv in leaves[first_reduce:] if not lv.is_reduce]
    deep = [g for g, is_reduce in guards if not is_reduce and _depth(leaves, g) >= first_reduce]
    init_placed = _place(init_leaves, deep)
    init_nest = _guarded(_loops(init_leaves, 0, len(init_leaves), init, init_placed), init_placed.get(-1))
    main_nest = _loops(leaves, first_reduce, n, update, placed)
    body = _loops(leaves, 0, first_reduce, seq(init_nest, main_nest), placed)
    return _guarded(body, placed.get(-1))
