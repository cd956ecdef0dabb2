"""What keeping a kernel's workspaces apart per call costs: three ways, measured in one run.

    python bench/threads.py            # small and large kernels (about a minute)
    python bench/threads.py --quick    # the small ones only

A ``Kernel``'s workspaces (intermediates passed to the machine code) must not be shared by two
calls that run at once; ctypes releases the GIL, so calls from two Python threads do overlap.
Each variant below changes only where a call's workspaces come from:

* ``shared``     — one set per kernel, what ``Kernel`` did before: fast and wrong under threads
* ``per-thread`` — one set per calling thread (``threading.local``): today's ``Kernel``
* ``per-call``   — a fresh set allocated by every call
* ``lock``       — one set per kernel, calls serialised by a lock

Columns: a call's time relative to ``shared`` from one thread, and from two threads calling at
once (wall time / calls); the median of per-round ratios, the variants timed in alternation in
each round. ``wrong`` counts outputs that differ from the reference when two threads call the
kernel at once (``shared`` may show some; any other non-zero count is a bug).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from common import build_checked, environment
import metasched
from metasched import handwritten, workloads
from metasched.codegen import Kernel
from metasched.timing import median_seconds


class PerThread(Kernel):
    """The shipped behaviour, unchanged."""


class Shared(Kernel):
    def _workspaces(self) -> list[np.ndarray]:
        try:
            return self._shared
        except AttributeError:
            self._shared = [np.empty(b.shape, b.dtype) for b in self.func.workspaces]
            return self._shared


class PerCall(Kernel):
    def _workspaces(self) -> list[np.ndarray]:
        return [np.empty(b.shape, b.dtype) for b in self.func.workspaces]


class Locked(Shared):
    _lock = threading.Lock()  # one kernel per class is measured at a time: one lock will do

    def run(self, *arrays: np.ndarray) -> None:
        with self._lock:
            super().run(*arrays)

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        with self._lock:
            return super().__call__(*inputs)


VARIANTS = {"shared": Shared, "per-thread": PerThread, "per-call": PerCall, "lock": Locked}


def as_variant(kernel: Kernel, cls: type) -> Kernel:
    """The same machine code behind another class (no recompilation, so every variant runs
    exactly the same instructions)."""
    variant = cls.__new__(cls)
    variant.__dict__.update(kernel.__dict__)
    variant.__dict__.pop("_per_thread", None)
    if cls is PerThread:
        variant._per_thread = threading.local()
    return variant


def in_two_threads(pool: ThreadPoolExecutor, fns, calls: int) -> None:
    """Run ``fns[k]`` ``calls`` times in thread k, both at once; returns when both are done."""
    def repeat(fn):
        for _ in range(calls):
            fn()
    for future in [pool.submit(repeat, fn) for fn in fns]:
        future.result()


def wrong_outputs(kernel: Kernel, wl, pool: ThreadPoolExecutor, calls: int) -> int:
    """Outputs that differ from the reference when two threads, each on its own inputs, call
    ``kernel`` ``calls`` times at once."""
    def check(seed: int) -> int:
        inputs = wl.random_inputs(seed=seed)
        want = wl.reference(*inputs)
        wrong = 0
        for _ in range(calls):
            try:
                metasched.assert_outputs_close(wl, kernel(*inputs), want)
            except AssertionError:
                wrong += 1
        return wrong
    return sum(pool.map(check, (1, 2)))


def measure(label: str, sch_or_wl, pool: ThreadPoolExecutor, rounds: int, check_calls: int):
    kernel, inputs, outputs = build_checked(sch_or_wl)
    wl = sch_or_wl if isinstance(sch_or_wl, metasched.Workload) else sch_or_wl.workload
    workspace_bytes = sum(np.dtype(b.dtype).itemsize * b.size for b in kernel.func.workspaces)
    assert workspace_bytes, f"{label}: no workspaces, nothing to compare"
    variants = {name: as_variant(kernel, cls) for name, cls in VARIANTS.items()}
    names = list(variants)
    # Each thread writes its own outputs: only the workspaces may be shared.
    second_outputs = [np.empty_like(o) for o in outputs]
    single = median_seconds(lambda: kernel.run(*inputs, *outputs), repeat=3, min_repeat_seconds=0.02)
    calls = max(4, int(0.03 / single))  # two threads' runs last ~30 ms per timing

    ratios_one = {name: [] for name in variants}
    ratios_two = {name: [] for name in variants}
    base_one = []
    for round_ in range(rounds):
        one, two = {}, {}
        # Each round starts with another variant, so that none is always timed first.
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            k = variants[name]
            one[name] = median_seconds(lambda: k.run(*inputs, *outputs), repeat=5,
                                       min_repeat_seconds=0.02)
            fns = (lambda: k.run(*inputs, *outputs), lambda: k.run(*inputs, *second_outputs))
            two[name] = median_seconds(lambda: in_two_threads(pool, fns, calls), repeat=3,
                                       number=1) / (2 * calls)
        base_one.append(one["shared"])
        for name in variants:
            ratios_one[name].append(one[name] / one["shared"])
            ratios_two[name].append(two[name] / two["shared"])
    wrong = {name: wrong_outputs(k, wl, pool, check_calls) for name, k in variants.items()}
    return {"label": label, "bytes": workspace_bytes, "threading": kernel.threading,
            "shared_us": statistics.median(base_one) * 1e6,
            "one": {n: statistics.median(r) for n, r in ratios_one.items()},
            "two": {n: statistics.median(r) for n, r in ratios_two.items()},
            "wrong": wrong, "checked": 2 * check_calls}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the small kernels only")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    args = parser.parse_args()

    cases = [
        ("softmax 8x64", workloads.get("softmax", M=8, N=64), 400),
        ("reduce_cols 256x64 rfactor", handwritten.rfactor_column_sum(
            workloads.get("reduce_cols", M=256, N=64)), 400),
    ]
    if not args.quick:
        cases += [
            ("softmax 1024x1024", workloads.get("softmax", M=1024, N=1024), 20),
            ("reduce_cols 4096x4096 rfactor", handwritten.rfactor_column_sum(
                workloads.get("reduce_cols", M=4096, N=4096)), 20),
        ]
    names = list(VARIANTS)
    lines = ["| case | launcher | workspaces | shared µs/call | "
             + " | ".join(f"{n} 1 thr" for n in names[1:]) + " | "
             + " | ".join(f"{n} 2 thr" for n in names[1:]) + " | wrong: "
             + " / ".join(names) + " |",
             "|---" * (5 + 2 * (len(names) - 1)) + "|"]
    with ThreadPoolExecutor(2) as pool:
        for label, sch_or_wl, check_calls in cases:
            r = measure(label, sch_or_wl, pool, args.rounds, check_calls)
            lines.append(
                f"| {r['label']} | {r['threading']} | {r['bytes'] / 1024:.1f} KiB | "
                f"{r['shared_us']:.2f} | "
                + " | ".join(f"{r['one'][n]:.2f}" for n in names[1:]) + " | "
                + " | ".join(f"{r['two'][n]:.2f}" for n in names[1:]) + " | "
                + " / ".join(str(r["wrong"][n]) for n in names) + f" of {r['checked']} |")
    print("\n".join(lines))
    print("\nratios: a variant's time per call / shared's, timed alternately in this run "
          "(median of per-round ratios); '2 thr': two threads calling one kernel at once, "
          f"wall time / calls. {environment()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
