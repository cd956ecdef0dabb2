"""Several processes writing one database at once, and a writer killed with SIGKILL."""
import json
import multiprocessing
import pathlib
import queue
import signal
import sqlite3
import subprocess
import sys

from database_samples import TARGET, commit_all, matmul_relu, traces
from metasched.database import Database, Target, program_key

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]


def _write_at_once(path, jobs):
    """Runs ``commit_all`` for each (traces, target) of ``jobs`` in its own spawned process, all
    starting together; the results of each."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(len(jobs)), context.Queue()
    processes = [context.Process(target=commit_all,
                                 args=(str(path), [t.to_json() for t in found], target.to_json(), barrier, results))
                 for found, target in jobs]
    for process in processes:
        process.start()
    try:
        outputs = []
        while len(outputs) < len(processes):
            try:
                outputs.append(json.loads(results.get(timeout=1)))
            except queue.Empty:
                assert all(p.exitcode in (None, 0) for p in processes), "a writer failed"
        for process in processes:
            process.join(timeout=30)
            assert process.exitcode == 0
        return outputs
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()


def test_two_processes_writing_different_records_lose_none(tmp_path):
    path, found = tmp_path / "shared.db", traces(100)
    Database(path).close()  # created once, so that the writers race on records, not on the schema
    one, two = Target("znver4", TARGET.features, 1), Target("znver4", TARGET.features, 2)
    outputs = _write_at_once(path, [(found, one), (found, two)])
    ids = [i for output in outputs for i in output["ids"]]
    assert None not in ids and len(set(ids)) == 200
    for output in outputs:  # program keys are the same in every process
        assert output["programs"] == [program_key(t) for t in found]
    with Database(path) as db:
        assert len(db) == 200
        assert [r.trace for r in db.records(matmul_relu(), one)] == list(found)
        assert [r.trace for r in db.records(matmul_relu(), two)] == list(found)


def test_two_processes_writing_the_same_programs_store_each_once(tmp_path):
    path, found = tmp_path / "shared.db", traces(100)
    outputs = _write_at_once(path, [(found, TARGET), (found, TARGET)])  # both may create the file
    committed = [i for output in outputs for i in output["ids"] if i is not None]
    assert len(committed) == 100 and len(set(committed)) == 100
    with Database(path) as db:
        assert len(db) == 100
        assert db.measured(matmul_relu(), TARGET) == {program_key(t) for t in found}


_WRITER = """
import itertools, json, sys
from metasched.database import Database, Target
from metasched.lang import parse
from metasched.schedule import Trace

path, (source, name, params, trace, features) = sys.argv[1], json.loads(sys.argv[2])
workload, trace = parse(source, name, **params), Trace.from_json(trace)
with Database(path) as db:
    for threads in itertools.count(1):
        record = db.commit(workload, trace, target=Target("znver4", features, threads), seconds=[1e-3])
        if record is not None:
            print(record.id, flush=True)
"""


def _kill_while_writing(path, after):
    """Starts a writer on ``path``, kills it with SIGKILL once it has printed ``after`` ids;
    every id it printed."""
    wl = matmul_relu()
    arguments = json.dumps([wl.source, wl.name, wl.params, traces(1)[0].to_json(), TARGET.features])
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), arguments], cwd=REPOSITORY,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    printed = []
    try:
        while len(printed) < after:
            line = writer.stdout.readline()
            assert line, f"the writer stopped early:\n{writer.stderr.read()}"
            printed.append(int(line))
        writer.send_signal(signal.SIGKILL)
        rest, _ = writer.communicate(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == -signal.SIGKILL
    return printed + [int(line) for line in rest.split()]


def test_a_killed_writer_loses_no_committed_record(tmp_path):
    path = tmp_path / "killed.db"
    Database(path).close()
    printed = []
    for after in (25, 40):  # the second writer goes on where the first was killed
        printed += _kill_while_writing(path, after)
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    raw.close()
    with Database(path) as db:
        stored = {record.id for record in db.records(matmul_relu())}
    assert set(printed) <= stored and len(printed) >= 65
