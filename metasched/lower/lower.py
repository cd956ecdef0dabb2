"""Scheduled state -> loop program.

Root stages run one after another in stage order. For each stage:
1. express every loop of the stage in its leaf loops, walking the split/fuse relations
   backwards (``loop_values``);
2. collect a guard ``parent < extent`` for every split whose factors overshoot its loop, and,
   for a stage attached at another stage's loop, a guard keeping its region inside its tensor
   where that cannot be proven;
3. build the loop nest of the leaves around the stage's store, each guard placed right inside
   the innermost loop it reads, and the stages attached at each loop placed in that loop's body
   (producers before the rest of the body, consumers after it; inside the loop's guards);
4. for a reduction, place the initialisation where TVM's ``decompose_reduction`` would: just
   before the outermost reduction loop, in a nest of the spatial loops that lie inside it.

A stage attached with ``compact`` gets its buffer at its attach point, shaped like its
region; its consumer's loads are shifted by the region's start. Last, buffers given another
layout (``transform_layout``) have their dimensions reordered (``layout.permuted``).

``with_kinds`` gives the program of a state whose loops changed only in kind (``parallel``,
``vectorize``, ``unroll``) from the program lowered before, without lowering again.
"""
from __future__ import annotations

import dataclasses
import functools
from math import prod
from typing import Mapping, Optional

from metasched.ir.access import canonical
from metasched.ir.analysis import as_affine, free_vars, from_affine, int_bounds, simplify, substitute
from metasched.ir.expr import BinOp, Expr, FloatImm, IntImm, Load, Var, children, rebuild
from metasched.ir.stmt import Allocate, Buffer, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store, seq
from metasched.lang.workload import reduce_init
from metasched.lower.bounds import Span, axis_indices, loop_reach, loop_var, region
from metasched.lower.layout import permuted
from metasched.lower.state import IterVar, ScheduleState, Split, StageState

_COMBINE = {"sum": "+", "prod": "*", "max": "max", "min": "min"}


def lower(state: ScheduleState) -> PrimFunc:
    """The loop program of a scheduled state."""
    wl = state.workload
    # Each stage's own compaction, asked once: the workspaces and the stage's nest need it.
    owns = {id(s): own_compaction(state, s) for s in state.stages}
    body = seq(*(_stage_nest(state, s, {}, {}, owns=owns) for s in state.stages if s.attach is None))
    inputs = tuple(Buffer(t.name, t.shape, t.dtype) for t in wl.inputs)
    outputs = tuple(Buffer(t.name, t.shape, t.dtype) for t in wl.outputs)
    workspaces = tuple(Buffer(s.buffer, s.statement.shape, s.statement.dtype) for s in state.stages
                       if not s.statement.is_output and not (s.attach is not None and s.attach.compact)
                       and owns[id(s)] is None)
    annotations = {s.name: dict(s.annotations) for s in state.stages if s.annotations}
    func = PrimFunc(wl.name, inputs, outputs, workspaces, body, {"block_annotations": annotations})
    return permuted(func, {s.buffer: s.layout for s in state.stages if s.layout is not None})


def own_compaction(state: ScheduleState, stage: StageState) -> Optional[tuple[IterVar, list[Span]]]:
    """Where a stage's own buffer lives only inside one of its loops: when its only consumer is
    computed after that loop's body (``reverse_compute_at``), every write and read of the
    buffer happens within one iteration, so the buffer is allocated there with the region one
    iteration writes (a ``local`` write cache under a tile becomes a tile-sized array). The
    loop and the region, or None."""
    # Most stages have no stage computed after one of their loops: that is quicker to see
    # than which stages read their buffer.
    if stage.statement.is_output or not any(s.attach is not None and s.attach.after and s.attach.target is stage
                                            for s in state.stages):
        return None
    consumers = state.consumers(stage)
    if len(consumers) != 1:
        return None
    attach = consumers[0].attach
    if attach is None or not attach.after or attach.target is not stage:
        return None
    spatial, _ = axis_indices(stage)
    wanted = frozenset().union(*(free_vars(index) for index in spatial))
    return attach.loop, region([spatial], loop_reach(stage, attach.loop, wanted), stage.statement.shape)


def loop_values(stage: StageState) -> tuple[dict[str, Expr], list[tuple[Expr, bool]]]:
    """Every loop of the stage (by name, consumed ones included) as a simplified expression of
    its leaf loops, and the guards that overshooting splits need, each with whether it bounds
    a reduction loop."""
    value: dict[str, Expr] = {lv.name: loop_var(lv.name) for lv in stage.leaves}
    guards: list[tuple[Expr, bool]] = []
    # A relation consumes loops made by earlier ones, so walking backwards finds every
    # relation's outputs already expressed.
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            extents = tuple(c.extent for c in rel.children)
            parent = _split_value(tuple(value[c.name] for c in rel.children), extents)
            value[rel.parent.name] = parent
            if prod(extents) > rel.parent.extent:
                guards.append((BinOp("<", parent, IntImm(rel.parent.extent)), rel.parent.is_reduce))
        else:
            fused = value[rel.fused.name]
            stride = prod(c.extent for c in rel.children)
            for k, child in enumerate(rel.children):
                stride //= child.extent
                value[child.name] = _fused_part(fused, stride, child.extent if k > 0 else None)
    return value, guards


# The values of split and fused loops, memoised by the values they are made of: those are
# leaf variables or earlier results, the very objects memoisation hands out again (their
# hashes known, equal ones identical), and the programs of one search repeat most loop
# structures (a mutant changes one split of one block).
@functools.lru_cache(maxsize=1 << 12)
def _split_value(children: tuple[Expr, ...], extents: tuple[int, ...]) -> Expr:
    """``sum(child * stride)`` (the inner child has stride 1, each outer one the product of
    the extents inside it), simplified. Splits compose affinely: where every child is affine,
    their forms are summed (what ``simplify`` would give, without building the sum)."""
    forms = [as_affine(child) for child in children]
    stride = 1
    if all(form is not None for form in forms):
        coeffs: dict[str, int] = {}
        const = 0
        for (terms, constant), extent in zip(reversed(forms), reversed(extents)):
            for name, c in terms.items():
                coeffs[name] = coeffs.get(name, 0) + c * stride
            const += constant * stride
            stride *= extent
        return from_affine((coeffs, const))
    expr: Expr = IntImm(0)
    for child, extent in zip(reversed(children), reversed(extents)):
        expr = child * stride + expr
        stride *= extent
    return simplify(expr)


@functools.lru_cache(maxsize=1 << 12)
def _fused_part(fused: Expr, stride: int, extent: Optional[int]) -> Expr:
    """A child of a fused loop: ``fused // stride`` (the outermost, ``extent`` None), else
    ``fused // stride % extent``, simplified."""
    part = fused // stride if stride > 1 else fused
    return simplify(part if extent is None else part % extent)


def stage_axes(stage: StageState, outer: dict[str, Expr],
               value: Optional[dict[str, Expr]] = None) -> tuple[list[Expr], list[Expr], list[Expr]]:
    """The stage's spatial axes as tensor indices (global), as buffer indices (local to the
    region when compacted) and its reduction axes, all as simplified expressions of its leaf
    loops and of the enclosing loops in ``outer``; ``value`` is ``loop_values(stage)[0]`` if
    known."""
    if value is None:
        value, _ = loop_values(stage)
    n = len(stage.statement.axes)
    local = [value[iv.name] for iv in stage.axes[:n]]
    reduce = [value[iv.name] for iv in stage.axes[n:]]
    if stage.attach is None:
        return local, local, reduce
    start = [substitute(e, outer) for e in stage.attach.start]
    glob = [simplify(s + v) for s, v in zip(start, local)]
    return glob, (local if stage.attach.compact else glob), reduce


class _Same:
    """A memo key that matches only the very object it holds, and keeps it alive (so that its
    id is not reused): a statement's body holds float constants, and equal ones may print
    differently (``0.0 == -0.0``); the same body is the same object from one program to the
    next (inlining bodies are cached), and hashing it by value would walk it."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


# Memoised by its inputs, all immutable: the body (by identity), the axis values and the
# region starts (index expressions: integers, whose equality is exact). The programs of one
# search repeat most stages' loop structures (a mutant changes one decision of one block,
# and a stage the postprocessors leave alone lowers again as before), so the same body is
# rewritten with the same values again and again.
@functools.lru_cache(maxsize=1 << 12)
def _stage_body(same_body: _Same, mapping_items: tuple[tuple[str, Expr], ...],
                shifts_items: tuple[tuple[str, tuple[Expr, ...]], ...]) -> Expr:
    """A statement's body with its axes replaced as ``mapping_items`` says (simultaneously;
    the values are simplified expressions) and the indices of its loads simplified, those of
    compacted buffers made relative to their region's start (``shifts_items``: buffer and
    start of each dimension).

    Loads are rewritten from their own indices, which are small, rather than after
    substitution: an index that is an axis alone becomes the axis's value as it is (simplify
    gives a simplified expression back unchanged), and the substituted indices, the large
    part of the result, are not walked again.

    A body shares sub-expressions by identity (inlining puts one index expression of the
    consumer wherever the producer read its axis: in a padding's guard and in its load), and
    each is rewritten once (``done``, by identity: the body keeps them alive), so that the
    result shares them too."""
    body, mapping, shifts = same_body.obj, dict(mapping_items), dict(shifts_items)

    def index(i: Expr) -> Expr:
        if isinstance(i, Var) and i.name in mapping:
            return mapping[i.name]
        return simplify(substitute(i, mapping))

    done: dict[int, Expr] = {}

    def rewrite(e: Expr) -> Expr:
        if isinstance(e, Var):
            return mapping.get(e.name, e)
        found = done.get(id(e))
        if found is not None:
            return found
        if isinstance(e, Load):
            starts = shifts.get(e.buffer)
            if starts is None:
                new = Load(e.buffer, tuple(index(i) for i in e.indices), e.dtype_)
            else:
                shifted = (_minus(substitute(i, mapping), s) for i, s in zip(e.indices, starts))
                new = Load(e.buffer, tuple(shifted), e.dtype_)
        elif isinstance(e, BinOp):  # most nodes: without the generic ``children``/``rebuild``
            a, b = rewrite(e.a), rewrite(e.b)
            new = e if a is e.a and b is e.b else BinOp(e.op, a, b)
        else:
            kids = children(e)
            new_kids = tuple(rewrite(k) for k in kids)
            new = e if all(a is b for a, b in zip(kids, new_kids)) else rebuild(e, new_kids)
        done[id(e)] = new
        return new

    return rewrite(body)


@functools.lru_cache(maxsize=1 << 12)
def _minus(index: Expr, start: Expr) -> Expr:
    """``index - start`` with the terms they share cancelled (a start may read fused loops:
    ``f // 8 * 256 + i_1 * 128`` off ``f // 8 * 256 + i_1 * 128 + ax0`` leaves ``ax0``).
    Memoised, as the ``canonical`` and ``simplify`` it calls are (index expressions: their
    equality is exact): a compacted stage's store and its consumer's loads ask it of the same
    axis values and region starts in program after program."""
    return simplify(canonical(index - start))


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


def _region_guards(stage: StageState, glob: list[Expr], ranges: dict[str, tuple[int, int]]) -> list[Expr]:
    """For an attached stage: conditions keeping its region inside its tensor, where the
    enclosing loops' ranges do not already prove it."""
    conds = []
    for index, dim in zip(glob, stage.statement.shape):
        try:
            lo, hi = int_bounds(index, ranges)
        except (KeyError, ValueError):  # not boundable here: guard both ends
            lo, hi = -1, dim
        if lo < 0:
            conds.append(BinOp(">=", index, IntImm(0)))
        if hi >= dim:
            conds.append(BinOp("<", index, IntImm(dim)))
    return conds


def _stage_nest(state: ScheduleState, stage: StageState, outer: dict[str, Expr],
                ranges: dict[str, tuple[int, int]], shifted: Optional[dict[str, list[Expr]]] = None, *,
                owns: dict[int, Optional[tuple[IterVar, list[Span]]]]) -> Stmt:
    """The loop nest of ``stage`` with the stages attached at its loops; ``outer`` maps the
    names of enclosing stages' loops to expressions, ``ranges`` gives enclosing loop ranges,
    ``shifted`` the region starts of compacted buffers the stage reads from enclosing stages,
    ``owns`` every stage's ``own_compaction`` by id."""
    st = stage.statement
    value, split_guards = loop_values(stage)
    glob, index, reduce = stage_axes(stage, outer, value)
    leaves = stage.leaves
    ranges = {**ranges, **{lv.name: (0, lv.extent - 1) for lv in leaves}}
    guards = list(split_guards)
    if stage.attach is not None:
        guards += [(g, False) for g in _region_guards(stage, glob, ranges)]

    names = {**outer, **value}
    children = state.attached_at(stage)
    shifts = dict(shifted or {})
    shifts.update({c.buffer: [simplify(substitute(e, names)) for e in c.attach.start]
                   for c in children if c.attach.compact})
    mapping = dict(zip([a.name for a in st.axes], glob))
    mapping.update(zip([a.name for a in st.reduce_axes], reduce))
    body = _stage_body(_Same(st.body), tuple(mapping.items()), tuple((b, tuple(s)) for b, s in shifts.items()))
    own = owns[id(stage)]
    own_shift: dict[str, list[Expr]] = {}
    if own is not None:
        index = [_minus(i, start) for i, (start, _) in zip(glob, own[1])]
        own_shift = {st.name: [start for start, _ in own[1]]}
    store_index = tuple(index)  # simplified: axis values, or their offsets from the region's start

    def around(k: int, inner: Stmt) -> Stmt:
        """The body of loop ``k``: attached producers, ``inner``, attached consumers."""
        here = [c for c in children if c.attach.loop is leaves[k]]
        if not here:
            return inner
        # A block computed here may read the compacted buffer of another computed here too
        # (``compute_at`` of a block with several readers): it reads it shifted alike.
        before = [_stage_nest(state, c, names, ranges, shifts, owns=owns) for c in here if not c.attach.after]
        after = [_stage_nest(state, c, names, ranges, {**shifts, **own_shift}, owns=owns)
                 for c in here if c.attach.after]
        result = seq(*before, inner, *after)
        for c in reversed(here):
            if c.attach.compact:
                extents = tuple(iv.extent for iv in c.axes[:len(c.statement.axes)])
                result = Allocate(Buffer(c.buffer, extents, c.statement.dtype), result)
        if own is not None and own[0] is leaves[k]:
            result = Allocate(Buffer(st.name, tuple(e for _, e in own[1]), st.dtype), result)
        return result

    def loops(lo: int, hi: int, inner: Stmt, placed: dict[int, list[Expr]]) -> Stmt:
        for k in reversed(range(lo, hi)):
            lv = leaves[k]
            # The guards of loop ``k`` read no loop inside it: where they fail, the stages
            # computed at ``k`` have nothing to do either (a consumer would read elements that
            # no iteration of ``k`` wrote: those of the next iteration of an outer loop).
            inner = For(lv.name, lv.extent, lv.kind, _guarded(around(k, inner), placed.get(k)),
                        tuple(sorted(lv.annotations.items())))
        return inner

    n = len(leaves)
    placed = _place(leaves, [g for g, _ in guards])
    if not st.is_reduction:
        return _guarded(loops(0, n, Store(st.name, store_index, body), placed), placed.get(-1))
    current = Load(st.name, store_index, st.dtype)
    update = Store(st.name, store_index, BinOp(_COMBINE[st.reduce_op], current, body))
    init = Store(st.name, store_index, FloatImm(reduce_init(st.reduce_op), st.dtype))
    first_reduce = next((k for k, lv in enumerate(leaves) if lv.is_reduce), n)
    if first_reduce == n:  # a reduction over no variables: initialise, then combine once
        return _guarded(loops(0, n, seq(init, update), placed), placed.get(-1))
    # The init nest runs the spatial loops inside the outermost reduction loop, under the
    # spatial guards that read them (guards of outer loops already enclose both nests).
    init_leaves = [lv for lv in leaves[first_reduce:] if not lv.is_reduce]
    deep = [g for g, is_reduce in guards if not is_reduce and _depth(leaves, g) >= first_reduce]
    init_placed = _place(init_leaves, deep)
    init_nest: Stmt = init
    for k in reversed(range(len(init_leaves))):
        lv = init_leaves[k]
        init_nest = For(lv.name, lv.extent, lv.kind, _guarded(init_nest, init_placed.get(k)),
                        tuple(sorted(lv.annotations.items())))
    init_nest = _guarded(init_nest, init_placed.get(-1))
    main_nest = loops(first_reduce, n, update, placed)
    return _guarded(loops(0, first_reduce, seq(init_nest, main_nest), placed), placed.get(-1))


def with_kinds(func: PrimFunc, kinds: Mapping[str, ForKind]) -> PrimFunc:
    """``func`` with each loop named in ``kinds`` (every ``For`` of it: a reduction's
    initialisation repeats spatial loops) of that kind; statements that hold none of them
    are kept as they are. Lowering reads a loop's kind only to label its ``For`` (and loop
    names are unique in a state), so this is the program lowering gives once primitives
    have changed those loops' kinds."""
    if not kinds:
        return func
    return dataclasses.replace(func, body=_with_kinds(func.body, kinds))


def _with_kinds(stmt: Stmt, kinds: Mapping[str, ForKind]) -> Stmt:
    if isinstance(stmt, Seq):
        stmts = tuple(_with_kinds(s, kinds) for s in stmt.stmts)
        return stmt if all(a is b for a, b in zip(stmts, stmt.stmts)) else Seq(stmts)
    if isinstance(stmt, For):
        body = _with_kinds(stmt.body, kinds)
        kind = kinds.get(stmt.var, stmt.kind)
        if body is stmt.body and kind is stmt.kind:
            return stmt
        return For(stmt.var, stmt.extent, kind, body, stmt.annotations)
    if isinstance(stmt, Allocate):
        body = _with_kinds(stmt.body, kinds)
        return stmt if body is stmt.body else Allocate(stmt.buffer, body)
    if isinstance(stmt, IfThenElse):
        then = _with_kinds(stmt.then_body, kinds)
        other = None if stmt.else_body is None else _with_kinds(stmt.else_body, kinds)
        return stmt if then is stmt.then_body and other is stmt.else_body else IfThenElse(stmt.cond, then, other)
    return stmt
