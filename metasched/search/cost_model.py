"""Cost models: predict which candidate programs run fastest before any is compiled.

A candidate is a post-processed ``Schedule``. The model lowers it and reads the per-store
features of the loop program (``features.per_store_features``); a program's row is the row of
its main store (the most float operations: the loop nest that takes most of the time), the
maximum of all its stores' rows (so that a badly scheduled secondary store still shows) and its
number of stores, a fixed width for any number of stores. The label is throughput normalised
per workload: the workload's fastest measured time divided by this program's time, so 1 for the
best program of each workload and 0 for a failed one (failures stay in the data as negatives,
as in MetaSchedule's XGBoost model); the trees fit its log (``_log_labels``). Labels are
recomputed on every refit, because the fastest time moves as records arrive.

``GBTModel`` fits a line in the main store's vectorized lanes, then gradient-boosted trees
from there (``_LanesThenTrees``), and refits on every ``update``: scikit-learn's
``HistGradientBoostingRegressor`` fitted to what the line leaves (``kind="hist"``),
``GradientBoostingRegressor`` likewise (``"exact"``), scikit-learn decision trees boosted on
the order of pairs of programs (``"pairwise"``: ``pairwise.PairwiseBoosting``), or by default
the mean of the ``"hist"`` and ``"pairwise"`` models' log predictions (``"blend"``:
``_Blend``, which says why). Those trees fit only the columns that vary
(``_varying_columns``) and predict as tables (``tree_tables.TreeTables``: the very values of
scikit-learn's trees, in a quarter of its time);
``RandomModel`` scores at random, the baseline a learned model must beat. A model trained on one
workload's records scores another's (``GBTModel.from_database`` warm-starts from a database);
when it knows several workloads, each weighs as much in the fit as any other
(``GBTModel.weights``), so that the few records of a run that just started are not drowned by
the hundreds it was warm-started on.
"""
from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional, Sequence, Union

import numpy as np
from threadpoolctl import ThreadpoolController

from metasched.database import Database, Target
from metasched.errors import ScheduleError
from metasched.lang.workload import Workload
from metasched.schedule import Schedule, replay
from metasched.search.features import FEATURE_NAMES, FEATURE_VERSION, per_store_features
from metasched.search.pairwise import PairwiseBoosting, rising_line
from metasched.search.tree_tables import TreeTables

if TYPE_CHECKING:
    from metasched.search.scoring import Tasks

# Fewer measured programs than this and a fitted model predicts worse than chance: score at
# random until then (MetaSchedule's XGBoost model waits for data the same way).
MIN_TRAINING_PROGRAMS = 16
# The kinds of ``GBTModel`` (its trees), the default first.
KINDS = ("blend", "hist", "pairwise", "exact")
_FLOPS = FEATURE_NAMES.index("flops")
# The main store's vectorized lanes (``program_features`` puts the main store's row first):
# the column the trees' linear base reads (``_LanesThenTrees``).
_LANES = FEATURE_NAMES.index("vector_lanes")


def program_features(sch: Schedule) -> np.ndarray:
    """One fixed-width row for a post-processed schedule: the features of its main store (the
    most float operations; the first such), their maximum over all stores, and log2(1 + number
    of stores).

    The main store's own row, not a mean over stores: a mean (or a maximum) mixes the columns
    of different stores (the accumulator's initialisation, the reduction, the epilogue) into
    a row that describes no loop nest, while the reduction's nest decides the run time
    (bench/README.md, Design history)."""
    per_store = per_store_features(sch.lower())
    stores, width = per_store.shape
    if stores == 0:
        return np.zeros(2 * width + 1, dtype=np.float32)
    # Written into one preallocated row: the tables are tiny, so numpy's fixed cost per call
    # decides, and a concatenation of converted pieces took twice the calls.
    row = np.empty(2 * width + 1, dtype=np.float32)
    row[:width] = per_store[per_store[:, _FLOPS].argmax()]
    per_store.max(axis=0, out=row[width:-1])
    row[-1] = np.log2(1 + stores)
    return row


def pairwise_accuracy(truth: Sequence[float], predicted: Sequence[float]) -> float:
    """The share of pairs with different true values that the predictions order the same way
    (Ansor's ranking accuracy); 1.0 when no pair differs. A pair the predictions tie counts
    as wrong, since a tie ranks neither first; a failed program (true throughput 0) ranks
    below every one that ran, and two failed ones are a tie, left out."""
    truth, predicted = np.asarray(truth, dtype=float), np.asarray(predicted, dtype=float)
    i, j = np.triu_indices(len(truth), k=1)
    differ = truth[i] != truth[j]
    if not differ.any():
        return 1.0
    agree = np.sign(truth[i] - truth[j]) == np.sign(predicted[i] - predicted[j])
    return float(agree[differ].mean())


class FeatureExtractor(ABC):
    """Turns a post-processed schedule into the fixed-width row of numbers a cost model reads.
    The model owns it (``CostModel.extractor``); the scoring workers run it on every candidate
    (so it must pickle), and each candidate carries its row from then on. ``version`` names
    what it computes: a saved model is loaded only by an extractor of the same version."""

    version: str = ""

    @abstractmethod
    def __call__(self, sch: Schedule) -> np.ndarray:
        """The row of ``sch``."""

    def rows(self, schedules: Sequence[Schedule]) -> np.ndarray:
        """The rows of ``schedules``, stacked."""
        return np.stack([self(sch) for sch in schedules]) if schedules else np.zeros((0, 0), np.float32)


class ProgramFeatures(FeatureExtractor):
    """``program_features``: the per-store features of the main store, their maximum over all
    stores and the number of stores."""

    version = f"program-{FEATURE_VERSION}"

    def __call__(self, sch: Schedule) -> np.ndarray:
        return program_features(sch)


@dataclass(frozen=True)
class Measured:
    """One measured program as a cost model learns it: the key of its workload (a program's
    label is relative to the fastest of its own workload) and its median ``seconds`` (None:
    it failed)."""

    workload: str
    seconds: Optional[float]


class CostModel(ABC):
    """Scores candidates by their feature rows (``extractor``'s): higher means predicted
    faster. A new model is one subclass with ``predict`` and ``update``."""

    extractor: FeatureExtractor = ProgramFeatures()

    @abstractmethod
    def update(self, rows: np.ndarray, results: Sequence[Measured]) -> None:
        """Learn from measured programs: one row per result."""

    @abstractmethod
    def predict(self, rows: np.ndarray) -> np.ndarray:
        """One score per row."""

    @property
    def informed(self) -> bool:
        """Whether the scores carry information (False for scores drawn at random)."""
        return True

    def use(self, tasks: Tasks) -> None:
        """Worker processes (``search.scoring.Tasks``) that are idle while the model learns,
        lent by the search for the rest of its run: a model may fit in them. This one does not."""

    def learn(self, schedules: Sequence[Schedule], seconds: Sequence[Optional[float]]) -> None:
        """``update`` from schedules and their median seconds (rows by ``extractor``)."""
        if len(schedules) != len(seconds):
            raise ValueError(f"learn: {len(schedules)} schedules but {len(seconds)} times")
        if schedules:
            self.update(self.extractor.rows(schedules),
                        [Measured(sch.workload.key, s) for sch, s in zip(schedules, seconds)])

    def score(self, schedules: Sequence[Schedule]) -> np.ndarray:
        """``predict`` for schedules (rows by ``extractor``)."""
        return self.predict(self.extractor.rows(schedules)) if schedules else np.zeros(0)

    def save(self, path: Union[str, PathLike]) -> None:
        """Write the model (pickle) with the version of its features."""
        Path(path).write_bytes(pickle.dumps({"feature_version": self.extractor.version, "model": self}))

    @staticmethod
    def load(path: Union[str, PathLike]) -> CostModel:
        """A model written by ``save``; ``ValueError`` when its extractor now computes other
        features than it was trained on."""
        saved = pickle.loads(Path(path).read_bytes())
        if not isinstance(saved, dict) or not isinstance(saved.get("model"), CostModel):
            raise ValueError(f"{path} holds no metasched cost model")
        model = saved["model"]
        if saved["feature_version"] != model.extractor.version:
            raise ValueError(f"{path} was trained on features version {saved['feature_version']}; "
                             f"its extractor now computes version {model.extractor.version}: train it again")
        return model


class RandomModel(CostModel):
    """Uniform random scores: what search without a model does."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    @property
    def informed(self) -> bool:
        return False

    def update(self, rows: np.ndarray, results: Sequence[Measured]) -> None:
        pass

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return self.rng.random(len(rows))


class GBTModel(CostModel):
    """Gradient-boosted trees over program features, refitted on all data at each ``update``.

    ``kind`` (``KINDS``): ``"blend"`` (the default: the mean of the next two's log
    predictions, ``_Blend``), ``"hist"`` (``HistGradientBoostingRegressor``), ``"pairwise"``
    (ranking trees, ``pairwise.PairwiseBoosting``) or ``"exact"``
    (``GradientBoostingRegressor``). Until ``MIN_TRAINING_PROGRAMS`` programs are known it
    scores at random (seeded), as a model fitted on a handful of points only adds noise."""

    def __init__(self, kind: str = "blend", seed: int = 0) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
        self.kind, self.seed = kind, seed
        self._rows: list[np.ndarray] = []
        self._groups: list[str] = []  # workload key of each row
        self._seconds: list[float] = []  # inf for a failed program
        self._regressor = None
        self._fallback = RandomModel(seed)
        self._tasks: Optional[Tasks] = None  # worker processes lent by the search (``use``)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def informed(self) -> bool:
        return self._regressor is not None

    def use(self, tasks: Tasks) -> None:
        """The blend's two models are fitted side by side in ``tasks``' workers (when there
        are two or more), each on one thread: the very fits, in the time of the slower."""
        self._tasks = tasks

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tasks": None}  # the workers stay with this process

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({"_tasks": None, **state})  # a model saved before ``use``

    def update(self, rows: np.ndarray, results: Sequence[Measured]) -> None:
        if len(rows) != len(results):
            raise ValueError(f"update: {len(rows)} rows but {len(results)} results")
        for row, result in zip(rows, results):
            self._add(row, result.workload, result.seconds)
        self._fit()

    def _add(self, row: np.ndarray, group: str, seconds: Optional[float]) -> None:
        self._rows.append(row)
        self._groups.append(group)
        self._seconds.append(np.inf if seconds is None else float(seconds))

    def labels(self) -> np.ndarray:
        """Each program's fastest time of its workload over its own time (0 when failed)."""
        fastest: dict[str, float] = defaultdict(lambda: np.inf)
        for group, s in zip(self._groups, self._seconds):
            fastest[group] = min(fastest[group], s)
        return np.array([0.0 if not np.isfinite(s) or not np.isfinite(fastest[g]) else fastest[g] / s
                         for g, s in zip(self._groups, self._seconds)])

    def _fit(self) -> None:
        labels = self.labels()
        if len(self._rows) < MIN_TRAINING_PROGRAMS or np.ptp(labels) == 0:
            self._regressor = None
            return
        with _one_thread():  # see ``predict``
            self._regressor = self._fitted(np.stack(self._rows), labels, self.weights())

    def weights(self) -> Optional[np.ndarray]:
        """Each program's weight in the fit: one over its workload's count of programs (scaled
        to a mean of 1), so that every workload counts as much as any other, however many
        records it has; None (all alike) when the model knows one workload. Unweighted, the
        16 records of a run's first proposal were 6% of a fit warm-started on 256
        (bench/README.md, Design history)."""
        counts = Counter(self._groups)
        if len(counts) < 2:
            return None
        weights = np.array([1.0 / counts[group] for group in self._groups])
        return weights / weights.mean()

    def _fitted(self, rows: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray] = None):
        """The regressor fitted on program ``rows`` and their normalised throughputs ``labels``
        (enough of them, not all equal), each row of ``weights`` (None: all alike): the line in
        lanes, then ``_make``'s trees; for ``"blend"``, two such, ``"hist"``'s and
        ``"pairwise"``'s, whose log predictions it averages (``_Blend``), fitted side by side
        in the workers lent (``use``)."""
        logs, groups = _log_labels(labels), np.array(self._groups)
        kinds = ("hist", "pairwise") if self.kind == "blend" else (self.kind,)
        fits = [(self._make(kind), rows, logs, weights, groups) for kind in kinds]
        tasks = self._tasks if len(fits) > 1 and self._tasks is not None and self._tasks.workers > 1 else None
        fitted = tasks.map(_fit_trees, fits) if tasks else [_fit_trees(*fit) for fit in fits]
        return fitted[0] if len(fitted) == 1 else _Blend(fitted)

    def _make(self, kind: Optional[str] = None):
        """Unfitted trees of ``kind`` (default: the model's own; not ``"blend"``, which is two
        models)."""
        kind = kind or self.kind
        if kind == "pairwise":
            return PairwiseBoosting(random_state=self.seed)
        if kind == "hist":
            from sklearn.ensemble import HistGradientBoostingRegressor
            # Small trees, many rounds (150 of 7 leaves at rate 0.1): with log labels they rank
            # better than fewer, larger trees, and stay cheap enough to refit after every batch
            # (bench/README.md, Design history).
            return HistGradientBoostingRegressor(max_iter=150, learning_rate=0.1, max_leaf_nodes=7,
                                                 min_samples_leaf=4, random_state=self.seed)
        if kind != "exact":
            raise ValueError(f"no trees of kind {kind!r}")
        from sklearn.ensemble import GradientBoostingRegressor
        return GradientBoostingRegressor(n_estimators=200, learning_rate=0.1, max_depth=4,
                                         subsample=0.8, random_state=self.seed)

    def predict(self, rows: np.ndarray) -> np.ndarray:
        if self._regressor is None or not len(rows):
            return self._fallback.predict(rows)
        return np.exp(self._regressor.predict(rows))

    @classmethod
    def from_database(cls, database: Database, workloads: Iterable[Workload],
                      target: Optional[Target] = None, kind: str = "blend", seed: int = 0,
                      most: Optional[int] = None) -> GBTModel:
        """A model trained on the records of ``workloads`` in ``database`` (``learn_records``)."""
        model = cls(kind, seed)
        learn_records(model, database, workloads, target, most)
        return model


def learn_records(model: CostModel, database: Database, workloads: Iterable[Workload],
                  target: Optional[Target] = None, most: Optional[int] = None) -> int:
    """Train ``model`` on the records of ``workloads`` in ``database`` (those of ``target``
    when given), at most ``most`` of each workload (None: all), spread evenly over the order
    they were measured in (a run's first, random programs and its last, tuned ones alike).
    Their traces are replayed and their rows made by the model's extractor, so records of any
    feature version serve; a record whose trace no longer replays is skipped. Returns how
    many it learned."""
    schedules, results = [], []
    for wl in workloads:
        records = database.records(wl, target)
        if most is not None and len(records) > most:
            records = [records[i] for i in np.linspace(0, len(records) - 1, most).round().astype(int)]
        for record in records:
            try:
                schedules.append(replay(wl, record.trace))
            except ScheduleError:
                continue
            results.append(Measured(wl.key, record.median if record.ok else None))
    if schedules:
        model.update(model.extractor.rows(schedules), results)
    return len(schedules)


def _fit_trees(trees, rows: np.ndarray, logs: np.ndarray, weights: Optional[np.ndarray],
               groups: np.ndarray) -> _LanesThenTrees:
    """Unfitted ``trees`` fitted after a line (``_LanesThenTrees.fit``) on one thread, in
    whichever process runs it: with a worker's twin on the other core, two threads each
    would wait for each other (see ``_LanesThenTrees.predict``)."""
    with _one_thread():
        return _LanesThenTrees(trees).fit(rows, logs, weights, groups)


class _Blend:
    """The mean of fitted models' predictions (log throughputs): ``GBTModel``'s ``"blend"``,
    regression trees' and ranking trees' (``PairwiseBoosting``) estimates averaged.

    Ranking trees alone order a run's programs better once there are hundreds of them, but
    worse fitted on its first few dozen, where the search leans on its model most: the mean
    keeps the regression's early picks and the ranking's later order (bench/README.md,
    Design history)."""

    def __init__(self, models: list) -> None:
        self.models = models

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return sum(model.predict(rows) for model in self.models) / len(self.models)


class _LanesThenTrees:
    """A line, then trees: the log throughput fitted first as a line in the main store's
    vectorized lanes (the ``vector_lanes`` column, log2 of 1 + lanes; slope at least 0),
    then ``trees`` fitted to what the line leaves; a prediction is the sum.

    The search asks most of its model while the model knows least: fitted on a run's first
    16 to 48 programs, it picks which of hundreds of candidates to measure, and trees fitted
    to a dozen points split on whatever separates them. The line carries the trend (wider
    vectors, faster) from the first fit, and the trees correct it as records arrive. A
    falling slope is held at 0: it would say narrower vectors run faster, which other
    columns decide, and the trees see them (bench/README.md, Design history)."""

    def __init__(self, trees) -> None:
        self.trees = trees
        self.slope, self.intercept = 0.0, 0.0
        self._tables: Optional[TreeTables] = None  # the trees as tables, where they are equal
        self._columns: Optional[np.ndarray] = None  # the columns the trees read (None: all)

    def fit(self, rows: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray] = None,
            groups: Optional[np.ndarray] = None) -> _LanesThenTrees:
        """Fitted to ``labels`` (log throughputs), each row counted by its weight (None: all
        alike); ranking trees (``PairwiseBoosting``) order the rows within each of ``groups``
        (the workloads; None: one)."""
        self.slope, self.intercept = rising_line(rows[:, _LANES].astype(float), labels, weights)
        ranking = isinstance(self.trees, PairwiseBoosting)
        self._columns = _varying_columns(rows) if ranking or isinstance(self.trees, _hist_regressor()) else None
        fitted = self._read(rows)
        if ranking:  # from the line, to the labels' order
            self.trees.fit(fitted, labels, self._line(rows), sample_weight=weights, groups=groups)
            return self
        self.trees.fit(fitted, labels - self._line(rows), sample_weight=weights)
        self._tables = TreeTables.of(self.trees, fitted)
        return self

    def _line(self, rows: np.ndarray) -> np.ndarray:
        return self.intercept + self.slope * rows[:, _LANES].astype(float)

    def _read(self, rows: np.ndarray) -> np.ndarray:
        """The columns of ``rows`` the trees read (all, for a model saved before this)."""
        columns = getattr(self, "_columns", None)
        return rows if columns is None else rows[:, columns]

    def predict(self, rows: np.ndarray) -> np.ndarray:
        if isinstance(self.trees, PairwiseBoosting):
            return self.trees.predict(self._read(rows), self._line(rows))
        tables = getattr(self, "_tables", None)  # a model saved before tables has none
        if tables is not None:
            return self._line(rows) + tables(self._read(rows))
        # One thread: a few hundred rows take a millisecond, while scikit-learn's OpenMP
        # threads, when the other core is busy (a worker, another program), wait for each
        # other at every tree and took 0.6 s per call.
        with _one_thread():
            return self._line(rows) + self.trees.predict(self._read(rows))


def _hist_regressor() -> type:
    from sklearn.ensemble import HistGradientBoostingRegressor
    return HistGradientBoostingRegressor


def _varying_columns(rows: np.ndarray) -> np.ndarray:
    """The columns whose values differ among ``rows`` (or hold a NaN), at least one: all the
    columns a ``HistGradientBoostingRegressor`` fitted on ``rows`` can split on. A
    workload's programs leave a third to a half of the columns constant, and the trees'
    histograms cost as much for those as for any other. Fitted on the others alone, the
    trees are the same (it draws no columns at random, and the split it takes is the first
    best in column order, which dropping columns that never split keeps), in less time
    (bench/README.md, Design history)."""
    varying = (rows != rows[0]).any(axis=0) | np.isnan(rows).any(axis=0)
    return np.flatnonzero(varying) if varying.any() else np.arange(1)


def _log_labels(labels: np.ndarray) -> np.ndarray:
    """What the trees fit: the log of the normalised throughput, so that a program twice as
    slow as another is one step apart anywhere in the range (as pairwise ranking counts it),
    and a failed program one step of e below the slowest that ran. Predictions are mapped
    back with ``exp``: scores stay predicted throughputs, which parent selection weighs by.

    Throughput itself crowded every slow program near 0, where the squared error cannot tell
    them apart, and half the pairs a ranking counts are among them (bench/README.md, Design
    history)."""
    ran = labels > 0
    logs = np.log(labels, where=ran, out=np.zeros_like(labels, dtype=float))
    return np.where(ran, logs, logs[ran].min() - 1.0)


_threadpools: Optional[ThreadpoolController] = None


def _one_thread():
    """A context that runs OpenMP and BLAS on one thread. The thread pools of the libraries
    loaded (scikit-learn's OpenMP among them, loaded before a model fits) are looked up once:
    a lookup takes milliseconds, and a search predicts many times a round."""
    global _threadpools
    if _threadpools is None:
        import sklearn.ensemble  # noqa: F401  (its OpenMP runtime, before the lookup)
        _threadpools = ThreadpoolController()
    return _threadpools.limit(limits=1)
