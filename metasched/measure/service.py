"""``Service``: what a tuning run starts before it builds or times anything and closes after
(worker processes, a cluster's client); a context manager."""
from __future__ import annotations


class Service:
    """``start`` readies it now rather than at the first use; ``close`` releases what it holds."""

    def start(self) -> None:
        """Ready it now rather than at the first use."""

    def close(self) -> None:
        """Release what it holds."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
