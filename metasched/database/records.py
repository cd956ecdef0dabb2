"""What the database stores and hands back: ``Record`` (one measured program), ``WorkloadSummary``
(one line of the workload listing), ``program_key`` (a program's identity) and the checks a
result passes before it is written.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import numbers
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

from metasched.errors import DatabaseError
from metasched.schedule import Trace
from metasched.schedule.instruction import KINDS
from metasched.schedule.trace_text import format_instruction
from metasched.database.target import Target

# The columns of the records table, in the order ``record_from_row`` reads them.
RECORD_COLUMNS = ("id", "workload", "trace", "program", "seconds", "error", "target", "build_seconds",
                  "created", "versions", "feature_version")


@dataclass(frozen=True)
class Record:
    """One measured (or failed) program of a workload on a target.

    ``seconds`` are the repeats' run times (empty when it failed); ``error`` says why it failed
    (None: it ran); ``program`` is ``program_key(trace)``; ``versions`` the versions of
    metasched and llvmlite that measured it; ``feature_version`` the version of the cost
    model's feature set, when one was given. ``created`` is a Unix time."""

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
    feature_version: Optional[str] = None

    @property
    def ok(self) -> bool:
        """Whether the program ran: no error and at least one time."""
        return self.error is None and bool(self.seconds)

    @property
    def median(self) -> Optional[float]:
        """The median of the run times in seconds; None when the program failed."""
        return statistics.median(self.seconds) if self.ok else None


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
    form = _renamed(trace.simplified().to_json())
    text = json.dumps(form, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _renamed(form: dict) -> dict:
    """The JSON form with every random variable named ``v<n>`` in order of definition."""
    names: dict[str, str] = {}
    insts = []
    for inst in form["insts"]:
        inputs = [{"rv": names[v["rv"]]} if isinstance(v, dict) else v for v in inst["inputs"]]
        outputs = [names.setdefault(name, f"v{len(names)}") for name in inst["outputs"]]
        insts.append({**inst, "inputs": inputs, "outputs": outputs})
    return {**form, "insts": insts}


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
    (record_id, workload, trace, program, seconds, error, target, build_seconds, created, versions,
     feature_version) = row
    try:
        return Record(record_id, workload, Trace.from_json(json.loads(trace)), program,
                      tuple(float(t) for t in json.loads(seconds)), error, Target.from_json(json.loads(target)),
                      build_seconds, created, dict(json.loads(versions)), feature_version)
    except (ValueError, TypeError) as e:  # json's and the trace reader's errors are ValueErrors
        raise DatabaseError(f"{path}: record {record_id} is damaged and cannot be read: {e}") from None
