"""``tune``'s warm start: the cost model of evolutionary search first trained on the records of
another workload in the database, by default one of the same kind (``Workload.kind``)."""
import re
import zlib

import pytest

from conftest import record_samples
from metasched import Database, WarmStartError, tune, workloads
from metasched.database import Target, program_key
from metasched.measure.runner import RunResult
from metasched.search.cost_model import MIN_TRAINING_PROGRAMS
from metasched.tune import host_target, warm_start
from metasched.tune.warm_start import same_kind

MATMUL = workloads.get("matmul_relu", M=16, N=32, K=16)
DENSE = workloads.get("dense_bias_relu", M=16, K=32, N=32)  # the same kind as MATMUL
COLUMNS = workloads.get("reduce_cols", M=64, N=64)  # another kind


class HashRunner:
    """Times each program by its key (deterministic, nothing run)."""

    def start(self):
        pass

    def close(self):
        pass

    def run(self, workload, artifacts, best=None):
        return [RunResult((1e-3 * (1 + zlib.crc32(program_key(t).encode()) % 97 / 10),) * 3, None)
                for t in artifacts]


@pytest.fixture
def run(fake_builder):
    def tuned(db, wl=DENSE, **kwargs):
        return tune(wl, trials=4, database=db, seed=0, builder=fake_builder, runner=HashRunner(), batch_size=4,
                    **kwargs)
    return tuned


@pytest.fixture(autouse=True)
def fewer_records_will_do(monkeypatch):
    """A default warm start wants the records of a 64-trial run; these tests record fewer."""
    monkeypatch.setattr(warm_start, "WARM_MIN_RECORDS", MIN_TRAINING_PROGRAMS)


@pytest.fixture
def db(tmp_path):
    with Database(tmp_path / "warm.db") as opened:
        yield opened


def test_a_run_takes_the_workload_of_its_kind_with_the_most_records(db, run):
    small = workloads.get("matmul_relu", M=16, N=16, K=16)
    fewer = record_samples(db, small, 20)  # stored first, listed first
    count = record_samples(db, MATMUL, 60)
    assert MIN_TRAINING_PROGRAMS <= fewer < count
    record_samples(db, COLUMNS, 60)
    assert same_kind(db, DENSE, host_target()) == MATMUL
    result = run(db)
    assert result.warm_start.workloads == (MATMUL,) and result.warm_start.chosen
    assert result.warm_start.records == count and result.warm_start.informed
    assert str(result.warm_start) == (f"cost model warm-started on {count} records of "
                                      f"matmul_relu(M=16, N=32, K=16), a workload of the same kind")
    assert len(db.records(DENSE)) == 4
    # Its model knew programs from the start: the first proposal ran genetic rounds, scoring
    # candidates, where an uninformed one picks the most vectorized of fresh samples.
    assert ", scored 0," not in result.rounds[0]
    assert run(db, COLUMNS).warm_start is None  # its kind's only workload is itself


def test_too_few_records_of_this_cpu_are_not_taken(db, run, monkeypatch):
    elsewhere = Target(cpu="othercpu", features="+sse2", num_threads=host_target().num_threads + 1)
    record_samples(db, MATMUL, 60, target=elsewhere)
    record_samples(db, MATMUL, 10)  # below WARM_MIN_RECORDS on this CPU
    assert len(db.records(MATMUL, host_target())) < warm_start.WARM_MIN_RECORDS < len(db.records(MATMUL))
    assert same_kind(db, DENSE, host_target()) is None
    assert run(db).warm_start is None
    monkeypatch.setattr(warm_start, "WARM_MIN_RECORDS", 10)
    assert same_kind(db, DENSE, host_target()) == MATMUL


def test_no_warm_start_when_told_or_for_another_strategy(db, run):
    record_samples(db, MATMUL, 60)
    cold = run(db, warm_start=False)
    assert cold.warm_start is None and ", scored 0," in cold.rounds[0]
    assert run(db, workloads.get("dense_bias_relu", M=32, K=32, N=32), strategy="replay").warm_start is None


def test_named_workloads_are_taken_whatever_their_kind_and_count(db, run, monkeypatch):
    record_samples(db, COLUMNS, 8)
    result = run(db, warm_start=[COLUMNS])
    assert result.warm_start.workloads == (COLUMNS,) and not result.warm_start.chosen
    assert not result.warm_start.informed and str(result.warm_start).endswith(
        f"(too few to learn from: it scores at random until it knows {MIN_TRAINING_PROGRAMS} programs)")
    count = record_samples(db, MATMUL, 60)
    monkeypatch.setattr(warm_start, "WARM_RECORDS", count // 2)  # at most that many of each
    again = run(db, workloads.get("dense_bias_relu", M=32, K=32, N=32), warm_start=[MATMUL, COLUMNS])
    assert again.warm_start.records == count // 2 + len(db.records(COLUMNS))


@pytest.mark.parametrize("kwargs, says", [
    (dict(warm_start=[DENSE]), re.escape(f"warm start on {DENSE.label}: that is the workload being tuned")),
    (dict(warm_start=[MATMUL], strategy="replay"), "has none of its own making"),
    (dict(warm_start=[MATMUL]), re.escape(f"holds no records of {MATMUL.label} measured on this CPU")),
    (dict(warm_start="matmul_relu"), "a list of Workloads"),
    (dict(warm_start=["matmul_relu"]), "expected Workloads"),
], ids=["itself", "random search", "no records", "a name", "names"])
def test_a_warm_start_that_cannot_be_made_is_refused_before_anything_runs(db, run, kwargs, says):
    with pytest.raises(WarmStartError, match=says):
        run(db, **kwargs)
    assert not db.records(DENSE)


def test_a_workload_that_no_longer_rebuilds_is_passed_over(db):
    record_samples(db, MATMUL, 60)
    db._connection.execute("UPDATE workloads SET source = '' WHERE key = ?", (MATMUL.key,))
    assert same_kind(db, DENSE, host_target()) is None
