"""``Target``: the machine a record was measured on, and when two machines count as the same.

A time measured on one CPU says little about another, so every record carries its target and
every lookup asks for one. The database does not detect the host (that takes the code
generator); the caller passes the ``Target`` it compiled for.
"""
from __future__ import annotations

import hashlib
import json
import numbers
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    """The CPU a kernel was built for and run on.

    ``cpu`` is LLVM's host CPU name (``"znver4"``), ``features`` LLVM's feature string
    (``"+avx2,+fma,-avx512f,..."``) and ``num_threads`` how many threads the kernel ran on.
    Two targets are ``compatible`` when they have the same CPU, the same set of enabled
    features (in any order; disabled ones do not matter) and the same number of threads;
    ``key`` is a hash of exactly that, so compatible targets have the same key."""

    cpu: str
    features: str
    num_threads: int

    def __post_init__(self) -> None:
        if not isinstance(self.cpu, str) or not self.cpu:
            raise ValueError(f"a target's cpu is LLVM's CPU name such as 'znver4', not {self.cpu!r}")
        if not isinstance(self.features, str):
            raise ValueError(f"a target's features are LLVM's feature string such as '+avx2,+fma,-avx512f', "
                             f"not {self.features!r}")
        unsigned = [entry for entry in self._entries() if entry[0] not in "+-"]
        if unsigned:
            raise ValueError(f"each entry of a target's feature string starts with + or -: {unsigned[0]!r} does not")
        if not isinstance(self.num_threads, numbers.Integral) or isinstance(self.num_threads, bool) \
                or self.num_threads < 1:
            raise ValueError(f"a target's num_threads is a positive integer, not {self.num_threads!r}")

    def _entries(self) -> list[str]:
        return [entry.strip() for entry in self.features.split(",") if entry.strip()]

    @property
    def enabled_features(self) -> frozenset[str]:
        """The names of the features the string enables (``"+avx2"`` gives ``"avx2"``)."""
        return frozenset(entry[1:] for entry in self._entries() if entry[0] == "+")

    def compatible(self, other: Target) -> bool:
        """Whether a time measured on ``other`` holds on this target: same CPU, same enabled
        features, same number of threads."""
        return (self.cpu == other.cpu and self.enabled_features == other.enabled_features
                and self.num_threads == other.num_threads)

    @property
    def key(self) -> str:
        """24 hex digits of the SHA-256 of what ``compatible`` compares; the database finds a
        target's records by it."""
        canonical = json.dumps({"cpu": self.cpu, "features": sorted(self.enabled_features),
                                "num_threads": int(self.num_threads)}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:24]

    def to_json(self) -> dict:
        """``{"cpu": ..., "features": ..., "num_threads": ...}``, the feature string as given."""
        return {"cpu": self.cpu, "features": self.features, "num_threads": int(self.num_threads)}

    @classmethod
    def from_json(cls, obj: Any) -> Target:
        """The target whose JSON form ``obj`` is; ``ValueError`` when it is malformed."""
        if not isinstance(obj, dict) or set(obj) != {"cpu", "features", "num_threads"}:
            raise ValueError(f"a target's JSON form is an object with cpu, features and num_threads, not {obj!r}")
        return cls(obj["cpu"], obj["features"], obj["num_threads"])
