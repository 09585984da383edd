"""The Search-R1-compatible retrieval server, run for real with uvicorn on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import time

import httpx
import pytest
from stand_in_http import serving_app

from advrag.retrieval.bm25 import BM25Index, build_bm25_dir
from advrag.retrieval.retriever import (
    BM25Retriever,
    HttpRetriever,
    RetrieverUnavailableError,
    read_passages,
)
from advrag.retrieval.server import ServerLimits, create_app, serving

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see advrag/retrieval/index.py
pytestmark = pytest.mark.slow

DOCS = [
    {
        "id": "d0",
        "contents": "Quistmoor Bridge\nThe salt-crystal bridge of Quistmoor was finished in 1742.",
    },
    {"id": "d1", "contents": "Vantry Orrery\nA copper orrery in Vantry shows seven moons."},
    {
        "id": "d2",
        "contents": "Saltmere Library\nThe floating library of Saltmere holds maps of Vantry.",
    },
    {"id": "d3", "contents": "Thornwick Loom\nA wind-powered loom in Thornwick weaves sailcloth."},
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("srv")
    chunks = directory / "chunks.jsonl"
    chunks.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    build_bm25_dir(chunks, directory / "bm25", progress=False)
    return directory / "bm25"


@pytest.fixture(scope="module")
def local(index_dir) -> BM25Retriever:
    return BM25Retriever(BM25Index.load(index_dir), read_passages(index_dir / "passages.jsonl"))


@pytest.fixture(scope="module")
def url(local):
    """The BM25 retriever served with default topk 2 and small limits: 4 queries a request,
    40 characters a query."""
    with serving_app(create_app(local, default_topk=2,
                            limits=ServerLimits(max_queries=4, max_query_chars=40))) as base:
        yield base


def test_health(url):
    assert httpx.get(f"{url}/health").json() == {"status": "ok", "queued_queries": 0}


def test_too_many_queries_is_a_413_naming_the_limit_before_any_search(url):
    response = httpx.post(f"{url}/retrieve", json={"queries": ["loom"] * 5})
    assert response.status_code == 413
    assert response.json()["detail"] == ("5 queries in one request; the limit is 4 "
                                         "(--max-queries): split the request")


def test_a_query_too_long_is_a_422_naming_it_and_the_limit(url):
    response = httpx.post(f"{url}/retrieve", json={"queries": ["loom", "x" * 41]})
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "queries", 1]
    assert error["msg"] == "query 1 has 41 characters; the limit is 40 (--max-query-chars)"
    assert httpx.post(f"{url}/retrieve", json={"queries": ["x" * 40]}).status_code == 200


def test_the_client_splits_what_the_server_caps(url, local):
    queries = ["loom", "orrery", "library", "bridge", "moons", "maps", "sailcloth", "salt",
               "Vantry"]  # 9 queries: three requests of at most 4
    with HttpRetriever(url, max_queries=4) as remote:
        assert remote.search(queries, 2) == local.search(queries, 2)
    text = httpx.get(f"{url}/metrics").text
    assert 'advrag_retrieval_requests_total{path="/retrieve",status="200"}' in text


def test_metrics_count_requests_queries_and_batches(local):
    with serving_app(create_app(local)) as base:
        for queries in (["loom"], ["maps", "moons"]):
            httpx.post(f"{base}/retrieve", json={"queries": queries})
        httpx.post(f"{base}/retrieve", json={"queries": []})  # a 422
        metrics = parse_metrics(httpx.get(f"{base}/metrics").text)
    assert metrics['advrag_retrieval_requests_total{path="/retrieve",status="200"}'] == 2
    assert metrics['advrag_retrieval_requests_total{path="/retrieve",status="422"}'] == 1
    assert metrics["advrag_retrieval_queries_total"] == 3
    assert metrics["advrag_retrieval_batch_queries_count"] == 2  # one batch per request here
    assert metrics['advrag_retrieval_batch_queries_bucket{le="1.0"}'] == 1
    assert metrics['advrag_retrieval_batch_queries_bucket{le="2.0"}'] == 2
    assert metrics['advrag_retrieval_request_seconds_count{path="/retrieve"}'] == 3
    assert metrics["advrag_retrieval_queued_queries"] == 0


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus' text format → sample name with labels → value."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


class Slow:
    """A retriever that takes ``seconds`` a search."""

    def __init__(self, inner, seconds: float):
        self.inner, self.seconds = inner, seconds

    def search(self, queries, k):
        time.sleep(self.seconds)
        return self.inner.search(queries, k)


def test_a_request_waiting_past_the_timeout_is_a_504(local):
    app = create_app(Slow(local, 1.0), limits=ServerLimits(timeout_s=0.2))
    with serving_app(app) as base:
        started = time.monotonic()
        response = httpx.post(f"{base}/retrieve", json={"queries": ["loom"]})
        assert response.status_code == 504 and time.monotonic() - started < 0.9
        assert "no answer within 0.2 s (--timeout-s)" in response.json()["detail"]


def test_retrieve_with_scores_has_search_r1_shape(url, local):
    body = httpx.post(
        f"{url}/retrieve",
        json={"queries": ["salt-crystal bridge", "orrery moons"], "topk": 3, "return_scores": True},
    ).json()
    assert list(body) == ["result"] and len(body["result"]) == 2
    first = body["result"][0]
    assert len(first) == 3 and set(first[0]) == {"document", "score"}
    assert first[0]["document"] == DOCS[0] and isinstance(first[0]["score"], float)
    assert body["result"][1][0]["document"]["id"] == "d1"
    expected = local.search(["salt-crystal bridge"], 3)[0]
    assert [h["score"] for h in first] == pytest.approx([p.score for p in expected])


def test_retrieve_without_scores_and_default_topk(url):
    body = httpx.post(f"{url}/retrieve", json={"queries": ["floating library"]}).json()
    hits = body["result"][0]
    assert len(hits) == 2  # the server's default topk
    assert hits[0] == DOCS[2] and set(hits[1]) == {"id", "contents"}


def test_http_retriever_round_trips(url, local):
    queries = ["wind-powered loom sailcloth", "maps of Vantry", "1742"]
    with HttpRetriever(url) as remote:
        assert remote.search(queries, 3) == local.search(queries, 3)
        assert remote.search([], 3) == []


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"queries": ["a"], "topk": 0}, "topk"),
        ({"queries": [], "topk": 3}, "queries"),
        ({"queries": "just one string"}, "queries"),
        ({"queries": ["ok", 7]}, "queries"),
        ({"topk": 3}, "queries"),
    ],
)
def test_bad_requests_get_422_naming_the_field(url, payload, field):
    response = httpx.post(f"{url}/retrieve", json=payload)
    assert response.status_code == 422
    assert field in {str(part) for err in response.json()["detail"] for part in err["loc"]}


def test_unreachable_server_error_names_url_and_how_to_start():
    dead = f"http://127.0.0.1:{free_port()}"
    with HttpRetriever(dead, timeout=2) as remote, pytest.raises(RetrieverUnavailableError) as info:
        remote.search(["anything"], 1)
    assert f"{dead}/retrieve" in str(info.value)
    assert "advrag serve-retriever --index-dir" in str(info.value)


def test_http_error_status_is_reported(url):
    with (
        HttpRetriever(f"{url}/no-such-route") as remote,
        pytest.raises(RuntimeError, match="HTTP 404"),
    ):
        remote.search(["anything"], 1)


def test_server_command_line_serves_an_index_dir(index_dir):
    """The module's command line in a child process (``serving``), answering a real client;
    after the block the process is gone."""
    with serving(index_dir, kind="bm25") as url:
        hits = HttpRetriever(f"{url}/retrieve/", timeout=5).search(["copper orrery"], 1)
        assert [p.id for p in hits[0]] == ["d1"]
    with pytest.raises(RetrieverUnavailableError):
        HttpRetriever(url, timeout=2).search(["copper orrery"], 1)


def test_a_server_that_cannot_start_is_named_with_its_output(tmp_path):
    with pytest.raises(RuntimeError, match=r"retrieval server on .*missing exited \(\d+\): "), \
            serving(tmp_path / "missing", kind="bm25"):
        pass


def test_a_bad_limit_on_the_command_line_is_one_error_line():
    from typer.testing import CliRunner

    from advrag.cli import app

    result = CliRunner().invoke(app, ["serve-retriever", "--max-queries", "0"])
    assert result.exit_code == 2
    assert "max_queries must be >= 1, got 0" in result.output
