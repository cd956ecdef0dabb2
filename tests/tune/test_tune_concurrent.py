"""Another run tuning into the same database meanwhile (issue 54, point 8): a program it
recorded first is not this run's new trial, the budget counts its records, and the best this
run reports (and its progress shows) is the database's, records of the other run included.

The other run is simulated in this process, through a second connection to the file, so that
what it records and when is exact."""
import numpy as np
import pytest

from metasched import Database, tune, workloads
from metasched.database import program_key
from metasched.measure import RunResult
from metasched.search import ReplaySearch, SearchContext
from metasched.space import cpu_default
from metasched.tune import host_target

WL = workloads.get("matmul_relu", M=16, N=16, K=16)
SEED = 3


def first_proposals(count):
    search = ReplaySearch()
    search.start(SearchContext(WL, cpu_default(), np.random.default_rng(SEED)))
    return [s.trace for s in search.propose(count)]


class RunnerBesideAnotherRun:
    """Times every program at 1 ms; before its first timing, the other run records ``others``
    (at 0.5 ms: faster than anything this run times)."""

    def __init__(self, path, others):
        self.path, self.others, self.done = path, others, False

    def start(self):
        pass

    def close(self):
        pass

    def run(self, workload, artifacts, best=None):
        if not self.done:
            self.done = True
            with Database(self.path) as other:
                for trace in self.others:
                    other.commit(WL, trace, target=host_target(), seconds=[5e-4] * 3)
        return [RunResult((1e-3,) * 3, None) for _ in artifacts]


@pytest.mark.parametrize("trials, taken", [(4, 4), (6, 4), (6, 2)])
def test_programs_recorded_by_another_run_meanwhile_are_not_new_trials(tmp_path, fake_builder, trials, taken):
    path = tmp_path / "shared.db"
    others = first_proposals(taken)  # the other run, of the same seed, records them first
    shown = []
    result = tune(WL, trials=trials, database=path, seed=SEED, strategy="replay", builder=fake_builder,
                  runner=RunnerBesideAnotherRun(path, others), batch_size=4, confirm=0,
                  progress=lambda trial, best: shown.append(best))
    mine = {program_key(t.trace) for t in result.history}
    assert not mine & {program_key(t) for t in others}
    with Database(path) as db:
        stored = db.records(WL, host_target())
    assert len(stored) == trials  # the budget counts the other run's records
    assert len(result.history) == trials - taken
    assert result.concurrent_trials == taken
    assert result.best_record is not None and result.best_seconds == pytest.approx(5e-4)  # the other's
    assert all(best == pytest.approx(5e-4) for best in shown)
