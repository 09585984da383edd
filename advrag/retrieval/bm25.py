"""Sparse BM25 index (bm25s) over a FlashRAG corpus.

Tokenisation: lower-case, ``\\w+`` runs (so numbers and one-letter words count),
optionally dropping a small English stopword list. No stemming. Queries and
passages go through the same function. ``search`` returns exactly
``min(k, n)`` hits per query, including zero-score ones when fewer passages
share a term with the query (so every retriever returns the same count).

A BM25 index directory holds ``meta.json`` (format, n, stopwords, k1, b),
``bm25/`` (the bm25s files) and, when built by :func:`build_bm25_dir`,
``passages.jsonl`` with the passage texts in row order.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from advrag.common.fileio import atomic_dir
from advrag.retrieval._files import PASSAGES_FILE, iter_corpus, link_or_copy

BM25_FORMAT = "advrag-bm25-index/1"
META_FILE = "meta.json"
_MODEL_DIR = "bm25"
_TOKEN = re.compile(r"\w+")
_STOPWORD_TEXT = """
a an and are as at be by did do does for from has have how in is it its of on or that the
this to was were what when where which who with
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def tokenize(text: str, stopwords: bool = True) -> list[str]:
    """Lower-case word tokens of ``text``, without stopwords when ``stopwords`` is True."""
    tokens = _TOKEN.findall(text.lower())
    return [t for t in tokens if t not in STOPWORDS] if stopwords else tokens


def _token_ids(texts: Sequence[str], stopwords: bool) -> tuple[list[list[int]], dict[str, int]]:
    """Token ids per text with a sorted vocabulary.

    bm25s numbers tokens in set-iteration order, which changes with Python's
    hash seed; a sorted vocabulary makes the saved index byte-identical run
    to run, so DVC sees the same output hash for the same corpus.
    """
    docs = [tokenize(t, stopwords) for t in texts]
    vocab = {token: i for i, token in enumerate(sorted({tok for doc in docs for tok in doc}))}
    return [[vocab[tok] for tok in doc] for doc in docs], vocab


class BM25Index:
    """A bm25s model plus the tokenisation settings it was built with."""

    def __init__(self, model: Any, stopwords: bool) -> None:
        self.model = model
        self.stopwords = stopwords

    @classmethod
    def build(
        cls,
        texts: Sequence[str],
        stopwords: bool = True,
        k1: float = 1.5,
        b: float = 0.75,
        progress: bool = True,
    ) -> BM25Index:
        """Index ``texts`` (row i = passage i) with BM25 parameters ``k1`` and ``b``."""
        import bm25s

        if len(texts) == 0:
            raise ValueError("Cannot build a BM25 index over zero passages.")
        model = bm25s.BM25(k1=k1, b=b)
        model.index(_token_ids(texts, stopwords), show_progress=progress)
        return cls(model, stopwords)

    @property
    def n(self) -> int:
        """Number of indexed passages."""
        return int(self.model.scores["num_docs"])

    def search(
        self, queries: Sequence[str], k: int, progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` BM25 hits per query: ``(scores, ids)``, both ``(n_queries, min(k, n))``, best first."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}.")
        tokens = [tokenize(q, self.stopwords) for q in queries]
        ids, scores = self.model.retrieve(tokens, k=min(k, self.n), show_progress=progress)
        return scores.astype(np.float32), ids.astype(np.int64)

    def save(self, out_dir: str | os.PathLike) -> None:
        """Write the index to a fresh directory ``out_dir`` (replaced atomically if it exists)."""
        with atomic_dir(out_dir) as tmp:
            self._write(tmp)

    def _write(self, directory: Path) -> None:
        """Write ``meta.json`` and the bm25s files into an existing directory."""
        self.model.save(str(directory / _MODEL_DIR), show_progress=False)
        meta = {
            "format": BM25_FORMAT,
            "n": self.n,
            "stopwords": self.stopwords,
            "k1": self.model.k1,
            "b": self.model.b,
        }
        (directory / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, index_dir: str | os.PathLike) -> BM25Index:
        """Load a directory written by :meth:`save` or :func:`build_bm25_dir`."""
        import bm25s

        meta_path = Path(index_dir) / META_FILE
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"No BM25 index at {index_dir} ({META_FILE} missing); build it with "
                "advrag.retrieval.bm25.build_bm25_dir(chunks_path, out_dir) (the DVC `bm25` stage)."
            )
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != BM25_FORMAT:
            raise ValueError(f"{index_dir} is not a BM25 index (format {meta.get('format')!r}).")
        model = bm25s.BM25.load(str(Path(index_dir) / _MODEL_DIR), show_progress=False)
        return cls(model, meta["stopwords"])


def build_bm25_dir(
    chunks_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    stopwords: bool = True,
    progress: bool = True,
) -> BM25Index:
    """DVC stage: BM25-index a FlashRAG JSONL file into one directory with its ``passages.jsonl``."""
    texts = [row["contents"] for row in iter_corpus(chunks_path)]
    index = BM25Index.build(texts, stopwords=stopwords, progress=progress)
    with atomic_dir(out_dir) as tmp:
        index._write(tmp)
        link_or_copy(Path(chunks_path), tmp / PASSAGES_FILE)
    return index
