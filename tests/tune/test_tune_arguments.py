"""tune() checks its arguments at the door (issue 54, point 6): a wrong one is a one-line
TypeError or ValueError naming it, before any database is opened or worker started."""
import numpy as np
import pytest

from metasched import tune, workloads

WL = workloads.get("matmul", M=8, N=8, K=8)


@pytest.mark.parametrize("arguments, error, says", [
    (dict(trials=2.5), TypeError, "trials"),
    (dict(trials=True), TypeError, "trials"),
    (dict(trials="2"), TypeError, "trials"),
    (dict(trials=-1), ValueError, "trials"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed="abc"), TypeError, "seed"),
    (dict(seed=1.0), TypeError, "seed"),
    (dict(batch_size=2.5), TypeError, "batch_size"),
    (dict(batch_size=0), ValueError, "batch_size"),
    (dict(confirm="x"), TypeError, "confirm"),
    (dict(confirm=-2), ValueError, "confirm"),
    (dict(strategy=3), TypeError, "strategy"),
    (dict(strategy="annealing"), ValueError, "strategy"),
    (dict(progress="yes"), TypeError, "progress"),
    (dict(database=5), TypeError, "database"),
    (dict(space="cpu"), TypeError, "space"),
    (dict(options={"opt_level": 2}), TypeError, "options"),
])
def test_a_wrong_argument_is_named_in_one_line(arguments, error, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error) as raised:
        tune(WL, **{"trials": 1, **arguments})
    message = str(raised.value)
    assert message.startswith(f"tune: {says} ") and "\n" not in message, message
    assert list(tmp_path.iterdir()) == []  # nothing opened, nothing made


def test_the_workload_is_checked_too():
    with pytest.raises(TypeError, match=r"^tune: workload must be a Workload"):
        tune("matmul", trials=1)


@pytest.mark.parametrize("seed", [0, 7, np.int64(3), np.random.default_rng(1)])
def test_what_a_seed_may_be(seed):
    assert tune(WL, trials=0, seed=seed).history == []  # accepted; nothing to measure
