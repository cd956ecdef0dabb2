"""``Database``: tuning records that survive crashes and are found again by workload and target.

Each ``commit`` is its own transaction, written to disk before it returns, so a tuner killed at
any moment loses nothing it committed, and several processes may commit to one file at once.
The file format (and why it is safe to share) is in ``metasched.database.schema``. A database
opened ``read_only`` creates, changes and leaves behind nothing.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import sqlite3
import statistics
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping, Optional, Sequence, TypeVar, Union

from metasched.errors import DatabaseError, ParseError, ScheduleError
from metasched.lang import Workload, parse
from metasched.schedule import Trace, replay
from metasched.database.records import (
    RECORD_COLUMNS,
    Confirmation,
    Record,
    WorkloadSummary,
    check_result,
    check_trace,
    program_key,
    record_from_row,
    software_versions,
)
from metasched.database.schema import (
    CONFIRMATIONS_VERSION,
    SCHEMA_VERSION,
    FileStamp,
    connect,
    file_stamp,
    open_read_only,
    read_snapshot,
)
from metasched.database.interface import TuningDatabase
from metasched.database.target import Target

WorkloadRef = Union[Workload, str]  # a workload, or its key
_Read = TypeVar("_Read", bound=Callable)


def _reads(method: _Read) -> _Read:
    """Marks a public read. A read-only connection that reads the file as immutable
    (``schema.open_read_only``) sees neither a writer that came after it opened nor the file
    changing under it: when the file's stamp changed before or during a read, the file is
    opened again and the read made again."""
    @functools.wraps(method)
    def read(self: Database, *args, **kwargs):
        while True:
            if self._stamp is not None and self._stamp != file_stamp(self.path):
                self._reopen()
            if self._stamp is None:
                return method(self, *args, **kwargs)
            try:
                result = method(self, *args, **kwargs)
            except DatabaseError:
                if self._stamp == file_stamp(self.path):
                    raise
            else:
                if self._stamp == file_stamp(self.path):
                    return result
    return read  # type: ignore[return-value]


class Database(TuningDatabase):
    """A durable tuning database in the SQLite file at ``path`` (``":memory:"``: in memory).

    The file is created when missing and refused (``DatabaseError``, the file left as it was)
    when it is not a metasched database, is damaged or was made by a newer metasched. Use it
    as a context manager, or ``close()`` it.

    ``read_only=True`` reads the file without creating, migrating or changing anything (an
    older schema is read as it is), also where the file or its directory is not writable,
    and sees what other processes commit meanwhile; a missing or empty file is a
    ``DatabaseError``, and so is every write."""

    def __init__(self, path: Union[str, os.PathLike], *, read_only: bool = False) -> None:
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError(f"Database needs a file path (str or os.PathLike) or ':memory:', "
                            f"not {type(path).__name__}")
        self.path = os.fsdecode(path)
        if not self.path:  # SQLite would open a temporary database and lose every record
            raise DatabaseError("the database path is empty: name a file, or ':memory:' for one in memory")
        self.read_only = bool(read_only)
        self._connection: Optional[sqlite3.Connection]
        self._stamp: Optional[FileStamp] = None  # the file's, while it is read as immutable
        if self.read_only:
            self._connection, self._version, self._stamp = open_read_only(self.path)
        else:
            self._connection, self._version = connect(self.path), SCHEMA_VERSION  # connect migrates

    def close(self) -> None:
        """Closes the file; closing twice is harmless."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
            self._stamp = None

    def _reopen(self) -> None:
        """Opens the file read-only again, for ``_reads``."""
        opened = open_read_only(self.path)
        self._live().close()
        self._connection, self._version, self._stamp = opened

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " (closed)" if self._connection is None else " (read-only)" if self.read_only else ""
        return f"<Database {self.path}{state}>"

    @_reads
    def __len__(self) -> int:
        """The number of records."""
        return self._query("SELECT COUNT(*) FROM records")[0][0]

    def add_workload(self, workload: Workload) -> str:
        """Stores ``workload`` (name, parameters, canonical text, source) unless it is there
        already; returns its key."""
        self._check_writable("add a workload")
        _check_workload(workload)
        with self._transaction() as connection:
            _insert_workload(connection, workload)
        return workload.key

    def commit(self, workload: Workload, trace: Trace, *, target: Target, seconds: Sequence[float] = (),
               error: Optional[str] = None, build_seconds: Optional[float] = None) -> Optional[Record]:
        """Records one result of ``trace`` on ``workload`` and ``target`` and commits it at once:
        either ``seconds``, the run times of the repeats, or ``error``, why it failed.

        Returns the new ``Record``, or None when this program is already recorded for this
        workload and target (nothing is written then). Raises ``ValueError`` for a result that
        has both times and an error, or neither, or a time that is not a positive finite
        number, for a trace with a sampling instruction left without a decision, and for a
        trace that does not replay on ``workload`` (naming the instruction that fails): its
        record would break every later reader of the best program."""
        self._check_writable("commit a record")
        _check_workload(workload)
        check_trace(trace)
        _check_target(target)
        times = check_result(seconds, error, build_seconds)
        try:
            replay(workload, trace)
        except ScheduleError as err:
            raise ValueError(f"{self.path}: the trace does not replay on {workload.label}: {err}; "
                             "nothing was written") from err
        record = Record(0, workload.key, trace, program_key(trace), times, error, target,
                        None if build_seconds is None else float(build_seconds), time.time(),
                        software_versions())
        with self._transaction() as connection:
            _insert_workload(connection, workload)
            cursor = connection.execute(
                "INSERT INTO records (workload, program, trace, seconds, error, target_key, target, build_seconds, "
                "created, versions) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (workload, target_key, program) DO NOTHING",
                (record.workload_key, record.program, _dump(trace.to_json()), _dump(list(times)), error,
                 target.key, _dump(target.to_json()), record.build_seconds, record.created,
                 _dump(record.versions)))
            if cursor.rowcount == 0:
                return None
        return dataclasses.replace(record, id=cursor.lastrowid)

    @_reads
    def measured(self, workload: WorkloadRef, target: Target) -> set[str]:
        """The program keys recorded for ``workload`` on a target compatible with ``target``,
        failed programs included: what need not be measured again."""
        rows = self._query("SELECT program FROM records WHERE workload = ? AND target_key = ?",
                           (_key(workload), _target_key(target)))
        return {program for (program,) in rows}

    @_reads
    def has(self, workload: WorkloadRef, trace: Trace, target: Target) -> bool:
        """Whether the program of ``trace`` is recorded for ``workload`` on a compatible target."""
        rows = self._query("SELECT 1 FROM records WHERE workload = ? AND target_key = ? AND program = ?",
                           (_key(workload), _target_key(target), program_key(trace)))
        return bool(rows)

    @_reads
    def records(self, workload: WorkloadRef, target: Optional[Target] = None) -> list[Record]:
        """The records of ``workload``, oldest first; with ``target``, only those measured on a
        compatible one."""
        where, values = "workload = ?", (_key(workload),)
        if target is not None:
            where, values = where + " AND target_key = ?", values + (_target_key(target),)
        rows = self._query(f"SELECT {', '.join(RECORD_COLUMNS)} FROM records WHERE {where} ORDER BY id", values)
        return [record_from_row(row, self.path) for row in rows]

    @_reads
    def best(self, workload: WorkloadRef, target: Target) -> Optional[Record]:
        """The fastest successful record of ``workload`` measured on a target compatible with
        ``target``; None when there is none. Records of other CPUs or thread counts are never
        compared.

        Fastest is the winner of the latest confirmation (``confirm``) while it is current: no
        successful record came after it. Otherwise it is the record with the smallest median
        time (the earlier one on a tie): a record that came after a confirmation was measured
        on its own and must first be timed in turns with the others to beat them."""
        workload_key, target_key = _key(workload), _target_key(target)
        with self._snapshot():
            confirmation = self._confirmation(workload_key, target_key)
            if confirmation is not None and confirmation.current:
                best_id = confirmation.winner
            else:
                rows = self._query("SELECT id, seconds FROM records WHERE workload = ? AND target_key = ? "
                                   "AND error IS NULL ORDER BY id", (workload_key, target_key))
                if not rows:
                    return None
                best_id = min(rows, key=lambda row: (self._median(*row), row[0]))[0]
            row = self._query(f"SELECT {', '.join(RECORD_COLUMNS)} FROM records WHERE id = ?", (best_id,))[0]
        return record_from_row(row, self.path)

    def confirm(self, workload: WorkloadRef, target: Target,
                times: Mapping[int, Sequence[float]]) -> Confirmation:
        """Records that the successful records ``times`` names (by id) were timed again together,
        in turns: ``times[id]`` holds a record's seconds in each round. Committed at once.

        Raises ``ValueError`` for fewer than two records, a time that is not a positive finite
        number, and an id that is not a successful record of ``workload`` on a target
        compatible with ``target``."""
        self._check_writable("confirm records")
        workload_key, target_key = _key(workload), _target_key(target)
        if not isinstance(times, Mapping) or len(times) < 2:
            raise ValueError(f"a confirmation times two records or more, by id: a mapping of ids to "
                             f"seconds, not {times!r}")
        checked = {}
        for record_id, seconds in times.items():
            if isinstance(record_id, bool) or not isinstance(record_id, int):
                raise ValueError(f"a confirmation's records are named by their ids (ints), not {record_id!r}")
            checked[record_id] = check_result(seconds, None, None)
        checked = dict(sorted(checked.items()))  # in the order they are read back
        created = time.time()
        with self._transaction() as connection:
            ids = ", ".join(map(str, checked))
            found = {record_id for (record_id,) in connection.execute(
                f"SELECT id FROM records WHERE workload = ? AND target_key = ? AND error IS NULL AND id IN ({ids})",
                (workload_key, target_key))}
            missing = sorted(set(checked) - found)
            if missing:
                raise ValueError(f"{self.path}: record{'s' * (len(missing) > 1)} {', '.join(map(str, missing))} "
                                 f"{'are' if len(missing) > 1 else 'is'} not a successful record of {workload_key} "
                                 f"on this target; nothing was written")
            newest = self._newest(connection, workload_key, target_key)
            cursor = connection.execute(
                "INSERT INTO confirmations (workload, target_key, newest_record, times, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (workload_key, target_key, newest, _dump({str(k): list(v) for k, v in checked.items()}), created))
        return Confirmation(cursor.lastrowid, checked, newest, created, True)

    @_reads
    def confirmation(self, workload: WorkloadRef, target: Target) -> Optional[Confirmation]:
        """The latest confirmation of ``workload`` on a target compatible with ``target``, or None."""
        with self._snapshot():
            return self._confirmation(_key(workload), _target_key(target))

    def _confirmation(self, workload_key: str, target_key: str) -> Optional[Confirmation]:
        if self._version < CONFIRMATIONS_VERSION:  # an older file, read as it is
            return None
        rows = self._query("SELECT id, times, newest_record, created FROM confirmations "
                           "WHERE workload = ? AND target_key = ? ORDER BY id DESC LIMIT 1", (workload_key, target_key))
        if not rows:
            return None
        confirmation_id, text, newest, created = rows[0]
        try:
            times = dict(sorted((int(k), tuple(float(t) for t in v)) for k, v in json.loads(text).items()))
            if len(times) < 2 or not all(times.values()):
                raise ValueError("fewer than two records, or a record without times")
        except (ValueError, TypeError, AttributeError) as e:
            raise DatabaseError(f"{self.path}: confirmation {confirmation_id} is damaged: its times "
                                f"{text!r} cannot be read ({e})") from None
        current = newest == self._newest(self._live(), workload_key, target_key)
        return Confirmation(confirmation_id, times, newest, created, current)

    def _newest(self, connection: sqlite3.Connection, workload_key: str, target_key: str) -> int:
        with self._sqlite_errors():
            row = connection.execute("SELECT COALESCE(MAX(id), 0) FROM records WHERE workload = ? "
                                     "AND target_key = ? AND error IS NULL", (workload_key, target_key)).fetchone()
        return row[0]

    def _median(self, record_id: int, seconds: str) -> float:
        try:
            return statistics.median(float(t) for t in json.loads(seconds))
        except (ValueError, TypeError, statistics.StatisticsError) as e:
            raise DatabaseError(f"{self.path}: record {record_id} is damaged: its run times {seconds!r} "
                                f"cannot be read ({e})") from None

    @_reads
    def workloads(self) -> list[WorkloadSummary]:
        """Every workload stored, by name, with how many records each has."""
        rows = self._query("SELECT w.key, w.name, w.params, COUNT(r.id) FROM workloads AS w "
                           "LEFT JOIN records AS r ON r.workload = w.key GROUP BY w.key ORDER BY w.name, w.created")
        return [WorkloadSummary(key, name, self._params(key, params), count) for key, name, params, count in rows]

    @_reads
    def workload(self, key_or_name: str) -> Workload:
        """The stored workload of that key (or of that name, when only one has it), parsed
        again from its stored source. ``DatabaseError`` when there is none or several, when it
        was stored without its source, and when the source no longer gives the same program."""
        rows = self._query("SELECT key, name, params, source FROM workloads WHERE key = ? OR name = ? "
                           "ORDER BY key = ? DESC, created", (key_or_name, key_or_name, key_or_name))
        if not rows:
            raise DatabaseError(f"{self.path} has no workload whose key or name is {key_or_name!r}")
        if rows[0][0] != key_or_name and len(rows) > 1:
            listed = "; ".join(f"{key} {self._params(key, params)}" for key, _, params, _ in rows)
            raise DatabaseError(f"{self.path} has {len(rows)} workloads named {key_or_name!r}; "
                                f"pass the key of one: {listed}")
        key, name, params, source = rows[0]
        return self._rebuild(key, name, self._params(key, params), source)

    def _rebuild(self, key: str, name: str, params: dict[str, int], source: str) -> Workload:
        where = f"workload {name} ({key}) in {self.path}"
        if not source:
            raise DatabaseError(f"{where} was stored without its source text, so it cannot be rebuilt")
        try:
            workload = parse(source, name, **params)
        except ParseError as e:
            raise DatabaseError(f"{where}: its stored source no longer parses: {e}") from None
        if workload.key != key:
            raise DatabaseError(f"{where}: its stored source now gives another program (key {workload.key}); "
                                "it was stored by a metasched whose language or canonical form differs")
        return workload

    def _params(self, key: str, text: str) -> dict[str, int]:
        try:
            params = json.loads(text)
        except ValueError as e:
            raise DatabaseError(f"{self.path}: workload {key} is damaged: its parameters {text!r} "
                                f"cannot be read ({e})") from None
        if not isinstance(params, dict):
            raise DatabaseError(f"{self.path}: workload {key} is damaged: its parameters {text!r} are not an object")
        return params

    def _check_writable(self, action: str) -> None:
        if self.read_only:
            raise DatabaseError(f"cannot {action}: {self.path} was opened read-only "
                                "(Database(path) opens it to write)")

    def _live(self) -> sqlite3.Connection:
        if self._connection is None:
            raise DatabaseError(f"the database {self.path} is closed")
        return self._connection

    def _query(self, sql: str, values: tuple = ()) -> list[tuple]:
        with self._sqlite_errors():
            return self._live().execute(sql, values).fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, committed when the block ends and rolled back if it raises.
        ``BEGIN IMMEDIATE`` takes the write lock at once (waiting for another writer), so two
        processes never both read and then fail to upgrade to writing."""
        connection = self._live()
        with self._sqlite_errors():
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """``schema.read_snapshot``: the reads inside see one state of the file."""
        with self._sqlite_errors(), read_snapshot(self._live()):
            yield

    @contextmanager
    def _sqlite_errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as e:
            raise DatabaseError(f"{self.path}: {e}") from None


def _dump(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _insert_workload(connection: sqlite3.Connection, workload: Workload) -> None:
    # A workload stored without its source gains it when it comes again with one.
    connection.execute(
        "INSERT INTO workloads (key, name, params, canonical, source, created) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET source = excluded.source WHERE workloads.source = ''",
        (workload.key, workload.name, json.dumps(workload.params), workload.canonical_text, workload.source,
         time.time()))


def _check_workload(workload: object) -> None:
    if not isinstance(workload, Workload):
        raise TypeError(f"expected a metasched Workload, not {type(workload).__name__}")


def _check_target(target: object) -> None:
    if not isinstance(target, Target):
        raise TypeError(f"a record's target is a metasched.database.Target, not {type(target).__name__}")


def _key(workload: WorkloadRef) -> str:
    if isinstance(workload, Workload):
        return workload.key
    if isinstance(workload, str):
        return workload
    raise TypeError(f"expected a Workload or a workload's key, not {type(workload).__name__}")


def _target_key(target: Target) -> str:
    _check_target(target)
    return target.key
