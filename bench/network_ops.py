"""Where a network loses to onnxruntime, operator by operator: our tasks' times as the network
runs them against onnxruntime's node times (its profiler), in one process.

    python bench/network_ops.py --work DIR [--model resnet50] [--rounds 3]

DIR holds ``<model>.db``, as ``bench/network.py --work DIR`` leaves it. Each round runs our
network's calls in sequence (``Network.profile(in_sequence=True)``, 10 runs) and then a fresh
onnxruntime session with profiling on (CPU provider, 2 threads, sequential; 10 runs after 3 to
warm up), and the times are the mean over rounds. A task is matched to the onnxruntime nodes
whose first two inputs have the shapes of its first two (a convolution's input and weights, a
matmul's operands); tasks of the same shapes are one row (a bottleneck's projection and its
expansion), and what matches nothing is added up as "others" on each side. That suits
convolutional networks; onnxruntime runs a transformer's MatMul and Add as a Gemm on a 2-D view
whose profiled shapes leave the weights out, so those land in "others".
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import environment  # noqa: E402
from network import MODELS, onnxruntime_session  # noqa: E402

from metasched.network import compile_network  # noqa: E402

WARM, RUNS = 3, 10


def onnxruntime_node_seconds(model, feeds: dict) -> dict[tuple, float]:
    """Seconds per run of onnxruntime's nodes, added up by (op type, shapes of the first two
    inputs)."""
    session = onnxruntime_session(model, os.path.join(tempfile.gettempdir(), "metasched-ort-profile"))
    for _ in range(WARM + RUNS):
        session.run(None, feeds)
    path = session.end_profiling()
    try:
        events = json.loads(Path(path).read_text())
    finally:
        os.remove(path)
    # Every run is profiled, the warm-up ones too: only nodes inside the last RUNS runs count.
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")[WARM:]
    if len(runs) != RUNS:
        raise SystemExit(f"onnxruntime's profile holds {len(runs) + WARM} runs, not {WARM + RUNS}")
    seconds: dict[tuple, float] = defaultdict(float)
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        if not any(start <= event["ts"] <= end for start, end in runs):
            continue
        args = event["args"]
        shapes = tuple(tuple(next(iter(d.values()))) for d in args.get("input_type_shape", [])[:2])
        seconds[(args["op_name"], shapes)] += event["dur"] / 1e6 / RUNS
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    db = Path(args.work) / f"{args.model}.db"
    if not db.exists():
        raise SystemExit(f"{db}: no such database; run bench/network.py --work {args.work} first")
    model = MODELS[args.model]()
    network = compile_network(model, database=db)
    feeds = network.random_inputs()
    onnxruntime_session(model).run(None, feeds)  # fail early if onnxruntime cannot run it
    ours, theirs = [0.0] * len(network.kernels), defaultdict(float)
    for _ in range(args.rounds):
        for k, s in enumerate(network.profile(feeds, in_sequence=True, runs=RUNS)):
            ours[k] += s / args.rounds
        for key, s in onnxruntime_node_seconds(model, feeds).items():
            theirs[key] += s / args.rounds
    by_shapes: dict[tuple, list[tuple]] = defaultdict(list)
    for key in theirs:
        by_shapes[key[1]].append(key)
    rows: dict[tuple, list] = {}  # shapes -> [task names, ours, theirs]
    other_ours = 0.0
    for k, kernel in enumerate(network.kernels):
        shapes = tuple(tuple(t.shape) for t in kernel.workload.inputs[:2])
        if shapes not in by_shapes:
            other_ours += ours[k]
            continue
        row = rows.setdefault(shapes, [[], 0.0, sum(theirs[key] for key in by_shapes[shapes])])
        row[0].append(kernel.workload.name)
        row[1] += ours[k]
    other_theirs = sum(s for key, s in theirs.items() if key[1] not in rows)
    print(f"# bench/network_ops.py: {args.model} from {db}, {args.rounds} rounds; {environment()}")
    print("| our tasks | shapes | ours | onnxruntime | onnxruntime / ours |")
    print("|---|---|---|---|---|")
    for shapes, (names, mine, others) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        text = ", ".join("x".join(map(str, s)) for s in shapes)
        print(f"| {', '.join(names)} | {text} | {mine * 1e3:.2f} ms | {others * 1e3:.2f} ms | {others / mine:.2f} |")
    print(f"| others | | {other_ours * 1e3:.2f} ms | {other_theirs * 1e3:.2f} ms | "
          f"{other_theirs / other_ours if other_ours else float('nan'):.2f} |")
    total_ours, total_theirs = sum(ours), sum(theirs.values())
    print(f"| all | | {total_ours * 1e3:.2f} ms | {total_theirs * 1e3:.2f} ms | {total_theirs / total_ours:.2f} |")


if __name__ == "__main__":
    main()
