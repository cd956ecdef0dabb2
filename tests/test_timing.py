"""``metasched.timing``: the order and pairing of ``paired_times`` (no timed assertions)."""
from metasched import timing


def test_paired_times_alternates_which_side_runs_first():
    calls = []
    timing.paired_times(lambda: calls.append("a"), lambda: calls.append("b"), rounds=4, repeat=2,
                        min_repeat_seconds=0.0)
    # Each side: a warm-up call and two repeats of one call, so blocks of three calls.
    blocks = [calls[k] for k in range(0, len(calls), 3)]
    assert calls == [side for side in blocks for _ in range(3)]
    assert blocks == ["a", "b", "b", "a", "a", "b", "b", "a"]


def test_paired_times_pairs_each_round_whatever_the_order(monkeypatch):
    # Side b's time is 2, 3, 4, 5 in rounds 0..3 and a's is always 1: each round's ratio must
    # divide b's time of that round by a's, also in rounds where b runs first.
    seconds = {"a": iter([1.0] * 4), "b": iter([2.0, 3.0, 4.0, 5.0])}
    monkeypatch.setattr(timing, "median_seconds", lambda fn, *args: next(seconds[fn()]))
    ta, tb, ratio = timing.paired_times(lambda: "a", lambda: "b", rounds=4)
    assert (ta, tb, ratio) == (1.0, 4.0, 4.0)  # medians: upper middle of an even count


def test_times_print_in_the_unit_that_keeps_their_digits():
    assert timing.format_seconds(2.5) == "2.500 s"
    assert timing.format_seconds(0.1) == "0.100 s"
    assert timing.format_seconds(1.377e-3) == "1.377 ms"
    assert timing.format_seconds(1.5e-4) == "0.150 ms"
    assert timing.format_seconds(3.47e-7) == "0.347 us"  # an 8-element add: not "0.000 ms"
    assert timing.format_seconds(4.2e-8) == "42.000 ns"
    assert timing.format_seconds(0.0) == "0.000 ns"


def test_speeds_keep_three_significant_digits():
    assert timing.format_gflops(2.064e9 * 1.5e-3, 1.5e-3) == "2.06 GFLOP/s"
    assert timing.format_gflops(206.4e9, 1.0) == "206.4 GFLOP/s"
    assert timing.format_gflops(8, 3.47e-7) == "0.0231 GFLOP/s"  # not "0.0 GFLOP/s"
    assert timing.format_gflops(2e9, 1.0) == "2.00 GFLOP/s"  # its zeros are digits too


def test_calls_in_a_loop_stop_early_when_each_takes_far_longer_than_the_first():
    # The count comes from one quick call (1 us); the loop's calls then take 100 us each (a
    # kernel whose threads wait for a loaded core). A repeat stops once it has run 4 times
    # its minimum, and its time is per call made.
    import time
    made = []

    def calls(n):
        made.append(n)
        time.sleep(n * 1e-4)

    seconds = timing.repeat_seconds(lambda: None, repeat=2, min_repeat_seconds=0.01, warm_seconds=1e-6, calls=calls)
    assert sum(made) < 2 * 10_000 // 4  # the count was 10,000 a repeat
    assert all(1e-4 <= s < 3e-4 for s in seconds)


def test_calls_in_a_loop_make_the_count_asked_for():
    made = []
    seconds = timing.repeat_seconds(lambda: None, repeat=3, number=7, warm_seconds=0.0, calls=made.append)
    assert made == [7, 7, 7] and len(seconds) == 3
