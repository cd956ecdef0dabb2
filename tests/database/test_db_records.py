"""What a Database stores and finds again: program identity, commits, duplicates, lookups by
workload and target, the best record, stored workloads, and records that cannot be read."""
import dataclasses
import json
import pathlib
import sqlite3

import pytest

from database_samples import TARGET, matmul_relu, traces
from metasched.database import Database, Target, program_key
from metasched.errors import DatabaseError
from metasched.schedule import Schedule, Trace, replay


def _tiled(factors=(8, 8), unused_lookup=False) -> Trace:
    sch = Schedule(matmul_relu())
    block = sch.get_block("C")
    if unused_lookup:
        sch.get_block("D")  # a pure lookup nothing uses; every later name shifts by one
    i, _, _ = sch.get_loops(block)
    sch.split(i, sch.sample_perfect_tile(i, n=2, decision=list(factors)))
    return sch.trace


@pytest.fixture
def db():
    with Database(":memory:") as database:
        yield database


# --- program identity ---------------------------------------------------------------------

def test_to_json_is_deterministic_and_survives_replay():
    trace = traces(1)[0]
    dump = json.dumps(trace.to_json(), sort_keys=True)
    assert json.dumps(trace.to_json(), sort_keys=True) == dump
    assert json.dumps(replay(matmul_relu(), trace).trace.to_json(), sort_keys=True) == dump


def test_program_key_ignores_unused_pure_instructions_and_names():
    plain, padded = _tiled(), _tiled(unused_lookup=True)
    assert len(padded) == len(plain) + 1 and plain != padded
    assert str(replay(matmul_relu(), plain)) == str(replay(matmul_relu(), padded))
    assert program_key(plain) == program_key(padded)


def test_program_key_tells_programs_apart():
    assert program_key(_tiled((8, 8))) != program_key(_tiled((4, 16)))
    assert len({program_key(t) for t in traces(6)}) == 6


def test_program_key_survives_the_text_and_json_forms():
    trace = traces(1)[0]
    assert program_key(Trace.parse(str(trace))) == program_key(trace)
    assert program_key(Trace.from_json(json.loads(json.dumps(trace.to_json())))) == program_key(trace)


# --- commit and read back -----------------------------------------------------------------

def test_commit_returns_what_records_reads_back(db):
    trace = traces(1)[0]
    made = db.commit(matmul_relu(), trace, target=TARGET, seconds=[2e-3, 1e-3, 3e-3], build_seconds=0.25)
    (read,) = db.records(matmul_relu())
    assert read == made and read.id == 1
    assert read.trace == trace and read.program == program_key(trace)
    assert read.seconds == (2e-3, 1e-3, 3e-3) and read.median == 2e-3 and read.ok
    assert read.target == TARGET and read.build_seconds == 0.25
    assert set(read.versions) == {"metasched", "llvmlite"}
    assert db.records(matmul_relu().key) == [read]


def test_a_failure_is_recorded_with_its_reason(db):
    record = db.commit(matmul_relu(), traces(1)[0], target=TARGET, error="segfault in the kernel")
    assert not record.ok and record.median is None and record.seconds == ()
    assert db.records(matmul_relu())[0].error == "segfault in the kernel"


def test_the_same_program_is_stored_once_per_workload_and_target(db):
    wl, trace = matmul_relu(), _tiled()
    assert db.commit(wl, trace, target=TARGET, seconds=[1.0]) is not None
    assert db.commit(wl, _tiled(unused_lookup=True), target=TARGET, seconds=[0.5]) is None
    assert db.commit(wl, trace, target=Target("znver4", "-sse4a,+avx512f,+fma,+avx2", 2), error="x") is None
    assert db.commit(wl, trace, target=Target("znver4", TARGET.features, 1), seconds=[1.0]) is not None
    assert db.commit(matmul_relu(32), trace, target=TARGET, seconds=[1.0]) is not None
    assert len(db) == 3


def test_measured_and_has_count_failures_and_compatible_targets(db):
    wl, (a, b, c) = matmul_relu(), traces(3)
    db.commit(wl, a, target=TARGET, seconds=[1.0])
    db.commit(wl, b, target=TARGET, error="wrong output")
    db.commit(wl, c, target=Target("znver3", "+avx2,+fma", 2), seconds=[1.0])
    same = Target("znver4", "+fma,+avx512f,+avx2", 2)
    assert db.measured(wl, same) == {program_key(a), program_key(b)}
    assert db.has(wl, a, same) and db.has(wl, b, same) and not db.has(wl, c, same)
    assert db.measured(wl.key, Target("znver4", TARGET.features, 4)) == set()


def test_records_are_oldest_first_and_filtered_by_target(db):
    wl, found = matmul_relu(), traces(4)
    other = Target("znver3", "+avx2", 2)
    for index, trace in enumerate(found):
        db.commit(wl, trace, target=TARGET if index % 2 == 0 else other, seconds=[1.0 + index])
    assert [r.trace for r in db.records(wl)] == list(found)
    assert [r.trace for r in db.records(wl, TARGET)] == [found[0], found[2]]
    assert [r.trace for r in db.records(wl, other)] == [found[1], found[3]]
    assert db.records(matmul_relu(32)) == []


def test_best_is_the_smallest_median_on_a_compatible_target(db):
    wl, found = matmul_relu(), traces(7)
    assert db.best(wl, TARGET) is None
    db.commit(wl, found[0], target=TARGET, seconds=[3.0, 3.0, 3.0])
    tied = db.commit(wl, found[1], target=TARGET, seconds=[9.0, 2.0, 1.0])  # median 2
    db.commit(wl, found[2], target=TARGET, seconds=[2.0])  # ties with the earlier record
    db.commit(wl, found[3], target=TARGET, error="timed out")
    db.commit(wl, found[4], target=Target("znver3", TARGET.features, 2), seconds=[0.1])  # other CPU
    db.commit(wl, found[5], target=Target("znver4", TARGET.features, 1), seconds=[0.1])  # other threads
    db.commit(matmul_relu(32), found[6], target=TARGET, seconds=[0.1])  # other workload
    assert db.best(wl, Target("znver4", "+avx512f,+fma,+avx2", 2)) == tied


def test_best_follows_the_latest_confirmation_until_a_record_comes_after_it(db):
    wl, found = matmul_relu(), traces(6)
    first, second, third = (db.commit(wl, t, target=TARGET, seconds=[s]) for t, s in zip(found, (1.0, 1.1, 1.2)))
    assert db.best(wl, TARGET) == first and db.confirmation(wl, TARGET) is None
    confirmation = db.confirm(wl, TARGET, {first.id: [1.3, 1.4, 1.3], second.id: [1.2, 1.5, 1.2],
                                           third.id: [1.2, 1.25, 1.3]})
    assert confirmation.winner == second.id and confirmation.current  # ties with third: the earlier
    assert db.confirmation(wl, TARGET) == confirmation
    assert db.best(wl, TARGET) == second
    db.commit(wl, found[3], target=TARGET, error="timed out")  # a failure changes nothing
    db.commit(wl, found[4], target=Target("znver3", TARGET.features, 2), seconds=[0.1])  # nor another CPU
    assert db.best(wl, TARGET) == second
    fourth = db.commit(wl, found[5], target=TARGET, seconds=[1.05])  # measured alone, after it
    assert not db.confirmation(wl, TARGET).current
    assert db.best(wl, TARGET) == first  # the medians decide again
    db.confirm(wl, TARGET, {second.id: [1.0], fourth.id: [0.9]})
    assert db.best(wl, TARGET) == fourth


@pytest.mark.parametrize("times, message", [
    ({}, "two records or more"),
    ({1: [1.0]}, "two records or more"),
    ([(1, [1.0]), (2, [1.0])], "two records or more"),
    ({1: [1.0], "2": [1.0]}, "ids"),
    ({1: [1.0], 2: []}, "either run times"),
    ({1: [1.0], 2: [-1.0]}, "positive finite"),
    ({1: [1.0], 3: [1.0]}, "record 3 is not a successful record"),
    ({1: [1.0], 4: [1.0], 5: [1.0]}, "records 4, 5 are not"),
])
def test_a_malformed_confirmation_is_refused_and_nothing_written(db, times, message):
    wl, found = matmul_relu(), traces(5)
    db.commit(wl, found[0], target=TARGET, seconds=[1.0])
    db.commit(wl, found[1], target=TARGET, seconds=[2.0])
    db.commit(wl, found[2], target=TARGET, error="wrong result")
    db.commit(matmul_relu(32), found[3], target=TARGET, seconds=[1.0])
    db.commit(wl, found[4], target=Target("znver3", TARGET.features, 2), seconds=[1.0])
    with pytest.raises(ValueError, match=message):
        db.confirm(wl, TARGET, times)
    assert db.confirmation(wl, TARGET) is None


def test_a_damaged_confirmation_names_its_id(tmp_path):
    path = tmp_path / "tuning.db"
    wl, found = matmul_relu(), traces(2)
    with Database(path) as db:
        for trace in found:
            db.commit(wl, trace, target=TARGET, seconds=[1.0])
        db.confirm(wl, TARGET, {1: [1.0], 2: [0.5]})
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE confirmations SET times = '{\"1\": [1.0]}'")
    raw.close()
    with Database(path) as db, pytest.raises(DatabaseError, match="confirmation 1 is damaged"):
        db.best(wl, TARGET)


# --- arguments that make no record ---------------------------------------------------------

@pytest.mark.parametrize("result, message", [
    (dict(), "either run times"),
    (dict(seconds=[1.0], error="boom"), "not both"),
    (dict(seconds=[0.0]), "positive finite"),
    (dict(seconds=[-1.0]), "positive finite"),
    (dict(seconds=[float("nan")]), "positive finite"),
    (dict(seconds=[float("inf")]), "positive finite"),
    (dict(seconds=["1"]), "positive finite"),
    (dict(seconds=1.0), "sequence"),
    (dict(error=""), "non-empty"),
    (dict(seconds=[1.0], build_seconds=-1.0), "build_seconds"),
])
def test_a_malformed_result_is_refused_and_nothing_written(db, result, message):
    with pytest.raises(ValueError, match=message):
        db.commit(matmul_relu(), traces(1)[0], target=TARGET, **result)
    assert len(db) == 0 and db.workloads() == []


def test_a_trace_with_a_free_sampling_is_refused(db):
    with pytest.raises(ValueError, match="without a decision"):
        db.commit(matmul_relu(), traces(1)[0].without_decisions(), target=TARGET, seconds=[1.0])


def test_wrong_argument_types_are_refused(db):
    with pytest.raises(TypeError, match="Target"):
        db.commit(matmul_relu(), traces(1)[0], target="znver4", seconds=[1.0])
    with pytest.raises(TypeError, match="Workload"):
        db.commit("matmul_relu", traces(1)[0], target=TARGET, seconds=[1.0])
    with pytest.raises(TypeError, match="Trace"):
        db.commit(matmul_relu(), str(traces(1)[0]), target=TARGET, seconds=[1.0])
    with pytest.raises(TypeError, match="file path"):
        Database(3)


# --- stored workloads ---------------------------------------------------------------------

def test_workloads_are_listed_and_rebuilt_from_their_source(db):
    small, large = matmul_relu(32), matmul_relu()
    assert db.add_workload(small) == small.key and db.add_workload(small) == small.key
    db.commit(large, traces(1)[0], target=TARGET, seconds=[1.0])
    listed = {w.key: w for w in db.workloads()}
    assert listed[small.key].records == 0 and listed[large.key].records == 1
    assert listed[large.key].name == "matmul_relu" and listed[large.key].params == {"M": 64, "N": 64, "K": 64}
    rebuilt = db.workload(large.key)
    assert rebuilt == large and rebuilt.key == large.key
    with pytest.raises(DatabaseError, match=f"2 workloads named 'matmul_relu'.*{small.key}"):
        db.workload("matmul_relu")
    with pytest.raises(DatabaseError, match="no workload whose key or name is 'softmax'"):
        db.workload("softmax")


def test_a_workload_is_found_by_its_name_when_it_is_the_only_one(db):
    db.add_workload(matmul_relu())
    assert db.workload("matmul_relu") == matmul_relu()


def test_a_workload_without_source_cannot_be_rebuilt_until_it_comes_with_one(db):
    bare = dataclasses.replace(matmul_relu(), source="")
    db.add_workload(bare)
    with pytest.raises(DatabaseError, match="without its source text"):
        db.workload(bare.key)
    db.add_workload(matmul_relu())
    assert db.workload(bare.key) == matmul_relu()


def test_a_source_that_now_gives_another_program_is_refused(tmp_path):
    path = tmp_path / "tuning.db"
    with Database(path) as db:
        db.add_workload(matmul_relu())
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE workloads SET source = replace(source, '0.0)', '1.0)')")
    with Database(path) as db, pytest.raises(DatabaseError, match="another program"):
        db.workload(matmul_relu().key)


# --- records that cannot be read ----------------------------------------------------------

@pytest.mark.parametrize("column, value, message", [
    ("trace", "{broken", "Expecting"),
    ("trace", '{"version": 1, "insts": [{"kind": "Nope"}], "decisions": {}}', "wrong keys"),
    ("seconds", "[1.0,", "Expecting"),
    ("target", '{"cpu": "znver4"}', "JSON form"),
    ("versions", "null", "NoneType"),
])
def test_a_damaged_record_names_its_id(tmp_path, column, value, message):
    path = tmp_path / "tuning.db"
    with Database(path) as db:
        for index, trace in enumerate(traces(2)):
            db.commit(matmul_relu(), trace, target=TARGET, seconds=[2.0 - index])  # record 2 is the best
    with sqlite3.connect(path) as raw:
        raw.execute(f"UPDATE records SET {column} = ? WHERE id = 2", (value,))
    with Database(path) as db:
        with pytest.raises(DatabaseError, match=f"record 2 is damaged.*{message}"):
            db.records(matmul_relu())
        if column in ("seconds", "trace"):
            with pytest.raises(DatabaseError, match="record 2 is damaged"):
                db.best(matmul_relu(), TARGET)


def test_a_closed_database_says_so(tmp_path):
    db = Database(pathlib.Path(tmp_path / "tuning.db"))
    db.close()
    db.close()
    with pytest.raises(DatabaseError, match="tuning.db is closed"):
        len(db)
