"""Cost models judged offline as the search uses them, on the records of earlier tuning runs.

    python bench/model_choice.py WORKLOAD DB... [--models blend,hist,trees,lanes,random] [--after 16,32,48]

All-pairs accuracy over a run's records is not what evolutionary search asks of its model. In
a run, the model is fitted on the few dozen programs that run has measured so far, and picks
the 16 it predicts fastest among hundreds of candidates; what counts is how fast the best of
those 16 is, and the order among slow programs hardly matters. Twice a model that ranked all
pairs better searched worse (``GBTModel._make`` and ``cost_model._log_labels`` record both).

This replays that use. Each DB is one run of WORKLOAD in a fresh database (16 of them, say:
``python -m metasched tune WORKLOAD --db runs/S.db --seed S`` for S from 0 to 15), and for
each DB and each N of ``--after``: a model is fitted on the run's first N records, in the order
they were measured; the candidates are the records of the other DBs (each program once, none of
the N); the model picks its 16 best predicted candidates. Printed per model, as means over DBs
and N (each DB in turn the run):

* ``best of 16``: the fastest pick's throughput over the fastest candidate's (1: the model
  picked the best program there is; the search measures the picks and keeps the fastest);
* ``mean of 16``: the picks' mean throughput over the fastest candidate's;
* ``pairs``: pairwise accuracy over all candidates (``pairwise_accuracy``);
* ``top pairs``: the same over the fastest quarter of the candidates.

Times from different runs compare only if the runs shared the machine's conditions: run them
one after another, alone. A model is one of ``GBTModel``'s kinds (``blend``, ``hist``,
``pairwise``, ``exact``), ``trees`` (``hist``'s trees without the line in vectorized lanes they
start from, the model before it), ``lanes`` (that column alone, no fitting), ``random``
(``RandomModel``), or one of two variants of ``trees`` tried and not taken, which
``cost_model``'s docstrings record: ``weighted`` (the fit weighs programs by 0.05 plus their
squared normalised throughput) and ``extra`` (the mean of the log predictions of the trees and
of 50 extra trees).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from common import environment, replayed_records
from metasched import workloads
from metasched.database import program_key
from metasched.search import GBTModel, RandomModel, pairwise_accuracy
from metasched.search.cost_model import _LANES, KINDS, _log_labels, program_features

PICKS = 16


class _Trees(GBTModel):
    """The trees alone, without ``_LanesThenTrees``'s line: the model before it."""

    def _fitted(self, rows: np.ndarray, labels: np.ndarray, weights=None):
        return self._make("hist").fit(rows, _log_labels(labels), sample_weight=weights)


class _Weighted(GBTModel):
    """The trees alone, fitted with weights: 0.05 plus each program's squared normalised
    throughput (tried and not taken; ``_log_labels``'s docstring)."""

    def _fitted(self, rows: np.ndarray, labels: np.ndarray, weights=None):  # its own weights
        return self._make("hist").fit(rows, _log_labels(labels), sample_weight=0.05 + labels ** 2)


class _Extra(_Trees):
    """The mean of the log predictions of the trees alone and of 50 extra trees (tried and not
    taken; ``GBTModel._make``'s comment)."""

    def _fitted(self, rows: np.ndarray, labels: np.ndarray, weights=None):
        from sklearn.ensemble import ExtraTreesRegressor
        extra = ExtraTreesRegressor(n_estimators=50, min_samples_leaf=2, random_state=self.seed)
        return _Mean(super()._fitted(rows, labels, weights),
                     extra.fit(rows, _log_labels(labels), sample_weight=weights))


class _Mean:
    """The mean of two fitted regressors' predictions."""

    def __init__(self, first, second) -> None:
        self.first, self.second = first, second

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return (self.first.predict(rows) + self.second.predict(rows)) / 2


class _Lanes(RandomModel):
    """The main store's vectorized lanes as the score (ties in random order): no fitting."""

    def predict_rows(self, rows: np.ndarray) -> np.ndarray:
        return rows[:, _LANES] + 1e-6 * super().predict_rows(rows)


MODELS = {**{kind: (lambda kind=kind: GBTModel(kind)) for kind in KINDS}, "trees": _Trees,
          "weighted": _Weighted, "extra": _Extra, "lanes": _Lanes, "random": lambda: RandomModel(0)}


def load_run(wl, path: str) -> list[tuple[str, np.ndarray, float]]:
    """A run's records, oldest first: (program key, feature row, seconds or inf if failed)."""
    return [(program_key(sch.trace), program_features(sch), record.median if record.ok else np.inf)
            for sch, record in replayed_records(wl, path)]


def judge(make, runs: list[list], after: list[int], group: str) -> dict[str, float]:
    """The means of the four measures over every run in turn and every N in ``after``."""
    found: dict[str, list[float]] = {"best of 16": [], "mean of 16": [], "pairs": [], "top pairs": []}
    for k, run in enumerate(runs):
        for n in after:
            if n > len(run):
                continue
            model = make()
            for _, row, seconds in run[:n]:
                if isinstance(model, GBTModel):
                    model._add(row, group, None if not np.isfinite(seconds) else seconds)
            if isinstance(model, GBTModel):
                model._fit()
            seen = {key for key, _, _ in run[:n]}
            pool: dict[str, tuple[np.ndarray, float]] = {}
            for j, other in enumerate(runs):
                if j != k:
                    for key, row, seconds in other:
                        if key not in seen:
                            pool.setdefault(key, (row, seconds))
            truth = np.array([0.0 if not np.isfinite(s) else 1.0 / s for _, s in pool.values()])
            if not truth.any():  # no candidate ran (or none is left): nothing to pick
                continue
            rows = np.stack([row for row, _ in pool.values()])
            scores = np.asarray(model.predict_rows(rows), dtype=float)
            picks = np.argsort(-scores, kind="stable")[:PICKS]
            found["best of 16"].append(truth[picks].max() / truth.max())
            found["mean of 16"].append(truth[picks].mean() / truth.max())
            found["pairs"].append(pairwise_accuracy(truth, scores))
            top = np.argsort(-truth, kind="stable")[:max(2, len(truth) // 4)]
            found["top pairs"].append(pairwise_accuracy(truth[top], scores[top]))
    return {name: float(np.mean(values)) for name, values in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload")
    parser.add_argument("databases", nargs="+", metavar="DB")
    parser.add_argument("--models", default="blend,hist,trees,lanes,random", help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--after", default="16,32,48", help="comma-separated record counts to fit on")
    args = parser.parse_args()
    try:
        wl = workloads.get(args.workload)
    except KeyError as err:
        parser.error(str(err))
    models = args.models.split(",")
    for name in models:
        if name not in MODELS:
            parser.error(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    for path in args.databases:
        if not Path(path).is_file():
            parser.error(f"no database at {path}")
    try:
        after = [int(n) for n in args.after.split(",")]
    except ValueError:
        parser.error(f"--after: expected comma-separated record counts, got {args.after!r}")
    if min(after) < 1:
        parser.error(f"--after: record counts must be positive, got {args.after!r}")
    if len(args.databases) < 2:
        parser.error("give two or more databases: each run's model picks among the others' records")
    runs = [load_run(wl, path) for path in args.databases]
    if max(map(len, runs)) < max(after):
        parser.error(f"--after {max(after)}: no database holds that many records of {wl.name} measured "
                     f"on this host (the most is {max(map(len, runs))})")
    print(environment())
    print(f"\n{wl.name}: {len(runs)} runs, {sum(map(len, runs))} records, fitted after {args.after} records\n")
    print("| model | best of 16 | mean of 16 | pairs | top pairs |\n|---|---|---|---|---|")
    for name in models:
        found = judge(MODELS[name], runs, after, wl.key)
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in found.values()) + " |", flush=True)


if __name__ == "__main__":
    main()
