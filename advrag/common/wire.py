"""The retrieval server's ``POST /retrieve`` wire format (Search-R1's), as both of its clients
write and read it: ``retrieval.retriever.HttpRetriever`` and verl's agent loop
(``engines.verl.agent_loop.RetrievalClient``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from advrag.common.types import Passage


def retrieve_url(url: str) -> str:
    """A server's base URL (or its ``/retrieve`` URL) as its ``/retrieve`` URL."""
    base = url.rstrip("/")
    return base if base.endswith("/retrieve") else f"{base}/retrieve"


def retrieve_request(queries: Sequence[str], k: int) -> dict[str, Any]:
    """The body asking for the top ``k`` scored hits of each query."""
    return {"queries": list(queries), "topk": k, "return_scores": True}


def hits_of(body: Any, queries: int, url: str) -> list[list[Passage]]:
    """Each query's hits in an answer to ``queries`` queries; an answer of another shape is an
    error naming ``url`` and what came back."""
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, list) or len(result) != queries:
        raise RuntimeError(f"{url} answered without one result list per query: {body!r:.300}")
    return [[passage_of(hit) for hit in hits] for hits in result]


def passage_of(hit: dict[str, Any]) -> Passage:
    """One scored Search-R1 hit as a Passage (corpora without ids get an empty id)."""
    document = hit["document"]
    return Passage(str(document.get("id", "")), document["contents"], float(hit["score"]))
