"""Reading never writes: the reading commands (``history``, ``best``, ``trace``) and
``metasched.build(wl, database=...)`` create no database, change none and leave no file
beside one; and a record an older metasched stored whose trace does not replay is an error
that names it, not a traceback.

The databases here are made by committing records directly, without tuning."""
import json
import pathlib
import sqlite3
from contextlib import closing

import pytest

import metasched
from conftest import record_samples, unchangeable
from metasched import Database, workloads
from metasched.cli import EXIT_OK, EXIT_USER_ERROR, main
from metasched.database import schema
from metasched.errors import DatabaseError
from metasched.space import cpu_default
from metasched.tune import host_target
from test_cli_tune import assert_one_line_error

TARGET = "matmul_relu"
SIZES = dict(M=16, N=16, K=16)
PARAMS = [arg for name, value in SIZES.items() for arg in ("-p", f"{name}={value}")]
COMMANDS = ["history", "best", "trace"]


def folder_state(folder: pathlib.Path) -> dict:
    """Every file in ``folder``: its bytes and modification time."""
    return {entry.name: (entry.read_bytes(), entry.stat().st_mtime_ns) for entry in sorted(folder.iterdir())}


def run(command: str, db, out: pathlib.Path) -> int:
    """``metasched COMMAND matmul_relu ... --db DB``; ``trace`` saves to a file in ``out``."""
    extra = ["-o", str(out / "best.trace")] if command == "trace" else []
    return main([command, TARGET, *PARAMS, "--db", str(db), *extra])


def make_db(path: pathlib.Path) -> pathlib.Path:
    """A database of a few sampled programs of the workload, measured (made up) on this host."""
    with Database(path) as db:
        assert record_samples(db, workloads.get(TARGET, **SIZES), count=6) > 0
    return path


@pytest.fixture
def out(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


@pytest.fixture
def folder(tmp_path):
    """The folder the database is in, alone."""
    made = tmp_path / "db"
    made.mkdir()
    return made


# ---- the reading commands ----------------------------------------------------------------------

@pytest.mark.parametrize("command", COMMANDS)
def test_a_reading_command_on_an_empty_file_says_so_and_leaves_it_empty(command, folder, out, capsys):
    db = folder / "empty.db"
    db.write_bytes(b"")
    assert run(command, db, out) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert f"{db} is empty: it is not a tuning database yet" in err
    assert folder_state(folder) == {"empty.db": (b"", db.stat().st_mtime_ns)}
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_reading_command_on_a_missing_file_creates_nothing(command, folder, out, capsys):
    db = folder / "missing.db"
    assert run(command, db, out) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert f"no tuning database at {db}" in err
    assert list(folder.iterdir()) == [] and list(out.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_reading_command_leaves_a_database_and_its_folder_as_they_were(command, folder, out, capsys):
    db = make_db(folder / "tuning.db")
    before = folder_state(folder)
    assert list(before) == ["tuning.db"]
    assert run(command, db, out) == EXIT_OK, capsys.readouterr().err
    assert folder_state(folder) == before


def test_an_older_database_is_read_not_migrated(folder, out, capsys, monkeypatch):
    with monkeypatch.context() as version_1:
        version_1.setattr(schema, "SCHEMA_VERSION", 1)
        version_1.setattr(schema, "MIGRATIONS", {})
        db = make_db(folder / "tuning.db")
    before = folder_state(folder)
    for command in COMMANDS:
        assert run(command, db, out) == EXIT_OK, capsys.readouterr().err
    assert folder_state(folder) == before
    with closing(sqlite3.connect(db)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone() == (1,)


def test_history_reads_a_database_in_a_folder_no_one_may_write(folder, out, capsys):
    db = make_db(folder / "tuning.db")
    before = folder_state(folder)
    with unchangeable(folder):
        with pytest.raises(OSError):
            (folder / "probe").write_bytes(b"")  # writes truly fail here, even as root
        assert run("history", db, out) == EXIT_OK, capsys.readouterr().err
    assert f"records in {db}" in capsys.readouterr().out
    assert folder_state(folder) == before


# ---- build --------------------------------------------------------------------------------------

def test_build_from_a_missing_database_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    wl = workloads.get(TARGET, **SIZES)
    with pytest.raises(DatabaseError, match="there is no database at missing.db"):
        metasched.build(wl, database="missing.db")
    (tmp_path / "empty.db").write_bytes(b"")
    with pytest.raises(DatabaseError, match="empty.db is empty"):
        metasched.build(wl, database="empty.db")
    assert folder_state(tmp_path) == {"empty.db": (b"", (tmp_path / "empty.db").stat().st_mtime_ns)}


def test_build_reads_a_database_and_leaves_it_as_it_was(folder):
    db = make_db(folder / "tuning.db")
    before = folder_state(folder)
    wl = workloads.get(TARGET, **SIZES)
    assert metasched.build(wl, database=db) is not None
    assert folder_state(folder) == before


# ---- a stored trace that does not replay ---------------------------------------------------------

def stored_foreign_trace(folder) -> tuple[pathlib.Path, int]:
    """A database whose best record holds a trace of another workload, as a metasched that did
    not check traces at commit could store; the record's id."""
    db = make_db(folder / "tuning.db")
    wl = workloads.get(TARGET, **SIZES)
    with Database(db) as opened:
        best = opened.best(wl, host_target())
    foreign = cpu_default().sample(workloads.get("softmax", M=8, N=8), rng=0).trace
    with closing(sqlite3.connect(db, isolation_level=None)) as raw:
        raw.execute("UPDATE records SET trace = ? WHERE id = ?", (json.dumps(foreign.to_json()), best.id))
    return db, best.id


def test_build_names_a_stored_record_that_does_not_replay(folder):
    db, record_id = stored_foreign_trace(folder)
    with pytest.raises(DatabaseError, match=f"tuning.db: record {record_id} does not replay on "
                                            r"matmul_relu\(M=16, N=16, K=16\): instruction 0 "):
        metasched.build(workloads.get(TARGET, **SIZES), database=db)


def test_best_of_a_stored_record_that_does_not_replay_is_a_one_line_error(folder, out, capsys):
    db, _ = stored_foreign_trace(folder)
    assert run("best", db, out) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "instruction 0" in err


# A task as tune_network stores one: named after its operators and a digest, no parameters.
TASK = "workload dense_task_1a2b() { input X: float32[8, 16]\n input W: float32[16, 12]\n" \
       "output Y[i, j] += X[i, k] * W[k, j] where i in 0..8, j in 0..12, k in 0..16 }"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_reading_command_finds_a_workload_the_database_stores_by_name_or_key(command, tmp_path, capsys):
    """A network's task is no built-in and no file: the reading commands find it in --db."""
    task = metasched.lang.parse(TASK)
    db = tmp_path / "net.db"
    with Database(db) as opened:
        assert record_samples(opened, task, count=8) > 0
    extra = ["-o", str(tmp_path / "best.trace")] if command == "trace" else []
    for given in (task.name, task.key):
        assert main([command, given, "--db", str(db), *extra, *(["--force"] if extra else [])]) == EXIT_OK
        assert "dense_task_1a2b" in capsys.readouterr().out
    assert main([command, task.name, "-p", "M=2", "--db", str(db), *extra]) == EXIT_USER_ERROR
    assert_one_line_error(capsys.readouterr().err)
    assert main([command, "nosuch_task", "--db", str(db), *extra]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert f"nor does {db} hold a workload of that name or key" in err
