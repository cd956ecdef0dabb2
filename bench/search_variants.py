"""Evolutionary search with other settings against its defaults, on paired seeds.

    python bench/search_variants.py WORKLOAD VARIANT... [--trials 64] [--seeds 0-7] [--constants W0,W1]

WORKLOAD is a built-in workload's name or a ``.tensor`` file (a network's task, printed by
``metasched.graph.plan``); ``--constants`` names inputs whose copies are made once, as a
network's weights (``TuneTask.constants``).

A VARIANT is ``default`` or comma-separated ``field=value`` pairs of ``EvolutionaryConfig``
(``population_size=256,genetic_num_iters=4``), ``batch_size`` (programs measured per proposal),
``pack_panels``, ``keep_unreused_axes_whole``, ``channel_vectors`` or
``leave_streaming_blocks`` (0 or 1: ``MultiLevelTiling``'s options in
``cpu_default()``) or ``disallow_ops`` (``AutoInline``'s, the function names joined by ``+``,
``exp+sqrt``, or nothing: ``disallow_ops=``) or ``warm_start=PATH`` (the cost model starts trained
on the records of the other workloads in the database at PATH, measured on this host, as
``tune(warm_start=[...])`` trains it: ``metasched.tune.warm_start``, made anew for each run;
``GBTModel.weights`` and that module have what it gave) or ``model=KIND`` (``GBTModel``'s kind:
``blend`` by default, ``hist``, ``pairwise``, ``exact``). For each seed, every variant tunes
WORKLOAD with that seed in a fresh database, the variants one after another (so that the load of
this shared machine at a given moment falls on all of them); the first variant is the reference. Printed: per seed, each variant's best
time (as its tuner recorded it) and tuning wall; then per variant the geometric mean of its best
over the reference's across seeds, how many seeds it won, and its worst and best seed.

Why paired seeds and many of them: one run of 64 trials is one draw from a wide distribution.
On a znver3 (AVX2, 2 cores), runs with the defaults and seeds 0 to 7 ended between 2.25 and
3.04 ms on matmul_relu and between 1.65 and 3.59 ms on conv2d_bias_relu; the same seed does not
repeat a run, since the measured times steer the search, and an hour later the same defaults
ended between 1.85 and 2.53 ms on matmul_relu (the load of a shared machine moves absolute
times: only the paired ratios compare). ``batch_size=8,eps_greedy=0.125`` (the
model refitted twice as often, one fresh sample per batch) gave a geometric mean of 0.860 on
matmul_relu (won 7 of 8 seeds) but 1.146 on conv2d_bias_relu (won 2 of 8, from 0.51 to 2.05):
there some runs settled on one family of programs, its parallel and unroll decisions (which the
mutators change 2 and 3 times in 100) never revisited. Twice the population with it
(``batch_size=8,eps_greedy=0.125,population_size=256``, twice the fresh samples per round) gave
0.925 on matmul_relu (won 5 of 8), 0.907 on conv2d_bias_relu (4 of 8), 0.970 on
dense_bias_relu (5 of 8), 0.940 on softmax (4 of 8) but 1.060 on reduce_cols (3 of 8); the
median tuning wall rose from 29 to 40 s (matmul_relu), 36 to 61 s (conv2d_bias_relu), 39 to
45 s (dense_bias_relu) and 45 to 67 s (softmax). Judge a setting on several workloads and
eight or more seeds. ``max_family_share=0.5`` (now the default; ``EvolutionaryConfig`` has its
figures) was judged so, against ``max_family_share=1.0``, on all five workloads. With it, on an
AVX-512 Xeon (2 cores), ``batch_size=8`` alone gave 1.039 on matmul_relu (won 4 of 8) and 0.967
on conv2d_bias_relu (won 6 of 8, but one seed 2.09): not the default.
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np

from common import environment
from metasched import Database, workloads
from metasched.lang import parse
from metasched.search import EvolutionaryConfig, EvolutionarySearch, GBTModel
from metasched.search.cost_model import KINDS
from metasched.space import AutoInline, MultiLevelTiling, PostOrderApply, cpu_default
from metasched.tune import TuneTask, host_target, tune_tasks
from metasched.tune.warm_start import warm_start as warm_model

_FIELDS = {f.name: f for f in dataclasses.fields(EvolutionaryConfig)}
_TILING_FLAGS = tuple(f.name for f in dataclasses.fields(MultiLevelTiling) if f.type in (bool, "bool"))


@dataclasses.dataclass
class Variant:
    """What a VARIANT names: the search's config, the batch size (None: the strategy's), the
    space, the database whose other workloads' records warm-start the model (or None), and the
    model's kind."""

    config: EvolutionaryConfig
    batch_size: int | None
    space: PostOrderApply
    warm_start: str | None = None
    model: str = KINDS[0]

    def strategy(self, wl) -> EvolutionarySearch:
        if self.warm_start is None:
            return EvolutionarySearch(self.config, model=GBTModel(self.model))
        with Database(self.warm_start) as db:
            others = [db.workload(summary.key) for summary in db.workloads() if summary.key != wl.key]
            model, _ = warm_model(db, wl, host_target(), others)  # as tune(warm_start=others) makes it
            return EvolutionarySearch(self.config, model=model)


def parse_variant(text: str) -> Variant:
    """The ``Variant`` a VARIANT names."""
    space = cpu_default()
    if text == "default":
        return Variant(EvolutionaryConfig(), None, space)
    changes: dict[str, object] = {}
    batch_size, warm_start, model = None, None, KINDS[0]
    for pair in text.split(","):
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"{text!r}: expected field=value, got {pair!r}")
        if name == "batch_size":
            batch_size = int(value)
            if batch_size < 1:
                raise ValueError(f"{text!r}: batch_size must be at least 1")
        elif name in _TILING_FLAGS:
            if value not in ("0", "1"):
                raise ValueError(f"{text!r}: {name} must be 0 or 1")
            space.rules = [dataclasses.replace(rule, **{name: value == "1"}) if isinstance(rule, MultiLevelTiling)
                           else rule for rule in space.rules]
        elif name == "disallow_ops":
            ops = tuple(op for op in value.split("+") if op)
            space.rules = [dataclasses.replace(rule, disallow_ops=ops) if isinstance(rule, AutoInline) else rule
                           for rule in space.rules]
        elif name == "warm_start":
            if not Path(value).is_file():
                raise ValueError(f"{text!r}: no database at {value!r}")
            warm_start = value
        elif name == "model":
            if value not in KINDS:
                raise ValueError(f"{text!r}: model must be one of {', '.join(KINDS)}")
            model = value
        elif name in _FIELDS:
            changes[name] = int(value) if _FIELDS[name].type in (int, "int") else float(value)
        else:
            raise ValueError(f"{text!r}: {name!r} is neither batch_size, a tiling option "
                             f"({', '.join(_TILING_FLAGS)}), disallow_ops, warm_start, model nor a field of "
                             f"EvolutionaryConfig ({', '.join(_FIELDS)})")
    if warm_start is not None and model != KINDS[0]:
        raise ValueError(f"{text!r}: warm_start trains the default model ({KINDS[0]}); it does not combine with "
                         f"model=")
    return Variant(EvolutionaryConfig(**changes), batch_size, space, warm_start, model)


def parse_seeds(text: str) -> list[int]:
    """``0-7`` or ``1,4,6``."""
    first, sep, last = text.partition("-")
    return list(range(int(first), int(last) + 1)) if sep else [int(s) for s in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload")
    parser.add_argument("variants", nargs="+", metavar="VARIANT")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("0-7"), help="0-7 or 1,4,6")
    parser.add_argument("--constants", default="", help="inputs made once, as a network's weights: W0,W1")
    args = parser.parse_args()
    try:
        variants = {text: parse_variant(text) for text in args.variants}
    except (ValueError, TypeError) as err:
        parser.error(str(err))
    try:
        wl = parse(Path(args.workload).read_text()) if args.workload.endswith(".tensor") else workloads.get(args.workload)
        constants = TuneTask(wl, constants=[c for c in args.constants.split(",") if c]).constants
    except (KeyError, OSError, ValueError) as err:
        parser.error(str(err))
    names = list(variants)  # a variant given twice runs once
    print(environment())
    header = "| seed | " + " | ".join(names) + " |"
    print(f"\n{args.workload}, {args.trials} trials: best (tuning wall)\n")
    print(f"{header}\n|{'---|' * (header.count('|') - 1)}")
    best: dict[str, list[float]] = {text: [] for text in variants}
    with tempfile.TemporaryDirectory() as scratch:
        for seed in args.seeds:
            cells = []
            for k, (text, variant) in enumerate(variants.items()):
                started = time.perf_counter()
                task = TuneTask(wl, space=variant.space, strategy=variant.strategy(wl), constants=constants)
                (result,) = tune_tasks([task], trials=args.trials, database=str(Path(scratch) / f"{seed}.{k}.db"),
                                       seed=seed, batch_size=variant.batch_size).tasks
                found = result.best_seconds or float("inf")  # inf: no program ran
                best[text].append(found)
                cells.append(f"{found * 1e3:.3f} ms ({time.perf_counter() - started:.0f} s)")
            print(f"| {seed} | " + " | ".join(cells) + " |", flush=True)
    reference = np.log(best[names[0]])
    print(f"\nagainst {names[0]!r} (below 1: faster kernels), over {len(args.seeds)} seeds:")
    for text in names[1:]:
        ratios = np.exp(np.log(best[text]) - reference)
        print(f"  {text}: geometric mean {np.exp(np.mean(np.log(ratios))):.3f}, won {int((ratios < 1).sum())} "
              f"of {len(ratios)}, seeds from {ratios.min():.2f} to {ratios.max():.2f}")


if __name__ == "__main__":
    main()
