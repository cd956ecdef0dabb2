"""The scheduled state: how each statement of a workload is iterated.

As in Ansor's ``State`` and Halide, a stage's computation stays fixed; the state describes only
its loops: the tree of iterator relations (``Split``: one loop into several, ``Fuse``: several
into one), the order of its leaf loops, and each loop's kind and annotations. ``Schedule``
edits this state through its primitives; ``lower`` turns it into a loop program.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

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
class StageState:
    """The loops of one statement: ``axes`` are its original loops (spatial, then reduction),
    ``leaves`` the loops it runs now, outermost first."""

    statement: Statement
    axes: list[IterVar]
    relations: list[Relation]
    leaves: list[IterVar]

    @property
    def name(self) -> str:
        return self.statement.name


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
            state.stages.append(StageState(st, axes, [], list(axes)))
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

    def copy(self, clones: Optional[dict[int, IterVar]] = None) -> ScheduleState:
        """An independent copy: loops are new objects, related to each other as before.
        ``clones``, if given, is filled with id(old loop) -> new loop."""
        clones = {} if clones is None else clones

        def clone(iv: IterVar) -> IterVar:
            got = clones.get(id(iv))
            if got is None:
                got = IterVar(iv.name, iv.extent, iv.is_reduce, iv.kind, dict(iv.annotations), iv.consumed_by)
                clones[id(iv)] = got
            return got

        stages = []
        for s in self.stages:
            relations: list[Relation] = []
            for r in s.relations:
                if isinstance(r, Split):
                    relations.append(Split(clone(r.parent), tuple(map(clone, r.children))))
                else:
                    relations.append(Fuse(tuple(map(clone, r.children)), clone(r.fused)))
            stages.append(StageState(s.statement, [clone(a) for a in s.axes], relations,
                                     [clone(lv) for lv in s.leaves]))
        return ScheduleState(self.workload, stages, set(self.names))
