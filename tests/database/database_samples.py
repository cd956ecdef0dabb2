"""Real workloads, traces and targets for the database tests, and the writer that the
multi-process tests run in each process (spawned processes import it by name)."""
from __future__ import annotations

import json
from functools import lru_cache

from metasched import workloads
from metasched.database import Database, Target, program_key
from metasched.lang import Workload
from metasched.schedule import Trace
from metasched.space import cpu_default

TARGET = Target("znver4", "+avx2,+fma,+avx512f,-sse4a", 2)


def matmul_relu(size: int = 64) -> Workload:
    return workloads.get("matmul_relu", M=size, N=size, K=size)


@lru_cache(maxsize=None)
def traces(count: int) -> tuple[Trace, ...]:
    """``count`` sampled traces of ``matmul_relu()``, each a different program."""
    space, workload = cpu_default(), matmul_relu()
    found: dict[str, Trace] = {}
    seed = 0
    while len(found) < count:
        trace = space.sample(workload, rng=seed).trace
        found.setdefault(program_key(trace), trace)
        seed += 1
    return tuple(found.values())


def filled(path, count: int = 3):
    """``path``, a database holding a record of each of the first ``count`` of ``traces``."""
    with Database(path) as db:
        for trace in traces(count):
            db.commit(matmul_relu(), trace, target=TARGET, seconds=[1e-3])
    return path


def commit_all(path: str, trace_forms: list[dict], target_form: dict, barrier, results) -> None:
    """Commits every trace (JSON forms) to ``path`` once ``barrier`` lets all writers start;
    puts the ids committed (None for a duplicate) and the program keys seen on ``results``."""
    workload = matmul_relu()
    target = Target.from_json(target_form)
    trace_list = [Trace.from_json(form) for form in trace_forms]
    with Database(path) as db:
        barrier.wait()
        ids = []
        for index, trace in enumerate(trace_list):
            record = db.commit(workload, trace, target=target, seconds=(1e-3 * (index + 1),))
            ids.append(None if record is None else record.id)
    results.put(json.dumps({"ids": ids, "programs": [program_key(t) for t in trace_list]}))
