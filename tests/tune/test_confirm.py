"""The confirmation at the end of tune(): the fastest records are timed again in turns, and
that, not a lucky moment of a trial's timing, decides the best."""
import collections

import numpy as np
import pytest

from metasched import Database, tune, workloads
from metasched.database import program_key
from metasched.measure import RunResult
from metasched.search import ReplaySearch, SearchContext
from metasched.space import cpu_default
from metasched.tune import host_target
from metasched.measure.confirm import CONFIRM_ROUNDS

from conftest import FakeBuilder


@pytest.fixture(scope="module")
def wl():
    return workloads.get("matmul_relu", M=32, N=32, K=32)


def proposals(wl, seed, count):
    search = ReplaySearch()
    search.start(SearchContext(wl, cpu_default(), np.random.default_rng(seed)))
    return [program_key(s.trace) for s in search.propose(count)]


class DriftingRunner:
    """Times program ``keys[i]`` at ``1 + i / 10`` ms; the runs of the programs in ``lucky``
    timed alone (their trials' timings and the load guard's, not the confirmation's turns),
    the first ``lucky_runs`` of them if given, take ``luck`` times that (a quiet moment of
    the machine, the guard none the wiser); programs in ``failing`` fail after their first
    ``fails_after`` runs; the first ``busy_turns`` calls with several programs (the
    confirmation's turns) take 2 to 3 ms, the slower a program the faster then (the load
    decides the order). Logs each call's program keys."""

    def __init__(self, keys, lucky=(), lucky_runs=None, luck=0.5, failing=(), fails_after=2, busy_turns=0):
        self.seconds = {key: 1e-3 * (1 + i / 10) for i, key in enumerate(keys)}
        self.lucky, self.lucky_runs, self.luck = set(lucky), lucky_runs, luck
        self.failing, self.fails_after, self.busy_turns = set(failing), fails_after, busy_turns
        self.runs, self.calls = collections.Counter(), []

    def start(self):
        pass

    def close(self):
        pass

    def run(self, workload, artifacts, best=None):
        results, keys = [], [program_key(trace) for trace in artifacts]
        busy = len(keys) > 1 and self.busy_turns > 0
        self.busy_turns -= busy
        for key in keys:
            if busy:
                results.append(RunResult((2e-3 * (2 - self.seconds[key] * 1e3 / 2),) * 3, None))
                continue
            self.runs[key] += 1
            if key in self.failing and self.runs[key] > self.fails_after:
                results.append(RunResult((), "run: crashed with SIGSEGV"))
                continue
            lucky = key in self.lucky and len(keys) == 1
            factor = self.luck if lucky and (self.lucky_runs is None or self.runs[key] <= self.lucky_runs) else 1.0
            results.append(RunResult((self.seconds[key] * factor,) * 3, None))
        self.calls.append(keys)
        return results


def test_the_confirmation_picks_the_fastest_over_the_one_timed_at_a_quiet_moment(wl, fake_builder):
    keys = proposals(wl, seed=3, count=8)
    runner = DriftingRunner(keys, lucky=[keys[5]])  # 1.5 ms, but timed at 0.75 ms in its trial
    alone = tune(wl, trials=8, seed=3, strategy="replay", builder=fake_builder, runner=DriftingRunner(
        keys, lucky=[keys[5]]), confirm=0)
    assert alone.best_record.program == keys[5] and alone.confirmation is None
    result = tune(wl, trials=8, seed=3, strategy="replay", builder=fake_builder, runner=runner, batch_size=8)
    assert [program_key(t.trace) for t in result.history] == keys
    by_id = {t.index + 1: program_key(t.trace) for t in result.history}  # ids count from 1 in a new file
    confirmation = result.confirmation
    # the four fastest by their trials' medians: the lucky one and the truly fastest three
    assert [by_id[i] for i in confirmation.times] == [keys[0], keys[1], keys[2], keys[5]]  # by id
    assert all(len(times) == CONFIRM_ROUNDS for times in confirmation.times.values())
    assert by_id[confirmation.winner] == keys[0] == result.best_record.program
    # in turns: one order, then the other
    assert runner.calls[-CONFIRM_ROUNDS:] == [[keys[5], keys[0], keys[1], keys[2]],
                                             [keys[2], keys[1], keys[0], keys[5]],
                                             [keys[5], keys[0], keys[1], keys[2]]]


def test_a_program_that_fails_when_timed_again_is_left_out(wl, fake_builder):
    keys = proposals(wl, seed=3, count=8)
    runner = DriftingRunner(keys, failing=[keys[1]], fails_after=1)
    result = tune(wl, trials=8, seed=3, strategy="replay", builder=fake_builder, runner=runner, confirm=3)
    assert result.unconfirmed == ["record 2: run: crashed with SIGSEGV"]
    by_id = {t.index + 1: program_key(t.trace) for t in result.history}
    assert [by_id[i] for i in result.confirmation.times] == [keys[0], keys[2]]
    assert result.best_record.program == keys[0]


def test_the_last_winner_is_timed_again_with_the_new_fastest(tmp_path, wl, fake_builder):
    path = tmp_path / "tuning.db"
    keys = proposals(wl, seed=3, count=12)
    runner = DriftingRunner(keys)
    first = tune(wl, trials=8, database=path, seed=3, strategy="replay", builder=fake_builder, runner=runner,
                 confirm=2)
    assert first.best_record.program == keys[0]
    # The next trials are slower than keys[0] (1.2 to 1.4 ms against 1 ms), but their first runs
    # come at a quiet moment (half that), so that the medians of the first two (0.9 and 0.95 ms)
    # are below its: it joins them when they are timed again, and wins.
    runner.lucky, runner.lucky_runs, runner.luck = set(keys[8:]), 1, 0.5
    runner.seconds.update({key: runner.seconds[key] * 2 / 3 for key in keys[8:]})
    second = tune(wl, trials=12, database=path, seed=3, strategy="replay", builder=fake_builder, runner=runner,
                  confirm=2)
    with Database(path) as db:
        programs = {r.id: r.program for r in db.records(wl)}
        confirmation = db.confirmation(wl, host_target())
    assert [programs[t.index + 9] for t in second.history] == keys[8:]
    assert confirmation == second.confirmation and confirmation.current
    assert [programs[i] for i in confirmation.times] == [keys[0], keys[8], keys[9]]
    assert programs[confirmation.winner] == keys[0] == second.best_record.program


class CountingBuilder(FakeBuilder):
    """A ``FakeBuilder`` that logs the program key of every trace it builds."""

    def __init__(self):
        self.built = []

    def build(self, workload, traces):
        self.built += [program_key(t) for t in traces]
        return super().build(workload, traces)


def test_the_confirmation_times_the_programs_the_run_built_without_building_them_again(tmp_path, wl):
    path = tmp_path / "tuning.db"
    keys = proposals(wl, seed=3, count=12)
    builder = CountingBuilder()
    first = tune(wl, trials=8, database=path, seed=3, strategy="replay", builder=builder,
                 runner=DriftingRunner(keys), confirm=4)
    assert len(first.confirmation.times) == 4 and builder.built == keys[:8]  # each built once
    builder.built = []
    second = tune(wl, trials=12, database=path, seed=3, strategy="replay", builder=builder,
                  runner=DriftingRunner(keys), confirm=2)
    # The two fastest are the last run's (keys[0], keys[1]): not built by this run, so built again.
    assert len(second.confirmation.times) == 2 and builder.built == keys[8:] + keys[:2]


def test_a_real_run_confirms_on_the_real_runner(tmp_path, wl):
    path = tmp_path / "tuning.db"
    result = tune(wl, trials=4, database=path, seed=1, strategy="replay", confirm=3)
    if result.unconfirmed and "stayed busy" in result.unconfirmed[-1]:
        pytest.skip(f"real timings on a loaded machine: {result.unconfirmed[-1]}")  # tested with fakes above
    confirmation = result.confirmation
    why = result.unconfirmed + [f"trial {t.index}: {t.error}" for t in result.history if t.error]
    assert confirmation is not None and len(confirmation.times) == 3 and not result.unconfirmed, why
    assert all(len(times) == CONFIRM_ROUNDS and min(times) > 0 for times in confirmation.times.values())
    with Database(path) as db:
        assert db.best(wl, host_target()).id == confirmation.winner == result.best_record.id
    again = tune(wl, trials=4, database=path, seed=1, strategy="replay")  # nothing new: nothing confirmed
    assert again.confirmation is None and again.best_record == result.best_record


def test_a_confirmation_on_a_busy_machine_waits_and_times_them_again(wl, fake_builder):
    keys = proposals(wl, seed=3, count=8)
    runner = DriftingRunner(keys, busy_turns=CONFIRM_ROUNDS)  # its first try is all busy
    result = tune(wl, trials=8, seed=3, strategy="replay", builder=fake_builder, runner=runner)
    assert sum(len(call) > 1 for call in runner.calls) == 2 * CONFIRM_ROUNDS
    assert not result.unconfirmed
    assert result.confirmation.times[1] == (1e-3,) * CONFIRM_ROUNDS  # the second try's times
    assert result.best_record.program == keys[0]


def test_a_machine_that_stays_busy_leaves_the_best_to_the_medians(wl, fake_builder):
    keys = proposals(wl, seed=3, count=8)
    runner = DriftingRunner(keys, lucky=[keys[5]], busy_turns=1000)
    result = tune(wl, trials=8, seed=3, strategy="replay", builder=fake_builder, runner=runner)
    assert sum(len(call) > 1 for call in runner.calls) == 4 * CONFIRM_ROUNDS  # after 3 waits
    assert result.confirmation is None
    assert result.unconfirmed == ["the machine stayed busy: the fastest programs ran 2.8 times slower than "
                                  "when tuned, so no confirmation was recorded"]
    assert result.best_record.program == keys[5]  # the medians decide
