"""The SQLite file behind ``Database``: how one is recognised, opened, created and migrated.

A metasched database is an SQLite file whose header carries ``APPLICATION_ID`` (so that no
other program's file is taken for ours) and, as ``user_version``, its schema version. Opening
looks at a file before anything writes to it: a file that is not SQLite, another program's
database, a damaged file and one made by a newer metasched are refused and left as they were.
An empty or new file gets the version-1 schema and then every migration, the path an old file
takes too, so each migration runs whenever a database is created.

``open_read_only`` opens a file for reading only: it creates, migrates and writes nothing, not
even the journal mode, and reads older schemas as they are.

The file is in write-ahead-log mode with ``synchronous=FULL``: a record is on disk when its
commit returns, so neither a killed process nor a power cut loses it (NORMAL would survive a
killed process but not a power cut; one fsync per measured program costs little next to its
build and measurement). Writers take the lock at ``BEGIN IMMEDIATE`` and wait up to
``BUSY_TIMEOUT_SECONDS`` for it, so several tuners can share one file. Opening a file tries
again for as long where SQLite reports it locked at once: in some cases (changing the journal
mode, avoiding a deadlock) SQLite does not wait, and one of two tuners opening a new file at
the same moment once failed with "database is locked".

Schema version 1::

    workloads(key TEXT PRIMARY KEY, name, params JSON, canonical, source, created)
    records(id INTEGER PRIMARY KEY AUTOINCREMENT, workload REFERENCES workloads, program, trace JSON,
            seconds JSON, error, target_key, target JSON, build_seconds, created, versions JSON,
            feature_version, UNIQUE(workload, target_key, program))

Version 2 adds the programs timed again together at the end of a tuning run
(``Database.confirm``): ``times`` maps record ids to their seconds in each round, and
``newest_record`` is the newest successful record of the workload on the target then::

    confirmations(id INTEGER PRIMARY KEY AUTOINCREMENT, workload REFERENCES workloads, target_key,
                  newest_record, times JSON, created)
"""
from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from contextlib import contextmanager
from typing import Callable, Iterator, NamedTuple, Optional, TypeVar

from metasched.errors import DatabaseError

APPLICATION_ID = 0x4D534348  # "MSCH" in the SQLite header marks a metasched database
SCHEMA_VERSION = 2
CONFIRMATIONS_VERSION = 2  # the schema version that added the confirmations table
BUSY_TIMEOUT_SECONDS = 30.0


def _add_confirmations(connection: sqlite3.Connection) -> None:
    connection.execute("""CREATE TABLE confirmations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        workload TEXT NOT NULL REFERENCES workloads(key),
        target_key TEXT NOT NULL,
        newest_record INTEGER NOT NULL,
        times TEXT NOT NULL,
        created REAL NOT NULL)""")
    connection.execute("CREATE INDEX confirmations_of ON confirmations (workload, target_key)")


# MIGRATIONS[v] turns a version-v database into a version v+1 one, inside the transaction
# that opening runs them in; add one here with every change of the schema.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _add_confirmations}

_VERSION_1 = (
    """CREATE TABLE workloads (
        key TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        params TEXT NOT NULL,
        canonical TEXT NOT NULL,
        source TEXT NOT NULL,
        created REAL NOT NULL)""",
    """CREATE TABLE records (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        workload TEXT NOT NULL REFERENCES workloads(key),
        program TEXT NOT NULL,
        trace TEXT NOT NULL,
        seconds TEXT NOT NULL,
        error TEXT,
        target_key TEXT NOT NULL,
        target TEXT NOT NULL,
        build_seconds REAL,
        created REAL NOT NULL,
        versions TEXT NOT NULL,
        feature_version TEXT,  -- no longer written or read (rows are recomputed from traces)
        -- its index also finds a workload's records on one target
        UNIQUE (workload, target_key, program))""",
)

_SQLITE_MAGIC = b"SQLite format 3\x00"


def connect(path: str) -> sqlite3.Connection:
    """A connection in autocommit mode to the metasched database at ``path`` (``":memory:"``
    for one in memory), which is created, or migrated to ``SCHEMA_VERSION``, as needed.

    Raises ``DatabaseError`` naming ``path`` for a directory, a missing or unwritable directory,
    a file that is not an SQLite database or is another program's, a damaged file and one
    made by a newer metasched; none of these files is modified."""
    _check_path(path)
    try:
        connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
    except sqlite3.Error as e:
        raise DatabaseError(f"cannot open the database {path}: {e}") from None
    try:
        _when_free(_prepare, connection, path)
    except sqlite3.Error as e:
        connection.close()
        raise DatabaseError(f"cannot open the database {path}: {_explain(e)}") from None
    except BaseException:
        connection.close()
        raise
    return connection


class FileStamp(NamedTuple):
    """What changes when any process writes a database file: the file's identity, size and
    times, and whether its write-ahead log (``path-wal``) exists."""

    device: int
    inode: int
    size: int
    modified_ns: int
    changed_ns: int
    log: bool


def file_stamp(path: str) -> Optional[FileStamp]:
    """The ``FileStamp`` of the file at ``path`` now; None when there is none."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return FileStamp(status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns,
                     os.path.exists(path + "-wal"))


class ReadOnlyConnection(NamedTuple):
    """``open_read_only``'s answer: the connection, the file's schema version, and the file's
    stamp when the connection reads it as immutable (None when it follows writers)."""

    connection: sqlite3.Connection
    version: int
    immutable_stamp: Optional[FileStamp]


def open_read_only(path: str) -> ReadOnlyConnection:
    """A connection that only reads the metasched database at ``path``: nothing is created,
    migrated or written, and no file appears beside it. ``DatabaseError`` as ``connect`` for
    a file it refuses, and for a missing or empty file.

    SQLite reads a WAL-mode file through its log and the log's index (``-wal``, ``-shm``); a
    read-only connection creates both when missing, leaves them behind, and fails where the
    folder is not writable. So a WAL-mode file without a log (no process has it open) is read
    as immutable, which needs neither; such a connection neither sees a later writer nor
    keeps it from changing the file, so its user compares ``immutable_stamp`` with
    ``file_stamp`` around each read and opens the file again when they differ. A file with a
    log is read with ``mode=ro``, which follows the writers through it."""
    _check_readable(path)
    while True:
        stamp = file_stamp(path)
        immutable = stamp is not None and not stamp.log and _in_wal_mode(path)
        uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro" + "&immutable=1" * immutable
        try:
            connection = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
        except sqlite3.Error as e:
            raise DatabaseError(f"cannot open the database {path}: {e}") from None
        try:
            version = _when_free(_inspect_read_only, connection, path)
        except (sqlite3.Error, DatabaseError) as e:
            connection.close()
            if immutable and file_stamp(path) != stamp:
                continue  # a writer came while this looked: what it read may be torn
            if isinstance(e, DatabaseError):
                raise
            hint = ""
            if stamp is not None and stamp.log and not os.path.exists(path + "-shm"):
                hint = (f" (SQLite reads its write-ahead log {path}-wal through an index file, {path}-shm, "
                        "which cannot be created in that folder)")
            raise DatabaseError(f"cannot open the database {path}: {_explain(e)}{hint}") from None
        except BaseException:
            connection.close()
            raise
        if immutable and file_stamp(path) != stamp:
            connection.close()
            continue
        return ReadOnlyConnection(connection, version, stamp if immutable else None)


_Prepared = TypeVar("_Prepared")


def _when_free(prepare: Callable[[sqlite3.Connection, str], _Prepared], connection: sqlite3.Connection,
               path: str) -> _Prepared:
    """``prepare(connection, path)``, tried again while SQLite reports the file locked, up to
    ``BUSY_TIMEOUT_SECONDS`` (each step of ``_prepare`` and ``_inspect_read_only`` can be run
    again: it reads, or writes in one transaction that a failure rolls back)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
    while True:
        try:
            return prepare(connection, path)
        except sqlite3.OperationalError as e:
            if not _locked(e) or time.monotonic() >= deadline:
                raise
        time.sleep(0.01)


# SQLite's primary result codes (``sqlite3.SQLITE_BUSY`` and ``SQLITE_LOCKED`` from Python 3.11).
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


def _locked(error: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (extended codes included), or their message where the
    error carries no code."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)  # the primary code: the low byte
    return "database is locked" in str(error) or "database table is locked" in str(error)


def _check_path(path: str) -> None:
    """Refuses what SQLite would misread or fail on with a vague message: a directory, a
    missing or read-only place, a file that does not start as an SQLite database does."""
    if path == ":memory:":
        return
    if os.path.isdir(path):
        raise DatabaseError(f"{path} is a directory, not a database file")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise DatabaseError(f"cannot open the database {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        # SQLite keeps its write-ahead log and shared-memory index next to the file.
        raise DatabaseError(f"cannot open the database {path}: the directory {directory} is not writable")
    if not os.path.exists(path):
        return
    _check_header(path)
    if not os.access(path, os.W_OK):
        raise DatabaseError(f"cannot open the database {path}: the file is not writable")


def _check_header(path: str) -> bytes:
    """The first bytes of the file at ``path`` (none when it is empty); ``DatabaseError`` when
    it cannot be read or does not start as an SQLite database does."""
    try:
        with open(path, "rb") as file:
            header = file.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise DatabaseError(f"cannot read the database {path}: {e.strerror or e}") from None
    if header and header != _SQLITE_MAGIC:
        raise DatabaseError(f"{path} is not a metasched database: it is not an SQLite database "
                            f"(it starts with {header[:8]!r}); nothing was written to it")
    return header


def _check_readable(path: str) -> None:
    """``_check_path`` for reading only: the file must exist and hold something, and its
    directory need not be writable."""
    if path == ":memory:":
        raise DatabaseError("a new in-memory database (':memory:') is empty: there is nothing to open read-only")
    if os.path.isdir(path):
        raise DatabaseError(f"{path} is a directory, not a database file")
    if not os.path.exists(path):
        raise DatabaseError(f"there is no database at {path}: the file does not exist (reading creates none)")
    if not _check_header(path):
        raise DatabaseError(f"{path} is empty: it is not a tuning database yet (nothing was written to it)")


def _in_wal_mode(path: str) -> bool:
    """Whether the SQLite header of the file at ``path`` marks it as in WAL mode (bytes 18
    and 19, the write and read versions, are 2)."""
    try:
        with open(path, "rb") as file:
            header = file.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18] == 2


def _explain(error: sqlite3.Error) -> str:
    message = str(error)
    if "file is not a database" in message:
        return "it is not an SQLite database"
    if "malformed" in message:
        return f"the file is damaged ({message}); restore it from a backup or start a new file"
    return message


@contextmanager
def read_snapshot(connection: sqlite3.Connection) -> Iterator[None]:
    """A read transaction on ``connection`` (in autocommit mode): the reads inside it see one
    state of the file though another process commits meanwhile. Between two autocommit reads,
    a process creating the file would show an unmarked header with a version and tables."""
    connection.execute("BEGIN")
    try:
        yield
    finally:
        if connection.in_transaction:  # SQLite ends it itself on some errors
            connection.execute("COMMIT")  # it only read


def _prepare(connection: sqlite3.Connection, path: str) -> None:
    with read_snapshot(connection):  # another process may be creating the file
        version = _inspect(connection, path)
        if version:
            _check_integrity(connection, path)
    mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if mode not in ("wal", "memory"):
        raise DatabaseError(f"cannot open the database {path}: SQLite cannot keep a write-ahead log there "
                            f"(journal mode stays {mode!r}); put the file on a local file system")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute("PRAGMA foreign_keys = ON")
    if version < SCHEMA_VERSION:
        _upgrade(connection, path)


def _inspect_read_only(connection: sqlite3.Connection, path: str) -> int:
    """The schema version of the metasched database ``connection`` reads, checked as
    ``_prepare`` checks it, without changing it."""
    with read_snapshot(connection):
        version = _inspect(connection, path)
        if version == 0:
            raise DatabaseError(f"{path} is empty: it is not a tuning database yet (an SQLite file with no "
                                "tables; nothing was written to it)")
        _check_integrity(connection, path)
    return version


def _inspect(connection: sqlite3.Connection, path: str) -> int:
    """The schema version of the metasched database ``connection`` reads, 0 for an empty file;
    ``DatabaseError`` for another program's database or a newer metasched's. Only reads."""
    application_id = connection.execute("PRAGMA application_id").fetchone()[0]
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    if application_id == APPLICATION_ID:
        if version > SCHEMA_VERSION:
            raise DatabaseError(f"{path} was made by a newer metasched: schema {version}, this one reads up to "
                                f"{SCHEMA_VERSION}; upgrade metasched to use it (the file was not changed)")
        if version < 1:
            raise DatabaseError(f"{path} is damaged: it is marked as a metasched database but has no schema version")
        return version
    names = [name for (name,) in connection.execute("SELECT name FROM sqlite_master ORDER BY name")]
    if application_id == 0 and version == 0 and not names:
        return 0
    raise DatabaseError(f"{path} is not a metasched database: it is an SQLite database of another program "
                        f"(application_id {application_id:#x}, user_version {version}, "
                        f"{len(names)} schema object{'s' * (len(names) != 1)}: {', '.join(names[:5]) or 'none'}); "
                        "nothing was written to it")


def _check_integrity(connection: sqlite3.Connection, path: str) -> None:
    problems = [row[0] for row in connection.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        raise DatabaseError(f"{path} is damaged: SQLite's quick_check finds {'; '.join(problems[:3])}"
                            f"{' ...' if len(problems) > 3 else ''}. Restore it from a backup or start a new "
                            "file; nothing was written to it")


def _upgrade(connection: sqlite3.Connection, path: str) -> None:
    """Creates the schema in an empty file, or migrates an older one, in one transaction."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        version = _inspect(connection, path)  # another process may have done it while we waited
        if version == 0:
            for statement in _VERSION_1:
                connection.execute(statement)
            connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            version = 1
        while version < SCHEMA_VERSION:
            _migrate(connection, path, version)
            version += 1
        connection.execute(f"PRAGMA user_version = {version}")
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


def _migrate(connection: sqlite3.Connection, path: str, version: int) -> None:
    migration = MIGRATIONS.get(version)
    if migration is None:
        raise DatabaseError(f"cannot open {path}: this metasched has no migration from schema {version} "
                            f"to {version + 1} (the file was not changed)")
    try:
        migration(connection)
    except sqlite3.Error as e:
        raise DatabaseError(f"cannot open {path}: migrating it from schema {version} to {version + 1} "
                            f"failed: {e} (the file was not changed)") from None
