"""The retrieval server beyond loopback: it will not start without ADVRAG_RETRIEVER_TOKEN,
and then every request but /health needs it as a bearer token; advrag's clients send it."""

from __future__ import annotations

import httpx
import pytest
from stand_in_http import serving_app
from test_retrieval_server import index_dir, local  # noqa: F401 (fixtures)

from advrag.common.bearer import TOKEN_ENV, is_loopback
from advrag.retrieval.retriever import HttpRetriever
from advrag.retrieval.server import create_app, require_token_beyond_loopback, serving

TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def guarded_url(local):  # noqa: F811 (the fixture imported above)
    with serving_app(create_app(local, default_topk=2, token=TOKEN)) as base:
        yield base


def ask(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{url}/retrieve", json={"queries": ["copper orrery"], "topk": 1},
                      headers=headers or {}, timeout=30)


def test_a_request_without_the_token_or_with_another_gets_401(guarded_url):
    for headers in (None, {"Authorization": "Bearer guess"}, {"Authorization": TOKEN}):
        refused = ask(guarded_url, headers)
        assert refused.status_code == 401, headers
        assert TOKEN_ENV in refused.json()["detail"]
        assert refused.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{guarded_url}/metrics", timeout=30).status_code == 401
    answered = ask(guarded_url, {"Authorization": f"Bearer {TOKEN}"})
    assert answered.status_code == 200
    assert answered.json()["result"][0][0]["id"] == "d1"


def test_health_stays_open_for_probes(guarded_url):
    assert httpx.get(f"{guarded_url}/health", timeout=30).json()["status"] == "ok"


def test_the_client_sends_the_token_of_its_environment(guarded_url, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(RuntimeError, match=f"HTTP 401.*{TOKEN_ENV}"):
        HttpRetriever(guarded_url).search(["copper orrery"], 1)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert [p.id for p in HttpRetriever(guarded_url).search(["copper orrery"], 1)[0]] == ["d1"]


def test_verls_agent_loop_sends_it_too(guarded_url, monkeypatch):
    import asyncio

    agent_loop = pytest.importorskip("advrag.engines.verl.agent_loop")  # verl: `make verl`
    client = agent_loop.RetrievalClient(guarded_url)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(RuntimeError, match="HTTP 401"):
        asyncio.run(client.search("copper orrery", 1))
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    passages, _ = asyncio.run(client.search("copper orrery", 1))
    assert [p.id for p in passages] == ["d1"]


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.5.0.1", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("10.0.3.7", False), ("::", False), ("retriever.internal", False)])
def test_loopback_is_only_this_machine(host, loopback):
    assert is_loopback(host) is loopback


def test_beyond_loopback_without_a_token_the_server_will_not_start(monkeypatch):
    from typer.testing import CliRunner

    from advrag.cli import app

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert require_token_beyond_loopback("127.0.0.1") is None
    with pytest.raises(ValueError, match=f"--host 0.0.0.0 opens .* set {TOKEN_ENV}"):
        require_token_beyond_loopback("0.0.0.0")
    result = CliRunner().invoke(app, ["serve-retriever", "--host", "0.0.0.0",
                                      "--index-dir", "/nonexistent"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"set {TOKEN_ENV}" in result.output
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert require_token_beyond_loopback("0.0.0.0") == TOKEN


@pytest.mark.slow
def test_a_server_on_every_interface_answers_only_the_tokens_holder(index_dir, monkeypatch):  # noqa: F811
    """The real command bound to 0.0.0.0 with a token: advrag's client with the same
    variable is answered, one without it gets 401."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with serving(index_dir, kind="bm25", host="0.0.0.0", hosts=["retriever.internal"]) as url:
        hits = HttpRetriever(url, timeout=5).search(["copper orrery"], 1)
        assert [p.id for p in hits[0]] == ["d1"]
        assert ask(url).status_code == 401
