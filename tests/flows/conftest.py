"""Real storage servers for the flow tests: a moto S3 server and a throwaway PostgreSQL.

Both bind 127.0.0.1 only, live for the test session, and are always stopped.
PostgreSQL comes from Debian's ``postgresql`` package, installed here when it
is missing; the tests that need it skip (saying why) only if apt cannot.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from system_packages import apt_install


@dataclass
class S3:
    """A running S3-compatible endpoint and a boto3 client on it."""

    endpoint: str
    client: object

    def bucket(self, name: str) -> str:
        """Create a bucket (fresh per test: the server lives for the session)."""
        self.client.create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> set[str]:
        """Every object key in ``bucket``."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return {obj["Key"] for page in pages for obj in page.get("Contents", [])}


@pytest.fixture(scope="session")
def moto_endpoint():
    """moto's S3 server mode in a thread on 127.0.0.1 (port 0: the OS picks a free one)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture()
def s3(moto_endpoint, monkeypatch, tmp_path) -> S3:
    """Point boto3, MLflow and DVC subprocesses at the moto server with dummy credentials."""
    import boto3

    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "MLFLOW_S3_ENDPOINT_URL": moto_endpoint,
           # no ~/.aws profile of the machine may leak in
           "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    return S3(moto_endpoint, boto3.client("s3", endpoint_url=moto_endpoint))


def _postgres_bin() -> Path | None:
    """Directory of the newest installed PostgreSQL server binaries, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_uri():
    """A throwaway PostgreSQL cluster on 127.0.0.1 with a database ``mlflow``; its URI.

    The server refuses to run as root, so as root the cluster belongs to the
    ``postgres`` user (``runuser``) in a /tmp dir it owns (pytest's tmp dirs
    are root-only). Trust auth on loopback, fsync off: data is disposable.
    """
    import psycopg2

    bin_dir = _postgres_bin() or apt_install("postgresql", _postgres_bin, timeout_s=600)
    as_user: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="advrag-pg-"))
    if os.geteuid() == 0:
        # runuser lives in /usr/sbin, which a minimal PATH (env -i, some CI shells) leaves out
        runuser = shutil.which("runuser", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
        as_user = [runuser or "runuser", "-u", "postgres", "--"]
        shutil.chown(work, "postgres", "postgres")
    data, port = work / "data", _free_port()

    def pg(tool: str, *args: str) -> None:
        subprocess.run([*as_user, str(bin_dir / tool), *args], check=True, capture_output=True,
                       text=True, timeout=120)

    started = False
    try:
        pg("initdb", "-D", str(data), "-U", "advrag", "--auth=trust", "--no-locale",
           "-E", "UTF8", "--no-sync")
        pg("pg_ctl", "-D", str(data), "-l", str(work / "server.log"), "-w", "-t", "60", "-o",
           f"-h 127.0.0.1 -p {port} -k {work} -F", "start")
        started = True
        conn = psycopg2.connect(host="127.0.0.1", port=port, user="advrag", dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE mlflow")
        conn.close()
        yield f"postgresql://advrag@127.0.0.1:{port}/mlflow"
    except subprocess.CalledProcessError as err:
        log = (work / "server.log").read_text()[-2000:] if (work / "server.log").exists() else ""
        pytest.fail(f"{' '.join(err.cmd)} failed: {err.stderr}\n{log}")
    finally:
        if started:
            pg("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="package")
def prefect_server():
    """One temporary Prefect server (SQLite in tmp) for the flow tests that ask for it, shared
    by all of them: each start costs ~15 s here. No test reads runs back from it; the
    scheduling tests talk to their own server by its URL."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
