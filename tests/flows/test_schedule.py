"""Deployment as code, and the schedule against a REAL local Prefect server with a worker.

`advrag.ops.scheduling.schedule` starts Prefect's server on 127.0.0.1 (answering only
loopback Host names, requiring the project's credential), creates the
process pool, runs `prefect deploy -n nightly` on the repo's prefect.yaml and starts a
worker. The test checks that the scheduler itself created the cron's runs (02:00
Europe/Berlin, by hand from zoneinfo), that `prefect deployment run 'nightly/nightly'`
is executed by the worker to Completed (the tiny nightly chain: a champion in MLflow),
and that `unschedule` stops both processes.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import mlflow
import pytest
import yaml
from tiny_configs import write_tiny_nightly

from advrag.config import PipelineConfig, load_config
from advrag.ops import dataplane, scheduling
from advrag.tasks import tracking

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "infra/terraform/modules/gpu_workers"


def deployments() -> dict[str, dict]:
    """prefect.yaml's deployments by name (YAML merge keys resolved)."""
    return {d["name"]: d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]}


def test_deployments_match_the_config_and_the_gpu_workers():
    local, gpu = deployments()["nightly"], deployments()["nightly-gpu"]
    for d in (local, gpu):
        assert d["entrypoint"] == "flows/nightly.py:nightly"
        assert d["schedules"] == [{"cron": "0 2 * * *", "timezone": "Europe/Berlin", "active": True}]
        load_config(ROOT / d["parameters"]["config"], PipelineConfig)
    assert "pull" not in local  # prefect deploy records the checkout it ran in
    variables = (TERRAFORM / "variables.tf").read_text()
    pool = re.search(r'variable "prefect_work_pool" \{[^}]*default\s*=\s*"([^"]+)"', variables)
    workdir = re.search(r"WorkingDirectory=(\S+)", (TERRAFORM / "cloud-init.yaml.tftpl").read_text())
    assert gpu["work_pool"]["name"] == pool.group(1) == "advrag-gpu"
    assert gpu["pull"] == [{"prefect.deployments.steps.set_working_directory":
                            {"directory": workdir.group(1)}}]
    from advrag.flows.nightly import night, nightly  # the retry docs/infrastructure.md promises

    assert (night.retries, night.retry_delay_seconds) == (1, 60)
    assert not nightly.retries  # a config that fails its checks is not retried


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory, tiny_policy_dir):
    """A project checkout in tmp (DVC stages, prefect.yaml, a tiny nightly config) on a live
    local server; everything is stopped afterwards, worker first."""
    root = tmp_path_factory.mktemp("scheduled-project")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    dataplane.run_dvc(["init", "-q"], root)
    for name in ("dvc.yaml", "params.yaml", "prefect.yaml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "advrag", root / "advrag")
    (root / "flows").symlink_to(ROOT / "flows")
    write_tiny_nightly(root, tiny_policy_dir)
    home = root / ".prefect"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", tracking.default_uri(root / ".mlflow"))
        patch.setenv("PREFECT_WORKER_QUERY_SECONDS", "2")
        patch.delenv("PREFECT_API_URL", raising=False)
        try:
            yield root, scheduling.schedule(root, home, port=free_port(), pool="advrag-test")
        finally:
            scheduling.unschedule(home)


def headers(info, client: str = "advrag-test") -> dict[str, str]:
    """The project's credential and a CSRF token: what advrag's own clients send."""
    return scheduling.api_headers(info.api_url, scheduling.project_credential(info.home), client)


def api(scheduled, path: str, body: dict | None = None):
    _, info = scheduled
    response = httpx.post(f"{info.api_url}{path}", json=body or {}, timeout=30,
                          headers=headers(info))
    response.raise_for_status()
    return response.json()


def next_two_am_berlin(count: int) -> list[datetime]:
    """The next ``count`` 02:00 wall-clock times in Berlin (02:00 always exists there)."""
    berlin = ZoneInfo("Europe/Berlin")
    now = datetime.now(berlin)
    day = now.date() if now.hour < 2 else now.date() + timedelta(days=1)
    return [datetime(d.year, d.month, d.day, 2, tzinfo=berlin)
            for d in (day + timedelta(days=i) for i in range(count))]


@pytest.mark.slow
def test_the_local_server_refuses_other_origins_and_serves_its_own(scheduled):
    """A page from another origin can neither pass CORS nor change state; the UI (same origin,
    a CSRF token from /csrf-token) can. Prefect's defaults allowed both: CORS `*`, no CSRF."""
    _, info = scheduled
    evil, own = "http://evil.example", info.ui_url
    for origin, allowed in ((evil, False), (own, True)):
        preflight = httpx.options(f"{info.api_url}/flows/", timeout=30, headers={
            "Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})
        assert (preflight.headers.get("access-control-allow-origin") == origin) is allowed
        assert preflight.headers.get("access-control-allow-origin") != "*"
    signed_in = {"Authorization": headers(info)["Authorization"]}
    forged = httpx.post(f"{info.api_url}/flows/", json={"name": "from-evil"}, timeout=30,
                        headers={"Origin": evil, **signed_in})
    assert forged.status_code == 403 and forged.json()["detail"] == "Missing CSRF token."
    wrong = httpx.post(f"{info.api_url}/flows/", json={"name": "from-evil"}, timeout=30,
                       headers={"Origin": evil, "Prefect-Csrf-Token": "guess",
                                "Prefect-Csrf-Client": "evil", **signed_in})
    assert wrong.status_code == 403
    ui_request = httpx.post(f"{info.api_url}/flows/", json={"name": "from-the-ui"}, timeout=30,
                            headers={"Origin": own, **headers(info, "ui")})
    assert ui_request.status_code in (200, 201)
    assert ui_request.headers.get("access-control-allow-origin") == own


def upgrade_status(port: int, path: str, host: str) -> int:
    """The HTTP status a websocket upgrade to ``path`` with Host ``host`` gets (101: upgraded;
    the credential is then checked in the socket's first message, Prefect's protocol)."""
    request = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               "Sec-WebSocket-Protocol: prefect\r\nSec-WebSocket-Version: 13\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request.encode())
        return int(sock.recv(1024).split()[1])


@pytest.mark.slow
def test_the_local_server_answers_only_its_host_names_and_its_credential(scheduled):
    """DNS rebinding: a page from a name that resolves to 127.0.0.1 is same-origin to the
    browser, so CORS and CSRF let it through; `prefect server start` gave it a CSRF token and
    created its flow (201). The server now refuses its Host (403) even with a valid token and
    the credential, on the API, the UI and websockets; and without the credential nothing but
    the health probe answers (401)."""
    _, info = scheduled
    rebound = f"rebind.example:{info.port}"
    evil = {"Host": rebound, "Origin": f"http://{rebound}"}
    token = httpx.get(f"{info.api_url}/csrf-token", params={"client": "evil"}, timeout=30,
                      headers={**evil, **scheduling.basic_auth(scheduling.project_credential(
                          info.home))})
    assert token.status_code == 403 and "'rebind.example'" in token.json()["detail"]
    created = httpx.post(f"{info.api_url}/flows/", json={"name": "from-rebind"}, timeout=30,
                         headers={**headers(info, "evil"), **evil})
    assert created.status_code == 403
    assert httpx.get(f"{info.ui_url}/", headers=evil, timeout=30).status_code == 403
    assert upgrade_status(info.port, "/api/events/out", rebound) == 403
    assert upgrade_status(info.port, "/api/events/out", f"127.0.0.1:{info.port}") == 101
    assert httpx.get(f"{info.ui_url}/", timeout=30).status_code == 200  # the UI, to its own name
    for sent in ({}, scheduling.basic_auth("a-guess")):
        assert httpx.get(f"{info.api_url}/csrf-token", params={"client": "x"}, headers=sent,
                         timeout=30).status_code == 401
    assert httpx.get(f"{info.api_url}/health", timeout=30).status_code == 200  # probes stay open
    assert api(scheduled, "/flows/filter", {"flows": {"name": {"any_": ["from-rebind"]}}}) == []
    assert (info.home / scheduling.CREDENTIAL_FILE).stat().st_mode & 0o777 == 0o600


@pytest.mark.slow
def test_the_scheduler_creates_the_cron_runs(scheduled):
    _, info = scheduled
    assert info.server_start_s > 0 and (info.home / "server.pid").is_file()
    assert (info.home / "worker.pid").is_file()
    [deployment] = api(scheduled, "/deployments/filter",
                       {"deployments": {"name": {"any_": ["nightly"]}}})
    assert deployment["work_pool_name"] == "advrag-test"
    assert deployment["parameters"] == {"config": "configs/nightly.yaml"}
    runs: list = []
    deadline = time.monotonic() + 90  # the recent-deployments scheduler loops every 5 s
    while len(runs) < 3 and time.monotonic() < deadline:
        time.sleep(1)
        runs = api(scheduled, "/flow_runs/filter", {
            "flow_runs": {"deployment_id": {"any_": [deployment["id"]]},
                          "state": {"type": {"any_": ["SCHEDULED"]}}},
            "sort": "EXPECTED_START_TIME_ASC"})
    assert all(run["auto_scheduled"] for run in runs)
    starts = [datetime.fromisoformat(run["expected_start_time"]) for run in runs[:3]]
    assert starts == next_two_am_berlin(3)


def supervised_worker(info, other_than: int | None = None) -> int:
    """The pid of the Prefect worker that ``advrag schedule``'s supervisor runs (one other than
    ``other_than``), once it runs."""
    supervisor = int((info.home / "worker.pid").read_text())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
        if children and int(children[0]) != other_than:
            return int(children[0])
        time.sleep(0.2)
    raise AssertionError(f"the supervisor {supervisor} started no new worker within 60 s")


@pytest.mark.slow
def test_a_triggered_run_completes_on_a_worker_restarted_after_it_died(scheduled):
    root, info = scheduled
    died = supervised_worker(info)
    os.kill(died, signal.SIGKILL)  # as a worker that gave up on a stalled server exits
    supervised_worker(info, other_than=died)
    assert "exited with code -9" in (info.home / "worker.log").read_text()
    env = scheduling.prefect_env(info.home, info.port)
    out = scheduling.run_cli(["deployment", "run", "nightly/nightly"], env, root)
    run_id = re.search(r"UUID: (\S+)", out).group(1)
    state = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        state = httpx.get(f"{info.api_url}/flow_runs/{run_id}", timeout=30,
                          headers=headers(info)).json()["state"]
        if state["type"] in {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}:
            break
        time.sleep(2)
    assert state["type"] == "COMPLETED", (state, (info.home / "worker.log").read_text()[-4000:])
    store = mlflow.MlflowClient(tracking_uri=tracking.default_uri(root / ".mlflow"))  # no global URI
    assert store.get_model_version_by_alias("advrag-reasoner", "champion").version == 1
    assert (root / "dvc.lock").is_file() and (root / "data.dvc").is_file()


def runs_by_state(scheduled, deployment_id: str) -> dict[str, set[str]]:
    """State name → ids of the deployment's flow runs."""
    by_state: dict[str, set[str]] = {}
    for run in api(scheduled, "/flow_runs/filter",
                   {"flow_runs": {"deployment_id": {"any_": [deployment_id]}}}):
        by_state.setdefault(run["state"]["name"], set()).add(run["id"])
    return by_state


@pytest.mark.slow
def test_rerun_reuses_the_server_and_skips_nights_missed_without_a_worker(scheduled):
    root, info = scheduled
    [deployment] = api(scheduled, "/deployments/filter",
                       {"deployments": {"name": {"any_": ["nightly"]}}})
    server_pid = (info.home / "server.pid").read_text()
    scheduling.stop(info.home, "worker", 30)
    now = datetime.now(ZoneInfo("UTC"))
    api(scheduled, f"/deployments/{deployment['id']}/schedule",  # the scheduler's backfill
        {"start_time": (now - timedelta(days=3)).isoformat(),
         "end_time": (now - timedelta(minutes=1)).isoformat()})
    missed = {run["id"] for run in api(scheduled, "/flow_runs/filter", {"flow_runs": {
        "deployment_id": {"any_": [deployment["id"]]},
        "expected_start_time": {"before_": now.isoformat()},
        "state": {"type": {"any_": ["SCHEDULED"]}}}})}
    assert len(missed) == 3  # 02:00 Berlin on each of the last three days

    again = scheduling.schedule(root, info.home, port=info.port, pool="advrag-test")
    assert (again.api_url, (info.home / "server.pid").read_text()) == (info.api_url, server_pid)
    assert scheduling.running(info.home, "worker") is not None
    assert missed <= runs_by_state(scheduled, deployment["id"]).get("Cancelled", set())
    with pytest.raises(scheduling.SchedulingError, match="advrag unschedule"):
        scheduling.schedule(root, info.home, port=info.port + 1, pool="advrag-test")


REPORT_A_FLOW = """
from advrag.cli import _environment
_environment()
from prefect import flow
@flow(name="reuse-probe")
def probe():
    return 1
probe()
"""


@pytest.mark.slow
def test_a_command_reports_to_the_running_server_instead_of_starting_one(scheduled):
    """An `advrag` command run by hand (no PREFECT_API_URL) finds the server of its
    PREFECT_HOME, so its flow runs show in that server's UI."""
    root, info = scheduled
    assert scheduling.local_api(info.home) == info.api_url
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    subprocess.run([sys.executable, "-c", REPORT_A_FLOW], cwd=root, check=True, timeout=300,
                   env=env | {"PREFECT_HOME": str(info.home)})
    [run] = api(scheduled, "/flow_runs/filter", {"flows": {"name": {"any_": ["reuse-probe"]}}})
    assert run["state"]["type"] == "COMPLETED"


@pytest.mark.slow
def test_unschedule_stops_worker_then_server(scheduled):
    _, info = scheduled
    assert scheduling.unschedule(info.home) == ["worker", "server"]
    assert not (info.home / "worker.pid").exists() and not (info.home / "server.pid").exists()
    assert not (info.home / scheduling.API_URL_FILE).exists()  # commands start their own again
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{info.api_url}/health", timeout=2)
    assert scheduling.unschedule(info.home) == []
