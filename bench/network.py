"""Whole networks: each model's tasks tuned by the gradient scheduler, then its executable timed
in turns against onnxruntime in this process.

    python bench/network.py [--models resnet50,bert_layer,mlp] [--trials-per-task 64] [--work DIR] [--rounds 5]

Models (``metasched.graph.examples``): the onnx package's light ResNet-50 with random weights,
a BERT-base encoder layer (hidden 768, 12 heads, FFN 3072, sequence 128) and an MLP
784-1024-1024-10 at batch 64. Per model, in ``--work`` (default: a fresh temporary folder;
give one to keep what was tuned, and a second run times it without tuning again):

1. ``tune_network`` with ``--trials-per-task`` times the number of tasks as the budget and
   ``--trials-per-task`` as each task's cap, into ``<model>.db``; the tuning wall;
2. ``compile_network`` from that database, checked against onnxruntime;
3. timed in ``--rounds`` rounds, the order turning each round: ours (``Network.__call__``,
   numpy in and out) and onnxruntime (CPU provider, 2 threads, sequential execution), each
   the median of 3 repeats of at least 0.2 s after 0.1 s of sleep. The ratio is the median
   over rounds of onnxruntime's time over ours (above 1: we are faster);
4. the executable's own cost: its latency minus the sum over its calls of each kernel's time
   alone (``Kernel.timings`` on the network's own buffers), as a share of the latency;
5. memory: the bytes of our intermediates against what onnxruntime's session adds to this
   process's resident memory when it is created and first run.

Goals (issue 57): faster than onnxruntime on all three, the ResNet-50 tuning wall under 15
minutes, the executable's own cost under 2% of its latency, our intermediates at most what
onnxruntime adds. PyTorch eager is not timed yet: it would need each model written for it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import environment  # noqa: E402

from metasched.graph import examples, import_onnx, plan  # noqa: E402
from metasched.network import compile_network, tune_network  # noqa: E402
from metasched.timing import format_seconds, median, repeat_seconds  # noqa: E402

MODELS = {
    "resnet50": lambda: examples.light_model("resnet50"),
    "bert_layer": lambda: examples.bert_layer(),
    "mlp": lambda: examples.mlp(),
}
SETTLE_SECONDS = 0.1


def resident_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def onnxruntime_session(model):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def tuned(name: str, model, trials_per_task: int, work: Path) -> tuple[Path, int, float]:
    """(the database, the number of tasks, the tuning wall), tuning unless ``work`` holds it."""
    db, note = work / f"{name}.db", work / f"{name}.json"
    tasks = len(plan(import_onnx(model)).tasks)
    if note.exists() and json.loads(note.read_text())["trials_per_task"] >= trials_per_task:
        return db, tasks, json.loads(note.read_text())["wall"]
    result = tune_network(model, trials=trials_per_task * tasks, trials_per_task=trials_per_task, database=db,
                          warm_start=False)
    note.write_text(json.dumps({"trials_per_task": trials_per_task, "wall": result.wall_seconds}) + "\n")
    return db, tasks, result.wall_seconds


def own_cost(network, feeds: dict, latency: float) -> float:
    """The latency minus the sum of each call's kernel timed alone (``Network.profile``), as a
    share of the latency."""
    return (latency - sum(network.profile(feeds))) / latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--trials-per-task", type=int, default=64)
    parser.add_argument("--work", default=None)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="metasched-network-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"# bench/network.py: {args.models}, {args.trials_per_task} trials per task, work {work}; {environment()}")
    rows = []
    for name in args.models.split(","):
        model = MODELS[name]()
        db, tasks, wall = tuned(name, model, args.trials_per_task, work)
        print(f"  tuned {name}: {tasks} tasks in {wall:.0f} s", flush=True)
        network = compile_network(model, database=db)
        rng = np.random.default_rng(0)
        feeds = {k: rng.standard_normal(v).astype(np.float32) for k, v in network.graph.inputs.items()}
        before = resident_bytes()
        session = onnxruntime_session(model)
        want = session.run(None, feeds)
        ort_bytes = resident_bytes() - before
        got = network(**feeds)
        worst = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
        sides = {"ours": lambda: network(**feeds), "onnxruntime": lambda: session.run(None, feeds)}
        times = {k: [] for k in sides}
        for r in range(args.rounds):
            for label in (list(sides) if r % 2 == 0 else list(reversed(list(sides)))):
                time.sleep(SETTLE_SECONDS)
                times[label].append(median(repeat_seconds(sides[label], repeat=3, min_repeat_seconds=0.2)))
        ours, ort_time = statistics.median(times["ours"]), statistics.median(times["onnxruntime"])
        ratio = statistics.median(o / u for o, u in zip(times["onnxruntime"], times["ours"]))
        share = own_cost(network, feeds, ours)
        tuned_tasks = sum(k.tuned for k in network.kernels)
        rows.append((name, tasks, tuned_tasks, wall, ours, ort_time, ratio, share, network.intermediate_bytes,
                     ort_bytes, worst))
        print(f"  timed {name}: ours {format_seconds(ours)}, onnxruntime ratio {ratio:.2f}", flush=True)
    print()
    print("| model | tasks (tuned) | tuning wall | ours | onnxruntime | onnxruntime / ours | own cost | "
          "intermediates: ours | onnxruntime adds | largest difference |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, tasks, tuned_tasks, wall, ours, ort_time, ratio, share, ours_bytes, ort_bytes, worst in rows:
        print(f"| {name} | {tasks} ({tuned_tasks}) | {wall:.0f} s | {format_seconds(ours)} | "
              f"{format_seconds(ort_time)} | {ratio:.2f} | {share:.1%} | {ours_bytes / 2**20:.1f} MiB | "
              f"{ort_bytes / 2**20:.1f} MiB | {worst:.2g} |")
    print("\nratio: onnxruntime's time / ours (above 1: we are faster).")


if __name__ == "__main__":
    main()
