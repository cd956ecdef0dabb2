"""Timing in the style of TVM's ``time_evaluator``: enough calls per repeat to last a minimum
time, several repeats, the median. One way to time things, for kernels and baselines alike;
and one way to print a time (``format_seconds``) or a speed (``format_gflops``)."""
from __future__ import annotations

import math
import time
from typing import Callable, Optional, Sequence


def repeat_seconds(fn: Callable[[], object], repeat: int = 5, min_repeat_seconds: float = 0.05,
                   number: Optional[int] = None, warm_seconds: Optional[float] = None,
                   calls: Optional[Callable[[int], object]] = None) -> list[float]:
    """Seconds per call of ``fn`` in each of ``repeat`` repeats of ``number`` calls, in order.

    One warm-up call runs first, unless the caller has just made one and gives its time as
    ``warm_seconds``. Without ``number``, enough calls to last ``min_repeat_seconds`` by the
    warm-up's time, so that short calls are not lost in the clock's noise; a repeat that still
    falls short makes the following ones longer (as TVM's time_evaluator does). ``calls(n)``,
    when given, makes ``n`` calls of ``fn`` without Python between them (a kernel's machine
    code loop: ``codegen.repeat``).
    """
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    if warm_seconds is None:
        started = time.perf_counter()
        fn()
        warm_seconds = time.perf_counter() - started
    adapt = number is None
    if adapt:
        number = _calls_to_fill(min_repeat_seconds, warm_seconds, 1)
    per_call = []
    for _ in range(repeat):
        started = time.perf_counter()
        made = number
        if calls is not None and adapt:
            made = _calls_in_parts(calls, number, started, 4 * min_repeat_seconds)
        elif calls is not None:
            calls(number)
        else:
            for _ in range(number):
                fn()
        elapsed = time.perf_counter() - started
        per_call.append(elapsed / made)
        if adapt and elapsed < min_repeat_seconds:
            number = _calls_to_fill(min_repeat_seconds, elapsed / made, number)
    return per_call


def _calls_in_parts(calls: Callable[[int], object], number: int, started: float, limit: float) -> int:
    """``number`` calls made by ``calls`` in eight parts, stopping after a part once ``limit``
    seconds have passed since ``started``; how many were made. The count came from the time
    of a few calls: a kernel whose later calls wait (its threads on a loaded core) would
    otherwise run a count meant for microseconds at milliseconds each."""
    made, part = 0, max(1, number // 8)
    while made < number:
        step = min(part, number - made)
        calls(step)
        made += step
        if time.perf_counter() - started > limit:
            break
    return made


def _calls_to_fill(seconds: float, per_call: float, at_least: int) -> int:
    """How many calls of ``per_call`` seconds last ``seconds`` (never fewer than ``at_least``,
    at most 2**30)."""
    estimate = math.ceil(seconds / per_call) if per_call > 0 else 1 << 30
    return min(max(estimate, at_least), 1 << 30)


def median(values: Sequence[float]) -> float:
    """The middle value (the upper one of an even count)."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def median_seconds(fn: Callable[[], object], repeat: int = 5, min_repeat_seconds: float = 0.05,
                   number: Optional[int] = None) -> float:
    """Median seconds per call of ``fn`` over the repeats of ``repeat_seconds``."""
    return median(repeat_seconds(fn, repeat, min_repeat_seconds, number))


def paired_times(fn_a: Callable[[], object], fn_b: Callable[[], object], rounds: int = 7,
                 repeat: int = 3, min_repeat_seconds: float = 0.05,
                 settle_seconds: float = 0.0) -> tuple[float, float, float]:
    """Time two functions in alternation, ``rounds`` times each: (median seconds of a, median
    seconds of b, median of the per-round ratios b / a).

    On a shared machine the load changes from second to second; timing the two sides of a
    comparison close together and taking the median ratio keeps a burst of load from
    deciding it. ``settle_seconds`` of sleep before each side let the thread pool of the other
    side stop spinning: OpenBLAS's threads keep both cores busy for tens of milliseconds after
    numpy returns, and a libgomp kernel timed then waits a scheduler time slice per parallel
    loop. The side timed first alternates from round to round (a, b, then b, a): a drift of
    the machine's speed within rounds (the memory bandwidth of a shared host moves from second
    to second) then favours neither side.
    """
    times_a, times_b, ratios = [], [], []
    for round_ in range(rounds):
        timed = {}
        for side, fn in ((0, fn_a), (1, fn_b)) if round_ % 2 == 0 else ((1, fn_b), (0, fn_a)):
            time.sleep(settle_seconds)
            timed[side] = median_seconds(fn, repeat, min_repeat_seconds)
        ta, tb = timed[0], timed[1]
        times_a.append(ta)
        times_b.append(tb)
        ratios.append(tb / ta)
    return median(times_a), median(times_b), median(ratios)


# (unit, seconds in one unit), largest first: a time is printed in the largest unit of which
# it is at least a tenth, so that a kernel of a few microseconds does not print as "0.000 ms".
_UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))


def format_seconds(seconds: float) -> str:
    """A time for people, with three decimals in s, ms, us or ns: ``1.377 ms``, ``0.150 ms``,
    ``2.104 us``. Plain ASCII ("us", not the micro sign), for any terminal."""
    unit, scale = next(((u, s) for u, s in _UNITS if seconds >= 0.1 * s), _UNITS[-1])
    return f"{seconds / scale:.3f} {unit}"


def format_gflops(flops: float, seconds: float) -> str:
    """``flops`` done in ``seconds`` as GFLOP/s with at least three significant digits
    (``206.4``, ``11.0``, ``2.00``, ``0.00412``), so that a tiny kernel's speed is not printed
    as 0.0."""
    rate = flops / seconds / 1e9
    return f"{rate:.1f} GFLOP/s" if rate >= 10 else f"{rate:#.3g} GFLOP/s"
