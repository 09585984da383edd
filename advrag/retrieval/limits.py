"""What one request to the retrieval server may ask and how long it may wait: the limits the
server enforces (``retrieval.server``) and its client splits requests by
(``retrieval.retriever.HttpRetriever``), in a module of their own so neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask and how long it may wait (``retrieval.server``'s docstring)."""

    max_queries: int = 256
    """Queries in one request; more is a 413 (split the request)."""
    max_query_chars: int = 2000
    """Characters in one query; longer is a 422."""
    timeout_s: float = 30.0
    """Seconds a request may wait for its answers; longer is a 504."""
    max_batch_queries: int = 512
    """Queries the encoder and FAISS see at once."""
    max_topk: int = 100
    """Passages one query may ask for; more is a 422."""
    max_body_bytes: int = 1 << 20
    """Bytes of one request body; more is a 413, refused before the rest is read."""

    def __post_init__(self) -> None:
        for name in ("max_queries", "max_query_chars", "max_batch_queries", "max_topk",
                     "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


LIMIT_HELP = {
    "max_queries": "most queries in one request (more: HTTP 413)",
    "max_query_chars": "most characters in one query (longer: HTTP 422)",
    "timeout_s": "seconds a request may wait for its answers (longer: HTTP 504)",
    "max_batch_queries": "most queries the encoder and FAISS see at once",
    "max_topk": "most passages one query may ask for (more: HTTP 422)",
    "max_body_bytes": "most bytes in one request body (more: HTTP 413)",
}
"""``ServerLimits`` fields the command lines expose, with their help."""
