"""``Machine``: where a runner times kernels. Its CPU is what the kernels are built for and
what the records' target names; a runner on another machine (a cluster's) reports its own."""
from __future__ import annotations

import socket
from dataclasses import dataclass, field

from metasched.codegen import available_cores
from metasched.codegen.target import host_cpu


@dataclass(frozen=True)
class Machine:
    """A machine's CPU as LLVM names it (``host``: triple, CPU name, feature string, as
    ``Artifact.host`` records it) and the ``cores`` a process there may run on; ``name`` (its
    host name) is for messages and does not count in comparisons."""

    host: tuple[str, str, str]
    cores: int
    name: str = field(default="", compare=False)

    @classmethod
    def here(cls) -> Machine:
        """The machine this process runs on."""
        return cls(host_cpu(), available_cores(), socket.gethostname())

    @property
    def cpu(self) -> str:
        return self.host[1]

    @property
    def features(self) -> str:
        return self.host[2]

    def __str__(self) -> str:
        where = f"{self.name}: " if self.name else ""
        return f"{where}{self.cpu}, {self.cores} cores"
