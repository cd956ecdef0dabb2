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
segfaulted.) The recipe: target llvm for this CPU (LLVM's name for it) with 2 cores,
``tune_tir`` with its default search and ``num_trials_per_iter=64`` (its default: at 64
trials, one round, chosen before its cost model has data), the database in memory. The
wall is ``tune_tir``'s: it leaves out the imports of this process but holds the start of
TVM's builder processes (about 30 s of imports, ``BUILD_SECONDS``), so it says little at a
few trials. Each seed takes one to four minutes a workload; run nothing else meanwhile.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import tvm
from tvm import te
from tvm.s_tir import meta_schedule as ms

from common import against_baselines, environment, torch_baseline
from metasched import assert_outputs_close, workloads
from metasched.codegen.target import host_cpu
from metasched.workloads.baselines import numpy_baseline
from tune import WORKLOADS

ZERO = tvm.tirx.const(0.0, "float32")
# A build's time limit in TVM's builder (its default: 30 s). Its worker processes import
# ``tvm.s_tir.tensor_intrin`` on their first build, which takes 19 s in a venv of its own and
# 29 s in one that sees this environment's packages (``inspect.stack`` per TVMScript function
# walks every module loaded): with the default, every build of the first batch timed out.
BUILD_SECONDS = 120.0


def _matmul_relu(p: dict) -> list:
    a, b = te.placeholder((p["M"], p["K"]), name="A"), te.placeholder((p["K"], p["N"]), name="B")
    k = te.reduce_axis((0, p["K"]), name="k")
    c = te.compute((p["M"], p["N"]), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return [a, b, te.compute(c.shape, lambda i, j: te.max(c[i, j], ZERO), name="D")]


def _dense_bias_relu(p: dict) -> list:
    x, w = te.placeholder((p["M"], p["K"]), name="X"), te.placeholder((p["K"], p["N"]), name="Wt")
    bias = te.placeholder((p["N"],), name="bias")
    k = te.reduce_axis((0, p["K"]), name="k")
    y = te.compute((p["M"], p["N"]), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="Y")
    return [x, w, bias, te.compute(y.shape, lambda i, j: te.max(y[i, j] + bias[j], ZERO), name="Z")]


def _conv2d_bias_relu(p: dict) -> list:
    n, c, h, w, f, r, s, pad = (p[name] for name in ("N", "C", "H", "W", "F", "R", "S", "PAD"))
    x, wt = te.placeholder((n, c, h, w), name="X"), te.placeholder((f, c, r, s), name="Wt")
    bias = te.placeholder((f,), name="bias")
    padded = te.compute(
        (n, c, h + 2 * pad, w + 2 * pad),
        lambda b, ch, i, j: te.if_then_else(te.all(i >= pad, i < h + pad, j >= pad, j < w + pad),
                                            x[b, ch, i - pad, j - pad], ZERO), name="P")
    rc, rr, rs = te.reduce_axis((0, c), name="c"), te.reduce_axis((0, r), name="r"), te.reduce_axis((0, s), name="s")
    y = te.compute((n, f, h + 2 * pad - r + 1, w + 2 * pad - s + 1),
                   lambda b, o, i, j: te.sum(padded[b, rc, i + rr, j + rs] * wt[o, rc, rr, rs], axis=[rc, rr, rs]),
                   name="Y")
    return [x, wt, bias, te.compute(y.shape, lambda b, o, i, j: te.max(y[b, o, i, j] + bias[o], ZERO), name="Z")]


def _softmax(p: dict) -> list:
    x = te.placeholder((p["M"], p["N"]), name="X")
    j, k = te.reduce_axis((0, p["N"]), name="j"), te.reduce_axis((0, p["N"]), name="k")
    mx = te.compute((p["M"],), lambda i: te.max(x[i, j], axis=j), name="mx")
    e = te.compute(x.shape, lambda i, col: te.exp(x[i, col] - mx[i]), name="e")
    total = te.compute((p["M"],), lambda i: te.sum(e[i, k], axis=k), name="s")
    return [x, te.compute(x.shape, lambda i, col: e[i, col] / total[i], name="Y")]


def _reduce_cols(p: dict) -> list:
    x = te.placeholder((p["M"], p["N"]), name="X")
    i = te.reduce_axis((0, p["M"]), name="i")
    return [x, te.compute((p["N"],), lambda j: te.sum(x[i, j], axis=i), name="S")]


def _batch_matmul(p: dict) -> list:
    a = te.placeholder((p["BATCH"], p["M"], p["K"]), name="A")
    b = te.placeholder((p["BATCH"], p["K"], p["N"]), name="B")
    k = te.reduce_axis((0, p["K"]), name="k")
    return [a, b, te.compute((p["BATCH"], p["M"], p["N"]),
                             lambda n, i, j: te.sum(a[n, i, k] * b[n, k, j], axis=k), name="C")]


# Each workload in TVM's tensor expressions, from the built-in workload's parameters: its
# inputs, then its output, in the order of the ``.tensor`` file.
TE = {"matmul_relu": _matmul_relu, "dense_bias_relu": _dense_bias_relu, "conv2d_bias_relu": _conv2d_bias_relu,
      "softmax": _softmax, "reduce_cols": _reduce_cols, "batch_matmul": _batch_matmul}


def tvm_best(wl, trials: int, seed: int) -> dict:
    """TVM's best of ``trials`` for ``wl``, checked against the reference and timed against
    the baselines (``against_baselines``), with its tuning wall (``"wall"``)."""
    func = te.create_prim_func(TE[wl.name](wl.params))
    target = tvm.target.Target({"kind": "llvm", "mcpu": host_cpu()[1], "num-cores": 2})
    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        database = ms.tune_tir(func, target, work, max_trials_global=trials, num_trials_per_iter=64,
                               database="memory", seed=seed, builder=ms.builder.LocalBuilder(timeout_sec=BUILD_SECONDS))
        wall = time.perf_counter() - started
        sch = ms.tir_integration.compile_tir(database, func, target)
    kernel = tvm.compile(sch.mod, target=target)["main"]
    inputs = wl.random_inputs(seed=0)
    args = [tvm.runtime.tensor(a, tvm.cpu()) for a in inputs]
    outputs = [tvm.runtime.tensor(np.full(t.shape, np.nan, t.dtype), tvm.cpu()) for t in wl.outputs]
    kernel(*args, *outputs)
    assert_outputs_close(wl, [out.numpy() for out in outputs], wl.reference(*inputs))
    found = against_baselines(lambda: kernel(*args, *outputs), inputs,
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
