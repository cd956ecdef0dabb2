"""The command line: every subcommand, and errors as one-line messages with exit code 2.

User errors run ``metasched`` in a subprocess, as a user does, so that a traceback printed
anywhere (even at interpreter exit) fails the test. Starting Python costs about half a second,
so ``_RUNS`` starts all of them at once and each case reads its own result."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from metasched import cli
from metasched.cli import main
from metasched.lang import Workload

METASCHED = [sys.executable, "-m", "metasched.cli"]
SMALL_MATMUL = ["-p", "M=4", "-p", "N=3", "-p", "K=2"]
TWO_WORKLOADS = """\
workload scale(N = 10) {
  input X: float32[N]
  output Y[i] = X[i] * 2.0
}
workload double(N = 10) {
  input X: float32[N]
  output Y[i] = X[i] + X[i]
}
"""

# case: (arguments, exit code, what stderr (for 2) or stdout (for 0) must contain). They run
# in a folder holding matmul/ (a folder that must not shadow the built-in matmul), plain/,
# bom.tensor (UTF-8 with a byte-order mark) and latin1.tensor (not UTF-8).
CASES = {
    "missing file": (["show", "missing.tensor"], 2, "missing.tensor"),
    "folder as a path": (["check", "matmul/"], 2, "matmul/"),
    "folder, no such built-in": (["show", "plain"], 2, "the built-in workloads are: batch_matmul,"),
    "unknown name": (["demo", "nosuch"], 2, "'nosuch' is not a file and no built-in workload"),
    "not UTF-8": (["show", "latin1.tensor"], 2, "latin1.tensor"),
    "negative seed": (["check", "matmul", "--seed", "-1"], 2, "--seed"),
    "param not an int": (["show", "matmul", "-p", "M=abc"], 2, "'abc' is not an integer"),
    "param without value": (["show", "matmul", "-p", "M"], 2, "NAME=INT"),
    "param without name": (["show", "matmul", "-p", "=3"], 2, "NAME=INT"),
    "param an expression": (["show", "matmul", "-p", "M=10**21"], 2, "'10**21' is not an integer"),
    "param beyond int64": (["show", "matmul", "-p", "M=1000000000000000000000"], 2, "M"),
    "param negative": (["show", "matmul", "-p", "M=-3"], 2, "at least 1"),
    "too big for memory": (["check", "matmul", "-p", "M=1000000000000"], 2, "for its tensors; this machine has"),
    "byte-order mark": (["show", "bom.tensor"], 0, "def scale("),
    "folder shadowing a built-in": (["show", "matmul", *SMALL_MATMUL], 0, "def matmul("),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("cli")
    (folder / "matmul").mkdir()
    (folder / "plain").mkdir()
    text = TWO_WORKLOADS.split("workload double")[0]
    (folder / "bom.tensor").write_bytes(b"\xef\xbb\xbf" + text.encode())
    (folder / "latin1.tensor").write_bytes(text.replace("{", "{ # caf\xe9").encode("latin-1"))
    started = {case: subprocess.Popen([*METASCHED, *argv], cwd=folder, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
               for case, (argv, _, _) in CASES.items()}
    done = {}
    for case, process in started.items():
        out, err = process.communicate(timeout=300)
        done[case] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    return done


def assert_one_line_error(stderr: str) -> None:
    assert "Traceback" not in stderr
    lines = stderr.rstrip("\n").split("\n")
    assert lines[0].startswith("metasched: "), stderr
    # a parse error may show the offending line and a caret under the column
    assert len(lines) == 1 or (len(lines) == 3 and lines[2].strip() == "^"), stderr


@pytest.mark.parametrize("case", CASES)
def test_user_errors_are_one_line_and_exit_2(case, runs):
    _, code, fragment = CASES[case]
    done = runs[case]
    assert done.returncode == code, done.stderr
    if code == 0:
        assert fragment in done.stdout and done.stderr == ""
    else:
        assert_one_line_error(done.stderr)
        assert fragment in done.stderr


def test_a_reader_that_goes_away_ends_the_output_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before metasched writes a byte: its first write fails with EPIPE
    try:
        done = subprocess.run([*METASCHED, "workloads"], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (cli.EXIT_BROKEN_PIPE, "")


def test_runs_as_a_module():
    done = subprocess.run([sys.executable, "-m", "metasched", "workloads"], capture_output=True, text=True)
    assert done.returncode == 0 and "transpose_add" in done.stdout


def test_workloads_lists_the_suite(capsys):
    assert main(["workloads"]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out and "conv2d_bias_relu" in out and "GFLOP" in out


def test_show_prints_the_loop_program(capsys):
    assert main(["show", "matmul", *SMALL_MATMUL]) == 0
    assert "def matmul(A: float32[4, 2], B: float32[2, 3], C: float32[4, 3]):" in capsys.readouterr().out


def test_show_allocates_nothing_so_any_size_shows(capsys):
    assert main(["show", "matmul", "-p", "M=1000000000"]) == 0
    assert "float32[1000000000, 512]" in capsys.readouterr().out


def test_help_says_the_exit_codes_and_what_a_target_is(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["check", "--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0
    assert "exit codes:" in out and "ends with .tensor" in out


def test_check_a_file(tmp_path, capsys):
    path = tmp_path / "scale.tensor"
    path.write_text(TWO_WORKLOADS)
    assert main(["check", str(path), "--name", "scale", "--seed", "3"]) == 0
    assert "matches the reference" in capsys.readouterr().out


def test_demo_schedules_checks_and_times(capsys):
    assert main(["demo", "matmul", "-p", "M=64", "-p", "N=64", "-p", "K=64"]) == 0
    out = capsys.readouterr().out
    assert "hand-written schedule" in out
    assert "outputs match the numpy reference" in out
    assert "speed relative to numpy" in out


def test_demo_picks_a_workload_of_a_file_and_says_it_runs_it_unscheduled(tmp_path, capsys):
    path = tmp_path / "two.tensor"
    path.write_text(TWO_WORKLOADS)
    assert main(["demo", str(path), "--name", "double", "-p", "N=64"]) == 0
    out = capsys.readouterr().out
    assert "no hand-written schedule for double: running the unscheduled program" in out
    assert "outputs match the numpy reference" in out and "numpy:     no baseline for double" in out


def test_parse_errors_are_messages_not_tracebacks(tmp_path, capsys):
    path = tmp_path / "bad.tensor"
    path.write_text("workload bad(N = 4) {\n  input X: float32[N]\n  output Y[i] = Z[i]\n}\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "bad.tensor:3:" in err
    assert_one_line_error(err)


@pytest.mark.parametrize("args", [["show", "matmul", "-p", "Q=3"], ["show", "matmul", "--name", "softmax"]])
def test_wrong_names_are_messages(args, capsys):
    assert main(args) == 2
    assert_one_line_error(capsys.readouterr().err)


def test_sizes_beyond_the_memory_available_are_refused_before_allocating(monkeypatch, capsys):
    monkeypatch.setattr(cli, "available_memory", lambda: 2**20)
    monkeypatch.setattr(Workload, "random_inputs", lambda *a, **k: pytest.fail("allocated"))
    assert main(["check", "matmul", "-p", "N=1024"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"metasched: matmul\(M=512, N=1024, K=512\) needs \d+\.\d MiB for its "
                        r"tensors; this machine has 1\.0 MiB available\n", err), err


def test_needed_bytes_counts_inputs_outputs_and_the_reference():
    wl = cli.workloads.get("softmax", M=8, N=16)
    # every tensor at its dtype, and at least X and Y again in the reference's float64
    assert cli.needed_bytes(wl) >= wl.nbytes + 2 * 8 * (8 * 16)
    assert cli.available_memory() > 0


def test_an_allocation_that_fails_anyway_is_a_message(monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise MemoryError("Unable to allocate 3.73 TiB for an array with shape (1000000000, 512)")
    monkeypatch.setattr(Workload, "random_inputs", fail)
    assert main(["check", "matmul", *SMALL_MATMUL]) == 2
    assert capsys.readouterr().err == "metasched: out of memory: Unable to allocate 3.73 TiB for an array with shape (1000000000, 512)\n"


def test_a_kernel_that_differs_from_the_reference_exits_1(monkeypatch, capsys):
    monkeypatch.setattr(cli, "build", lambda wl: lambda *inputs: [np.full(t.shape, 7, t.dtype) for t in wl.outputs])
    assert main(["check", "matmul", *SMALL_MATMUL]) == cli.EXIT_MISMATCH
    assert "differs from the reference" in capsys.readouterr().err


def test_ctrl_c_is_a_message(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_cmd_workloads", interrupted)
    assert main(["workloads"]) == cli.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "metasched: interrupted\n"
