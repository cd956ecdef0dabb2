"""The ``metasched`` command line.

    metasched workloads                        list the built-in suite
    metasched show TARGET [-p K=V ...]         print a workload and its unscheduled loop program
    metasched check TARGET [-p K=V ...]        compile it unscheduled and compare with the reference
    metasched demo [TARGET] [-p K=V ...]       run its hand-written schedule (the unscheduled
                                               program where there is none), check it, time it
                                               against numpy

A TARGET is a built-in workload's name or a ``.tensor`` file (``--name`` picks one workload of
a file that holds several); ``EPILOG`` says how the two are told apart and what the exit codes
mean. A user error is one line on stderr, ``metasched: ...`` (a parse error adds the offending
line and a caret), never a traceback; a traceback means a bug in metasched.

Map: target and parameter parsing · memory needed and available · the subcommands · the parser
and ``main`` (where errors become exit codes).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import NoReturn, Optional, Sequence

import numpy as np

from metasched import handwritten, workloads
from metasched.build import build
from metasched.errors import MetaschedError, MismatchError, UnknownWorkloadError
from metasched.lang import Workload, assert_outputs_close, load
from metasched.lang.reference import DEFAULT_CHUNK_BYTES
from metasched.schedule import Schedule
from metasched.timing import median_seconds
from metasched.workloads.baselines import numpy_baseline

EXIT_OK = 0
EXIT_MISMATCH = 1  # also what Python exits with after the traceback of an unexpected error
EXIT_USER_ERROR = 2  # argparse's code for usage errors; every other user error uses it too
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as `yes | head -1` reports it

EPILOG = """\
TARGET is a path when it names an existing file, ends with .tensor or contains a path
separator; otherwise it is the name of a built-in workload (see `metasched workloads`), even
when a folder of that name is in the current directory.

exit codes:
  0    success
  1    a compiled kernel does not match the numpy reference, or an internal error (with a
       traceback): a bug in metasched, please report it
  2    a user error, as one line on stderr: bad arguments, a file that cannot be read or does
       not parse, an unknown workload or parameter, sizes whose tensors do not fit in the
       memory available, a schedule that does not apply to the workload
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


def _seed(text: str) -> int:
    """An argparse type: a seed of numpy's generators, which take only non-negative integers."""
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if seed < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed: a seed is an integer >= 0")
    return seed


def _call(wl: Workload) -> str:
    return f"{wl.name}({', '.join(f'{k}={v}' for k, v in wl.params.items())})"


# ---- memory -----------------------------------------------------------------------------------

# assert_outputs_close compares float64 copies of both sides through a few float64
# temporaries: about five float64 arrays the size of each output are alive at its peak.
_COMPARE_FLOAT64_ARRAYS = 5


class _TooBig(MetaschedError):
    """A workload's tensors do not fit in the memory available (a user error: the sizes)."""


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
        raise _TooBig(f"{_call(wl)} needs {_human(need)} for its tensors; this machine has "
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
    sch = handwritten.for_workload(wl)
    if sch is None:
        sch = Schedule(wl)
        print(f"# {wl}: no hand-written schedule for {wl.name}: running the unscheduled program\n{sch}\n")
    else:
        print(f"# {wl}: hand-written schedule\n{sch}\n")
    started = time.perf_counter()
    kernel = build(sch)
    print(f"compiled in {(time.perf_counter() - started) * 1e3:.0f} ms (llvmlite, host CPU)")
    inputs = wl.random_inputs(seed=args.seed)
    assert_outputs_close(wl, kernel(*inputs), wl.reference(*inputs))
    print("outputs match the numpy reference")
    ours = kernel.time(*inputs)
    print(f"metasched: {ours * 1e3:9.3f} ms  {wl.flops / ours / 1e9:7.1f} GFLOP/s")
    baseline = numpy_baseline(wl)
    if baseline is None:
        print(f"numpy:     no baseline for {wl.name} (only the built-in workloads have one)")
    else:
        theirs = median_seconds(lambda: baseline(*inputs))
        print(f"numpy:     {theirs * 1e3:9.3f} ms  {wl.flops / theirs / 1e9:7.1f} GFLOP/s")
        print(f"speed relative to numpy: {theirs / ours:.2f}x")
    return EXIT_OK


# ---- the parser and main ----------------------------------------------------------------------

# The subcommands that take a workload: name, what runs, help, the default TARGET (None:
# required), whether it draws random inputs (and so takes --seed).
_WORKLOAD_COMMANDS = (
    ("show", _cmd_show, "print a workload and its unscheduled loop program", None, False),
    ("check", _cmd_check, "compile a workload unscheduled and compare it with the reference", None, True),
    ("demo", _cmd_demo, "run a workload's hand-written schedule (the unscheduled program where "
     "there is none), check it and time it against numpy", "matmul", True),
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
    for name, run, helptext, default, seeded in _WORKLOAD_COMMANDS:
        cmd = sub.add_parser(name, help=helptext, description=helptext, **common)
        if default is None:
            cmd.add_argument("workload", metavar="TARGET", help="a built-in workload's name or a .tensor file")
        else:
            cmd.add_argument("workload", metavar="TARGET", nargs="?", default=default,
                             help=f"a built-in workload's name or a .tensor file (default {default})")
        cmd.add_argument("--name", help="which workload of a file that holds several")
        cmd.add_argument("-p", "--param", type=_param, action="append", default=[], metavar="NAME=INT",
                         help="override a workload parameter (repeatable)")
        if seeded:
            cmd.add_argument("--seed", type=_seed, default=0, help="seed of the random inputs (>= 0, default 0)")
        cmd.set_defaults(run=run)
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
