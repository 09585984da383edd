"""HTTP retrieval server speaking Search-R1's protocol (``search_r1/search/retrieval_server.py``).

``POST /retrieve`` takes ``{"queries": [str, ...], "topk": int, "return_scores": bool}``
(``topk`` optional, defaulting to the server's ``--topk``; ``return_scores``
defaults to false) and answers ``{"result": [...]}`` with one list per query:
``[{"document": {"id", "contents"}, "score": float}, ...]`` when
``return_scores`` is true, else ``[{"id", "contents"}, ...]``. ``GET /health``
answers ``{"status": "ok"}``. Malformed requests get FastAPI's 422 whose
``detail`` names the field and the rule it broke.

With a UR² summariser (``--summarise``, ``advrag.retrieval.summary``) each
query's list holds ONE document, ``{"id": "summary", "contents": "Summary\n<text>"}``,
whose text is the summary or the fallback message, or the raw top-k documents
when summarising failed; the response adds ``"summaries": [kind, ...]`` (one of
``summary``, ``fallback``, ``raw`` per query) and ``GET /health`` adds the
summariser's counts. Search-R1 clients read the summary as a document titled
"Summary".

Departure from Search-R1: it also accepts an empty ``queries`` list and
``topk`` ≤ 0; here both are 422s. Searches are serialised with a lock (the
Hugging Face tokenizer inside the embedder is not safe to share across threads).

Run: ``advrag serve-retriever --index-dir processed/index --port 8000`` or
``python -m advrag.retrieval.server --index-dir processed/index --port 8000``
(add ``--summarise [--summary-endpoint http://host:port] ...`` to summarise; a
local summariser model, no endpoint, only through ``advrag serve-retriever``:
retrieval imports neither ``models`` nor ``engines``, so the command hands the
loader in).
"""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from advrag.common.types import Passage, Retriever

if TYPE_CHECKING:
    from fastapi import FastAPI

    from advrag.common.types import Summary
    from advrag.config.flows import SummaryConfig
    from advrag.retrieval.summary import LLMSummariser, ModelLoader

DEFAULT_TOPK = 3


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


def create_app(
    retriever: Retriever, default_topk: int = DEFAULT_TOPK, summariser: LLMSummariser | None = None
) -> FastAPI:
    """FastAPI app serving ``retriever`` (summarised by ``summariser``) on ``/retrieve``, ``/health``."""
    from fastapi import FastAPI

    if default_topk < 1:
        raise ValueError(f"default_topk must be >= 1, got {default_topk}.")
    app = FastAPI(title="advrag retrieval server")
    lock = threading.Lock()

    @app.get("/health", response_model=None)
    def health() -> dict[str, Any]:
        """Liveness probe: answers once the retriever is loaded (with the summariser's counts)."""
        if summariser is None:
            return {"status": "ok"}
        return {"status": "ok", "summaries": summariser.stats.as_dict()}

    @app.post("/retrieve", response_model=None)
    def retrieve(request: RetrieveRequest) -> dict[str, list[Any]]:
        """Top-k passages (or their summary) for each query, in Search-R1's response shape."""
        with lock:
            results = retriever.search(request.queries, request.topk or default_topk)
            summaries = summariser and summariser.summarise(list(zip(request.queries, results)))
        if summaries is None:
            return {"result": [_format_hits(hits, request.return_scores) for hits in results]}
        served = [_summarised(hits, s) for hits, s in zip(results, summaries)]
        return {"result": [_format_hits(hits, request.return_scores) for hits in served],
                "summaries": [s.kind for s in summaries]}

    return app


def serve(
    index_dir: str | os.PathLike,
    host: str = "127.0.0.1",
    port: int = 8000,
    kind: str = "dense",
    default_topk: int = DEFAULT_TOPK,
    summary: SummaryConfig | None = None,
    load_model: ModelLoader | None = None,
) -> None:
    """Load the retriever in ``index_dir`` and serve it with uvicorn until interrupted.

    ``summary``: UR²'s summariser settings (None or ``summarise: false`` = raw documents);
    ``load_model``: how a local summariser model is loaded (``make_summariser``; the
    ``advrag serve-retriever`` command passes UR²'s, ``main`` none: endpoints only).

    Sets ``OMP_WAIT_POLICY=PASSIVE`` (unless set) before torch/faiss start their
    OpenMP pools: on a few cores shared with a trainer, spinning idle threads made
    each MiniLM query batch ~40x slower.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import uvicorn

    from advrag.retrieval.retriever import load_retriever
    from advrag.retrieval.summary import make_summariser

    summariser = make_summariser(summary, load_model=load_model) if summary is not None else None
    app = create_app(load_retriever(index_dir, kind=kind), default_topk=default_topk,
                     summariser=summariser)
    uvicorn.run(app, host=host, port=port, log_level="info")


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
    _add_summary_options(parser)
    args = parser.parse_args(argv)
    if args.summarise and args.summary_endpoint is None:
        parser.error("--summarise without --summary-endpoint loads a local model, which this "
                     "module does not: run `advrag serve-retriever` (same options)")
    options = {name: getattr(args, f"summary_{name}") for name in SUMMARY_OPTIONS}
    serve(args.index_dir, host=args.host, port=args.port, kind=args.kind, default_topk=args.topk,
          summary=summary_config(args.summarise, **options))


if __name__ == "__main__":
    main()
