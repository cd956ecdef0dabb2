"""Loop primitives benchmark: hand-written schedules against numpy, measured in one run.

    python bench/loops.py            # the full table (about a minute)
    python bench/loops.py --quick    # smaller sizes, for a smoke test

Every ratio compares two timings taken in alternation in this run, on this machine (the median
of the per-round ratios): absolute times on a shared 2-core machine move from run to run,
ratios much less.

(a) a tiled matmul (split, reorder, unroll, vectorize, parallel) against numpy's ``A @ B``
(b) the same schedule without ``parallel``: the parallel speedup
(c) transpose_add tiled, against numpy's ``A + B.T``
(d) the median llvmlite compile time of every kernel built here
(e) every built-in workload unscheduled, against the numpy reference evaluator
"""
from __future__ import annotations

import argparse
import statistics
import sys

from common import HEADER, build_checked, compile_times, report, row
from metasched import handwritten, workloads
from metasched.timing import paired_times

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = parser.parse_args()
    n = 256 if args.quick else 1024
    side = 512 if args.quick else 2048

    lines = list(HEADER)

    mm = workloads.get("matmul", M=n, N=n, K=n)
    kernel, (a, b), (c,) = build_checked(handwritten.tiled_matmul(mm))
    t_par, t_np, ratio = paired_times(lambda: kernel.run(a, b, c), lambda: a @ b)
    lines.append(row(f"(a) matmul {n}: GFLOP/s vs numpy A @ B", f"{mm.flops / t_par / 1e9:.1f} GFLOP/s",
                     f"{mm.flops / t_np / 1e9:.1f} GFLOP/s", ratio, ">= 0.35", ratio >= 0.35))

    serial, _, _ = build_checked(handwritten.tiled_matmul(mm, parallel=False))
    t_par, t_ser, speedup = paired_times(lambda: kernel.run(a, b, c), lambda: serial.run(a, b, c))
    lines.append(row(f"(b) matmul {n}: parallel speedup", f"{t_par * 1e3:.2f} ms parallel",
                     f"{t_ser * 1e3:.2f} ms serial", speedup, ">= 1.7", speedup >= 1.7))

    ta = workloads.get("transpose_add", M=side, N=side)
    kernel, (x, y), (out,) = build_checked(handwritten.tiled_transpose(ta))
    t_np, t_ours, ratio = paired_times(lambda: x + y.T, lambda: kernel.run(x, y, out))
    lines.append(row(f"(c) transpose_add {side}: time vs numpy A + B.T", f"{t_ours * 1e3:.2f} ms",
                     f"{t_np * 1e3:.2f} ms", ratio, "<= 1.5", ratio <= 1.5))

    unscheduled = []
    for name in workloads.names():
        wl = workloads.get(name)
        if args.quick:
            wl = workloads.get(name, **{k: max(1, v // 4) if k not in ("R", "S", "PAD") else v
                                         for k, v in wl.params.items()})
        kernel, inputs, outputs = build_checked(wl)
        t_kernel, t_ref, _ = paired_times(lambda: kernel.run(*inputs, *outputs),
                                          lambda: wl.reference(*inputs), rounds=1)
        unscheduled.append((name, t_kernel, t_ref))

    median_compile = statistics.median(compile_times)
    lines.append(row(f"(d) llvmlite compile, median of {len(compile_times)} kernels",
                     f"{median_compile * 1e3:.0f} ms", "150 ms", median_compile / 0.150, "<= 150 ms",
                     median_compile <= 0.150))
    for name, t_kernel, t_ref in unscheduled:
        lines.append(row(f"(e) {name} unscheduled vs reference", f"{t_kernel * 1e3:.2f} ms",
                         f"{t_ref * 1e3:.2f} ms", t_ref / t_kernel, "(report)", True))
    report(lines, "(a) numpy time / ours, (b) serial / parallel, (c) ours / numpy, "
                  "(d) compile time / goal, (e) reference time / unscheduled kernel time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
