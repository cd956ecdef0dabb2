"""Schedule primitives benchmark: hand-written Ansor-style schedules against numpy (and PyTorch
when it is installed), and the cost of replaying a trace, measured in one run.

    python bench/schedules.py

Every ratio compares two timings taken in alternation in this run (the median of the
per-round ratios), so that the load of a shared machine affects both sides alike.

(a) matmul 1024: tiles in a local write cache, copied out after each tile, each panel of B
    packed first (cache_write, reverse_compute_at, cache_read, compute_at, unroll, vectorize,
    parallel), against numpy's ``A @ B``
(b) matmul_relu 512 with the ReLU folded into the tiles' copy-out, against
    ``np.maximum(A @ B, 0)``
(c) reduce_cols 4096x4096 two ways against ``X.sum(axis=0)``: streaming rows (the reduction
    loop outside a vectorized column loop, parallel over column blocks) and rfactor
(d) conv2d_bias_relu against PyTorch's ``relu(conv2d(x, w, bias, padding=1))`` (skipped
    without PyTorch) and against numpy's im2col + matmul
(e) replaying a 30-instruction sampled matmul_relu trace (median), the evolutionary search's
    inner loop
"""
from __future__ import annotations

import sys

import numpy as np

from common import HEADER, build_checked, environment, row
from metasched import Schedule, handwritten, replay, workloads
from metasched.timing import median_seconds, paired_times
from metasched.workloads.baselines import numpy_baseline

try:  # PyTorch is a yardstick, never a dependency
    import torch
except ImportError:
    torch = None


def main() -> int:
    lines = list(HEADER)

    mm = workloads.get("matmul", M=1024, N=1024, K=1024)
    kernel, (a, b), (c,) = build_checked(handwritten.cached_matmul(mm))
    t_ours, t_np, ratio = paired_times(lambda: kernel.run(a, b, c), lambda: a @ b)
    lines.append(row("(a) matmul 1024, local cache: GFLOP/s vs numpy A @ B", f"{mm.flops / t_ours / 1e9:.1f} GFLOP/s",
                     f"{mm.flops / t_np / 1e9:.1f} GFLOP/s", ratio, ">= 0.6", ratio >= 0.6))

    mr = workloads.get("matmul_relu", M=512, N=512, K=512)
    kernel, (a, b), (d,) = build_checked(handwritten.cached_matmul(mr, epilogue="D"))
    t_ours, t_np, ratio = paired_times(lambda: kernel.run(a, b, d), lambda: np.maximum(a @ b, 0))
    lines.append(row("(b) matmul_relu 512, ReLU in the tiles: vs np.maximum(A @ B, 0)",
                     f"{mr.flops / t_ours / 1e9:.1f} GFLOP/s", f"{mr.flops / t_np / 1e9:.1f} GFLOP/s",
                     ratio, ">= 0.75", ratio >= 0.75))

    rc = workloads.get("reduce_cols", M=4096, N=4096)
    for label, make in (("streaming rows", handwritten.streamed_column_sum),
                        ("rfactor", handwritten.rfactor_column_sum)):
        kernel, (x,), (s,) = build_checked(make(rc))
        t_ours, t_np, ratio = paired_times(lambda: kernel.run(x, s), lambda: x.sum(axis=0))
        lines.append(row(f"(c) reduce_cols 4096, {label}: vs X.sum(axis=0)",
                         f"{t_ours * 1e3:.2f} ms ({x.nbytes / t_ours / 1e9:.1f} GB/s)",
                         f"{t_np * 1e3:.2f} ms ({x.nbytes / t_np / 1e9:.1f} GB/s)", ratio, "> 1", ratio > 1))

    conv = workloads.get("conv2d_bias_relu")
    kernel, (x, w, bias), (z,) = build_checked(handwritten.tiled_conv2d(conv))
    gflops = conv.flops / 1e9
    if torch is not None:
        tx, tw, tb = (torch.from_numpy(v) for v in (x, w, bias))
        pad = conv.params["PAD"]
        with torch.no_grad():
            t_ours, t_torch, ratio = paired_times(
                lambda: kernel.run(x, w, bias, z),
                lambda: torch.relu(torch.nn.functional.conv2d(tx, tw, tb, padding=pad)))
        lines.append(row(f"(d) conv2d_bias_relu vs PyTorch {torch.__version__}", f"{gflops / t_ours:.1f} GFLOP/s",
                         f"{gflops / t_torch:.1f} GFLOP/s", ratio, "(report)", True))
    else:
        lines.append("| (d) conv2d_bias_relu vs PyTorch | - | not installed | - | (report) | - |")
    baseline = numpy_baseline(conv)
    t_ours, t_np, ratio = paired_times(lambda: kernel.run(x, w, bias, z), lambda: baseline(x, w, bias))
    lines.append(row("(d) conv2d_bias_relu vs numpy im2col + matmul", f"{gflops / t_ours:.1f} GFLOP/s",
                     f"{gflops / t_np:.1f} GFLOP/s", ratio, "(report)", True))

    trace = handwritten.sampled_matmul(mr, seed=1, epilogue="D").trace
    t_replay = median_seconds(lambda: replay(mr, trace), repeat=9)
    lines.append(row(f"(e) replay a {len(trace.insts)}-instruction matmul_relu trace", f"{t_replay * 1e6:.0f} us",
                     "1000 us", t_replay / 1e-3, "<= 1 ms", t_replay <= 1e-3))

    print("\n".join(lines))
    print("\nratio: (a)-(d) baseline time / ours (above 1: we are faster), (e) replay time / 1 ms. "
          f"{environment()}" + (f", torch {torch.__version__} ({torch.get_num_threads()} threads)" if torch else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
