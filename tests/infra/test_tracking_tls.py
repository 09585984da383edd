"""The tracking server's TLS endpoint for real: the certificate script and the nginx site the
cloud-init writes, in front of a real MLflow basic-auth server. A client that trusts the
published certificate and signs in is served; one that does not trust it, or does not sign
in, is refused."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from test_access import rendered_files

pytestmark = pytest.mark.slow

ADMIN, PASSWORD = "admin", "tls-test-password-0123456789"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def nginx_binary() -> str:
    from system_packages import apt_install

    def find() -> str | None:
        return shutil.which("nginx") or next(
            (p for p in ("/usr/sbin/nginx",) if Path(p).is_file()), None)

    return find() or apt_install("nginx", find)


def wait_until(url: str, process: subprocess.Popen, log: Path, verify=True) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            httpx.get(url, timeout=2, verify=verify)
            return
        except httpx.HTTPError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer in 120 s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """(https URL, certificate) of nginx from the rendered site in front of MLflow."""
    tmp = tmp_path_factory.mktemp("tls")
    files = rendered_files("tracking_server")
    script = tmp / "mlflow-tls-certificate"
    script.write_text(files["/usr/local/sbin/mlflow-tls-certificate"])
    subprocess.run(["bash", str(script), "127.0.0.1", str(tmp / "tls")], check=True, timeout=120)
    subprocess.run(["bash", str(script), "127.0.0.1", str(tmp / "tls")], check=True, timeout=120)

    mlflow_port, tls_port = free_port(), free_port()
    (tmp / "auth.ini").write_text(
        f"[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{tmp / 'auth.db'}\n"
        f"admin_username = {ADMIN}\nadmin_password = {PASSWORD}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
    start = files["/usr/local/sbin/mlflow-backend-uri"]
    assert "MLFLOW_FLASK_SERVER_SECRET_KEY=%s" in start  # basic auth refuses to start without
    env = {**os.environ, "MLFLOW_AUTH_CONFIG_PATH": str(tmp / "auth.ini"),
           "MLFLOW_FLASK_SERVER_SECRET_KEY": "0123456789abcdef" * 4,
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    mlflow_log = tmp / "mlflow.log"
    mlflow = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--app-name", "basic-auth", "--host",
         "127.0.0.1", "--port", str(mlflow_port), "--workers", "1", "--backend-store-uri",
         f"sqlite:///{tmp / 'mlflow.db'}", "--artifacts-destination", str(tmp / "artifacts")],
        env=env, stdout=mlflow_log.open("w"), stderr=subprocess.STDOUT)
    site = (files["/etc/nginx/sites-available/mlflow"]
            .replace("listen 5000 ssl", f"listen 127.0.0.1:{tls_port} ssl")
            .replace("127.0.0.1:5001", f"127.0.0.1:{mlflow_port}")
            .replace("/etc/mlflow/tls/", f"{tmp / 'tls'}/"))
    temp = {name: tmp / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
    for path in temp.values():
        path.mkdir()
    (tmp / "nginx.conf").write_text(
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"daemon off;\npid {tmp / 'nginx.pid'};\nerror_log {tmp / 'nginx.log'};\n"
        + "events {}\nhttp {\naccess_log off;\n"
        + "".join(f"{name}_temp_path {path};\n" for name, path in
                  (("client_body", temp["body"]), *((n, temp[n]) for n in
                                                    ("proxy", "fastcgi", "uwsgi", "scgi"))))
        + site + "}\n")
    (tmp / "nginx.log").touch()
    nginx = subprocess.Popen([nginx_binary(), "-c", str(tmp / "nginx.conf"), "-p", str(tmp)],
                             stderr=(tmp / "nginx.log").open("a"))
    try:
        wait_until(f"http://127.0.0.1:{mlflow_port}/health", mlflow, mlflow_log)
        url = f"https://127.0.0.1:{tls_port}"
        wait_until(f"{url}/health", nginx, tmp / "nginx.log", verify=False)
        yield url, tmp / "tls" / "server.crt"
    finally:
        for process in (nginx, mlflow):
            process.terminate()
            process.wait(timeout=30)


def client(url: str, monkeypatch, certificate: Path | None, password: str | None):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    for key, value in {"MLFLOW_TRACKING_SERVER_CERT_PATH": certificate,
                       "MLFLOW_TRACKING_USERNAME": ADMIN if password else None,
                       "MLFLOW_TRACKING_PASSWORD": password}.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, str(value))
    return MlflowClient(tracking_uri=url)


def test_the_certificate_names_the_address_and_localhost_and_is_made_once(endpoint):
    _, certificate = endpoint
    text = subprocess.run(["openssl", "x509", "-in", str(certificate), "-noout", "-text"],
                          check=True, capture_output=True, text=True).stdout
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text
    assert oct(certificate.with_name("server.key").stat().st_mode & 0o777) == "0o600"


def test_a_client_trusting_the_certificate_and_signed_in_is_served(endpoint, monkeypatch):
    url, certificate = endpoint
    mlflow = client(url, monkeypatch, certificate, PASSWORD)
    experiment = mlflow.create_experiment("through-tls")
    assert mlflow.get_experiment(experiment).name == "through-tls"


def test_without_the_certificate_or_the_password_nothing_is_served(endpoint, monkeypatch):
    from mlflow.exceptions import MlflowException

    url, certificate = endpoint
    with pytest.raises(MlflowException, match="CERTIFICATE_VERIFY_FAILED|certificate verify"):
        client(url, monkeypatch, None, PASSWORD).search_experiments()
    with pytest.raises(MlflowException, match="401|Unauthorized|credentials"):
        client(url, monkeypatch, certificate, None).search_experiments()
    with pytest.raises(MlflowException, match="401|Unauthorized|credentials"):
        client(url, monkeypatch, certificate, "wrong-password-0123456789").search_experiments()
    plain = httpx.get(url.replace("https://", "http://") + "/health", timeout=10)
    assert plain.status_code == 400  # nginx: a plain HTTP request to the TLS port
