"""The command line: every subcommand, and errors as messages with exit code 2."""
import subprocess
import sys

import pytest

from metasched.cli import main


def test_workloads_lists_the_suite(capsys):
    assert main(["workloads"]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out and "conv2d_bias_relu" in out and "GFLOP" in out


def test_show_prints_the_loop_program(capsys):
    assert main(["show", "matmul", "-p", "M=4", "-p", "N=3", "-p", "K=2"]) == 0
    assert "def matmul(A: float32[4, 2], B: float32[2, 3], C: float32[4, 3]):" in capsys.readouterr().out


def test_check_a_file(tmp_path, capsys):
    path = tmp_path / "scale.tensor"
    path.write_text("workload scale(N = 10) {\n  input X: float32[N]\n  output Y[i] = X[i] * 2.0\n}\n")
    assert main(["check", str(path)]) == 0
    assert "matches the reference" in capsys.readouterr().out


def test_demo_schedules_checks_and_times(capsys):
    assert main(["demo", "matmul", "-p", "M=64", "-p", "N=64", "-p", "K=64"]) == 0
    out = capsys.readouterr().out
    assert "outputs match the numpy reference" in out
    assert "speed relative to numpy" in out


def test_parse_errors_are_messages_not_tracebacks(tmp_path, capsys):
    path = tmp_path / "bad.tensor"
    path.write_text("workload bad(N = 4) {\n  input X: float32[N]\n  output Y[i] = Z[i]\n}\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "bad.tensor:3:" in err and "Traceback" not in err


@pytest.mark.parametrize("args", [["show", "nosuchworkload"], ["show", "matmul", "-p", "Q=3"]])
def test_unknown_names_are_messages(args, capsys):
    assert main(args) == 2
    assert "metasched:" in capsys.readouterr().err


def test_bad_param_syntax_is_a_usage_error():
    with pytest.raises(SystemExit, match="NAME=INT"):
        main(["show", "matmul", "-p", "M"])


def test_runs_as_a_module():
    done = subprocess.run([sys.executable, "-m", "metasched", "workloads"], capture_output=True, text=True)
    assert done.returncode == 0 and "transpose_add" in done.stdout
