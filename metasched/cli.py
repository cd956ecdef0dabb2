"""The ``metasched`` command line.

    metasched workloads                        list the built-in suite
    metasched show TARGET [-p K=V ...]         print a workload and its unscheduled loop program
    metasched check TARGET [-p K=V ...]        compile it unscheduled and compare with the reference
    metasched demo [TARGET] [-p K=V ...]       run its hand-written schedule (the unscheduled
                                               program where there is none), check it, time it
                                               against numpy
    metasched tune TARGET --trials N --db PATH  search for a fast program, recording every trial
                [--warm-start WORKLOAD]        (its cost model first trained on another's records:
                [--no-warm-start]              by default those of a workload of the same kind)
                [--plot FILE [--force]]        and draw its curve (an existing FILE: with --force)
    metasched best TARGET --db PATH            the best program recorded, timed against numpy
    metasched trace TARGET --db PATH -o FILE   save the best trace as editable text (an
                [--force]                      existing FILE is replaced only with --force)
    metasched replay TRACE_FILE TARGET         build a trace, check it, time it against numpy
    metasched history TARGET --db PATH         the records, newest first
    metasched tune MODEL.onnx --db PATH        tune a network's tasks under one budget
    metasched tune ... --cluster ADDRESS       build and measure on a Dask cluster (docs/cluster.md)
    metasched run MODEL.onnx [--db PATH]       compile it, time it, compare with onnxruntime

A TARGET is a built-in workload's name or a ``.tensor`` file (``--name`` picks one workload of
a file that holds several); ``EPILOG`` says how the two are told apart and what the exit codes
mean. A user error is one line on stderr, ``metasched: ...`` (a parse error adds the offending
line and a caret), never a traceback; a traceback means a bug in metasched.

Map: target and parameter parsing · memory needed and available · the subcommands · the parser
and ``main`` (where errors become exit codes).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import sys
import time
from typing import Iterator, NoReturn, Optional, Sequence

import numpy as np

from metasched import handwritten, workloads
from metasched.build import build, replay_record
from metasched.codegen import Kernel, host_vector_bits
from metasched.database import Confirmation, Database, Record
from metasched.errors import DatabaseError, MetaschedError, MismatchError, UnknownWorkloadError
from metasched.lang import Workload, assert_outputs_close, load
from metasched.lang.reference import DEFAULT_CHUNK_BYTES
from metasched.schedule import Schedule, Trace, repaired_decisions, replay
from metasched.search import DEFAULT_STRATEGY, STRATEGIES
from metasched.timing import format_gflops, format_seconds, median_seconds, paired_times
from metasched.tune import SCHEDULERS, TuneTask, host_target, tune, tune_tasks
from metasched.tune.progress import task_table
from metasched.workloads import builtin
from metasched.workloads.baselines import numpy_baseline

EXIT_OK = 0
EXIT_MISMATCH = 1  # also what Python exits with after the traceback of an unexpected error
EXIT_USER_ERROR = 2  # argparse's code for usage errors; every other user error uses it too
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as `yes | head -1` reports it

EPILOG = """\
TARGET is a path when it names an existing file, ends with .tensor or contains a path
separator; otherwise it is the name of a built-in workload (see `metasched workloads`), even
when a folder of that name is in the current directory. best, trace and history also find a
workload that their --db stores by its name or key (a network's task).

exit codes:
  0    success
  1    a compiled kernel does not match the numpy reference, or an internal error (with a
       traceback): a bug in metasched, please report it
  2    a user error, as one line on stderr: bad arguments, a file that cannot be read or does
       not parse, an unknown workload or parameter, sizes whose tensors do not fit in the
       memory available, a schedule that does not apply to the workload, an output (-o,
       --plot) that would replace an input or, without --force, an existing file, a curve
       that could not be saved after tuning (the trials are kept), a --cluster that cannot
       be reached, has no worker to time kernels or goes away (the trials are kept)
  130  interrupted (Ctrl-C)
  141  the reader of the output went away (as in `metasched workloads | head -1`)
"""

# ---- targets and parameters -------------------------------------------------------------------


def _is_path(target: str) -> bool:
    """The rule of ``EPILOG``: a folder never shadows a built-in name."""
    separators = (os.path.sep, os.path.altsep or os.path.sep)
    return os.path.isfile(target) or target.endswith(".tensor") or any(s in target for s in separators)


def _workload(target: str, params: dict[str, int], name: Optional[str] = None) -> Workload:
    if _is_path(target):
        return load(target, name, **params)  # ParseError for a file that is missing or unreadable
    if target not in workloads.names():
        what = "a folder, not a workload file," if os.path.isdir(target) else "not a file"
        raise UnknownWorkloadError(
            f"{target!r} is {what} and no built-in workload has that name (a path to a workload "
            f"file ends with .tensor or contains '/'); the built-in workloads are: "
            f"{', '.join(workloads.names())}")
    if name is not None and name != target:
        raise UnknownWorkloadError(f"--name {name} does not apply to the built-in workload {target}")
    return workloads.get(target, **params)


def _param(text: str) -> tuple[str, int]:
    """An argparse type: ``NAME=INT`` to ``(NAME, INT)``. The workload language judges the value
    (a dimension must be at least 1, and a value must fit 64-bit generated code)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"wants NAME=INT, got {text!r}")
    try:
        return name.strip(), int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name.strip()}: {value!r} is not an integer") from None


def _non_negative(what: str):
    """An argparse type: an integer >= 0, called ``what`` in its error (a seed of numpy's
    generators, which take only non-negative integers, or a count)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what}: a {what} is an integer >= 0")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


_seed = _non_negative("seed")
_count = _non_negative("count")


def _path(text: str) -> str:
    """An argparse type: a path, which may not be empty (SQLite would take an empty name for a
    temporary database, and open() for nothing at all)."""
    if not text:
        raise argparse.ArgumentTypeError("the path is empty")
    return text


# ---- outputs ----------------------------------------------------------------------------------

# The files SQLite keeps beside a database while it is open or after a crash.
_DATABASE_COMPANIONS = ("", "-wal", "-shm", "-journal")


def _same_file(a: str, b: str) -> bool:
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)  # also through hard links
    return os.path.realpath(a) == os.path.realpath(b)


def _check_output(path: str, option: str, inputs: dict[str, str], force: bool) -> bool:
    """Refuse, before any work, an output ``path`` (given as ``option``) that is one of the
    command's ``inputs`` (what names them -> their path), a folder, a file that exists unless
    ``force``, or a place where no file can be made. Whether it exists (and will be replaced)."""
    for what, source in inputs.items():
        if _same_file(path, source):
            raise _UserError(f"{option} {path} is {what}: it would be overwritten; name another file")
    if os.path.isdir(path):
        raise _UserError(f"{option} {path} is a folder, not a file")
    if os.path.lexists(path):
        if not force:
            raise _UserError(f"{option} {path} exists; pass --force to replace it (nothing was written)")
        if not os.access(path, os.W_OK):
            raise _UserError(f"{option} {path} exists and cannot be written")
        return True
    try:  # the one sure test that a file can be made there (a folder's permissions do not tell: /proc)
        with open(path, "xb"):
            pass
        os.unlink(path)
    except OSError as err:
        raise _UserError(f"{option} {path}: no file can be written there ({err.strerror or err})") from None
    return False


def _inputs(args: argparse.Namespace) -> dict[str, str]:
    """The files a command reads, as its outputs must not name them."""
    inputs = {f"the database of --db {args.db}" if suffix == "" else
              f"the {suffix[1:]} file SQLite keeps beside the database of --db {args.db}": args.db + suffix
              for suffix in _DATABASE_COMPANIONS}
    if _is_path(args.workload):
        inputs[f"the workload file {args.workload}"] = args.workload
    return inputs


# ---- memory -----------------------------------------------------------------------------------

# assert_outputs_close compares float64 copies of both sides through a few float64
# temporaries: about five float64 arrays the size of each output are alive at its peak.
_COMPARE_FLOAT64_ARRAYS = 5


class _TooBig(MetaschedError):
    """A workload's tensors do not fit in the memory available (a user error: the sizes)."""


class _UserError(MetaschedError):
    """An argument that cannot work, found before any work starts."""


def available_memory() -> Optional[int]:
    """Bytes this process may still allocate without swapping: ``MemAvailable`` of
    /proc/meminfo (Linux), else the physical pages ``os.sysconf`` reports (the free ones where
    it knows them); None where neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB meaning KiB
    except (OSError, ValueError, IndexError):
        pass
    for pages in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            return os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
            continue
    return None


def needed_bytes(wl: Workload) -> int:
    """Bytes ``check`` and ``demo`` hold at their peak, counted before anything is allocated:
    every tensor at its dtype (``Workload.nbytes``: the inputs, the kernel's outputs and its
    intermediates), plus the larger of
    - the numpy reference while it runs: every tensor again in float64, its outputs cast back
      to their dtype and one chunk of temporaries (at most ``DEFAULT_CHUNK_BYTES``);
    - comparing the outputs: the reference's outputs and the float64 arrays of the comparison."""
    def elements(tensors) -> int:
        return sum(math.prod(t.shape) for t in tensors)

    outputs = sum(math.prod(t.shape) * np.dtype(t.dtype).itemsize for t in wl.outputs)
    domain = max(math.prod(s.shape) * s.reduce_length for s in wl.statements)
    reference = 8 * elements(wl.inputs + tuple(s.tensor for s in wl.statements)) + outputs \
        + min(DEFAULT_CHUNK_BYTES, 8 * domain)
    comparing = outputs + 8 * _COMPARE_FLOAT64_ARRAYS * elements(wl.outputs)
    return wl.nbytes + max(reference, comparing)


def _human(nbytes: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if nbytes < 1024:
            return f"{nbytes:.1f} {unit}" if unit != "bytes" else f"{nbytes:.0f} bytes"
        nbytes /= 1024
    return f"{nbytes:.1f} TiB"


def _check_fits(wl: Workload) -> None:
    """Refuse, before anything big is allocated, a size the machine cannot hold."""
    need, have = needed_bytes(wl), available_memory()
    if have is not None and need > have:
        raise _TooBig(f"{wl.label} needs {_human(need)} for its tensors; this machine has "
                      f"{_human(have)} available")


# ---- the subcommands --------------------------------------------------------------------------


def _cmd_workloads(args: argparse.Namespace) -> int:
    for name in workloads.names():
        wl = workloads.get(name)
        shapes = ", ".join(f"{t.name}{list(t.shape)}" for t in wl.inputs)
        print(f"{name:18s} {wl.flops / 1e9:8.3f} GFLOP   {shapes}")
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    wl = _workload(args.workload, dict(args.param), args.name)
    if wl.source:
        print(wl.source.strip())
    print(f"\n# bound as {wl}\n")
    print(Schedule(wl))
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    wl = _workload(args.workload, dict(args.param), args.name)
    _check_fits(wl)
    inputs = wl.random_inputs(seed=args.seed)
    kernel = build(wl)
    assert_outputs_close(wl, kernel(*inputs), wl.reference(*inputs))
    print(f"{wl}: the unscheduled kernel matches the reference")
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    wl = _workload(args.workload, dict(args.param), args.name)
    _check_fits(wl)
    sch = handwritten.for_workload(wl, host_vector_bits())
    if sch is None:
        sch = Schedule(wl)
        print(f"# {wl}: no hand-written schedule for {wl.name}: running the unscheduled program "
              f"({_not_builtin(wl)})\n{sch}\n")
    else:
        print(f"# {wl}: hand-written schedule\n{sch}\n")
    _check_and_time(sch, args.seed)
    return EXIT_OK


def _check_and_time(sch: Schedule, seed: int) -> None:
    """Compile ``sch``, compare it with the reference, and time it against numpy in turns."""
    wl = sch.workload
    started = time.perf_counter()
    kernel = build(sch)
    print(f"compiled in {(time.perf_counter() - started) * 1e3:.0f} ms (llvmlite, host CPU)")
    inputs = wl.random_inputs(seed=seed)
    assert_outputs_close(wl, kernel(*inputs, poison=True), wl.reference(*inputs))
    print("outputs match the numpy reference")
    _report_speed(wl, kernel, inputs)


def _report_speed(wl: Workload, kernel: Kernel, inputs: list) -> None:
    """The kernel's time as Python calls it, ``kernel(*inputs)`` (outputs allocated, as numpy
    allocates its results), against numpy's version of the workload as Python calls it; and
    the machine code's own time, as tuning records it (``Kernel.time``: outputs given, no
    checks). On a kernel of a few microseconds the two differ by what a call costs."""
    alone = kernel.time(*inputs, min_repeat_seconds=0.02)
    baseline = numpy_baseline(wl)
    if baseline is None:
        called = median_seconds(lambda: kernel(*inputs), repeat=5, min_repeat_seconds=0.02)
        print(_our_line(wl, called, alone))
        print(f"numpy:     no baseline for {wl.name} ({_not_builtin(wl)})")
        return
    # In turns, so that a burst of load on this shared machine hits both sides alike.
    ours, theirs, ratio = paired_times(lambda: kernel(*inputs), lambda: baseline(*inputs),
                                       rounds=5, repeat=3, min_repeat_seconds=0.02, settle_seconds=0.2)
    print(_our_line(wl, ours, alone))
    print(f"numpy:     {format_seconds(theirs):>12}  {format_gflops(wl.flops, theirs):>16}  "
          f"its numpy version, as called")
    print(f"speed relative to numpy: {ratio:.2f}x")


def _our_line(wl: Workload, called: float, alone: float) -> str:
    return (f"metasched: {format_seconds(called):>12}  {format_gflops(wl.flops, called):>16}  "
            f"as kernel(*inputs) is called; the machine code alone {format_seconds(alone)}")


def _not_builtin(wl: Workload) -> str:
    """Why ``wl`` has no numpy baseline or hand-written schedule."""
    if builtin(wl) is not None:
        return f"none was written for the built-in {wl.name}"
    if wl.name in workloads.names():
        return f"{wl.label} is named like the built-in {wl.name}, but its program differs"
    return "only the built-in workloads have one"


def _read_workload(args: argparse.Namespace) -> Workload:
    """The workload of a command that reads ``args.db``: ``_workload``'s, or else one that the
    database stores by the name or key given (a network's task: no built-in, no file)."""
    target = args.workload
    try:
        return _workload(target, dict(args.param), args.name)
    except UnknownWorkloadError as err:
        if _is_path(target) or target in workloads.names() or not os.path.exists(args.db):
            raise
        with _existing_db(args.db) as db:
            if not any(target in (w.key, w.name) for w in db.workloads()):
                raise UnknownWorkloadError(f"{err}; nor does {db.path} hold a workload of that name or key") from None
            if args.param or args.name is not None:
                raise UnknownWorkloadError(f"{target} is a workload stored in {db.path}: -p and --name do not "
                                           f"apply to it")
            return db.workload(target)  # a DatabaseError naming the keys when several have that name


def _existing_db(path: str) -> Database:
    """A database that must already exist, opened read-only (reading commands never create,
    migrate or change one)."""
    if not os.path.exists(path):
        raise DatabaseError(f"no tuning database at {path} (metasched tune ... --db {path} makes one)")
    return Database(path, read_only=True)


def _best(db: Database, wl: Workload, args: argparse.Namespace) -> Record:
    record = db.best(wl, host_target())
    if record is None:
        others = len(db.records(wl))
        hint = (f"; its {others} record(s) were measured elsewhere or all failed" if others
                else f"; tune it first: {_tune_command(args)}")
        raise DatabaseError(f"{db.path} holds no correct program of {wl.label} on this CPU{hint}")
    return record


def _tune_command(args: argparse.Namespace) -> str:
    """The ``metasched tune`` command for the workload ``args`` name, as the user named it."""
    words = ["metasched", "tune", shlex.quote(args.workload)]
    if args.name:
        words += ["--name", shlex.quote(args.name)]
    words += [f"-p {name}={value}" for name, value in args.param]
    return " ".join(words + ["--db", shlex.quote(args.db)])


_PLOT_FORMATS = (".png", ".svg", ".pdf")


def _check_plot_path(args: argparse.Namespace) -> None:
    """Refuse, before any tuning, a --plot file that could not be written or would replace
    an input, or a file that exists without --force."""
    path = args.plot
    if not path.lower().endswith(_PLOT_FORMATS):
        raise _UserError(f"--plot {path}: the file name must end with one of {', '.join(_PLOT_FORMATS)}")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise _UserError(f"--plot {path}: there is no folder {folder}")
    try:
        import matplotlib  # noqa: F401  (only whether it is there)
    except ImportError:
        raise _UserError("--plot needs matplotlib: pip install 'metasched[plot]'") from None
    _check_output(path, "--plot", _inputs(args), args.force)


def _is_model(target: str) -> bool:
    """A network target: an ONNX model file."""
    return target.lower().endswith(".onnx")


def _shape(text: str) -> tuple[str, list[int]]:
    """An argparse type: ``NAME=D,D,...`` (an input's shape) to ``(NAME, [D, ...])``."""
    name, sep, dims = text.partition("=")
    try:
        shape = [int(d) for d in dims.split(",")]
    except ValueError:
        shape = []
    if not sep or not name.strip() or not shape or any(d < 1 for d in shape):
        raise argparse.ArgumentTypeError(f"wants NAME=D,D,... (an input's shape, sizes >= 1), got {text!r}")
    return name.strip(), shape


def _model_graph(path: str, shapes: list[tuple[str, list[int]]]):
    """The imported graph of the model file ``path`` (``ModelError`` for a bad one)."""
    from metasched.graph import import_onnx
    return import_onnx(path, dict(shapes))


def _cmd_tune_network(args: argparse.Namespace) -> int:
    """``metasched tune model.onnx``: the model's tasks under one budget, the task table while it
    runs, then how to run it."""
    from metasched.graph import plan
    from metasched.network import tune_network
    if len(args.workload) > 1:
        raise _UserError("a model is tuned on its own: give one .onnx target")
    for given, option in ((args.param, "-p"), (args.name, "--name"), (args.plot, "--plot"),
                          (args.warm_start, "--warm-start")):
        if given:
            raise _UserError(f"{option} applies to a workload, not to a model (.onnx)")
    model = args.workload[0]
    graph = _model_graph(model, args.shape)
    tasks = plan(graph).tasks
    trials = 64 * len(tasks) if args.trials is None else args.trials
    with _measuring(args) as measuring, Database(args.db) as db:
        result = tune_network(graph, trials, trials_per_task=args.trials_per_task, database=db, seed=args.seed,
                              strategy=args.strategy, scheduler=args.scheduler or "gradient", progress=True,
                              warm_start=not args.no_warm_start, **measuring)
        print(f"{model}: {len(tasks)} tasks, {result.trials} new trials, "
              f"{sum(t.earlier_trials for t in result.tasks)} earlier ones in {args.db}, {result.wall_seconds:.1f} s")
        for line in task_table(result):
            print(line)
    shapes = "".join(f" --shape {name}={','.join(map(str, dims))}" for name, dims in args.shape)
    print(f"\nrun it: metasched run {shlex.quote(model)} --db {shlex.quote(args.db)}{shapes}")
    return EXIT_OK


def _cmd_run(args: argparse.Namespace) -> int:
    """``metasched run model.onnx``: compile the model from the database, run it on random
    inputs, print its latency and per-task table, and compare with onnxruntime when it is
    installed."""
    from metasched.network import compile_network
    from metasched.timing import median, repeat_seconds
    graph = _model_graph(args.model, args.shape)
    db = _existing_db(args.db) if args.db else None
    try:
        network = compile_network(graph, database=db)
    finally:
        if db is not None:
            db.close()
    inputs = network.random_inputs(args.seed)
    outputs = network(**inputs)
    latency = median(repeat_seconds(lambda: network(**inputs), repeat=5, min_repeat_seconds=0.2))
    tuned = sum(k.tuned for k in network.kernels)
    print(f"{args.model}: {len(network.kernels)} tasks ({tuned} tuned), "
          f"{network.num_calls} kernel calls; latency {format_seconds(latency)}")
    print(network.report(inputs))
    try:
        import onnxruntime
    except ImportError:
        print("onnxruntime is not installed: the outputs were not compared with it")
        return EXIT_OK
    session = onnxruntime.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    want = session.run(network.output_names, inputs)
    rtol = network.tolerance()
    worst, bad = 0.0, []
    for name, got, ref in zip(network.output_names, outputs, want):
        diff = np.abs(got.astype(np.float64) - ref)
        worst = max(worst, float(diff.max(initial=0.0)))
        allowed = rtol * float(np.abs(ref).max(initial=0.0)) + rtol * np.abs(ref)
        if not (diff <= allowed).all():
            bad.append(name)
    print(f"largest difference from onnxruntime: {worst:.3g} (tolerance {rtol:.2g} relative)")
    if bad:
        print(f"outputs {', '.join(bad)} differ from onnxruntime beyond the tolerance")
        return EXIT_MISMATCH
    return EXIT_OK


def _cmd_tune(args: argparse.Namespace) -> int:
    if any(_is_model(t) for t in args.workload):
        return _cmd_tune_network(args)
    if args.shape:
        raise _UserError("--shape gives a model's input shape; for a workload use -p NAME=INT")
    targets = [_weighted(target) for target in args.workload]
    if len(targets) > 1 or targets[0][1] is not None:
        return _cmd_tune_tasks(args, targets)
    if args.scheduler is not None or args.trials_per_task is not None:
        raise _UserError("--scheduler and --trials-per-task share a budget between several targets; "
                         "tune gets one")
    args.workload = targets[0][0]
    if args.trials is None:
        args.trials = 64
    wl = _workload(args.workload, dict(args.param), args.name)
    _check_fits(wl)
    if args.plot:
        _check_plot_path(args)
    if args.warm_start and args.no_warm_start:
        raise _UserError("--warm-start names workloads to warm-start on and --no-warm-start asks for none: "
                         "give one of them")
    if args.warm_start and args.strategy != "evolutionary":
        raise _UserError(f"--warm-start trains the cost model of evolutionary search; --strategy "
                         f"{args.strategy} has none")
    if args.warm_start and not os.path.exists(args.db):
        raise _UserError(f"--warm-start reads the records of other workloads in --db {args.db}, "
                         f"which does not exist")
    with _measuring(args) as measuring, Database(args.db) as db:
        # DatabaseError for a name of no workload, of several, or of one that cannot be rebuilt.
        warm = [db.workload(name) for name in args.warm_start] or not args.no_warm_start
        result = tune(wl, trials=args.trials, database=db, seed=args.seed, strategy=args.strategy,
                      progress=True, warm_start=warm, **measuring)
        failed = len(result.failures)
        print(f"{wl.label}: {len(result.history)} new trials ({failed} failed), "
              f"{result.earlier_trials} earlier ones in {args.db}, {result.wall_seconds:.1f} s")
        if result.concurrent_trials:
            print(f"another run tuning into {args.db} meanwhile recorded {result.concurrent_trials} more")
        if result.exhausted:
            print("the search space ran out of programs not yet measured")
        if result.retimed:
            print(f"the machine was busy: {result.retimed} programs were timed again")
        if result.lasting_loads:
            slowdowns = ", ".join(f"{s:.1f}x" for s in result.lasting_loads)
            print(f"the machine stayed busy past the load guard's waits {len(result.lasting_loads)} time(s) "
                  f"(its best kernel at {slowdowns} its time): the programs timed then were timed at that speed")
        for reason in result.unconfirmed:
            print(f"not confirmed: {reason}")
        if result.confirmation is not None:
            print(_confirmed(result.confirmation))
        plotted = _plot(result, args.plot) if args.plot else True
        if result.best_record is None:
            if not result.history and not result.earlier_trials:
                print("nothing measured yet (--trials 0)")
                return EXIT_OK if plotted else EXIT_USER_ERROR
            print("no trial ran correctly: no best program")
            return EXIT_MISMATCH
        print(f"\n# best trace (record {result.best_record.id}, "
              f"{format_seconds(result.best_seconds)} when tuned)\n{result.best_trace}\n")
    if args.cluster:
        print(_timed_elsewhere(result.target))
    else:
        _check_and_time(result.best_schedule, seed=0)
    return EXIT_OK if plotted else EXIT_USER_ERROR


@contextlib.contextmanager
def _measuring(args: argparse.Namespace) -> Iterator[dict]:
    """``tune``'s builder and runner for ``--cluster`` (none without it: local ones), closed
    after the run. An address that does not answer, a cluster that cannot time kernels or a
    scheduler that goes away mid-run is a ``ClusterError``: one line."""
    if args.cluster is None:
        yield {}
        return
    try:
        from metasched.measure.dask import DaskBuilder, DaskRunner, connect
    except ImportError:
        raise _UserError("--cluster needs Dask's distributed: pip install 'metasched[dask]'") from None
    client = connect(args.cluster)
    runner = DaskRunner(client)
    try:
        runner.machine()  # a cluster that cannot time kernels says so before the database is made
        yield dict(builder=DaskBuilder(client), runner=runner)
    finally:
        runner.close()
        client.close()


def _timed_elsewhere(target) -> str:
    """Why the best is not timed against numpy here after a run on a cluster."""
    return (f"timed on the cluster's runner ({target.cpu}, {target.num_threads} threads); on a machine like it, "
            f"`metasched best` checks the best and times it against numpy")


def _weighted(target: str) -> tuple[str, Optional[float]]:
    """A tune target as ``(target, weight)``: ``NAME:WEIGHT`` or ``FILE.tensor:WEIGHT`` gives a
    weight (a positive number), a target without one None."""
    head, sep, tail = target.rpartition(":")
    if not sep or not head:
        return target, None
    try:
        weight = float(tail)
    except ValueError:
        return target, None
    if not math.isfinite(weight) or weight <= 0:
        raise _UserError(f"{target}: the weight after ':' must be a positive number, not {tail!r}")
    return head, weight


def _cmd_tune_tasks(args: argparse.Namespace, targets: list[tuple[str, Optional[float]]]) -> int:
    """``metasched tune A B:3 c.tensor ...``: one budget over all, the task table while it runs,
    then each task's best against its numpy baseline."""
    if args.param or args.name:
        raise _UserError("-p and --name apply to one target; with several, give each as a .tensor file "
                         "with the parameters it needs")
    if args.plot:
        raise _UserError("--plot draws one workload's curve; tune the targets one by one to plot them")
    if args.warm_start:
        raise _UserError("--warm-start names the workloads one target's cost model starts from; several "
                         "targets warm-start from each other's kind (--no-warm-start: from nothing)")
    tasks, seen = [], {}
    for target, weight in targets:
        wl = _workload(target, {})
        _check_fits(wl)
        if wl.key in seen:
            raise _UserError(f"{target} and {seen[wl.key]} are one workload ({wl.label}); give it once with "
                             f"the sum of their weights")
        seen[wl.key] = target
        tasks.append(TuneTask(wl, 1.0 if weight is None else weight))
    trials = 64 * len(tasks) if args.trials is None else args.trials
    with _measuring(args) as measuring, Database(args.db) as db:
        result = tune_tasks(tasks, trials=trials, database=db, seed=args.seed, strategy=args.strategy,
                            scheduler=args.scheduler or "gradient", trials_per_task=args.trials_per_task,
                            progress=True, warm_start=not args.no_warm_start, **measuring)
        print(f"{len(tasks)} tasks: {result.trials} new trials, {sum(t.earlier_trials for t in result.tasks)} "
              f"earlier ones in {args.db}, {result.wall_seconds:.1f} s")
        for line in task_table(result):
            print(line)
        for task in result.tasks:
            for reason in task.unconfirmed:
                print(f"{task.workload.label}: not confirmed: {reason}")
        schedules = [(task, task.best_schedule) for task in result.tasks]
    if args.cluster:
        print(_timed_elsewhere(result.target))
        return EXIT_MISMATCH if any(sch is None for _, sch in schedules) else EXIT_OK
    print("\n# each task's best, checked and timed against its numpy version as called")
    missing = 0
    for task, sch in schedules:
        if sch is None:
            print(f"{task.workload.label}: no trial ran correctly")
            missing += 1
            continue
        print(f"{task.workload.label}: {_speed_line(sch)}")
    return EXIT_MISMATCH if missing else EXIT_OK


def _speed_line(sch: Schedule) -> str:
    """Build ``sch``, check it against the reference, and time it against numpy in turns: one
    line."""
    wl = sch.workload
    kernel = build(sch)
    inputs = wl.random_inputs(seed=0)
    assert_outputs_close(wl, kernel(*inputs, poison=True), wl.reference(*inputs))
    baseline = numpy_baseline(wl)
    if baseline is None:
        called = median_seconds(lambda: kernel(*inputs), repeat=5, min_repeat_seconds=0.02)
        return f"{format_seconds(called)} ({format_gflops(wl.flops, called)}); no numpy baseline"
    ours, theirs, ratio = paired_times(lambda: kernel(*inputs), lambda: baseline(*inputs),
                                       rounds=5, repeat=3, min_repeat_seconds=0.02, settle_seconds=0.2)
    return (f"{format_seconds(ours)} ({format_gflops(wl.flops, ours)}), numpy {format_seconds(theirs)}: "
            f"{ratio:.2f}x numpy")


def _plot(result, path: str) -> bool:
    """Save the curve; whether it could be (the trials are kept either way: the error says so,
    and the command goes on to its report, then exits 2)."""
    from metasched.tune.plot import plot_curve
    try:
        plot_curve(result, path)
    except (OSError, ValueError) as err:
        print(f"metasched: the curve could not be saved to {path} ({err}); the trials are in the database",
              file=sys.stderr)
        return False
    print(f"curve saved to {path}")
    return True


def _confirmed(confirmation: Confirmation) -> str:
    """One line on what timing the fastest again in turns found."""
    order = sorted(confirmation.times, key=lambda i: (confirmation.median(i), i))
    times = ", ".join(f"record {i} {format_seconds(confirmation.median(i))}" for i in order)
    return f"the {len(order)} fastest timed again in turns: {times}"


def _cmd_best(args: argparse.Namespace) -> int:
    wl = _read_workload(args)
    _check_fits(wl)
    with _existing_db(args.db) as db:
        record = _best(db, wl, args)
        confirmation = db.confirmation(wl, host_target())
        sch = replay_record(wl, record, db.path)  # before anything is printed
    print(f"# best of {wl.label}: record {record.id}, {format_seconds(record.median)} when tuned "
          f"({format_gflops(wl.flops, record.median)})\n{record.trace}\n")
    if confirmation is not None and confirmation.current:
        print(f"# {_confirmed(confirmation)}\n")
    print(f"# its program\n{sch}\n")
    _check_and_time(sch, seed=0)
    return EXIT_OK


def _cmd_trace(args: argparse.Namespace) -> int:
    wl = _read_workload(args)
    replaced = _check_output(args.output, "-o", _inputs(args), args.force)
    with _existing_db(args.db) as db:
        record = _best(db, wl, args)
    record.trace.save(args.output)
    print(f"saved the best trace of {wl.label} (record {record.id}, "
          f"{format_seconds(record.median)}) to {args.output}{' (replaced)' if replaced else ''}")
    return EXIT_OK


def _cmd_replay(args: argparse.Namespace) -> int:
    wl = _workload(args.workload, dict(args.param), args.name)
    _check_fits(wl)
    trace = Trace.load(args.trace)
    sch = replay(wl, trace)
    print(f"# {args.trace} on {wl}\n{sch}\n")
    for repair in repaired_decisions(trace, sch):  # replay fits them to the workload without a word
        print(f"# {repair}")
    _check_and_time(sch, args.seed)
    return EXIT_OK


def _cmd_history(args: argparse.Namespace) -> int:
    wl = _read_workload(args)
    with _existing_db(args.db) as db:
        records = db.records(wl)
    here = host_target()
    print(f"{wl.label}: {len(records)} records in {args.db}, newest first")
    for record in reversed(records):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
        where = "" if record.target.compatible(here) else \
            f"  [{record.target.cpu}, {record.target.num_threads} threads]"
        if record.ok:
            outcome = f"{format_seconds(record.median):>12} {format_gflops(wl.flops, record.median):>16}"
        else:
            outcome = f"failed: {record.error}"
        print(f"#{record.id:<5d} {when}  {outcome}{where}")
    return EXIT_OK


# ---- the parser and main ----------------------------------------------------------------------

def _extra_tune(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--trials", type=_count, default=None,
                     help="the trial budget on this CPU (with --cluster, the runner's), over all targets, "
                          "counting the trials the database already holds (default 64 per target)")
    cmd.add_argument("--scheduler", choices=sorted(SCHEDULERS), default=None,
                     help="with several targets, how the budget is shared: gradient (default: where the "
                          "weighted latency drops most) or round-robin")
    cmd.add_argument("--trials-per-task", type=_count, default=None, metavar="N",
                     help="with several targets, the most trials of any one")
    _db_option(cmd, "the tuning database (created when missing; a rerun goes on where it stopped)")
    cmd.add_argument("--plot", metavar="FILE", type=_path,
                     help="save the curve of best GFLOP/s by trial (PNG, SVG or PDF)")
    _force_option(cmd, "--plot")
    cmd.add_argument("--strategy", choices=sorted(STRATEGIES), default=DEFAULT_STRATEGY,
                     help=f"how to choose the programs to measure (default {DEFAULT_STRATEGY}: "
                          f"evolution under a learned cost model; replay: random samples)")
    cmd.add_argument("--warm-start", action="append", default=[], metavar="WORKLOAD",
                     help="start the cost model trained on the records of WORKLOAD (its name or key in "
                          "the database) measured on this CPU (repeatable); without it, on those of "
                          "the workload of the same kind with the most records, if any (dense after "
                          "matmul: the first trials do better)")
    cmd.add_argument("--no-warm-start", action="store_true",
                     help="start the cost model knowing nothing of other workloads")
    cmd.add_argument("--cluster", metavar="ADDRESS", default=None,
                     help="build on the workers of the Dask scheduler at ADDRESS (tcp://host:8786) and measure on "
                          "its workers that hold the resource metasched-runner, whose CPU the records are for "
                          "(docs/cluster.md; needs metasched[dask])")
    _shape_option(cmd)


def _shape_option(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--shape", type=_shape, action="append", default=[], metavar="NAME=D,D,...",
                     help="a model input's shape, where the model leaves a dimension symbolic (repeatable)")


def _db_option(cmd: argparse.ArgumentParser, helptext: str = "the tuning database") -> None:
    cmd.add_argument("--db", required=True, metavar="PATH", type=_path, help=helptext)


def _force_option(cmd: argparse.ArgumentParser, output: str) -> None:
    cmd.add_argument("--force", action="store_true",
                     help=f"replace the file {output} names if it exists (never one the command reads)")


def _extra_trace(cmd: argparse.ArgumentParser) -> None:
    _db_option(cmd)
    cmd.add_argument("-o", "--output", required=True, metavar="FILE", type=_path,
                     help="where to write the trace (text; JSON when FILE ends with .json); an existing "
                          "file only with --force")
    _force_option(cmd, "-o")


def _extra_replay(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("trace", metavar="TRACE_FILE", help="a trace as text (as `metasched trace` "
                     "writes it) or JSON")


# The subcommands that take a workload: name, what runs, help, the default TARGET (None:
# required), whether it draws random inputs (and so takes --seed), and what else it takes.
_WORKLOAD_COMMANDS = (
    ("show", _cmd_show, "print a workload and its unscheduled loop program", None, False, None),
    ("check", _cmd_check, "compile a workload unscheduled and compare it with the reference", None, True, None),
    ("demo", _cmd_demo, "run a workload's hand-written schedule (the unscheduled program where "
     "there is none), check it and time it against numpy", "matmul", True, None),
    ("tune", _cmd_tune, "search for a fast program of a workload, measuring every trial in worker "
     "processes and recording it in a database; print the best trace and its speed against numpy "
     "(--seed seeds the search)", None, True, _extra_tune),
    ("best", _cmd_best, "print the best recorded trace of a workload and its program, check it and "
     "time it against numpy", None, False, _db_option),
    ("trace", _cmd_trace, "save the best recorded trace of a workload to a file, as editable text",
     None, False, _extra_trace),
    ("replay", _cmd_replay, "build a trace on a workload, check it against the reference and time "
     "it against numpy", None, True, _extra_replay),
    ("history", _cmd_history, "list the records of a workload, newest first, with failures and "
     "their reasons", None, False, _db_option),
)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line, like every other error (argparse prints the usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"metasched: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    common = dict(epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser = _Parser(prog="metasched", description="Find fast CPU kernels for tensor programs.", **common)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("workloads", help="list the built-in workloads", **common).set_defaults(run=_cmd_workloads)
    for name, run, helptext, default, seeded, extra in _WORKLOAD_COMMANDS:
        cmd = sub.add_parser(name, help=helptext, description=helptext, **common)
        if name == "replay":
            extra(cmd)  # TRACE_FILE comes before TARGET
        if name == "tune":
            cmd.add_argument("workload", metavar="TARGET", nargs="+",
                             help="a built-in workload's name or a .tensor file; several share one budget, "
                                  "each weighted by NAME:WEIGHT (how often a network runs it; default 1); "
                                  "or one ONNX model (.onnx), whose tasks share the budget (default 64 each)")
        elif default is None:
            cmd.add_argument("workload", metavar="TARGET", help="a built-in workload's name or a .tensor file")
        else:
            cmd.add_argument("workload", metavar="TARGET", nargs="?", default=default,
                             help=f"a built-in workload's name or a .tensor file (default {default})")
        cmd.add_argument("--name", help="which workload of a file that holds several")
        cmd.add_argument("-p", "--param", type=_param, action="append", default=[], metavar="NAME=INT",
                         help="override a workload parameter (repeatable)")
        if seeded:
            seeds = "the search" if name == "tune" else "the random inputs"
            cmd.add_argument("--seed", type=_seed, default=0, help=f"seed of {seeds} (>= 0, default 0)")
        if extra is not None and name != "replay":
            extra(cmd)
        cmd.set_defaults(run=run)
    helptext = ("compile an ONNX model from the tuning database (a task without records gets a default "
                "schedule), run it on random inputs, print its latency and each task's time, and compare "
                "its outputs with onnxruntime's when onnxruntime is installed")
    cmd = sub.add_parser("run", help=helptext, description=helptext, **common)
    cmd.add_argument("model", metavar="MODEL", type=_path, help="an ONNX model file (.onnx)")
    cmd.add_argument("--db", metavar="PATH", type=_path, default=None,
                     help="the tuning database (default: none, every task on its default schedule)")
    cmd.add_argument("--seed", type=_seed, default=0, help="seed of the random inputs (>= 0, default 0)")
    _shape_option(cmd)
    cmd.set_defaults(run=_cmd_run)
    return parser


def _fail(err: object, code: int) -> int:
    print(f"metasched: {err}", file=sys.stderr)
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit code.
    Errors meant for the user become messages; anything else is a bug and keeps its traceback."""
    try:
        args = _parser().parse_args(argv)
        code = args.run(args)
        sys.stdout.flush()  # a reader that went away shows up here, not at interpreter exit
        return code
    except BrokenPipeError:
        # Point stdout at devnull so that the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)
    except MismatchError as err:
        return _fail(err, EXIT_MISMATCH)
    except MetaschedError as err:
        return _fail(err, EXIT_USER_ERROR)
    except MemoryError as err:  # the estimate of _check_fits fell short
        return _fail(f"out of memory: {err or 'an allocation failed'}", EXIT_USER_ERROR)


if __name__ == "__main__":
    raise SystemExit(main())
