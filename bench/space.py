"""Search-space benchmark: how fast the default space samples valid programs, and how good a
random search of it is before any cost model, every figure measured in this run.

    python bench/space.py [--samples 64]

(a) valid samples per second from ``cpu_default()`` for matmul_relu 512 and conv2d_bias_relu
    (sample = replay a design space with fresh decisions + postprocessors), and the share that
    the postprocessors reject
(b) the best of N random valid samples (default 64, each built, checked against the reference
    and timed) for matmul_relu 512, conv2d_bias_relu, softmax 1024 and reduce_cols 4096, against
    numpy (PyTorch too for the convolution and softmax when it is installed) and against the
    hand-written schedule where there is one. Each ratio is the median of per-round ratios of
    the two kernels timed in alternation (baseline time / ours: above 1, we are faster).

Goals (issue 7): (a) matmul_relu >= 300 valid samples/s; (b) reduce_cols faster than numpy,
matmul_relu at least as fast as numpy.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from common import environment, torch, torch_baseline
from metasched import ScheduleError, assert_outputs_close, build, handwritten, workloads
from metasched.arrays import aligned_empty
from metasched.codegen import host_vector_bits
from metasched.space import cpu_default
from metasched.timing import median_seconds, paired_times
from metasched.workloads.baselines import numpy_baseline

CASES = [("matmul_relu", dict(M=512, N=512, K=512)), ("conv2d_bias_relu", {}),
         ("softmax", dict(M=1024, N=1024)), ("reduce_cols", dict(M=4096, N=4096))]


def sampling_rate(space, wl, seconds: float = 3.0) -> tuple[float, float, dict[str, int]]:
    """(valid samples per second, share rejected, rejections by reason) over ``seconds``."""
    rng = np.random.default_rng(0)
    space.sample(wl, rng)  # the design spaces are made once per workload: not part of the rate
    valid = rejected = 0
    reasons: dict[str, int] = {}
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        try:
            space.sample(wl, rng)
            valid += 1
        except ScheduleError as err:
            rejected += 1
            key = str(err).split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
    elapsed = time.perf_counter() - started
    return valid / elapsed, rejected / max(1, valid + rejected), reasons


def best_of(space, wl, samples: int):
    """Build, check and time ``samples`` random valid programs; the best kernel and counts."""
    rng = np.random.default_rng(1)
    inputs = wl.random_inputs(seed=0)
    want = wl.reference(*inputs)
    outputs = [aligned_empty(t.shape, t.dtype) for t in wl.outputs]
    best = None
    rejected = wrong = 0
    compile_seconds = []
    while samples > 0:
        try:
            sch = space.sample(wl, rng)
        except ScheduleError:
            rejected += 1
            continue
        samples -= 1
        kernel = build(sch)
        compile_seconds.append(kernel.compile_seconds)
        try:
            assert_outputs_close(wl, kernel(*inputs), want)
        except AssertionError:
            wrong += 1  # the worst bug there is: reported loudly below
            continue
        seconds = median_seconds(lambda: kernel.run(*inputs, *outputs), repeat=3, min_repeat_seconds=0.02)
        if best is None or seconds < best[0]:
            best = (seconds, kernel, sch)
    return best, rejected, wrong, compile_seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64)
    args = parser.parse_args()
    space = cpu_default()
    print(f"{environment()}" + (f", torch {torch.__version__}" if torch else ", PyTorch not installed"))

    print("\n(a) sampling from cpu_default()\n| workload | valid samples/s | rejected | by | goal |\n|---|---|---|---|---|")
    for name, params in CASES[:2]:
        wl = workloads.get(name, **params)
        rate, share, reasons = sampling_rate(space, wl)
        goal = ">= 300/s" if name == "matmul_relu" else "(report)"
        met = "" if name != "matmul_relu" else (" yes" if rate >= 300 else " NO")
        print(f"| {name} | {rate:.0f} | {share:.1%} | {reasons or '-'} | {goal}{met} |")

    print(f"\n(b) best of {args.samples} random samples (ratio = baseline time / ours)")
    print("| workload | best | vs numpy | vs PyTorch | vs hand-written | rejected | wrong | compile median | goal |")
    print("|---|---|---|---|---|---|---|---|---|")
    failures = 0
    for name, params in CASES:
        wl = workloads.get(name, **params)
        best, rejected, wrong, compile_seconds = best_of(space, wl, args.samples)
        failures += wrong
        seconds, kernel, sch = best
        inputs = wl.random_inputs(seed=0)
        outputs = [aligned_empty(t.shape, t.dtype) for t in wl.outputs]
        ours = lambda: kernel.run(*inputs, *outputs)  # noqa: E731
        ratios = []
        for baseline in (numpy_baseline(wl), torch_baseline(wl)):
            if baseline is None:
                ratios.append(None)
                continue
            ratios.append(paired_times(ours, lambda: baseline(*inputs))[2])
        hand = handwritten.for_workload(wl, host_vector_bits())
        if hand is not None:
            hand_kernel = build(hand)
            ratios.append(paired_times(ours, lambda: hand_kernel.run(*inputs, *outputs))[2])
        else:
            ratios.append(None)
        goal = {"reduce_cols": ("> 1 vs numpy", ratios[0] > 1), "matmul_relu": (">= 1 vs numpy", ratios[0] >= 1)}
        text, met = goal.get(name, ("(report)", None))
        shown = ["-" if r is None else f"{r:.2f}" for r in ratios]
        print(f"| {name} | {seconds * 1e3:.3f} ms ({wl.flops / seconds / 1e9:.1f} GFLOP/s) | {shown[0]} | {shown[1]} "
              f"| {shown[2]} | {rejected} | {wrong} | {np.median(compile_seconds) * 1e3:.0f} ms | {text}"
              f"{'' if met is None else ' yes' if met else ' NO'} |")
    if failures:
        print(f"\n{failures} sampled programs computed a WRONG result: a bug to fix before anything else")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
