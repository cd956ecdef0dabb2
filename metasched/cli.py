"""The ``metasched`` command line.

    metasched workloads                      list the built-in suite
    metasched show NAME|FILE [-p K=V ...]    print a workload and its unscheduled loop program
    metasched check NAME|FILE [-p K=V ...]   compile it unscheduled and compare with the reference
    metasched demo [NAME] [-p K=V ...]       hand-schedule a built-in workload, check it, time it
                                             against numpy
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional, Sequence

from metasched import handwritten, workloads
from metasched.build import build
from metasched.errors import MetaschedError
from metasched.lang import Workload, assert_outputs_close, load
from metasched.schedule import Schedule
from metasched.timing import median_seconds
from metasched.workloads.baselines import numpy_baseline


def _params(pairs: Sequence[str]) -> dict[str, int]:
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"metasched: --param wants NAME=INT, got {pair!r}")
        try:
            params[name.strip()] = int(value)
        except ValueError:
            raise SystemExit(f"metasched: --param {name}: {value!r} is not an integer") from None
    return params


def _workload(target: str, params: dict[str, int], name: Optional[str] = None) -> Workload:
    if target.endswith(".tensor") or os.path.sep in target or os.path.exists(target):
        return load(target, name, **params)
    return workloads.get(target, **params)


def _hand_schedule(wl: Workload) -> Schedule:
    """The hand-written schedule for a built-in workload (unscheduled where there is none)."""
    return handwritten.for_workload(wl) or Schedule(wl)


def _cmd_workloads(args: argparse.Namespace) -> int:
    for name in workloads.names():
        wl = workloads.get(name)
        shapes = ", ".join(f"{t.name}{list(t.shape)}" for t in wl.inputs)
        print(f"{name:18s} {wl.flops / 1e9:8.3f} GFLOP   {shapes}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    wl = _workload(args.workload, _params(args.param), args.name)
    if wl.source:
        print(wl.source.strip())
    print(f"\n# bound as {wl}\n")
    print(Schedule(wl))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    wl = _workload(args.workload, _params(args.param), args.name)
    inputs = wl.random_inputs(seed=args.seed)
    kernel = build(wl)
    assert_outputs_close(wl, kernel(*inputs), wl.reference(*inputs))
    print(f"{wl}: the unscheduled kernel matches the reference")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    wl = _workload(args.workload, _params(args.param))
    sch = _hand_schedule(wl)
    print(f"# {wl}: hand-written schedule\n{sch}\n")
    started = time.perf_counter()
    kernel = build(sch)
    print(f"compiled in {(time.perf_counter() - started) * 1e3:.0f} ms (llvmlite, host CPU)")
    inputs = wl.random_inputs(seed=0)
    assert_outputs_close(wl, kernel(*inputs), wl.reference(*inputs))
    print("outputs match the numpy reference")
    ours = kernel.time(*inputs)
    print(f"metasched: {ours * 1e3:9.3f} ms  {wl.flops / ours / 1e9:7.1f} GFLOP/s")
    baseline = numpy_baseline(wl)
    if baseline is not None:
        theirs = median_seconds(lambda: baseline(*inputs))
        print(f"numpy:     {theirs * 1e3:9.3f} ms  {wl.flops / theirs / 1e9:7.1f} GFLOP/s")
        print(f"speed relative to numpy: {theirs / ours:.2f}x")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metasched", description="Find fast CPU kernels for tensor programs.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("workloads", help="list the built-in workloads").set_defaults(run=_cmd_workloads)
    for name, run, helptext in (("show", _cmd_show, "print a workload and its loop program"),
                                ("check", _cmd_check, "compile unscheduled and compare with the reference"),
                                ("demo", _cmd_demo, "hand-schedule a built-in workload and time it against numpy")):
        cmd = sub.add_parser(name, help=helptext)
        if name == "demo":
            cmd.add_argument("workload", nargs="?", default="matmul", help="a built-in workload (default matmul)")
        else:
            cmd.add_argument("workload", help="a built-in workload's name or a .tensor file")
            cmd.add_argument("--name", help="which workload of a file that holds several")
        cmd.add_argument("-p", "--param", action="append", default=[], metavar="NAME=INT",
                         help="override a workload parameter (repeatable)")
        if name == "check":
            cmd.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
        cmd.set_defaults(run=run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except MetaschedError as err:
        print(f"metasched: {err}", file=sys.stderr)
        return 2
