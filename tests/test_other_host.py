"""``tests/other_host.py``: a command run through it sees the other host's CPU, in its own
process and in the worker processes it spawns, and its cache sizes where the tool can mount
them."""
import pathlib
import subprocess
import sys

import pytest

from metasched.codegen import host_vector_bits
from metasched.search import features

TOOL = pathlib.Path(__file__).with_name("other_host.py")

PROBE = """
import multiprocessing
from metasched.codegen import host_vector_bits
from metasched.codegen.target import host_cpu
from metasched.search.features import L1_BYTES, L2_BYTES

def seen(_):
    return host_cpu()[1], host_vector_bits(), L1_BYTES, L2_BYTES

if __name__ == "__main__":
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        print(seen(None), pool.map(seen, [None])[0])
"""


def _run(host: str, tmp_path: pathlib.Path) -> subprocess.CompletedProcess:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    return subprocess.run([sys.executable, str(TOOL), host, "--", sys.executable, str(probe)],
                          capture_output=True, text=True, timeout=120)


def test_an_avx2_host_is_seen_by_the_command_and_its_spawned_workers(tmp_path):
    run = _run("znver3", tmp_path)
    assert run.returncode == 0, run.stderr
    mounted = "caches L1d" in run.stdout.splitlines()[0]  # else it says it could not
    caches = (32 * 1024, 512 * 1024) if mounted else (features.L1_BYTES, features.L2_BYTES)
    expected = ("znver3", min(256, host_vector_bits()), *caches)
    assert run.stdout.splitlines()[-1] == f"{expected} {expected}"


def test_a_host_with_features_this_machine_lacks_is_refused(tmp_path):
    if host_vector_bits() >= 512:
        pytest.skip("this machine has AVX-512: every host of the table runs here")
    run = _run("znver4", tmp_path)
    assert run.returncode == 2 and "would not run here" in run.stderr
