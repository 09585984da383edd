"""`advrag.ops.ui` without browsers: adopting a server that already runs, a server that dies at
start, and the EM/F1 runs view `advrag ui` links to."""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import mlflow
import pytest

from advrag.ops import ui
from advrag.tasks import tracking


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def running_server():
    """Something already answering /health on a loopback port (as `advrag schedule`'s server)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def spec(tmp_path, url: str, code: str) -> ui.ServerSpec:
    return ui.ServerSpec("Test", [sys.executable, "-c", code], {}, url, f"{url}/health",
                         tmp_path / "test.log")


def test_a_server_already_answering_is_used_and_left_running(tmp_path, running_server):
    with ui.running([spec(tmp_path, running_server, "raise SystemExit('must not start')")]) as [s]:
        assert s.process is None and "already running, left as is" in ui.describe(s)
    assert ui.answers(f"{running_server}/health")  # not ours: still up
    assert not (tmp_path / "test.log").exists()


def test_a_server_that_exits_at_start_names_its_log(tmp_path):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    dead = spec(tmp_path, url, "print('bad flag'); raise SystemExit(3)")
    with pytest.raises(ui.UIError, match=r"Test server exited \(code 3\); see .*test\.log"):
        with ui.running([dead], timeout_s=60):
            pass
    assert (tmp_path / "test.log").read_text() == "bad flag\n"


def test_share_runs_view_selects_the_em_and_f1_columns(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(tmp_path))
    tracking.configure()
    assert tracking.share_runs_view("no-such-experiment", *ui.EM_F1_VIEW) is None
    with tracking.tracked_run("bench", "r1") as run_id:
        tracking.log_metrics(run_id, {"avg/cot/em": 0.5, "avg/cot/f1": 0.6, "avg/cot/n": 4,
                                      "world/cot/em": 0.5, "avg/arr/f1": 0.1, "avg/arr/em_lo": 0})
    experiment_id = tracking.ensure_experiment("bench")

    route = tracking.share_runs_view("bench", *ui.EM_F1_VIEW)

    assert route == f"#/experiments/{experiment_id}/runs?viewStateShareKey=em-f1"
    tag = mlflow.MlflowClient().get_experiment(experiment_id).tags["mlflow.sharedViewState.em-f1"]
    assert json.loads(tag) == {"selectedColumns": ["metrics.`avg/arr/f1`", "metrics.`avg/cot/em`",
                                                   "metrics.`avg/cot/f1`"]}


HEALTH_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/api/health" else 404); self.end_headers()
    def log_message(self, *args): pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_server_of_ours_leaves_its_api_url_for_commands_while_it_runs(tmp_path):
    """What `advrag ui` does for its Prefect server: the record appears once it answers, every
    `advrag` command finds it (``local_api``), and it goes when the server stops."""
    from advrag.ops import scheduling

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url, record = f"http://127.0.0.1:{port}", tmp_path / scheduling.API_URL_FILE
    ours = ui.ServerSpec("Test", [sys.executable, "-c", HEALTH_SERVER, str(port)], {}, url,
                         f"{url}/api/health", tmp_path / "test.log", api_record=record)
    with ui.running([ours], timeout_s=60):
        assert record.read_text() == f"{url}/api\n"
        assert scheduling.local_api(tmp_path) == f"{url}/api"
    assert not record.exists() and scheduling.local_api(tmp_path) is None


def test_a_stale_api_record_is_ignored_and_removed(tmp_path, running_server):
    from advrag.ops import scheduling

    record = tmp_path / scheduling.API_URL_FILE
    record.write_text(f"{running_server}\n")  # answers /health: in use
    assert scheduling.local_api(tmp_path) == running_server
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        record.write_text(f"http://127.0.0.1:{sock.getsockname()[1]}/api\n")
    assert scheduling.local_api(tmp_path) is None and not record.exists()
