"""Retrievers implementing :class:`advrag.common.types.Retriever`: dense, BM25 and HTTP.

All three return, per query, ``min(k, corpus size)`` passages best first with
float scores (inner product of normalised embeddings for dense, BM25 score for
sparse, whatever the server reports for HTTP). ``load_retriever`` opens an
index directory written by ``build_index_dir`` or ``build_bm25_dir``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from advrag.common.bearer import auth_headers
from advrag.common.types import Passage, Retriever
from advrag.common.wire import hits_of, retrieve_request, retrieve_url
from advrag.retrieval._files import PASSAGES_FILE, iter_corpus
from advrag.retrieval.bm25 import BM25Index
from advrag.retrieval.embedding import Embedder
from advrag.retrieval.index import DenseIndex, load_index, read_meta

SERVER_HINT = (
    "`advrag serve-retriever --index-dir <index dir> --port <port>` "
    "(or `python -m advrag.retrieval.server`, same options)"
)


class RetrieverUnavailableError(ConnectionError):
    """The retrieval server could not be reached."""


def _check_request(queries: Sequence[str], k: int) -> list[str]:
    """Validate a search call and return the queries as a list."""
    if isinstance(queries, str):
        raise TypeError("queries must be a list of strings, not one string (wrap it: [query]).")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}.")
    return list(queries)


def _hits(scores: np.ndarray, ids: np.ndarray, passages: Sequence[Passage]) -> list[list[Passage]]:
    """Turn ``(n_queries, k)`` score/id arrays into Passages, skipping the -1 'not found' ids."""
    return [
        [
            Passage(passages[i].id, passages[i].contents, float(s))
            for s, i in zip(row_scores, row_ids)
            if i >= 0
        ]
        for row_scores, row_ids in zip(scores.tolist(), ids.tolist())
    ]


def read_passages(path: str | os.PathLike) -> list[Passage]:
    """Read a FlashRAG JSONL file (``id``, ``contents``) into Passages, in file order."""
    return [Passage(row["id"], row["contents"]) for row in iter_corpus(path)]


class DenseRetriever:
    """Embed queries, search a FAISS index, map rows back to passages."""

    def __init__(self, embedder: Embedder, index: DenseIndex, passages: Sequence[Passage]) -> None:
        if len(passages) != index.n:
            raise ValueError(
                f"The index has {index.n} vectors but {len(passages)} passages were given."
            )
        if embedder.dim != index.dim:
            raise ValueError(
                f"Embedder {embedder.spec!r} makes {embedder.dim}-d vectors but the index holds "
                f"{index.dim}-d ones; use the model the index was built with."
            )
        self.embedder, self.index, self.passages = embedder, index, passages

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages per query by inner product of normalised embeddings."""
        queries = _check_request(queries, k)
        if not queries:
            return []
        scores, ids = self.index.search(self.embedder.encode_queries(queries), k)
        return _hits(scores, ids, self.passages)


class BM25Retriever:
    """Lexical retriever over a :class:`BM25Index`."""

    def __init__(self, index: BM25Index, passages: Sequence[Passage]) -> None:
        if len(passages) != index.n:
            raise ValueError(
                f"The BM25 index has {index.n} rows but {len(passages)} passages were given."
            )
        self.index, self.passages = index, passages

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages per query by BM25 score."""
        queries = _check_request(queries, k)
        if not queries:
            return []
        scores, ids = self.index.search(queries, k)
        return _hits(scores, ids, self.passages)


class HttpRetriever:
    """Client of a Search-R1-compatible ``POST /retrieve`` server (e.g. ``advrag.retrieval.server``)."""

    def __init__(self, url: str, timeout: float = 30.0, max_queries: int | None = None) -> None:
        """``max_queries``: most queries sent in one request (default: the server's default
        cap, ``ServerLimits.max_queries``); more are sent in several."""
        import httpx

        from advrag.retrieval.limits import ServerLimits

        self.url = retrieve_url(url)
        self.max_queries = max_queries or ServerLimits().max_queries
        self._client = httpx.Client(timeout=timeout, headers=auth_headers(self.url))

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Send the queries (``max_queries`` a request) and parse the scored Search-R1 responses."""
        queries = _check_request(queries, k)
        step = self.max_queries
        return [hits for start in range(0, len(queries), step)
                for hits in self._search_once(queries[start:start + step], k)]

    def _search_once(self, queries: list[str], k: int) -> list[list[Passage]]:
        """One request's queries → their hits."""
        return hits_of(self._post(retrieve_request(queries, k)), len(queries), self.url)

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST ``payload``; unreachable servers and non-200 answers become clear errors."""
        import httpx

        try:
            response = self._client.post(self.url, json=payload)
        except httpx.TransportError as exc:
            raise RetrieverUnavailableError(
                f"Retrieval server at {self.url} is unreachable ({type(exc).__name__}: {exc}). "
                f"Start one with {SERVER_HINT}, or fix the URL."
            ) from exc
        if response.status_code != 200:
            raise RuntimeError(
                f"{self.url} answered HTTP {response.status_code}: {response.text[:500]}"
            )
        return response.json()

    def close(self) -> None:
        """Close the underlying HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> HttpRetriever:  # noqa: PYI034 (Self needs Python 3.11)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _passages_of(index_dir: Path) -> list[Passage]:
    """Passages stored next to an index, or an error naming the builder that stores them."""
    path = index_dir / PASSAGES_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} missing: build the directory with build_index_dir / build_bm25_dir, "
            "which store the passage texts next to the index."
        )
    return read_passages(path)


def _load_dense(index_dir: Path, embedder: Embedder | None) -> DenseRetriever:
    """Dense retriever from a ``build_index_dir`` directory; the embedder defaults to its meta."""
    index = load_index(index_dir)
    if embedder is None:
        recorded = read_meta(index_dir).get("embedder") or {}
        embedder = Embedder(recorded.get("spec", "minilm"), family=recorded.get("family"))
    return DenseRetriever(embedder, index, _passages_of(index_dir))


def _load_bm25(index_dir: Path, embedder: Embedder | None) -> BM25Retriever:
    """BM25 retriever from a ``build_bm25_dir`` directory (``embedder`` is unused)."""
    return BM25Retriever(BM25Index.load(index_dir), _passages_of(index_dir))


_LOADERS = {"dense": _load_dense, "bm25": _load_bm25}


def load_retriever(
    index_dir: str | os.PathLike, kind: str = "dense", embedder: Embedder | None = None
) -> Retriever:
    """Open an index directory as a retriever of ``kind`` (``"dense"`` or ``"bm25"``)."""
    if kind not in _LOADERS:
        raise ValueError(f"Unknown retriever kind {kind!r}; choose one of {sorted(_LOADERS)}.")
    directory = Path(index_dir)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"Index directory {directory} does not exist; build it with `dvc repro` "
            "(stages `index` for dense, `bm25` for BM25)."
        )
    return _LOADERS[kind](directory, embedder)
