"""The scheduled state: how each statement of a workload is iterated.

As in Ansor's ``State`` and Halide, a stage's computation stays fixed; the state describes only
its loops: the tree of iterator relations (``Split``: one loop into several, ``Fuse``: several
into one), the order of its leaf loops, and each loop's kind and annotations. ``Schedule``
edits this state through its primitives; ``lower`` turns it into a loop program.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from metasched.ir.expr import Expr
from metasched.ir.stmt import ForKind
from metasched.lang.workload import Statement, Workload


@dataclass(eq=False)
class IterVar:
    """One loop of a stage. Identity matters: a loop is the same object until a split or fuse
    consumes it (``consumed_by`` then says which)."""

    name: str
    extent: int
    is_reduce: bool
    kind: ForKind = ForKind.SERIAL
    annotations: dict[str, object] = field(default_factory=dict)
    consumed_by: Optional[str] = None

    def __repr__(self) -> str:
        return f"IterVar({self.name}, {self.extent}{', reduce' if self.is_reduce else ''})"


@dataclass(frozen=True, eq=False)
class Split:
    """``parent`` iterates as ``children`` (outer to inner): parent = sum(child * stride).
    When the children's extents multiply to more than the parent's, lowering adds a guard."""

    parent: IterVar
    children: tuple[IterVar, ...]


@dataclass(frozen=True, eq=False)
class Fuse:
    """``children`` (outer to inner, adjacent) iterate as the one loop ``fused``."""

    children: tuple[IterVar, ...]
    fused: IterVar


Relation = Union[Split, Fuse]


@dataclass(eq=False)
class Attach:
    """Where a stage runs when it is not at the root: inside ``loop`` of ``target``, before the
    rest of that loop's body (``compute_at``: a producer) or after it (``reverse_compute_at``:
    a consumer). The stage then iterates a region of its tensor: spatial axis ``d`` covers
    ``start[d] + 0 .. start[d] + extent - 1``, where ``start[d]`` reads loops of ``target``
    (by name) that enclose ``loop``. ``compact``: the stage's buffer is allocated at the
    attach point with the region's shape instead of the whole tensor's."""

    target: "StageState"
    loop: IterVar
    after: bool
    start: tuple[Expr, ...]
    compact: bool


@dataclass(eq=False)
class StageState:
    """One block: the statement it computes (``statement.name`` is the buffer it writes) and
    its loops: ``axes`` are its original loops (spatial, then reduction), ``leaves`` the loops
    it runs now, outermost first. ``scope`` is ``"global"`` or ``"local"``. ``layout``: the
    order its buffer's dimensions are stored in (``transform_layout``), None for as written."""

    name: str
    statement: Statement
    axes: list[IterVar]
    relations: list[Relation]
    leaves: list[IterVar]
    scope: str = "global"
    attach: Optional[Attach] = None
    annotations: dict[str, object] = field(default_factory=dict)
    layout: Optional[tuple[int, ...]] = None

    @property
    def buffer(self) -> str:
        return self.statement.name

    @property
    def root(self) -> StageState:
        """The stage at the root whose loops hold this one (itself, at the root)."""
        stage = self
        while stage.attach is not None:
            stage = stage.attach.target
        return stage

    def reads(self, buffer: str) -> bool:
        return buffer in self.statement.reads()

    def all_loops(self) -> list[IterVar]:
        """Every loop the stage has had: original, intermediate and current."""
        found = {id(iv): iv for iv in self.axes + self.leaves}
        for rel in self.relations:
            made = rel.children + (rel.parent,) if isinstance(rel, Split) else rel.children + (rel.fused,)
            found.update((id(iv), iv) for iv in made)
        return list(found.values())


@dataclass(eq=False)
class ScheduleState:
    """Every stage of a workload, in statement order, and the loop names in use."""

    workload: Workload
    stages: list[StageState]
    names: set[str]

    @classmethod
    def initial(cls, workload: Workload) -> ScheduleState:
        """The unscheduled program: each statement's loops in their written order."""
        state = cls(workload, [], {t.name for t in workload.inputs} | {s.name for s in workload.statements})
        for st in workload.statements:
            axes = [IterVar(state.fresh_name(a.name), a.extent, False) for a in st.axes]
            axes += [IterVar(state.fresh_name(a.name), a.extent, True) for a in st.reduce_axes]
            state.stages.append(StageState(st.name, st, axes, [], list(axes)))
        return state

    def fresh_name(self, base: str) -> str:
        """``base``, or ``base`` with the first free number appended; the name is then taken."""
        name, n = base, 0
        while name in self.names:
            n += 1
            name = f"{base}{n}"
        self.names.add(name)
        return name

    def stage(self, name: str) -> StageState:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def producers(self, stage: StageState) -> list[StageState]:
        """The stages whose buffers ``stage`` reads, in stage order."""
        reads = set(stage.statement.reads())
        return [s for s in self.stages if s.buffer in reads and s is not stage]

    def consumers(self, stage: StageState) -> list[StageState]:
        """The stages that read the buffer ``stage`` writes, in stage order."""
        return [s for s in self.stages if s is not stage and s.reads(stage.buffer)]

    def attached_at(self, target: StageState) -> list[StageState]:
        """The stages attached at loops of ``target``, in stage order."""
        return [s for s in self.stages if s.attach is not None and s.attach.target is target]

    def copy(self, clones: Optional[dict[int, object]] = None) -> ScheduleState:
        """An independent copy: loops and stages are new objects, related to each other as
        before. ``clones``, if given, is filled with id(old loop or stage) -> its copy."""
        clones = {} if clones is None else clones

        def clone(iv: IterVar) -> IterVar:
            got = clones.get(id(iv))
            if got is None:
                got = IterVar(iv.name, iv.extent, iv.is_reduce, iv.kind, dict(iv.annotations), iv.consumed_by)
                clones[id(iv)] = got
            return got

        for s in self.stages:
            relations: list[Relation] = []
            for r in s.relations:
                if isinstance(r, Split):
                    relations.append(Split(clone(r.parent), tuple(map(clone, r.children))))
                else:
                    relations.append(Fuse(tuple(map(clone, r.children)), clone(r.fused)))
            clones[id(s)] = StageState(s.name, s.statement, [clone(a) for a in s.axes], relations,
                                             [clone(lv) for lv in s.leaves], s.scope, None, dict(s.annotations),
                                             s.layout)
        for s in self.stages:
            if s.attach is not None:
                a = s.attach
                clones[id(s)].attach = Attach(clones[id(a.target)], clone(a.loop), a.after,
                                                    a.start, a.compact)
        return ScheduleState(self.workload, [clones[id(s)] for s in self.stages], set(self.names))
