"""A Database opened read-only: it creates, changes and leaves behind nothing, refuses what a
writable one refuses, follows a writer in another process, and reads where nothing may be
written. Also the one refusal of commit that replays: a trace that does not replay on its
workload."""
import os
import pathlib
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest

from conftest import unchangeable
from database_samples import TARGET, filled, matmul_relu, traces
from metasched import workloads
from metasched.database import Database, database, schema
from metasched.errors import DatabaseError
from metasched.space import cpu_default

HERE = pathlib.Path(__file__).resolve().parent


def _folder(path):
    """Every file beside ``path`` (and it): its bytes and modification time."""
    folder = pathlib.Path(path).parent
    return {entry.name: (entry.read_bytes(), entry.stat().st_mtime_ns) for entry in sorted(folder.iterdir())}


def _raw(path, *statements):
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        for statement in statements:
            raw.execute(statement)


# --- reading changes nothing ----------------------------------------------------------------

def test_a_cleanly_closed_file_is_read_and_left_as_it_was(tmp_path):
    path = filled(tmp_path / "tuning.db", 3)
    before = _folder(path)
    assert list(before) == ["tuning.db"]
    with Database(path, read_only=True) as db:
        assert len(db) == 3 and db.read_only and "read-only" in repr(db)
        assert [r.trace for r in db.records(matmul_relu(), TARGET)] == list(traces(3))
        assert db.best(matmul_relu(), TARGET).id == 1
        assert db.confirmation(matmul_relu(), TARGET) is None
        assert db.workload("matmul_relu") == matmul_relu()
        assert [w.records for w in db.workloads()] == [3]
        assert db.has(matmul_relu(), traces(1)[0], TARGET) and len(db.measured(matmul_relu(), TARGET)) == 3
        assert list(_folder(path)) == ["tuning.db"]  # no log or index made beside it, even while open
    assert _folder(path) == before


def test_writes_through_a_read_only_database_are_refused_before_sqlite_sees_them(tmp_path):
    path = filled(tmp_path / "tuning.db", 2)
    before = _folder(path)
    with Database(path, read_only=True) as db:
        writes = {"commit a record": lambda: db.commit(matmul_relu(), traces(3)[2], target=TARGET, seconds=[1.0]),
                  "add a workload": lambda: db.add_workload(matmul_relu(32)),
                  "confirm records": lambda: db.confirm(matmul_relu(), TARGET, {1: [1.0], 2: [2.0]})}
        for action, write in writes.items():
            with pytest.raises(DatabaseError, match=f"cannot {action}: .*tuning.db was opened read-only") as error:
                write()
            assert "readonly database" not in str(error.value)  # not SQLite's own refusal
        assert len(db) == 2
    assert _folder(path) == before


def test_the_journal_mode_is_not_set(tmp_path):
    # Opening to write sets WAL mode, which rewrites the header; reading leaves another mode be.
    path = filled(tmp_path / "tuning.db", 2)
    _raw(path, "PRAGMA journal_mode = DELETE")
    before = _folder(path)
    with Database(path, read_only=True) as db:
        assert len(db) == 2
    assert _folder(path) == before
    assert path.read_bytes()[18:20] == b"\x01\x01"  # the rollback journal's versions, not WAL's


def test_an_older_schema_is_read_as_it_is(tmp_path, monkeypatch):
    with monkeypatch.context() as version_1:
        version_1.setattr(schema, "SCHEMA_VERSION", 1)
        version_1.setattr(schema, "MIGRATIONS", {})
        path = filled(tmp_path / "tuning.db", 3)
    before = _folder(path)
    with Database(path, read_only=True) as db:
        assert [r.trace for r in db.records(matmul_relu())] == list(traces(3))
        assert db.confirmation(matmul_relu(), TARGET) is None  # version 1 has no confirmations table
        assert db.best(matmul_relu(), TARGET).id == 1
    assert _folder(path) == before
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone() == (1,)


# --- what is refused --------------------------------------------------------------------------

def test_a_missing_file_is_refused_and_not_created(tmp_path):
    for path in (tmp_path / "missing.db", tmp_path / "missing" / "tuning.db"):
        with pytest.raises(DatabaseError, match=f"there is no database at {path}"):
            Database(path, read_only=True)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DatabaseError, match="in-memory"):
        Database(":memory:", read_only=True)


def _empty(path):
    path.write_bytes(b"")


def _no_tables(path):
    _raw(path, "CREATE TABLE t (x)", "DROP TABLE t")


def _text(path):
    path.write_text("hello\n")


def _other_program(path):
    _raw(path, "CREATE TABLE accounts (name TEXT, balance REAL)")


def _newer(path):
    filled(path, 1)
    _raw(path, f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")


def _wiped(path):
    filled(path, 20)
    size = int.from_bytes(path.read_bytes()[16:18], "big")
    count = path.stat().st_size // size
    with open(path, "r+b") as file:
        for page in (count // 3, count // 2):
            file.seek(page * size)
            file.write(b"\xa5" * size)


@pytest.mark.parametrize("make, message", [
    (_empty, "is empty: it is not a tuning database yet"),
    (_no_tables, "is empty: it is not a tuning database yet"),
    (_text, "is not a metasched database: it is not an SQLite database"),
    (_other_program, "is not a metasched database: it is an SQLite database of another program"),
    (_newer, f"made by a newer metasched: schema {schema.SCHEMA_VERSION + 1}"),
    (_wiped, "damaged"),
])
def test_files_a_writable_database_refuses_are_refused_and_left_as_they_were(make, message, tmp_path):
    path = tmp_path / "tuning.db"
    make(path)
    before = _folder(path)
    with pytest.raises(DatabaseError, match=message) as error:
        Database(path, read_only=True)
    assert str(path) in str(error.value)
    assert _folder(path) == before


# --- other processes writing ----------------------------------------------------------------

WRITER = """
import sys
from database_samples import TARGET, matmul_relu, traces
from metasched.database import Database
with Database(sys.argv[1]) as db:
    for line in sys.stdin:
        index = int(line)
        db.commit(matmul_relu(), traces(index + 1)[index], target=TARGET, seconds=[1e-3])
        print("committed", flush=True)
"""


def test_a_writer_in_another_process_is_followed(tmp_path):
    path = filled(tmp_path / "tuning.db", 2)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    before_writer = Database(path, read_only=True)  # opened on a cleanly closed file
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=environment)
    try:
        readers = [before_writer]
        for index in (2, 3, 4):
            writer.stdin.write(f"{index}\n")
            writer.stdin.flush()
            assert writer.stdout.readline() == "committed\n"
            if index == 2:
                readers.append(Database(path, read_only=True))  # opened while the writer has it open
            for reader in readers:
                assert [r.trace for r in reader.records(matmul_relu())] == list(traces(index + 1))
                assert len(reader) == index + 1
    finally:
        writer.stdin.close()
        assert writer.wait(timeout=60) == 0
    for reader in readers:
        assert len(reader) == 5
        reader.close()


def test_a_writer_that_came_and_went_between_two_reads_is_seen(tmp_path):
    # A file read as immutable: its reader holds no lock and reads no log, so SQLite alone
    # would go on answering from the file as it was.
    path = filled(tmp_path / "tuning.db", 2)
    with Database(path, read_only=True) as reader:
        assert len(reader) == 2
        filled(path, 3)  # opens, commits the third record and closes: the log goes into the file
        assert list(_folder(path)) == ["tuning.db"]
        assert len(reader) == 3
        assert [r.trace for r in reader.records(matmul_relu())] == list(traces(3))


def test_a_writer_during_a_read_makes_it_read_again(tmp_path, monkeypatch):
    path = filled(tmp_path / "tuning.db", 2)
    real = database.record_from_row
    written = []

    def rows_read_then_written(row, where):
        if not written:  # the rows are read: a writer commits before they are returned
            written.append(filled(path, 3))
        return real(row, where)

    monkeypatch.setattr(database, "record_from_row", rows_read_then_written)
    with Database(path, read_only=True) as reader:
        assert [r.trace for r in reader.records(matmul_relu())] == list(traces(3))
    assert written


# --- where nothing may be written --------------------------------------------------------------

@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere (the chattr tests below stand in)")
def test_a_file_in_a_folder_this_process_cannot_write_is_read(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    path = filled(folder / "tuning.db", 2)
    path.chmod(0o400)
    folder.chmod(0o500)
    try:
        with Database(path, read_only=True) as db:
            assert len(db) == 2 and db.best(matmul_relu(), TARGET).id == 1
        assert list(_folder(path)) == ["tuning.db"]
    finally:
        folder.chmod(0o700)
        path.chmod(0o600)


def test_a_file_in_a_folder_no_one_may_write_is_read(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    path = filled(folder / "tuning.db", 2)
    before = _folder(path)
    with unchangeable(path), unchangeable(folder):
        with pytest.raises(OSError):
            (folder / "probe").write_bytes(b"")  # writes truly fail here
        with Database(path, read_only=True) as db:
            assert len(db) == 2 and db.best(matmul_relu(), TARGET).id == 1
            assert [r.trace for r in db.records(matmul_relu())] == list(traces(2))
    assert _folder(path) == before


def test_a_writer_is_followed_in_a_folder_the_reader_cannot_write(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    path = filled(folder / "tuning.db", 2)
    with Database(path) as writer:  # its log and index are made before the folder is locked
        with unchangeable(folder):
            with pytest.raises(OSError):
                (folder / "probe").write_bytes(b"")
            with Database(path, read_only=True) as reader:
                assert len(reader) == 2
                writer.commit(matmul_relu(), traces(3)[2], target=TARGET, seconds=[1e-3])
                assert [r.trace for r in reader.records(matmul_relu())] == list(traces(3))


# --- a trace that does not replay on its workload -------------------------------------------------

def test_commit_refuses_a_trace_that_does_not_replay_on_its_workload(tmp_path):
    softmax = cpu_default().sample(workloads.get("softmax", M=8, N=8), rng=0).trace
    first = str(softmax).split("\n")[0]
    with Database(tmp_path / "tuning.db") as db:
        with pytest.raises(ValueError) as error:
            db.commit(matmul_relu(), softmax, target=TARGET, seconds=[1e-3])
        message = str(error.value)
        assert "the trace does not replay on matmul_relu(M=64, N=64, K=64)" in message
        assert f"instruction 0 `{first}`" in message and "nothing was written" in message
        assert len(db) == 0 and db.workloads() == []


def test_commit_replays_a_trace_once(tmp_path, monkeypatch):
    replays = []
    real = database.replay
    monkeypatch.setattr(database, "replay", lambda *args, **kwargs: replays.append(args) or real(*args, **kwargs))
    with Database(tmp_path / "tuning.db") as db:
        assert db.commit(matmul_relu(), traces(1)[0], target=TARGET, seconds=[1e-3]) is not None
    assert len(replays) == 1
