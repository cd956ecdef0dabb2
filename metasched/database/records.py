"""What the database stores and hands back: ``Record`` (one measured program), ``WorkloadSummary``
(one line of the workload listing), ``program_key`` (a program's identity) and the checks a
result passes before it is written.

Map: the records; ``program_key``, its definition (``_canonical_text_as_defined``) and the
direct writer of the same text (``_canonical_text`` and its helpers, down to ``_literal``);
the checks; reading a record back from a row.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import numbers
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from json.encoder import encode_basestring_ascii
from types import MappingProxyType
from typing import Any, Optional

from metasched.errors import DatabaseError
from metasched.schedule import Trace
from metasched.schedule.instruction import KINDS, RV, Instruction
from metasched.schedule.trace import JSON_VERSION
from metasched.schedule.trace_text import format_instruction
from metasched.database.target import Target

# The columns of the records table, in the order ``record_from_row`` reads them.
RECORD_COLUMNS = ("id", "workload", "trace", "program", "seconds", "error", "target", "build_seconds",
                  "created", "versions")


@dataclass(frozen=True)
class Record:
    """One measured (or failed) program of a workload on a target.

    ``seconds`` are the repeats' run times (empty when it failed); ``error`` says why it failed
    (None: it ran); ``program`` is ``program_key(trace)``; ``versions`` the versions of
    metasched and llvmlite that measured it. ``created`` is a Unix time."""

    id: int
    workload_key: str
    trace: Trace
    program: str
    seconds: tuple[float, ...]
    error: Optional[str]
    target: Target
    build_seconds: Optional[float]
    created: float
    versions: dict[str, str] = field(hash=False)

    @property
    def ok(self) -> bool:
        """Whether the program ran: no error and at least one time."""
        return self.error is None and bool(self.seconds)

    @property
    def median(self) -> Optional[float]:
        """The median of the run times in seconds; None when the program failed."""
        return statistics.median(self.seconds) if self.ok else None


@dataclass(frozen=True)
class Confirmation:
    """The fastest records of a workload on a target timed again together, in turns, at the end
    of a tuning run (``Database.confirm``): ``times`` maps each record's id to its seconds in
    each round. Times taken minutes apart on a shared machine differ by the load of the moment;
    times taken in turns do not, so the confirmation decides which of them is fastest
    (``winner``).

    ``current``: no successful record of the workload on the target came after it (its
    ``newest_record`` is still the newest); only then does ``Database.best`` follow it."""

    id: int
    times: Mapping[int, tuple[float, ...]]
    newest_record: int
    created: float
    current: bool

    def median(self, record_id: int) -> float:
        """The median of a record's times in the confirmation."""
        return statistics.median(self.times[record_id])

    @property
    def winner(self) -> int:
        """The id of the record with the smallest median (the earlier record on a tie)."""
        return min(self.times, key=lambda record_id: (self.median(record_id), record_id))


@dataclass(frozen=True)
class WorkloadSummary:
    """A workload the database holds: its key, name, parameters and how many records it has."""

    key: str
    name: str
    params: dict[str, int] = field(hash=False)
    records: int


def program_key(trace: Trace) -> str:
    """The identity of the program ``trace`` replays to: 24 hex digits of the SHA-256 of the
    canonical JSON of ``trace.simplified()``. Pure instructions nothing uses do not count, nor
    do the names of random variables (renamed in order of definition), so two recordings of
    one schedule get one key."""
    return hashlib.sha256(_canonical_text(trace).encode()).hexdigest()[:24]


def _canonical_text_as_defined(trace: Trace) -> str:
    """The text ``program_key`` hashes, by its definition: the JSON form of the simplified
    trace with random variables renamed, keys sorted, no spaces. Keys are stored in
    databases, so this text must never change; ``_canonical_text`` writes it faster."""
    form = _renamed(trace.simplified().to_json())
    return json.dumps(form, sort_keys=True, separators=(",", ":"))


def _renamed(form: dict) -> dict:
    """The JSON form with every random variable named ``v<n>`` in order of definition."""
    names: dict[str, str] = {}
    insts = []
    for inst in form["insts"]:
        inputs = [{"rv": names[v["rv"]]} if isinstance(v, dict) else v for v in inst["inputs"]]
        outputs = [names.setdefault(name, f"v{len(names)}") for name in inst["outputs"]]
        insts.append({**inst, "inputs": inputs, "outputs": outputs})
    return {**form, "insts": insts}


# -- the canonical text, written directly ---------------------------------------------------
# Every candidate of the search gets a key, and building the JSON form of its trace, renaming
# it and handing it to ``json`` took a fifth of a candidate's time. ``_canonical_text`` writes
# the same text in one pass over the instructions, and keeps what it wrote for the sampling
# part of a trace (up to ``enter_postproc``): the samples and mutants of a design space
# replay its instructions, and replay records the very instruction objects it replays
# (``schedule.replay``), so their sampling parts are one tuple of objects, written once.
# Anything the direct writer does not expect (a literal of another type than a plain
# int, float, str, bool, None or tuple; a name undefined or given to random variables of two
# classes) sends the trace to the definition, ``_canonical_text_as_defined``; a property
# test compares the two.

class _Unusual(Exception):
    """A trace the direct writer leaves to the definition."""


@dataclass(frozen=True)
class _Written:
    """What the canonical text says about the first instructions of a trace, alone.

    ``insts``: those instructions (kept alive, so that the ids keying the cache stay theirs);
    ``kept``: the indices of those ``Trace.simplified`` keeps, ``new_index`` their indices
    after it; ``texts``: the JSON of each kept one; ``names``: each random variable's new
    name; ``classes``: the class of every random variable named; ``dropped``: the names the
    dropped (unused pure) instructions define, which a later instruction using them would
    bring back; ``decision_keys``: for the kept instructions, in the order of their new
    indices written as JSON keys (the order ``json`` sorts them in), that key's text and the
    old index, so that a trace's decisions on them are written without sorting. Shared by
    every trace that starts with these instructions: never changed."""

    insts: tuple[Instruction, ...]
    kept: list[int]
    new_index: dict[int, int]
    texts: list[str]
    names: dict[str, str]
    classes: dict[str, type]
    dropped: frozenset[str]
    decision_keys: tuple[tuple[str, int], ...]


# Sampling parts written so far, by the ids of their instructions; forgotten all at once
# beyond ``_WRITTEN_LIMIT`` (a search has a few design spaces, so a few parts).
_WRITTEN: dict[tuple[int, ...], _Written] = {}
_WRITTEN_LIMIT = 64


def _canonical_text(trace: Trace) -> str:
    """``_canonical_text_as_defined(trace)``, written directly.

    The sampling part comes from ``_sampling_part``; what the instructions after it add is
    kept apart (``tail_classes``, ``tail_names``) rather than in copies of the part's
    dicts, which every candidate would pay for."""
    insts = trace.insts
    kinds = [inst.kind for inst in insts]
    end = kinds.index("EnterPostproc") if "EnterPostproc" in kinds else 0
    try:
        head, tail = _sampling_part(insts[:end]), insts[end:]
        tail_classes: dict[str, type] = {}
        kept, used, _ = _simplified(tail, tail_classes, head.classes)
        if not used.isdisjoint(head.dropped):  # a postprocessor reads what the sampling part did not
            head, tail, end = _written(()), insts, 0
            kept, used, _ = _simplified(tail, {})
        texts = _instruction_texts(tail, kept, {}, head.names)
        written_decisions = _decision_texts(trace.decisions, head, end, kept)
    except _Unusual:
        return _canonical_text_as_defined(trace)
    return ('{"decisions":{' + written_decisions + '},"insts":[' + ",".join(head.texts + texts) + '],"version":'
            + _literal(JSON_VERSION) + "}")


def _decision_texts(decisions: dict[int, Any], head: _Written, end: int, kept: list[int]) -> str:
    """The members of the JSON object of the decisions: each decision of a kept instruction
    by its new index (``kept``: the indices kept of the instructions from ``end`` on), keys
    sorted as strings. Decisions are made by sampling instructions, which come before
    ``enter_postproc``: then the order is the sampling part's ``decision_keys``."""
    if max(decisions, default=-1) < end:
        return ",".join([key + _literal(decisions[old]) for key, old in head.decision_keys if old in decisions])
    new_index = {**head.new_index, **{end + old: len(head.kept) + new for new, old in enumerate(kept)}}
    ordered = sorted((str(new_index[i]), d) for i, d in decisions.items() if i in new_index)
    return ",".join(['"' + i + '":' + _literal(d) for i, d in ordered])


def _sampling_part(insts: tuple[Instruction, ...]) -> _Written:
    """``_written(insts)``, from the cache when these very instructions were written before."""
    key = tuple(map(id, insts))
    found = _WRITTEN.get(key)
    if found is None:
        found = _written(insts)
        if len(_WRITTEN) >= _WRITTEN_LIMIT:
            _WRITTEN.clear()  # simpler than keeping an order, and a search fills it rarely if ever
        _WRITTEN[key] = found
    return found


def _written(insts: tuple[Instruction, ...]) -> _Written:
    classes: dict[str, type] = {}
    kept, _, dropped = _simplified(insts, classes)
    names: dict[str, str] = {}
    texts = _instruction_texts(insts, kept, names)
    decision_keys = tuple(sorted(('"' + str(new) + '":', old) for new, old in enumerate(kept)))
    return _Written(insts, kept, {old: new for new, old in enumerate(kept)}, texts, names, classes,
                    frozenset(dropped), decision_keys)


def _simplified(insts: tuple[Instruction, ...], classes: dict[str, type],
                known: Mapping[str, type] = MappingProxyType({})) -> tuple[list[int], set[str], set[str]]:
    """The indices of the instructions ``Trace.simplified`` keeps of ``insts`` (as if nothing
    came after them), the names the kept ones read and the names the dropped ones define.

    Names stand for random variables here; ``classes`` (filled in) checks that no name is
    given to two classes, where a name and a random variable would differ. ``known``: the
    classes of the names of the instructions before ``insts`` (read only)."""
    used: set[str] = set()
    dropped: set[str] = set()
    kept: list[int] = []
    for index in range(len(insts) - 1, -1, -1):
        inst = insts[index]
        kind = KINDS.get(inst.kind)
        if kind is None:
            raise _Unusual
        defined = []
        for rv in inst.outputs:
            cls = type(rv)
            if known.get(rv.name, cls) is not cls or classes.setdefault(rv.name, cls) is not cls:
                raise _Unusual
            defined.append(rv.name)
        if kind.pure and used.isdisjoint(defined):
            dropped.update(defined)
            continue
        kept.append(index)
        for value in inst.inputs:
            if isinstance(value, RV):
                cls = type(value)
                if known.get(value.name, cls) is not cls or classes.setdefault(value.name, cls) is not cls:
                    raise _Unusual
                used.add(value.name)
    kept.reverse()
    return kept, used, dropped


# ``"kind":`` and the JSON of each instruction kind's name.
_KIND_TEXTS = {name: '"kind":' + encode_basestring_ascii(name) for name in KINDS}


def _instruction_texts(insts: tuple[Instruction, ...], kept: list[int], names: dict[str, str],
                       known: Mapping[str, str] = MappingProxyType({})) -> list[str]:
    """The canonical JSON of each kept instruction, its random variables renamed through
    ``known`` (the names of the instructions before ``insts``, read only) and ``names``
    (extended with the outputs not in ``known``, numbered after both, as ``_renamed``
    does)."""
    texts = []
    first = len(known)
    for index in kept:
        inst = insts[index]
        inputs = []
        for value in inst.inputs:
            if isinstance(value, RV):
                name = known.get(value.name) or names.get(value.name)
                if name is None:  # the definition raises a KeyError
                    raise _Unusual
                inputs.append('{"rv":"' + name + '"}')
            else:
                inputs.append(_literal(value))
        outputs = [known.get(rv.name) or names.setdefault(rv.name, f"v{first + len(names)}")
                   for rv in inst.outputs]
        texts.append('{"attrs":[' + ",".join([_literal(a) for a in inst.attrs]) + '],"inputs":['
                     + ",".join(inputs) + "]," + _KIND_TEXTS[inst.kind] + ',"outputs":['
                     + ('"' + '","'.join(outputs) + '"' if outputs else "") + "]}")
    return texts


def _literal(value: Any) -> str:
    """A literal as ``json.dumps`` writes it (a tuple as a list); ``_Unusual`` for any other
    type, even one ``Trace.to_json`` converts (a numpy number)."""
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is tuple:  # most often a decision of tile sizes: its ints are written here
        return "[" + ",".join([int.__repr__(v) if type(v) is int else _literal(v) for v in value]) + "]"
    if kind is float:
        if value != value:
            return "NaN"
        if value in (math.inf, -math.inf):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    raise _Unusual


def check_trace(trace: Trace) -> None:
    """``ValueError`` unless ``trace`` fixes one program: every sampling instruction has a decision."""
    if not isinstance(trace, Trace):
        raise TypeError(f"a record's trace is a metasched Trace, not {type(trace).__name__}")
    decisions = trace.decisions
    for index, inst in enumerate(trace.insts):
        if KINDS[inst.kind].sampling and index not in decisions:
            raise ValueError(f"the trace leaves instruction {index} (`{format_instruction(inst)}`) without a "
                             "decision, so it describes a design space, not one program to record")


def check_result(seconds: Iterable[float], error: Optional[str],
                 build_seconds: Optional[float]) -> tuple[float, ...]:
    """The run times as a tuple of floats, after checking that a result is either an error or
    at least one positive finite time, and that a build time is a finite number >= 0."""
    if isinstance(seconds, (str, bytes)) or not isinstance(seconds, Iterable):
        raise ValueError(f"seconds are the run times of the repeats (a sequence of floats), not {seconds!r}")
    times = tuple(seconds)
    bad = [t for t in times if not _finite(t) or t <= 0]
    if bad:
        raise ValueError(f"each run time is a positive finite number of seconds, not {bad[0]!r}")
    if error is not None and (not isinstance(error, str) or not error):
        raise ValueError(f"error is None (the program ran) or a non-empty message, not {error!r}")
    if error is None and not times:
        raise ValueError("a record needs either run times (seconds=...) or the reason it failed (error=...)")
    if error is not None and times:
        raise ValueError(f"a record has run times or an error, not both: {len(times)} times with error {error!r}")
    if build_seconds is not None and (not _finite(build_seconds) or build_seconds < 0):
        raise ValueError(f"build_seconds is None or a finite number >= 0, not {build_seconds!r}")
    return tuple(float(t) for t in times)


def _finite(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def software_versions() -> dict[str, str]:
    """The versions of metasched and llvmlite installed here ("unknown" when not installed)."""
    return dict(_installed_versions())


@lru_cache(maxsize=None)
def _installed_versions() -> tuple[tuple[str, str], ...]:
    return tuple((name, _version_of(name)) for name in ("metasched", "llvmlite"))


def _version_of(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def record_from_row(row: tuple, path: str) -> Record:
    """The ``Record`` of a row of ``RECORD_COLUMNS``; ``DatabaseError`` naming the record when a
    stored value cannot be read back."""
    record_id, workload, trace, program, seconds, error, target, build_seconds, created, versions = row
    try:
        return Record(record_id, workload, Trace.from_json(json.loads(trace)), program,
                      tuple(float(t) for t in json.loads(seconds)), error, Target.from_json(json.loads(target)),
                      build_seconds, created, dict(json.loads(versions)))
    except (ValueError, TypeError) as e:  # json's and the trace reader's errors are ValueErrors
        raise DatabaseError(f"{path}: record {record_id} is damaged and cannot be read: {e}") from None
