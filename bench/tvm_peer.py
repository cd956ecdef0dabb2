"""The peer on this machine: TVM MetaSchedule tunes the bench's workloads with as many trials
as ours, and each best kernel is then timed in turns with numpy and PyTorch exactly as
``tune.py`` times ours (``common.against_baselines``), so that the two benches' ratios can be
set side by side. Issue 9's TVM figures were measured once, on another machine; this is
the same recipe on whatever this one is today.

TVM is never a dependency of metasched. It runs in a venv of its own that also sees this
environment's packages (metasched, numpy, PyTorch):

    python -m venv --system-site-packages /tmp/tvm
    /tmp/tvm/bin/pip install "apache-tvm==0.27.0.post1" "apache-tvm-ffi==0.1.14.post1" \\
        psutil cloudpickle xgboost
    /tmp/tvm/bin/python bench/tvm_peer.py [--workloads matmul_relu,dense_bias_relu] \\
        [--trials 64] [--seeds 0,1,2]

(0.27 is the version issue 9 names; with apache-tvm-ffi 0.1.15.post2 even ``tvm.ir.save_json``
segfaulted.) Any workload of our language goes to TVM through ``tvm_te.te_of``, one
``te.compute`` per statement (``tvm_te.py --check`` checks the translation). The recipe:
target llvm for this CPU (LLVM's name for it) with 2 cores, ``tune_tir`` with its default
search and ``num_trials_per_iter=64`` (its default: at 64 trials, one round, chosen before its
cost model has data), its JSON database in the work folder. The best schedule is compiled,
checked against our reference and exported as a shared library. The wall is ``tune_tir``'s:
it leaves out the imports of this process but holds the start of TVM's builder processes
(about 30 s of imports, ``BUILD_SECONDS``), so it says little at a few trials: 8 trials of a
6x5x11 matmul_relu took 141 s here, 93 s of it building the first 8 candidates, with another
process busy on one of the 2 cores. Each seed takes one to four minutes a workload; run
nothing else meanwhile.

From another script of the bench, in this venv (``bench`` on ``sys.path``)::

    from tvm_peer import best_trace, load, tune
    path, wall = tune(wl, 64, "work/conv", seed=0)   # work/conv/<name>.so, tuning seconds
    kernel = load(path)                             # in this process or any other
    outputs = kernel(*inputs)                       # numpy in, numpy out
    seconds = kernel.time(*inputs, number=10, repeat=5, min_repeat_ms=50)  # TVM's time_evaluator
    best_trace(wl, "work/conv", script=True)        # the best schedule's trace, and its TIR
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from common import against_baselines, environment, torch_baseline
from metasched import assert_outputs_close, workloads
from metasched.codegen.target import host_cpu
from metasched.workloads.baselines import numpy_baseline
from tune import WORKLOADS
from tvm_te import prim_func

# A build's time limit in TVM's builder (its default: 30 s). Its worker processes import
# ``tvm.s_tir.tensor_intrin`` on their first build, which takes 19 s in a venv of its own and
# 29 s in one that sees this environment's packages (``inspect.stack`` per TVMScript function
# walks every module loaded): with the default, every build of the first batch timed out.
BUILD_SECONDS = 120.0


def target() -> tvm.target.Target:
    """llvm for this CPU (LLVM's name for it), 2 cores: what the peer tunes and compiles for."""
    return tvm.target.Target({"kind": "llvm", "mcpu": host_cpu()[1], "num-cores": 2})


def _best_schedule(wl, work_dir):
    """The best schedule of ``wl`` in the JSON database of ``work_dir`` and its record."""
    func = prim_func(wl)
    database = ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)
    # The module as tune_tir and compile_tir make it of a PrimFunc.
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main").with_attr("tirx.noalias", True)})
    record = database.query_tuning_record(mod, target(), workload_name="main")
    if record is None:
        raise LookupError(f"no tuning record of {wl.label} in {work_dir}")
    return ms.tir_integration.compile_tir(database, func, target()), record


def tune(wl, trials: int, work_dir, seed: int = 0) -> tuple[str, float]:
    """TVM MetaSchedule's best of ``trials`` for ``wl`` (a metasched ``Workload``), by this
    file's recipe: the path of its shared library, exported into ``work_dir`` (created if
    missing) as ``<name>.so``, and the tuning wall in seconds (``tune_tir``'s).

    ``work_dir`` also keeps TVM's JSON database (``database_*.json``: ``best_trace`` reads it)
    and its logs, and ``<name>.json`` beside the library: the workload and its outputs' shapes,
    which ``load`` reads. The kernel is checked against ``wl.reference`` before it is exported
    (``MismatchError`` if it does not match)."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    func = prim_func(wl)
    started = time.perf_counter()
    database = ms.tune_tir(func, target(), str(work_dir), max_trials_global=trials, num_trials_per_iter=64,
                           database="json", seed=seed, builder=ms.builder.LocalBuilder(timeout_sec=BUILD_SECONDS))
    wall = time.perf_counter() - started
    sch = ms.tir_integration.compile_tir(database, func, target())
    if sch is None:
        raise RuntimeError(f"TVM found no valid schedule of {wl.label} in {trials} trials")
    library = tvm.compile(sch.mod, target=target())
    path = work_dir / f"{wl.name}.so"
    tensors = {role: [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in decls]
               for role, decls in (("inputs", wl.inputs), ("outputs", wl.outputs))}
    info = {"workload": wl.label, "key": wl.key, "trials": trials, "seed": seed, "wall": wall,
            "target": str(target()), **tensors}
    path.with_suffix(".json").write_text(json.dumps(info, indent=1) + "\n")
    library.export_library(str(path))
    inputs = wl.random_inputs(seed=0)
    assert_outputs_close(wl, load(path)(*inputs), wl.reference(*inputs))
    return str(path), wall


class Kernel:
    """A kernel exported by ``tune``, loaded (``load``): ``module`` is TVM's runtime module,
    ``function`` its entry ``main(*inputs, *outputs)``, ``info`` what ``tune`` wrote beside it."""

    def __init__(self, path) -> None:
        self.path = str(path)
        self.module = tvm.runtime.load_module(self.path)
        self.function = self.module["main"]
        self.info = json.loads(Path(self.path).with_suffix(".json").read_text())

    def arguments(self, *inputs: np.ndarray) -> list:
        """TVM tensors on the CPU for ``function``: copies of ``inputs``, then the outputs,
        filled with NaN (an element the kernel never writes shows)."""
        device = tvm.cpu()
        outputs = [np.full(o["shape"], np.nan, o["dtype"]) for o in self.info["outputs"]]
        return [tvm.runtime.tensor(np.ascontiguousarray(a), device) for a in (*inputs, *outputs)]

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """The outputs for numpy ``inputs``, as numpy arrays."""
        args = self.arguments(*inputs)
        self.function(*args)
        return [a.numpy() for a in args[len(inputs):]]

    def time(self, *inputs: np.ndarray, number: int = 10, repeat: int = 5, min_repeat_ms: int = 0) -> list[float]:
        """Seconds per run on numpy ``inputs`` by TVM's ``time_evaluator``: one figure per
        ``repeat``, each the mean of ``number`` runs (more, if they last under
        ``min_repeat_ms``), after one run that is not counted."""
        evaluator = self.module.time_evaluator("main", tvm.cpu(), number=number, repeat=repeat,
                                               min_repeat_ms=min_repeat_ms)
        return list(evaluator(*self.arguments(*inputs)).results)


def load(path) -> Kernel:
    """The kernel ``tune`` exported to ``path``, in this process."""
    return Kernel(path)


def best_trace(wl, work_dir, script: bool = False) -> str:
    """Print and return the trace of the best schedule of ``wl`` in ``work_dir``'s database
    (where ``tune`` tuned it), after its measured times; with ``script``, its TIR too."""
    sch, record = _best_schedule(wl, work_dir)
    seconds = ", ".join(f"{float(t) * 1e6:.4g}" for t in record.run_secs)
    text = f"# {wl.label}: TVM's best, measured {seconds} us\n{sch.trace}"
    if script:
        text += f"\n{sch.mod.script()}"
    print(text)
    return text


def tvm_best(wl, trials: int, seed: int) -> dict:
    """TVM's best of ``trials`` for ``wl``, checked against the reference and timed against
    the baselines (``against_baselines``), with its tuning wall (``"wall"``)."""
    with tempfile.TemporaryDirectory() as work:
        path, wall = tune(wl, trials, work, seed=seed)
        kernel = load(path)
        inputs = wl.random_inputs(seed=0)
        args = kernel.arguments(*inputs)
        found = against_baselines(lambda: kernel.function(*args), inputs,
                                  {"numpy": numpy_baseline(wl), "PyTorch": torch_baseline(wl)})
    return {**found, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    print(f"{environment()}; TVM {tvm.__version__}, mcpu {host_cpu()[1]}, {args.trials} trials")
    print("| workload | seed | TVM's best | / numpy | / PyTorch | tuning wall |\n|---|---|---|---|---|---|")
    for name in args.workloads.split(","):
        runs = [tvm_best(workloads.get(name), args.trials, int(seed)) for seed in args.seeds.split(",")]
        for seed, found in [*zip(args.seeds.split(","), runs),
                            ("median", {k: statistics.median(r[k] for r in runs) for k in runs[0]})]:
            torch_ratio = f"{found['PyTorch']:.2f}x" if "PyTorch" in found else "-"
            print(f"| {name} | {seed} | {found['seconds'] * 1e3:.3f} ms | {found['numpy']:.2f}x | {torch_ratio} "
                  f"| {found['wall']:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
