"""Lowering: where guards and reduction initialisation go in the loop program."""
import metasched
from metasched import Schedule
from metasched.ir import For, ForKind, Seq
from metasched.lower import lower

SUM_ROWS = """
workload rows(M = 10, N = 6) {
    input X: float32[M, N]
    output S[i] += X[i, j]
}
"""


def stripped(sch):
    return [line.strip() for line in str(sch).splitlines()]


def test_unscheduled_program_has_one_nest_per_statement_in_order():
    wl = metasched.workloads.get("matmul_relu", M=4, N=4, K=4)
    func = lower(Schedule(wl)._state)
    assert [b.name for b in func.inputs] == ["A", "B"]
    assert [b.name for b in func.outputs] == ["D"]
    assert [b.name for b in func.workspaces] == ["C"]
    assert isinstance(func.body, Seq) and len(func.body.stmts) == 2
    assert all(isinstance(s, For) and s.kind is ForKind.SERIAL for s in func.body.stmts)


def test_guard_sits_inside_the_innermost_loop_it_reads_not_at_the_store():
    sch = Schedule(metasched.parse(SUM_ROWS))
    i, j = sch.get_loops(sch.get_block("S"))
    sch.split(i, [None, 4])  # 12 > 10: guarded by i_0 * 4 + i_1 < 10
    lines = stripped(sch)
    guard = lines.index("if i_0 * 4 + i_1 < 10:")
    assert lines[guard - 1] == "for i_1 in range(4):"
    assert lines[guard + 1] == "S[i_0 * 4 + i_1] = 0.0"  # the init is guarded as well
    assert lines.count("if i_0 * 4 + i_1 < 10:") == 1  # one guard serves init and update


def test_init_nest_repeats_spatial_guards_below_the_first_reduction_loop():
    sch = Schedule(metasched.parse(SUM_ROWS))
    i, j = sch.get_loops(sch.get_block("S"))
    i0, i1 = sch.split(i, [None, 4])
    sch.reorder(j, i1)  # i_0, j, i_1: the spatial i_1 is inside the reduction loop j
    lines = stripped(sch)
    assert lines == [
        "def rows(X: float32[10, 6], S: float32[10]):",
        "for i_0 in range(3):",
        "for i_1 in range(4):",
        "if i_0 * 4 + i_1 < 10:",
        "S[i_0 * 4 + i_1] = 0.0",
        "for j in range(6):",
        "for i_1 in range(4):",
        "if i_0 * 4 + i_1 < 10:",
        "S[i_0 * 4 + i_1] = S[i_0 * 4 + i_1] + X[i_0 * 4 + i_1, j]",
    ]


def test_a_reduction_loop_split_guards_only_the_update():
    sch = Schedule(metasched.parse(SUM_ROWS))
    i, j = sch.get_loops(sch.get_block("S"))
    sch.split(j, [None, 4])  # 2 * 4 = 8 > 6
    lines = stripped(sch)
    assert lines.index("S[i] = 0.0") < lines.index("for j_0 in range(2):")
    assert "if j_0 * 4 + j_1 < 6:" in lines


def test_fused_loops_are_recovered_with_floor_division_and_modulo():
    wl = metasched.workloads.get("transpose_add", M=3, N=5)
    sch = Schedule(wl)
    i, j = sch.get_loops(sch.get_block("C"))
    sch.fuse(i, j)
    assert "C[i_j_fused // 5, i_j_fused % 5] = A[i_j_fused // 5, i_j_fused % 5] + B[i_j_fused % 5, i_j_fused // 5]" \
        in stripped(sch)


def test_schedule_lowers_once_per_state_and_follows_every_primitive():
    # ``Schedule.lower`` keeps the program it made; a kind-only primitive (parallel,
    # vectorize, unroll) updates it in place of a new lowering, any other forgets it.
    import numpy as np

    from metasched.space import cpu_default
    space = cpu_default()
    for name in ("matmul_relu", "conv2d_bias_relu", "softmax"):
        wl = metasched.workloads.get(name)
        rng = np.random.default_rng(1)
        for _ in range(5):
            sch = space.sample(wl, rng)
            assert str(sch.lower()) == str(lower(sch._state))
            assert sch.lower() is sch.lower()
    sch = Schedule(metasched.workloads.get("matmul_relu", M=8, N=8, K=8))
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    before = sch.lower()
    sch.parallel(i)
    assert str(sch.lower()) == str(lower(sch._state)) != str(before)
    copy = sch.copy()
    j0, j1 = sch.split(j, [None, 4])
    sch.vectorize(j1)
    sch.unroll(k)
    assert str(sch.lower()) == str(lower(sch._state))
    assert str(copy.lower()) == str(lower(copy._state)) != str(sch.lower())
