"""The cost model learns a ranking, saves and loads, warm-starts from a database; evolutionary
search is deterministic for the same seed and measured times, never proposes a program twice,
and finds better programs than random samples under a model that knows the answer."""
import dataclasses

import numpy as np
import pytest

from metasched import Database, replay, tune, workloads
from metasched.database import program_key
from metasched.errors import ScheduleError
from metasched.ir import func_digest
from metasched.measure.runner import RunResult
from metasched.search import (
    EvolutionaryConfig, EvolutionarySearch, GBTModel, RandomModel, SearchContext, evolutionary, pairwise_accuracy,
)
from metasched.search.cost_model import (
    MIN_TRAINING_PROGRAMS, CostModel, FeatureExtractor, _log_labels, program_features,
)
from metasched.search.evolutionary import Round
from metasched.search.features import FEATURE_NAMES
from metasched.space import cpu_default

SIZES = dict(M=64, N=64, K=64)
SMALL = EvolutionaryConfig(population_size=24, init_min_unmeasured=8, genetic_num_iters=2)


@pytest.fixture(scope="module")
def wl():
    return workloads.get("matmul_relu", **SIZES)


def _samples_of(wl, count):
    out, seed = [], 0
    while len(out) < count:
        try:
            out.append(cpu_default().sample(wl, seed))
        except ScheduleError:
            pass
        seed += 1
    return out


@pytest.fixture(scope="module")
def samples(wl):
    return _samples_of(wl, 100)


_WEIGHTS = np.random.default_rng(0).uniform(-1, 1, 4096)


def fake_seconds(sch) -> float:
    """A made-up but learnable run time: a fixed linear function of the program's features."""
    row = program_features(sch)
    return float(1e-3 * np.exp(0.05 * row @ _WEIGHTS[:len(row)]))


class SecondsExtractor(FeatureExtractor):
    """A row of one number: the program's made-up time (for models that know the answer)."""

    version = "fake-seconds"

    def __call__(self, sch):
        return np.array([fake_seconds(sch)])


@dataclasses.dataclass
class FamilyExtractor(FeatureExtractor):
    """A row of two numbers: whether the program is of the ``favourite`` family, and its
    made-up time."""

    favourite: tuple
    version = "family"

    def __call__(self, sch):
        return np.array([float(evolutionary._family(sch.trace) == self.favourite), fake_seconds(sch)])


def test_pairwise_accuracy():
    assert pairwise_accuracy([1, 2, 3], [10, 20, 30]) == 1.0
    assert pairwise_accuracy([1, 2, 3], [30, 20, 10]) == 0.0
    assert pairwise_accuracy([1, 1, 2], [0, 5, 1]) == pytest.approx(0.5)  # the tie is left out
    assert pairwise_accuracy([1, 1], [0, 1]) == 1.0


def test_the_model_learns_a_ranking_and_keeps_failures_as_negatives(samples):
    train, test = samples[:70], samples[70:]
    model = GBTModel()
    assert len(model.score(train[:3])) == 3  # untrained: random scores
    seconds = [fake_seconds(s) for s in train]
    seconds[0] = None  # a failed candidate
    model.learn(train, seconds)
    assert len(model) == 70 and model.labels()[0] == 0.0 and model.labels().max() == 1.0
    truth = [1 / fake_seconds(s) for s in test]
    learned = pairwise_accuracy(truth, model.score(test))
    chance = pairwise_accuracy(truth, RandomModel(1).score(test))
    assert learned > 0.7 and learned > chance + 0.1


def test_the_trees_fit_log_throughput_and_scores_stay_throughputs(samples):
    # Normalised throughputs 1, 1/2, 1/4 and a failure: the logs are evenly spaced, and the
    # failure sits one step of e below the slowest program that ran.
    logs = _log_labels(np.array([1.0, 0.5, 0.25, 0.0]))
    assert logs[:3] == pytest.approx(np.log([1.0, 0.5, 0.25]))
    assert logs[3] == pytest.approx(np.log(0.25) - 1)
    model = GBTModel()
    model.learn(samples[:70], [fake_seconds(s) for s in samples[:70]])
    scores = model.score(samples[70:])
    # exp of the fitted logs: positive, at most about the best (1), as parent selection
    # weighs candidates by score.
    assert np.all(scores > 0) and scores.max() < 1.5


def test_a_model_scores_at_random_until_it_has_enough_programs(samples):
    model = GBTModel(seed=3)
    model.learn(samples[:MIN_TRAINING_PROGRAMS - 1], [1e-3] * (MIN_TRAINING_PROGRAMS - 1))
    first = model.score(samples[:5])
    assert np.all((0 <= first) & (first < 1))  # the seeded random fallback


def test_save_and_load(tmp_path, samples):
    model = GBTModel("exact")
    model.learn(samples[:30], [fake_seconds(s) for s in samples[:30]])
    model.save(tmp_path / "model.pkl")
    loaded = CostModel.load(tmp_path / "model.pkl")
    np.testing.assert_array_equal(loaded.score(samples[30:]), model.score(samples[30:]))
    (tmp_path / "junk.pkl").write_bytes(b"\x80\x04K\x01.")  # a pickled 1
    with pytest.raises(ValueError, match="no metasched cost model"):
        CostModel.load(tmp_path / "junk.pkl")


def test_a_model_warm_starts_from_another_workloads_records(tmp_path, samples, wl):
    from metasched.tune import host_target
    target = host_target()
    with Database(tmp_path / "db.sqlite") as db:
        db.add_workload(wl)
        for sch in samples[:40]:
            db.commit(wl, sch.trace, target=target, seconds=[fake_seconds(sch)])
        model = GBTModel.from_database(db, [wl], target)
        spread = GBTModel.from_database(db, [wl], target, most=5)  # the 1st, 11th, 21st, 30th and 40th
        assert GBTModel.from_database(db, [wl], target, most=40)._seconds == model._seconds
    assert len(model) == 40
    assert spread._seconds == [fake_seconds(samples[i]) for i in (0, 10, 20, 29, 39)]
    other = workloads.get("matmul_relu", M=64, N=32, K=64)
    others = []
    for seed in range(40):
        try:
            others.append(cpu_default().sample(other, seed))
        except ScheduleError:
            pass
    truth = [1 / fake_seconds(s) for s in others]
    assert pairwise_accuracy(truth, model.score(others)) > 0.6


class FakeRunner:
    """Times a 'kernel' by ``fake_seconds`` of its replayed program: deterministic."""

    def start(self):
        pass

    def close(self):
        pass

    def run(self, workload, artifacts, best=None):
        from metasched import replay
        return [RunResult((fake_seconds(replay(workload, trace)),) * 3, None) for trace in artifacts]


def evolutionary_run(wl, builder, seed, trials=24):
    search = EvolutionarySearch(SMALL)
    result = tune(wl, trials=trials, seed=seed, strategy=search, builder=builder, runner=FakeRunner(),
                  batch_size=8)
    return result, search


def test_the_same_seed_and_times_give_the_same_proposals(wl, fake_builder):
    first, search = evolutionary_run(wl, fake_builder, seed=4)
    again, _ = evolutionary_run(wl, fake_builder, seed=4)
    other, _ = evolutionary_run(wl, fake_builder, seed=5)
    keys = [program_key(t.trace) for t in first.history]
    assert keys == [program_key(t.trace) for t in again.history]
    assert keys != [program_key(t.trace) for t in other.history]
    assert len(set(keys)) == len(keys)  # never the same program twice
    assert len(search.rounds) == 3 and all(r.proposed == 8 for r in search.rounds)
    assert len(first.rounds) == 3 and "generated" in first.rounds[0]


def test_a_search_forgets_old_mutants_and_proposes_the_same(wl, fake_builder, monkeypatch):
    remembered, _ = evolutionary_run(wl, fake_builder, seed=4)
    monkeypatch.setattr(EvolutionarySearch, "mutant_memory", 8)
    forgetful, search = evolutionary_run(wl, fake_builder, seed=4)
    assert len(search._mutants) <= 8
    # A forgotten mutant drawn again is made again, the same program: the proposals agree.
    assert [program_key(t.trace) for t in forgetful.history] == [program_key(t.trace) for t in remembered.history]
    assert sum(r.generated for r in search.rounds) > 0


def test_a_first_proposal_without_information_is_vectorized_picks_and_fresh_samples(wl, samples):
    def first_round(model, config=SMALL):
        search = EvolutionarySearch(config, model=model)
        search.start(SearchContext(wl, cpu_default(), np.random.default_rng(0)))
        assert len(search.propose(8)) == 8
        return search.rounds[0]

    blind = first_round(GBTModel())  # untrained: scores at random, no genetic rounds
    picked = round(8 * SMALL.first_prior_share)
    assert 0 < picked < 8
    assert (blind.scored, blind.random, blind.generated) == (0, 8 - picked, SMALL.population_size)
    plain = first_round(GBTModel(), dataclasses.replace(SMALL, first_prior_share=0.0))
    assert (plain.scored, plain.random, plain.generated) == (0, 8, 8)  # fresh samples only
    trained = GBTModel()
    trained.learn(samples[:40], [fake_seconds(s) for s in samples[:40]])
    assert trained.informed and not GBTModel().informed and not RandomModel().informed
    guided = first_round(trained)
    assert guided.scored > SMALL.population_size and guided.random < 8


def test_the_first_picks_are_the_most_vectorized_samples(wl):
    """A first proposal all picked (share 1.0) from the population of fresh samples that the
    same seed draws: on average more vector lanes than that population, the most vectorized
    sample among them."""
    config = dataclasses.replace(SMALL, first_prior_share=1.0, population_size=32)
    lanes = FEATURE_NAMES.index("vector_lanes")

    def search_with(config):
        search = EvolutionarySearch(config, model=GBTModel())
        search.start(SearchContext(wl, cpu_default(), np.random.default_rng(3)))
        return search

    picked = [float(cand.row[lanes]) for cand in search_with(config).propose(8)]
    # The first draw of a search from the same seed: the population the picks came from.
    population = sorted((float(c.row[lanes]) for c in search_with(config)._sample(32, Round(), set())),
                        reverse=True)
    assert len(set(population)) > 1  # the samples differ in lanes, so a pick can show
    assert np.mean(picked) > np.mean(population)
    assert max(picked) == population[0]


def test_a_model_that_knows_the_answer_beats_random_search(wl, fake_builder):
    class Oracle(CostModel):
        extractor = SecondsExtractor()  # the row is the made-up time itself

        def update(self, rows, results):
            pass

        def predict(self, rows):
            return 1 / rows[:, 0]

    guided = tune(wl, trials=16, seed=2, strategy=EvolutionarySearch(SMALL, model=Oracle()),
                  builder=fake_builder, runner=FakeRunner(), batch_size=8)
    rand = tune(wl, trials=16, seed=2, strategy="replay", builder=fake_builder, runner=FakeRunner(),
                batch_size=8)
    assert guided.best_seconds < rand.best_seconds


def test_search_resumes_from_a_database_without_repeating(tmp_path, wl, fake_builder):
    path = tmp_path / "db.sqlite"
    first = tune(wl, trials=8, database=path, seed=1, strategy=EvolutionarySearch(SMALL),
                 builder=fake_builder, runner=FakeRunner())
    search = EvolutionarySearch(SMALL)
    rest = tune(wl, trials=16, database=path, seed=1, strategy=search, builder=fake_builder, runner=FakeRunner())
    assert len(rest.history) == 8 and len(search.model) >= 8  # trained on the first run's records
    keys = [program_key(t.trace) for t in first.history + rest.history]
    assert len(set(keys)) == 16


def test_the_context_refuses_what_was_measured(wl, samples):
    import numpy as np
    ctx = SearchContext(wl, cpu_default(), np.random.default_rng(0))
    assert ctx.claim(samples[0]) and not ctx.claim(samples[0])


def test_the_context_refuses_a_kernel_measured_under_other_decisions(tiny_add, tmp_path, fake_builder):
    """The 8-element add's traces differ (unroll and parallel decisions) but lower to one
    kernel: once one is claimed the others are refused, and so they are in a later run that
    reads the database."""
    keyed = {program_key(sch.trace): sch for sch in _samples_of(tiny_add, 40)}
    assert len(keyed) > 2 and len({func_digest(sch.lower()) for sch in keyed.values()}) == 1
    first, *others = keyed.values()
    ctx = SearchContext(tiny_add, cpu_default(), np.random.default_rng(0))
    assert ctx.claim(first) and not any(ctx.claim(sch) for sch in others)
    assert ctx.repeated == len(others) and ctx.measured == {program_key(first.trace)}

    path = tmp_path / "tiny.db"
    tune(tiny_add, trials=1, database=path, seed=0, strategy="replay", builder=fake_builder, runner=FakeRunner())
    with Database(path) as db:
        (record,) = db.records(tiny_add)
        later = SearchContext(tiny_add, cpu_default(), np.random.default_rng(0), {record.program}, db)
        assert not any(later.claim(sch) for sch in keyed.values())
        assert [sch.trace for sch, _ in later.earlier()] == [record.trace]


@pytest.mark.parametrize("strategy", ["evolutionary", "replay"])
def test_every_program_a_search_measures_is_a_new_kernel(strategy, fake_builder):
    """reduce_cols: a third of its samples are the kernel of another sample (an unroll depth
    past its loops, say); 48 trials of evolutionary search measured 32 kernels before."""
    wl = workloads.get("reduce_cols")
    search = EvolutionarySearch(SMALL) if strategy == "evolutionary" else strategy
    result = tune(wl, trials=48, seed=0, strategy=search, builder=fake_builder, runner=FakeRunner(), batch_size=8)
    digests = [func_digest(replay(wl, trial.trace).lower()) for trial in result.history]
    assert len(digests) == 48 and len(set(digests)) == 48


def test_programs_measured_that_the_search_does_not_know_of_do_not_shorten_a_proposal(wl):
    """A context told of measured programs by their keys alone (no database, so the search
    knows no idents of them): the samples that turn out to be those programs are refused,
    and others are drawn in their place."""
    def first_proposal(measured, first_prior_share):
        config = dataclasses.replace(SMALL, first_prior_share=first_prior_share)
        ctx = SearchContext(wl, cpu_default(), np.random.default_rng(0), measured=set(measured))
        search = EvolutionarySearch(config, model=GBTModel())
        search.start(ctx)
        return [program_key(sch.trace) for sch in search.propose(8)], ctx

    for share in (0.0, 0.5):  # fresh samples only; half picked for their lanes, then fresh ones
        before, _ = first_proposal(set(), share)
        assert len(before) == 8
        measured = set(before[-4:])  # the same seed draws them again
        after, ctx = first_proposal(measured, share)
        assert len(after) == 8 and len(set(after)) == 8 and not measured & set(after)
        assert ctx.repeated == 4 and after[:4] == before[:4]


def test_a_family_is_the_register_tile_and_where_blocks_are_computed(samples):
    from metasched.search.evolutionary import _family
    trace = samples[0].trace
    tiles = [i for i, d in trace.decisions.items() if isinstance(d, tuple) and len(d) > 2]
    assert tiles
    i = tiles[0]
    factors = trace.decisions[i]
    outer_moved = (factors[1], factors[0], *factors[2:])  # the outer tiles swapped
    assert _family(trace.with_decision(i, outer_moved)) == _family(trace)
    inner_moved = (*factors[:-2], factors[-1], factors[-2])
    assert (_family(trace.with_decision(i, inner_moved)) == _family(trace)) == (factors[-1] == factors[-2])


def test_a_proposal_holds_at_most_its_share_of_one_family_while_others_are_scored(wl, samples):
    from collections import Counter

    from metasched.search.evolutionary import _family
    favourite = Counter(_family(s.trace) for s in samples).most_common(1)[0][0]  # likely drawn again

    class FamilyFan(CostModel):
        """Scores the programs of one family far above all others (a model fitted on a few
        times tends that way), and ranks within each by the made-up times."""

        extractor = FamilyExtractor(favourite)

        def update(self, rows, results):
            pass

        def predict(self, rows):
            return np.where(rows[:, 0] > 0, 10.0, 1.0) / (1 + rows[:, 1])

    model = FamilyFan()

    def proposal(share):
        search = EvolutionarySearch(EvolutionaryConfig(population_size=48, init_min_unmeasured=16,
                                                       genetic_num_iters=2, eps_greedy=0.0,
                                                       max_family_share=share), model=model)
        search.start(SearchContext(wl, cpu_default(), np.random.default_rng(3)))
        return Counter(_family(sch.trace) for sch in search.propose(8))

    assert proposal(1.0)[favourite] > 2  # unlimited, the model's favourite family takes more
    capped = proposal(0.25)  # two of eight
    assert sum(capped.values()) == 8 and max(capped.values()) <= 2
    assert max(proposal(0.0).values()) == 1  # one of each family first
    with pytest.raises(ValueError, match="max_family_share"):
        EvolutionaryConfig(max_family_share=1.5)


def test_the_spread_puts_each_familys_best_first_and_leaves_programs_without_one_alone(samples):
    from metasched.schedule import Trace
    from metasched.search.evolutionary import _families_spread, _family
    from metasched.search.scoring import Candidate

    def item(k, trace):
        return f"p{k}", (1.0 - k / 100, Candidate(f"p{k}", trace, np.zeros(1), f"program {k}"))

    a, b = samples[0].trace, next(s.trace for s in samples if _family(s.trace) != _family(samples[0].trace))
    ranked = [item(0, a), item(1, a), item(2, Trace()), item(3, a), item(4, b), item(5, Trace()), item(6, Trace())]
    assert [key for key, _ in _families_spread(ranked, 1)] == ["p0", "p2", "p4", "p5", "p6", "p1", "p3"]
    assert [key for key, _ in _families_spread(ranked, 2)] == ["p0", "p1", "p2", "p4", "p5", "p6", "p3"]
    assert _families_spread(ranked, len(ranked)) == ranked  # a share no family reaches: the rank order


def test_a_small_space_is_searched_whole_without_drawing_it_over_and_over(tiny_add, fake_builder, monkeypatch):
    """An 8-element add: a space of five traces (unroll and parallel decisions) that are all
    one kernel. Tuning it for more trials measures that kernel once and stops; the draws stop
    once a long run of them finds nothing new, at under a quarter of what the draws' limits
    allow, and find the same all the same."""
    def run():
        search = EvolutionarySearch()
        result = tune(tiny_add, trials=64, seed=0, strategy=search, builder=fake_builder, runner=FakeRunner(),
                      batch_size=2, confirm=0)
        return {program_key(t.trace) for t in result.history}, search.rounds

    found, rounds = run()
    monkeypatch.setattr(evolutionary, "_saturated", lambda wanted: 10**9)  # as before: the limit decides
    everything, limited = run()
    assert len(found) == 1 and found == everything
    drawn, drawn_before = (sum(r.generated + r.rejected for r in rs) for rs in (rounds, limited))
    assert drawn * 4 < drawn_before


def test_the_default_population_shrinks_with_a_smaller_proposal_and_a_given_config_is_kept(wl):
    default = EvolutionaryConfig()
    assert evolutionary._sized_config(None, 16) == default
    assert evolutionary._sized_config(16, 16) == default and evolutionary._sized_config(64, 16) == default
    assert evolutionary._sized_config(8, 16).population_size == default.population_size // 2
    assert evolutionary._sized_config(1, 16).population_size == default.init_min_unmeasured
    searches = EvolutionarySearch(), EvolutionarySearch(SMALL)
    for search in searches:
        search.start(SearchContext(wl, cpu_default(), np.random.default_rng(0), batch_size=8))
    assert searches[0].config.population_size == default.population_size // 2
    assert searches[1].config == SMALL
