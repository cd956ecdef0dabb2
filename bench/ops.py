"""The operator suite (``bench/ops/``): 26 layers of real networks, each tuned with 64 trials by
us and by TVM MetaSchedule, then timed in turns in this process against each other and PyTorch.

    /tmp/tvm/bin/python bench/ops.py [--workloads a,b] [--trials 64] [--work DIR] [--rounds 5]

Run it with the Python of ``tvm_peer.py``'s venv (it sees this environment's packages): that
process holds our kernels, TVM's and PyTorch's at once. With a Python that has no TVM, the TVM
column is left out. Per workload, in ``--work`` (default: a fresh temporary folder; give one to
keep what was tuned, and a second run re-times it without tuning again):

1. ours: ``metasched.tune`` with ``--trials`` trials into its own database (no warm start from
   other workloads, as TVM starts from nothing), the tuning wall from ``TuneResult``;
2. TVM's: ``tvm_peer.tune`` (``tune_tir``, 64 trials a round, its default search), its best
   kernel exported as a shared library;
3. all three checked against the reference, then timed in ``--rounds`` rounds, the order of the
   sides turning each round: ours and TVM's in machine code loops (``Kernel.timings``,
   TVM's ``time_evaluator``), PyTorch as its users call it (``ops_torch.torch_op``), each side
   the median of 3 repeats of at least 50 ms, after 0.1 s of sleep (a side's OpenMP threads
   spin for a while after it returns). A ratio is the median over rounds of the other side's
   time over ours: above 1, we are faster.

Printed: the table, the geometric means, the large matmuls' share of this machine's fp32 peak
(``peak.py``) and the tuning walls. Goals (issue 56): every workload at least TVM-64's speed,
the geometric mean at least 1.25x TVM-64 and 1.0x PyTorch, softmax and layer norm at least
PyTorch's, the large matmuls at 70% of the peak, a tuning wall at most half of TVM's.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import environment  # noqa: E402
from ops_torch import layer_inputs, load, suite, torch_op  # noqa: E402
from peak import fma_peak  # noqa: E402

import metasched  # noqa: E402
from metasched import assert_outputs_close, tune  # noqa: E402
from metasched.arrays import aligned_empty  # noqa: E402
from metasched.timing import format_seconds, median, repeat_seconds  # noqa: E402

try:
    import tvm_peer
except ImportError:  # not the venv's Python
    tvm_peer = None

LARGE_MATMULS = ("bert_ffn_b128", "bert_output_b128")
SETTLE_SECONDS = 0.1


def tune_ours(wl, trials: int, folder: Path) -> float:
    """Tune ``wl`` into ``folder/<name>.db`` unless it holds ``trials`` trials; the tuning wall
    (that of the run that tuned it)."""
    db, note = folder / f"{wl.name}.db", folder / f"{wl.name}.json"
    if note.exists() and json.loads(note.read_text())["trials"] >= trials:
        return json.loads(note.read_text())["wall"]
    result = tune(wl, trials=trials, database=db, warm_start=False)
    note.write_text(json.dumps({"trials": trials, "wall": result.wall_seconds}) + "\n")
    return result.wall_seconds


def tune_tvm(wl, trials: int, folder: Path) -> tuple[str, float]:
    """TVM's best of ``wl`` exported into ``folder/<name>/`` unless it is there: (its path,
    the tuning wall)."""
    work = folder / wl.name
    library = work / f"{wl.name}.so"
    if library.exists() and json.loads(library.with_suffix(".json").read_text())["trials"] >= trials:
        return str(library), json.loads(library.with_suffix(".json").read_text())["wall"]
    return tvm_peer.tune(wl, trials, work)


def sides(wl, db: Path, tvm_library) -> dict:
    """``label -> fn()`` running each side once on the same inputs, each checked first."""
    inputs = layer_inputs(wl)
    expected = wl.reference(*inputs)
    kernel = metasched.build(wl, database=str(db))
    assert_outputs_close(wl, kernel(*inputs, poison=True), expected)
    outputs = [aligned_empty(b.shape, b.dtype) for b in kernel.func.outputs]
    found = {"ours": (kernel, inputs + outputs)}
    if tvm_library is not None:
        peer = tvm_peer.load(tvm_library)
        assert_outputs_close(wl, peer(*inputs), expected)
        found["TVM"] = (peer, peer.arguments(*inputs))
    op = torch_op(wl)
    if op is not None:
        got = op(*inputs)
        got = got if isinstance(got, (tuple, list)) else [got]
        assert_outputs_close(wl, [np.asarray(g) for g in got], expected)
        found["PyTorch"] = (op, inputs)
    return found


def seconds_of(label: str, side: tuple) -> float:
    """One timing of a side: the median of 3 repeats of at least 50 ms."""
    fn, args = side
    if label == "ours":
        return median(fn.timings(*args, repeat=3, min_repeat_seconds=0.05))
    if label == "TVM":
        evaluator = fn.module.time_evaluator("main", tvm_peer.tvm.cpu(), number=1, repeat=3, min_repeat_ms=50)
        return median(list(evaluator(*args).results))
    return median(repeat_seconds(lambda: fn(*args), repeat=3, min_repeat_seconds=0.05))


def in_turns(found: dict, rounds: int) -> dict:
    """Each side's median seconds and each other side's median ratio (its time / ours)."""
    labels = list(found)
    times = {label: [] for label in labels}
    for r in range(rounds):
        order = labels[r % len(labels):] + labels[:r % len(labels)]
        for label in order:
            time.sleep(SETTLE_SECONDS)
            times[label].append(seconds_of(label, found[label]))
    out = {label: statistics.median(t) for label, t in times.items()}
    for label in labels[1:]:
        out[f"{label} ratio"] = statistics.median(t / o for t, o in zip(times[label], times["ours"]))
    return out


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(suite()))
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="ops-"))
    (work / "ours").mkdir(parents=True, exist_ok=True)
    names = args.workloads.split(",")
    tvm_note = f"TVM {tvm_peer.tvm.__version__}" if tvm_peer else "no TVM in this Python: its column is left out"
    print(f"# bench/ops.py: {len(names)} workloads, {args.trials} trials, work {work}; {environment()}; {tvm_note}",
          flush=True)
    suite_ = {name: load(name) for name in names}
    walls, libraries = {}, {}
    for name, wl in suite_.items():  # all tuning first, so that the timings run back to back
        walls[name] = tune_ours(wl, args.trials, work / "ours")
        libraries[name] = tune_tvm(wl, args.trials, work / "tvm") if tvm_peer else (None, None)
        tvm_wall = f", TVM {libraries[name][1]:.0f} s" if tvm_peer else ""
        print(f"  tuned {name}: ours {walls[name]:.0f} s{tvm_wall}", flush=True)
    peak_before = fma_peak()
    rows = []
    for name, wl in suite_.items():
        (tvm_library, tvm_wall) = libraries[name]
        timed = in_turns(sides(wl, work / "ours" / f"{name}.db", tvm_library), args.rounds)
        rows.append({"name": name, "flops": wl.flops, "ours wall": walls[name], "TVM wall": tvm_wall, **timed})
        print(f"  timed {name}: ours {format_seconds(timed['ours'])}" +
              "".join(f", {k} {v:.2f}" for k, v in timed.items() if k.endswith("ratio")), flush=True)
    peak = statistics.fmean([peak_before, fma_peak()])
    (work / "rows.json").write_text(json.dumps(rows, indent=1) + "\n")

    def ratio(row, label):
        return f"{row[label + ' ratio']:.2f}" if label + " ratio" in row else "-"

    print("\n| workload | GFLOP | ours | GFLOP/s | TVM-64 | ours / TVM | PyTorch | ours / PyTorch "
          "| tuning wall: ours | TVM |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        tvm_time = format_seconds(row["TVM"]) if "TVM" in row else "-"
        torch_time = format_seconds(row["PyTorch"]) if "PyTorch" in row else "-"
        tvm_wall = f"{row['TVM wall']:.0f} s" if row["TVM wall"] is not None else "-"
        print(f"| {row['name']} | {row['flops'] / 1e9:.3f} | {format_seconds(row['ours'])} "
              f"| {row['flops'] / row['ours'] / 1e9:.1f} | {tvm_time} | {ratio(row, 'TVM')} | {torch_time} "
              f"| {ratio(row, 'PyTorch')} | {row['ours wall']:.0f} s | {tvm_wall} |")
    for label in ("TVM", "PyTorch"):
        values = [row[f"{label} ratio"] for row in rows if f"{label} ratio" in row]
        if values:
            below = [row["name"] for row in rows if row.get(f"{label} ratio", 1.0) < 1.0]
            print(f"\nours / {label}, geometric mean over {len(values)}: {geomean(values):.2f}x; "
                  f"slower than {label} on {len(below)}: {', '.join(below) or 'none'}")
    walls = [(row["ours wall"], row["TVM wall"]) for row in rows if row["TVM wall"]]
    if walls:
        print(f"tuning wall, ours / TVM's: geometric mean {geomean([o / t for o, t in walls]):.2f}, "
              f"worst {max(o / t for o, t in walls):.2f}")
    for row in rows:
        if row["name"] in LARGE_MATMULS:
            print(f"{row['name']}: {row['flops'] / row['ours'] / 1e9:.0f} GFLOP/s, "
                  f"{row['flops'] / row['ours'] / 1e9 / peak:.0%} of the fp32 peak ({peak:.0f} GFLOP/s)")
    print(f"\nratio: the other side's time / ours (above 1: we are faster). metasched {metasched.__version__}")


if __name__ == "__main__":
    main()
