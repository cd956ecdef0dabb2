"""Timing in the style of TVM's ``time_evaluator``: enough calls per repeat to last a minimum
time, several repeats, the median. One way to time things, for kernels and baselines alike."""
from __future__ import annotations

import time
from typing import Callable, Optional


def median_seconds(fn: Callable[[], object], repeat: int = 5, min_repeat_seconds: float = 0.05,
                   number: Optional[int] = None) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` repeats of ``number`` calls each.

    One warm-up call runs first. Without ``number``, it doubles from 1 until one repeat lasts
    at least ``min_repeat_seconds``, so that short calls are not lost in the clock's noise.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    fn()
    if number is None:
        number = 1
        while True:
            started = time.perf_counter()
            for _ in range(number):
                fn()
            if time.perf_counter() - started >= min_repeat_seconds or number >= 1 << 30:
                break
            number *= 2
    per_call = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            fn()
        per_call.append((time.perf_counter() - started) / number)
    per_call.sort()
    return per_call[len(per_call) // 2]


def paired_times(fn_a: Callable[[], object], fn_b: Callable[[], object], rounds: int = 7,
                 repeat: int = 3, min_repeat_seconds: float = 0.05) -> tuple[float, float, float]:
    """Time two functions in alternation, ``rounds`` times each: (median seconds of a, median
    seconds of b, median of the per-round ratios b / a).

    On a shared machine the load changes from second to second; timing the two sides of a
    comparison close together and taking the median ratio keeps a burst of load from
    deciding it.
    """
    times_a, times_b, ratios = [], [], []
    for _ in range(rounds):
        ta = median_seconds(fn_a, repeat, min_repeat_seconds)
        tb = median_seconds(fn_b, repeat, min_repeat_seconds)
        times_a.append(ta)
        times_b.append(tb)
        ratios.append(tb / ta)

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    return median(times_a), median(times_b), median(ratios)
