"""The one settings object of code generation. Nothing here reads the environment."""
from __future__ import annotations

from dataclasses import dataclass

from metasched.errors import check_integer, check_type

THREADING_CHOICES = ("auto", "gomp", "pthread", "serial")


@dataclass(frozen=True)
class CodegenOptions:
    """How ``compile_func`` builds a kernel.

    ``num_threads``: threads of a parallel loop; 0 means every core this process may run on.
    ``opt_level``: 0 skips the optimisation pipeline; 1-3 is the new pass manager's speed level.
    ``threading``: how parallel loops run. ``"gomp"`` calls libgomp's ``GOMP_parallel`` (its
    thread pool forks and joins in a few microseconds); ``"pthread"`` makes the generated code
    create and join one POSIX thread per extra worker per parallel loop (no library besides libc,
    tens of microseconds per loop); ``"serial"`` runs parallel loops as ordinary loops; ``"auto"``
    picks gomp when libgomp can be loaded, else pthread.
    ``vector_math``: vectorized exp, log, tanh, erf and pow call glibc's libmvec (4 ulp) when it
    is present, instead of one libm call per lane.
    ``poison``: for testing. Every output, workspace and scratch buffer starts each run filled
    with NaN, so that a kernel which reads memory it never wrote gives NaN every time instead
    of whatever the memory held (which may even be right, from an earlier run). Costs a pass
    over that memory per run and per scratch allocation.
    """

    num_threads: int = 0
    opt_level: int = 3
    threading: str = "auto"
    vector_math: bool = True
    poison: bool = False

    def __post_init__(self) -> None:
        if self.threading not in THREADING_CHOICES:
            raise ValueError(f"CodegenOptions: threading must be one of {THREADING_CHOICES}, "
                             f"not {self.threading!r}")
        check_integer(self.num_threads, "CodegenOptions", "num_threads", 0)
        if check_integer(self.opt_level, "CodegenOptions", "opt_level", 0) > 3:
            raise ValueError(f"CodegenOptions: opt_level must be 0..3, not {self.opt_level}")
        for name in ("vector_math", "poison"):
            check_type(getattr(self, name), "CodegenOptions", name, bool, "True or False")
