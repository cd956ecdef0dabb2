"""The tuning commands of the command line, end to end: ``tune``, ``best``, ``trace``,
``replay`` and ``history``.

Tuning starts worker processes (about a second each run), so one small database is tuned once
per module, through a real ``python -m metasched`` subprocess as a user runs it, and every test
that changes a database works on a copy of it."""
import json
import re
import sqlite3
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import metasched
from conftest import record_samples
from metasched import Database, Trace, workloads
from metasched.cli import EXIT_OK, EXIT_USER_ERROR, main
from metasched.database import Target, program_key
from metasched.schedule import Schedule
from metasched.search import ReplaySearch, SearchContext
from metasched.space import cpu_default
from metasched.tune import host_target, warm_start

METASCHED = [sys.executable, "-m", "metasched"]
TARGET = "matmul_relu"
SIZES = dict(M=32, N=32, K=32)
PARAMS = [arg for name, value in SIZES.items() for arg in ("-p", f"{name}={value}")]
TRIALS = 4
SEED = 1
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SCALE = """\
workload scale(N = 16) {
  input X: float32[N]
  output Y[i] = X[i] * 2.0
}
"""


# ---- helpers ----------------------------------------------------------------------------------

def assert_one_line_error(stderr: str) -> None:
    """One line ``metasched: ...``; a parse error may add the offending line and a caret."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.rstrip("\n").split("\n")
    assert lines[0].startswith("metasched: "), stderr
    assert len(lines) == 1 or (len(lines) == 3 and lines[2].strip() == "^"), stderr


def block_after(out: str, header: str) -> str:
    """The lines after the first line starting with ``header``, up to the next blank line."""
    lines = out.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    block = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        block.append(line)
    assert block, f"nothing after {header!r}:\n{out}"
    return "\n".join(block)


def header_line(out: str, header: str) -> str:
    return next(line for line in out.split("\n") if line.startswith(header))


def count(pattern: str, out: str) -> int:
    match = re.search(pattern, out)
    assert match, f"{pattern!r} not in:\n{out}"
    return int(match.group(1))


def copy_db(source, destination) -> str:
    """A consistent copy of a (WAL-mode) SQLite database, through SQLite's backup API."""
    src, dst = sqlite3.connect(source), sqlite3.connect(destination)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return str(destination)


def best_record(path, wl):
    with Database(path) as db:
        return db.best(wl, host_target())


def first_proposals(wl, seed: int, n: int) -> list[str]:
    """The program keys random (replay) search proposes first for ``seed``."""
    search = ReplaySearch()
    search.start(SearchContext(wl, cpu_default(), np.random.default_rng(seed)))
    return [program_key(s.trace) for s in search.propose(n)]


# ---- the one tuning run, in a subprocess ------------------------------------------------------

@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """``metasched tune`` run once as a user runs it; its database, curve and output."""
    folder = tmp_path_factory.mktemp("tuned")
    db, curve = folder / "tuned.db", folder / "curve.png"
    done = subprocess.run([*METASCHED, "tune", TARGET, *PARAMS, "--trials", str(TRIALS), "--db", str(db),
                           "--seed", str(SEED), "--plot", str(curve), "--strategy", "replay"],
                          cwd=folder, capture_output=True, text=True, timeout=300)
    return SimpleNamespace(db=db, curve=curve, done=done, wl=workloads.get(TARGET, **SIZES), folder=folder)


def test_the_default_evolutionary_search_says_what_each_round_did(tmp_path):
    done = subprocess.run([*METASCHED, "tune", TARGET, *PARAMS, "--trials", "4", "--db", str(tmp_path / "e.db")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == EXIT_OK, done.stderr
    assert "round 1: generated" in done.stderr and "scored" in done.stderr and "model accuracy" in done.stderr
    with Database(tmp_path / "e.db") as db:
        assert len(db.records(workloads.get(TARGET, **SIZES))) == 4


def test_tune_in_a_subprocess_records_its_trials_and_prints_the_best(tuned):
    done, wl = tuned.done, tuned.wl
    assert done.returncode == EXIT_OK, done.stderr
    assert "Traceback" not in done.stderr
    with Database(tuned.db) as db:
        records = db.records(wl)
        best = db.best(wl, host_target())
    assert len(records) == TRIALS
    assert all(r.target.compatible(host_target()) for r in records)
    # --seed reaches the search: the records are the first proposals of that seed, in order
    assert [r.program for r in records] == first_proposals(wl, SEED, TRIALS)
    assert count(r"(\d+) new trials", done.stdout) == TRIALS
    assert count(r"(\d+) earlier ones", done.stdout) == 0
    # the printed best parses back, and it is the database's best
    assert best is not None
    assert Trace.parse(block_after(done.stdout, "# best trace")) == best.trace
    assert f"record {best.id}," in header_line(done.stdout, "# best trace")
    assert "outputs match the numpy reference" in done.stdout
    assert re.search(r"speed relative to numpy: \d+\.\d\dx", done.stdout), done.stdout


def test_tune_plot_writes_a_png(tuned):
    assert tuned.done.returncode == EXIT_OK, tuned.done.stderr
    data = tuned.curve.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000


# ---- tune again -------------------------------------------------------------------------------

def test_tune_again_with_the_same_budget_measures_nothing_and_prints_the_best(tuned, tmp_path, capsys):
    db = copy_db(tuned.db, tmp_path / "copy.db")
    before = best_record(db, tuned.wl)
    assert main(["tune", TARGET, *PARAMS, "--trials", str(TRIALS), "--db", db]) == EXIT_OK
    out = capsys.readouterr().out
    assert count(r"(\d+) new trials", out) == 0
    assert count(r"(\d+) earlier ones", out) == TRIALS
    with Database(db) as opened:
        assert len(opened.records(tuned.wl)) == TRIALS
    assert Trace.parse(block_after(out, "# best trace")) == before.trace
    assert "speed relative to numpy" in out


@pytest.mark.slow
def test_tune_with_a_larger_budget_adds_exactly_the_difference(tuned, tmp_path, capsys):
    db = copy_db(tuned.db, tmp_path / "copy.db")
    more = TRIALS + 2
    assert main(["tune", TARGET, *PARAMS, "--trials", str(more), "--db", db, "--seed", str(SEED)]) == EXIT_OK
    out = capsys.readouterr().out
    assert count(r"(\d+) new trials", out) == more - TRIALS
    assert count(r"(\d+) earlier ones", out) == TRIALS
    with Database(db) as opened:
        records = opened.records(tuned.wl)
        best = opened.best(tuned.wl, host_target())
    assert len(records) == more
    assert len({r.program for r in records}) == more  # nothing measured twice
    assert Trace.parse(block_after(out, "# best trace")) == best.trace


# ---- tune --warm-start ------------------------------------------------------------------------

OTHER, OTHER_PARAMS = "dense_bias_relu", ["-p", "M=16", "-p", "K=32", "-p", "N=32"]


def test_tune_warm_starts_the_model_on_another_workloads_records(tuned, tmp_path, capsys):
    db = copy_db(tuned.db, tmp_path / "copy.db")
    code = main(["tune", OTHER, *OTHER_PARAMS, "--trials", "2", "--db", db, "--warm-start", TARGET])
    err = capsys.readouterr().err  # where the progress bar and its notes go
    assert code == EXIT_OK
    # the fixture's four records: fewer than the model learns from, and it says so
    assert f"cost model warm-started on {TRIALS} records of matmul_relu(M=32, N=32, K=32) (too few" in err
    with Database(db) as opened:
        assert len(opened.records(workloads.get(OTHER, M=16, K=32, N=32))) == 2
        assert len(opened.records(tuned.wl)) == TRIALS  # read, not changed


def sampled_records(path: str, wl) -> int:
    with Database(path) as opened:
        return record_samples(opened, wl)


def test_tune_warm_started_on_enough_records_learns_from_them(tmp_path, capsys):
    db = str(tmp_path / "warm.db")
    count = sampled_records(db, workloads.get(TARGET, M=16, N=32, K=16))
    assert count >= 16  # MIN_TRAINING_PROGRAMS: enough to learn from
    code = main(["tune", OTHER, *OTHER_PARAMS, "--trials", "2", "--db", db, "--warm-start", TARGET])
    err = capsys.readouterr().err
    assert code == EXIT_OK
    assert f"cost model warm-started on {count} records of matmul_relu(M=16, N=32, K=16)\n" in err


def test_tune_warm_starts_by_itself_on_a_workload_of_its_kind_unless_told_not_to(tmp_path, capsys, monkeypatch):
    db = str(tmp_path / "warm.db")
    count = sampled_records(db, workloads.get(TARGET, M=16, N=32, K=16))
    monkeypatch.setattr(warm_start, "WARM_MIN_RECORDS", count)  # a default run's 64 trials are more
    sampled_records(db, workloads.get("reduce_cols", M=64, N=64))  # another kind: never taken
    assert main(["tune", OTHER, *OTHER_PARAMS, "--trials", "2", "--db", db]) == EXIT_OK
    err = capsys.readouterr().err
    assert (f"cost model warm-started on {count} records of matmul_relu(M=16, N=32, K=16), "
            f"a workload of the same kind\n") in err
    assert main(["tune", OTHER, *OTHER_PARAMS, "--trials", "4", "--db", db, "--no-warm-start"]) == EXIT_OK
    assert "warm-started" not in capsys.readouterr().err
    assert main(["tune", "softmax", "-p", "M=16", "-p", "N=32", "--trials", "2", "--db", db]) == EXIT_OK
    assert "warm-started" not in capsys.readouterr().err  # no workload of its kind


@pytest.mark.parametrize("args, says", [
    ([TARGET, *PARAMS, "--warm-start", TARGET], "the workload being tuned"),
    ([OTHER, *OTHER_PARAMS, "--warm-start", "nosuch"], "no workload whose key or name is 'nosuch'"),
    ([OTHER, *OTHER_PARAMS, "--warm-start", TARGET, "--strategy", "replay"], "--strategy replay has none"),
    ([OTHER, *OTHER_PARAMS, "--warm-start", TARGET, "--no-warm-start"], "give one of them"),
], ids=["itself", "unknown", "random search", "both"])
def test_tune_warm_start_refusals_are_user_errors(args, says, tuned, tmp_path, capsys):
    db = copy_db(tuned.db, tmp_path / "copy.db")
    assert main(["tune", *args, "--trials", "2", "--db", db]) == EXIT_USER_ERROR
    captured = capsys.readouterr()
    assert_one_line_error(captured.err)
    assert says in captured.err
    with Database(db) as opened:
        assert sum(w.records for w in opened.workloads()) == TRIALS  # nothing tuned


def test_tune_warm_start_from_records_of_another_cpu_only_is_a_user_error(tuned, tmp_path, capsys):
    db = str(tmp_path / "elsewhere.db")
    elsewhere = Target(cpu="othercpu", features="+sse2", num_threads=host_target().num_threads + 1)
    with Database(db) as opened:
        opened.commit(tuned.wl, Schedule(tuned.wl).trace, target=elsewhere, seconds=[1e-3])
    assert main(["tune", OTHER, *OTHER_PARAMS, "--trials", "2", "--db", db, "--warm-start", TARGET]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert f"holds no records of {tuned.wl.label} measured on this CPU" in err


def test_tune_warm_start_needs_the_database_to_exist(tmp_path, capsys):
    db = tmp_path / "new.db"
    code = main(["tune", OTHER, *OTHER_PARAMS, "--trials", "2", "--db", str(db), "--warm-start", TARGET])
    assert code == EXIT_USER_ERROR
    assert_one_line_error(capsys.readouterr().err)
    assert not db.exists()


# ---- tune: bad arguments ----------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["--trials", "-1", "--db", "{db}"],
    ["--trials", "x", "--db", "{db}"],
    ["--trials", "2"],  # no --db
    ["--trials", "2", "--db", "{db}", "--seed", "-3"],
], ids=["negative trials", "trials not a number", "missing --db", "negative seed"])
def test_tune_bad_arguments_exit_2_with_one_line(args, tmp_path, capsys):
    db = tmp_path / "new.db"
    with pytest.raises(SystemExit) as exited:
        main(["tune", TARGET, *PARAMS, *[a.format(db=db) for a in args]])
    assert exited.value.code == EXIT_USER_ERROR
    captured = capsys.readouterr()
    assert_one_line_error(captured.err)
    assert "--trials" in captured.err or "--db" in captured.err or "--seed" in captured.err
    assert captured.out == ""
    assert not db.exists()


@pytest.mark.parametrize("target, params", [("nosuch", []), (TARGET, ["-p", "M=0"]), (TARGET, ["-p", "Q=3"])],
                         ids=["unknown workload", "zero dimension", "unknown parameter"])
def test_tune_bad_workloads_exit_2_and_create_no_database(target, params, tmp_path, capsys):
    db = tmp_path / "new.db"
    assert main(["tune", target, *params, "--trials", "2", "--db", str(db)]) == EXIT_USER_ERROR
    captured = capsys.readouterr()
    assert_one_line_error(captured.err)
    assert captured.out == ""
    assert not db.exists()


def test_tune_with_no_budget_and_no_records_is_not_a_mismatch(tmp_path, capsys):
    code = main(["tune", TARGET, *PARAMS, "--trials", "0", "--db", str(tmp_path / "empty.db")])
    captured = capsys.readouterr()
    assert code != metasched.cli.EXIT_MISMATCH
    assert "no trial ran correctly" not in captured.out + captured.err


@pytest.mark.parametrize("plot", ["missing/curve.png", "curve.xyz"])
def test_tune_a_bad_plot_path_is_a_user_error(plot, tuned, tmp_path, capsys):
    db = copy_db(tuned.db, tmp_path / "copy.db")  # the budget is spent: no worker starts
    code = main(["tune", TARGET, *PARAMS, "--trials", str(TRIALS), "--db", db, "--plot", str(tmp_path / plot)])
    assert code == EXIT_USER_ERROR
    assert_one_line_error(capsys.readouterr().err)


# ---- best -------------------------------------------------------------------------------------

def test_best_prints_the_trace_the_program_and_the_speed(tuned, capsys):
    best = best_record(tuned.db, tuned.wl)
    assert main(["best", TARGET, *PARAMS, "--db", str(tuned.db)]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"record {best.id}," in header_line(out, "# best of")
    assert Trace.parse(block_after(out, "# best of")) == best.trace
    assert str(metasched.replay(tuned.wl, best.trace)) in out  # the program
    assert "outputs match the numpy reference" in out
    assert re.search(r"speed relative to numpy: \d+\.\d\dx", out), out


@pytest.mark.parametrize("command", ["best", "trace", "history"])
def test_reading_commands_refuse_a_missing_database_and_do_not_create_it(command, tmp_path, capsys):
    db = tmp_path / "nowhere.db"
    extra = ["-o", str(tmp_path / "out.trace")] if command == "trace" else []
    assert main([command, TARGET, *PARAMS, "--db", str(db), *extra]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "no tuning database" in err
    assert not db.exists()
    assert not (tmp_path / "out.trace").exists()


def test_best_of_a_workload_never_tuned_says_to_tune_it_first(tuned, capsys):
    before = tuned.db.stat().st_size
    assert main(["best", TARGET, "-p", "M=16", "-p", "N=32", "-p", "K=32", "--db", str(tuned.db)]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "tune it first" in err
    with Database(tuned.db) as db:
        assert len(db.records(tuned.wl)) == TRIALS  # the real records are still there
    assert tuned.db.stat().st_size == before


def test_best_of_a_workload_whose_records_all_failed_says_so(tuned, tmp_path, capsys):
    db = copy_db(tuned.db, tmp_path / "copy.db")
    other = workloads.get(TARGET, **{**SIZES, "M": 16})
    with Database(db) as opened:
        assert opened.commit(other, Schedule(other).trace, target=host_target(), error="build: no") is not None
    assert main(["best", TARGET, "-p", "M=16", *PARAMS[2:], "--db", db]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "1 record(s)" in err and "all failed" in err and "tune it first" not in err


def test_the_tune_first_hint_keeps_the_parameters(tuned, capsys):
    assert main(["best", TARGET, "-p", "M=16", *PARAMS[2:], "--db", str(tuned.db)]) == EXIT_USER_ERROR
    hint = capsys.readouterr().err.split("tune it first:")[1]
    assert "M=16" in hint


def test_the_tune_first_hint_of_a_file_names_the_file(tuned, tmp_path, capsys):
    path = tmp_path / "scale.tensor"
    path.write_text(SCALE)
    assert main(["best", str(path), "--db", str(tuned.db)]) == EXIT_USER_ERROR
    hint = capsys.readouterr().err.split("tune it first:")[1]
    assert str(path) in hint


# ---- trace ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["best.trace", "best.json"])
def test_trace_saves_the_best_trace_that_loads_back_equal(name, tuned, tmp_path, capsys):
    path = tmp_path / name
    assert main(["trace", TARGET, *PARAMS, "--db", str(tuned.db), "-o", str(path)]) == EXIT_OK
    assert capsys.readouterr().err == ""
    best = best_record(tuned.db, tuned.wl)
    text = path.read_text()
    assert Trace.load(path) == best.trace
    if name.endswith(".json"):
        assert Trace.from_json(json.loads(text)) == best.trace
    else:
        assert not text.lstrip().startswith("{")
        assert Trace.parse(text) == best.trace


def test_trace_to_an_unwritable_path_is_a_user_error(tuned, tmp_path, capsys):
    out = tmp_path / "missing" / "best.trace"
    assert main(["trace", TARGET, *PARAMS, "--db", str(tuned.db), "-o", str(out)]) == EXIT_USER_ERROR
    assert_one_line_error(capsys.readouterr().err)


# ---- replay -----------------------------------------------------------------------------------

@pytest.fixture
def saved(tuned, tmp_path):
    """The best trace, saved as text."""
    path = tmp_path / "best.trace"
    trace = best_record(tuned.db, tuned.wl).trace
    trace.save(path)
    return SimpleNamespace(path=path, trace=trace)


def test_replay_builds_checks_and_times_a_saved_trace(saved, tuned, capsys):
    assert main(["replay", str(saved.path), TARGET, *PARAMS]) == EXIT_OK
    out = capsys.readouterr().out
    assert str(metasched.replay(tuned.wl, saved.trace)) in out
    assert "outputs match the numpy reference" in out
    assert re.search(r"speed relative to numpy: \d+\.\d\dx", out), out


def test_replay_a_broken_trace_names_the_file_line_and_column(saved, capsys):
    lines = saved.path.read_text().split("\n")
    lines[1], replaced = re.subn(r"sch\.\w+\(", "sch.no_such_method(", lines[1], count=1)
    assert replaced == 1, lines[1]
    broken = saved.path.with_name("broken.trace")
    broken.write_text("\n".join(lines))
    assert main(["replay", str(broken), TARGET, *PARAMS]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    column = lines[1].index("no_such_method") + 1
    assert f"{broken}:2:{column}:" in err
    assert "no_such_method" in err


def test_replay_a_trace_of_another_workload_names_the_instruction(saved, capsys):
    assert main(["replay", str(saved.path), "softmax", "-p", "M=8", "-p", "N=8"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    # the first instruction (get_block of a block softmax does not have) is the one that fails
    first = str(saved.trace).split("\n")[0]
    assert "instruction 0" in err and first in err
    with pytest.raises(metasched.ScheduleError) as raised:
        metasched.replay(workloads.get("softmax", M=8, N=8), saved.trace)
    assert str(raised.value) in err


def test_replay_a_missing_file(tmp_path, capsys):
    missing = tmp_path / "missing.trace"
    assert main(["replay", str(missing), TARGET, *PARAMS]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert str(missing) in err and "cannot read" in err


# ---- history ----------------------------------------------------------------------------------

def listed_ids(out: str) -> list[int]:
    return [int(m) for m in re.findall(r"^#(\d+) ", out, re.MULTILINE)]


def test_history_lists_the_records_newest_first_with_failures(tuned, tmp_path, capsys):
    db = copy_db(tuned.db, tmp_path / "copy.db")
    reason = "run: the worker crashed with SIGSEGV"
    with Database(db) as opened:
        failed = opened.commit(tuned.wl, Schedule(tuned.wl).trace, target=host_target(), error=reason)
        assert failed is not None
        records = opened.records(tuned.wl)
    assert main(["history", TARGET, *PARAMS, "--db", db]) == EXIT_OK
    out = capsys.readouterr().out
    ids = listed_ids(out)
    assert ids == sorted((r.id for r in records), reverse=True)
    assert ids[0] == failed.id
    assert len(out.strip().split("\n")) == len(records) + 1  # a heading, then one line per record
    line = next(line for line in out.split("\n") if line.startswith(f"#{failed.id} "))
    assert line.rstrip().endswith(f"failed: {reason}")
    ok_lines = [line for line in out.split("\n") if re.match(r"#\d+ ", line) and "failed" not in line]
    assert len(ok_lines) == len(records) - 1
    assert all(re.search(r" \d+\.\d{3} (s|ms|us|ns) .* GFLOP/s", line) for line in ok_lines)


def test_records_of_another_cpu_are_listed_as_such_and_never_the_best(tuned, tmp_path, capsys):
    db = copy_db(tuned.db, tmp_path / "copy.db")
    elsewhere = Target(cpu="othercpu", features="+sse2", num_threads=host_target().num_threads + 1)
    unscheduled = Schedule(tuned.wl).trace
    host_best = best_record(db, tuned.wl)
    assert unscheduled != host_best.trace
    with Database(db) as opened:  # far faster than anything measured here
        foreign = opened.commit(tuned.wl, unscheduled, target=elsewhere, seconds=[1e-9, 1e-9, 1e-9])
    assert main(["history", TARGET, *PARAMS, "--db", db]) == EXIT_OK
    out = capsys.readouterr().out
    line = next(line for line in out.split("\n") if line.startswith(f"#{foreign.id} "))
    assert line.rstrip().endswith(f"[othercpu, {elsewhere.num_threads} threads]")
    assert sum("othercpu" in line for line in out.split("\n")) == 1
    saved = tmp_path / "best.trace"
    assert main(["trace", TARGET, *PARAMS, "--db", db, "-o", str(saved)]) == EXIT_OK
    assert Trace.load(saved) == host_best.trace
    assert f"record {host_best.id}," in capsys.readouterr().out


def test_history_of_a_workload_never_tuned_lists_nothing(tuned, capsys):
    assert main(["history", TARGET, "-p", "M=16", *PARAMS[2:], "--db", str(tuned.db)]) == EXIT_OK
    assert listed_ids(capsys.readouterr().out) == []


# ---- help -------------------------------------------------------------------------------------

def help_of(args, capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*args, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_help_lists_the_tuning_commands(capsys):
    out = help_of([], capsys)
    for command in ("tune", "best", "trace", "replay", "history"):
        assert re.search(rf"^\s+{command}\s", out, re.MULTILINE), (command, out)


@pytest.mark.parametrize("command, options", [
    ("tune", ["--trials", "--db", "--plot", "--seed", "-p", "--warm-start", "--no-warm-start"]),
    ("best", ["--db"]),
    ("trace", ["--db", "-o"]),
    ("replay", ["TRACE_FILE", "TARGET"]),
    ("history", ["--db"]),
])
def test_each_command_documents_its_options(command, options, capsys):
    out = help_of([command], capsys)
    for option in options:
        assert option in out, (option, out)


def test_tune_help_says_what_its_seed_seeds(capsys):
    out = help_of(["tune"], capsys)
    seed_help = re.search(r"--seed SEED\s+(.*?)(?:\n  -|\n\n)", out, re.DOTALL).group(1)
    assert "random inputs" not in seed_help
