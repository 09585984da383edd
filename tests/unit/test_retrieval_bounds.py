"""The retrieval server's bounds, run for real: topk and body caps, the Host names it answers
(DNS rebinding), https, and a client that sends its token only over https or to loopback."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time

import httpx
import pytest
from stand_in_http import serving_app
from test_retrieval_server import free_port, index_dir, local  # noqa: F401 (fixtures)

from advrag.common.bearer import TOKEN_ENV, auth_headers
from advrag.retrieval.retriever import HttpRetriever
from advrag.retrieval.server import ServerLimits, allowed_hosts, create_app, tls_files


@pytest.fixture(scope="module")
def url(local):  # noqa: F811 (the fixture imported above)
    """The BM25 retriever with topk at most 5 and bodies of at most 2,000 bytes."""
    limits = ServerLimits(max_topk=5, max_body_bytes=2000)
    with serving_app(create_app(local, default_topk=2, limits=limits)) as base:
        yield base


def test_topk_above_its_cap_is_a_422_naming_the_limit(url):
    response = httpx.post(f"{url}/retrieve", json={"queries": ["loom"], "topk": 10**9})
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "topk"]
    assert error["msg"] == "topk 1000000000 is above the limit 5 (--max-topk)"
    assert httpx.post(f"{url}/retrieve", json={"queries": ["loom"], "topk": 5}).status_code == 200


def test_a_body_over_its_cap_is_a_413_before_it_is_read_whole(url):
    declared = httpx.post(f"{url}/retrieve", json={"queries": ["x" * 3000]})
    assert declared.status_code == 413
    assert declared.json()["detail"] == ("the request body is over 2000 bytes "
                                         "(--max-body-bytes): split the request")
    sent = []

    def chunks():  # no Content-Length: chunked, refused once 2,000 bytes have come
        for _ in range(1000):
            sent.append(1)
            yield b'{"queries": ["' if len(sent) == 1 else b"x" * 500

    streamed = httpx.post(f"{url}/retrieve", content=chunks(),
                          headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert len(sent) < 1000  # the client was stopped long before its 500 kB were sent
    small = httpx.post(f"{url}/retrieve", content=b'{"queries": ["loom"]}',
                       headers={"content-type": "application/json"})
    assert small.status_code == 200


@pytest.mark.parametrize("path", ["/retrieve", "/health", "/metrics"])
def test_a_rebinding_host_is_refused_and_loopback_names_are_answered(url, path):
    port = url.rsplit(":", 1)[1]
    call = (lambda **kw: httpx.post(f"{url}{path}", json={"queries": ["loom"]}, **kw)) \
        if path == "/retrieve" else (lambda **kw: httpx.get(f"{url}{path}", **kw))
    refused = call(headers={"Host": f"rebind.example:{port}", "Origin":
                            f"http://rebind.example:{port}"})
    assert refused.status_code == 403
    assert "'rebind.example' is not one this server answers" in refused.json()["detail"]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "[::1]"):
        assert call(headers={"Host": host}).status_code == 200, host


def test_the_names_a_server_answers_follow_its_bind():
    assert allowed_hosts("127.0.0.1") == ("localhost", "127.0.0.1", "::1")
    assert allowed_hosts("10.0.3.7") == ("localhost", "127.0.0.1", "::1", "10.0.3.7")
    assert allowed_hosts("0.0.0.0", ["retriever.internal"])[-1] == "retriever.internal"
    with pytest.raises(ValueError, match="--host 0.0.0.0 answers on every address: name the "
                                         "host names its clients use with --allowed-host"):
        allowed_hosts("0.0.0.0")


def test_the_token_travels_only_over_https_or_to_loopback(monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    bearer = {"Authorization": "Bearer s3cret"}
    for url in ("https://retriever.internal:8000", "http://127.0.0.1:8000", "http://[::1]:80",
                "http://localhost:8000/retrieve"):
        assert auth_headers(url) == bearer, url
    with pytest.raises(ValueError, match=f"{TOKEN_ENV} would travel in clear text to "
                                         "http://10.0.3.7:8000"):
        HttpRetriever("http://10.0.3.7:8000")
    monkeypatch.delenv(TOKEN_ENV)
    assert auth_headers("http://10.0.3.7:8000") == {}  # no token, nothing to leak


def self_signed(tmp_path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, made with openssl."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)


def test_the_command_serves_https_and_the_client_sends_its_token_there(
        index_dir, tmp_path, monkeypatch):  # noqa: F811
    cert, key = self_signed(tmp_path)
    port = free_port()
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    server = subprocess.Popen(
        [sys.executable, "-m", "advrag.retrieval.server", "--index-dir", str(index_dir),
         "--kind", "bm25", "--host", "127.0.0.1", "--port", str(port), "--ssl-certfile", cert,
         "--ssl-keyfile", key], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"https://127.0.0.1:{port}"
        for _ in range(300):
            try:
                httpx.get(f"{url}/health", verify=ssl.create_default_context(cafile=cert),
                          timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        monkeypatch.setenv("SSL_CERT_FILE", cert)  # what a user's client trusts
        with HttpRetriever(url) as remote:
            assert [p.id for p in remote.search(["copper orrery"], 1)[0]] == ["d1"]
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)  # no plain http there
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_tls_needs_both_files():
    with pytest.raises(ValueError, match="--ssl-certfile and --ssl-keyfile go together"):
        tls_files("cert.pem", None)
    with pytest.raises(ValueError, match="no such file nowhere.pem"):
        tls_files("nowhere.pem", "nowhere.pem")
    assert tls_files(None, None) == {}
