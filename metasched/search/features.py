"""Per-store features of a lowered loop program: what the learned cost model sees.

One row per ``Store`` statement of a ``PrimFunc``, in program order, in the spirit of Ansor's
and MetaSchedule's per-store features (TVM's ``per_store_feature.cc``). ``FEATURES`` names
and describes every column; ``FEATURE_VERSION`` changes whenever a column is added, removed or
changes meaning, and is stored with each database record. Count- and size-like values are
log-scaled as ``log2(1 + x)`` (their descriptions end with it); flags are not.

Columns: the store's arithmetic, its loop nest, its allocations, arithmetic intensity; then
the buffers it touches in fixed slots (the written one, then the ``READ_SLOTS`` largest read
ones); then the whole program. Loops of extent 1 run once and are left out everywhere, as
TVM's feature extraction removes them first.

Map of the file:
  1. the feature table (``FEATURES``, ``FEATURE_NAMES``, ``FEATURE_VERSION``) and this
     machine's cache sizes, where the working-set features place their levels
     (``host_cache_bytes``);
  2. ``per_store_features`` and ``batch_per_store_features``, the public entry points;
  3. ``_Scope``: what the statements around a store contribute (loops, allocations, guards),
     built once per loop or guard and shared by every store below it;
  4. ``_Extractor``: one walk over the program; expression summaries (operation counts packed
     into one int, and each index's per-loop-variable coefficients) memoised by expression
     value across programs, since the candidates of a search share most index expressions;
  5. the memory analysis of one store: strides, reuse and footprints from those coefficients.

Footprints are estimated, not enumerated: an index ``sum(c_v * v) + ...`` spans
``1 + sum(|c_v| * (extent_v - 1))`` elements along its dimension, capped at the dimension's
extent; ``x // k`` contributes ``c / k`` per step of ``x`` and ``x % k`` contributes ``c``.
That is exact for the affine indices of tiled loops and cheap enough to evaluate at every
loop level, which the reuse and working-set features need (a buffer's region is worked out
again only at the loops that move it).
"""
from __future__ import annotations

import math
import os
from typing import Iterable, Optional

import numpy as np

from metasched.ir.expr import (
    BinOp, Call, Cast, Expr, FloatImm, IntImm, Load, Neg, Not, Select, Var,
)
from metasched.ir.stmt import (
    Allocate, Buffer, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store,
)

# -- 1. the feature table -----------------------------------------------------------------
# What each version added, and why (bench/README.md, Design history, has the rest):
# 2: reuse_extent in every buffer slot, so that how a reduction loop is split shows in a
# column (it can change matmul_relu's time 2.7 times).
# 3: the innermost rolled loop (rolled_*, and each buffer's rolled_stride): the loop LLVM's
# own vectorizer works on when the schedule vectorized nothing, along the rows or down the
# columns of a buffer.
# 4: intensity_l1 and intensity_l2, the flops per unique byte over the outermost loop whose
# working set fits a cache of each size: how well a program is tiled for the caches, which
# intensity over the innermost loop or the whole nest does not say.
# 5: intensity_l1 and intensity_l2 place their levels at this machine's L1 data cache and L2
# (``host_cache_bytes``), not at a fixed 32 KiB and 512 KiB.
FEATURE_VERSION = 5
CACHE_LINE_BYTES = 64
# Where the sizes of the caches cannot be read: a typical x86 core's L1 data cache and L2.
DEFAULT_CACHE_BYTES = (32 * 1024, 512 * 1024)
_SYSFS_CACHES = "/sys/devices/system/cpu/cpu0/cache"


def host_cache_bytes(folder: str = _SYSFS_CACHES) -> tuple[int, int]:
    """(L1 data cache, L2) sizes in bytes of this machine's first core, as Linux describes them
    in ``folder`` (``index*/level``, ``type``, ``size`` such as ``48K``);
    ``DEFAULT_CACHE_BYTES`` for a size it does not give (another system, a container that
    hides it)."""
    found: dict[int, int] = {}
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        entries = []
    for entry in entries:
        if not entry.name.startswith("index"):
            continue
        try:
            level, kind, size = (_read(os.path.join(entry.path, name)) for name in ("level", "type", "size"))
            number = _size_bytes(size)
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and level in ("1", "2"):
            found.setdefault(int(level), number)
    return found.get(1, DEFAULT_CACHE_BYTES[0]), found.get(2, DEFAULT_CACHE_BYTES[1])


def _read(path: str) -> str:
    with open(path) as file:
        return file.read().strip()


def _size_bytes(text: str) -> int:
    """``48K`` -> 49152; ``2M``, ``1G`` and plain byte counts too; ValueError otherwise."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    number = int(text[:-1] if scale > 1 else text)
    if number <= 0:
        raise ValueError(f"cache size {text!r}")
    return number * scale


# The cache sizes the working-set features place their levels at (the model learns what the
# levels mean on the host; the sizes only place them).
L1_BYTES, L2_BYTES = host_cache_bytes()
READ_SLOTS = 3  # read buffers described per store, biggest first; the written one always is

_LOG = "log2(1+x)"

# Operations executed over the store's whole iteration space (the product of its loops'
# extents); enclosing guards count once per iteration of the loops around them.
_ARITHMETIC: tuple[tuple[str, str], ...] = (
    ("float_add_sub", f"float + and - (and negations) executed, {_LOG}"),
    ("float_mul", f"float * executed, {_LOG}"),
    ("float_div", f"float /, // and % executed, {_LOG}"),
    ("float_max_min", f"float max and min executed, {_LOG}"),
    ("float_math", f"math calls (exp, log, sqrt, ...) executed, {_LOG}"),
    ("int_add_sub", f"integer + and - of index arithmetic executed, {_LOG}"),
    ("int_mul", f"integer * of index arithmetic executed, {_LOG}"),
    ("int_div_mod", f"integer // and % of index arithmetic executed, {_LOG}"),
    ("int_cmp", f"comparisons, and/or/not and integer max/min (guards, selects) executed, {_LOG}"),
    ("selects", f"selects executed (both branches' operations are counted), {_LOG}"),
)

_STORE_FEATURES: tuple[tuple[str, str], ...] = _ARITHMETIC + (
    ("flops_per_iter", f"float operations in one execution of the store, {_LOG}"),
    ("flops", f"float operations over the iteration space, {_LOG}"),
    # Loop structure.
    ("loops", f"number of enclosing loops, {_LOG}"),
    ("iterations", f"times the store runs: product of the enclosing extents, {_LOG}"),
    ("innermost_extent", f"extent of the innermost enclosing loop (0 without loops), {_LOG}"),
    ("innermost_serial", "1 if the innermost enclosing loop is serial"),
    ("innermost_parallel", "1 if the innermost enclosing loop is parallel"),
    ("innermost_vectorized", "1 if the innermost enclosing loop is vectorized"),
    ("innermost_unrolled", "1 if the innermost enclosing loop is unrolled"),
    ("in_parallel", "1 if the store runs inside a parallel loop"),
    ("parallel_extent", f"extent of the outermost enclosing parallel loop, the one that runs "
                        f"on threads (code generation runs nested ones serially), 0 if none, "
                        f"{_LOG}"),
    ("vector_lanes", "lanes of the enclosing vectorized loop, 0 if none (the verifier keeps "
                     f"vectorized loops innermost and really vectorized), {_LOG}"),
    ("unrolled_loops", f"number of enclosing unrolled loops, {_LOG}"),
    ("unrolled_prod", f"product of the enclosing unrolled extents (0 if none), {_LOG}"),
    ("unrolled_len", f"extent of the innermost enclosing unrolled loop (0 if none), {_LOG}"),
    ("guards", f"number of enclosing if statements (guards of imperfect splits), {_LOG}"),
    # The innermost rolled loop: the loop whose body LLVM's loop vectorizer may vectorize on
    # its own, its unrolled copies included.
    ("rolled_extent", f"extent of the innermost enclosing serial loop (0 if none), {_LOG}"),
    ("rolled_body", f"iterations inside that loop: the unrolled and vectorized extents below "
                    f"it, {_LOG}"),
    ("rolled_unit_stride", "1 if every buffer the store touches moves 0 or 1 element per step "
                           "of that loop (LLVM may vectorize it with plain vector loads and "
                           "stores), 0 otherwise or if there is none"),
    # Allocations.
    ("alloc_bytes", f"bytes of the local allocations enclosing the store, {_LOG}"),
    ("alloc_entries", f"times the innermost enclosing allocation is entered (0 if none), {_LOG}"),
    # Memory traffic against computation.
    ("intensity_inner", f"flops / unique bytes touched over the innermost loop, {_LOG}"),
    ("intensity", f"flops / unique bytes touched over the whole nest, {_LOG}"),
    ("outer_iter_bytes", f"unique bytes the store touches in one iteration of its outermost "
                         f"loop (a working set), {_LOG}"),
    ("intensity_l1", f"flops / unique bytes over the outermost loop whose working set (all "
                     f"the store's buffers) fits this machine's L1 data cache ({L1_BYTES} "
                     f"bytes here), {_LOG}"),
    ("intensity_l2", f"flops / unique bytes over the outermost loop whose working set fits "
                     f"this machine's L2 ({L2_BYTES} bytes here), {_LOG}"),
)

# Per buffer: the written one (prefix w_), then up to READ_SLOTS read ones (r1_, r2_, ...),
# sorted by bytes touched, then unique bytes (largest first), then name; empty slots are 0.
_BUFFER_FEATURES: tuple[tuple[str, str], ...] = (
    ("bytes", f"bytes accessed over the iteration space (distinct accesses x iterations), {_LOG}"),
    ("unique_bytes", f"bytes of the region one iteration of the outermost loop touches (a "
                     f"tile; estimated), {_LOG}"),
    ("unique_lines", f"{CACHE_LINE_BYTES}-byte cache lines of that region, {_LOG}"),
    ("stride", f"elements moved per step of the innermost loop that moves the access "
               f"(0 if none), {_LOG}"),
    ("repeat", f"consecutive iterations on one element: product of the extents inside the "
               f"innermost loop that moves the access, {_LOG}"),
    ("reuse", f"product of the extents of the loops that do not move the access, {_LOG}"),
    ("reuse_iters", f"iterations between reuses: product of the extents inside the innermost "
                    f"loop (extent > 1) that does not move the access, 0 if none, {_LOG}"),
    ("reuse_bytes", f"unique bytes the store touches between reuses (as reuse_iters), {_LOG}"),
    ("reuse_extent", f"extent of that loop: reuses in a row (TVM's reuse count), e.g. the "
                     f"updates of an accumulator tile per visit, 0 if none, {_LOG}"),
    ("rolled_stride", f"elements moved per step of the innermost rolled loop (rolled_extent), "
                      f"0 if it does not move the access or there is none, {_LOG}"),
    ("local", "1 if the buffer is a local allocation (Allocate), 0 if a parameter"),
    ("buffer_bytes", f"size of the whole buffer in bytes (the region the whole nest "
                     f"touches, in the programs of the space), {_LOG}"),
)

_PROGRAM_FEATURES: tuple[tuple[str, str], ...] = (
    ("program_iterations", f"sum of iterations over all stores of the program, {_LOG}"),
    ("program_stores", f"number of stores in the program, {_LOG}"),
    ("program_flops", f"sum of flops over all stores of the program, {_LOG}"),
    ("workspace_bytes", f"bytes of the program's workspace parameters, {_LOG}"),
)


def _slot_features() -> tuple[tuple[str, str], ...]:
    written = (("w_read_write", "1 if the written buffer is also read by the store (an update)"),)
    written += tuple((f"w_{name}", f"written buffer: {text}") for name, text in _BUFFER_FEATURES)
    reads = tuple((f"r{k}_{name}", f"read buffer {k}: {text}")
                  for k in range(1, READ_SLOTS + 1) for name, text in _BUFFER_FEATURES)
    return written + reads


FEATURES: tuple[tuple[str, str], ...] = _STORE_FEATURES + _slot_features() + _PROGRAM_FEATURES
FEATURE_NAMES: tuple[str, ...] = tuple(name for name, _ in FEATURES)
# The description says which columns are log-scaled; the code follows it.
_LOG_COLUMNS = np.array([text.endswith(_LOG) for _, text in FEATURES])


# -- 2. entry points ----------------------------------------------------------------------
def per_store_features(func: PrimFunc) -> np.ndarray:
    """One row of ``len(FEATURES)`` float32 values per store of ``func``, in program order."""
    return _finish(_Extractor(func).run())


def batch_per_store_features(funcs: Iterable[PrimFunc]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of many programs stacked, and the number of rows of each program: the same
    values as ``per_store_features`` on each, with one numpy pass for the whole batch."""
    rows: list[list[float]] = []
    counts = []
    for func in funcs:
        these = _Extractor(func).run()
        rows.extend(these)
        counts.append(len(these))
    return _finish(rows), np.array(counts, dtype=np.int64)


def _finish(rows: list[list[float]]) -> np.ndarray:
    table = np.array(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))
    # In place, the other columns left as they are (cheaper than gathering and scattering
    # the log-scaled ones by a mask).
    np.log2(table + 1.0, out=table, where=_LOG_COLUMNS)
    return table.astype(np.float32)


# -- 3. what encloses a store -------------------------------------------------------------
class _Scope:
    """The loops, allocations and guards around a point of the program. Immutable: a loop,
    allocation or guard makes a new one from its parent's in O(1)."""

    __slots__ = ("loops", "kind", "prod", "parallel", "lanes", "unr_num", "unr_prod", "unr_len",
                 "rolled", "rolled_at", "alloc_bytes", "alloc_outer", "guards", "guard_ops")

    def __init__(self) -> None:
        self.loops: tuple[tuple[str, int], ...] = ()  # (var, extent), outermost first
        self.kind: Optional[ForKind] = None  # the innermost loop's
        self.prod = 1
        self.parallel = 0  # extent of the outermost parallel loop
        self.lanes = 0
        self.unr_num = self.unr_prod = self.unr_len = 0
        self.rolled: Optional[str] = None  # the variable of the innermost serial loop
        self.rolled_at = (0, 1)  # its extent, and the product of the extents down to it
        self.alloc_bytes = 0
        self.alloc_outer = 0  # iterations outside the innermost allocation; 0: none
        self.guards = 0
        self.guard_ops: Optional[list[float]] = None  # guards' op counts, already scaled

    def _copy(self) -> _Scope:
        new = _Scope.__new__(_Scope)
        new.loops, new.kind, new.prod = self.loops, self.kind, self.prod
        new.parallel, new.lanes = self.parallel, self.lanes
        new.unr_num, new.unr_prod, new.unr_len = self.unr_num, self.unr_prod, self.unr_len
        new.rolled, new.rolled_at = self.rolled, self.rolled_at
        new.alloc_bytes, new.alloc_outer, new.guards, new.guard_ops = (
            self.alloc_bytes, self.alloc_outer, self.guards, self.guard_ops)
        return new

    def enter_loop(self, loop: For) -> _Scope:
        extent, kind = loop.extent, loop.kind
        if extent == 1:
            return self
        new = self._copy()
        new.loops = self.loops + ((loop.var, extent),)
        new.kind = kind
        new.prod = self.prod * extent
        if kind is ForKind.PARALLEL:
            new.parallel = self.parallel or extent
        elif kind is ForKind.VECTORIZED:
            new.lanes = extent
        elif kind is ForKind.UNROLLED:
            new.unr_num += 1
            new.unr_prod = (self.unr_prod or 1) * extent
            new.unr_len = extent
        else:
            new.rolled, new.rolled_at = loop.var, (extent, new.prod)
        return new

    def enter_allocation(self, nbytes: int) -> _Scope:
        new = self._copy()
        new.alloc_bytes += nbytes
        new.alloc_outer = self.prod
        return new

    def enter_guard(self, ops: int) -> _Scope:
        new = self._copy()
        new.guards += 1
        scaled = [count * self.prod for count in _unpack(ops)]
        if self.guard_ops is not None:
            scaled = [a + b for a, b in zip(self.guard_ops, scaled)]
        new.guard_ops = scaled
        return new


# -- 4. the walk and the expression summaries ---------------------------------------------
# Operation counts of an expression packed into one int, _FIELD_BITS per counter, so that a
# node's summary is the sum of its children's plus one unit: a single int addition.
_OPS = tuple(name for name, _ in _ARITHMETIC)
_FIELD_BITS = 24
_MASK = (1 << _FIELD_BITS) - 1
_UNIT = {name: 1 << (_FIELD_BITS * i) for i, name in enumerate(_OPS)}
_FLOAT_ADD, _FLOAT_MUL, _FLOAT_DIV = _UNIT["float_add_sub"], _UNIT["float_mul"], _UNIT["float_div"]
_FLOAT_MAX, _FLOAT_MATH = _UNIT["float_max_min"], _UNIT["float_math"]
_INT_ADD, _INT_MUL, _INT_DIV = _UNIT["int_add_sub"], _UNIT["int_mul"], _UNIT["int_div_mod"]
_INT_CMP, _SELECT = _UNIT["int_cmp"], _UNIT["selects"]
_FLOAT_BINARY = {"+": _FLOAT_ADD, "-": _FLOAT_ADD, "*": _FLOAT_MUL, "/": _FLOAT_DIV,
                 "//": _FLOAT_DIV, "%": _FLOAT_DIV, "max": _FLOAT_MAX, "min": _FLOAT_MAX}
_FLOAT_DTYPES = ("float32", "float64")
_FLOP_FIELDS = tuple(_OPS.index(name) for name in _OPS if name.startswith("float_"))

# An index expression's coefficient of each loop variable (see the module docstring).
Coefficients = dict[str, float]
_NO_COEFFICIENTS: Coefficients = {}
_CONSTANT = (0, _NO_COEFFICIENTS)


def _unpack(packed: int) -> list[int]:
    return [(packed >> (_FIELD_BITS * i)) & _MASK for i in range(len(_OPS))]


_ITEMSIZES = {"float32": 4, "float64": 8}


def _itemsize(dtype: str) -> int:
    return _ITEMSIZES.get(dtype) or np.dtype(dtype).itemsize


class _BufferInfo:
    __slots__ = ("shape", "strides", "itemsize", "nbytes", "local")

    def __init__(self, buffer: Buffer, local: bool) -> None:
        self.shape = buffer.shape
        self.strides = buffer.strides
        self.itemsize = _itemsize(buffer.dtype)
        self.nbytes = buffer.size * self.itemsize
        self.local = local


# The summaries of index expressions, kept across programs: a summary is a function of the
# expression's value alone (expressions are immutable, and equal ones have equal summaries), and
# the candidates of one search share most of their index expressions: about 80% of those a
# program needs were summarised for an earlier candidate, over half of them the very same
# objects, which the lookup finds by identity without comparing trees. Keys are the
# expressions themselves (kept alive by the memo, so no identity is reused); the memo is
# emptied, with the variables' summaries (one per loop name), when it reaches _SUMMARY_LIMIT
# entries, which bounds its memory (about 330 bytes an entry on conv2d, most of the
# expressions being held elsewhere too) and changes no result.
_INDEX_SUMMARIES: dict[Expr, tuple[int, Coefficients]] = {}
_VAR_SUMMARIES: dict[str, tuple[int, Coefficients]] = {}
_SUMMARY_LIMIT = 20_000


def _reset_caches() -> None:
    """Forget every remembered summary (when the memo is full, and for measurements that
    must start cold)."""
    _INDEX_SUMMARIES.clear()
    _VAR_SUMMARIES.clear()


class _Extractor:
    """Features of one program. Index summaries come from and go to the shared memo above,
    through a memo by ``id`` that lives as long as the extractor (the program keeps every
    node alive meanwhile): a program asks for the same index again and again, and an ``id``
    is found without hashing the expression or comparing it with an equal one."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.buffers = {b.name: _BufferInfo(b, local=False) for b in func.params}
        self.index_memo: dict[int, tuple[int, Coefficients]] = {}
        self.rows: list[list[float]] = []

    def run(self) -> list[list[float]]:
        self.visit(self.func.body, _Scope())
        rows = self.rows
        iterations = flops = 0.0
        for row in rows:
            iterations += row[_ITERATIONS]
            flops += row[_FLOPS]
        workspace = float(sum(self.buffers[b.name].nbytes for b in self.func.workspaces))
        program = [iterations, float(len(rows)), flops, workspace]
        for row in rows:
            row.extend(program)
        return rows

    def visit(self, stmt: Stmt, scope: _Scope) -> None:
        handler = _VISIT.get(type(stmt))
        if handler is None:
            raise TypeError(f"not a statement: {stmt!r}")
        handler(self, stmt, scope)

    def visit_for(self, loop: For, scope: _Scope) -> None:
        self.visit(loop.body, scope.enter_loop(loop))

    def visit_store(self, store: Store, scope: _Scope) -> None:
        self.rows.append(self.store(store, scope))

    def visit_seq(self, block: Seq, scope: _Scope) -> None:
        for stmt in block.stmts:
            self.visit(stmt, scope)

    def visit_allocate(self, alloc: Allocate, scope: _Scope) -> None:
        info = _BufferInfo(alloc.buffer, local=True)
        self.buffers[alloc.buffer.name] = info
        self.visit(alloc.body, scope.enter_allocation(info.nbytes))

    def visit_if(self, branch: IfThenElse, scope: _Scope) -> None:
        inner = scope.enter_guard(self.condition(branch.cond))
        self.visit(branch.then_body, inner)
        if branch.else_body is not None:
            self.visit(branch.else_body, inner)

    # Index expressions: (operation counts, coefficients), memoised by value.
    def index(self, e: Expr) -> tuple[int, Coefficients]:
        kind = type(e)
        if kind is Var:  # leaves first: most nodes are leaves, and a name hashes fastest
            found = _VAR_SUMMARIES.get(e.name)
            if found is None:
                found = _VAR_SUMMARIES[e.name] = (0, {e.name: 1})
            return found
        if kind is IntImm:
            return _CONSTANT
        found = self.index_memo.get(id(e))
        if found is None:
            found = _INDEX_SUMMARIES.get(e)
            if found is None:
                found = _INDEX.get(kind, _Extractor.index_other)(self, e)
                if len(_INDEX_SUMMARIES) >= _SUMMARY_LIMIT:
                    _reset_caches()
                _INDEX_SUMMARIES[e] = found
            self.index_memo[id(e)] = found
        return found

    def index_binop(self, e: BinOp) -> tuple[int, Coefficients]:
        rule = _INDEX_OPS.get(e.op)
        if rule is None:  # a comparison or and/or: a condition
            return self.condition(e), _NO_COEFFICIENTS
        unit, coefficients = rule
        # Constant operands without a call: they are a third of the nodes.
        ops_a, a = _CONSTANT if type(e.a) is IntImm else self.index(e.a)
        ops_b, b = _CONSTANT if type(e.b) is IntImm else self.index(e.b)
        return ops_a + ops_b + unit, coefficients(a, b, e)

    def index_neg(self, e: Neg) -> tuple[int, Coefficients]:
        ops, a = self.index(e.a)
        return ops + _INT_ADD, _scale(a, -1)

    def index_other(self, e: Expr) -> tuple[int, Coefficients]:
        """A value where an index was expected: its operations, no coefficients."""
        return self.value(e, []), _NO_COEFFICIENTS

    # Conditions: comparisons of indices joined by and/or/not; operation counts only.
    def condition(self, e: Expr) -> int:
        kind = type(e)
        if kind is BinOp:
            if e.op == "and" or e.op == "or":
                return self.condition(e.a) + self.condition(e.b) + _INT_CMP
            if e.dtype_ == "bool":
                return self.index(e.a)[0] + self.index(e.b)[0] + _INT_CMP
        elif kind is Not:
            return self.condition(e.a) + _INT_CMP
        return self.index(e)[0]

    # Value expressions: operation counts; their loads are appended to ``loads``.
    def value(self, e: Expr, loads: list[Load]) -> int:
        return _VALUE.get(type(e), _Extractor.value_index)(self, e, loads)

    def value_load(self, e: Load, loads: list[Load]) -> int:
        loads.append(e)
        ops = 0
        for index in e.indices:
            ops += self.index(index)[0]
        return ops

    def value_binop(self, e: BinOp, loads: list[Load]) -> int:
        if e.dtype_ not in _FLOAT_DTYPES:
            return self.condition(e)  # an index or a condition used as a value
        return self.value(e.a, loads) + self.value(e.b, loads) + _FLOAT_BINARY[e.op]

    def value_call(self, e: Call, loads: list[Load]) -> int:
        ops = _FLOAT_MATH
        for arg in e.args:
            ops += self.value(arg, loads)
        return ops

    def value_select(self, e: Select, loads: list[Load]) -> int:
        return (self.condition(e.cond) + self.value(e.true_value, loads)
                + self.value(e.false_value, loads) + _SELECT)

    def value_neg(self, e: Neg, loads: list[Load]) -> int:
        return self.value(e.a, loads) + _FLOAT_ADD

    def value_cast(self, e: Cast, loads: list[Load]) -> int:
        return self.index(e.value)[0]

    def value_constant(self, e: FloatImm, loads: list[Load]) -> int:
        return 0

    def value_index(self, e: Expr, loads: list[Load]) -> int:
        return self.index(e)[0]

    # -- 5. one store ---------------------------------------------------------------------
    def store(self, store: Store, scope: _Scope) -> list[float]:
        loads: list[Load] = []
        ops = self.value(store.value, loads)
        for index in store.indices:
            ops += self.index(index)[0]
        per_iter = _unpack(ops)
        iterations = scope.prod
        counts = [float(c * iterations) for c in per_iter]
        if scope.guard_ops is not None:
            counts = [a + b for a, b in zip(counts, scope.guard_ops)]
        flops_per_iter = float(sum(per_iter[i] for i in _FLOP_FIELDS))
        flops = flops_per_iter * iterations

        # The buffers the store touches, the written one first, each with its distinct
        # index tuples (a read of the written element is the same access).
        accesses: dict[str, list[tuple[Expr, ...]]] = {store.buffer: [store.indices]}
        for load in loads:
            seen = accesses.setdefault(load.buffer, [])
            if not any(indices == load.indices for indices in seen):
                seen.append(load.indices)
        read_write = any(load.buffer == store.buffer for load in loads)
        footprint, slots = self.memory(scope.loops, iterations, accesses, scope.rolled)
        rolled_extent, rolled_prod = scope.rolled_at
        unit_stride = rolled_extent > 0 and all(slot[_ROLLED_STRIDE] <= 1 for slot in slots)

        loops = scope.loops
        n = len(loops)
        kind = scope.kind
        innermost = loops[-1][1] if loops else 0
        row = counts + [  # the columns of _STORE_FEATURES after the arithmetic, in order
            flops_per_iter,
            flops,
            float(n),
            float(iterations),
            float(innermost),
            float(kind is ForKind.SERIAL),
            float(kind is ForKind.PARALLEL),
            float(kind is ForKind.VECTORIZED),
            float(kind is ForKind.UNROLLED),
            float(scope.parallel > 0),
            float(scope.parallel),
            float(scope.lanes),
            float(scope.unr_num),
            float(scope.unr_prod),
            float(scope.unr_len),
            float(scope.guards),
            float(rolled_extent),
            float(iterations // rolled_prod) if rolled_extent else 0.0,
            float(unit_stride),
            float(scope.alloc_bytes),
            float(scope.alloc_outer),
            flops_per_iter * (innermost or 1) / footprint[max(n - 1, 0)],
            flops / footprint[0],
            footprint[1] if n else footprint[0],
            _fitting_intensity(loops, flops_per_iter, footprint, L1_BYTES),
            _fitting_intensity(loops, flops_per_iter, footprint, L2_BYTES),
        ]
        row.append(float(read_write))
        row.extend(slots[0])
        names = list(accesses)
        reads = sorted(range(1, len(names)),
                       key=lambda b: (-slots[b][0], -slots[b][1], names[b]))[:READ_SLOTS]
        for b in reads:
            row.extend(slots[b])
        row.extend(_EMPTY_SLOT * (READ_SLOTS - len(reads)))
        return row

    def moved_by(self, index_tuples: list[tuple[Expr, ...]]) -> dict[str, list[tuple[int, float]]]:
        """Each loop variable's (dimension, |coefficient|) pairs in the accesses of one buffer,
        dimensions in order; over several accesses, the largest coefficient."""
        moved_by: dict[str, list[tuple[int, float]]] = {}
        for indices in index_tuples:
            for d, index in enumerate(indices):
                for var, c in self.index(index)[1].items():
                    entry = (d, c if c > 0 else -c)
                    pairs = moved_by.get(var)
                    if pairs is None:
                        moved_by[var] = [entry]
                    else:
                        _merge_pair(pairs, entry)
        return moved_by

    def memory(self, loops: tuple[tuple[str, int], ...], iterations: int,
               accesses: dict[str, list[tuple[Expr, ...]]], rolled: Optional[str]
               ) -> tuple[list[float], list[list[float]]]:
        """(footprint, slots): ``footprint[i]`` is the unique bytes all the store's buffers
        touch while loops ``i`` and deeper run (``footprint[len(loops)]``: one iteration);
        ``slots[b]`` the values of ``_BUFFER_FEATURES`` of the ``b``-th buffer of
        ``accesses``. A buffer's region is worked out again only at the loops that move it."""
        n = len(loops)
        infos = [self.buffers[name] for name in accesses]
        footprint = [0.0] * n + [float(sum(info.itemsize for info in infos))]
        moved = [self.moved_by(index_tuples) for index_tuples in accesses.values()]
        slots = []
        reused_at_levels = []  # for reuse_bytes, once every buffer's footprint is in
        for info, index_tuples, moved_by in zip(infos, accesses.values(), moved):
            shape = info.shape
            spans = [0.0] * len(shape)
            tile, tile_spans = 1.0, [0.0] * len(spans)  # one iteration of the outermost loop
            stride = rolled_stride = 0.0
            repeat = reuse = inner = 1
            found = False
            reused_at = -1
            reuse_iters = reuse_extent = 0.0
            elements = 1.0  # of the region loops i and deeper touch
            for i in range(n - 1, -1, -1):
                var, extent = loops[i]
                pairs = moved_by.get(var)
                if pairs is None:
                    reuse *= extent
                    if reused_at < 0:
                        reused_at, reuse_iters, reuse_extent = i, float(inner), float(extent)
                else:
                    if not found:
                        found = True
                        stride = _step(pairs, info)
                        repeat = inner
                    if var == rolled:
                        rolled_stride = _step(pairs, info)
                    for d, c in pairs:
                        spans[d] += c * (extent - 1)
                    elements = 1.0
                    for span, size in zip(spans, shape):
                        elements *= span + 1.0 if span + 1.0 < size else size
                footprint[i] += elements * info.itemsize
                if i == 1:
                    tile, tile_spans = elements, list(spans)
                inner *= extent
            if not found:
                repeat = inner
            slots.append([
                float(iterations * info.itemsize * len(index_tuples)),
                tile * info.itemsize,
                _cache_lines(tile_spans, info),
                stride,
                float(repeat),
                float(reuse),
                reuse_iters,
                0.0,  # reuse_bytes
                reuse_extent,
                rolled_stride,
                float(info.local),
                float(info.nbytes),
            ])
            reused_at_levels.append(reused_at)
        for slot, reused_at in zip(slots, reused_at_levels):
            if reused_at >= 0:
                slot[_REUSE_BYTES] = footprint[reused_at + 1]
        return footprint, slots


def _fitting_intensity(loops: tuple[tuple[str, int], ...], flops_per_iter: float,
                       footprint: list[float], limit: float) -> float:
    """Flops per unique byte over the outermost loop level whose footprint (``memory``) is at
    most ``limit`` bytes (one iteration's when none is): how much work a cache of that size
    holding the level's region serves. Footprints grow outwards, so the walk stops at the
    first level over the limit."""
    inner = 1
    intensity = flops_per_iter / footprint[len(loops)]
    for i in range(len(loops) - 1, -1, -1):
        inner *= loops[i][1]
        if footprint[i] > limit:
            break
        intensity = flops_per_iter * inner / footprint[i]
    return intensity


def _step(pairs: list[tuple[int, float]], info: _BufferInfo) -> float:
    """Elements an access moves per step of a loop with (dimension, |coefficient|) ``pairs``
    (``moved_by``): the rightmost dimension the loop moves decides."""
    d, c = pairs[-1]
    return c * info.strides[d]


def _merge_pair(pairs: list[tuple[int, float]], entry: tuple[int, float]) -> None:
    """Add (dimension, coefficient) to ``pairs``, keeping one pair per dimension (the
    largest coefficient) in dimension order."""
    d, c = entry
    for k, (dim, old) in enumerate(pairs):
        if dim == d:
            if c > old:
                pairs[k] = entry
            return
        if dim > d:
            pairs.insert(k, entry)
            return
    pairs.append(entry)


def _cache_lines(spans: list[float], info: _BufferInfo) -> float:
    """Cache lines of a box of ``span + 1`` elements per dimension: contiguous runs (the
    innermost dimensions the box covers whole, then the next one) times lines per run."""
    run = 1.0
    runs = 1.0
    whole = True
    for span, size in zip(reversed(spans), reversed(info.shape)):
        extent = min(span + 1.0, size)
        if whole:
            run *= extent
            whole = extent >= size
        else:
            runs *= extent
    return runs * math.ceil(run * info.itemsize / CACHE_LINE_BYTES)


def _combine(a: Coefficients, b: Coefficients, sign: int) -> Coefficients:
    if not b:
        return a
    if not a and sign == 1:
        return b
    out = dict(a)
    for var, c in b.items():
        total = out.get(var, 0) + sign * c
        if total:
            out[var] = total
        else:
            out.pop(var, None)
    return out


def _scale(a: Coefficients, k: float) -> Coefficients:
    if not a or k == 1:
        return a
    if k == 0:
        return _NO_COEFFICIENTS
    return {var: c * k for var, c in a.items()}


def _widest(a: Coefficients, b: Coefficients) -> Coefficients:
    out = {var: abs(c) for var, c in a.items()}
    for var, c in b.items():
        out[var] = max(out.get(var, 0), abs(c))
    return out


def _product(a: Coefficients, b: Coefficients, e: BinOp) -> Coefficients:
    if type(e.b) is IntImm:
        return _scale(a, e.b.value)
    if type(e.a) is IntImm:
        return _scale(b, e.a.value)
    return _combine(a, b, 1)  # a product of variables has no constant step: a guess


def _floor_divide(a: Coefficients, b: Coefficients, e: BinOp) -> Coefficients:
    divisor = e.b.value if type(e.b) is IntImm else 1
    return _scale(a, 1 / divisor) if divisor > 1 else a


# Each statement's and expression's handler, by node type; each index operator's count and
# coefficient rule.
_VISIT = {For: _Extractor.visit_for, Store: _Extractor.visit_store, Seq: _Extractor.visit_seq,
          Allocate: _Extractor.visit_allocate, IfThenElse: _Extractor.visit_if}
_INDEX = {BinOp: _Extractor.index_binop, Neg: _Extractor.index_neg}
_INDEX_OPS = {
    "+": (_INT_ADD, lambda a, b, e: _combine(a, b, 1)),
    "-": (_INT_ADD, lambda a, b, e: _combine(a, b, -1)),
    "*": (_INT_MUL, _product),
    "//": (_INT_DIV, _floor_divide),
    "%": (_INT_DIV, lambda a, b, e: a),  # within a period, x % k steps as x does
    "max": (_INT_CMP, lambda a, b, e: _widest(a, b)),
    "min": (_INT_CMP, lambda a, b, e: _widest(a, b)),
}
_VALUE = {Load: _Extractor.value_load, BinOp: _Extractor.value_binop, Call: _Extractor.value_call,
          Select: _Extractor.value_select, Neg: _Extractor.value_neg, Cast: _Extractor.value_cast,
          FloatImm: _Extractor.value_constant}

_EMPTY_SLOT = [0.0] * len(_BUFFER_FEATURES)
_REUSE_BYTES = [name for name, _ in _BUFFER_FEATURES].index("reuse_bytes")
_ROLLED_STRIDE = [name for name, _ in _BUFFER_FEATURES].index("rolled_stride")
_ITERATIONS = FEATURE_NAMES.index("iterations")
_FLOPS = FEATURE_NAMES.index("flops")

__all__ = ["CACHE_LINE_BYTES", "FEATURES", "FEATURE_NAMES", "FEATURE_VERSION", "READ_SLOTS",
           "batch_per_store_features", "per_store_features"]
