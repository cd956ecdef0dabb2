"""The file behind a Database: its settings, files that are refused (and left untouched), and
schema migrations."""
import os
import sqlite3

import pytest

from database_samples import TARGET, filled, matmul_relu, traces
from metasched.database import Database, schema
from metasched.errors import DatabaseError


def _header(path):
    with sqlite3.connect(path) as raw:
        return tuple(raw.execute(f"PRAGMA {name}").fetchone()[0]
                     for name in ("application_id", "user_version", "journal_mode"))


def _refused(path, message):
    """Opening ``path`` fails with ``message`` and the path in it, and changes no byte."""
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match=message) as error:
        Database(path)
    assert str(path) in str(error.value)
    assert path.read_bytes() == before
    return str(error.value)


# --- a metasched file ---------------------------------------------------------------------

def test_a_new_file_is_marked_as_ours_in_wal_mode(tmp_path):
    path = filled(tmp_path / "tuning.db")
    assert _header(path) == (schema.APPLICATION_ID, schema.SCHEMA_VERSION, "wal")
    with Database(str(path)) as db:
        assert len(db) == 3
        settings = {name: db._connection.execute(f"PRAGMA {name}").fetchone()[0]
                    for name in ("synchronous", "busy_timeout", "foreign_keys")}
    assert settings == {"synchronous": 2, "busy_timeout": 30000, "foreign_keys": 1}  # 2 is FULL


def test_an_empty_file_becomes_a_database(tmp_path):
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    filled(path, 1)
    assert _header(path)[:2] == (schema.APPLICATION_ID, schema.SCHEMA_VERSION)


def test_a_file_another_process_creates_while_this_one_looks_is_opened(tmp_path, monkeypatch):
    # A tuner creates the file (WAL mode first, then the schema in one transaction) while another
    # process opens it to watch. The schema lands between two of the opener's header reads: the
    # opener must read one snapshot, not an unmarked header with a version and tables after it.
    path = tmp_path / "tuning.db"
    with sqlite3.connect(path) as creator:
        creator.execute("PRAGMA journal_mode = WAL")  # what the creator does before its transaction
    opened = []
    real_connect = sqlite3.connect

    def observed_connect(*args, **kwargs):
        connection = real_connect(*args, **kwargs)
        if not opened:
            def create_between_reads(statement):
                if statement.startswith("PRAGMA user_version") and len(opened) == 1:
                    opened.append("created")
                    schema.connect(str(path)).close()  # the creator, with its own connection
            connection.set_trace_callback(create_between_reads)
        opened.append(connection)
        return connection

    monkeypatch.setattr(schema.sqlite3, "connect", observed_connect)
    with Database(str(path)) as db:
        assert len(db) == 0
    assert "created" in opened
    assert _header(path)[:2] == (schema.APPLICATION_ID, schema.SCHEMA_VERSION)


def _busy_error(tmp_path):
    """The error SQLite itself raises for a file another connection holds locked, when it
    does not wait (timeout 0)."""
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as e:
        return e
    finally:
        other.close()
        holder.close()
    raise AssertionError("the second writer was not refused")


def _prepare_failing(monkeypatch, error, times):
    calls = []
    real = schema._prepare

    def prepare(connection, path):
        calls.append(path)
        if len(calls) <= times:
            raise error
        real(connection, path)

    monkeypatch.setattr(schema, "_prepare", prepare)
    return calls


def test_opening_tries_again_while_sqlite_reports_the_file_locked(tmp_path, monkeypatch):
    # SQLite does not always wait for a lock (one of two tuners opening a new file at once
    # failed so): opening tries again.
    calls = _prepare_failing(monkeypatch, _busy_error(tmp_path), times=2)
    with Database(str(tmp_path / "tuning.db")) as db:
        assert len(db) == 0
    assert len(calls) == 3


def test_a_file_locked_past_the_timeout_and_other_errors_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(schema, "BUSY_TIMEOUT_SECONDS", 0.05)
    calls = _prepare_failing(monkeypatch, _busy_error(tmp_path), times=10**6)
    with pytest.raises(DatabaseError, match="cannot open the database .*locked"):
        Database(str(tmp_path / "tuning.db"))
    assert len(calls) > 1
    calls = _prepare_failing(monkeypatch, sqlite3.OperationalError("disk I/O error"), times=10**6)
    with pytest.raises(DatabaseError, match="disk I/O error"):
        Database(str(tmp_path / "other.db"))
    assert len(calls) == 1  # not a lock: not tried again


def test_records_survive_reopening(tmp_path):
    path = filled(tmp_path / "tuning.db", 4)
    with Database(path) as db:
        assert [r.trace for r in db.records(matmul_relu())] == list(traces(4))


# --- files that are refused ---------------------------------------------------------------

def test_random_bytes_are_refused(tmp_path):
    path = tmp_path / "noise.db"
    path.write_bytes(bytes(range(256)) * 40)
    _refused(path, "not an SQLite database")


def test_a_text_file_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    _refused(path, "is not a metasched database: it is not an SQLite database")


def test_a_file_with_an_sqlite_header_and_garbage_after_it_is_refused(tmp_path):
    path = tmp_path / "fake.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    _refused(path, "not an SQLite database|damaged")


def test_another_programs_database_is_refused(tmp_path):
    path = tmp_path / "accounts.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE accounts (name TEXT, balance REAL)")
        raw.execute("INSERT INTO accounts VALUES ('ada', 10.0)")
    raw.close()
    message = _refused(path, "is not a metasched database: it is an SQLite database of another program")
    assert "accounts" in message


def test_a_database_with_another_application_id_is_refused(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA application_id = 1234")
    raw.close()
    _refused(path, "another program.*0x4d2")


def test_a_file_of_a_newer_metasched_is_refused(tmp_path):
    path = filled(tmp_path / "tuning.db")
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    raw.close()
    _refused(path, f"made by a newer metasched: schema {schema.SCHEMA_VERSION + 1}, "
                   f"this one reads up to {schema.SCHEMA_VERSION}")


def _overwrite(path, offsets, data):
    with open(path, "r+b") as file:
        for offset in offsets:
            file.seek(offset)
            file.write(data)


def _pages(path):
    """The page size of the SQLite file at ``path`` and how many pages it has."""
    size = int.from_bytes(path.read_bytes()[16:18], "big")
    return size, path.stat().st_size // size


def test_a_file_with_wiped_pages_is_refused(tmp_path):
    path = filled(tmp_path / "tuning.db", 20)
    size, count = _pages(path)
    _overwrite(path, [count // 3 * size, count // 2 * size], b"\xa5" * size)
    _refused(path, "damaged")


def test_a_file_with_broken_page_pointers_is_refused_by_quick_check(tmp_path):
    path = filled(tmp_path / "tuning.db", 20)
    size, count = _pages(path)
    data = path.read_bytes()
    leaf = next(page for page in range(count // 2, count) if data[page * size] == 0x0D)  # a table's leaf
    _overwrite(path, [leaf * size + 8], b"\xa5" * 16)  # the page's first cell pointers
    _refused(path, "damaged: SQLite's quick_check finds")


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(DatabaseError, match=f"{tmp_path} is a directory"):
        Database(tmp_path)


def test_a_missing_directory_is_refused(tmp_path):
    with pytest.raises(DatabaseError, match="the directory .*missing does not exist"):
        Database(tmp_path / "missing" / "tuning.db")
    assert not (tmp_path / "missing").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_directory_is_refused(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(DatabaseError, match="is not writable"):
            Database(folder / "tuning.db")
    finally:
        folder.chmod(0o700)


# --- migrations ---------------------------------------------------------------------------

def _add_note_column(connection):
    connection.execute("ALTER TABLE records ADD COLUMN note TEXT NOT NULL DEFAULT 'from version 1'")


def _next_version(monkeypatch, migration):
    """Pretends this metasched's schema is one version newer, reached by ``migration``."""
    version = schema.SCHEMA_VERSION
    monkeypatch.setattr(schema, "SCHEMA_VERSION", version + 1)
    monkeypatch.setattr(schema, "MIGRATIONS", {**schema.MIGRATIONS, version: migration})
    return version


def test_an_older_file_is_migrated_and_keeps_its_records(tmp_path, monkeypatch):
    path = filled(tmp_path / "tuning.db", 3)
    _next_version(monkeypatch, _add_note_column)
    with Database(path) as db:
        assert [r.trace for r in db.records(matmul_relu())] == list(traces(3))
        notes = db._connection.execute("SELECT note FROM records").fetchall()
    assert notes == [("from version 1",)] * 3
    assert _header(path)[:2] == (schema.APPLICATION_ID, schema.SCHEMA_VERSION)


def test_a_version_1_file_gains_the_confirmations_and_keeps_its_records(tmp_path, monkeypatch):
    with monkeypatch.context() as version_1:
        version_1.setattr(schema, "SCHEMA_VERSION", 1)
        version_1.setattr(schema, "MIGRATIONS", {})
        path = filled(tmp_path / "tuning.db", 3)
    assert _header(path)[1] == 1
    with Database(path) as db:
        assert [r.trace for r in db.records(matmul_relu())] == list(traces(3))
        assert db.confirmation(matmul_relu(), TARGET) is None
        db.confirm(matmul_relu(), TARGET, {1: [2e-3], 3: [1e-3]})
        assert db.best(matmul_relu(), TARGET).id == 3
    assert _header(path)[1] == 2


def test_a_new_file_takes_every_migration(tmp_path, monkeypatch):
    _next_version(monkeypatch, _add_note_column)
    path = filled(tmp_path / "tuning.db", 1)
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT note FROM records").fetchall() == [("from version 1",)]
        assert raw.execute("SELECT COUNT(*) FROM confirmations").fetchone() == (0,)
    assert _header(path)[1] == schema.SCHEMA_VERSION


def test_a_failed_migration_changes_nothing(tmp_path, monkeypatch):
    def half_done(connection):
        _add_note_column(connection)
        connection.execute("ALTER TABLE no_such_table ADD COLUMN x")

    path = filled(tmp_path / "tuning.db", 2)
    version = _next_version(monkeypatch, half_done)
    _refused(path, f"migrating it from schema {version} to {version + 1} failed: no such table")
    monkeypatch.setattr(schema, "MIGRATIONS", {})
    _refused(path, f"no migration from schema {version} to {version + 1}")
    monkeypatch.setattr(schema, "SCHEMA_VERSION", version)
    with Database(path) as db:
        assert len(db) == 2
        assert "note" not in {row[1] for row in db._connection.execute("PRAGMA table_info(records)")}
