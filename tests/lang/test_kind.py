"""``Workload.kind``: what sort of computation a workload is, whatever its sizes and names."""
from metasched import workloads
from metasched.lang import parse


def test_one_kind_whatever_the_sizes_the_names_and_the_element_wise_stages():
    matmul = workloads.get("matmul_relu")
    assert matmul.kind == "float32 sum(t0[r0, s1] * t1[s0, r0])"
    assert workloads.get("matmul_relu", M=64, N=128, K=32).kind == matmul.kind
    assert workloads.get("dense_bias_relu").kind == matmul.kind  # a bias and a ReLU around it
    assert workloads.get("matmul").kind == matmul.kind
    conv = workloads.get("conv2d_bias_relu")
    assert workloads.get("conv2d_bias_relu", C=128, F=128, H=28, W=28).kind == conv.kind


def test_the_kinds_of_the_suite_differ():
    names = ["matmul_relu", "conv2d_bias_relu", "depthwise_conv2d", "batch_matmul", "softmax", "layernorm",
             "reduce_cols", "transpose_add"]
    kinds = [workloads.get(name).kind for name in names]
    assert len(set(kinds)) == len(kinds), kinds
    assert workloads.get("softmax").kind == "float32 max(t0[s0, r0]); sum(t0[s0, r0])"
    assert workloads.get("transpose_add").kind == "float32 t0[s0, s1] + t1[s1, s0]"  # no reduction: all


def test_axes_named_otherwise_and_sums_written_in_another_order_are_one_kind():
    conv = parse("""
        workload conv(N = 1, C = 8, H = 10, W = 10, F = 4) {
            input X: float32[N, C, H + 2, W + 2]
            input K: float32[F, C, 3, 3]
            output O[b, o, row, col] += X[b, ci, kr + row, col + kc] * K[o, ci, kr, kc]
                where row in 0..H, col in 0..W, kr in 0..3, kc in 0..3
        }""")
    assert conv.kind == workloads.get("conv2d_bias_relu").kind


def test_the_layout_read_and_the_dtype_tell_kinds_apart():
    def matmul(b_type: str, b_index: str, dtype: str = "float32") -> str:
        return parse(f"""
            workload m(M = 8, N = 8, K = 8) {{
                input A: {dtype}[M, K]
                input B: {dtype}[{b_type}]
                output C[i, j] += A[i, k] * B[{b_index}]
            }}""").kind

    assert matmul("K, N", "k, j") == workloads.get("matmul").kind
    assert matmul("N, K", "j, k") == "float32 sum(t0[s0, r0] * t1[s1, r0])"
    assert matmul("K, N", "k, j", "float64") == "float64 sum(t0[r0, s1] * t1[s0, r0])"


def test_the_operands_of_a_product_or_a_sum_in_either_order_are_one_kind():
    def dense(body: str) -> str:
        return parse(f"""
            workload d(M = 8, N = 8, K = 8) {{
                input X: float32[M, K]
                input W: float32[K, N]
                input Y0: float32[M, N]
                output Y[i, j] += {body}
            }}""").kind

    assert dense("W[k, j] * X[i, k]") == dense("X[i, k] * W[k, j]") == workloads.get("matmul").kind
    assert dense("Y0[i, j] + X[i, k] * W[k, j]") == dense("W[k, j] * X[i, k] + Y0[i, j]")
    assert dense("X[i, k] - W[k, j]") != dense("W[k, j] - X[i, k]")  # not commutative
