"""What a new user's probe of the tuning commands found (issue 54): outputs that would replace
a command's own inputs or a file the user keeps, figures chosen by a workload's name alone,
plot paths found unwritable only after tuning, decisions repaired without a word, an empty
--db, byte-order marks and Ctrl-C while the modules load.

No test here tunes: a database gets its records from samples of the space with made-up times
(``conftest.record_samples``), and a tune refused before tuning starts no worker."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import record_samples
from metasched import Database, Trace, handwritten, workloads
from metasched.cli import EXIT_INTERRUPTED, EXIT_OK, EXIT_USER_ERROR, main
from metasched.codegen import host_vector_bits
from metasched.lang import parse
from metasched.schedule import Schedule
from metasched.workloads.baselines import numpy_baseline

from test_cli_tune import PARAMS, SIZES, TARGET, assert_one_line_error

# A workload named like a built-in one that computes something else: C = A @ B.T + 1.
IMPOSTOR = """\
workload matmul(M = 32, N = 32, K = 32) {
  input A: float32[M, K]
  input B: float32[N, K]
  C[i, j] += A[i, k] * B[j, k]
  output D[i, j] = C[i, j] + 1.0
}
"""


@pytest.fixture
def db(tmp_path):
    """A database holding records of TARGET at SIZES (made-up times)."""
    path = tmp_path / "run.db"
    with Database(path) as opened:
        assert record_samples(opened, workloads.get(TARGET, **SIZES), count=8) > 0
    return path


def _listing(folder) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


# ---- outputs never replace inputs or kept files (points 1, 2, 7) -------------------------------

def test_a_plot_on_the_database_is_refused_before_tuning(tmp_path, capsys):
    path = tmp_path / "run.png"
    code = main(["tune", TARGET, *PARAMS, "--trials", "4", "--db", str(path), "--plot", str(path)])
    assert code == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "--plot" in err and "--db" in err
    assert not path.exists()  # no database was made, no worker started


def test_a_plot_on_an_existing_database_leaves_every_record(db, capsys):
    before = db.read_bytes()
    code = main(["tune", TARGET, *PARAMS, "--trials", "4", "--db", str(db), "--plot", str(db), "--force"])
    assert code == EXIT_USER_ERROR  # --force replaces other files, never an input
    assert_one_line_error(capsys.readouterr().err)
    assert db.read_bytes() == before


def test_trace_output_on_its_database_is_refused(db, capsys):
    before = _listing(db.parent)
    for output in (db, db.parent / (db.name + "-wal")):
        for force in ([], ["--force"]):
            code = main(["trace", TARGET, *PARAMS, "--db", str(db), "-o", str(output), *force])
            assert code == EXIT_USER_ERROR
            err = capsys.readouterr().err
            assert_one_line_error(err)
            assert "--db" in err
    assert _listing(db.parent) == before


def test_trace_output_on_the_workload_file_is_refused(db, tmp_path, capsys):
    source = tmp_path / "mm.tensor"
    source.write_text(workloads.source(TARGET))
    code = main(["trace", str(source), *PARAMS, "--db", str(db), "-o", str(source), "--force"])
    assert code == EXIT_USER_ERROR
    assert_one_line_error(capsys.readouterr().err)
    assert source.read_text() == workloads.source(TARGET)


def test_trace_output_replaces_an_existing_file_only_with_force(db, tmp_path, capsys):
    kept = tmp_path / "mine.trace"
    kept.write_text("my own edits\n")
    code = main(["trace", TARGET, *PARAMS, "--db", str(db), "-o", str(kept)])
    assert code == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "exists" in err and "--force" in err
    assert kept.read_text() == "my own edits\n"
    assert main(["trace", TARGET, *PARAMS, "--db", str(db), "-o", str(kept), "--force"]) == EXIT_OK
    assert "replaced" in capsys.readouterr().out
    with Database(db) as opened:
        from metasched.tune import host_target
        assert Trace.load(kept) == opened.best(workloads.get(TARGET, **SIZES), host_target()).trace


def test_an_existing_plot_is_replaced_only_with_force(db, tmp_path, capsys):
    curve = tmp_path / "curve.png"
    curve.write_bytes(b"a picture I keep")
    # the budget is spent, so no worker starts; the refusal comes first all the same
    code = main(["tune", TARGET, *PARAMS, "--trials", "1", "--db", str(db), "--plot", str(curve)])
    assert code == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "--force" in err
    assert curve.read_bytes() == b"a picture I keep"


@pytest.mark.parametrize("plot", ["a_folder.png", "/proc/metasched-curve.png"])
def test_an_unwritable_plot_path_is_refused_before_tuning(plot, tmp_path, capsys):
    (tmp_path / "a_folder.png").mkdir()
    path = plot if plot.startswith("/") else str(tmp_path / plot)
    code = main(["tune", TARGET, *PARAMS, "--trials", "4", "--db", str(tmp_path / "new.db"), "--plot", path])
    assert code == EXIT_USER_ERROR
    assert_one_line_error(capsys.readouterr().err)
    assert not (tmp_path / "new.db").exists()  # refused before anything was made


def test_a_plot_that_cannot_be_saved_after_tuning_is_not_success(db, tmp_path, capsys, monkeypatch):
    from metasched.tune import plot

    def fail(result, path):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(plot, "plot_curve", fail)
    code = main(["tune", TARGET, *PARAMS, "--trials", "1", "--db", str(db), "--plot", str(tmp_path / "c.png")])
    assert code == EXIT_USER_ERROR
    assert "No space left on device" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--db", "-o"])
def test_an_empty_path_is_a_user_error(option, db, capsys):
    args = ["trace", TARGET, *PARAMS, "--db", str(db), "-o", "out.trace"]
    args[args.index(option) + 1] = ""
    with pytest.raises(SystemExit) as exited:  # argparse's way out, as for every usage error
        main(args)
    assert exited.value.code == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert option in err and "the path is empty" in err
    assert "write-ahead" not in err


# ---- figures belong to a workload's program, not its name (point 5) ---------------------------

def test_a_workload_named_like_a_built_in_has_no_baseline_and_no_hand_written_schedule():
    impostor = parse(IMPOSTOR)
    assert impostor.name == "matmul" and impostor.key != workloads.get("matmul", **SIZES).key
    assert numpy_baseline(impostor) is None
    assert handwritten.for_workload(impostor, host_vector_bits()) is None
    assert workloads.builtin(impostor) is None
    # the built-in itself, at any sizes and from its own file's text, still has both
    for wl in (workloads.get("matmul", M=8, N=24, K=16), parse(workloads.source("matmul"), M=8)):
        assert workloads.builtin(wl) == "matmul"
        assert numpy_baseline(wl) is not None and handwritten.for_workload(wl) is not None


@pytest.mark.parametrize("command", ["demo", "replay"])
def test_demo_and_replay_of_a_workload_named_like_a_built_in(command, tmp_path, capsys):
    source = tmp_path / "mine.tensor"
    source.write_text(IMPOSTOR)
    trace = tmp_path / "plain.trace"
    Schedule(parse(IMPOSTOR)).trace.save(trace)
    args = ["demo", str(source)] if command == "demo" else ["replay", str(trace), str(source)]
    assert main(args) == EXIT_OK
    out = capsys.readouterr().out
    assert "outputs match the numpy reference" in out
    assert "x numpy" not in out and "relative to numpy" not in out
    assert "no baseline" in out


# ---- the speed reported is the kernel's as Python calls it (point 4) ---------------------------

def test_the_report_gives_the_call_and_the_machine_code_time(db, capsys):
    assert main(["best", TARGET, *PARAMS, "--db", str(db)]) == EXIT_OK
    out = capsys.readouterr().out
    ours = next(line for line in out.splitlines() if line.startswith("metasched:"))
    assert "kernel(*inputs)" in ours and "machine code alone" in ours
    assert re.search(r"speed relative to numpy: \d+\.\d\dx", out), out


# ---- replay says what it repaired (point 10) ---------------------------------------------------

def test_replay_says_which_decision_it_repaired(tmp_path, capsys):
    wl = workloads.get(TARGET, **SIZES)
    sch = Schedule(wl)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=16, decision=[4, 8]))
    text = str(sch.trace).replace("decision=[4, 8]", "decision=[3, 8]")  # 3 x 8 is not 32
    path = tmp_path / "edited.trace"
    path.write_text(text)
    assert main(["replay", str(path), TARGET, *PARAMS]) == EXIT_OK
    out = capsys.readouterr().out
    assert re.search(r"instruction 2 .*decision \[3, 8\].*repaired to \[4, 8\]", out), out


def test_a_trace_file_may_start_with_a_byte_order_mark(tmp_path, capsys):
    wl = workloads.get(TARGET, **SIZES)
    trace = Schedule(wl).trace
    for name, text in (("bom.trace", str(trace)), ("bom.json", __import__("json").dumps(trace.to_json()))):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + text.encode())
        assert Trace.load(path) == trace
        assert main(["replay", str(path), TARGET, *PARAMS]) == EXIT_OK
    assert Trace.parse("\ufeff" + str(trace)) == trace


# ---- Ctrl-C while the modules load (point 11) --------------------------------------------------

# Interrupts this process (a real SIGINT) as soon as numpy starts to load, then runs the
# command as the installed `metasched` script does.
_INTERRUPTED_IMPORT = textwrap.dedent("""\
    import os, signal, sys
    from importlib.metadata import entry_points

    # Ctrl-C as a terminal gives it, whatever the test process passed on (an ignored or
    # blocked SIGINT is inherited across exec: once, in the full suite, it never arrived).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])

    class Interrupt:
        def find_spec(self, name, path=None, target=None):
            if name == "numpy":
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, Interrupt())
    (script,) = entry_points(group="console_scripts", name="metasched")
    sys.exit(script.load()(["workloads"]))
""")


def test_ctrl_c_while_the_modules_load_is_a_message_not_a_traceback():
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == EXIT_INTERRUPTED, done.stderr
    assert done.stderr == "metasched: interrupted\n"
    assert done.stdout == ""


def test_import_metasched_loads_nothing_and_every_public_name_resolves():
    done = subprocess.run([sys.executable, "-c", "import sys, metasched; "
                           "print(sorted(m for m in sys.modules if m.startswith(('metasched.', 'numpy'))))"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout
    import metasched
    for name in metasched.__all__:
        assert getattr(metasched, name) is not None, name
    import metasched.tune.plot  # noqa: F401  (loads the package's tune module)
    import metasched.build  # noqa: F401
    assert callable(metasched.tune) and metasched.tune.__name__ == "tune"  # the functions, not the modules
    assert callable(metasched.build) and metasched.build.__name__ == "build"


def test_the_progress_bar_compares_with_numpy_only_where_a_call_costs_little():
    from metasched.tune import TuneResult, host_target
    from metasched.tune.progress import NUMPY_RATIO_MIN_SECONDS, ProgressBar

    wl = workloads.get("matmul", M=8, N=8, K=8)
    bar = ProgressBar(wl, 4, 0, TuneResult(wl, host_target(), None))
    try:
        bar.numpy = NUMPY_RATIO_MIN_SECONDS / 2
        bar._show(bar.numpy / 4)
        assert "numpy" not in bar.bar.postfix
        bar.numpy = NUMPY_RATIO_MIN_SECONDS * 2
        bar._show(bar.numpy / 4)
        assert "4.00x numpy" in bar.bar.postfix
    finally:
        bar.close()
