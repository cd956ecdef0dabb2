"""What calling a compiled kernel from Python costs, against calling numpy, measured in one run.

    python bench/calls.py

A network runs many small kernels one after another, so the cost of a call counts as much as
the kernel's own time. On tiny arrays (4 floats) the machine code runs in nanoseconds and
what is timed is the call itself:

(a) ``kernel(a, b)`` (outputs allocated) against ``numpy.add(a, b)``
(b) ``kernel.run(a, b, c)`` (outputs given) against ``numpy.add(a, b, out=c)``
(c) ``kernel.run(a, b, c, poison=False)``, which takes the Python path that checks each
    argument in Python (what every call cost before the gate), against ``kernel.run``
(d) the machine code alone (``kernel.time``: its pointers called directly), against ``kernel.run``
(e) a 32 x 32 matmul unscheduled: ``kernel(a, b)`` against ``a @ b``, the case where a
    figure printed by ``metasched tune`` used to be the call path's, not the kernel's

Every ratio is the median of per-round ratios of timings taken in turns (``paired_times``).
The goal of (a) and (b) is the issue's: a call costs a few microseconds at most, about what
calling numpy does.
"""
from __future__ import annotations

import sys

import numpy as np

from common import HEADER, build_checked, report, row
from metasched import parse, workloads
from metasched.timing import paired_times

ADD = """\
workload add(N = 4) {
  input A: float32[N]
  input B: float32[N]
  output C[i] = A[i] + B[i]
}
"""

TIMING = dict(rounds=7, repeat=3, min_repeat_seconds=0.02)
GOAL_SECONDS = 3e-6  # "a few microseconds" a call


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us"


def main() -> int:
    lines = list(HEADER)
    kernel, (a, b), (c,) = build_checked(parse(ADD))

    ours, theirs, ratio = paired_times(lambda: kernel(a, b), lambda: np.add(a, b), **TIMING)
    lines.append(row("(a) kernel(a, b) vs numpy.add(a, b), 4 floats", us(ours), us(theirs), 1 / ratio,
                     f"<= {us(GOAL_SECONDS)}", ours <= GOAL_SECONDS))
    ours, theirs, ratio = paired_times(lambda: kernel.run(a, b, c), lambda: np.add(a, b, out=c), **TIMING)
    lines.append(row("(b) kernel.run(a, b, c) vs numpy.add(a, b, out=c)", us(ours), us(theirs), 1 / ratio,
                     f"<= {us(GOAL_SECONDS)}", ours <= GOAL_SECONDS))
    python_path, gate, ratio = paired_times(lambda: kernel.run(a, b, c), lambda: kernel.run(a, b, c, poison=False),
                                            **TIMING)
    python_path, gate = gate, python_path
    lines.append(row("(c) Python path vs kernel.run (the gate)", us(python_path), us(gate), ratio,
                     "(report)", True))
    alone = kernel.time(a, b, c, min_repeat_seconds=0.02)
    lines.append(row("(d) machine code alone vs kernel.run", us(alone), us(gate), gate / alone, "(report)", True))

    mm = workloads.get("matmul", M=32, N=32, K=32)
    kernel, (x, y), _ = build_checked(mm)
    ours, theirs, ratio = paired_times(lambda: kernel(x, y), lambda: x @ y, **TIMING)
    alone = kernel.time(x, y, min_repeat_seconds=0.02)
    lines.append(row(f"(e) matmul 32 unscheduled: kernel(a, b) vs a @ b (machine code alone {us(alone)})",
                     us(ours), us(theirs), ratio, "(report)", True))
    report(lines, "(a), (b) our time / numpy's (the goal: a call takes a few microseconds at most); "
                  "(c) Python path / gate; (d) kernel.run / machine code alone; (e) numpy's time / ours")
    return 0


if __name__ == "__main__":
    sys.exit(main())
