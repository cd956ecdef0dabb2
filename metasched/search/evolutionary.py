"""``EvolutionarySearch``: MetaSchedule's evolutionary search with a learned cost model
(apache/tvm ``evolutionary_search.cc``), in Python.

Each ``propose`` starts a population from the best programs measured so far
(``init_measured_ratio`` of it) and fresh samples of the space, then runs ``genetic_num_iters``
rounds: parents are drawn in proportion to the model's predicted score, mutated with probability
``genetic_mutate_prob`` (one decision changed, replayed and post-processed; a mutant that fails
is dropped) or kept. The best predicted programs seen in any round that were never measured are
proposed, plus an ``eps_greedy`` share of fresh random samples. Every measurement updates the
model. ``rounds`` keeps what each proposal did, for the tuning loop to print.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from metasched.database import program_key
from metasched.errors import ScheduleError
from metasched.schedule import Schedule, replay
from metasched.search.cost_model import CostModel, GBTModel, pairwise_accuracy, program_features
from metasched.search.mutators import MutatorSet, apply_mutant, default_mutators
from metasched.search.strategy import SearchContext, SearchStrategy


@dataclass(frozen=True)
class EvolutionaryConfig:
    """MetaSchedule's parameters, scaled to what Python affords per tuning round (its defaults:
    population 512, init_measured_ratio 0.2, init_min_unmeasured 50, genetic_num_iters 4,
    genetic_mutate_prob 0.85, genetic_max_fail_count 10, eps_greedy 0.05)."""

    population_size: int = 128
    init_measured_ratio: float = 0.2
    init_min_unmeasured: int = 32
    genetic_num_iters: int = 3
    genetic_mutate_prob: float = 0.85
    genetic_max_fail_count: int = 10
    eps_greedy: float = 0.05

    def __post_init__(self) -> None:
        if self.population_size < 1 or self.genetic_num_iters < 0 or self.genetic_max_fail_count < 1:
            raise ValueError("population_size and genetic_max_fail_count must be positive, "
                             "genetic_num_iters non-negative")
        for name in ("init_measured_ratio", "genetic_mutate_prob", "eps_greedy"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")


@dataclass
class Round:
    """What one ``propose`` did: programs generated (fresh samples and mutants), rejected by
    replay or postprocessors, scored by the model, proposed (of which ``random`` were the
    epsilon-greedy share), and the model's pairwise accuracy on them once measured."""

    generated: int = 0
    rejected: int = 0
    scored: int = 0
    proposed: int = 0
    random: int = 0
    accuracy: Optional[float] = None
    predicted: list[float] = field(default_factory=list, repr=False)

    def __str__(self) -> str:
        accuracy = "-" if self.accuracy is None else f"{self.accuracy:.2f}"
        return (f"generated {self.generated}, rejected {self.rejected}, scored {self.scored}, "
                f"measuring {self.proposed} ({self.random} random), model accuracy {accuracy}")


class EvolutionarySearch(SearchStrategy):
    """Evolutionary search guided by ``model`` (default: ``GBTModel()``), with ``config``;
    ``mutators`` default to MetaSchedule's mix for the workload (``default_mutators``). It
    asks for batches of 16 (MetaSchedule measures 64 per round): one round of search costs
    about as much as building and measuring 16 programs."""

    batch_size = 16

    def __init__(self, config: Optional[EvolutionaryConfig] = None,
                 model: Optional[CostModel] = None, mutators: Optional[MutatorSet] = None) -> None:
        self.config = config or EvolutionaryConfig()
        self.model = model if model is not None else GBTModel()
        self._given_mutators = mutators
        self.mutators = mutators
        self.rounds: list[Round] = []
        self._best_measured: list[tuple[float, Schedule]] = []
        self._rows: dict[str, np.ndarray] = {}  # program key -> program_features

    def start(self, context: SearchContext) -> None:
        super().start(context)
        self.mutators = self._given_mutators or default_mutators(context.workload)
        self.rounds = []
        self._best_measured = []
        if context.database is not None:
            # Resume: what the database knows of this workload trains the model and seeds
            # the population, as a run that never stopped would have it.
            schedules, seconds = [], []
            for record in context.database.records(context.workload, context.target):
                try:
                    sch = replay(context.workload, record.trace)
                except ScheduleError:
                    continue
                schedules.append(sch)
                seconds.append(record.median)
            if schedules:
                self.model.update(schedules, seconds)
                self._remember(schedules, seconds)

    # --- scoring -----------------------------------------------------------------------------
    def _row(self, key: str, sch: Schedule) -> np.ndarray:
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = program_features(sch)
        return row

    def _scores(self, population: list[tuple[str, Schedule]]) -> np.ndarray:
        if not population:
            return np.zeros(0)
        if isinstance(self.model, GBTModel):
            rows = np.stack([self._row(key, sch) for key, sch in population])
            return self.model.predict_rows(rows)
        return self.model.predict([sch for _, sch in population])

    # --- the population ----------------------------------------------------------------------
    def _sample(self, count: int, round_: Round, exclude: set[str]) -> list[tuple[str, Schedule]]:
        """Up to ``count`` fresh samples of new programs, in ``max_fail_count * count`` tries."""
        ctx = self.context
        found: list[tuple[str, Schedule]] = []
        for _ in range(count * self.config.genetic_max_fail_count):
            if len(found) == count:
                break
            try:
                sch = ctx.space.sample(ctx.workload, ctx.rng)
            except ScheduleError:
                round_.rejected += 1
                continue
            round_.generated += 1
            key = program_key(sch.trace)
            if key not in exclude and key not in ctx.measured:
                exclude.add(key)
                found.append((key, sch))
        return found

    def _initial(self, round_: Round) -> list[tuple[str, Schedule]]:
        cfg = self.config
        measured = [sch for _, sch in sorted(self._best_measured, key=lambda t: t[0])]
        measured = measured[:int(cfg.population_size * cfg.init_measured_ratio)]
        population = [(program_key(sch.trace), sch) for sch in measured]
        keys = {key for key, _ in population}
        fresh = max(cfg.population_size - len(population), cfg.init_min_unmeasured)
        return population + self._sample(fresh, round_, keys)

    def _evolve(self, population: list[tuple[str, Schedule]], scores: np.ndarray,
                round_: Round) -> list[tuple[str, Schedule]]:
        """One genetic round: parents drawn by score, mutated or kept."""
        cfg, ctx = self.config, self.context
        weights = np.maximum(scores, 0.0) + 1e-6
        weights = weights / weights.sum()
        children: list[tuple[str, Schedule]] = []
        seen: set[str] = set()
        for _ in range(cfg.population_size * cfg.genetic_max_fail_count):
            if len(children) == cfg.population_size:
                break
            key, parent = population[int(ctx.rng.choice(len(population), p=weights))]
            if ctx.rng.random() >= cfg.genetic_mutate_prob:
                child = (key, parent)
            else:
                trace = self.mutators.mutate(parent.trace, ctx.rng)
                if trace is None:
                    continue
                sch = apply_mutant(ctx.workload, trace, ctx.space)
                if sch is None:
                    round_.rejected += 1
                    continue
                round_.generated += 1
                child = (program_key(sch.trace), sch)
            if child[0] not in seen:
                seen.add(child[0])
                children.append(child)
        return children or population

    # --- the strategy ------------------------------------------------------------------------
    def propose(self, count: int) -> list[Schedule]:
        cfg, ctx = self.config, self.context
        round_ = Round()
        self.rounds.append(round_)
        population = self._initial(round_)
        # The best predicted programs of any genetic round, never measured: (score, order, key, sch).
        best: dict[str, tuple[float, Schedule]] = {}
        for iteration in range(cfg.genetic_num_iters + 1):
            if not population:
                break
            scores = self._scores(population)
            round_.scored += len(population)
            for (key, sch), score in zip(population, scores):
                if key not in ctx.measured:
                    best[key] = (float(score), sch)
            if iteration < cfg.genetic_num_iters:
                population = self._evolve(population, scores, round_)
        n_random = min(count, int(round(count * cfg.eps_greedy)))
        chosen: list[Schedule] = []
        for key, (score, sch) in heapq.nlargest(len(best), best.items(), key=lambda kv: kv[1][0]):
            if len(chosen) == count - n_random:
                break
            if ctx.claim(sch):
                chosen.append(sch)
                round_.predicted.append(score)
        for key, sch in self._sample(count - len(chosen), round_, set()):
            if ctx.claim(sch):
                chosen.append(sch)
                round_.random += 1
                round_.predicted.append(float(self._scores([(key, sch)])[0]))
        round_.proposed = len(chosen)
        return chosen

    def notify(self, schedules: Sequence[Schedule], seconds: Sequence[Optional[float]]) -> None:
        self.model.update(schedules, seconds)
        self._remember(schedules, seconds)
        if self.rounds and len(self.rounds[-1].predicted) == len(seconds) > 1:
            throughput = [0.0 if s is None else 1.0 / s for s in seconds]
            self.rounds[-1].accuracy = pairwise_accuracy(throughput, self.rounds[-1].predicted)

    def _remember(self, schedules: Sequence[Schedule], seconds: Sequence[Optional[float]]) -> None:
        for sch, s in zip(schedules, seconds):
            if s is not None:
                self._best_measured.append((s, sch))
        self._best_measured.sort(key=lambda t: t[0])
        keep = max(1, int(self.config.population_size * self.config.init_measured_ratio))
        del self._best_measured[keep:]
