"""ONNX -> ``Graph``: static shapes, constants folded, batch norms folded into convolutions.

``onnx`` is an optional extra (``pip install metasched[onnx]``) and is imported only here."""
from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from metasched.errors import ModelError
from metasched.graph.model import Graph, Node
from metasched.graph.ops import OPS, TABLES_AT, OpContext, reduce_axes, slice_params

ModelLike = Union[str, os.PathLike, bytes, "onnx.ModelProto"]  # noqa: F821

# Operators that only compute on constants here (shape arithmetic): folded in numpy.
FOLD_ONLY = ("Constant ConstantOfShape Shape Size Cast Range Equal Less Greater Where Not Floor Ceil "
             "ReduceProd Split").split()


def _onnx():
    try:
        import onnx
        import onnx.numpy_helper  # noqa: F401
    except ImportError:
        raise ModelError("reading an ONNX model needs the onnx package: pip install 'metasched[onnx]'") from None
    return onnx


def load_model(model: ModelLike):
    """``model`` (a path, the bytes of a file, or a ``ModelProto``) as a checked ``ModelProto``."""
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        return model
    try:
        if isinstance(model, (bytes, bytearray)):
            proto = onnx.load_from_string(bytes(model))
        else:
            path = os.fspath(model)
            if not os.path.isfile(path):
                raise ModelError(f"{path}: no such model file")
            proto = onnx.load(path)
    except ModelError:
        raise
    except Exception as err:  # protobuf's DecodeError and friends: a damaged file
        where = "the model bytes" if isinstance(model, (bytes, bytearray)) else os.fspath(model)
        raise ModelError(f"{where}: not a readable ONNX model ({type(err).__name__}: {err})") from None
    if not proto.graph.node:
        raise ModelError("the model has no operators (an empty or damaged file?)")
    return proto


def import_onnx(model: ModelLike, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> Graph:
    """Read ``model`` into a ``Graph``. ``shapes`` gives an input's shape where the model
    leaves a dimension symbolic (``{"x": [1, 3, 224, 224]}``); every shape must end static."""
    onnx = _onnx()
    proto = load_model(model)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
    g = proto.graph
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in g.initializer}
    shapes = {k: tuple(int(d) for d in v) for k, v in (shapes or {}).items()}
    inputs: dict[str, tuple[int, ...]] = {}
    for value in g.input:
        if value.name in constants:
            continue
        inputs[value.name] = _input_shape(onnx, value, shapes.get(value.name))
    unknown = set(shapes) - set(inputs)
    if unknown:
        raise ModelError(f"shapes names {sorted(unknown)}, which are not inputs of the model "
                         f"(its inputs: {list(inputs)})")
    graph = Graph(g.name or "model", inputs, [o.name for o in g.output], [], constants,
                  {**inputs, **{k: tuple(v.shape) for k, v in constants.items()}}, opset=opset)
    read = {name for n in g.node for name in n.input} | set(graph.outputs)
    for k, proto_node in enumerate(g.node):
        node = _node(onnx, proto_node, k)
        # Optional outputs nothing reads (a Dropout's mask, a BatchNormalization's statistics)
        # are left out.
        node.outputs = tuple(o if j == 0 or o in read else "" for j, o in enumerate(node.outputs))
        _add(graph, node, opset)
    missing = [o for o in graph.outputs if o not in graph.shapes]
    if missing:
        raise ModelError(f"the model's outputs {missing} are computed by no node")
    _fold_batch_norms(graph)
    _drop_identities(graph)
    _fuse_layer_norms(graph)
    return graph


def _input_shape(onnx, value, given) -> tuple[int, ...]:
    t = value.type.tensor_type
    if t.elem_type != onnx.TensorProto.FLOAT:
        raise ModelError(f"input {value.name!r} is of type {onnx.TensorProto.DataType.Name(t.elem_type)}; "
                         f"only float32 inputs are supported")
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
    if given is not None:
        if len(given) != len(dims) or any(isinstance(d, int) and d != g for d, g in zip(dims, given)):
            raise ModelError(f"input {value.name!r}: shape {list(given)} given, the model says {dims}")
        return tuple(given)
    symbolic = [d for d in dims if not isinstance(d, int)]
    if symbolic:
        raise ModelError(f"input {value.name!r} has symbolic dimensions {symbolic} (shape {dims}): "
                         f"give its shape, shapes={{{value.name!r}: [...]}}")
    return tuple(dims)


def _node(onnx, proto, k: int) -> Node:
    name = proto.name or f"{proto.op_type}_{k}"
    if proto.domain not in ("", "ai.onnx"):
        raise ModelError(f"node {name!r} ({proto.domain}.{proto.op_type}): operators of domain "
                         f"{proto.domain!r} are not supported")
    attrs = {}
    for a in proto.attribute:
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, onnx.TensorProto):
            value = onnx.numpy_helper.to_array(value)
        elif isinstance(value, list):
            value = [v.decode() if isinstance(v, bytes) else v for v in value]
        attrs[a.name] = value
    return Node(proto.op_type, name, tuple(proto.input), tuple(proto.output), attrs)


def _add(graph: Graph, node: Node, opset: int) -> None:
    """Fold ``node`` when every input is a constant (or it only reads shapes), else keep it
    with its output shapes."""
    if node.op not in OPS and node.op not in FOLD_ONLY:
        raise ModelError(f"{node}: operator {node.op} is not supported; supported: "
                         f"{', '.join(sorted(set(OPS) | set(FOLD_ONLY)))}")
    for name in node.inputs:
        if name and name not in graph.shapes:
            raise ModelError(f"{node}: input {name!r} is computed by no node before it")
    if node.op in OPS and OPS[node.op].tables is not None:
        node = _with_tables(graph, node, opset)
    consts = [graph.constants.get(i) if i else None for i in node.inputs]
    ctx = OpContext(node, [graph.shapes.get(i) if i else None for i in node.inputs], consts, opset)
    runtime = [i for i in node.inputs if i and i not in graph.constants]
    if node.op in ("Shape", "Size") or not runtime:
        values = _fold(ctx, graph, opset)
        for out, value in zip(node.outputs, values):
            graph.constants[out] = value
            graph.shapes[out] = tuple(value.shape)
        return
    if node.op == "Split":
        for part in _split_into_slices(ctx):
            _add(graph, part, opset)
        return
    if node.op == "Cast":
        if node.attrs.get("to") != 1:
            ctx.fail("a cast of a tensor computed at run time to another type than float32 is not supported")
        node = Node("Identity", node.name, node.inputs[:1], node.outputs, {})
    elif node.op in FOLD_ONLY:
        ctx.fail(f"{node.op} on a tensor computed at run time ({runtime[0]!r}) is not supported")
    shapes = OPS[node.op].infer(ctx)
    for out, shape in zip(node.outputs, shapes):
        if out:
            graph.shapes[out] = tuple(int(d) for d in shape)
    graph.nodes.append(node)


def _with_tables(graph: Graph, node: Node, opset: int) -> Node:
    """``node`` with the constant tables its statements read (``Op.tables``) as inputs from
    position ``TABLES_AT`` on, each a constant of ``graph`` named after the node's output."""
    ctx = OpContext(node, [graph.shapes.get(i) if i else None for i in node.inputs],
                    [graph.constants.get(i) if i else None for i in node.inputs], opset)
    names = []
    for j, table in enumerate(OPS[node.op].tables(ctx)):
        names.append(f"{node.outputs[0]}/table{j}")
        graph.constants[names[-1]], graph.shapes[names[-1]] = table, tuple(table.shape)
    inputs = node.inputs + ("",) * (TABLES_AT - len(node.inputs)) + tuple(names)
    return Node(node.op, node.name, inputs, node.outputs, node.attrs) if names else node


def _split_into_slices(ctx: OpContext) -> list[Node]:
    node, shape = ctx.node, ctx.in_shapes[0]
    axis = ctx.axis(ctx.attr("axis", 0), len(shape))
    if ctx.opset >= 13 and ctx.has(1):
        sizes = ctx.ints(1, "split")
    elif ctx.attr("split"):
        sizes = list(ctx.attr("split"))
    else:
        n = len(node.outputs)
        part = -(-shape[axis] // n)
        sizes = [min(part, shape[axis] - part * j) for j in range(n)]
    if sum(sizes) != shape[axis] or len(sizes) != len(node.outputs):
        ctx.fail(f"split sizes {sizes} do not cover axis {axis} of size {shape[axis]} in {len(node.outputs)} parts")
    parts, start = [], 0
    for out, size in zip(node.outputs, sizes):
        parts.append(Node("Slice", f"{node.name}/{out}", (node.inputs[0],), (out,),
                          {"starts": [start], "ends": [start + size], "axes": [axis]}))
        start += size
    return parts


# ---- folding --------------------------------------------------------------------------------------

def _fold(ctx: OpContext, graph: Graph, opset: int) -> list[np.ndarray]:
    node = ctx.node
    x = [c for c in ctx.consts]
    op = node.op
    try:
        if op == "Constant":
            for key in ("value", "value_float", "value_int", "value_floats", "value_ints"):
                if key in node.attrs:
                    return [np.asarray(node.attrs[key], dtype=np.float32 if "float" in key else
                                       (np.int64 if "int" in key else None))]
            ctx.fail("a Constant without a value")
        if op == "ConstantOfShape":
            value = node.attrs.get("value", np.zeros(1, np.float32))
            return [np.full(ctx.ints(0, "shape"), np.asarray(value).reshape(-1)[0], dtype=np.asarray(value).dtype)]
        if op == "Shape":
            shape = np.array(ctx.in_shapes[0], dtype=np.int64)
            start, end = node.attrs.get("start", 0), node.attrs.get("end", None)
            return [shape[start:end]]
        if op == "Size":
            return [np.array(int(np.prod(ctx.in_shapes[0])), dtype=np.int64)]
        if op == "Cast":
            return [x[0].astype(_numpy_type(ctx, node.attrs["to"]))]
        if op == "Range":
            return [np.arange(x[0], x[1], x[2]).astype(x[0].dtype)]
        simple = {"Equal": np.equal, "Less": np.less, "Greater": np.greater, "Where": np.where,
                  "Not": np.logical_not, "Floor": np.floor, "Ceil": np.ceil}
        if op in simple:
            return [np.asarray(simple[op](*x))]
        if op == "ReduceProd":
            axes = node.attrs.get("axes") if opset < 18 else (list(x[1]) if len(x) > 1 and x[1] is not None else None)
            keep = bool(node.attrs.get("keepdims", 1))
            return [np.prod(x[0], axis=None if axes is None else tuple(axes), keepdims=keep)]
        if op == "Split":
            return [graph_value for graph_value in _fold_split(ctx)]
        folded = _fold_numpy(ctx)
        if folded is not None:
            return folded
        if x and x[0] is not None and x[0].dtype.kind in "iub":
            ctx.fail(f"{op} on integer constants is not supported")
        return _fold_by_reference(ctx, graph, opset)
    except ModelError:
        raise
    except Exception as err:
        raise ModelError(f"{node}: cannot fold it on its constant inputs ({type(err).__name__}: {err})") from None


def _numpy_type(ctx: OpContext, to: int):
    types = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64}
    if to not in types:
        ctx.fail(f"a cast to ONNX type {to} is not supported")
    return types[to]


def _fold_split(ctx: OpContext) -> list[np.ndarray]:
    data = ctx.consts[0]
    values = []
    for part in _split_into_slices(ctx):
        (start,), (end,), (axis,) = part.attrs["starts"], part.attrs["ends"], part.attrs["axes"]
        values.append(np.take(data, range(start, end), axis=axis))
    return values


def _fold_numpy(ctx: OpContext) -> Optional[list[np.ndarray]]:
    """Shape arithmetic on integer tensors, and the arithmetic and data movement that weights
    go through (a batch norm's scale, a transposed weight), in numpy; None for another
    operator."""
    node, x, op = ctx.node, ctx.consts, ctx.node.op
    arith = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum, "Min": np.minimum,
             "Neg": np.negative, "Abs": np.abs, "Identity": lambda a: a, "Dropout": lambda a, *_: a,
             "Sqrt": np.sqrt, "Reciprocal": np.reciprocal}
    if op in arith:
        args = [v for v in x if v is not None][:1 if op == "Dropout" else None]
        return [np.asarray(arith[op](*args))]
    if op == "Div":
        if x[0].dtype.kind in "iub":
            return [np.asarray(np.trunc(x[0] / x[1]).astype(x[0].dtype))]
        return [np.asarray(x[0] / x[1])]
    if op == "Gather":
        return [np.take(x[0], x[1], axis=node.attrs.get("axis", 0))]
    if op == "Concat":
        return [np.concatenate([np.atleast_1d(v) for v in x if v is not None], axis=node.attrs["axis"])]
    if op in ("Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand"):
        shape = OPS[op].infer(ctx)[0] if op != "Expand" else OPS[op].infer(ctx)[0]
        return [np.broadcast_to(x[0], shape).copy() if op == "Expand" else x[0].reshape(shape)]
    if op == "Slice":
        out = x[0]
        for axis, (start, step, count) in enumerate(slice_params(ctx)):
            out = np.take(out, [start + step * j for j in range(count)], axis=axis)
        return [out]
    if op == "Transpose":
        return [np.transpose(x[0], ctx.attr("perm"))]
    return None


def _fold_by_reference(ctx: OpContext, graph: Graph, opset: int) -> list[np.ndarray]:
    """A float operator on constants: its statements as a workload, run by the numpy reference."""
    from metasched.graph.tasks import single_node_workload
    node = ctx.node
    out_shapes = OPS[node.op].infer(ctx)
    workload, names = single_node_workload(node, ctx.in_shapes, ctx.consts, out_shapes, opset)
    arrays = [np.asarray(ctx.consts[k], dtype=np.float32).reshape(workload.inputs[j].shape)
              for j, k in enumerate(names)]
    results = workload.reference(*arrays)
    return [np.asarray(r, dtype=np.float32).reshape(shape) for r, shape in zip(results, out_shapes)]


# ---- rewrites -------------------------------------------------------------------------------------

def _fold_batch_norms(graph: Graph) -> None:
    """A BatchNormalization whose input is a convolution's output read by nothing else, with
    constant weights and statistics, is folded into the convolution's weights and bias."""
    producers, consumers = graph.producers(), graph.consumers()
    kept = []
    for node in graph.nodes:
        conv = producers.get(node.inputs[0]) if node.op == "BatchNormalization" else None
        params = [graph.constants.get(i) for i in node.inputs[1:5]] if conv is not None else []
        if (conv is None or conv.op != "Conv" or len(consumers.get(conv.outputs[0], [])) != 1
                or conv.outputs[0] in graph.outputs or any(p is None for p in params)
                or conv.inputs[1] not in graph.constants
                or (len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in graph.constants)):
            kept.append(node)
            continue
        scale, bias, mean, var = (p.astype(np.float64) for p in params)
        a = scale / np.sqrt(var + node.attrs.get("epsilon", 1e-5))
        weight = graph.constants[conv.inputs[1]].astype(np.float64)
        old_bias = (graph.constants[conv.inputs[2]].astype(np.float64)
                    if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(weight.shape[0]))
        w_name, b_name = f"{conv.name}/folded_weight", f"{conv.name}/folded_bias"
        graph.constants[w_name] = (weight * a.reshape(-1, *[1] * (weight.ndim - 1))).astype(np.float32)
        graph.constants[b_name] = ((old_bias - mean) * a + bias).astype(np.float32)
        graph.shapes[w_name], graph.shapes[b_name] = weight.shape, (weight.shape[0],)
        graph.shapes[node.outputs[0]] = graph.shapes[conv.outputs[0]]
        conv.inputs = (conv.inputs[0], w_name, b_name)
        conv.outputs = (node.outputs[0],)
    graph.nodes = kept


def _drop_identities(graph: Graph) -> None:
    """Identity and inference Dropout read as their input, unless they make a graph output."""
    renames: dict[str, str] = {}
    kept = []
    for node in graph.nodes:
        node.inputs = tuple(renames.get(i, i) for i in node.inputs)
        if node.op in ("Identity", "Dropout") and node.outputs[0] not in graph.outputs \
                and not (len(node.outputs) > 1 and node.outputs[1]):
            renames[node.outputs[0]] = node.inputs[0]
            continue
        kept.append(node)
    graph.nodes = kept


def _fuse_layer_norms(graph: Graph) -> None:
    """LayerNorm as older exporters write it, ``ReduceMean -> Sub -> Pow(2) -> ReduceMean ->
    Add(eps) -> Sqrt -> Div`` (then ``Mul`` by a scale and ``Add`` of a bias, when they
    broadcast over the normalized axes), becomes one LayerNormalization: one task instead of
    two reductions apart. Only where every intermediate is read by the pattern alone."""
    consumers = graph.consumers()
    replaced: dict[int, Optional[Node]] = {}  # id of a node -> the node that takes its place (None: gone)
    for node in graph.nodes:
        match = _layer_norm_at(graph, node, consumers)
        if match is not None:
            nodes, fused = match
            replaced.update({id(n): None for n in nodes})
            replaced[id(nodes[-1])] = fused
    graph.nodes = [replaced.get(id(n), n) for n in graph.nodes if replaced.get(id(n), n) is not None]


def _layer_norm_at(graph: Graph, mean: Node, consumers) -> Optional[tuple[list[Node], Node]]:
    """(the nodes of a decomposed LayerNorm that starts at ``mean``, the node that replaces
    them) or None."""
    def only_reader(node: Node, op: str) -> Optional[Node]:
        out = node.outputs[0]
        readers = consumers.get(out, [])
        if out in graph.outputs or len(readers) != 1 or readers[0].op != op:
            return None
        return readers[0]

    def other(node: Node, name: str) -> str:
        return node.inputs[1] if node.inputs[0] == name else node.inputs[0]

    def scalar(name: str) -> Optional[float]:
        value = graph.constants.get(name)
        return float(np.asarray(value).reshape(-1)[0]) if value is not None and np.size(value) == 1 else None

    if mean.op != "ReduceMean":
        return None
    x = mean.inputs[0]
    rank = len(graph.shapes[x])
    axes = _mean_axes(graph, mean)
    if not axes or axes != list(range(axes[0], rank)):
        return None
    sub = only_reader(mean, "Sub")
    if sub is None or sub.inputs != (x, mean.outputs[0]):
        return None
    centred = sub.outputs[0]
    readers = consumers.get(centred, [])
    square = next((r for r in readers if (r.op == "Pow" and r.inputs[0] == centred and scalar(r.inputs[1]) == 2.0)
                   or (r.op == "Mul" and r.inputs == (centred, centred))), None)
    div = next((r for r in readers if r.op == "Div" and r.inputs[0] == centred), None)
    if centred in graph.outputs or square is None or div is None or len(readers) != 2:
        return None
    var = only_reader(square, "ReduceMean")
    if var is None or _mean_axes(graph, var) != axes:
        return None
    plus = only_reader(var, "Add")
    eps = scalar(other(plus, var.outputs[0])) if plus is not None else None
    root = only_reader(plus, "Sqrt") if eps is not None else None
    if root is None or only_reader(root, "Div") is not div or div.inputs[1] != root.outputs[0]:
        return None
    nodes = [mean, sub, square, var, plus, root, div]
    params: list[str] = []
    for op in ("Mul", "Add"):  # the scale, then the bias, where they apply to the normalized axes
        follower = only_reader(nodes[-1], op)
        param = other(follower, nodes[-1].outputs[0]) if follower is not None else None
        if param is None or param == nodes[-1].outputs[0] or not _fits_normalized(graph, param, graph.shapes[x],
                                                                                    axes[0]):
            break
        params.append(param)
        nodes.append(follower)
    if not params:
        params.append(f"{div.outputs[0]}/unit_scale")
        graph.constants[params[0]], graph.shapes[params[0]] = np.ones(1, np.float32), (1,)
    fused = Node("LayerNormalization", f"{mean.name}/layer_norm", (x, *params), (nodes[-1].outputs[0],),
                 {"axis": axes[0], "epsilon": eps})
    return nodes, fused


def _mean_axes(graph: Graph, node: Node) -> Optional[list[int]]:
    """The axes a ReduceMean that keeps its dimensions averages over, else None."""
    if not node.attrs.get("keepdims", 1):
        return None
    ctx = OpContext(node, [graph.shapes.get(i) if i else None for i in node.inputs],
                    [graph.constants.get(i) if i else None for i in node.inputs], graph.opset)
    try:
        return reduce_axes(ctx)
    except ModelError:
        return None


def _fits_normalized(graph: Graph, name: str, shape: tuple[int, ...], axis: int) -> bool:
    """Whether tensor ``name`` broadcasts into ``shape`` along its axes from ``axis`` on only."""
    own = graph.shapes[name]
    try:
        return len(own) <= len(shape) - axis and np.broadcast_shapes(shape, own) == tuple(shape)
    except ValueError:
        return False
