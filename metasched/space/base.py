"""The extension points of a search space: schedule rules, postprocessors, the space generator.

* A ``ScheduleRule`` looks at one block of a schedule and returns the schedules it makes of it:
  one or more forks, or ``[sch]`` unchanged when it does not apply.
* A ``Postproc`` runs on a sampled program, after ``sch.enter_postproc()``: it rewrites what the
  rules left as annotations into real loop kinds, or checks the program; ``False`` (or a
  ``ScheduleError``) rejects the candidate. The postprocessors together are the validator.
* A ``SpaceGenerator`` turns a workload into design spaces (schedules whose traces still hold
  free sampling instructions) and samples programs from them. ``PostOrderApply`` is
  MetaSchedule's: every rule, in order, on every block from the outputs back to the inputs.

Rules and postprocessors see a schedule only through its primitives and
``metasched.schedule.analysis``; they are plain objects whose constructor arguments are all
named, so that a space is a list anyone can print, edit and rebuild.
"""
from __future__ import annotations

import abc
import dataclasses
import os
from typing import Sequence

from metasched.errors import ScheduleError
from metasched.lang.workload import Workload
from metasched.schedule import BlockRV, Schedule, analysis, replay
from metasched.schedule.schedule import Seed, make_rng


class ScheduleRule(abc.ABC):
    """Transforms one block. Subclasses are dataclasses (their fields are their arguments) and
    implement ``apply``."""

    @abc.abstractmethod
    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        """The schedules this rule makes of ``sch`` at ``block``: forks made with
        ``sch.copy()`` (``sch`` itself may be returned, changed or not, as one of them), or
        ``[sch]`` unchanged when the rule does not apply. May raise only ``ScheduleError``."""


class Postproc(abc.ABC):
    """Rewrites or checks a whole sampled program. Subclasses are dataclasses and implement
    ``apply``."""

    @abc.abstractmethod
    def apply(self, sch: Schedule) -> bool:
        """Rewrite or check ``sch`` in place; False rejects the candidate."""


class SpaceGenerator(abc.ABC):
    """Makes the design spaces of a workload and samples programs from them."""

    postprocs: Sequence[Postproc] = ()

    @abc.abstractmethod
    def generate(self, workload: Workload) -> list[Schedule]:
        """The design spaces: schedules whose traces hold the sampling instructions, free."""

    def sample(self, workload: Workload, rng: Seed = 0) -> Schedule:
        """One random program: a design space chosen at random and replayed with fresh
        decisions, then post-processed. Raises ``ScheduleError`` naming the rule or
        postprocessor that failed or rejected it, so that callers can count and retry."""
        rng = make_rng(rng, "sample")
        spaces = self.design_spaces(workload)
        if not spaces:
            raise ScheduleError(f"{type(self).__name__} made no design space of {workload}")
        space = spaces[int(rng.integers(len(spaces)))]
        sch = replay(workload, space.trace.without_decisions(), rng=rng)
        return self.postprocess(sch)

    def postprocess(self, sch: Schedule) -> Schedule:
        """Mark the start of postprocessing and run every postprocessor on ``sch`` in order."""
        sch.enter_postproc()
        for post in self.postprocs:
            try:
                ok = post.apply(sch)
            except ScheduleError as err:
                raise ScheduleError(f"postprocessor {describe(post)} rejected the program: {err}") from None
            if not ok:
                raise ScheduleError(f"postprocessor {describe(post)} rejected the program")
        return sch

    def __getstate__(self) -> dict:
        # Pickled (to a worker process) or copied without the design spaces made so far:
        # they are schedules, large to send, and remade where first needed.
        state = dict(self.__dict__)
        state.pop("_space_cache", None)
        return state

    def design_spaces(self, workload: Workload) -> list[Schedule]:
        """``generate(workload)``, made once: design spaces depend only on the workload and the
        modules (a rule list edited after a first sample makes new ones; ``repr`` shows every
        argument). The samples of a design space hold its trace's very instructions (see
        ``replay``); the list and its schedules are shared, not to be changed."""
        cache = self.__dict__.setdefault("_space_cache", {})
        key = (workload, repr(self))
        if key not in cache:
            cache[key] = self.generate(workload)
        return cache[key]


@dataclasses.dataclass
class PostOrderApply(SpaceGenerator):
    """MetaSchedule's space generator: each rule in ``rules``, in order, applied to each block
    in post-order (the outputs first, then the blocks they read: ``analysis.blocks``) of every
    schedule the earlier steps made. Blocks that rules create (caches, rfactor blocks) are
    not visited; a block that an earlier rule inlined is skipped."""

    rules: Sequence[ScheduleRule] = ()
    postprocs: Sequence[Postproc] = ()

    def generate(self, workload: Workload) -> list[Schedule]:
        first = Schedule(workload)
        current = [first]
        for name in analysis.blocks(first):
            made: list[Schedule] = []
            for sch in current:
                if name not in analysis.blocks(sch):  # inlined by a rule at an earlier block
                    made.append(sch)
                    continue
                block = sch.get_block(name)
                forks = [sch]
                for rule in self.rules:
                    forks = [out for fork in forks for out in self._apply(rule, fork, block, name)]
                made.extend(forks)
            current = made
        return current

    @staticmethod
    def _apply(rule: ScheduleRule, sch: Schedule, block: BlockRV, name: str) -> list[Schedule]:
        if name not in analysis.blocks(sch):
            return [sch]
        try:
            return list(rule.apply(sch, block))
        except ScheduleError as err:
            raise ScheduleError(f"rule {describe(rule)} failed on block {name} of {sch.workload}: {err}") from None


def describe(module: object) -> str:
    """``Name(arg=value, ...)``: how a rule or postprocessor was made (its dataclass fields)."""
    if dataclasses.is_dataclass(module):
        fields = ", ".join(f"{f.name}={getattr(module, f.name)!r}" for f in dataclasses.fields(module)
                           if f.repr)
        return f"{type(module).__name__}({fields})"
    return type(module).__name__


def host_cores() -> int:
    """The cores this process may run on: what rules use for ``num_cores=None``."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
