"""Worker processes that may die: a task that crashes its process, hangs or overruns its time
limit becomes a failed ``Outcome``, the process is replaced, and the caller goes on.

Workers are started with ``spawn``: libgomp hangs in a process forked after its threads
started (DESIGN.md, "Measuring"). A task is a module-level function and its arguments (both
pickled); a worker ignores Ctrl-C (its parent decides) and exits when its parent goes away.
"""
from __future__ import annotations

import gc
import multiprocessing
import signal
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Optional, Sequence

_CONTEXT = multiprocessing.get_context("spawn")
_FORKING_PICKLER = _CONTEXT.reducer.ForkingPickler  # what ``Connection.recv`` decodes with
STARTUP_SECONDS = 120.0  # a fresh Python importing numpy and llvmlite, on a loaded machine
# The usual cause: a spawned worker imports the main script again, and a script that tunes at
# its top level starts workers from inside that import (Python's multiprocessing refuses).
_STARTING_HINT = ("; if this runs from a script, put the script's work under "
                  "`if __name__ == \"__main__\":` (workers are spawned and import the main module)")


@dataclass(frozen=True)
class Outcome:
    """What one task came to: its ``value``, or ``error`` saying why there is none (the
    exception it raised, its crash, or its time limit). ``seconds`` is its wall time."""

    value: Any = None
    error: Optional[str] = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


# The cycle collector's thresholds in a worker process (see ``_serve``).
GC_THRESHOLDS = (10_000, 10, 10)


def _serve(conn: Connection) -> None:
    """A worker's loop: run each task received, send back ("ok", value) or ("error", text)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Tasks make many short-lived objects (the search's candidates) and leave long-lived ones
    # behind (imported modules, caches). Young objects are collected 14 times less often than
    # Python's default; after each task, once its reply is sent, its garbage is collected and
    # what survives is moved out of the collector's sight (``gc.freeze``), so collections never
    # walk it again. Collections took a sixth of a search task's time before, a thirtieth now.
    gc.set_threshold(*GC_THRESHOLDS)
    conn.send(("ready", None))
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        try:
            reply = ("ok", fn(*args))
        except Exception as err:  # the task's failure, reported to the parent as text
            reply = ("error", _describe(err))
        conn.send(reply)
        del reply
        gc.collect()
        gc.freeze()


def _describe(err: Exception) -> str:
    """An exception as one line: its message, or for an unexpected kind the innermost frame."""
    from metasched.errors import MetaschedError

    if isinstance(err, MetaschedError):
        return str(err)
    frame = traceback.extract_tb(err.__traceback__)[-1]
    return f"{type(err).__name__}: {err} (at {frame.filename}:{frame.lineno})"


def _exit_reason(exitcode: Optional[int]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"crashed with {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class Worker:
    """One spawned process and the pipe to it; restarted on demand after it dies."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._process: Optional[multiprocessing.process.BaseProcess] = None
        self._conn: Optional[Connection] = None
        self._ready = False
        self.started = 0  # how many processes this worker has started (1 + replacements)

    def start(self) -> None:
        """Start the process if it is not running; ``send`` waits until it is ready."""
        if self._process is not None and self._process.is_alive():
            return
        self.stop()
        parent, child = _CONTEXT.Pipe()
        process = _CONTEXT.Process(target=_serve, args=(child,), name=self.name, daemon=True)
        process.start()
        child.close()
        self._process, self._conn, self._ready = process, parent, False
        self.started += 1

    def send(self, fn: Callable[..., Any], args: tuple) -> None:
        """Hand the worker a task; a new process is first waited for (its imports take a
        moment), so that its start-up never counts against a task's time limit."""
        self.start()
        if not self._ready:
            try:
                self._ready = bool(self._conn.poll(STARTUP_SECONDS) and self._conn.recv())
            except (EOFError, OSError):
                self._process.join(5)
            if not self._ready:
                reason = (f"did not start within {STARTUP_SECONDS:g} s" if self._process.is_alive()
                          else _exit_reason(self._process.exitcode) + " while starting" + _STARTING_HINT)
                self.stop()
                raise RuntimeError(f"worker process {self.name} {reason}")
        self._conn.send((fn, args))

    @property
    def conn(self) -> Connection:
        return self._conn

    def receive(self) -> Callable[[], Outcome]:
        """Read the reply to the task sent last; returns how to decode it (its ``seconds`` are
        filled in by the caller). Reading is quick and decoding may not be: a caller can
        hand the worker its next task in between, so that the worker does not wait."""
        try:
            raw = self._conn.recv_bytes()
        except (EOFError, OSError):
            self._process.join(5)
            reason = _exit_reason(self._process.exitcode)
            self.stop()
            return lambda: Outcome(error=f"the worker {reason}")

        def decode() -> Outcome:
            status, payload = _FORKING_PICKLER.loads(raw)
            return Outcome(value=payload) if status == "ok" else Outcome(error=payload)

        return decode

    def stop(self) -> None:
        """Kill the process (a hung task cannot be interrupted any other way)."""
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join()
            self._conn.close()
        self._process = self._conn = None


class WorkerPool:
    """``size`` workers running tasks in parallel, each task under a time limit."""

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one worker, got {size}")
        self.workers = [Worker(f"{name}-{k}") for k in range(size)]

    def start(self) -> None:
        """Start every worker now (a spawned Python takes a while to import what it needs)."""
        for worker in self.workers:
            worker.start()

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple], timeout: float,
            what: str = "task") -> list[Outcome]:
        """``fn(*args)`` for each ``args`` in ``tasks``, in order, in the pool's workers. A task
        that runs longer than ``timeout`` seconds is killed with its worker."""
        outcomes: list[Optional[Outcome]] = [None] * len(tasks)
        pending = list(range(len(tasks)))[::-1]
        busy: dict[Connection, tuple[Worker, int, float]] = {}
        idle = list(self.workers)

        def dispatch() -> None:
            while pending and idle:
                worker, index = idle.pop(), pending.pop()
                worker.send(fn, tasks[index])
                busy[worker.conn] = (worker, index, time.perf_counter())

        while pending or busy:
            dispatch()
            deadline = min(started for _, _, started in busy.values()) + timeout
            ready = wait(list(busy), max(0.0, deadline - time.perf_counter()))
            now = time.perf_counter()
            replies = []
            for conn in ready:
                worker, index, started = busy.pop(conn)
                replies.append((index, now - started, worker.receive()))
                idle.append(worker)
            dispatch()  # the next tasks go out before the replies are decoded
            for index, seconds, decode in replies:
                outcome = decode()
                outcomes[index] = Outcome(outcome.value, outcome.error, seconds)
            for conn, (worker, index, started) in list(busy.items()):
                if now - started >= timeout:
                    del busy[conn]
                    worker.stop()
                    outcomes[index] = Outcome(error=f"the {what} took longer than its time "
                                                    f"limit of {timeout:g} s",
                                              seconds=now - started)
                    idle.append(worker)
        return outcomes

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
