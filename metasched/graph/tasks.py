"""Fused groups -> workloads of the ``.tensor`` language, and the plan that calls them.

A group's workload names its tensors by role, not by the model's names: inputs computed at
run time ``X0, X1, ...``, weights ``W0, ...``, computed tensors ``T0, ...``; its name is
the operators' and a hash of the text. Two groups that compute the same thing on tensors of
the same shapes make the same text, hence one task, whose weight counts its calls."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Sequence, Union

from metasched.errors import ModelError, ParseError
from metasched.graph.fuse import partition
from metasched.graph.model import Graph, Node
from metasched.graph.ops import OPS, Emitter, dims
from metasched.lang import Workload, parse


@dataclass
class Task:
    """A workload to tune, and how many calls of the network run it."""

    workload: Workload
    weight: int = 1


@dataclass
class Call:
    """One run of a task: the model's tensors its inputs and outputs are, in order;
    ``constant`` says which inputs are weights."""

    task: int
    inputs: list[str]
    outputs: list[str]
    constant: list[bool]
    nodes: list[str] = field(default_factory=list)


@dataclass
class View:
    """A tensor that is another's data under another shape (a reshape on its own)."""

    source: str
    target: str


@dataclass
class Plan:
    """What runs a graph: its tasks, and the steps in order."""

    graph: Graph
    tasks: list[Task]
    steps: list[Union[Call, View]]


def plan(graph: Graph) -> Plan:
    """Fuse ``graph``'s nodes and make each group a task (identical groups one task)."""
    consumers = graph.consumers()
    tasks: list[Task] = []
    by_text: dict[str, int] = {}
    steps: list[Union[Call, View]] = []
    for group in partition(graph):
        inside = {id(n) for n in group.nodes}
        needed = [t for t in group.tensors
                  if t in graph.outputs or any(id(r) not in inside for r in consumers.get(t, []))]
        node = group.nodes[0]
        if len(group.nodes) == 1 and OPS[node.op].alias and node.inputs[0] not in graph.constants \
                and needed == [node.outputs[0]] and node.outputs[0] not in graph.outputs:
            steps.append(View(node.inputs[0], node.outputs[0]))
            continue
        text, inputs, outputs = group_text(graph, group.nodes, needed)
        key = text.split("{", 1)[1]
        if key not in by_text:
            by_text[key] = len(tasks)
            tasks.append(Task(_parse(text, group.nodes)))
        else:
            tasks[by_text[key]].weight += 1
        steps.append(Call(by_text[key], inputs, outputs, [i in graph.constants for i in inputs],
                          [n.name for n in group.nodes]))
    return Plan(graph, tasks, steps)


def _parse(text: str, nodes: Sequence[Node]) -> Workload:
    try:
        return parse(text)
    except ParseError as err:  # a bug of an emitter, not of the model: say which nodes
        raise ModelError(f"nodes {', '.join(repr(n.name) for n in nodes)} made a workload that does "
                         f"not parse ({err}):\n{text}") from None


def group_text(graph: Graph, nodes: Sequence[Node], needed: Sequence[str]) -> tuple[str, list[str], list[str]]:
    """The workload of ``nodes`` with ``needed`` (model tensors) its outputs: (its text, the
    model's tensors of its inputs in order, those of its outputs in order)."""
    names: dict[str, str] = {}
    inputs: list[str] = []
    declared: list[str] = []
    lines: list[tuple[str, str]] = []
    counter = {"T": 0}

    def fresh() -> str:
        name = f"T{counter['T']}"
        counter["T"] += 1
        return name

    for node in nodes:
        def name_of(k: int, node: Node = node) -> str:
            tensor = node.inputs[k]
            if tensor not in names:
                constant = tensor in graph.constants
                prefix = "W" if constant else "X"
                names[tensor] = f"{prefix}{sum(1 for i in inputs if (i in graph.constants) == constant)}"
                inputs.append(tensor)
                declared.append(f"    input {names[tensor]}: float32{list(dims(graph.shapes[tensor]))}")
            return names[tensor]

        outs = []
        for out in node.outputs:
            outs.append(fresh() if out else "")
            if out:
                names[out] = outs[-1]
        emitter = Emitter(node, [graph.shapes.get(i) if i else None for i in node.inputs],
                          [graph.constants.get(i) if i else None for i in node.inputs], graph.opset,
                          name_of, outs, [graph.shapes[o] for o in node.outputs if o], fresh)
        OPS[node.op].emit(emitter)
        lines += emitter.lines
    outputs = {names[t]: t for t in needed}
    body = [f"    {'output ' if name in outputs else ''}{line}" for name, line in lines]
    ops = []
    for node in nodes:
        word = re.sub(r"(?<!^)(?=[A-Z])", "_", node.op).lower()
        if word not in ops:
            ops.append(word)
    text = "\n".join(["{"] + declared + body + ["}"])
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    name = f"{'_'.join(ops[:4])}_{digest}"
    ordered = [outputs[name] for name, _ in lines if name in outputs]
    return f"workload {name}() {text}\n", inputs, ordered


def single_node_workload(node: Node, in_shapes, consts, out_shapes, opset: int) -> tuple[Workload, list[int]]:
    """One node as a workload whose every output is an output: (it, the node's input
    positions of its inputs in order). For folding a node on constants."""
    renamed = Node(node.op, node.name, tuple(f"#{k}" if i else "" for k, i in enumerate(node.inputs)),
                   tuple(f"#out{k}" if o else "" for k, o in enumerate(node.outputs)), node.attrs)
    shapes = {f"#{k}": s for k, s in enumerate(in_shapes) if s is not None}
    shapes.update({f"#out{k}": tuple(shape) for k, shape in enumerate(out_shapes)})
    # Every input is a constant here: one-element ones are written as numbers, those that
    # shape the computation (axes, pads, a Resize's scales) are read by the emitter, and the
    # others become the workload's inputs where the statements read them.
    constants = {f"#{k}": c for k, c in enumerate(consts) if c is not None}
    fake = Graph("fold", {}, [o for o in renamed.outputs if o], [renamed], constants, shapes, opset=opset)
    text, inputs, _ = group_text(fake, [renamed], [o for o in renamed.outputs if o])
    return _parse(text, [node]), [int(i[1:]) for i in inputs]

