"""``EvolutionarySearch``: MetaSchedule's evolutionary search with a learned cost model
(apache/tvm ``evolutionary_search.cc``), in Python.

Each ``propose`` starts a population from the best programs measured so far
(``init_measured_ratio`` of it) and fresh samples of the space, then runs ``genetic_num_iters``
rounds: parents are drawn in proportion to the model's predicted score, mutated with probability
``genetic_mutate_prob`` (one decision changed, replayed and post-processed; a mutant that fails
is dropped) or kept. The best predicted programs seen in any round that were never measured are
proposed, at most ``max_family_share`` of them of one family (register tile and compute
locations) while other families have candidates, plus an ``eps_greedy`` share of fresh random
samples. Every measurement updates the model. The first proposal of a run with nothing
measured and a model that scores at random (``CostModel.informed``) runs no genetic rounds:
``first_prior_share`` of it is the most vectorized of a population of fresh samples, the rest
fresh samples.
``rounds`` keeps what each proposal did, for the tuning loop to print.

Candidates are made in batches by a ``scoring.Scorer`` (in the worker processes the tuner lends,
when it does): the random choices (seeds of fresh samples, parents, mutations) are all drawn
here, in order, so the same seed and measured times give the same proposals however the work is
split. A mutant already made in this run (the same parent and change) is not made again
(the last ``mutant_memory`` drawn are remembered: one forgotten is made again, the same).
"""
from __future__ import annotations

import dataclasses
import heapq
import math
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Optional, Sequence, Union

import numpy as np

from metasched.schedule import Trace
from metasched.search.cost_model import CostModel, GBTModel, Measured, ProgramFeatures, pairwise_accuracy
from metasched.search.features import FEATURE_NAMES
from metasched.search.mutator import MutatorSet, default_mutators
from metasched.search.scoring import Candidate, Scorer, collector_paused
from metasched.search.strategy import Proposal, SearchContext, SearchStrategy


# The main store's vectorized lanes in a candidate's row (``cost_model.program_features`` puts
# the main store's features first): what the first proposal of a run ranks by.
_LANES = FEATURE_NAMES.index("vector_lanes")

# A mutant's identity: its parent's ident (``Candidate.ident``) and the decisions the mutator changed.
MutantKey = tuple[Hashable, str]


def _family(trace: Trace) -> tuple:
    """A program's family: the innermost factor of each tiling in more than two levels (the
    register tile of the spatial loops, in ``MultiLevelTiling``'s spaces) and where each block
    is computed; programs that differ in their outer tiles, reduction tiles, unrolling or
    parallel extent are one family. (Keyed by the write cache's tile instead, it did no
    better: bench/README.md, Design history.)"""
    family = []
    for i, decision in sorted(trace.decisions.items()):
        if isinstance(decision, tuple) and len(decision) > 2:
            family.append((i, decision[-1]))
        elif trace[i].kind == "SampleComputeLocation":
            family.append((i, decision))
    return tuple(family)


def _families_spread(ranked: list, cap: int) -> list:
    """``ranked`` (best first; items ``(ident, (score, candidate))``) with the best ``cap`` of
    each family first, in rank order, then the rest in rank order. Programs with an empty
    family (no tiling in more than two levels, no compute location sampled) are not grouped:
    nothing says they are alike."""
    first, rest, seen = [], [], Counter()
    for item in ranked:
        family = _family(item[1][1].trace)
        (first if not family or seen[family] < cap else rest).append(item)
        seen[family] += 1
    return first + rest


def _saturated(wanted: int) -> int:
    """How many programs in a row, none of them new, tell that a space holds few programs
    not yet known, when ``wanted`` new ones are sought: ``wanted``, and at least 32, so that
    a search for a few does not give up on a few repeats (those of the built-in spaces come
    one or two at a time)."""
    return max(wanted, 32)


def _sized_config(batch: Optional[int], default_batch: int) -> EvolutionaryConfig:
    """The default configuration for proposals of ``batch`` programs: for fewer than
    ``default_batch``, a population smaller in proportion (at least ``init_min_unmeasured``),
    so that the search costs as much per measured program as at the default (MetaSchedule
    searches 8 candidates per program it measures: 512 for rounds of 64); never larger."""
    config = EvolutionaryConfig()
    if batch is None or batch >= default_batch:
        return config
    size = max(config.init_min_unmeasured, round(config.population_size * batch / default_batch))
    return dataclasses.replace(config, population_size=size)


def _mutant_key(parent: Candidate, trace: Trace) -> MutantKey:
    before = parent.trace.decisions
    return parent.ident, repr(sorted((i, d) for i, d in trace.decisions.items() if before.get(i) != d))


@dataclass(frozen=True)
class EvolutionaryConfig:
    """MetaSchedule's parameters, scaled to what Python affords per tuning round (its defaults:
    population 512, init_measured_ratio 0.2, init_min_unmeasured 50, genetic_num_iters 4,
    genetic_mutate_prob 0.85, genetic_max_fail_count 10, eps_greedy 0.05), and two of ours:

    ``max_family_share``: the most of a proposal that one family of programs (``_family``: the
    same register tile and compute locations) takes while the best predicted of other families
    are left (0: one of each before a second of any); 1.0 is MetaSchedule's way, the model's
    favourites taking all of it. A model fitted on a few dozen times favours the family of the
    fastest so far, and without the cap some runs spent every later proposal on it.

    ``first_prior_share``: the share of a run's first proposal (nothing measured, the model
    uninformed) picked as the most vectorized of ``population_size`` fresh samples (the
    ``vector_lanes`` feature of the main store, at most two of one family); the rest are
    fresh samples. A first round of random samples left some runs with nothing vectorized to
    start from, and the model, fitted on them, kept mutating poor programs.

    How the values were chosen: bench/README.md, Design history."""

    population_size: int = 128
    init_measured_ratio: float = 0.2
    init_min_unmeasured: int = 32
    genetic_num_iters: int = 3
    genetic_mutate_prob: float = 0.85
    genetic_max_fail_count: int = 10
    eps_greedy: float = 0.05
    max_family_share: float = 0.5
    first_prior_share: float = 0.5

    def __post_init__(self) -> None:
        if self.population_size < 1 or self.genetic_num_iters < 0 or self.genetic_max_fail_count < 1:
            raise ValueError("population_size and genetic_max_fail_count must be positive, "
                             "genetic_num_iters non-negative")
        for name in ("init_measured_ratio", "genetic_mutate_prob", "eps_greedy", "max_family_share",
                     "first_prior_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")


@dataclass
class Round:
    """What one ``propose`` did: programs generated (fresh samples and mutants), rejected by
    replay or postprocessors, scored by the model, proposed (of which ``random`` were fresh
    samples: the epsilon-greedy share, or in a run's first proposal those not picked for their
    vector lanes), and the model's pairwise accuracy on them once measured."""

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
    about as much as building and measuring 16 programs. Smaller batches refit the model more
    often and so exploit sooner, which helped some workloads and hurt others (bench/README.md,
    Design history). Without a ``config``, a tuner that measures fewer per proposal gets a
    population smaller in proportion (``_sized_config``)."""

    batch_size = 16
    # Mutants made in a run, remembered (least recently drawn forgotten first) so that one
    # drawn again is not made again: about 10 KB each, 340 made per proposal on conv2d, so
    # a run of 1,000 trials would otherwise keep ~200 MB of them.
    mutant_memory = 4096

    def __init__(self, config: Optional[EvolutionaryConfig] = None,
                 model: Optional[CostModel] = None, mutators: Optional[MutatorSet] = None) -> None:
        self._given_config = config
        self.config = config or EvolutionaryConfig()
        self.model = model if model is not None else GBTModel()
        self._given_mutators = mutators
        self.mutators = mutators
        self.rounds: list[Round] = []
        self._best_measured: list[tuple[float, Candidate]] = []
        self._mutants: OrderedDict[MutantKey, Optional[Candidate]] = OrderedDict()  # None: dropped
        # The idents of the programs measured or proposed that this search knows of: those of
        # ``context.measured`` (program keys) that it read or proposed. Candidates are told
        # apart by ident; a program measured that it does not know of is refused when claimed.
        self._measured: set = set()

    def start(self, context: SearchContext) -> None:
        super().start(context)
        self.config = self._given_config or _sized_config(context.batch_size, self.batch_size)
        self.mutators = self._given_mutators or default_mutators(context.workload)
        self.scorer = Scorer(context.workload, context.space, context.tasks, self.model.extractor)
        self.scorer.prepare()
        self.model.use(context.tasks)
        self.rounds, self._best_measured, self._mutants = [], [], OrderedDict()
        self._measured = set()
        # Resume: what the database knows of this workload trains the model and seeds the
        # population, as a run that never stopped would have it.
        earlier = context.earlier()
        if earlier:
            candidates, seconds = [self.scorer.candidate(sch) for sch, _ in earlier], [s for _, s in earlier]
            self._learn(candidates, seconds)
            self._measured.update(cand.ident for cand in candidates)
            self._remember(candidates, seconds)

    # --- scoring -----------------------------------------------------------------------------
    def _scores(self, population: Sequence[Candidate]) -> np.ndarray:
        if not population:
            return np.zeros(0)
        return np.asarray(self.model.predict(np.stack([c.row for c in population])), dtype=float)

    # --- the population ----------------------------------------------------------------------
    def _sample(self, count: int, round_: Round, exclude: set[str]) -> list[Candidate]:
        """Up to ``count`` fresh samples of new programs, in ``max_fail_count * count`` tries,
        or fewer in a small space: the draws stop after a pass (as many draws as programs
        still wanted) that ends on a run of ``_saturated`` programs all known already, where
        MetaSchedule draws on for ``max_fail_count`` passes without a new program. A draw a
        postprocessor rejected tells nothing of the space's size: it neither counts nor breaks
        the run."""
        ctx = self.context
        found: list[Candidate] = []
        tries = known = 0  # ``known``: programs made in a row since the last new one
        while len(found) < count and tries < count * self.config.genetic_max_fail_count:
            wanted = min(count - len(found), count * self.config.genetic_max_fail_count - tries)
            tries += wanted
            for cand in self.scorer.samples(ctx.rng.integers(2**63, size=wanted)):
                if cand is None:
                    round_.rejected += 1
                    continue
                round_.generated += 1
                known += 1
                if cand.ident not in exclude and cand.ident not in self._measured:
                    exclude.add(cand.ident)
                    found.append(cand)
                    known = 0
            if known >= _saturated(count):
                break
        return found

    def _first(self, count: int, round_: Round) -> tuple[list[Candidate], list[Candidate]]:
        """The first proposal's programs when nothing is measured and the model knows nothing:
        (picked and claimed, fresh). ``first_prior_share`` of them are picked from a
        population of fresh samples as the most vectorized (the main store's lanes, at most
        two of one family; one refused as a program measured or picked gives its place to the
        next), the rest are fresh samples: the others of that population, in the order drawn."""
        cfg = self.config
        prior = min(count, int(round(count * cfg.first_prior_share)))
        if not prior or not isinstance(self.model.extractor, ProgramFeatures):  # lanes unknown
            return [], self._sample(count, round_, set())
        pool = self._sample(max(count, cfg.population_size), round_, set())
        ranked = sorted(pool, key=lambda cand: -float(cand.row[_LANES]))  # stable: ties in sample order
        spread = _families_spread([(c.ident, (0.0, c)) for c in ranked], 2)
        picked = self._claimed((cand for _, (_, cand) in spread), prior)
        # The rest: those ``_claimed`` did not try (each one tried counts as measured).
        return picked, [cand for cand in pool if cand.ident not in self._measured]

    def _initial(self, round_: Round) -> list[Candidate]:
        cfg = self.config
        population = [cand for _, cand in self._best_measured]
        population = population[:int(cfg.population_size * cfg.init_measured_ratio)]
        idents = {cand.ident for cand in population}
        fresh = max(cfg.population_size - len(population), cfg.init_min_unmeasured)
        return population + self._sample(fresh, round_, idents)

    def _evolve(self, population: list[Candidate], scores: np.ndarray, round_: Round) -> list[Candidate]:
        """One genetic round: parents drawn by score, mutated or kept.

        Parents are drawn in proportion to their predicted scores, as MetaSchedule draws them.
        That pressure is weak, but a stronger one (scores cubed) did no better
        (bench/README.md, Design history)."""
        cfg, ctx = self.config, self.context
        weights = np.maximum(scores, 0.0) + 1e-6
        weights = weights / weights.sum()
        children: list[Candidate] = []
        seen: set[Hashable] = set()
        tries, most = 0, cfg.population_size * cfg.genetic_max_fail_count
        # Draws in a row that gave no new child: a repeat, a dropped mutant, a parent no mutator
        # could change. Unlike ``_sample``'s rejections these count: a population whose
        # neighbourhood gives nothing new in that many draws is spent, whatever the reason.
        stale = 0
        while len(children) < cfg.population_size and tries < most:
            wanted = min(cfg.population_size - len(children), most - tries)
            tries += wanted
            # Each draw is a kept parent, the identity of a mutant (made below, in one batch,
            # unless made before) or None (no mutator found a decision to change).
            draws: list[Union[Candidate, MutantKey, None]] = []
            todo: dict[MutantKey, Trace] = {}
            for _ in range(wanted):
                parent = population[int(ctx.rng.choice(len(population), p=weights))]
                if ctx.rng.random() >= cfg.genetic_mutate_prob:
                    draws.append(parent)
                    continue
                trace = self.mutators.mutate(parent.trace, ctx.rng)
                if trace is None:
                    draws.append(None)
                    continue
                key = _mutant_key(parent, trace)
                if key in self._mutants:
                    self._mutants.move_to_end(key)
                else:
                    todo.setdefault(key, trace)
                draws.append(key)
            for key, mutant in zip(todo, self.scorer.mutants(list(todo.values()))):
                self._mutants[key] = mutant
                if mutant is None:
                    round_.rejected += 1
                else:
                    round_.generated += 1
            for draw in draws:
                child = self._mutants[draw] if isinstance(draw, tuple) else draw
                stale += 1
                if child is not None and child.ident not in seen:
                    seen.add(child.ident)
                    children.append(child)
                    stale = 0
            while len(self._mutants) > self.mutant_memory:  # the draws are resolved: forget
                self._mutants.popitem(last=False)
            if stale >= _saturated(cfg.population_size):  # a small space, as in ``_sample``
                break
        return children or population

    # --- the strategy ------------------------------------------------------------------------
    def propose(self, count: int) -> list[Candidate]:
        with collector_paused():
            return self._propose(count)

    def _propose(self, count: int) -> list[Candidate]:
        cfg = self.config
        round_ = Round()
        self.rounds.append(round_)
        if not self._best_measured and not self.model.informed:
            # Nothing measured yet and scores drawn at random (an untrained model): genetic
            # rounds would shuffle random samples at random. The most vectorized samples and
            # fresh ones are a better first proposal for a fraction of the work.
            picked, fresh = self._first(count, round_)
            round_.predicted.extend(float(score) for score in self._scores(picked))
            return self._proposal(picked, self._new_programs(count - len(picked), fresh, round_), round_)
        population = self._initial(round_)
        # The best predicted programs of any genetic round, never measured: ident -> (score, candidate).
        best: dict[Hashable, tuple[float, Candidate]] = {}
        for iteration in range(cfg.genetic_num_iters + 1):
            if not population:
                break
            scores = self._scores(population)
            round_.scored += len(population)
            for cand, score in zip(population, scores):
                if cand.ident not in self._measured:
                    best[cand.ident] = (float(score), cand)
            if iteration < cfg.genetic_num_iters:
                population = self._evolve(population, scores, round_)
        n_random = min(count, int(round(count * cfg.eps_greedy)))
        ranked = heapq.nlargest(len(best), best.items(), key=lambda kv: kv[1][0])
        cap = max(1, math.ceil(cfg.max_family_share * count))
        spread = _families_spread(ranked, cap) if cap < count else ranked
        chosen = self._claimed((cand for _, (_, cand) in spread), count - n_random)
        round_.predicted.extend(best[cand.ident][0] for cand in chosen)
        return self._proposal(chosen, self._new_programs(count - len(chosen), [], round_), round_)

    def _claim(self, cand: Candidate) -> bool:
        """Whether ``cand`` is a new program (``SearchContext.claim_program``: by program key
        and loop program); either way it is measured or proposed from now on."""
        self._measured.add(cand.ident)
        return self.context.claim_program(cand.key, cand.program)

    def _claimed(self, candidates: Iterable[Candidate], count: int) -> list[Candidate]:
        """The first ``count`` of ``candidates`` that are new programs, in order (``_claim``);
        those after the last one taken are not tried."""
        found: list[Candidate] = []
        for cand in candidates:
            if len(found) == count:
                break
            if self._claim(cand):
                found.append(cand)
        return found

    def _new_programs(self, count: int, pool: list[Candidate], round_: Round) -> list[Candidate]:
        """Up to ``count`` fresh samples, claimed (``_claimed``): those of ``pool`` first, in
        order, then new draws. A sample can be refused as a program measured that this search
        did not know of by its ident (``SearchContext.measured`` holds keys, and without a
        database the search knows no idents; or its loop program is another's): more are drawn
        in its place, so that such programs do not shorten the proposal."""
        found = self._claimed(pool, count)
        for _ in range(self.config.genetic_max_fail_count):
            if len(found) == count:
                break
            drawn = self._sample(count - len(found), round_, set())
            if not drawn:
                break
            found += self._claimed(drawn, count - len(found))
        return found

    def _proposal(self, chosen: list[Candidate], extra: list[Candidate], round_: Round) -> list[Candidate]:
        """The proposal: the ``chosen`` candidates (their scores already in ``round_``) and the
        fresh samples ``extra``, all claimed."""
        round_.predicted.extend(float(s) for s in self._scores(extra))
        round_.random = len(extra)
        round_.proposed = len(chosen) + len(extra)
        return chosen + extra

    def notify(self, proposals: Sequence[Proposal], seconds: Sequence[Optional[float]]) -> None:
        candidates = [p if isinstance(p, Candidate) else self.scorer.candidate(p) for p in proposals]
        self._learn(candidates, seconds)
        self._measured.update(cand.ident for cand in candidates)
        self._remember(candidates, seconds)
        if self.rounds and len(self.rounds[-1].predicted) == len(seconds) > 1:
            throughput = [0.0 if s is None else 1.0 / s for s in seconds]
            self.rounds[-1].accuracy = pairwise_accuracy(throughput, self.rounds[-1].predicted)

    def _learn(self, candidates: Sequence[Candidate], seconds: Sequence[Optional[float]]) -> None:
        """The model learns the measured candidates from the rows they carry."""
        key = self.context.workload.key
        self.model.update(np.stack([c.row for c in candidates]), [Measured(key, s) for s in seconds])

    def _remember(self, candidates: Sequence[Candidate], seconds: Sequence[Optional[float]]) -> None:
        for cand, s in zip(candidates, seconds):
            if s is not None:
                self._best_measured.append((s, cand))
        self._best_measured.sort(key=lambda t: t[0])
        keep = max(1, int(self.config.population_size * self.config.init_measured_ratio))
        del self._best_measured[keep:]
