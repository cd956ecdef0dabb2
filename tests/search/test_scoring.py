"""Candidates made in worker processes are the candidates made in this process, in the same
order, so that evolutionary search proposes the same programs however its work is split; a
task whose worker dies is made again here."""
import dataclasses
import json
import multiprocessing
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from metasched import workloads
from metasched.database import program_key
from metasched.measure.worker import WorkerPool
from metasched.schedule import Trace, replay
from metasched.search import EvolutionaryConfig, EvolutionarySearch, GBTModel, SearchContext
from metasched.search.cost_model import Measured
from metasched.search.features import FEATURE_NAMES
from metasched.search.mutator import default_mutators
from metasched.search.scoring import InProcess, Scorer, _chunks, _Wire
from metasched.space import PostOrderApply, cpu_default
from metasched.tune.loop import WorkerTasks

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
            assert (a.ident, a.key, str(a.trace)) == (b.ident, b.key, str(b.trace))
            assert np.array_equal(a.row, b.row)


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


def test_candidates_are_told_apart_by_ident_as_by_program_key(wl, workers):
    """The search tells candidates apart by ident (design space and decisions) and asks for
    program keys only of what it proposes: one ident must be one key, and two keys two idents."""
    space = cpu_default()
    samples = [c for c in Scorer(wl, space, workers).samples(range(60)) if c is not None]
    rng = np.random.default_rng(1)
    mutants = [default_mutators(wl).mutate(c.trace, rng) for c in samples for _ in range(3)]
    made = samples + [c for c in Scorer(wl, space, workers).mutants([m for m in mutants if m is not None]) if c]
    keys: dict = {}
    for cand in made:
        assert isinstance(cand.ident, tuple)  # a design space and its decisions, not a key
        assert keys.setdefault(cand.ident, cand.key) == cand.key
    assert len(set(keys.values())) == len(keys) < len(made)  # mutants repeat some programs
    # A schedule read back (a database record) has the ident of the candidate it was.
    for cand in made[:5]:
        read = replay(wl, Trace.from_json(cand.trace.to_json()))
        assert Scorer(wl, space).candidate(read).ident == cand.ident


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


def _design_space_of(trace, spaces):
    """The design space whose very instructions ``trace`` begins with, or None."""
    for sch in spaces:
        n = len(sch.trace)
        if len(trace) >= n and all(a is b for a, b in zip(trace.insts[:n], sch.trace.insts)):
            return sch
    return None


def test_traces_cross_by_their_design_space(wl, workers):
    space = cpu_default()
    spaces = space.design_spaces(wl)
    here = [c for c in Scorer(wl, space).samples(range(12)) if c is not None]
    there = [c for c in Scorer(wl, space, workers).samples(range(12)) if c is not None]
    # Made in a worker, a sample arrives holding this process's design space instructions.
    assert there and all(_design_space_of(c.trace, spaces) is not None for c in there)
    wire = _Wire(wl, space)
    for cand in here:
        packed = wire.pack(cand.trace)
        assert len(pickle.dumps(packed)) < len(pickle.dumps(cand.trace)) / 2
        assert wire.unpack(pickle.loads(pickle.dumps(packed))) == cand.trace
        # A mutant crosses without the postprocessors' instructions, which it is made without.
        end = [inst.kind for inst in cand.trace.insts].index("EnterPostproc")
        sampling = wire.unpack(pickle.loads(pickle.dumps(wire.pack(cand.trace, sampling=True))))
        assert sampling == Trace(cand.trace.insts[:end], cand.trace.decisions)
    # A trace that begins with no design space's instructions travels whole.
    other = Trace.from_json(here[0].trace.to_json())
    assert wire.pack(other) is other and wire.pack(Trace()) == Trace()


def test_a_trace_read_back_holds_the_design_space_instructions(wl):
    space = cpu_default()
    cand = Scorer(wl, space).samples([5])[0]
    read = Trace.from_json(cand.trace.to_json())
    assert _design_space_of(read, space.design_spaces(wl)) is None
    interned = _Wire(wl, space).intern(read)
    assert interned == read and _design_space_of(interned, space.design_spaces(wl)) is not None
    assert program_key(interned) == cand.key
    # Equal is not enough: an attribute 64.0 where the space has 64 keeps its own instruction.
    k = next(i for i, inst in enumerate(read.insts) if any(type(a) is int for a in inst.attrs))
    inst = read.insts[k]
    floated = dataclasses.replace(inst, attrs=tuple(float(a) if type(a) is int else a for a in inst.attrs))
    assert floated == inst
    odd = Trace(read.insts[:k] + (floated,) + read.insts[k + 1:], read.decisions)
    assert _Wire(wl, space).intern(odd).insts[k] is floated


@dataclasses.dataclass
class ElsewhereOtherSpaces(PostOrderApply):
    """A space module that makes other design spaces in a worker process than in its parent."""

    def generate(self, workload):
        spaces = super().generate(workload)
        if multiprocessing.parent_process() is None:
            return spaces
        return [replay(workload, Trace(sch.trace.insts[:1])) for sch in spaces]


def test_a_worker_with_other_design_spaces_leaves_the_work_to_the_parent(wl, workers):
    base = cpu_default()
    space = ElsewhereOtherSpaces(rules=base.rules, postprocs=base.postprocs)
    here = Scorer(wl, space).samples(range(6))
    assert any(c is not None for c in here)
    _same(here, Scorer(wl, space, workers).samples(range(6)))


def test_chunks_shrink_and_keep_the_order():
    items = list(range(100))
    chunks = _chunks(items, 2)
    assert [x for chunk in chunks for x in chunk] == items
    sizes = [len(c) for c in chunks]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 25 and sizes[-1] <= 2
    assert _chunks([], 2) == [] and _chunks([1], 2) == [[1]]


def test_a_blend_fitted_in_lent_workers_is_the_blend_fitted_here(workers, tmp_path):
    rng = np.random.default_rng(3)
    rows = rng.random((40, 2 * len(FEATURE_NAMES) + 1)).astype(np.float32)
    results = [Measured("a" if k % 2 else "b", float(s)) for k, s in enumerate(rng.uniform(1e-3, 5e-3, 40))]
    here, lent = GBTModel(seed=1), GBTModel(seed=1)
    lent.use(workers)
    here.update(rows, results)
    lent.update(rows, results)
    assert np.array_equal(here.predict(rows), lent.predict(rows))
    lent.save(tmp_path / "model.pkl")  # the workers stay with this process
    assert GBTModel.load(tmp_path / "model.pkl")._tasks is None


def test_the_first_fit_of_a_process_runs_its_trees_on_one_thread():
    # The thread pools are looked up once, at the first call: scikit-learn's OpenMP runtime
    # must be loaded by then, or the limit misses it. A fresh process: this one has it loaded.
    code = ("from threadpoolctl import threadpool_info\n"
            "from metasched.search.cost_model import _one_thread\n"
            "with _one_thread():\n"
            "    print([p['num_threads'] for p in threadpool_info() if p['internal_api'] == 'openmp'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    threads = json.loads(out)
    assert threads and set(threads) == {1}
