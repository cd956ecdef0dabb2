"""The operators a network may hold: per ONNX operator type, its fusion pattern, the shapes of
its outputs, and the statements of the workload language that compute it (``Emitter``).

Each emitter writes statements on tensor names the caller chose, so that the statements of
several fused operators make one workload. Shapes are static; attributes and inputs that
shape the computation (axes, pads, a Reshape's shape) must be constants, folded at import.

Parts, in order: ``OpContext`` and ``Emitter``; shapes and the registry (``Op``,
``register``); element-wise operators; injective ones (reshapes, transposes, concatenation,
slices, pads, ``Gather``, ``Resize`` with its index maps from ``graph.resize``); reductions
(softmax, layer norm); convolutions (``Conv``, ``ConvTranspose``), matrix products and
pooling."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np

from metasched.errors import ModelError
from metasched.graph import resize
from metasched.graph.model import Node

Shape = tuple[int, ...]

# Fusion patterns, TVM's OpPatternKind: a group's pattern is the most general of its nodes'.
ELEMWISE, BROADCAST, INJECTIVE, REDUCE, ANCHOR, OPAQUE = 0, 1, 2, 3, 4, 8


class OpContext:
    """What an operator knows of its node: attributes, input shapes, constant inputs."""

    def __init__(self, node: Node, in_shapes: Sequence[Optional[Shape]],
                 consts: Sequence[Optional[np.ndarray]], opset: int) -> None:
        self.node, self.in_shapes, self.consts, self.opset = node, list(in_shapes), list(consts), opset

    def attr(self, name: str, default=None):
        return self.node.attrs.get(name, default)

    def has(self, k: int) -> bool:
        return k < len(self.node.inputs) and bool(self.node.inputs[k])

    def const(self, k: int, what: str) -> np.ndarray:
        """Input ``k``, which must be a constant (a weight or folded from them)."""
        if not self.has(k) or self.consts[k] is None:
            self.fail(f"its {what} (input {k}) must be a constant")
        return self.consts[k]

    def ints(self, k: int, what: str) -> list[int]:
        return [int(v) for v in np.asarray(self.const(k, what)).reshape(-1)]

    def fail(self, why: str) -> None:
        raise ModelError(f"{self.node}: {why}")

    def axis(self, axis: int, rank: int) -> int:
        if not -rank <= axis < rank:
            self.fail(f"axis {axis} is out of range for rank {rank}")
        return axis % rank


class Emitter(OpContext):
    """An ``OpContext`` that writes statements: ``ins``/``outs`` are the tensor names to use,
    ``literals`` the values of one-element constant inputs (written into the text)."""

    def __init__(self, node, in_shapes, consts, opset, ins: Callable[[int], str], outs: Sequence[str],
                 out_shapes: Sequence[Shape], fresh: Callable[[], str]) -> None:
        super().__init__(node, in_shapes, consts, opset)
        self.ins = _Names(ins, len(node.inputs))  # named when first read: shape inputs never are
        self.outs, self.out_shapes, self.fresh = list(outs), list(out_shapes), fresh
        self.lines: list[tuple[str, str]] = []  # (tensor name, statement text without "output")

    def literal(self, k: int) -> Optional[str]:
        """Input ``k`` as a number, when it is a one-element constant."""
        value = self.consts[k] if k < len(self.consts) else None
        if value is None or np.size(value) != 1:
            return None
        return number(float(np.asarray(value).reshape(-1)[0]))

    def load(self, k: int, index: Sequence[str]) -> str:
        """Input ``k`` at ``index`` (one expression per dimension)."""
        lit = self.literal(k)
        if lit is not None:
            return lit
        return f"{self.ins[k]}[{', '.join(index) if index else '0'}]"

    def bload(self, k: int, index: Sequence[str], shape: Shape) -> str:
        """Input ``k`` broadcast to ``shape`` (numpy's rule) at ``index``."""
        own = self.in_shapes[k]
        lead = len(shape) - len(own)
        return self.load(k, [("0" if d == 1 and shape[lead + j] != 1 else index[lead + j])
                             for j, d in enumerate(own)])

    def define(self, name: str, shape: Shape, body: str, op: str = "=", reduce: Sequence[tuple[str, int]] = ()) -> None:
        """``name[i0, ...] op body``, every variable ranged by a ``where`` (rank 0 is [1])."""
        vars_ = index_vars(shape)
        ranges = [f"{v} in 0..{n}" for v, n in zip(vars_, dims(shape))] + [f"{v} in 0..{n}" for v, n in reduce]
        self.lines.append((name, f"{name}[{', '.join(vars_)}] {op} {body} where {', '.join(ranges)}"))

    def temp(self, shape: Shape, body: str, op: str = "=", reduce: Sequence[tuple[str, int]] = ()) -> str:
        name = self.fresh()
        self.define(name, shape, body, op, reduce)
        return name


class _Names:
    """Input names, each asked of ``name_of`` when first used."""

    def __init__(self, name_of: Callable[[int], str], count: int) -> None:
        self.name_of, self.count = name_of, count

    def __getitem__(self, k: int) -> str:
        return self.name_of(k)

    def __len__(self) -> int:
        return self.count


def dims(shape: Shape) -> Shape:
    return tuple(shape) if shape else (1,)


def index_vars(shape: Shape) -> list[str]:
    return [f"i{k}" for k in range(len(dims(shape)))]


def number(value: float) -> str:
    """A float32 value as a literal of the language."""
    if math.isnan(value):
        raise ModelError("a constant is NaN, which the workload language cannot write")
    if math.isinf(value):
        value = math.copysign(float(np.finfo(np.float32).max), value)
    text = repr(float(value))
    return f"({text})" if value < 0 else text


# ---- shapes ---------------------------------------------------------------------------------------

def broadcast(ctx: OpContext, shapes: Sequence[Shape]) -> Shape:
    rank = max(len(s) for s in shapes)
    out = []
    for j in range(rank):
        sizes = {s[j - rank + len(s)] for s in shapes if j - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            ctx.fail(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


@dataclass(frozen=True)
class Op:
    """An operator type: its fusion ``kind``, ``infer`` (the output shapes) and ``emit``
    (writes statements); ``alias`` when the output is the input's data under another shape;
    ``tables``, when the statements need constants computed from the node's shapes and
    attributes (a Resize's interpolation weights): the importer makes them constants of the
    graph and inputs of the node from position ``TABLES_AT`` on."""

    kind: int
    infer: Callable[[OpContext], list[Shape]]
    emit: Callable[[Emitter], None]
    alias: bool = False
    tables: Optional[Callable[[OpContext], list[np.ndarray]]] = None


OPS: dict[str, Op] = {}
TABLES_AT = 4  # after every input an operator with tables has in ONNX (Resize has four)


def register(names: str, kind: int, infer, alias: bool = False, tables=None):
    def wrap(emit):
        for name in names.split():
            OPS[name] = Op(kind, infer, emit, alias, tables)
        return emit
    return wrap


def same_as_first(ctx: OpContext) -> list[Shape]:
    return [ctx.in_shapes[0]]


def broadcast_all(ctx: OpContext) -> list[Shape]:
    return [broadcast(ctx, [s for k, s in enumerate(ctx.in_shapes) if ctx.has(k)])]


# ---- element-wise -----------------------------------------------------------------------------------

UNARY = {
    "Relu": "max({x}, 0.0)", "Sigmoid": "sigmoid({x})", "Tanh": "tanh({x})", "Erf": "erf({x})",
    "Exp": "exp({x})", "Log": "log({x})", "Sqrt": "sqrt({x})", "Abs": "abs({x})", "Neg": "-({x})",
    "Reciprocal": "1.0 / ({x})", "Identity": "{x}", "Dropout": "{x}",
    "Softplus": "log(1.0 + exp({x}))",
}


def _unary_body(e: Emitter, x: str) -> str:
    op = e.node.op
    if op in UNARY:
        return UNARY[op].format(x=x)
    if op == "LeakyRelu":
        return f"max({x}, 0.0) + {number(e.attr('alpha', 0.01))} * min({x}, 0.0)"
    if op == "HardSigmoid":
        return f"max(0.0, min(1.0, {number(e.attr('alpha', 0.2))} * {x} + {number(e.attr('beta', 0.5))}))"
    if op == "HardSwish":
        return f"{x} * max(0.0, min(1.0, {x} / 6.0 + 0.5))"
    if op == "Gelu":
        if e.attr("approximate", "none") == "tanh":
            return f"0.5 * {x} * (1.0 + tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})))"
        return f"0.5 * {x} * (1.0 + erf({x} * 0.7071067811865476))"
    if op == "Clip":
        lo = e.attr("min") if e.opset < 11 else (e.literal(1) if e.has(1) else None)
        hi = e.attr("max") if e.opset < 11 else (e.literal(2) if e.has(2) else None)
        for k in (1, 2):
            if e.opset >= 11 and e.has(k) and e.literal(k) is None:
                e.fail("its min and max must be one-element constants")
        lo = number(lo) if isinstance(lo, float) else lo
        hi = number(hi) if isinstance(hi, float) else hi
        body = x if hi is None else f"min({x}, {hi})"
        return body if lo is None else f"max({body}, {lo})"
    raise AssertionError(op)


@register("Relu Sigmoid Tanh Erf Exp Log Sqrt Abs Neg Reciprocal Identity Dropout Softplus LeakyRelu "
          "HardSigmoid HardSwish Gelu Clip", ELEMWISE, same_as_first)
def _unary(e: Emitter) -> None:
    if e.node.op == "Dropout" and len(e.node.outputs) > 1 and e.node.outputs[1]:
        e.fail("its mask output is not supported (inference only)")
    shape = e.out_shapes[0]
    e.define(e.outs[0], shape, _unary_body(e, e.load(0, index_vars(shape))))


BINARY = {"Add": "({a} + {b})", "Sub": "({a} - {b})", "Mul": "({a} * {b})", "Div": "({a} / {b})",
          "Pow": "pow({a}, {b})", "Max": "max({a}, {b})", "Min": "min({a}, {b})", "Sum": "({a} + {b})",
          "Mean": "({a} + {b})", "PRelu": "(max({a}, 0.0) + {b} * min({a}, 0.0))"}


@register("Add Sub Mul Div Pow Max Min Sum Mean PRelu", BROADCAST, broadcast_all)
def _binary(e: Emitter) -> None:
    shape = e.out_shapes[0]
    index = index_vars(shape)
    loads = [e.bload(k, index, shape) for k in range(len(e.ins))]
    op = e.node.op
    if op == "Pow" and e.literal(1) == "2.0":
        body = f"({loads[0]} * {loads[0]})"
    else:
        body = loads[0]
        for other in loads[1:]:
            body = BINARY[op].format(a=body, b=other)
    if op == "Mean":
        body = f"{body} / {float(len(loads))}"
    e.define(e.outs[0], shape, body)


@register("BatchNormalization", BROADCAST, same_as_first)
def _batch_norm(e: Emitter) -> None:
    """y = (x - mean) / sqrt(var + eps) * scale + bias, per channel (axis 1)."""
    if len(e.node.outputs) > 1 and any(e.node.outputs[1:]):
        e.fail("only inference mode is supported (one output)")
    shape = e.out_shapes[0]
    index = index_vars(shape)
    c = [index[1]] if len(shape) > 1 else ["0"]
    x, scale, bias, mean, var = (e.load(k, c) if k else e.load(0, index) for k in range(5))
    eps = number(e.attr("epsilon", 1e-5))
    e.define(e.outs[0], shape, f"({x} - {mean}) * rsqrt({var} + {eps}) * {scale} + {bias}")


# ---- injective ------------------------------------------------------------------------------------

def _reshape_shape(ctx: OpContext) -> list[Shape]:
    src = ctx.in_shapes[0]
    size = math.prod(src)
    op = ctx.node.op
    if op == "Flatten":
        axis = ctx.axis(ctx.attr("axis", 1), len(src) + 1)
        return [(math.prod(src[:axis]), math.prod(src[axis:]))]
    if op == "Squeeze":
        axes = ctx.attr("axes") if ctx.opset < 13 else (ctx.ints(1, "axes") if ctx.has(1) else None)
        if axes is None:
            return [tuple(d for d in src if d != 1)]
        axes = {ctx.axis(a, len(src)) for a in axes}
        if any(src[a] != 1 for a in axes):
            ctx.fail(f"it squeezes an axis of size above 1 (shape {list(src)}, axes {sorted(axes)})")
        return [tuple(d for k, d in enumerate(src) if k not in axes)]
    if op == "Unsqueeze":
        axes = ctx.attr("axes") if ctx.opset < 13 else ctx.ints(1, "axes")
        rank = len(src) + len(axes)
        axes = {ctx.axis(a, rank) for a in axes}
        rest = iter(src)
        return [tuple(1 if k in axes else next(rest) for k in range(rank))]
    # Reshape: 0 copies the input's size (unless allowzero), -1 is inferred.
    wanted = ctx.ints(1, "shape")
    out = [src[k] if d == 0 and not ctx.attr("allowzero", 0) else d for k, d in enumerate(wanted)]
    if out.count(-1) > 1:
        ctx.fail(f"its shape {wanted} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = size // known if known else 0
    if math.prod(out) != size:
        ctx.fail(f"it cannot reshape {list(src)} to {wanted}")
    return [tuple(out)]


def flat_index(index: Sequence[str], shape: Shape) -> str:
    terms, stride = [], 1
    for var, size in reversed(list(zip(index, shape))):
        if size != 1:
            terms.append(var if stride == 1 else f"{var} * {stride}")
        stride *= size
    return " + ".join(reversed(terms)) or "0"


def unflat_index(flat: str, shape: Shape) -> list[str]:
    """The index into ``shape`` of the element at row-major position ``flat``."""
    out, total = [], math.prod(shape)
    stride = total
    for size in shape:
        stride //= size
        if size == 1:
            out.append("0")
            continue
        part = f"({flat})" if stride == 1 else f"({flat}) // {stride}"
        out.append(part if stride * size == total else f"{part} % {size}")
    return out


@register("Reshape Flatten Squeeze Unsqueeze", INJECTIVE, _reshape_shape, alias=True)
def _reshape(e: Emitter) -> None:
    shape, src = e.out_shapes[0], e.in_shapes[0]
    index = index_vars(shape)
    if [d for d in shape if d != 1] == [d for d in src if d != 1]:  # only unit axes move
        kept = iter(v for v, d in zip(index, shape) if d != 1)
        source = ["0" if d == 1 else next(kept) for d in src]
    else:
        source = unflat_index(flat_index(index, shape), src)
    e.define(e.outs[0], shape, e.load(0, source))


@register("Transpose", INJECTIVE, lambda ctx: [tuple(ctx.in_shapes[0][p] for p in _perm(ctx))])
def _transpose(e: Emitter) -> None:
    perm, shape = _perm(e), e.out_shapes[0]
    index = index_vars(shape)
    source = [""] * len(perm)
    for k, p in enumerate(perm):
        source[p] = index[k]
    e.define(e.outs[0], shape, e.load(0, source))


def _perm(ctx: OpContext) -> list[int]:
    rank = len(ctx.in_shapes[0])
    perm = ctx.attr("perm") or list(reversed(range(rank)))
    if sorted(perm) != list(range(rank)):
        ctx.fail(f"perm {perm} is not a permutation of {rank} axes")
    return list(perm)


def _concat_shape(ctx: OpContext) -> list[Shape]:
    shapes = [s for k, s in enumerate(ctx.in_shapes) if ctx.has(k)]
    axis = ctx.axis(ctx.attr("axis"), len(shapes[0]))
    for s in shapes:
        if len(s) != len(shapes[0]) or any(a != b for j, (a, b) in enumerate(zip(s, shapes[0])) if j != axis):
            ctx.fail(f"inputs of shapes {[list(x) for x in shapes]} do not concatenate on axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [tuple(out)]


@register("Concat", INJECTIVE, _concat_shape)
def _concat(e: Emitter) -> None:
    shape = e.out_shapes[0]
    axis = e.axis(e.attr("axis"), len(shape))
    index = index_vars(shape)
    parts, start = [], 0
    for k in range(len(e.ins)):
        size = e.in_shapes[k][axis]
        source = list(index)
        source[axis] = f"{index[axis]} - {start}" if start else index[axis]
        parts.append((start + size, e.load(k, source)))
        start += size
    body = parts[-1][1]
    for end, load in reversed(parts[:-1]):
        body = f"({load} if {index[axis]} < {end} else {body})"
    e.define(e.outs[0], shape, body)


def slice_params(ctx: OpContext) -> list[tuple[int, int, int]]:
    """Per axis of the input: (start, step, count)."""
    shape = ctx.in_shapes[0]
    if ctx.opset < 10 or "starts" in ctx.node.attrs:  # the attributes of opset 1 (and of Split's parts)
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes, steps = ctx.attr("axes") or list(range(len(starts))), [1] * len(starts)
    else:
        starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
        axes = ctx.ints(3, "axes") if ctx.has(3) else list(range(len(starts)))
        steps = ctx.ints(4, "steps") if ctx.has(4) else [1] * len(starts)
    out = [(0, 1, d) for d in shape]
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = ctx.axis(axis, len(shape))
        if step == 0:
            ctx.fail("a step of 0")
        first, stop, _ = slice(start, end, step).indices(shape[axis])
        out[axis] = (first, step, len(range(first, stop, step)))
    return out


@register("Slice", INJECTIVE, lambda ctx: [tuple(c for _, _, c in slice_params(ctx))])
def _slice(e: Emitter) -> None:
    shape = e.out_shapes[0]
    if 0 in shape:
        e.fail("its output is empty")
    index = index_vars(shape)
    source = []
    for var, (start, step, _) in zip(index, slice_params(e)):
        term = var if step == 1 else f"{var} * {step}" if step > 0 else f"{start} - {var} * {-step}"
        source.append(term if step < 0 else (f"{term} + {start}" if start else term))
    e.define(e.outs[0], shape, e.load(0, source))


def _pads(ctx: OpContext) -> list[int]:
    rank = len(ctx.in_shapes[0])
    pads = ctx.attr("pads") if ctx.opset < 11 else ctx.ints(1, "pads")
    if ctx.opset >= 18 and ctx.has(3):
        axes = [ctx.axis(a, rank) for a in ctx.ints(3, "axes")]
        full = [0] * (2 * rank)
        for j, a in enumerate(axes):
            full[a], full[rank + a] = pads[j], pads[len(axes) + j]
        pads = full
    if ctx.attr("mode", "constant") != "constant":
        ctx.fail(f"mode {ctx.attr('mode')!r} is not supported (only 'constant')")
    if any(p < 0 for p in pads):
        ctx.fail("negative pads are not supported")
    return list(pads)


@register("Pad", INJECTIVE, lambda ctx: [tuple(d + a + b for d, a, b in zip(
    ctx.in_shapes[0], _pads(ctx)[:len(ctx.in_shapes[0])], _pads(ctx)[len(ctx.in_shapes[0]):]))])
def _pad(e: Emitter) -> None:
    pads, shape = _pads(e), e.out_shapes[0]
    rank = len(shape)
    value = number(e.attr("value", 0.0)) if e.opset < 11 else (e.literal(2) or "0.0") if e.has(2) else "0.0"
    e.define(e.outs[0], shape, padded(e, 0, index_vars(shape), pads[:rank], e.in_shapes[0], value, shape))


def padded(e: Emitter, k: int, index: Sequence[str], before: Sequence[int], size: Shape, value: str,
           padded_size: Sequence[int]) -> str:
    """Input ``k`` (of ``size``) at ``index`` into it shifted by ``before`` within
    ``padded_size``, ``value`` outside the input."""
    source, conds = [], []
    for var, b, n, total in zip(index, before, size, padded_size):
        source.append(f"{var} - {b}" if b else var)
        if b:
            conds.append(f"{var} >= {b}")
        if total > n + b:
            conds.append(f"{var} < {n + b}")
    load = e.load(k, source)
    return f"({load} if {' and '.join(conds)} else {value})" if conds else load


def _expand_shape(ctx: OpContext) -> list[Shape]:
    return [broadcast(ctx, [ctx.in_shapes[0], tuple(ctx.ints(1, "shape"))])]


@register("Expand", BROADCAST, _expand_shape)
def _expand(e: Emitter) -> None:
    shape = e.out_shapes[0]
    e.define(e.outs[0], shape, e.bload(0, index_vars(shape), shape))


def _gather_shape(ctx: OpContext) -> list[Shape]:
    data, indices = ctx.in_shapes[0], np.asarray(ctx.const(1, "indices"))
    axis = ctx.axis(ctx.attr("axis", 0), len(data))
    return [tuple(data[:axis]) + indices.shape + tuple(data[axis + 1:])]


@register("Gather", INJECTIVE, _gather_shape)
def _gather(e: Emitter) -> None:
    """Constant indices: a scalar picks one slice; an array, an arithmetic sequence of slices."""
    data, indices = e.in_shapes[0], np.asarray(e.const(1, "indices")).astype(np.int64)
    axis = e.axis(e.attr("axis", 0), len(data))
    flat = np.where(indices < 0, indices + data[axis], indices).reshape(-1)
    shape = e.out_shapes[0]
    index = index_vars(shape)[:len(shape)]  # none for a scalar
    if indices.ndim == 0:
        pick = str(int(flat[0]))
        source = index[:axis] + [pick] + index[axis:]
    else:
        if indices.ndim != 1:
            e.fail("indices of rank above 1 on a tensor computed at run time are not supported")
        step = int(flat[1] - flat[0]) if flat.size > 1 else 1
        if not np.array_equal(flat, flat[0] + step * np.arange(flat.size)):
            e.fail("indices that are not an arithmetic sequence are not supported on a tensor computed at run time")
        var = index[axis]
        term = var if step == 1 else f"{var} * {step}" if step >= 0 else f"{int(flat[0])} - {var} * {-step}"
        if step >= 0 and flat[0]:
            term = f"{term} + {int(flat[0])}"
        source = index[:axis] + [term] + index[axis + 1:]
    e.define(e.outs[0], shape, e.load(0, source))


@dataclass(frozen=True)
class ResizeParams:
    """A Resize's (or an Upsample's) mode, coordinate transformation, nearest rounding, and per
    axis its scale as onnxruntime has it (float32), as the author meant it, and its output size."""

    mode: str
    coordinates: str
    nearest: str
    scales: tuple[float, ...]
    exact: tuple[Fraction, ...]
    shape: Shape


def resize_params(ctx: OpContext) -> ResizeParams:
    """What a Resize or an Upsample node asks for, its scales or sizes constant; a one-line
    ``ModelError`` for what is not supported."""
    x = ctx.in_shapes[0]
    rank = len(x)
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        ctx.fail(f"mode {mode!r} is not supported (nearest and linear are)")
    if ctx.node.op == "Upsample" or ctx.opset < 11:  # asymmetric, and the rounding of opset 10
        coordinates, nearest, sizes, axes = "asymmetric", "simple", None, list(range(rank))
        scales = ctx.attr("scales") if ctx.node.op == "Upsample" and ctx.attr("scales") else \
            np.asarray(ctx.const(1, "scales"), np.float32).reshape(-1).tolist()
    else:
        coordinates = ctx.attr("coordinate_transformation_mode", "half_pixel")
        nearest = ctx.attr("nearest_mode", "round_prefer_floor")
        if coordinates not in resize.COORDINATE_MODES:
            ctx.fail(f"coordinate_transformation_mode {coordinates!r} is not supported "
                     f"({', '.join(resize.COORDINATE_MODES)} are)")
        if mode == "nearest" and nearest not in resize.NEAREST_MODES:
            ctx.fail(f"nearest_mode {nearest!r} is not supported ({', '.join(resize.NEAREST_MODES)} are)")
        if ctx.attr("antialias", 0) or ctx.attr("exclude_outside", 0):
            ctx.fail("antialias and exclude_outside are not supported")
        axes = [ctx.axis(a, rank) for a in (ctx.attr("axes") or range(rank))]
        given = [k for k in (2, 3) if ctx.has(k) and np.size(ctx.const(k, "scales or sizes"))]
        if len(given) != 1:
            ctx.fail("it needs exactly one of scales and sizes, a constant that is not empty")
        scales = np.asarray(ctx.consts[2], np.float32).reshape(-1).tolist() if given == [2] else None
        sizes = ctx.ints(3, "sizes") if given == [3] else None
    if len(scales if sizes is None else sizes) != len(axes):
        ctx.fail(f"its scales or sizes do not match the {len(axes)} axes it resizes (input of rank {rank})")
    out, floats, exact = list(x), [1.0] * rank, [Fraction(1)] * rank
    if sizes is None:
        if any(not v > 0 for v in scales) or (ctx.node.op == "Upsample" and any(v < 1 for v in scales)):
            ctx.fail(f"scales {scales} are not all positive (at least 1 for Upsample)")
        for a, v in zip(axes, scales):
            out[a], floats[a], exact[a] = int(np.float32(v) * np.float32(x[a])), v, resize.simplest_fraction(v)
    else:
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy not in ("stretch", "not_larger", "not_smaller"):
            ctx.fail(f"keep_aspect_ratio_policy {policy!r} is not known")
        ratios = [np.float32(v) / np.float32(x[a]) for a, v in zip(axes, sizes)]
        if policy != "stretch":
            kept = min(ratios) if policy == "not_larger" else max(ratios)
            sizes = [int(np.floor(float(kept * np.float32(x[a])) + 0.5)) for a in axes]
            ratios = [kept] * len(axes)
        for a, v, r in zip(axes, sizes, ratios):
            out[a], floats[a] = v, float(r)
            exact[a] = Fraction(v, x[a]) if policy == "stretch" else resize.simplest_fraction(r)
    if min(out) <= 0:
        ctx.fail(f"its output {out} would be empty")
    return ResizeParams(mode, coordinates, nearest, tuple(floats), tuple(exact), tuple(out))


def _resize_maps(ctx: OpContext) -> list[Optional[resize.AxisMap]]:
    """Per axis, where the output reads (None: at its own index). onnxruntime copies an input
    whose shape does not change, and leaves an axis of scale 1 alone."""
    p, x = resize_params(ctx), ctx.in_shapes[0]
    if p.shape == tuple(x):
        return [None] * len(x)
    return [None if np.float32(scale) == 1 else
            resize.nearest_map(p.coordinates, p.nearest, out, size, scale, exact) if p.mode == "nearest" else
            resize.linear_map(p.coordinates, out, size, scale, exact)
            for out, size, scale, exact in zip(p.shape, x, p.scales, p.exact)]


def _resize_tables(ctx: OpContext) -> list[np.ndarray]:
    return [m.weights for m in _resize_maps(ctx) if m is not None and m.weights is not None]


MAX_RESIZE_LOADS = 256  # loads written for one output element (a guard against a map in shards)


@register("Resize Upsample", INJECTIVE, lambda ctx: [resize_params(ctx).shape], tables=_resize_tables)
def _resize(e: Emitter) -> None:
    """Each output element is the sum over the taps of the resized axes (one per axis for
    nearest, two for linear) of the input there times the taps' weights (constant tables)."""
    maps, shape = _resize_maps(e), e.out_shapes[0]
    index = index_vars(shape)
    resized = [(k, m) for k, m in enumerate(maps) if m is not None]
    shards = {(k, t): resize.pieces(m.sources[t], m.slope) for k, m in resized for t in range(len(m.sources))}
    corners = list(itertools.product(*[range(len(m.sources)) for _, m in resized]))
    loads = sum(math.prod(len(shards[k, t]) for (k, _), t in zip(resized, taps)) for taps in corners)
    if loads > MAX_RESIZE_LOADS:
        e.fail(f"its index maps fall into too many pieces ({loads} loads per element)")
    terms = []
    for taps in corners:
        table = iter(range(TABLES_AT, len(e.ins)))
        weights = [e.load(next(table), [index[k], str(t)]) for (k, m), t in zip(resized, taps) if m.weights is not None]
        read = _read_through(e, index, [(k, shards[k, t]) for (k, _), t in zip(resized, taps)])
        terms.append(" * ".join(weights + [read]))
    e.define(e.outs[0], shape, " + ".join(terms))


def _read_through(e: Emitter, index: list[str], axes: list[tuple[int, list[resize.Piece]]]) -> str:
    """Input 0 at ``index``, where each of ``axes`` (a position, the pieces of its map) reads at
    its map's index: a tree of conditionals on the output index, a piece at each leaf."""
    if not axes:
        return e.load(0, index)
    (k, shards), rest = axes[0], axes[1:]

    def tree(part: list[resize.Piece]) -> str:
        if len(part) > 1:
            mid = len(part) // 2
            return f"({tree(part[:mid])} if {index[k]} < {part[mid].start} else {tree(part[mid:])})"
        p = part[0]
        line = affine((p.a, index[k]), const=p.b)
        at = list(index)
        at[k] = str(p.b // p.c) if p.a == 0 else line if p.c == 1 else \
            f"{f'({line})' if ' ' in line else line} // {p.c}"
        return _read_through(e, at, rest)
    return tree(shards)


# ---- reductions ------------------------------------------------------------------------------------

def reduce_axes(ctx: OpContext) -> list[int]:
    """The sorted axes a Reduce* node reduces (from its attribute or, by opset, its input)."""
    rank = len(ctx.in_shapes[0])
    if ctx.opset >= 18 or (ctx.opset >= 13 and ctx.node.op == "ReduceSum"):
        axes = ctx.ints(1, "axes") if ctx.has(1) else None
    else:
        axes = ctx.attr("axes")
    if not axes:
        return [] if ctx.attr("noop_with_empty_axes", 0) else list(range(rank))
    return sorted({ctx.axis(a, rank) for a in axes})


def _reduce_shape(ctx: OpContext) -> list[Shape]:
    src, axes = ctx.in_shapes[0], reduce_axes(ctx)
    if ctx.attr("keepdims", 1):
        return [tuple(1 if k in axes else d for k, d in enumerate(src))]
    return [tuple(d for k, d in enumerate(src) if k not in axes)]


REDUCE_OPS = {"ReduceSum": "+=", "ReduceMean": "+=", "ReduceMax": "max=", "ReduceMin": "min=",
              "ReduceSumSquare": "+=", "ReduceL2": "+="}


@register(" ".join(REDUCE_OPS), REDUCE, _reduce_shape)
def _reduce(e: Emitter) -> None:
    src, axes = e.in_shapes[0], reduce_axes(e)
    shape = e.out_shapes[0]
    if not axes:
        e.define(e.outs[0], shape, e.load(0, index_vars(shape)))
        return
    keep = bool(e.attr("keepdims", 1))
    out_vars = iter(index_vars(shape))
    source, reduce = [], []
    for k, d in enumerate(src):
        if k in axes:
            source.append(f"r{k}")
            reduce.append((f"r{k}", d))
            if keep:
                next(out_vars)
        else:
            source.append(next(out_vars))
    x = e.load(0, source)
    op = e.node.op
    body = f"{x} * {x}" if op in ("ReduceSumSquare", "ReduceL2") else x
    total = math.prod(src[k] for k in axes)
    if op in ("ReduceMean", "ReduceL2"):
        sums = e.temp(shape, body, "+=", reduce)
        vars_ = index_vars(shape)
        at = f"{sums}[{', '.join(vars_)}]"
        final = f"{at} / {float(total)}" if op == "ReduceMean" else f"sqrt({at})"
        e.define(e.outs[0], shape, final)
    else:
        e.define(e.outs[0], shape, body, REDUCE_OPS[op], reduce)


def _rows(e: Emitter, axes: Sequence[int]):
    """Kept shape (the reduced axes as 1), its index, and the source index with reduction
    variables over ``axes``."""
    src = e.in_shapes[0]
    kept = tuple(1 if k in axes else d for k, d in enumerate(src))
    index = index_vars(kept)
    source = [f"r{k}" if k in axes else index[k] for k in range(len(src))]
    reduce = [(f"r{k}", src[k]) for k in axes]
    return kept, index, source, reduce


@register("Softmax LogSoftmax", REDUCE, same_as_first)
def _softmax(e: Emitter) -> None:
    src = e.in_shapes[0]
    rank = len(src)
    axis = e.axis(e.attr("axis", -1 if e.opset >= 13 else 1), rank)
    axes = [axis] if e.opset >= 13 else list(range(axis, rank))
    kept, index, source, reduce = _rows(e, axes)
    top = e.temp(kept, e.load(0, source), "max=", reduce)
    full = index_vars(src)
    row = [("0" if k in axes else full[k]) for k in range(rank)]
    shifted = f"{e.load(0, full)} - {top}[{', '.join(row)}]"
    if e.node.op == "LogSoftmax":
        sums = e.temp(kept, f"exp({e.load(0, source)} - {top}[{', '.join(index)}])", "+=", reduce)
        e.define(e.outs[0], src, f"{shifted} - log({sums}[{', '.join(row)}])")
        return
    ex = e.temp(src, f"exp({shifted})")
    sums = e.temp(kept, f"{ex}[{', '.join(source)}]", "+=", reduce)
    e.define(e.outs[0], src, f"{ex}[{', '.join(full)}] / {sums}[{', '.join(row)}]")


@register("LayerNormalization", REDUCE, lambda ctx: [ctx.in_shapes[0]])
def _layer_norm(e: Emitter) -> None:
    if len(e.node.outputs) > 1 and any(e.node.outputs[1:]):
        e.fail("its Mean and InvStdDev outputs are not supported")
    src = e.in_shapes[0]
    rank = len(src)
    axis = e.axis(e.attr("axis", -1), rank)
    axes = list(range(axis, rank))
    kept, index, source, reduce = _rows(e, axes)
    count = float(math.prod(src[k] for k in axes))
    full = index_vars(src)
    row = [("0" if k in axes else full[k]) for k in range(rank)]
    total = e.temp(kept, e.load(0, source), "+=", reduce)
    mean = e.temp(kept, f"{total}[{', '.join(index)}] / {count}")
    centred = f"({e.load(0, source)} - {mean}[{', '.join(index)}])"
    sq = e.temp(kept, f"{centred} * {centred}", "+=", reduce)
    eps = number(e.attr("epsilon", 1e-5))
    body = (f"({e.load(0, full)} - {mean}[{', '.join(row)}]) * rsqrt({sq}[{', '.join(row)}] / {count} + {eps})"
            f" * {e.bload(1, full, src)}")
    if e.has(2):
        body += f" + {e.bload(2, full, src)}"
    e.define(e.outs[0], src, body)


# ---- convolutions, matrix products and pooling ------------------------------------------------------

def _window(ctx: OpContext, spatial: Shape, kernel: Sequence[int], pooling: bool):
    """(strides, dilations, pads before, pads after, output sizes) of a sliding window."""
    n = len(spatial)
    strides = list(ctx.attr("strides") or [1] * n)
    dilations = list(ctx.attr("dilations") or [1] * n)
    pads = list(ctx.attr("pads") or [0] * (2 * n))
    auto = ctx.attr("auto_pad", "NOTSET")
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
        ctx.fail(f"strides, dilations or pads do not match its {n} spatial axes")
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        outs = [-(-size // s) for size, s in zip(spatial, strides)]
        total = [max(0, (o - 1) * s + e - size) for o, s, e, size in zip(outs, strides, extents, spatial)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        before, after = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        before, after = [0] * n, [0] * n
    elif auto == "NOTSET":
        before, after = pads[:n], pads[n:]
    else:
        ctx.fail(f"auto_pad {auto!r} is not known")
    ceil = pooling and ctx.attr("ceil_mode", 0)
    outs = []
    for size, s, e, b, a in zip(spatial, strides, extents, before, after):
        span = size + b + a - e
        if span < 0:
            ctx.fail(f"its window ({e}) is larger than its padded input ({size + b + a})")
        count = (-(-span // s) if ceil else span // s) + 1
        if ceil and (count - 1) * s >= size + b:  # the last window must start inside the input
            count -= 1
        outs.append(count)
    # Windows of ceil_mode that run past the end read as if padded there.
    after = [max(a, (o - 1) * s + e - size - b)
             for a, o, s, e, size, b in zip(after, outs, strides, extents, spatial, before)]
    return strides, dilations, before, after, outs


def _conv_shape(ctx: OpContext) -> list[Shape]:
    x, w = ctx.in_shapes[0], ctx.in_shapes[1]
    if len(x) < 3 or len(w) != len(x):
        ctx.fail(f"input {list(x)} and weight {list(w)} are not those of a convolution")
    groups = ctx.attr("group", 1)
    if x[1] != w[1] * groups or w[0] % groups:
        ctx.fail(f"input channels {x[1]}, weight {list(w)} and group {groups} do not agree")
    kernel = ctx.attr("kernel_shape") or list(w[2:])
    *_, outs = _window(ctx, x[2:], kernel, pooling=False)
    return [(x[0], w[0], *outs)]


@register("Conv", ANCHOR, _conv_shape)
def _conv(e: Emitter) -> None:
    x, w = e.in_shapes[0], e.in_shapes[1]
    shape = e.out_shapes[0]
    n = len(x) - 2
    strides, dilations, before, after, _ = _window(e, x[2:], list(w[2:]), pooling=False)
    source = e.ins[0]
    if any(before) or any(after):
        padded_shape = (x[0], x[1], *(d + b + a for d, b, a in zip(x[2:], before, after)))
        pidx = index_vars(padded_shape)
        source = e.temp(padded_shape, padded(e, 0, pidx, [0, 0, *before], x, "0.0", padded_shape))
    groups = e.attr("group", 1)
    cg, fg = w[1], w[0] // groups
    index = index_vars(shape)
    win = [f"k{j}" for j in range(n)]
    spatial = [" + ".join(t for t in (f"{v} * {s}" if s != 1 else v, f"{k} * {d}" if d != 1 else k))
               for v, k, s, d in zip(index[2:], win, strides, dilations)]
    reduce = [(k, size) for k, size in zip(win, w[2:])]
    if cg == 1:
        channel = index[1] if fg == 1 else f"{index[1]} // {fg}"
        weight = [index[1], "0", *win]
    else:
        reduce = [("c", cg)] + reduce
        channel = "c" if groups == 1 else f"{index[1]} // {fg} * {cg} + c"
        weight = [index[1], "c", *win]
    body = f"{source}[{index[0]}, {channel}, {', '.join(spatial)}] * {e.load(1, weight)}"
    if not e.has(2):
        e.define(e.outs[0], shape, body, "+=", reduce)
        return
    sums = e.temp(shape, body, "+=", reduce)
    e.define(e.outs[0], shape, f"{sums}[{', '.join(index)}] + {e.load(2, [index[1]])}")


def affine(*terms: tuple[int, str], const: int = 0) -> str:
    """``c0 * v0 + c1 * v1 + ... + const`` as index text, without zero terms or unit factors."""
    text = ""
    for coef, var in terms:
        if coef:
            sign = " - " if coef < 0 else " + "
            part = var if abs(coef) == 1 else f"{abs(coef)} * {var}"
            text = (f"-{part}" if coef < 0 else part) if not text else text + sign + part
    if const or not text:
        text = str(const) if not text else text + (f" - {-const}" if const < 0 else f" + {const}")
    return text


def _transpose_window(ctx: OpContext) -> list[tuple[int, int, int, int, int]]:
    """Per spatial axis of a ConvTranspose: (stride, dilation, kernel, pad before, output
    size), as onnxruntime computes them: an ``output_shape`` fixes the size and the pads
    (the larger half before, unless SAME_UPPER); SAME_UPPER and SAME_LOWER make
    ``input * stride`` where the kernel reaches that far; else ``pads`` crop the full output."""
    x, w = ctx.in_shapes[0], ctx.in_shapes[1]
    n = len(x) - 2
    kernel = list(w[2:])
    if ctx.attr("kernel_shape") and list(ctx.attr("kernel_shape")) != kernel:
        ctx.fail(f"kernel_shape {list(ctx.attr('kernel_shape'))} differs from its weight's {kernel}")
    strides = list(ctx.attr("strides") or [1] * n)
    dilations = list(ctx.attr("dilations") or [1] * n)
    pads = list(ctx.attr("pads") or [0] * (2 * n))
    extra = list(ctx.attr("output_padding") or [0] * n)
    wanted = list(ctx.attr("output_shape") or [])
    wanted = wanted[2:] if len(wanted) == n + 2 else wanted
    auto = ctx.attr("auto_pad", "NOTSET")
    if any(len(v) != n for v in (strides, dilations, extra)) or len(pads) != 2 * n or wanted and len(wanted) != n:
        ctx.fail(f"strides, dilations, pads, output_padding or output_shape do not match its {n} spatial axes")
    if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        ctx.fail(f"auto_pad {auto!r} is not known")
    axes = []
    for j, (size, k, s, d, a) in enumerate(zip(x[2:], kernel, strides, dilations, extra)):
        full = (size - 1) * s + (k - 1) * d + 1 + a
        if wanted or auto in ("SAME_UPPER", "SAME_LOWER"):
            total = full - wanted[j] if wanted else max(0, full - size * s)
            if total < 0:
                ctx.fail(f"output_shape {wanted} is larger than the full output ({full} on spatial axis {j})")
            before = total // 2 if auto == "SAME_UPPER" else total - total // 2
            out = full - total
        elif auto == "VALID":
            before, out = 0, full
        else:
            before, out = pads[j], full - pads[j] - pads[n + j]
        if out <= 0 or before < 0 or min(s, d, k) <= 0:
            ctx.fail(f"its output would have {out} elements on spatial axis {j} (pads {pads}, stride {s}, "
                     f"dilation {d}, kernel {k})")
        axes.append((s, d, k, before, out))
    return axes


def _conv_transpose_shape(ctx: OpContext) -> list[Shape]:
    x, w = ctx.in_shapes[0], ctx.in_shapes[1]
    groups = ctx.attr("group", 1)
    if len(x) < 3 or len(w) != len(x) or w[0] != x[1] or x[1] % groups:
        ctx.fail(f"input {list(x)}, weight {list(w)} and group {groups} are not those of a transposed convolution")
    return [(x[0], w[1] * groups, *(out for *_, out in _transpose_window(ctx)))]


def _plus(text: str, const: int) -> str:
    return f"{text} + {const}" if const > 0 else f"{text} - {-const}" if const < 0 else text


class _TransposedAxis(NamedTuple):
    """How a ConvTranspose sums along one spatial axis: its extent in the sums ``Z`` (rows,
    and phases: 1 where it has none), the reduction's extent, the input index (text plus a
    constant) and the span it covers, the kernel index and the kernel's length it reaches, a
    condition (or None), and the output's index into ``Z`` (row, and phase or None)."""

    rows: int
    phases: int
    taps: int
    x_text: str
    x_const: int
    x_span: tuple[int, int]
    w_text: str
    w_size: int
    cond: Optional[str]
    y_row: str
    y_phase: Optional[str]


def _transposed_axis(s: int, d: int, k: int, before: int, out: int, q: str, r: str, tap: str,
                     o: str) -> _TransposedAxis:
    """Axis of stride ``s``, dilation ``d``, kernel ``k``, pad ``before`` and output size ``out``:
    ``q`` and ``r`` name its row and phase variables of ``Z``, ``tap`` the reduction variable,
    ``o`` the output's."""
    if s == 1:  # a convolution: i = o + before - d * tap
        return _TransposedAxis(out, 1, k, affine((1, q), (-d, tap)), before, (before - d * (k - 1), out - 1 + before),
                               tap, k, None, o, None)
    if d == 1:  # phase r = o % s: i = q - tap + (r + before) // s, kernel k = (r + before) % s + s * tap
        taps, rows = -(-k // s), -(-out // s)
        span = (before // s - (taps - 1), rows - 1 + (s - 1 + before) // s)
        if before % s == 0:  # every phase starts on the same input row
            return _TransposedAxis(rows, s, taps, affine((1, q), (-1, tap)), before // s, span,
                                   affine((1, r), (s, tap)), s * taps, None, f"{o} // {s}", f"{o} % {s}")
        return _TransposedAxis(rows, s, taps, f"{affine((1, q), (-1, tap))} + ({r} + {before}) // {s}", 0, span,
                               f"({r} + {before}) % {s} + {s} * {tap}", s * taps, None, f"{o} // {s}", f"{o} % {s}")
    numerator = affine((1, q), (-d, tap), const=before)  # every tap, those that s divides
    span = ((before - d * (k - 1)) // s, (out - 1 + before) // s)
    return _TransposedAxis(out, 1, k, f"({numerator}) // {s}", 0, span, tap, k, f"({numerator}) % {s} == 0", o, None)


@register("ConvTranspose", ANCHOR, _conv_transpose_shape)
def _conv_transpose(e: Emitter) -> None:
    """The gradient of a convolution, written as a gather: output ``o`` sums ``X[i] * W[k]``
    over ``o + before = s * i + d * k``. Where ``d == 1`` (or ``s == 1``) the output splits
    into ``s`` phases, ``o = s * q + r``, each a plain convolution over ``i = q - m + (r +
    before) // s`` with the taps ``k = (r + before) % s + s * m``: no product with an
    inserted zero. The sums ``Z[n, f, r.., q..]`` keep each phase's plane whole, so that the
    scheduler tiles what it tiles in a convolution (rows of one plane, not two phases of a
    few elements each); the output interleaves them. Where both the stride and the dilation
    exceed 1 an axis sums over every tap and keeps those where ``s`` divides
    ``o + before - d * k``."""
    x, w = e.in_shapes[0], e.in_shapes[1]
    shape = e.out_shapes[0]
    groups = e.attr("group", 1)
    cg, fg = x[1] // groups, w[1]
    out_vars = index_vars(shape)
    window = _transpose_window(e)
    phased = sum(1 for s, d, *_ in window if s > 1 and d == 1)
    z_vars = index_vars((0,) * (len(shape) + phased))
    phase_vars, row_vars = iter(z_vars[2:2 + phased]), iter(z_vars[2 + phased:])
    axes = []
    for j, ((s, d, k, before, out), o) in enumerate(zip(window, out_vars[2:])):
        r = next(phase_vars) if s > 1 and d == 1 else ""
        axes.append(_transposed_axis(s, d, k, before, out, next(row_vars), r, f"m{j}", o))
    z_shape = (*shape[:2], *(a.phases for a in axes if a.y_phase), *(a.rows for a in axes))
    reduce = [(f"m{j}", a.taps) for j, a in enumerate(axes)]
    conds = [a.cond for a in axes if a.cond]
    # Zero padding where the taps reach outside the input, and past the kernel's end.
    lows = [max(0, -a.x_span[0]) for a in axes]
    highs = [max(0, a.x_span[1] - (size - 1)) for a, size in zip(axes, x[2:])]
    source = e.ins[0]
    if any(lows) or any(highs):
        p_shape = (x[0], x[1], *(size + lo + hi for size, lo, hi in zip(x[2:], lows, highs)))
        source = e.temp(p_shape, padded(e, 0, index_vars(p_shape), [0, 0, *lows], x, "0.0", p_shape))
    weights = e.ins[1]
    if [a.w_size for a in axes] != list(w[2:]):
        w_shape = (w[0], w[1], *(a.w_size for a in axes))
        weights = e.temp(w_shape, padded(e, 1, index_vars(w_shape), [0] * len(w), w, "0.0", w_shape))
    n, f = out_vars[0], out_vars[1]  # Z's first two variables too
    if cg == 1:
        channel = f if fg == 1 else f"{f} // {fg}"
    else:
        reduce.insert(0, ("c", cg))
        channel = "c" if groups == 1 else f"{f} // {fg} * {cg} + c"
    within = f if groups == 1 else ("0" if fg == 1 else f"{f} % {fg}")
    spatial = ", ".join(_plus(a.x_text, a.x_const + low) for a, low in zip(axes, lows))
    body = f"{source}[{n}, {channel}, {spatial}] * {weights}[{channel}, {within}, {', '.join(a.w_text for a in axes)}]"
    if conds:
        body = f"({body} if {' and '.join(conds)} else 0.0)"
    if not phased and not e.has(2):
        e.define(e.outs[0], shape, body, "+=", reduce)
        return
    sums = e.temp(z_shape, body, "+=", reduce)
    result = f"{sums}[{', '.join([n, f, *(a.y_phase for a in axes if a.y_phase), *(a.y_row for a in axes)])}]"
    e.define(e.outs[0], shape, f"{result} + {e.load(2, [f])}" if e.has(2) else result)


def _matmul_shape(ctx: OpContext) -> list[Shape]:
    a, b = ctx.in_shapes[0], ctx.in_shapes[1]
    a2, b2 = (a if len(a) > 1 else (1, *a)), (b if len(b) > 1 else (*b, 1))
    if a2[-1] != b2[-2]:
        ctx.fail(f"shapes {list(a)} and {list(b)} do not multiply")
    batch = broadcast(ctx, [a2[:-2], b2[:-2]])
    out = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [out]


@register("MatMul", ANCHOR, _matmul_shape)
def _matmul(e: Emitter) -> None:
    a, b = e.in_shapes[0], e.in_shapes[1]
    shape = e.out_shapes[0]
    full = (*shape[:len(shape) - (len(a) > 1) - (len(b) > 1)], a[-2] if len(a) > 1 else 1, b[-1] if len(b) > 1 else 1)
    index = index_vars(shape)
    # The output index as if both were matrices: i, j (1 where an operand is a vector).
    it = iter(index)
    batch = [next(it) for _ in full[:-2]]
    i = next(it) if len(a) > 1 else "0"
    j = next(it) if len(b) > 1 else "0"
    k = [("k", a[-1])]

    def operand(m: int, own: Shape, rows: str, cols: str) -> str:
        lead = len(batch) - (len(own) - 2)
        idx = [("0" if d == 1 and full[lead + q] != 1 else batch[lead + q]) for q, d in enumerate(own[:-2])]
        return e.load(m, idx + ([rows, cols] if len(own) > 1 else [cols if m == 0 else rows]))

    body = f"{operand(0, a, i, 'k')} * {operand(1, b, 'k', j)}"
    e.define(e.outs[0], shape, body, "+=", k)


def _gemm_shape(ctx: OpContext) -> list[Shape]:
    a, b = ctx.in_shapes[0], ctx.in_shapes[1]
    m, k = (a[1], a[0]) if ctx.attr("transA", 0) else a
    k2, n = (b[1], b[0]) if ctx.attr("transB", 0) else b
    if k != k2:
        ctx.fail(f"shapes {list(a)} and {list(b)} do not multiply (transA {ctx.attr('transA', 0)}, "
                 f"transB {ctx.attr('transB', 0)})")
    return [(m, n)]


@register("Gemm", ANCHOR, _gemm_shape)
def _gemm(e: Emitter) -> None:
    shape = e.out_shapes[0]
    a = e.load(0, ["k", "i0"] if e.attr("transA", 0) else ["i0", "k"])
    b = e.load(1, ["i1", "k"] if e.attr("transB", 0) else ["k", "i1"])
    alpha, beta = e.attr("alpha", 1.0), e.attr("beta", 1.0)
    reduce = [("k", e.in_shapes[0][0 if e.attr("transA", 0) else 1])]
    if not e.has(2) or beta == 0.0:
        body = f"{a} * {b}" if alpha == 1.0 else f"{number(alpha)} * {a} * {b}"
        e.define(e.outs[0], shape, body, "+=", reduce)
        return
    sums = e.temp(shape, f"{a} * {b}", "+=", reduce)
    product = f"{sums}[i0, i1]" if alpha == 1.0 else f"{number(alpha)} * {sums}[i0, i1]"
    c = e.bload(2, ["i0", "i1"], shape)
    e.define(e.outs[0], shape, f"{product} + {c}" if beta == 1.0 else f"{product} + {number(beta)} * {c}")


def _pool_shape(ctx: OpContext) -> list[Shape]:
    x = ctx.in_shapes[0]
    if ctx.node.op.startswith("Global"):
        return [(*x[:2], *([1] * (len(x) - 2)))]
    if len(ctx.node.outputs) > 1 and ctx.node.outputs[1]:
        ctx.fail("its Indices output is not supported")
    *_, outs = _window(ctx, x[2:], ctx.attr("kernel_shape"), pooling=True)
    return [(*x[:2], *outs)]


LOWEST = number(float(-np.finfo(np.float32).max))


@register("MaxPool AveragePool", ANCHOR, _pool_shape)
def _pool(e: Emitter) -> None:
    x, shape = e.in_shapes[0], e.out_shapes[0]
    kernel = e.attr("kernel_shape")
    strides, dilations, before, after, _ = _window(e, x[2:], kernel, pooling=True)
    index = index_vars(shape)
    win = [f"k{j}" for j in range(len(kernel))]
    reduce = list(zip(win, kernel))
    spatial = [" + ".join(t for t in (f"{v} * {s}" if s != 1 else v, f"{k} * {d}" if d != 1 else k))
               for v, k, s, d in zip(index[2:], win, strides, dilations)]
    maximum = e.node.op == "MaxPool"
    source = e.ins[0]
    if any(before) or any(after):
        padded_shape = (x[0], x[1], *(d + b + a for d, b, a in zip(x[2:], before, after)))
        source = e.temp(padded_shape, padded(e, 0, index_vars(padded_shape), [0, 0, *before], x,
                                             LOWEST if maximum else "0.0", padded_shape))
    load = f"{source}[{index[0]}, {index[1]}, {', '.join(spatial)}]"
    if maximum:
        e.define(e.outs[0], shape, load, "max=", reduce)
        return
    if any(d != 1 for d in dilations):
        e.fail("AveragePool with dilations is not supported")
    sums = e.temp(shape, load, "+=", reduce)
    total = f"{sums}[{', '.join(index)}]"
    if e.attr("count_include_pad", 0) and not e.attr("ceil_mode", 0):
        e.define(e.outs[0], shape, f"{total} / {float(math.prod(kernel))}")
        return
    # The window's elements inside the input (and, counting pads, inside the padding given).
    counts = []
    for v, s, k, b, size, a_given in zip(index[2:], strides, kernel, before, x[2:], _given_after(e, len(kernel))):
        lo, hi = (-b, size + a_given) if e.attr("count_include_pad", 0) else (0, size)
        start = f"{v} * {s} - {b}" if b else f"{v} * {s}"
        counts.append(f"(min({start} + {k}, {hi}) - max({start}, {lo}))")
    e.define(e.outs[0], shape, f"{total} / ({' * '.join(counts)})")


def _given_after(ctx: OpContext, n: int) -> list[int]:
    pads = ctx.attr("pads") or [0] * (2 * n)
    return list(pads[n:]) if ctx.attr("auto_pad", "NOTSET") == "NOTSET" else [0] * n


@register("GlobalAveragePool GlobalMaxPool", REDUCE, _pool_shape)
def _global_pool(e: Emitter) -> None:
    x, shape = e.in_shapes[0], e.out_shapes[0]
    index = index_vars(shape)
    win = [f"k{j}" for j in range(len(x) - 2)]
    load = e.load(0, [index[0], index[1], *win])
    reduce = list(zip(win, x[2:]))
    if e.node.op == "GlobalMaxPool":
        e.define(e.outs[0], shape, load, "max=", reduce)
        return
    sums = e.temp(shape, load, "+=", reduce)
    e.define(e.outs[0], shape, f"{sums}[{', '.join(index)}] / {float(math.prod(x[2:]))}")


@register("LRN", ANCHOR, same_as_first)
def _lrn(e: Emitter) -> None:
    """y = x / (bias + alpha / size * (sum of x^2 over ``size`` channels around))^beta."""
    x = e.in_shapes[0]
    size = e.attr("size")
    index = index_vars(x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded_shape = (x[0], x[1] + lo + hi, *x[2:])
    squares = e.temp(padded_shape, padded(e, 0, index_vars(padded_shape), [0, lo] + [0] * (len(x) - 2), x,
                                          "0.0", padded_shape))
    sq = e.temp(x, f"{squares}[{index[0]}, {index[1]} + r, {', '.join(index[2:])}] * "
                   f"{squares}[{index[0]}, {index[1]} + r, {', '.join(index[2:])}]", "+=", [("r", size)])
    alpha, beta, bias = e.attr("alpha", 1e-4), e.attr("beta", 0.75), e.attr("bias", 1.0)
    e.define(e.outs[0], x, f"{e.load(0, index)} / pow({number(bias)} + {number(alpha / size)} * "
                          f"{sq}[{', '.join(index)}], {number(beta)})")
