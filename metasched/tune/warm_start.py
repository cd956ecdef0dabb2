"""Warm start: the cost model of a tuning run trained, before the run measures anything, on
the records of other workloads in its database.

Evolutionary search fits its model on the run's own records as they arrive, 16 a batch: its
first proposals are picked by a model that knows 16 or 32 programs, or by none. The records of
a workload of the same kind (``Workload.kind``: matmul_relu for dense_bias_relu,
conv2d_bias_relu at other sizes) teach it beforehand what makes such programs fast, as
MetaSchedule's one cost model learns from every task it tunes together; the records of a
workload of another kind did not help. So by default a run takes one workload of its own kind,
the one with the most records, when it has at least ``WARM_MIN_RECORDS``: a model trained on
fewer would take the place of the first proposal's pick of the most vectorized samples
(``EvolutionaryConfig.first_prior_share``), which pays. Figures: bench/README.md, Design history.

* ``warm_start``: the model and what it was trained on (``WarmStart``), for ``tune``;
* ``same_kind``: the workload a run takes by default.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Optional, Sequence, Union

from metasched.database import Database, Target
from metasched.errors import DatabaseError, WarmStartError
from metasched.lang.workload import Workload
from metasched.search import CostModel, GBTModel
from metasched.search.cost_model import MIN_TRAINING_PROGRAMS, learn_records

# The most records of one workload a warm start trains on, spread over its runs (as many
# as were measured); replaying and featurising them takes about a second.
WARM_RECORDS = 256
# The fewest records of this target a workload of the same kind needs to be taken by default:
# those of one default run (``tune``'s 64 trials), the fewest measured.
WARM_MIN_RECORDS = 64


@dataclass(frozen=True)
class WarmStart:
    """What a run's cost model started trained on: ``records`` records of ``workloads``
    (at most ``WARM_RECORDS`` of each) measured on the run's target; ``informed``: enough of
    them to learn from (``MIN_TRAINING_PROGRAMS``); ``chosen``: the run took them as a
    workload of its kind, none being named."""

    workloads: tuple[Workload, ...]
    records: int
    informed: bool
    chosen: bool

    def __str__(self) -> str:
        names = ", ".join(wl.label for wl in self.workloads)
        text = f"cost model warm-started on {self.records} records of {names}"
        if self.chosen:
            text += ", a workload of the same kind"
        if not self.informed:
            text += (f" (too few to learn from: it scores at random until it knows "
                     f"{MIN_TRAINING_PROGRAMS} programs)")
        return text


def same_kind(db: Database, workload: Workload, target: Target, exclude: Collection[str] = ()) -> Optional[Workload]:
    """The workload other than ``workload`` of its kind (``Workload.kind``) with the most
    records measured on ``target`` in ``db``, at least ``WARM_MIN_RECORDS`` (the first stored
    of those with as many); None when there is none. A stored workload that cannot be rebuilt
    from its source is passed over, and so are those whose keys are in ``exclude``."""
    best, most = None, WARM_MIN_RECORDS - 1
    for summary in db.workloads():
        if summary.key == workload.key or summary.key in exclude or summary.records <= most:
            continue
        try:
            other = db.workload(summary.key)
        except DatabaseError:
            continue
        if other.kind == workload.kind:
            count = len(db.measured(other, target))
            if count > most:
                best, most = other, count
    return best


def warm_start(db: Database, workload: Workload, target: Target, wanted: Union[bool, Sequence[Workload]],
               model: Optional[CostModel] = None,
               exclude: Collection[str] = ()) -> tuple[Optional[CostModel], Optional[WarmStart]]:
    """The cost model a run of ``workload`` starts with, and what it was trained on: for
    ``wanted`` True, the records of ``same_kind`` (none: no model; ``exclude``: keys of
    workloads not to take, the other tasks of the run, whose records the model learns
    anyway); for a list of workloads, theirs (``WarmStartError`` when ``checked`` refuses the
    list or when they have no records on ``target``); for False, no model. ``model`` is the
    model to train (default: a new ``GBTModel``)."""
    if wanted is False:
        return None, None
    chosen = wanted is True
    if chosen:
        other = same_kind(db, workload, target, exclude)
        others: tuple[Workload, ...] = () if other is None else (other,)
    else:
        others = checked(wanted, workload)
    if not others:
        return None, None
    model = model if model is not None else GBTModel()
    learned = learn_records(model, db, others, target, most=WARM_RECORDS)
    if not learned:
        if chosen:  # none of its records replays any more
            return None, None
        raise WarmStartError(f"warm start: {getattr(db, 'path', 'the database')} holds no records of "
                             f"{', '.join(wl.label for wl in others)} measured on this CPU")
    return model, WarmStart(others, learned, model.informed, chosen)


def checked(wanted: Union[bool, Sequence[Workload]], workload: Workload) -> tuple[Workload, ...]:
    """The workloads of a ``warm_start`` argument (none for True or False), after a check
    that each is a ``Workload`` other than the one tuned (``WarmStartError``)."""
    if isinstance(wanted, bool):
        return ()
    if isinstance(wanted, (str, Workload)) or not isinstance(wanted, Sequence):
        raise WarmStartError(f"warm_start is True, False or a list of Workloads, not {wanted!r}")
    for other in wanted:
        if not isinstance(other, Workload):
            raise WarmStartError(f"warm_start: expected Workloads, got {other!r}")
        if other.key == workload.key:
            raise WarmStartError(f"warm start on {other.label}: that is the workload being tuned; its own "
                                 f"records train the model anyway")
    return tuple(wanted)
