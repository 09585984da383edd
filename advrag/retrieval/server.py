"""HTTP retrieval server speaking Search-R1's protocol (``search_r1/search/retrieval_server.py``).

``POST /retrieve`` takes ``{"queries": [str, ...], "topk": int, "return_scores": bool}``
(``topk`` optional, defaulting to the server's ``--topk``; ``return_scores``
defaults to false) and answers ``{"result": [...]}`` with one list per query:
``[{"document": {"id", "contents"}, "score": float}, ...]`` when
``return_scores`` is true, else ``[{"id", "contents"}, ...]``. ``GET /health``
answers ``{"status": "ok", "queued_queries": n}``. Malformed requests get FastAPI's 422 whose
``detail`` names the field and the rule it broke.

With a UR² summariser (``--summarise``, ``advrag.retrieval.summary``) each
query's list holds ONE document, ``{"id": "summary", "contents": "Summary\n<text>"}``,
whose text is the summary or the fallback message, or the raw top-k documents
when summarising failed; the response adds ``"summaries": [kind, ...]`` (one of
``summary``, ``fallback``, ``raw`` per query) and ``GET /health`` adds the
summariser's counts. Search-R1 clients read the summary as a document titled
"Summary".

Departure from Search-R1: it also accepts an empty ``queries`` list and
``topk`` ≤ 0; here both are 422s.

Serving many rollout workers: requests are not served one at a time. Every
request's queries go on one queue, and a single worker thread (the only one that
touches the retriever, whose tokenizer is not safe to share across threads) takes
everything waiting, up to ``max_batch_queries`` queries, and answers it with one
search per distinct ``topk``: the encoder and FAISS see batches. Limits
(``ServerLimits``): more than ``max_queries`` queries in one request is a 413,
a query longer than ``max_query_chars`` characters a 422, both naming the limit
and before any work; a request still waiting for its answers after
``timeout_s`` is a 504 (its queries are dropped if no search has started on
them). ``GET /metrics`` serves Prometheus' text format: requests by path and
status, request latency, queries searched, batch sizes and the queue's depth.

Bounds: ``topk`` above ``max_topk`` is a 422 (the index would otherwise return the whole
corpus to one request), and a request body over ``max_body_bytes`` a 413, refused from its
``Content-Length`` or as soon as that many bytes have arrived, before the rest is read.

Access: bound to loopback (the default) anyone on this machine may ask. Bound beyond it
(``--host 0.0.0.0`` for rollout workers on other machines) the server refuses to start
without ``ADVRAG_RETRIEVER_TOKEN``, and then every request but ``/health`` must carry it as
``Authorization: Bearer <token>`` (401 otherwise); advrag's clients send it from the same
variable (``advrag.common.bearer``), and only over https or to loopback. The server answers
only the Host names it serves (``allowed_hosts``: the loopback names, the address it is bound
to, and each ``--allowed-host``; 403 for any other), so a page from a name that resolves to
127.0.0.1 (DNS rebinding) cannot read it through a browser; bound to a wildcard address it
needs ``--allowed-host`` for the names its clients use. ``--ssl-certfile``/``--ssl-keyfile``
serve https.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from advrag.common.bearer import TOKEN_ENV, is_loopback, retriever_token
from advrag.common.hosts import LOOPBACK_NAMES, HostChecked, allowed_hosts, refuse
from advrag.common.types import Passage, Retriever
from advrag.retrieval.limits import LIMIT_HELP, ServerLimits

if TYPE_CHECKING:
    from fastapi import FastAPI

    from advrag.common.types import Summary
    from advrag.config.flows import SummaryConfig
    from advrag.retrieval.summary import LLMSummariser, ModelLoader

DEFAULT_TOPK = 3
KNOWN_PATHS = ("/retrieve", "/health", "/metrics")
"""Paths the metrics name; any other is counted as ``other`` (no label per probe URL)."""


class RetrieveRequest(BaseModel):
    """Body of ``POST /retrieve`` (Search-R1's QueryRequest, validated)."""

    queries: list[str] = Field(min_length=1, description="Non-empty list of query strings.")
    topk: int | None = Field(default=None, ge=1, description="Passages per query (>= 1).")
    return_scores: bool = Field(default=False, description="Wrap each hit as {document, score}.")


def _format_hits(hits: list[Passage], return_scores: bool) -> list[dict[str, Any]]:
    """One query's hits in Search-R1's shape."""
    documents = [{"id": p.id, "contents": p.contents} for p in hits]
    if not return_scores:
        return documents
    return [{"document": d, "score": p.score} for d, p in zip(documents, hits)]


def _summarised(hits: list[Passage], summary: Summary) -> list[Passage]:
    """A query's hits as served: the summary as one document, or the raw hits when it failed."""
    return hits if summary.kind == "raw" else [Passage("summary", f"Summary\n{summary.text}")]


class _Metrics:
    """The server's Prometheus metrics, in a registry of its own (one per app)."""

    def __init__(self, queued: Callable[[], int]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("advrag_retrieval_requests", "HTTP requests by path and status",
                                ["path", "status"], registry=self.registry)
        self.latency = Histogram("advrag_retrieval_request_seconds", "Request latency by path",
                                 ["path"], registry=self.registry,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                                          10, 30))
        self.queries = Counter("advrag_retrieval_queries", "Queries searched",
                               registry=self.registry)
        self.batches = Histogram("advrag_retrieval_batch_queries", "Queries per search batch",
                                 registry=self.registry,
                                 buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
        Gauge("advrag_retrieval_queued_queries", "Queries waiting for a search",
              registry=self.registry).set_function(queued)

    def searched(self, queries: int) -> None:
        """One batch of ``queries`` searched."""
        self.queries.inc(queries)
        self.batches.observe(queries)

    def text(self) -> tuple[bytes, str]:
        """The exposition and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _too_long(queries: Sequence[str], limit: int) -> list[dict[str, Any]]:
    """FastAPI-shaped 422 details for each query longer than ``limit`` characters."""
    return [{"loc": ["body", "queries", i], "type": "string_too_long",
             "msg": f"query {i} has {len(q)} characters; the limit is {limit} (--max-query-chars)"}
            for i, q in enumerate(queries) if len(q) > limit]


def _topk_too_big(topk: int, limit: int) -> list[dict[str, Any]]:
    """FastAPI-shaped 422 detail for a ``topk`` above ``limit``."""
    return [{"loc": ["body", "topk"], "type": "less_than_equal",
             "msg": f"topk {topk} is above the limit {limit} (--max-topk)"}]


def create_app(
    retriever: Retriever, default_topk: int = DEFAULT_TOPK, summariser: LLMSummariser | None = None,
    limits: ServerLimits = ServerLimits(), token: str | None = None,
    allowed_hosts: Sequence[str] = LOOPBACK_NAMES,
) -> FastAPI:
    """FastAPI app serving ``retriever`` (summarised by ``summariser``) on ``/retrieve``,
    ``/health`` and ``/metrics``, searching in batches within ``limits``; with ``token``,
    every request but ``/health`` must carry it as a bearer token (401 otherwise); a request
    whose Host is not among ``allowed_hosts`` gets 403, a body over the limit 413."""
    import asyncio
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, HTTPException, Response

    from advrag.retrieval.batching import BatchingSearcher

    if not 1 <= default_topk <= limits.max_topk:
        raise ValueError(f"default_topk must be between 1 and max_topk = {limits.max_topk}, "
                         f"got {default_topk}.")
    searcher: BatchingSearcher | None = None
    metrics = _Metrics(lambda: searcher.queued_queries if searcher else 0)
    searcher = BatchingSearcher(retriever, max_batch_queries=limits.max_batch_queries,
                                summariser=summariser, on_batch=metrics.searched)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        searcher.close()

    app = FastAPI(title="advrag retrieval server", lifespan=lifespan)
    app.add_middleware(_Bounded, max_bytes=limits.max_body_bytes)  # the innermost: runs last
    if token:
        app.add_middleware(_Authorised, token=token)
    app.add_middleware(HostChecked, allowed=allowed_hosts)
    app.add_middleware(_Measured, metrics=metrics)

    @app.get("/health", response_model=None)
    def health() -> dict[str, Any]:
        """Liveness probe: answers once the retriever is loaded (with the summariser's counts)."""
        status = {"status": "ok", "queued_queries": searcher.queued_queries}
        if summariser is None:
            return status
        return status | {"summaries": summariser.stats.as_dict()}

    @app.get("/metrics")
    def prometheus() -> Response:
        """Prometheus' text format: requests, latency, queries, batch sizes, queue depth."""
        body, content_type = metrics.text()
        return Response(body, media_type=content_type)

    @app.post("/retrieve", response_model=None)
    async def retrieve(request: RetrieveRequest) -> Response:
        """Top-k passages (or their summary) for each query, in Search-R1's response shape."""
        if len(request.queries) > limits.max_queries:
            raise HTTPException(413, f"{len(request.queries)} queries in one request; the limit "
                                f"is {limits.max_queries} (--max-queries): split the request")
        if too_long := _too_long(request.queries, limits.max_query_chars):
            raise HTTPException(422, too_long)
        if (request.topk or default_topk) > limits.max_topk:
            raise HTTPException(422, _topk_too_big(request.topk, limits.max_topk))
        future = searcher.submit(request.queries, request.topk or default_topk)
        try:
            results, summaries = await asyncio.wait_for(asyncio.wrap_future(future),
                                                        limits.timeout_s)
        except TimeoutError:
            raise HTTPException(504, f"no answer within {limits.timeout_s:g} s (--timeout-s): "
                                "the server is overloaded; retry, or add servers") from None
        if summaries is None:
            return _json({"result": [_format_hits(hits, request.return_scores)
                                     for hits in results]})
        served = [_summarised(hits, s) for hits, s in zip(results, summaries)]
        return _json({"result": [_format_hits(hits, request.return_scores) for hits in served],
                      "summaries": [s.kind for s in summaries]})

    return app


def _json(body: dict[str, Any]):
    """``body`` as a JSON response, encoded once (FastAPI's encoder walks every passage first)."""
    from fastapi import Response

    return Response(json.dumps(body, ensure_ascii=False), media_type="application/json")


class _Measured:
    """ASGI middleware: every HTTP request's status and latency into ``metrics`` (a plain ASGI
    wrapper: Starlette's ``@app.middleware`` costs a task per request)."""

    def __init__(self, app, metrics: _Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            path = scope["path"] if scope["path"] in KNOWN_PATHS else "other"
            self.metrics.requests.labels(path, str(status[0])).inc()
            self.metrics.latency.labels(path).observe(time.perf_counter() - started)


class _Bounded:
    """ASGI middleware: a request body over ``max_bytes`` gets 413, from its Content-Length
    or as soon as that many bytes have arrived; the rest is never read."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = (f"the request body is over {self.max_bytes} bytes (--max-body-bytes): "
                   "split the request")
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await refuse(send, 413, too_big)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                await refuse(send, 413, too_big)
                return
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class _Authorised:
    """ASGI middleware: a request without ``Authorization: Bearer <token>`` gets 401, but
    ``/health`` (a load balancer's probe carries no secret). Compared in constant time."""

    def __init__(self, app, token: str) -> None:
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send) -> None:
        import hmac

        if scope["type"] != "http" or scope["path"] == "/health":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"detail": f"missing or wrong bearer token: send {TOKEN_ENV} as "
                                     "'Authorization: Bearer <token>'"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})


def require_token_beyond_loopback(host: str) -> str | None:
    """The token a server bound to ``host`` requires (``ADVRAG_RETRIEVER_TOKEN``); beyond
    loopback there must be one: anyone who reaches the port could read the corpus."""
    token = retriever_token()
    if token is None and not is_loopback(host):
        raise ValueError(f"--host {host} opens the retrieval server to the network: set "
                         f"{TOKEN_ENV} (its clients send the same value as a bearer token), "
                         "or bind 127.0.0.1")
    return token


def tls_files(certfile: str | None, keyfile: str | None) -> dict[str, str]:
    """uvicorn's TLS settings for ``--ssl-certfile``/``--ssl-keyfile``: both or neither."""
    if (certfile is None) != (keyfile is None):
        raise ValueError("--ssl-certfile and --ssl-keyfile go together: give both to serve "
                         "https, or neither")
    for path in (p for p in (certfile, keyfile) if p is not None):
        if not os.path.isfile(path):
            raise ValueError(f"no such file {path}: give the PEM certificate and its key")
    return {"ssl_certfile": certfile, "ssl_keyfile": keyfile} if certfile else {}


def serve(
    index_dir: str | os.PathLike,
    host: str = "127.0.0.1",
    port: int = 8000,
    kind: str = "dense",
    default_topk: int = DEFAULT_TOPK,
    summary: SummaryConfig | None = None,
    load_model: ModelLoader | None = None,
    limits: ServerLimits = ServerLimits(),
    hosts: Sequence[str] = (),
    tls: dict[str, str] | None = None,
) -> None:
    """Load the retriever in ``index_dir`` and serve it with uvicorn until interrupted.

    ``hosts``: Host names answered besides the loopback names and ``host`` (``allowed_hosts``);
    ``tls``: ``tls_files``' settings (https); ``limits``: request caps, the wait before a 504
    and the batch size (``ServerLimits``);
    ``summary``: UR²'s summariser settings (None or ``summarise: false`` = raw documents);
    ``load_model``: how a local summariser model is loaded (``make_summariser``; the
    ``advrag serve-retriever`` command passes UR²'s, ``main`` none: endpoints only).

    Sets ``OMP_WAIT_POLICY=PASSIVE`` (unless set) before torch/faiss start their
    OpenMP pools: on a few cores shared with a trainer, spinning idle threads made
    each MiniLM query batch ~40x slower.
    """
    token = require_token_beyond_loopback(host)
    answered = allowed_hosts(host, hosts)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import uvicorn

    from advrag.retrieval.retriever import load_retriever
    from advrag.retrieval.summary import make_summariser

    summariser = make_summariser(summary, load_model=load_model) if summary is not None else None
    app = create_app(load_retriever(index_dir, kind=kind), default_topk=default_topk,
                     summariser=summariser, limits=limits, token=token, allowed_hosts=answered)
    uvicorn.run(app, host=host, port=port, log_level="info", **(tls or {}))


@contextmanager
def serving(index_dir: str | os.PathLike, kind: str = "dense", host: str = "127.0.0.1",
            start_timeout_s: float = 300.0, hosts: Sequence[str] = ()) -> Iterator[str]:
    """This module's server on ``index_dir`` in a child process bound to ``host`` (a free port)
    answering ``hosts`` besides loopback's (``allowed_hosts``) for the ``with`` block; yields
    its loopback URL once ``/health`` answers, stops it after."""
    import socket
    import subprocess
    import sys
    import tempfile

    from advrag.common.health import answers

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = tempfile.TemporaryFile(mode="w+")  # a pipe would fill up and stall the server
    proc = subprocess.Popen([sys.executable, "-m", "advrag.retrieval.server", "--index-dir",
                             str(index_dir), "--kind", kind, "--host", host, "--port",
                             str(port), *(f"--allowed-host={h}" for h in hosts)],
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"the retrieval server on {index_dir} exited "
                                   f"({proc.returncode}): {log.read()[-1500:]}")
            if answers(f"{url}/health"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the retrieval server on {index_dir} did not answer within "
                                   f"{start_timeout_s:g} s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


SUMMARY_OPTIONS = ("endpoint", "model", "max_new_tokens", "timeout_s", "cache_dir")
"""``SummaryConfig`` fields the command lines expose as ``--summary-<field>``."""


def summary_config(summarise: bool, **options: Any) -> SummaryConfig:
    """Command-line summariser options as a validated ``SummaryConfig`` (unset ones keep defaults)."""
    from advrag.config.flows import SummaryConfig

    return SummaryConfig(summarise=summarise, **{k: v for k, v in options.items() if v is not None})


def _add_summary_options(parser: argparse.ArgumentParser) -> None:
    """``--summarise`` and ``--summary-<field>``, helped by ``SummaryConfig``'s descriptions."""
    from advrag.config.flows import SummaryConfig

    fields = SummaryConfig.model_fields
    parser.add_argument("--summarise", action="store_true", help=fields["summarise"].description)
    for name in SUMMARY_OPTIONS:
        flag = "--summary-" + name.replace("_", "-")
        parser.add_argument(flag, dest=f"summary_{name}", help=fields[name].description)




def _add_limit_options(parser: argparse.ArgumentParser) -> None:
    """``--max-queries`` … ``--max-batch-queries``, defaulting to ``ServerLimits``'."""
    defaults = ServerLimits()
    for name, help_text in LIMIT_HELP.items():
        default = getattr(defaults, name)
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default,
                            help=f"{help_text} (default {default})")


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``python -m advrag.retrieval.server --index-dir DIR [--kind bm25] [--port N]``."""
    parser = argparse.ArgumentParser(description="Search-R1-compatible retrieval server.")
    parser.add_argument("--index-dir", required=True, help="built by the DVC index/bm25 stage")
    parser.add_argument("--kind", choices=["dense", "bm25"], default="dense")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--topk", type=int, default=DEFAULT_TOPK, help="default when a request has none"
    )
    parser.add_argument("--allowed-host", action="append", default=[], dest="allowed_hosts",
                        help="a Host name clients use, besides loopback's and --host (repeat)")
    parser.add_argument("--ssl-certfile", help="PEM certificate: serve https (with --ssl-keyfile)")
    parser.add_argument("--ssl-keyfile", help="the certificate's PEM key")
    _add_summary_options(parser)
    _add_limit_options(parser)
    args = parser.parse_args(argv)
    if args.summarise and args.summary_endpoint is None:
        parser.error("--summarise without --summary-endpoint loads a local model, which this "
                     "module does not: run `advrag serve-retriever` (same options)")
    options = {name: getattr(args, f"summary_{name}") for name in SUMMARY_OPTIONS}
    try:
        require_token_beyond_loopback(args.host)
        allowed_hosts(args.host, args.allowed_hosts)
        tls = tls_files(args.ssl_certfile, args.ssl_keyfile)
        limits = ServerLimits(**{name: getattr(args, name) for name in LIMIT_HELP})
    except ValueError as err:
        parser.error(str(err))
    serve(args.index_dir, host=args.host, port=args.port, kind=args.kind, default_topk=args.topk,
          summary=summary_config(args.summarise, **options), limits=limits,
          hosts=args.allowed_hosts, tls=tls)


if __name__ == "__main__":
    main()
