"""What the benchmarks share: build-and-check, the table, and the baselines' environment."""
from __future__ import annotations

import numpy as np

import metasched
from metasched.arrays import aligned_empty
from metasched.errors import ScheduleError
from metasched.timing import paired_times
from metasched.tune import host_target

try:  # PyTorch is a yardstick, never a dependency
    import torch
except ImportError:
    torch = None

compile_times: list[float] = []


def replayed_records(wl, path: str):
    """``(schedule, record)`` for each record of ``wl`` measured on this host in the database
    at ``path``, oldest first, its trace replayed; records whose trace no longer replays are
    left out."""
    with metasched.Database(path) as db:
        records = db.records(wl, host_target())
    for record in records:
        try:
            yield metasched.replay(wl, record.trace), record
        except ScheduleError:
            continue


def build_checked(sch_or_wl):
    """Compile, record the compile time, check the outputs against the reference (the timed
    kernel, and a twin built with ``poison`` so that a read of unwritten memory cannot pass by
    luck); the kernel, the inputs it was checked on, and output arrays to run into."""
    kernel = metasched.build(sch_or_wl)
    compile_times.append(kernel.compile_seconds)
    wl = sch_or_wl if isinstance(sch_or_wl, metasched.Workload) else sch_or_wl.workload
    inputs = wl.random_inputs(seed=0)
    want = wl.reference(*inputs)
    metasched.assert_outputs_close(wl, kernel(*inputs), want)
    poisoned = metasched.build(sch_or_wl, metasched.CodegenOptions(poison=True))
    metasched.assert_outputs_close(wl, poisoned(*inputs), want)
    outputs = [aligned_empty(t.shape, t.dtype) for t in wl.outputs]
    return kernel, inputs, outputs


def row(case: str, ours: str, theirs: str, ratio: float, goal: str, met: bool) -> str:
    return f"| {case} | {ours} | {theirs} | {ratio:.2f} | {goal} | {'yes' if met else 'NO'} |"


HEADER = ["| case | metasched | baseline | ratio | goal | met |", "|---|---|---|---|---|---|"]


def report(lines: list[str], legend: str) -> None:
    """Print a benchmark's table, then what its ratios mean and the machine it ran on."""
    print("\n".join(lines))
    print(f"\nratio: {legend}. {environment()}")


def environment() -> str:
    return f"numpy {np.__version__}, {metasched.codegen.host_description()}"


def torch_baseline(wl):
    """PyTorch's version of a workload where it has one worth comparing with, else None."""
    if torch is None:
        return None
    if wl.name == "softmax":
        return lambda x: torch.softmax(torch.from_numpy(x), dim=1)
    if wl.name == "conv2d_bias_relu":
        pad = wl.params["PAD"]
        return lambda x, w, b: torch.relu(torch.nn.functional.conv2d(
            torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), padding=pad))
    if wl.name == "depthwise_conv2d":
        pad, channels = wl.params["PAD"], wl.params["C"]
        return lambda x, w: torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w).unsqueeze(1),
                                                       padding=pad, groups=channels)
    if wl.name == "batch_matmul":
        return lambda a, b: torch.bmm(torch.from_numpy(a), torch.from_numpy(b))
    return None


def against_baselines(ours, inputs, baselines: dict) -> dict:
    """``ours()`` timed in turns with each baseline (``label -> fn(*inputs)`` or None, skipped):
    ``{"seconds": our median time over the pairings, label: its time / ours, ...}``. How
    ``tune.py`` times a tuned kernel, and ``tvm_peer.py`` the peer's."""
    ratios, seconds = {}, []
    for label, baseline in baselines.items():
        if baseline is not None:
            mine, _, ratio = paired_times(ours, lambda: baseline(*inputs), rounds=5, repeat=3,
                                          min_repeat_seconds=0.05, settle_seconds=0.1)
            ratios[label] = ratio
            seconds.append(mine)
    return {"seconds": float(np.median(seconds)), **ratios}
