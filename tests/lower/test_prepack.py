"""``lower.prepack``: copies of constant inputs taken out of a kernel, made once by a pack
program; the kernel with its packed inputs computes what it computed with its copies (bitwise
where LLVM compiles the two alike; within the tolerance rule over the default space)."""
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from conftest import panel_copy
from metasched.codegen import compile_func
from metasched.errors import ScheduleError
from metasched.ir import Allocate, Buffer, For, ForKind, IfThenElse, Load, PrimFunc, Seq, Store, Var
from metasched.ir.expr import BinOp, FloatImm, IntImm
from metasched.lang import assert_outputs_close, parse
from metasched.lower.prepack import hoist_constant_copies
from metasched.space import cpu_default

DENSE = """workload dense() {
    input X: float32[13, 37]
    input W: float32[37, 24]
    input B: float32[24]
    T[i, j] += X[i, k] * W[k, j] where i in 0..13, j in 0..24, k in 0..37
    output Y[i, j] = max(T[i, j] + B[j], 0.0) where i in 0..13, j in 0..24
}"""

DENSE_TRANSPOSED = DENSE.replace("float32[37, 24]", "float32[24, 37]").replace("W[k, j]", "W[j, k]")

CONV = """workload conv() {
    input X: float32[1, 8, 9, 9]
    input W: float32[16, 8, 3, 3]
    P[n, c, y, x] = (X[n, c, y - 1, x - 1] if y >= 1 and y < 10 and x >= 1 and x < 10 else 0.0) where n in 0..1, c in 0..8, y in 0..11, x in 0..11
    output Y[n, o, y, x] += P[n, c, y + r, x + s] * W[o, c, r, s] where n in 0..1, o in 0..16, y in 0..9, x in 0..9, c in 0..8, r in 0..3, s in 0..3
}"""


def run_both(workload, func, constants):
    """(the outputs of ``func``, those of its hoisted kernel fed by its pack programs, the
    hoisted result) on the same random inputs."""
    prepacked = hoist_constant_copies(func, constants)
    inputs = workload.random_inputs(seed=3)
    names = [b.name for b in func.inputs]
    packed = []
    for packing in prepacked.packings:
        out = np.zeros(packing.packed.shape, np.float32)
        compile_func(packing.func).run(*[inputs[names.index(s)] for s in packing.sources], out)
        packed.append(out)
    return compile_func(func)(*inputs), compile_func(prepacked.kernel)(*inputs, *packed), prepacked, packed


def _all(stmt):
    yield stmt
    for attr in ("body", "then_body", "else_body"):
        if getattr(stmt, attr, None) is not None:
            yield from _all(getattr(stmt, attr))
    for inner in getattr(stmt, "stmts", ()):
        yield from _all(inner)


def stores(func, name=None):
    return [s for s in _all(func.body) if isinstance(s, Store) and name in (None, s.buffer)]


def test_a_panel_copy_of_a_weight_is_made_once_and_the_kernel_reads_the_panels():
    workload = parse(DENSE)
    func = panel_copy(workload).lower()
    ours, hoisted, prepacked, (panels,) = run_both(workload, func, ["W"])
    assert all(np.array_equal(a, b) for a, b in zip(ours, hoisted))
    (packing,) = prepacked.packings
    assert packing.sources == ("W",) and packing.packed.shape == (3, 37, 8)
    w = workload.random_inputs(seed=3)[1]
    np.testing.assert_array_equal(panels, w.reshape(37, 3, 8).transpose(1, 0, 2))  # panel j0: W[:, 8 j0 ...]
    kernel = prepacked.kernel
    assert [b.name for b in kernel.inputs] == ["X", "W", "B", packing.packed.name]
    assert not stores(kernel, "W_global")  # the kernel copies nothing any more
    assert not any(isinstance(node, Allocate) and node.buffer.name == "W_global" for node in _all(kernel.body))


def test_copies_of_inputs_given_at_run_time_stay_in_the_kernel():
    func = panel_copy(parse(DENSE)).lower()
    assert hoist_constant_copies(func, ["X", "B"]).kernel is func  # W is not among the constants
    assert hoist_constant_copies(func, []).packings == ()


def _copy_func(after_loop_read: bool = False, guard_on_other_loop: bool = False, in_else: bool = False,
               rewritten: bool = False) -> PrimFunc:
    """for i in 4: { G[j] = W[i, j] for j in 8;  Y[i, j] = G[j] * 2 for j in 8 } (+ variants)."""
    w, g, y = Buffer("W", (4, 8), "float32"), Buffer("G", (8,), "float32"), Buffer("Y", (4, 8), "float32")
    i, j = Var("i"), Var("j")
    copy = For("j", 8, ForKind.SERIAL, Store("G", (j,), Load("W", (i, j))))
    use = For("j", 8, ForKind.SERIAL, Store("Y", (i, j), BinOp("*", Load("G", (j,)), Load("W", (i, j)))))
    body = Seq((copy, use))
    if rewritten:  # another statement writes the copy's buffer after it: it must stay
        body = Seq((copy, Store("G", (IntImm(0),), FloatImm(1.0)), use))
    if in_else:  # rows 0 and 1 doubled without the copy, the others through it
        twice = For("j", 8, ForKind.SERIAL, Store("Y", (i, j), BinOp("*", Load("W", (i, j)), FloatImm(2.0))))
        body = IfThenElse(BinOp("<", i, IntImm(2)), twice, body)
    if guard_on_other_loop:
        body = For("t", 2, ForKind.SERIAL, IfThenElse(BinOp("<", Var("t"), IntImm(1)), body))
    body = For("i", 4, ForKind.SERIAL, body)
    if after_loop_read:  # reads what the last iteration copied: G must stay one buffer
        body = Seq((body, For("j", 8, ForKind.SERIAL, Store("Y", (IntImm(0), j), Load("G", (j,))))))
    return PrimFunc("f", (w,), (y,), (g,), body)


def test_a_hand_made_copy_is_hoisted_and_one_read_outside_its_sequence_is_refused():
    func = _copy_func()
    prepacked = hoist_constant_copies(func, ["W"])
    (packing,) = prepacked.packings
    assert packing.packed.shape == (4, 8) and prepacked.kernel.workspaces == ()
    w = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    packed = np.zeros((4, 8), np.float32)
    compile_func(packing.func).run(w, packed)
    np.testing.assert_array_equal(packed, w)
    np.testing.assert_array_equal(compile_func(prepacked.kernel)(w, packed)[0], compile_func(func)(w)[0])
    assert hoist_constant_copies(_copy_func(after_loop_read=True), ["W"]).packings == ()
    assert hoist_constant_copies(_copy_func(rewritten=True), ["W"]).packings == ()
    in_else = _copy_func(in_else=True)
    (packing,) = hoist_constant_copies(in_else, ["W"]).packings  # made under the negated guard
    packed = np.zeros((4, 8), np.float32)
    compile_func(packing.func).run(w, packed)
    np.testing.assert_array_equal(packed[2:], w[2:])
    np.testing.assert_array_equal(packed[:2], 0.0)
    kernel = hoist_constant_copies(in_else, ["W"]).kernel
    np.testing.assert_array_equal(compile_func(kernel)(w, packed)[0], compile_func(in_else)(w)[0])
    assert hoist_constant_copies(_copy_func(guard_on_other_loop=True), ["W"]).packings == ()


@pytest.mark.parametrize("text", [DENSE, DENSE_TRANSPOSED, CONV], ids=["dense", "dense_transposed", "conv"])
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**20))
@example(seed=397998)  # dense: LLVM fused its multiply-adds differently in the two (1 ulp apart)
def test_kernels_of_the_default_space_compute_the_same_with_their_weights_packed(text, seed):
    """The same results within the tolerance rule, not bitwise: reading the weights from a
    buffer the kernel made or from one it is given, LLVM may fuse a multiply and an add into
    an FMA in one and not in the other (``codegen.ops.FLOAT_FLAGS``)."""
    workload = parse(text)
    try:
        sch = cpu_default().sample(workload, rng=seed)
    except ScheduleError:
        assume(False)
    func = sch.lower()
    prepacked = hoist_constant_copies(func, ["W"])
    assume(prepacked.packings)
    ours, hoisted, _, _ = run_both(workload, func, ["W"])
    want = workload.reference(*workload.random_inputs(seed=3))
    assert_outputs_close(workload, ours, want)
    assert_outputs_close(workload, hoisted, want)
    assert_outputs_close(workload, hoisted, ours)
    assert len(stores(prepacked.kernel)) < len(stores(func))  # a copy left the kernel
