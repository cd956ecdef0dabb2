"""Candidates made in worker processes are the candidates made in this process, in the same
order, so that evolutionary search proposes the same programs however its work is split; a
task whose worker dies is made again here."""
import os

import numpy as np
import pytest

from metasched import workloads
from metasched.database import program_key
from metasched.measure.worker import WorkerPool
from metasched.search import EvolutionaryConfig, EvolutionarySearch, SearchContext
from metasched.search.mutators import default_mutators
from metasched.search.scoring import InProcess, Scorer
from metasched.space import cpu_default
from metasched.tune.tune import WorkerTasks

SMALL = EvolutionaryConfig(population_size=24, init_min_unmeasured=8, genetic_num_iters=2)


@pytest.fixture(scope="module")
def wl():
    return workloads.get("conv2d_bias_relu", N=1, C=8, H=10, W=10, F=8, R=3, S=3, PAD=1)


@pytest.fixture(scope="module")
def workers():
    pool = WorkerPool(2, "test-scoring")
    pool.start()
    yield WorkerTasks(pool)
    pool.close()


def _same(ours, theirs):
    assert [c is None for c in ours] == [c is None for c in theirs]
    for a, b in zip(ours, theirs):
        if a is not None:
            assert (a.key, str(a.trace)) == (b.key, str(b.trace))
            assert np.array_equal(a.row, b.row)
            assert program_key(a.trace) == a.key


def test_samples_and_mutants_are_the_same_in_workers(wl, workers):
    space = cpu_default()
    seeds = list(range(40))
    here = Scorer(wl, space).samples(seeds)
    there = Scorer(wl, space, workers).samples(seeds)
    _same(here, there)
    assert sum(c is not None for c in here) >= 30
    rng = np.random.default_rng(0)
    mutants = [default_mutators(wl).mutate(c.trace, rng) for c in here if c is not None]
    mutants = [m for m in mutants if m is not None]
    _same(Scorer(wl, space).mutants(mutants), Scorer(wl, space, workers).mutants(mutants))


def test_a_sample_is_the_space_sample_of_its_seed(wl):
    cand = Scorer(wl, cpu_default()).samples([7])[0]
    sch = cpu_default().sample(wl, np.random.default_rng(7))
    assert cand.key == program_key(sch.trace) and str(cand.schedule(wl).trace) == str(sch.trace)


def test_evolutionary_search_proposes_the_same_programs_in_workers(wl, workers):
    proposals = []
    for tasks in (InProcess(), workers):
        search = EvolutionarySearch(SMALL)
        search.start(SearchContext(wl, cpu_default(), np.random.default_rng(3), tasks=tasks))
        proposals.append([program_key(s.trace) for _ in range(2) for s in search.propose(8)])
    assert proposals[0] == proposals[1] and len(set(proposals[0])) == 16


def die_in_a_worker(parent: int, value: int) -> int:
    """A task that kills the worker process that runs it, and works in the parent."""
    if os.getpid() != parent:
        os._exit(3)
    return value * 2


def test_a_task_whose_worker_dies_runs_again_here(workers):
    assert workers.map(die_in_a_worker, [(os.getpid(), 1), (os.getpid(), 2)]) == [2, 4]
