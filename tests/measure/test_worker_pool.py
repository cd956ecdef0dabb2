"""The worker pool hands out tasks and returns their outcomes in order, and its workers keep
what tasks leave behind out of the cycle collector's way without keeping their garbage."""
import gc
import time

import pytest

from metasched.measure.worker import WorkerPool


@pytest.fixture(scope="module")
def pool():
    pool = WorkerPool(2, "test-pool")
    pool.start()
    yield pool
    pool.close()


def nap_and_square(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return value * value


def make_cycles(count: int) -> int:
    """Leave ``count`` unreachable cycles behind; return how many objects the collector
    cannot see (``gc.freeze``)."""
    for _ in range(count):
        a: list = []
        a.append(a)
    return gc.get_freeze_count()


def test_outcomes_come_back_in_order(pool):
    tasks = [(0.02 * (k % 3), k) for k in range(15)]
    outcomes = pool.map(nap_and_square, tasks, timeout=30)
    assert [o.value for o in outcomes] == [k * k for k in range(15)]
    assert all(o.ok and o.seconds >= s for o, (s, _) in zip(outcomes, tasks))


def test_a_worker_collects_the_garbage_of_a_task_before_freezing_what_is_left(pool):
    counts = [o.value for o in pool.map(make_cycles, [(5000,)] * 8, timeout=30)]
    # Each worker freezes after every task; the cycles each task left were collected first,
    # so the frozen objects do not grow by thousands a task.
    assert counts[-1] - counts[2] < 1000, counts
