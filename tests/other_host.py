"""Run a command as if on another host this project meets: the tests, say, on an AVX2 machine
while this one has AVX-512.

    python tests/other_host.py znver3 -- python -m pytest -q -m "not slow"

The machines this project is developed and run on differ (an AVX2 Zen 3, an AVX-512 Zen 4,
an AVX-512 Xeon), and what the code does follows the host: the vector width the code
generator and the hand-written schedules use, libmvec's variants, the cache sizes the features
place their levels at, the target a database records. A test that holds on one host may not
on another; this finds such a test before the machine does. Every process of the command
(pytest, the worker processes it spawns) sees:

* LLVM's host CPU as the named one, and for a host without AVX-512 this machine's features
  without AVX-512 and what came with it, through a ``sitecustomize`` module put first on
  ``PYTHONPATH`` (it shadows any other ``sitecustomize``). Only features can be taken away:
  code for AVX-512 would not run on an AVX2 machine, so such a host is refused here. The code
  asks the features for the vector width and libmvec's variants only, so the AVX-512
  extensions one AVX-512 part has and another lacks are left as they are.
* Linux's description of the first core's caches (``/sys/devices/system/cpu/cpu0/cache``) as
  that host's, bind-mounted in a private mount namespace (``unshare -m``: root on Linux).
  Without it the command runs with this machine's cache sizes, and says so.

The kernels still run on this machine's cores, so timings say nothing about the other host.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

_CACHES = "/sys/devices/system/cpu/cpu0/cache"
# Feature names of the AVX-512 generation (and what came with it) in LLVM's host feature string.
_AVX512 = ("avx512", "amx", "avx10", "evex512", "avxvnni", "avxifma", "avxneconvert")


@dataclass(frozen=True)
class Host:
    cpu: str  # LLVM's name for it
    avx512: bool
    l1d: str  # sizes as Linux writes them
    l2: str
    l3: str


HOSTS = {
    "znver3": Host("znver3", avx512=False, l1d="32K", l2="512K", l3="32768K"),
    "znver4": Host("znver4", avx512=True, l1d="32K", l2="1024K", l3="32768K"),
    "sapphirerapids": Host("sapphirerapids", avx512=True, l1d="48K", l2="2048K", l3="107520K"),
}

_SITECUSTOMIZE = '''\
"""Written by tests/other_host.py: LLVM's host CPU as {cpu!r}{without}."""
import llvmlite.binding as _llvm

_features = _llvm.get_host_cpu_features
_DROPPED = {dropped!r}


class _Features:
    def __init__(self, text):
        self._text = text

    def flatten(self):
        return self._text


def _host_features():
    kept = []
    for feature in _features().flatten().split(","):
        if feature.startswith("+") and feature[1:].startswith(_DROPPED):
            feature = "-" + feature[1:]
        kept.append(feature)
    return _Features(",".join(kept))


_llvm.get_host_cpu_features = _host_features
_llvm.get_host_cpu_name = lambda: {cpu!r}
'''


def _has_avx512() -> bool:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    return "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")


def _write_caches(folder: Path, host: Host) -> None:
    """A cache folder as Linux writes it: ``index*/level``, ``type``, ``size``."""
    for index, (level, kind, size) in enumerate(((1, "Data", host.l1d), (1, "Instruction", host.l1d),
                                                 (2, "Unified", host.l2), (3, "Unified", host.l3))):
        entry = folder / f"index{index}"
        entry.mkdir(parents=True)
        for name, text in (("level", str(level)), ("type", kind), ("size", size)):
            (entry / name).write_text(text + "\n")


def _can_mount() -> bool:
    return (sys.platform == "linux" and os.geteuid() == 0 and shutil.which("unshare") is not None
            and Path(_CACHES).is_dir()
            and subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("host", choices=sorted(HOSTS))
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    host = HOSTS[args.host]
    if host.avx512 and not _has_avx512():
        parser.error(f"{args.host} has AVX-512 and this machine has not: its kernels would not run here")
    with tempfile.TemporaryDirectory(prefix="other_host.") as scratch:
        site = Path(scratch) / "site"
        site.mkdir()
        dropped = () if host.avx512 else _AVX512
        (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(
            cpu=host.cpu, dropped=dropped, without="" if host.avx512 else ", without AVX-512"))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
        if _can_mount():
            caches = Path(scratch) / "caches"
            _write_caches(caches, host)
            script = f"mount --bind {shlex.quote(str(caches))} {_CACHES} && exec {shlex.join(command)}"
            command = ["unshare", "-m", "sh", "-c", script]
            print(f"as {args.host}: LLVM host CPU {host.cpu}, caches L1d {host.l1d}, L2 {host.l2}", flush=True)
        else:
            print(f"as {args.host}: LLVM host CPU {host.cpu}; this machine's cache sizes (a private "
                  f"mount of {_CACHES} needs root and unshare on Linux)", flush=True)
        try:
            return subprocess.run(command, env=env).returncode
        except KeyboardInterrupt:  # the command had it too
            return 130


if __name__ == "__main__":
    sys.exit(main())
