"""The load guard: the programs timed while the machine was busy (clear losers timed once, or
programs timed in full) are held back and timed again once the best kernel of the run (the
canary) runs at its own time again; the guard looks at most every ``interval`` seconds and at
the end of every batch."""
import functools
import importlib

import pytest

from metasched import Database, tune, workloads
from metasched.database import program_key
from metasched.measure import RunResult
from metasched.measure.guard import LoadGuard

tune_module = importlib.import_module("metasched.tune.tune")  # the package's ``tune`` is the function


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def guard_with(clock, patience=1.5, **kwargs):
    """A guard on ``clock`` that waits 0.5 s, then 1 s, and by default no longer (``patience``)."""
    return LoadGuard(factor=1.5, interval=2.0, waits=(0.5, 1.0), patience=patience, sleep=clock.sleep,
                     clock=clock, **kwargs)


def test_without_a_canary_nothing_is_busy():
    assert not guard_with(Clock()).busy(lambda artifact: pytest.fail("nothing to time"))


def test_a_quiet_canary_is_not_due_again_within_the_interval():
    clock, timed = Clock(), []
    guard = guard_with(clock)
    assert not guard.due()  # no canary yet
    guard.new_best("best", 1.0)
    canary = lambda artifact: timed.append(artifact) or 1.2  # noqa: E731
    assert guard.due() and not guard.busy(canary)
    clock.now += 1.0
    assert not guard.due()
    clock.now += 1.5
    assert guard.due() and not guard.busy(canary)
    assert timed == ["best", "best"] and clock.slept == []


def test_busy_looks_whenever_asked():
    clock, timed = Clock(), []
    guard = guard_with(clock)
    guard.new_best("best", 1.0)
    canary = lambda artifact: timed.append(artifact) or 1.2  # noqa: E731
    assert not guard.busy(canary)
    clock.now += 1.0
    assert not guard.due() and not guard.busy(canary)  # as at the end of a batch
    assert timed == ["best", "best"]


def test_a_burst_is_waited_out():
    clock = Clock()
    guard = guard_with(clock)
    guard.new_best("best", 1.0)
    times = iter([6.0, 5.0, 1.1])
    assert guard.busy(lambda artifact: next(times))
    assert clock.slept == [0.5, 1.0]


def test_lasting_load_becomes_the_canarys_time():
    clock, notes = Clock(), []
    guard = guard_with(clock, note=notes.append)
    guard.new_best("best", 1.0)
    assert guard.busy(lambda artifact: 1.8)
    assert clock.slept == [0.5, 1.0] and guard.lasting == [1.8]
    assert notes == ["the machine stays busy: the best kernel runs at 1.8x its time after 1.5 s of waiting; "
                     "timing goes on at that speed"]
    clock.now += 5.0
    assert not guard.busy(lambda artifact: 1.9)  # the loaded machine is the norm now
    assert clock.slept == [0.5, 1.0] and guard.lasting == [1.8] and len(notes) == 1


def test_a_load_that_outlasts_the_waits_is_waited_for_up_to_the_guards_patience():
    # Still busy after the waits: the last wait again, until the load lifts; then the held
    # programs are timed again (busy), and nothing is taken as lasting.
    clock, notes = Clock(), []
    guard = guard_with(clock, patience=10.0, note=notes.append)
    guard.new_best("best", 1.0)
    times = iter([6.0, 6.0, 6.0, 5.0, 6.0, 1.2])
    assert guard.busy(lambda artifact: next(times))
    assert clock.slept == [0.5, 1.0, 1.0, 1.0, 1.0] and guard.lasting == []
    assert len(notes) == 1 and notes[0].startswith("the machine is busy: the best kernel runs at 6.0x its time; "
                                                   "waiting up to 10 s in all")
    # One that outlasts the patience is taken as lasting at last, the waits summing to it.
    clock.now += 5.0
    assert guard.busy(lambda artifact: 6.0)
    assert sum(clock.slept[5:]) == pytest.approx(10.0) and max(clock.slept[5:]) == 1.0
    assert guard.lasting == [6.0] and "after 10 s of waiting" in notes[-1]


def test_once_a_lasting_load_has_gone_the_next_spell_is_seen():
    clock = Clock()
    guard = guard_with(clock)
    guard.new_best("best", 1.0)
    assert guard.busy(lambda artifact: 1.8)  # lasting: 1.8 is the canary's time for now
    clock.now += 5.0
    assert not guard.busy(lambda artifact: 1.0)  # the load has gone, and 1.0 is its time again
    clock.now += 5.0
    times = iter([2.0, 1.1])
    assert guard.busy(lambda artifact: next(times))  # twice its time: busy, not "quiet for 4.0"
    assert clock.slept == [0.5, 1.0, 0.5]


def seconds_of(trace) -> float:
    """A made-up run time per program, between 1 and 10 ms."""
    return 1e-3 * (1 + int(program_key(trace)[:6], 16) % 9000 / 1000)


class BurstRunner:
    """Times by ``seconds_of``, a clear loser once (3x the best or more), the rest three
    times; runs ``burst`` to ``burst + length - 1`` (counted from 0) take 6 times longer
    (another process took a core). ``single`` lists the runs that were timed once, ``timed``
    the trace of each run."""

    def __init__(self, burst: int = -1, length: int = 0):
        self.calls, self.burst, self.length, self.single, self.timed = 0, burst, length, [], []

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
            self.timed.append(trace)
            results.append(RunResult((seconds,) if once else (seconds,) * 3, None))
            self.calls += 1
        return results


def canary_checks(runner: BurstRunner) -> list[int]:
    """The runs that timed the canary: a program timed before, not right after itself (a new
    best's second timing)."""
    return [k for k, trace in enumerate(runner.timed)
            if trace in runner.timed[:k] and runner.timed[k - 1] != trace]


# Seeds of random search whose first program checked against the canary was timed in full,
# and timed once as a clear loser.
@pytest.mark.parametrize("seed, loser", [(0, False), (1, True)], ids=["timed in full", "a clear loser"])
def test_tune_times_the_programs_of_a_burst_again(fake_builder, seed, loser):
    wl = workloads.get("matmul_relu", M=32, N=32, K=32)
    quiet_runner = BurstRunner()
    quiet = tune(wl, trials=12, seed=seed, strategy="replay", builder=fake_builder, runner=quiet_runner)
    assert quiet.retimed == 0
    # The program timed just before the run's first canary check (the first program that is
    # not a new best, once there is a canary).
    burst = canary_checks(quiet_runner)[0] - 1
    assert (burst in quiet_runner.single) == loser
    # A burst through that program's timing and two timings of the canary: it is timed at 6x,
    # the canary is slow twice (waits of 0.5 and 1 s), then quiet, and the programs held since
    # the run began (none was recorded before the guard first looked) are timed again.
    loaded = tune(wl, trials=12, seed=seed, strategy="replay", builder=fake_builder,
                  runner=BurstRunner(burst=burst, length=3))
    traces = [t.trace for t in quiet.history]
    assert [t.trace for t in loaded.history] == traces
    assert loaded.retimed == traces.index(quiet_runner.timed[burst]) + 1
    assert loaded.run_seconds >= 1.5  # the waits count as measuring, not as search
    for trial in loaded.history:
        assert trial.seconds == pytest.approx(seconds_of(trial.trace))  # no record of the burst


def test_tune_reports_a_load_that_outlasts_the_guards_waits(fake_builder, monkeypatch):
    wl = workloads.get("matmul_relu", M=32, N=32, K=32)
    quiet_runner = BurstRunner()
    quiet = tune(wl, trials=12, seed=0, strategy="replay", builder=fake_builder, runner=quiet_runner)
    assert quiet.lasting_loads == []
    # From the program before the first look on, every run takes 6 times its time: the
    # guard's waits and its patience (both made short here) end with the canary still slow,
    # and the load is taken as the machine's state, at 6 times its time.
    burst = canary_checks(quiet_runner)[0] - 1
    monkeypatch.setattr(tune_module, "LoadGuard", functools.partial(LoadGuard, waits=(0.01, 0.01),
                                                                    patience=0.05))
    notes = []
    progress = lambda trial, best: None  # noqa: E731
    progress.note = notes.append
    loaded = tune(wl, trials=12, seed=0, strategy="replay", builder=fake_builder,
                  runner=BurstRunner(burst=burst, length=10**6), progress=progress)
    assert loaded.lasting_loads == [pytest.approx(6.0)]
    assert len(notes) == 2 and "6.0x its time; waiting" in notes[0] and "stays busy" in notes[1]
    # The held programs were timed again under the load, and recorded at its speed.
    assert loaded.retimed > 0
    assert loaded.history[-1].seconds == pytest.approx(6 * seconds_of(loaded.history[-1].trace))


def one_quiet_batch(wl, builder):
    """A run of one batch of 8 on a quiet machine, timed in less than the guard's interval:
    the result, the runner, and the runs of the guard's two looks (one in the batch, one at
    its end)."""
    runner = BurstRunner()
    result = tune(wl, trials=8, seed=0, strategy="replay", builder=builder, runner=runner, confirm=0)
    first, last = canary_checks(runner)
    assert last == len(runner.timed) - 1
    return result, runner, first, last


def test_a_burst_after_a_quiet_look_is_seen_at_the_end_of_the_batch(fake_builder):
    wl = workloads.get("matmul_relu", M=32, N=32, K=32)
    quiet, quiet_runner, first, last = one_quiet_batch(wl, fake_builder)
    # A burst from just after the first look through the look at the end: every program
    # timed in it is timed again once the canary runs quiet (after a wait of 0.5 s).
    loaded = tune(wl, trials=8, seed=0, strategy="replay", builder=fake_builder,
                  runner=BurstRunner(burst=first + 1, length=last - first), confirm=0)
    traces = [t.trace for t in quiet.history]
    assert [t.trace for t in loaded.history] == traces
    assert loaded.retimed == len(traces) - 1 - traces.index(quiet_runner.timed[first - 1])
    for trial in loaded.history:
        assert trial.seconds == pytest.approx(seconds_of(trial.trace))


class InterruptedRunner(BurstRunner):
    """A ``BurstRunner`` that is interrupted (Ctrl-C) at run ``stop``."""

    def __init__(self, stop: int):
        super().__init__()
        self.stop = stop

    def run(self, workload, artifacts, best=None):
        if self.calls == self.stop:
            raise KeyboardInterrupt
        return super().run(workload, artifacts, best)


def test_an_interrupted_run_keeps_the_programs_it_held(fake_builder):
    wl = workloads.get("matmul_relu", M=32, N=32, K=32)
    quiet, _, _, last = one_quiet_batch(wl, fake_builder)
    # Interrupted at the look at the end of the batch: the programs timed since the first
    # look, held until then, are recorded all the same.
    with Database(":memory:") as db:
        with pytest.raises(KeyboardInterrupt):
            tune(wl, trials=8, database=db, seed=0, strategy="replay", builder=fake_builder,
                 runner=InterruptedRunner(stop=last), confirm=0)
        assert [r.program for r in db.records(wl)] == [program_key(t.trace) for t in quiet.history]


def test_an_interrupted_timing_again_records_only_what_was_timed(fake_builder):
    wl = workloads.get("matmul_relu", M=32, N=32, K=32)
    quiet, quiet_runner, first, last = one_quiet_batch(wl, fake_builder)
    # A burst through the look at the end of the batch, then Ctrl-C while the held programs
    # are timed again: the first of them, timed again, is recorded; the others, whose first
    # timings were dropped, are not (a run resumed on the database measures them).
    runner = InterruptedRunner(stop=last + 3)  # the canary slow, then quiet, then one timed again
    runner.burst, runner.length = last - 1, 2
    with Database(":memory:") as db:
        with pytest.raises(KeyboardInterrupt):
            tune(wl, trials=8, database=db, seed=0, strategy="replay", builder=fake_builder, runner=runner,
                 confirm=0)
        traces = [t.trace for t in quiet.history]
        held = traces.index(quiet_runner.timed[first - 1]) + 1  # the first program held at the end
        assert [r.program for r in db.records(wl)] == [program_key(t) for t in traces[:held + 1]]
        assert all(r.median == pytest.approx(seconds_of(r.trace)) for r in db.records(wl))


def test_the_cli_says_when_a_load_outlasted_the_guards_waits(fake_builder, monkeypatch, tmp_path, capsys):
    from metasched import cli

    monkeypatch.setattr(tune_module, "LoadGuard", functools.partial(LoadGuard, waits=(0.01, 0.01),
                                                                    patience=0.05))
    real_tune = cli.tune
    # Every run from the third on (after the first program's two timings) takes 6 times its time.
    monkeypatch.setattr(cli, "tune", lambda *args, **kwargs: real_tune(
        *args, builder=fake_builder, runner=BurstRunner(burst=2, length=10**6), **kwargs))
    db = str(tmp_path / "loaded.db")
    assert cli.main(["tune", "matmul_relu", "-p", "M=32", "-p", "N=32", "-p", "K=32", "--trials", "6",
                     "--strategy", "replay", "--db", db]) == cli.EXIT_OK
    captured = capsys.readouterr()
    assert "the machine stayed busy past the load guard's waits 1 time(s) (its best kernel at 6.0x its time)" \
        in captured.out
    assert "the machine is busy: the best kernel runs at 6.0x its time; waiting up to 0.05 s" in captured.err
    assert "the machine stays busy: the best kernel runs at 6.0x its time after 0.05 s of waiting" in captured.err
