"""The load guard: a clear loser timed once while the machine was busy is timed again once the
best kernel of the run (the canary) runs at its own time again."""
import pytest

from metasched import tune, workloads
from metasched.database import program_key
from metasched.measure import RunResult
from metasched.tune.tune import LoadGuard


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def guard_with(clock):
    return LoadGuard(factor=1.5, interval=2.0, waits=(0.5, 1.0), sleep=clock.sleep, clock=clock)


def test_without_a_canary_nothing_is_busy():
    assert not guard_with(Clock()).busy(lambda artifact: pytest.fail("nothing to time"))


def test_a_quiet_canary_is_not_timed_again_within_the_interval():
    clock, timed = Clock(), []
    guard = guard_with(clock)
    guard.new_best("best", 1.0)
    canary = lambda artifact: timed.append(artifact) or 1.2  # noqa: E731
    assert not guard.busy(canary)
    clock.now += 1.0
    assert not guard.busy(canary)
    clock.now += 1.5
    assert not guard.busy(canary)
    assert timed == ["best", "best"] and clock.slept == []


def test_a_burst_is_waited_out():
    clock = Clock()
    guard = guard_with(clock)
    guard.new_best("best", 1.0)
    times = iter([6.0, 5.0, 1.1])
    assert guard.busy(lambda artifact: next(times))
    assert clock.slept == [0.5, 1.0]


def test_lasting_load_becomes_the_canarys_time():
    clock = Clock()
    guard = guard_with(clock)
    guard.new_best("best", 1.0)
    assert guard.busy(lambda artifact: 4.0)
    assert clock.slept == [0.5, 1.0]
    clock.now += 5.0
    assert not guard.busy(lambda artifact: 4.2)  # the loaded machine is the norm now
    assert clock.slept == [0.5, 1.0]


def seconds_of(trace) -> float:
    """A made-up run time per program, between 1 and 10 ms."""
    return 1e-3 * (1 + int(program_key(trace)[:6], 16) % 9000 / 1000)


class BurstRunner:
    """Times by ``seconds_of``, a clear loser once (3x the best or more), the rest three
    times; runs ``burst`` to ``burst + length - 1`` (counted from 0) take 6 times longer
    (another process took a core). ``single`` lists the runs that were timed once."""

    def __init__(self, burst: int = -1, length: int = 0):
        self.calls, self.burst, self.length, self.single = 0, burst, length, []

    def start(self):
        pass

    def close(self):
        pass

    def run(self, workload, artifacts, best=None):
        results = []
        for trace in artifacts:
            slowed = 6.0 if self.burst <= self.calls < self.burst + self.length else 1.0
            seconds = seconds_of(trace) * slowed
            once = best is not None and seconds >= 3 * best
            if once:
                self.single.append(self.calls)
            results.append(RunResult((seconds,) if once else (seconds,) * 3, None))
            self.calls += 1
        return results


def test_tune_times_a_loser_of_a_burst_again(fake_builder):
    wl = workloads.get("matmul_relu", M=32, N=32, K=32)
    runner = BurstRunner()
    quiet = tune(wl, trials=12, seed=0, strategy="replay", builder=fake_builder, runner=runner)
    assert quiet.retimed == 0 and runner.single  # the seed's programs include a clear loser
    # A burst from the first clear loser on, through two timings of the canary: the loser
    # is timed once at 6x, the canary is slow twice (waits of 0.5 and 1 s), then quiet.
    loaded = tune(wl, trials=12, seed=0, strategy="replay", builder=fake_builder,
                  runner=BurstRunner(burst=runner.single[0], length=3))
    assert [t.trace for t in loaded.history] == [t.trace for t in quiet.history]
    assert loaded.retimed == 1
    for trial in loaded.history:
        assert trial.seconds == pytest.approx(seconds_of(trial.trace))  # no record of the burst
