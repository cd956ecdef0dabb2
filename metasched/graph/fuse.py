"""Operators into fused groups, as TVM's FuseOps does on CPUs.

A node joins the group of a node it reads when the group's tensors are read by nothing
else (the group's result feeds only this node, so fusing computes nothing twice and makes no
cycle) and the patterns allow it: element-wise and broadcast work fuses into anything before
it (the epilogue of a convolution, a matrix product, a pooling or a reduction, or a chain of
its own kind); injective work (reshapes, transposes, slices, concatenation) into injective
or element-wise work; a reduction takes an injective or element-wise prologue. A convolution,
a matrix product or a pooling starts a group."""
from __future__ import annotations

from dataclasses import dataclass, field

from metasched.graph.model import Graph, Node
from metasched.graph.ops import ANCHOR, BROADCAST, ELEMWISE, INJECTIVE, OPS, REDUCE


@dataclass
class Group:
    """Fused nodes, in the order they compute, and their pattern (the most general)."""

    nodes: list[Node] = field(default_factory=list)
    kind: int = ELEMWISE

    @property
    def tensors(self) -> list[str]:
        return [out for node in self.nodes for out in node.outputs if out]


def can_join(group: int, node: int) -> bool:
    """Whether a node of pattern ``node`` may fuse into a group of pattern ``group``."""
    if node in (ELEMWISE, BROADCAST):
        return group <= ANCHOR
    if node in (INJECTIVE, REDUCE):
        return group <= INJECTIVE
    return False


def partition(graph: Graph) -> list[Group]:
    """The groups of ``graph``'s nodes, in an order that computes each before it is read."""
    producers, consumers = graph.producers(), graph.consumers()
    groups: list[Group] = []
    group_of: dict[int, Group] = {}
    for node in graph.nodes:
        kind = OPS[node.op].kind
        joined = None
        for name in dict.fromkeys(i for i in node.inputs if i in producers):
            group = group_of[id(producers[name])]
            if can_join(group.kind, kind) and _feeds_only(group, node, consumers, group_of):
                joined = group
                break
        if joined is None:
            joined = Group(kind=kind)
            groups.append(joined)
        elif joined.kind not in (REDUCE, ANCHOR):
            joined.kind = max(joined.kind, kind)
        joined.nodes.append(node)
        group_of[id(node)] = joined
    _merge_diamonds(groups, group_of, producers)
    return _in_order(groups, group_of, producers, graph)


def _merge_diamonds(groups: list[Group], group_of: dict[int, Group], producers: dict[str, Node]) -> None:
    """An element-wise group whose computed inputs all come from one other group joins it:
    GELU's ``x * (1 + erf(x / sqrt 2)) / 2`` reads ``x`` twice, so the greedy pass, which
    fuses a node only into a group read by nothing else, leaves it apart from the layer
    that computes ``x`` (TVM's post-dominator analysis finds such diamonds)."""
    merged = True
    while merged:
        merged = False
        for group in groups:
            if group.kind > BROADCAST:
                continue
            sources = {id(group_of[id(producers[i])]): group_of[id(producers[i])]
                       for node in group.nodes for i in node.inputs if i in producers}
            sources.pop(id(group), None)
            if len(sources) != 1:
                continue
            (target,) = sources.values()
            if not can_join(target.kind, group.kind):
                continue
            target.nodes += group.nodes
            if target.kind not in (REDUCE, ANCHOR):
                target.kind = max(target.kind, group.kind)
            for node in group.nodes:
                group_of[id(node)] = target
            groups.remove(group)
            merged = True
            break


def _in_order(groups: list[Group], group_of: dict[int, Group], producers: dict[str, Node], graph: Graph) -> list[Group]:
    """The groups in an order that runs each after every group it reads (among those ready,
    the one whose first node comes first in the model)."""
    position = {id(node): k for k, node in enumerate(graph.nodes)}
    needs = {id(g): {id(group_of[id(producers[i])]) for n in g.nodes for i in n.inputs if i in producers} - {id(g)}
             for g in groups}
    done: set[int] = set()
    ordered: list[Group] = []
    while len(ordered) < len(groups):
        ready = [g for g in groups if id(g) not in done and needs[id(g)] <= done]
        first = min(ready, key=lambda g: position[id(g.nodes[0])])
        ordered.append(first)
        done.add(id(first))
    return ordered


def _feeds_only(group: Group, node: Node, consumers: dict[str, list[Node]], group_of: dict[int, Group]) -> bool:
    """Whether every reader of ``group``'s tensors is in it or is ``node``."""
    return all(reader is node or group_of.get(id(reader)) is group
               for tensor in group.tensors for reader in consumers.get(tensor, []))
