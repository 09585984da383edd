"""`advrag ui` / `make ui`: the MLflow and Prefect UIs on the project's stores, bound to 127.0.0.1.

Each server is a child process in its own session (so the terminal's Ctrl-C
reaches only us, and we stop the servers in order), logging to a file next to
its store. A server is ready when its health endpoint answers; the time from
launch to that answer is its start time. A port that already answers the
health check is reported and left alone (``advrag schedule`` runs its own
Prefect server on 4200), so the UI never starts a second server on one database.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from advrag.common.health import answers
from advrag.ops.scheduling import API_URL_FILE, credential_env, guarded, server_command

HOST = "127.0.0.1"
# The MLflow runs view `advrag ui` links to: the benchmark's per-method EM and F1 averaged over
# datasets (``avg/<method>/em|f1``, named in tasks/benchmark.py) as columns.
EM_F1_VIEW = ("em-f1", r"avg/[^/]+/(em|f1)")


class UIError(RuntimeError):
    """A server exited or never answered; the message names its log."""


@dataclass(frozen=True)
class ServerSpec:
    """How to start one server and how to tell that it is ready."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    url: str
    health_url: str
    log: Path
    api_record: Path | None = None
    """Where the API URL is left while this server of ours runs (Prefect's: ``PREFECT_HOME``'s
    ``scheduling.API_URL_FILE``, read by every `advrag` command)."""


@dataclass
class Server:
    """A ready server; ``process`` is None when it was already running (not ours to stop)."""

    spec: ServerSpec
    process: subprocess.Popen | None
    start_s: float | None = field(default=None)


def mlflow_spec(db: Path, artifacts: Path, port: int = 5000) -> ServerSpec:
    """`mlflow server` on a SQLite store, one worker, no job-execution workers."""
    db, artifacts = db.resolve(), artifacts.resolve()
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
           "--artifacts-destination", str(artifacts), "--host", HOST, "--port", str(port),
           "--workers", "1"]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
           "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    url = f"http://{HOST}:{port}"
    return ServerSpec("MLflow", cmd, env, url, f"{url}/health", db.parent / "ui-server.log")


def prefect_spec(home: Path, port: int = 4200) -> ServerSpec:
    """Prefect's server with its SQLite database under ``home`` (PREFECT_HOME), answering
    only loopback Host names, refusing other origins (``scheduling.guarded``) and requiring
    the project's credential (``scheduling.credential_env``)."""
    home = home.resolve()
    url = f"http://{HOST}:{port}"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": f"{url}/api",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", **guarded(url),
           **credential_env(home)}
    return ServerSpec("Prefect", server_command(port, HOST), env, url, f"{url}/api/health",
                      home / "ui-server.log", home / API_URL_FILE)


def launch(spec: ServerSpec) -> Server:
    """Start the server detached from the terminal's process group, or adopt a running one."""
    if answers(spec.health_url):
        return Server(spec, None)
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    with open(spec.log, "ab") as log:
        process = subprocess.Popen(spec.cmd, env=spec.env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   preexec_fn=_die_with_parent)
    return Server(spec, process)


def _die_with_parent() -> None:
    """In the child (Linux): SIGTERM it if we die without stopping it (SIGKILL, crash)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def wait_ready(servers: list[Server], timeout_s: float = 180) -> None:
    """Poll every launched server until each answers; record each one's start time."""
    started = time.monotonic()
    pending = [s for s in servers if s.process is not None]
    while pending:
        for server in list(pending):
            if answers(server.spec.health_url):
                server.start_s = time.monotonic() - started
                pending.remove(server)
            elif server.process.poll() is not None:
                raise UIError(f"the {server.spec.name} server exited (code {server.process.returncode}); "
                              f"see {server.spec.log}")
        if pending and time.monotonic() - started > timeout_s:
            raise UIError(f"the {pending[0].spec.name} server did not answer {pending[0].spec.health_url} "
                          f"within {timeout_s:.0f} s; see {pending[0].spec.log}")
        time.sleep(0.25)


def stop(server: Server, timeout_s: float = 30) -> None:
    """SIGTERM the server's process group, SIGKILL it after ``timeout_s``; adopted ones are left."""
    if server.process is None or server.process.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.process.pid, sig)
        try:
            server.process.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def running(specs: list[ServerSpec], timeout_s: float = 180) -> Iterator[list[Server]]:
    """Start the servers together, yield them once all answer, always stop ours (last first)."""
    servers: list[Server] = []
    try:
        for spec in specs:
            servers.append(launch(spec))
        wait_ready(servers, timeout_s)
        for server in servers:
            if server.spec.api_record is not None and server.process is not None:
                server.spec.api_record.write_text(f"{server.spec.url}/api\n")
        yield servers
    finally:
        for server in reversed(servers):
            stop(server)
            if server.spec.api_record is not None and server.process is not None:
                server.spec.api_record.unlink(missing_ok=True)


def describe(server: Server) -> str:
    """One line for the terminal: name, URL, start time or that it was already running."""
    how = (f"ready in {server.start_s:.1f} s" if server.process is not None
           else "already running, left as is")
    return f"{server.spec.name:8} {server.spec.url}  ({how}; log {server.spec.log})"


def serve(specs: list[ServerSpec], echo=print, notes: tuple[str, ...] = ()) -> None:
    """Start the servers, print their URLs (and ``notes``), block until Ctrl-C (or
    SIGTERM/SIGHUP), then stop them."""
    # Ctrl-C (even where a background job inherited SIGINT ignored), kill, closed terminal
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)
    with running(specs) as servers:
        for server in servers:
            echo(describe(server))
        for note in notes:
            echo(note)
        echo("Ctrl-C stops both.")
        with contextlib.suppress(KeyboardInterrupt):
            while all(s.process is None or s.process.poll() is None for s in servers):
                time.sleep(1)
            gone = [s.spec.name for s in servers if s.process is not None and s.process.poll() is not None]
            echo(f"the {' and '.join(gone)} server exited; stopping the rest.")
