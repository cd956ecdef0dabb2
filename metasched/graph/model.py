"""A network as the importer leaves it: operators on named tensors of static shapes."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Node:
    """One operator: its type (ONNX's name), inputs and outputs by tensor name ("" for an
    optional input left out), and attributes as Python values."""

    op: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return f"node {self.name!r} ({self.op})"


@dataclass
class Graph:
    """A model after import: ``inputs`` (name -> shape) are what the caller gives, in order;
    ``constants`` the weights and every tensor folded from them; ``nodes`` the operators left,
    in an order that computes each tensor before it is read; ``shapes`` every tensor's."""

    name: str
    inputs: dict[str, tuple[int, ...]]
    outputs: list[str]
    nodes: list[Node]
    constants: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]
    dtype: str = "float32"
    opset: int = 13

    def producers(self) -> dict[str, Node]:
        """Each computed tensor -> the node that computes it."""
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        """Each tensor -> the nodes that read it, in order (a node once, however often)."""
        found: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in dict.fromkeys(i for i in node.inputs if i):
                found.setdefault(name, []).append(node)
        return found
