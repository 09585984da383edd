"""A real MLflow tracking server on 127.0.0.1 works as the tracking URI."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import mlflow
import pytest

from advrag.tasks import tracking


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def mlflow_server(tmp_path):
    """`mlflow server` with a SQLite backend and proxied local artifacts."""
    port = free_port()
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
           "--artifacts-destination", str(tmp_path / "artifacts")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not answer /health within 120 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_runs_and_artifacts_go_through_the_server(mlflow_server, monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    assert tracking.configure() == mlflow_server
    with tracking.tracked_run("server-exp", "via-server", params={"k": 3}) as run_id:
        tracking.log_metrics(run_id, {"world/cot/f1": 0.5})
        tracking.log_text(run_id, "hello", "results.md")
    found = httpx.post(f"{mlflow_server}/api/2.0/mlflow/runs/search",
                       json={"experiment_ids": [tracking.ensure_experiment("server-exp")]}).json()
    assert [r["info"]["run_id"] for r in found["runs"]] == [run_id]
    assert mlflow.get_run(run_id).data.metrics["world/cot/f1"] == 0.5
    text = mlflow.artifacts.load_text(f"runs:/{run_id}/results.md")
    assert text == "hello"
    assert list((tmp_path / "artifacts").rglob("results.md")), "artifact not proxied to the server store"
