"""`make docs`' server (`mkdocs serve` with the ``advrag/ops/docs_hosts.py`` hook) answers its
own Host names and refuses any other (DNS rebinding), tested on the real server."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "advrag/ops/docs_hosts.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_project_docs_use_the_host_check():
    hooks = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))["hooks"]
    assert "advrag/ops/docs_hosts.py" in hooks


def test_the_docs_server_refuses_a_rebinding_host(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/index.md").write_text("# Hello docs\n")
    (tmp_path / "mkdocs.yml").write_text(f"site_name: t\nhooks:\n  - {HOOK}\n")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "mkdocs", "serve", "--dev-addr",
                               f"127.0.0.1:{port}"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                own = httpx.get(url, timeout=5)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
                time.sleep(0.3)
        assert own.status_code == 200 and "Hello docs" in own.text
        assert httpx.get(url, headers={"Host": f"localhost:{port}"}, timeout=5).status_code == 200
        rebound = httpx.get(url, headers={"Host": f"rebind.example:{port}"}, timeout=5)
        assert rebound.status_code == 403
        assert rebound.text.startswith("Host 'rebind.example' is not one this server answers")
    finally:
        server.terminate()
        server.wait(timeout=30)
