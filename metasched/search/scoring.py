"""Candidates in bulk: fresh samples and mutants made into post-processed programs with their
feature rows, in this process or spread over worker processes.

Evolutionary search spends its time here: each candidate is a replay, the postprocessors, a
lowering and the per-store features (milliseconds of Python), and a search round makes hundreds.
The work of one candidate depends only on what the parent process sends (a sample's seed, a
mutant's trace), so any split over processes gives the same candidates in the same order, and
a seeded search stays deterministic.

* ``Candidate``: a post-processed program as the search keeps it: its ident (design space and
  decisions), trace, feature row (the cost model's ``FeatureExtractor``) and loop-program
  digest; its program key when asked; ``schedule()`` replays it when a user wants it.
* ``Tasks``: how a batch of tasks runs. ``InProcess`` runs them here; the tuner lends its
  builder's worker processes, which are idle while the search works.
* ``Scorer``: the workload and space of a run, and ``samples(seeds)`` / ``mutants(traces)``;
  ``prepare()`` readies the workers at the start of a run.
* ``_Wire``: how traces cross between processes, by their design spaces (small pickles, and
  the same instruction objects on both sides).
* ``collector_paused``: the cycle collector off while a round makes candidates in bulk.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import math
import operator
import pickle
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator, Optional, Protocol, Sequence, Union

import numpy as np

from metasched.database import program_key
from metasched.errors import ScheduleError
from metasched.ir import func_digest
from metasched.lang.workload import Workload
from metasched.schedule import Schedule, Trace, replay
from metasched.search.cost_model import FeatureExtractor, ProgramFeatures
from metasched.search.mutator import apply_mutant
from metasched.space import SpaceGenerator


@dataclass(frozen=True)
class Candidate:
    """A post-processed program: ``ident``, which tells it from the other programs of a run
    (``_Wire.ident``: its design space and decisions), its ``trace`` (with the
    postprocessors' instructions), its feature ``row`` and the digest of its loop program
    (``ir.func_digest``), computed where it was made, so that claiming and learning it need
    no replay. ``key``, its program key (``database.program_key``), is worked out when first
    asked for: a search tells its candidates apart by ``ident`` and needs the key only of the
    programs it proposes."""

    ident: Hashable
    trace: Trace
    row: np.ndarray
    program: str

    @functools.cached_property
    def key(self) -> str:
        return program_key(self.trace)

    def schedule(self, workload: Workload) -> Schedule:
        """The program as a ``Schedule`` (its trace replayed as recorded)."""
        return replay(workload, self.trace)


class Tasks(Protocol):
    """Runs ``fn(*args)`` for each ``args`` of ``tasks`` and returns the results in order;
    ``workers`` is how many run at once (the size to split a batch for)."""

    workers: int

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple]) -> list:
        ...


class InProcess:
    """Every task in this process, one after another."""

    workers = 1

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple]) -> list:
        return [fn(*args) for args in tasks]


class _Shared:
    """The workload and space of a run as tasks carry them: pickled once in the parent, and
    unpickled once per worker process (kept by their digest), not once per task. ``wire``
    sends traces between the processes by their design spaces (``_Wire``); a worker whose
    design spaces are not the parent's (a space module that makes them differently each
    time) refuses its tasks, which then run in the parent."""

    def __init__(self, workload: Workload, space: SpaceGenerator, extractor: FeatureExtractor) -> None:
        self.workload, self.space, self.extractor = workload, space, extractor
        self.wire = _Wire(workload, space)
        self._blob: Optional[bytes] = None

    def __getstate__(self) -> dict:
        if self._blob is None:
            self._blob = pickle.dumps((self.workload, self.space, self.extractor, self.wire.fingerprint))
        return {"blob": self._blob}

    def __setstate__(self, state: dict) -> None:
        blob = state["blob"]
        digest = hashlib.sha256(blob).digest()
        if digest not in _UNPICKLED:
            _UNPICKLED.clear()  # a worker serves one run at a time
            workload, space, extractor, fingerprint = pickle.loads(blob)
            _UNPICKLED[digest] = (workload, space, extractor, _Wire(workload, space), fingerprint)
        self.workload, self.space, self.extractor, self.wire, fingerprint = _UNPICKLED[digest]
        if self.wire.fingerprint != fingerprint:
            raise RuntimeError(f"this process made other design spaces of {self.workload} than the "
                               f"parent process did; {type(self.space).__name__}.generate must "
                               f"make the same ones every time")
        self._blob = blob


_UNPICKLED: dict[bytes, tuple[Workload, SpaceGenerator, FeatureExtractor, "_Wire", str]] = {}


class _Wire:
    """How traces cross between processes. Every sample and mutant of a run begins with the
    instructions of one of its design spaces, the very objects (``replay`` records the
    instructions it replays): such a trace travels as the space's number, its decisions and
    the instructions after the space's (the postprocessors'), and arrives holding the
    receiving process's own instructions of that space. That keeps what crosses small, and
    ``database.program_key`` keeps the text of a design space's instructions by their
    identity, so it writes it once per process, not once per trace. Any other trace travels
    whole."""

    def __init__(self, workload: Workload, space: SpaceGenerator) -> None:
        spaces = space.design_spaces(workload)
        self._insts = [sch.trace.insts for sch in spaces]
        self.fingerprint = hashlib.sha256("\n\n".join(str(sch.trace) for sch in spaces).encode()).hexdigest()
        # (length, identity of the last instruction) -> the space's number, longest first.
        self._ends = {(len(insts), id(insts[-1])): k
                      for k, insts in sorted(enumerate(self._insts), key=lambda e: -len(e[1])) if insts}

    def ident(self, packed: Union[Trace, tuple]) -> Hashable:
        """What tells the program of a post-processed trace (packed by ``pack``) from the other
        programs of a run: its design space's number and its decisions, where the trace is
        that design space post-processed (the postprocessors make one program of one
        sampling part); else its program key. One ident is always one program key; one key
        is two idents only for traces whose decisions differ in what ``Trace.simplified``
        drops, and one loop program may be many keys (``SearchContext.claim`` refuses all
        but the first)."""
        if isinstance(packed, tuple) and packed[1] and packed[1][0].kind == "EnterPostproc":
            k, _, decisions = packed
            return k, tuple(sorted(decisions.items()))
        return program_key(self.unpack(packed))

    def pack(self, trace: Trace, sampling: bool = False) -> Union[Trace, tuple]:
        """What crosses for ``trace``: (space number, the instructions after the space's,
        decisions), or the trace itself. ``sampling``: only what comes before
        ``enter_postproc`` is wanted (a mutant, which ``apply_mutant`` post-processes again),
        so the postprocessors' instructions stay here (two thirds of a mutant's pickle)."""
        insts = trace.insts
        for (length, last), k in self._ends.items():
            if (length <= len(insts) and id(insts[length - 1]) == last
                    and all(map(operator.is_, insts[:length], self._insts[k]))):
                rest = insts[length:]
                if sampling:
                    rest = rest[:next((i for i, inst in enumerate(rest) if inst.kind == "EnterPostproc"), len(rest))]
                return k, rest, trace.decisions
        return trace

    def unpack(self, packed: Union[Trace, tuple]) -> Trace:
        """The trace ``pack`` sent, holding this process's design space instructions."""
        if isinstance(packed, Trace):
            return packed
        k, rest, decisions = packed
        return Trace(self._insts[k] + rest, decisions)

    def intern(self, trace: Trace) -> Trace:
        """``trace`` holding a design space's own instructions where it begins with equal ones
        (a trace read from a database), so that it packs small; equal means equal
        ``repr`` too, which tells ``1`` from ``1.0`` and ``True`` apart."""
        insts = trace.insts
        for (length, _), k in self._ends.items():
            space = self._insts[k]
            if length <= len(insts) and insts[:length] == space and repr(insts[:length]) == repr(space):
                return Trace(space + insts[length:], trace.decisions)
        return trace


def _ready(shared: _Shared) -> None:
    """Nothing more: receiving ``shared`` readied the worker (its imports, the design spaces)."""


# A candidate as it crosses between processes: its trace packed (``_Wire``), its row and the
# digest of its loop program.
_Packed = tuple[Union[Trace, tuple], np.ndarray, str]


def _packed(shared: _Shared, sch: Schedule) -> _Packed:
    return shared.wire.pack(sch.trace), shared.extractor(sch), func_digest(sch.lower())


def _samples(shared: _Shared, seeds: Sequence[int]) -> list[Optional[_Packed]]:
    """A fresh sample of the space per seed; None where a postprocessor rejected it."""
    out: list[Optional[_Packed]] = []
    for seed in seeds:
        try:
            sch = shared.space.sample(shared.workload, np.random.default_rng(seed))
        except ScheduleError:
            out.append(None)
            continue
        out.append(_packed(shared, sch))
    return out


def _mutants(shared: _Shared, traces: Sequence[Union[Trace, tuple]]) -> list[Optional[_Packed]]:
    """Each mutant trace (packed) replayed (its sampling part) and post-processed again; None
    where replay or a postprocessor refused it."""
    out: list[Optional[_Packed]] = []
    for packed in traces:
        sch = apply_mutant(shared.workload, shared.wire.unpack(packed), shared.space)
        out.append(None if sch is None else _packed(shared, sch))
    return out


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector paused (as it was after): a search round makes and receives
    hundreds of candidates, objects by the hundred thousand that mostly die young (freed as
    their counts drop) or live long (the population), and collections in between walked the
    whole heap again and again (a tenth of a round's time in the parent). What is left for
    the collector is collected once it runs again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Scorer:
    """Makes candidates of ``workload`` in ``space``, in ``tasks`` (default: this process),
    their rows by ``extractor`` (default: ``ProgramFeatures``)."""

    def __init__(self, workload: Workload, space: SpaceGenerator, tasks: Optional[Tasks] = None,
                 extractor: Optional[FeatureExtractor] = None) -> None:
        self.workload, self.space = workload, space
        self.tasks = tasks or InProcess()
        self._shared = _Shared(workload, space, extractor or ProgramFeatures())

    def prepare(self) -> None:
        """Ready the worker processes for this run now (a task each: the imports of the search,
        the design spaces; half a second on conv2d), not in the first round."""
        if self.tasks.workers > 1:
            self.tasks.map(_ready, [(self._shared,)] * self.tasks.workers)

    def samples(self, seeds: Sequence[int]) -> list[Optional[Candidate]]:
        """One fresh sample per seed (``space.sample`` with ``default_rng(seed)``), in order;
        None for one the postprocessors rejected."""
        return self._run(_samples, [int(s) for s in seeds])

    def mutants(self, traces: Sequence[Trace]) -> list[Optional[Candidate]]:
        """Each mutant (``mutator.apply_mutant``), in order; None for one that was dropped."""
        return self._run(_mutants, [self._shared.wire.pack(t, sampling=True) for t in traces])

    def candidate(self, sch: Schedule) -> Candidate:
        """The candidate of a post-processed schedule, its trace holding the design spaces'
        instructions where it begins with equal ones (``sch`` replayed from a database, say),
        so that it crosses to the workers small and has the ident of its program."""
        wire = self._shared.wire
        trace = wire.intern(sch.trace)
        return Candidate(wire.ident(wire.pack(trace)), trace, self._shared.extractor(sch), func_digest(sch.lower()))

    def _run(self, fn: Callable, items: list) -> list[Optional[Candidate]]:
        if not items:
            return []
        wire = self._shared.wire
        return [None if c is None else Candidate(wire.ident(c[0]), wire.unpack(c[0]), c[1], c[2])
                for part in self.tasks.map(fn, [(self._shared, chunk) for chunk in _chunks(items, self.tasks.workers)])
                for c in part]


def _chunks(items: list, workers: int) -> list[list]:
    """``items`` in chunks for ``workers`` to take in turn, each half of what remains per
    worker (at least two items): the first ones large, so that sending them costs little,
    the last ones small, so that the workers finish together."""
    chunks, start = [], 0
    while start < len(items):
        size = max(2, math.ceil((len(items) - start) / (2 * workers)))
        chunks.append(items[start:start + size])
        start += size
    return chunks
