"""The main job's terminal (advrag.common.console): third-party output goes to the log, the
stages' bars and the result to the terminal, an error as its message; `advrag demo` is the
pipeline. Sessions run in a new interpreter: pytest captures warnings and logging itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from typer.testing import CliRunner

from advrag import cli

ROOT = Path(__file__).resolve().parents[2]
CHATTER = """
import logging, os, subprocess, sys, warnings
from pathlib import Path
from advrag.common import console

logging.basicConfig(format="%(name)s: %(message)s")  # a root handler, as Prefect installs
with console.session("chatter", log_dir=Path(sys.argv[1])) as session:
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.INFO)
    logging.getLogger("great_expectations.data_context.types.base").info("Created temporary dir")
    logging.getLogger("great_expectations.data_context.types.base").warning("a GX warning")
    warnings.warn("`is_gradient_checkpointing` is deprecated", FutureWarning)
    print("a library's print")
    print("a library's stderr line", file=sys.stderr)
    subprocess.run(["sh", "-c", "echo a child process >&2"], check=True)
    os.write(2, b"a C++ warning\\n")
    with console.progress("benchmark", 3, "questions") as bar:
        bar.update(2)
        bar.update(1)
    session.say("| the table |")
    if sys.argv[2] == "fail":
        raise ValueError("the index is missing")
print(session.log_path)
"""
THIRD_PARTY = ("a GX warning", "FutureWarning: `is_gradient_checkpointing` is deprecated",
               "a library's print", "a library's stderr line", "a child process", "a C++ warning")
DEMO_WITH_A_STUB_FLOW = """
import sys, types
from pathlib import Path
from advrag import cli, tasks
from advrag.common import console

def pipeline(config):
    print("16:05:20 | INFO | prefect - Starting temporary server")
    return {"run_id": "r123", "table": "| reasoner | EM |"}

logged = []
stub_tracking = types.SimpleNamespace(log_file=lambda *args: logged.append(args))
sys.modules["advrag.flows.pipeline"] = types.SimpleNamespace(pipeline=pipeline)
sys.modules["advrag.tasks.tracking"] = tasks.tracking = stub_tracking
console.LOG_DIR = Path(sys.argv[1])
cli.app(["demo"], standalone_mode=False)
Path(sys.argv[1], "logged.txt").write_text(repr(logged))  # stdout is the log's from here on
"""
UNTIL_EXIT = """
import atexit, sys
from pathlib import Path
from advrag.common import console

atexit.register(print, "a library's goodbye at exit")
with console.session("exit", log_dir=Path(sys.argv[1]), until_exit=True) as session:
    session.say("| the table |")
print("after the session")
"""


def run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_third_party_output_goes_to_the_log_and_the_stages_to_the_terminal(tmp_path):
    result = run_python(CHATTER, str(tmp_path), "ok")
    assert result.returncode == 0, result.stderr
    table, log_path = result.stdout.splitlines()
    assert table == "| the table |"
    assert result.stderr.rstrip().endswith("3/3 questions [00:00]")  # the bar, drawn at its end
    assert not [text for text in THIRD_PARTY if text in result.stderr + result.stdout]
    log = Path(log_path).read_text()
    assert Path(log_path).parent == tmp_path and log_path.endswith(".log")
    assert [text for text in THIRD_PARTY if text in log] == list(THIRD_PARTY)
    assert "Created temporary dir" not in log  # Great Expectations' INFO line: not even there


def test_an_error_reaches_the_terminal_as_its_message_and_its_traceback_the_log(tmp_path):
    result = run_python(CHATTER, str(tmp_path), "fail")
    assert result.returncode == 1
    log_path = next(tmp_path.glob("chatter-*.log"))
    assert result.stdout == "| the table |\n"
    assert result.stderr.endswith("error: ValueError: the index is missing\n"
                                  f"the whole log: {log_path}\n")
    assert "Traceback" not in result.stderr
    log = log_path.read_text()
    assert "Traceback (most recent call last)" in log and "the index is missing" in log


def test_advrag_demo_and_pipeline_run_the_same_pipeline(monkeypatch):
    ran = []
    monkeypatch.setattr(cli.pipeline, "run_pipeline", ran.append)
    assert CliRunner().invoke(cli.app, ["demo"]).exit_code == 0
    assert CliRunner().invoke(cli.app, ["pipeline", "--config", "configs/x.yaml"]).exit_code == 0
    assert ran == [Path("configs/pipeline-demo.yaml"), Path("configs/x.yaml")]
    recipe = (ROOT / "Makefile").read_text().split("\ndemo: install\n")[1].splitlines()[0]
    assert recipe.strip() == "$(PY) -m advrag.cli demo"  # `make demo` is `advrag demo`


def test_the_four_method_benchmark_the_demo_ran_before_is_benchmark_prepare_data(monkeypatch):
    ran = []
    monkeypatch.setitem(sys.modules, "advrag.flows.prepare_data", SimpleNamespace(
        prepare_data=lambda data: ran.append(("prepare_data", data.world.out_dir))))
    monkeypatch.setitem(sys.modules, "advrag.flows.benchmark", SimpleNamespace(
        benchmark=lambda bench: ran.append(("benchmark", bench.methods)) or {"run_id": "r9"}))
    result = CliRunner().invoke(cli.app, ["benchmark", "--prepare-data", "--config",
                                          str(ROOT / "configs/demo.yaml")])
    assert result.exit_code == 0, result.output
    assert ran == [("prepare_data", Path("data/world")),
                   ("benchmark", ["cot", "naive_rag", "search_r1", "arr"])]
    assert "MLflow run r9" in result.stdout


def test_the_demo_prints_the_table_and_where_to_look_and_logs_the_log(tmp_path):
    """`advrag demo` with the pipeline flow stubbed: its chatter goes to the log, the log to
    the run's artifacts, the table and the pointers to the terminal."""
    result = run_python(DEMO_WITH_A_STUB_FLOW, str(tmp_path))
    assert result.returncode == 0, result.stderr
    log_path = next(tmp_path.glob("pipeline-*.log"))
    assert result.stdout.splitlines() == [
        f"advrag pipeline configs/pipeline-demo.yaml (everything but the stages: {log_path})",
        "", "| reasoner | EM |", "",
        "MLflow: experiment advrag-pipeline, run r123",
        "UIs: make ui (or advrag ui), then MLflow at http://127.0.0.1:5000 and Prefect at "
        "http://127.0.0.1:4200",
        f"Log: {log_path} (also in the run's artifacts, logs/{log_path.name})"]
    assert (tmp_path / "logged.txt").read_text() == repr([("r123", log_path, "logs")])
    assert "Starting temporary server" in log_path.read_text()
    assert result.stderr == ""


def test_a_commands_session_keeps_what_the_process_prints_on_its_way_out_in_the_log(tmp_path):
    result = run_python(UNTIL_EXIT, str(tmp_path))
    assert (result.returncode, result.stdout, result.stderr) == (0, "| the table |\n", "")
    log = next(tmp_path.glob("exit-*.log")).read_text()
    assert "after the session" in log and "a library's goodbye at exit" in log


BACKGROUND_BARS = """
import sys
from advrag.common import console
console.LOG_INTERVAL_S = 0.0  # a line at every update, as a long stage writes one a minute
with console.progress("rejection sampling", 3, "rollouts") as bar:
    for _ in range(3):
        bar.update(1)
"""


def test_a_bar_in_a_background_runs_log_is_a_line_per_redraw(tmp_path):
    """No session and stderr a file (``nohup … > log``): the bar still shows, a line each time."""
    log = tmp_path / "run.log"
    with log.open("w") as stderr:
        subprocess.run([sys.executable, "-c", BACKGROUND_BARS], stderr=stderr, check=True,
                       cwd=ROOT, timeout=120)
    lines = log.read_text().splitlines()
    assert "\r" not in log.read_text()
    assert [line.split()[-3] for line in lines][:1] == ["0/3"]
    assert lines[-1].split()[-3:-1] == ["3/3", "rollouts"] and len(lines) >= 2
    assert len(lines) == len(set(lines))  # the closing redraw repeats the last: written once
