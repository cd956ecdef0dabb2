"""Test-only hooks for the builder and runner workers: they make chosen candidates misbehave
for real (a segfault, a hang, a compile past its time limit, a kernel computing a wrong
answer), so that the tests can show each costs one failed trial. Module-level functions, so
that spawned workers can unpickle them."""
import ctypes
import dataclasses
import time

from metasched import parse
from metasched.database import program_key
from metasched.schedule import Schedule

# matmul_relu with another threshold: the same buffers, so its kernel fits the same call,
# but a different answer.
WRONG_TEXT = """
workload matmul_relu(M = 512, N = 512, K = 512) {
    input A: float32[M, K]
    input B: float32[K, N]
    C[i, j] += A[i, k] * B[k, j]
    output D[i, j] = max(C[i, j], 0.5)
}
"""


def build_hook(workload, trace, func, *, faults):
    """``faults`` maps program keys to "segfault", "hang", "slow_compile" or "wrong"."""
    fault = faults.get(program_key(trace))
    if fault == "slow_compile":
        time.sleep(600)
    if fault == "wrong":
        return Schedule(parse(WRONG_TEXT, **workload.params)).lower()
    if fault in ("segfault", "hang"):  # tagged here, done by the runner's hook
        return dataclasses.replace(func, name=f"{func.name}__{fault}")
    return func


def run_hook(artifact):
    if artifact.func.name.endswith("__segfault"):
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if artifact.func.name.endswith("__hang"):
        time.sleep(600)
