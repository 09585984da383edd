"""mlflow/server.sh for real: PostgreSQL from Debian's package, moto's S3 server, a run over HTTP.

The script runs as a subprocess from the repository root (where the ``mlflow/``
settings directory must not shadow the library), in both artefact modes, with
an env file holding exactly the settings mlflow/server.env.example lists; its
early failures are checked without a server. mlflow/compose.yaml cannot run
here (no containers): it is parsed, and its server's settings are checked
against the same list.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import pytest
import yaml

from advrag.tasks import tracking

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "mlflow" / "server.sh"
EXAMPLE = ROOT / "mlflow" / "server.env.example"


def env_names(path: Path) -> list[str]:
    """The NAME of every ``NAME=value`` line of an env file."""
    return re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)=", path.read_text(), re.MULTILINE)


def bare_env(home: Path) -> dict[str, str]:
    """A process environment with only the venv on PATH: the settings come from the env file."""
    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fresh_database(postgres_uri: str, name: str) -> str:
    """A new, empty database on the fixture's cluster; its URI."""
    import psycopg2

    conn = psycopg2.connect(postgres_uri)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    conn.close()
    return f"{postgres_uri.rsplit('/', 1)[0]}/{name}"


@contextlib.contextmanager
def running_server(env_file: Path, home: Path, url: str):
    """server.sh in its own process group, up once /health answers; always stopped (the group)."""
    log = home / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen([str(SCRIPT), str(env_file)], cwd=ROOT, env=bare_env(home),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"server.sh never answered /health:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:  # the uvicorn workers too, if any outlived the server
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["proxied", "direct"])
def test_server_keeps_runs_in_postgresql_and_artifacts_in_s3(
        mode, postgres_uri, s3, tmp_path, monkeypatch):
    """A run logged through advrag's tracking module: metric and artefact read back over
    HTTP, the artefact object in the bucket, the run row in PostgreSQL."""
    import psycopg2

    bucket = s3.bucket(f"advrag-server-{mode}")
    backend = fresh_database(postgres_uri, f"mlflow_server_{mode}")
    port = free_port()
    settings = {
        "MLFLOW_BACKEND_STORE_URI": backend,
        "PGPASSWORD": "unused-by-trust-auth",
        "MLFLOW_ARTIFACTS_DESTINATION": f"s3://{bucket}/mlflow",
        "MLFLOW_SERVE_ARTIFACTS": "true" if mode == "proxied" else "false",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "MLFLOW_S3_ENDPOINT_URL": s3.endpoint,
        "MLFLOW_HOST": "127.0.0.1",
        "MLFLOW_PORT": str(port),
        "MLFLOW_WORKERS": "1",
    }
    assert sorted(settings) == sorted(env_names(EXAMPLE))
    env_file = tmp_path / "server.env"
    env_file.write_text("".join(f"{name}={value}\n" for name, value in settings.items()))

    url = f"http://127.0.0.1:{port}"
    if mode == "proxied":  # clients of a proxying server need no S3 settings at all
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MLFLOW_S3_ENDPOINT_URL"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("ADVRAG_ARTIFACT_ROOT", raising=False)  # the server decides
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    with running_server(env_file, tmp_path, url):
        assert tracking.configure() == url
        with tracking.tracked_run("team-exp", "over-http") as run_id:
            tracking.log_metrics(run_id, {"world/arr/em": 0.75}, step=3)
            tracking.log_text(run_id, "# report\n", "report.md")
        history = mlflow.MlflowClient().get_metric_history(run_id, "world/arr/em")
        assert [(m.step, m.value) for m in history] == [(3, 0.75)]
        assert mlflow.artifacts.load_text(f"runs:/{run_id}/report.md") == "# report\n"
        experiment_id = mlflow.get_run(run_id).info.experiment_id
        location = mlflow.get_experiment(experiment_id).artifact_location
    expected = {"proxied": f"mlflow-artifacts:/{experiment_id}",
                "direct": f"s3://{bucket}/mlflow/{experiment_id}"}
    assert location == expected[mode]

    assert f"mlflow/{experiment_id}/{run_id}/artifacts/report.md" in s3.keys(bucket)
    conn = psycopg2.connect(backend)
    with conn, conn.cursor() as cur:
        cur.execute("SELECT status, name FROM runs WHERE run_uuid = %s", (run_id,))
        assert cur.fetchall() == [("FINISHED", "over-http")]
    conn.close()


@pytest.mark.parametrize("file_lines, env, message", [
    (["MLFLOW_ARTIFACTS_DESTINATION=s3://b/mlflow"], {},
     r"MLFLOW_BACKEND_STORE_URI is not set\. .*e\.g\. MLFLOW_BACKEND_STORE_URI=postgresql://"),
    (["MLFLOW_BACKEND_STORE_URI=postgresql://h/db", "MLFLOW_ARTIFACTS_DESTINATION=s3://b/mlflow",
      "MLFLOW_SERVE_ARTIFACTS=true"], {"MLFLOW_SERVE_ARTIFACTS": "maybe"},  # the environment wins
     r"MLFLOW_SERVE_ARTIFACTS=maybe: use true .* or false"),
    (None, {}, r"no env file at .*/absent\.env"),
], ids=["missing-backend", "bad-mode-from-env", "missing-env-file"])
def test_server_sh_stops_early_naming_the_problem(tmp_path, file_lines, env, message):
    env_file = tmp_path / "absent.env"
    if file_lines is not None:
        env_file = tmp_path / "server.env"
        env_file.write_text("\n".join(file_lines) + "\n")
    proc = subprocess.run([str(SCRIPT), str(env_file)], env={**bare_env(tmp_path), **env},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert re.search(message, proc.stderr), proc.stderr


def test_compose_runs_server_sh_with_the_documented_settings():
    compose = yaml.safe_load((ROOT / "mlflow" / "compose.yaml").read_text())
    services = compose["services"]
    server = services["mlflow"]
    assert sorted(server["environment"]) == sorted(env_names(EXAMPLE))
    assert any(v.startswith("./server.sh:") for v in server["volumes"])
    assert "server.sh" in server["command"][-1]
    for name in ("postgres", "minio", "mlflow"):
        assert "healthcheck" in services[name], name
    assert server["depends_on"]["postgres"]["condition"] == "service_healthy"
