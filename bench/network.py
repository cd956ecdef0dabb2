"""Whole networks: each model's tasks tuned by the gradient scheduler, then its executable timed
in turns against onnxruntime in this process.

    python bench/network.py [--models resnet50,bert_layer,mlp] [--trials-per-task 64] [--cap N] [--work DIR]
                            [--rounds 5]

Models (``metasched.graph.examples``): the onnx package's light ResNet-50 with random weights,
a BERT-base encoder layer (hidden 768, 12 heads, FFN 3072, sequence 128) and an MLP
784-1024-1024-10 at batch 64. Per model, in ``--work`` (default: a fresh temporary folder;
give one to keep what was tuned, and a second run times it without tuning again):

1. ``tune_network`` with ``--trials-per-task`` times the number of tasks as the budget, which
   the gradient scheduler spreads over the tasks as it sees fit (no cap per task, as
   MetaSchedule's ``tune_relay`` has none by default; ``--cap N`` sets one), into
   ``<model>.db``; the tuning wall (and the time spent waiting for builds and measuring);
2. ``compile_network`` from that database, checked against onnxruntime;
3. timed in ``--rounds`` rounds, the order turning each round: ours (``Network.__call__``,
   numpy in and out) and onnxruntime (CPU provider, 2 threads, sequential execution), each
   the median of 3 repeats of at least 0.2 s after 0.1 s of sleep. The ratio is the median
   over rounds of onnxruntime's time over ours (above 1: we are faster);
   PyTorch eager (``torch_eager.py``: the same graph's operators as ``torch.nn.functional``
   calls, 2 threads) takes its turn too when torch is installed;
4. the executable's own cost: the same network run with every kernel replaced by one that
   does nothing (same arguments, same calls), as a share of its latency; and, apart, the
   latency against the sum over its calls of each kernel timed alone (``Network.profile``,
   warm caches: what running in sequence costs, mostly weights read from memory);
5. memory: the bytes of our intermediates against what onnxruntime's session adds to a fresh
   process's resident memory when it is created and first run.

Goals (issue 57): faster than onnxruntime on all three, the ResNet-50 tuning wall under 15
minutes, the executable's own cost under 2% of its latency, our intermediates at most what
onnxruntime adds.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import environment  # noqa: E402

from torch_eager import torch_eager  # noqa: E402

from metasched.codegen import compile_func  # noqa: E402
from metasched.graph import examples, import_onnx, plan  # noqa: E402
from metasched.ir import PrimFunc, Seq  # noqa: E402
from metasched.network import Network, compile_network, tune_network  # noqa: E402
from metasched.network.network import Pack, TaskKernel  # noqa: E402
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


# Run in a fresh process: in this one, memory an earlier model's session freed is reused, and a
# later session then seems to add nothing.
_ORT_BYTES = """
import sys, numpy as np
sys.path.insert(0, sys.argv[2])
from network import onnxruntime_session, resident_bytes
import onnx
model = onnx.load(sys.argv[1])
feeds = {i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32) for i in model.graph.input
         if i.name not in {init.name for init in model.graph.initializer}}
before = resident_bytes()
onnxruntime_session(model).run(None, feeds)
print(resident_bytes() - before)
"""


def onnxruntime_bytes(model, work: Path) -> int:
    """What onnxruntime's session adds to a fresh process's resident memory when it is created
    and first run."""
    path = work / "model.onnx"
    path.write_bytes(model.SerializeToString())
    out = subprocess.run([sys.executable, "-c", _ORT_BYTES, str(path), str(Path(__file__).parent)],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def onnxruntime_session(model, profile_prefix: Optional[str] = None):
    """onnxruntime's CPU provider, 2 threads, sequential; profiling every run into a file
    beginning with ``profile_prefix`` when one is given."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3  # not a warning per unused initializer of the light models
    options.intra_op_num_threads = 2
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def tuned(name: str, model, trials_per_task: int, cap: Optional[int], work: Path) -> tuple[Path, int, dict]:
    """(the database, the number of tasks, the tuning run: its ``wall`` seconds and, for runs
    that kept them, its seconds waiting for ``build``s and ``measuring``), tuning unless
    ``work`` holds a run of this model with this budget and cap (or a larger budget)."""
    db, note = work / f"{name}.db", work / f"{name}.json"
    tasks = len(plan(import_onnx(model)).tasks)
    if note.exists():
        done = json.loads(note.read_text())
        if done["trials_per_task"] >= trials_per_task and done.get("cap", trials_per_task) == cap:
            return db, tasks, done
        if db.exists():
            raise SystemExit(f"{db} holds a run of another budget or cap ({note.read_text().strip()}): "
                             f"give another --work")
    result = tune_network(model, trials=trials_per_task * tasks, trials_per_task=cap, database=db, warm_start=False)
    done = {"trials_per_task": trials_per_task, "cap": cap, "wall": result.wall_seconds,
            "build": result.build_seconds, "measuring": result.run_seconds}
    note.write_text(json.dumps(done) + "\n")
    return db, tasks, done


def describe_run(run: dict) -> str:
    """``1183 s``, and where it went when the run kept it."""
    if "build" not in run:
        return f"{run['wall']:.0f} s"
    rest = run["wall"] - run["build"] - run["measuring"]
    return (f"{run['wall']:.0f} s (waiting for builds {run['build']:.0f} s, measuring {run['measuring']:.0f} s, "
            f"search and the rest {rest:.0f} s)")


def idle_twin(network: Network) -> Network:
    """``network`` with every kernel (and pack program) replaced by one that takes the same
    arguments and does nothing: what is left of a run is the executable's own cost."""
    def idle(kernel):
        f = kernel.func
        return compile_func(PrimFunc(f"{f.name}_idle", f.inputs, f.outputs, f.workspaces, Seq(())))
    kernels = [TaskKernel(k.workload, idle(k.kernel), k.tuned, k.record_seconds,
                          tuple(Pack(idle(p.kernel), p.sources) for p in k.packs)) for k in network.kernels]
    return Network(network.graph, network.plan, kernels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--trials-per-task", type=int, default=64)
    parser.add_argument("--cap", type=int, default=None, help="the most trials of one task (default: none)")
    parser.add_argument("--work", default=None)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="metasched-network-"))
    work.mkdir(parents=True, exist_ok=True)
    cap = "no cap" if args.cap is None else f"at most {args.cap} per task"
    print(f"# bench/network.py: {args.models}, {args.trials_per_task} trials per task ({cap}), work {work}; "
          f"{environment()}")
    rows = []
    for name in args.models.split(","):
        model = MODELS[name]()
        db, tasks, run = tuned(name, model, args.trials_per_task, args.cap, work)
        wall = run["wall"]
        print(f"  tuned {name}: {tasks} tasks in {describe_run(run)}", flush=True)
        network = compile_network(model, database=db)
        rng = np.random.default_rng(0)
        feeds = {k: rng.standard_normal(v).astype(np.float32) for k, v in network.graph.inputs.items()}
        session = onnxruntime_session(model)
        want = session.run(None, feeds)
        ort_bytes = onnxruntime_bytes(model, work)
        got = network(**feeds)
        worst = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
        sides = {"ours": lambda: network(**feeds), "onnxruntime": lambda: session.run(None, feeds)}
        torch_run = torch_eager(network.graph)
        if torch_run is not None:
            worst_torch = max(float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-30))
                              for g, w in zip(torch_run(feeds), want))
            assert worst_torch < 1e-3, f"PyTorch eager differs from onnxruntime by {worst_torch:.2g} (relative)"
            sides["pytorch"] = lambda: torch_run(feeds)
        times = {k: [] for k in sides}
        for r in range(args.rounds):
            for label in (list(sides) if r % 2 == 0 else list(reversed(list(sides)))):
                time.sleep(SETTLE_SECONDS)
                times[label].append(median(repeat_seconds(sides[label], repeat=3, min_repeat_seconds=0.2)))
        ours = statistics.median(times["ours"])
        ratios = {label: statistics.median(o / u for o, u in zip(times[label], times["ours"]))
                  for label in sides if label != "ours"}
        idle = idle_twin(network)
        own = median(repeat_seconds(lambda: idle(**feeds), repeat=5, min_repeat_seconds=0.2)) / ours
        in_sequence = ours / sum(network.profile(feeds))
        tuned_tasks = sum(k.tuned for k in network.kernels)
        packed = sum(len(k.packs) for k in network.kernels)
        rows.append((name, tasks, tuned_tasks, packed, wall, ours, {k: statistics.median(times[k]) for k in ratios},
                     ratios, own, in_sequence, network.intermediate_bytes, ort_bytes, worst))
        print(f"  timed {name}: ours {format_seconds(ours)}, "
              + ", ".join(f"{k} ratio {r:.2f}" for k, r in ratios.items()), flush=True)
    print()
    print("| model | tasks (tuned, packed) | tuning wall | ours | onnxruntime | onnxruntime / ours | PyTorch | "
          "PyTorch / ours | own cost | in sequence / alone | intermediates: ours | onnxruntime adds | "
          "largest difference |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (name, tasks, tuned_tasks, packed, wall, ours, others, ratios, own, in_sequence, ours_bytes, ort_bytes,
         worst) in rows:
        torch_cells = (f"{format_seconds(others['pytorch'])} | {ratios['pytorch']:.2f}" if "pytorch" in ratios
                       else "- | -")
        print(f"| {name} | {tasks} ({tuned_tasks}, {packed}) | {wall:.0f} s | {format_seconds(ours)} | "
              f"{format_seconds(others['onnxruntime'])} | {ratios['onnxruntime']:.2f} | {torch_cells} | {own:.1%} | "
              f"{in_sequence:.2f} | {ours_bytes / 2**20:.1f} MiB | {ort_bytes / 2**20:.1f} MiB | {worst:.2g} |")
    print("\nratios: their time / ours (above 1: we are faster). own cost: the run with idle kernels / ours. "
          "in sequence / alone: our latency / the sum of the kernels timed alone.")


if __name__ == "__main__":
    main()
