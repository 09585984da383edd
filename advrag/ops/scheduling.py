"""`advrag schedule` / `unschedule`: a local Prefect server, the work pool, the deployments, a worker.

Everything binds to 127.0.0.1 and keeps its state in ``PREFECT_HOME``
(``.prefect/`` in the project): the server's SQLite database, and for each
background process a pid file and a log (``server.pid``/``server.log``,
``worker.pid``/``worker.log``). The worker runs under ``advrag.ops.supervise``, which
starts it again when it exits. ``schedule`` is re-runnable: live processes are
reused and the deployments re-registered (Prefect then re-queues their future
runs). When it has to start the worker, the nights missed meanwhile are
cancelled, not replayed back to back. ``unschedule`` stops the worker before
the server, so the worker never polls a dying API.

Processes are found again through their pid files; a pid is only signalled
if ``/proc`` shows a Prefect process under it (Linux), so a stale file never
kills an unrelated program that reused the number.
"""

from __future__ import annotations

import base64
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import httpx

from advrag.common.health import answers

HOST = "127.0.0.1"


class SchedulingError(RuntimeError):
    """A Prefect command or process failed; the message says which and where its log is."""


@dataclass(frozen=True)
class Scheduled:
    """Where the local scheduler lives and how long its server took to answer."""

    ui_url: str
    api_url: str
    port: int
    pool: str
    deployments: tuple[str, ...]
    server_start_s: float
    home: Path


CREDENTIAL_FILE = "auth-string"
"""In PREFECT_HOME: the project's Prefect credential (``project_credential``), mode 0600."""
API_URL_FILE = "api-url"
"""In PREFECT_HOME while a server started from it runs (`advrag schedule`, `advrag ui`): its API
URL, which every `advrag` command then reports to instead of starting a temporary server."""


def api_url(port: int) -> str:
    """The API URL of a local server on ``port``."""
    return f"http://{HOST}:{port}/api"


def record_api(home: Path, url: str) -> None:
    """Leave ``url`` in ``home`` for `advrag` commands to find (``local_api``)."""
    (home / API_URL_FILE).write_text(f"{url}\n")


def local_api(home: Path) -> str | None:
    """The API URL of the server recorded in ``home`` when it answers its health check now;
    None when none was recorded or it is gone (a stale record is removed)."""
    path = home / API_URL_FILE
    if not path.is_file():
        return None
    url = path.read_text().strip()
    if answers(f"{url}/health"):
        return url
    path.unlink(missing_ok=True)
    return None


def schedule(root: Path, home: Path, *, port: int = 4200, pool: str = "advrag-local",
             deployments: tuple[str, ...] = ("nightly",), timeout_s: float = 180) -> Scheduled:
    """Server → work pool → deployments (from ``root``/prefect.yaml) → worker."""
    home = home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    env = prefect_env(home, port)
    started = time.monotonic()
    ensure_started(home, "server", server_command(port), env, root)
    wait_healthy(api_url(port), timeout_s, home)
    server_start_s = time.monotonic() - started
    record_api(home, api_url(port))
    ensure_pool(pool, env, root)
    names = [arg for name in deployments for arg in ("-n", name)]
    run_cli(["--no-prompt", "deploy", *names, "--pool", pool], env, root)
    if running(home, "worker") is None:
        skip_missed_runs(api_url(port), project_credential(home))
    ensure_started(home, "worker", [*supervised(), *prefect_cli(), "worker", "start", "--pool",
                                    pool, "--type", "process", "--limit", "1",
                                    "--install-policy", "never"], env, root)
    return Scheduled(f"http://{HOST}:{port}", api_url(port), port, pool, tuple(deployments),
                     server_start_s, home)


def unschedule(home: Path, timeout_s: float = 30) -> list[str]:
    """Stop the worker, then the server; returns what was stopped."""
    stopped = []
    for name in ("worker", "server"):
        if stop(home.resolve(), name, timeout_s):
            stopped.append(name)
    (home / API_URL_FILE).unlink(missing_ok=True)
    return stopped


def server_command(port: int, host: str = HOST) -> list[str]:
    """The command that serves Prefect on ``host``:``port``, answering only its Host names
    (``advrag.ops.prefect_server``)."""
    return [sys.executable, "-m", "advrag.ops.prefect_server", "--host", host, "--port",
            str(port)]


def prefect_env(home: Path, port: int) -> dict[str, str]:
    """This environment plus project-local Prefect state, the local API and its guards."""
    return {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": api_url(port),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
            **guarded(f"http://{HOST}:{port}"), **credential_env(home)}


def project_credential(home: Path) -> str:
    """The project's Prefect credential, kept in ``home``/auth-string (made on first use,
    mode 0600): the servers advrag starts require it and its clients send it (HTTP Basic),
    so no other user of this machine, and no web page, can drive the local worker."""
    path = home / CREDENTIAL_FILE
    if not path.exists():
        _write_new_credential(path)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise SchedulingError(f"{path} is readable by other users (mode {mode:o}): "
                              f"`chmod 600 {path}`, or delete it to make a new one")
    credential = path.read_text().strip()
    if not credential:
        raise SchedulingError(f"{path} is empty: delete it to make a new one")
    return credential


def _write_new_credential(path: Path) -> None:
    """A fresh random credential at ``path`` (0600), whole or not at all: written aside, then
    linked into place, so a concurrent first use keeps whichever landed first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"{secrets.token_urlsafe(32)}\n")
    try:
        os.link(aside, path)
    except FileExistsError:
        pass
    finally:
        aside.unlink()


def credential_env(home: Path) -> dict[str, str]:
    """Prefect's settings for the project's credential: required by the server, sent by the
    client."""
    credential = project_credential(home)
    return {"PREFECT_SERVER_API_AUTH_STRING": credential, "PREFECT_API_AUTH_STRING": credential}


def guarded(origin: str) -> dict[str, str]:
    """Settings that keep other web pages away from a local Prefect server at ``origin``.

    Prefect's defaults answer every origin (CORS ``*``) and check no CSRF token, so any page
    open in the user's browser could create a deployment that the local worker runs. Here
    CORS allows only the server's own origin (its UI) and CSRF protection is on: each
    state-changing request needs a token from ``/csrf-token``, which Prefect's UI and clients
    fetch and a page from another origin cannot read. The servers bind to loopback, answer
    only loopback Host names (``advrag.ops.prefect_server``) and require the project's
    credential (``credential_env``).
    """
    return {"PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS": origin,
            "PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED": "true"}


def basic_auth(credential: str) -> dict[str, str]:
    """The Authorization header Prefect's server checks: ``Basic`` and the credential in
    base64 (Prefect's own scheme, without a user name)."""
    return {"Authorization": "Basic " + base64.b64encode(credential.encode()).decode()}


def api_headers(url: str, credential: str, client: str = "advrag-schedule") -> dict[str, str]:
    """Headers for our own raw requests to the Prefect API at ``url``: the credential and a
    CSRF token."""
    auth = basic_auth(credential)
    response = httpx.get(f"{url}/csrf-token", params={"client": client}, headers=auth,
                         timeout=30)
    response.raise_for_status()
    return {**auth, "Prefect-Csrf-Token": response.json()["token"],
            "Prefect-Csrf-Client": client}


def supervised() -> list[str]:
    """The prefix that restarts a command when it exits (``advrag.ops.supervise``): a worker
    that gave up on a stalled server comes back instead of leaving the nights unrun."""
    return [sys.executable, "-m", "advrag.ops.supervise", "--"]


def prefect_cli() -> list[str]:
    """The Prefect CLI of this interpreter (not whichever ``prefect`` is on PATH)."""
    return [sys.executable, "-m", "prefect"]


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run a Prefect CLI command to completion; raise with its output when it fails."""
    proc = subprocess.run([*prefect_cli(), *args], env=env, cwd=cwd, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SchedulingError(f"`prefect {' '.join(args)}` failed (exit {proc.returncode}):\n"
                              f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def ensure_pool(pool: str, env: dict[str, str], cwd: Path) -> None:
    """Create the process work pool unless it exists."""
    try:
        run_cli(["work-pool", "inspect", pool], env, cwd)
    except SchedulingError:
        run_cli(["work-pool", "create", pool, "--type", "process"], env, cwd)


def ensure_started(home: Path, name: str, cmd: list[str], env: dict[str, str], cwd: Path) -> int:
    """Reuse our live ``name`` process if it runs exactly ``cmd``, else start it.

    A live one started with other options (another port or pool) is an error
    rather than a silent mismatch: ``advrag unschedule`` first.
    """
    pid = running(home, name)
    if pid is None:
        return start_background(home, name, cmd, env, cwd)
    recorded = (home / f"{name}.cmd").read_text() if (home / f"{name}.cmd").is_file() else ""
    if recorded != shlex.join(cmd):
        raise SchedulingError(f"a Prefect {name} (pid {pid}) from {home} already runs as "
                              f"`{recorded}`; stop it with `advrag unschedule` first")
    return pid


def skip_missed_runs(url: str, credential: str) -> int:
    """Cancel the auto-scheduled runs whose time passed while no worker ran; returns how many.

    A restart after days off then starts with the next night instead of
    replaying every missed one (Prefect would run them late, back to back).
    Runs triggered by hand are kept. Each cancelled run says why.
    """
    now, headers = datetime.now(timezone.utc).isoformat(), api_headers(url, credential)
    runs = httpx.post(f"{url}/flow_runs/filter", timeout=30, headers=headers, json={"flow_runs": {
        "state": {"type": {"any_": ["SCHEDULED"]}}, "expected_start_time": {"before_": now}}})
    runs.raise_for_status()
    missed = [run for run in runs.json() if run["auto_scheduled"]]
    for run in missed:
        httpx.post(f"{url}/flow_runs/{run['id']}/set_state", timeout=30, headers=headers, json={
            "state": {"type": "CANCELLED", "message": "missed: no worker was running at its "
                      "time (skipped by advrag schedule)"}, "force": True}).raise_for_status()
    return len(missed)


def start_background(home: Path, name: str, cmd: list[str], env: dict[str, str], cwd: Path) -> int:
    """Start ``cmd`` detached in its own session, logging to ``<name>.log``; write
    ``<name>.pid`` and ``<name>.cmd``."""
    with open(home / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    (home / f"{name}.cmd").write_text(shlex.join(cmd))
    (home / f"{name}.pid").write_text(f"{proc.pid}\n")
    return proc.pid


def wait_healthy(url: str, timeout_s: float, home: Path) -> None:
    """Poll ``/health`` until the server answers; fail early if it exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if answers(f"{url}/health"):
            return
        if running(home, "server") is None:
            raise SchedulingError(f"the Prefect server exited; see {home / 'server.log'}")
        time.sleep(0.5)
    raise SchedulingError(f"the Prefect server did not answer {url}/health within {timeout_s:.0f} s; "
                          f"see {home / 'server.log'}")


def running(home: Path, name: str) -> int | None:
    """The pid of our live ``name`` process, or None (a stale pid file is removed)."""
    pid_file = home / f"{name}.pid"
    try:
        pid = int(pid_file.read_text())
    except (FileNotFoundError, ValueError):
        return None
    if _is_prefect(pid):
        return pid
    pid_file.unlink(missing_ok=True)
    return None


def stop(home: Path, name: str, timeout_s: float) -> bool:
    """SIGTERM the process group, SIGKILL it after ``timeout_s``; False if nothing ran."""
    pid = running(home, name)
    if pid is None:
        return False
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _is_prefect(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _is_prefect(pid):
        _signal_group(pid, signal.SIGKILL)
    (home / f"{name}.pid").unlink(missing_ok=True)
    (home / f"{name}.cmd").unlink(missing_ok=True)
    return True


def _signal_group(pid: int, sig: int) -> None:
    """Signal the session ``start_background`` created (its group id is the leader's pid)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _is_prefect(pid: int, proc_root: Path = Path("/proc"), settle_s: float = 2.0) -> bool:
    """A live (not zombie) process whose command line runs Prefect.

    A process caught inside its exec (as right after ``Popen`` returns: the kernel closes the
    pipe ``Popen`` waits on before it sets up the new command line) shows an empty one; it is
    read again for up to ``settle_s`` seconds rather than taken for someone else's, whose pid
    file ``running`` would remove while the process goes on untracked."""
    proc = proc_root / str(pid)
    deadline = time.monotonic() + settle_s
    while True:
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (proc / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return False
        if cmdline or state == "Z" or time.monotonic() >= deadline:
            return state != "Z" and b"prefect" in cmdline
        time.sleep(0.01)