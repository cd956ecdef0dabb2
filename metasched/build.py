"""``build``: a workload, a schedule or a loop program -> a compiled ``Kernel``."""
from __future__ import annotations

import os
from typing import Optional, Union

from metasched.codegen import CodegenOptions, Kernel, compile_func
from metasched.database import Database, Record
from metasched.errors import DatabaseError, ScheduleError, check_type
from metasched.ir.stmt import PrimFunc
from metasched.lang.workload import Workload
from metasched.schedule import Schedule, replay
from metasched.tune.target import host_target


def build(target: Union[Workload, Schedule, PrimFunc], options: Optional[CodegenOptions] = None, *,
          database: Union[None, str, os.PathLike, Database] = None) -> Kernel:
    """Compile ``target`` to machine code for this CPU. A workload compiles unscheduled (its
    statements' loops as written) or, given a ``database`` (a ``Database`` or the path of one,
    opened read-only), as the fastest program the database holds for it on this CPU and thread
    count (``DatabaseError`` when it holds none); a schedule compiles the loop program it
    describes."""
    check_type(options, "build", "options", (type(None), CodegenOptions), "None or a CodegenOptions")
    if database is not None:
        if not isinstance(target, Workload):
            raise TypeError(f"build(..., database=...) takes a Workload, got {type(target).__name__}")
        return compile_func(best_schedule(target, database, options).lower(), options)
    if isinstance(target, Workload):
        func = Schedule(target).lower()
    elif isinstance(target, Schedule):
        func = target.lower()
    elif isinstance(target, PrimFunc):
        func = target
    else:
        raise TypeError(f"build takes a Workload, a Schedule or a PrimFunc, got {type(target).__name__}")
    return compile_func(func, options)


def best_schedule(workload: Workload, database: Union[str, os.PathLike, Database],
                  options: Optional[CodegenOptions] = None) -> Schedule:
    """The fastest correct program ``database`` (a ``Database``, or a path opened read-only)
    holds for ``workload`` on this CPU with the threads of ``options``, replayed;
    ``DatabaseError`` when there is none."""
    db = database if isinstance(database, Database) else Database(database, read_only=True)
    try:
        record = db.best(workload, host_target(options))
    finally:
        if db is not database:
            db.close()
    if record is None:
        raise DatabaseError(f"{db.path} holds no correct program of {workload!r} measured on "
                            f"this CPU with these threads; tune it first")
    return replay_record(workload, record, db.path)


def replay_record(workload: Workload, record: Record, path: str) -> Schedule:
    """``record``'s trace replayed on ``workload``; a ``DatabaseError`` naming the record and
    the database ``path`` when it does not replay (a record stored by a metasched that did
    not check its traces at commit)."""
    try:
        return replay(workload, record.trace)
    except ScheduleError as err:
        raise DatabaseError(f"{path}: record {record.id} does not replay on {workload.label}: {err}") from None
