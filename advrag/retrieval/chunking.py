"""Split FlashRAG passages into overlapping word windows.

A passage is ``{"id", "contents": "title\\ntext"}``. Its text (everything after
the first newline) is split on whitespace; windows of at most ``max_words``
words start every ``max_words - overlap`` words, and the last window ends at
the last word (so it may be shorter). Every chunk keeps the title as its first
line and gets the id ``<docid>#<k>`` (k from 0). A passage whose text has at
most ``max_words`` words stays one chunk, unchanged, with its original id.

Conventions: the title does not count towards ``max_words``; a chunk's text is
its words joined by single spaces (inner newlines/whitespace runs collapse); a
passage without a newline is treated as text with no title line.
"""

from __future__ import annotations

import json
import os

from tqdm import tqdm

from advrag.common.fileio import atomic_file
from advrag.retrieval._files import iter_corpus


def _check_window(max_words: int, overlap: int) -> None:
    """Reject window settings that would loop forever or make empty chunks."""
    if max_words < 1:
        raise ValueError(f"max_words must be >= 1, got {max_words}.")
    if not 0 <= overlap < max_words:
        raise ValueError(
            f"overlap must satisfy 0 <= overlap < max_words ({max_words}), got {overlap}."
        )


def window_starts(n_words: int, max_words: int, overlap: int) -> list[int]:
    """Start offsets of the word windows covering ``n_words`` words (one window if it fits)."""
    _check_window(max_words, overlap)
    step = max_words - overlap
    starts = [0]
    while starts[-1] + max_words < n_words:
        starts.append(starts[-1] + step)
    return starts


def chunk_passage(passage: dict[str, str], max_words: int, overlap: int) -> list[dict[str, str]]:
    """Split one FlashRAG passage into ``{"id", "contents"}`` chunks of at most ``max_words`` words."""
    _check_window(max_words, overlap)
    contents = passage["contents"]
    title, sep, text = contents.partition("\n")
    if not sep:
        title, text = "", contents
    words = text.split()
    if len(words) <= max_words:
        return [{"id": passage["id"], "contents": contents}]
    header = f"{title}\n" if sep else ""
    return [
        {"id": f"{passage['id']}#{k}", "contents": header + " ".join(words[s : s + max_words])}
        for k, s in enumerate(window_starts(len(words), max_words, overlap))
    ]


def chunk_corpus_file(
    in_path: str | os.PathLike,
    out_path: str | os.PathLike,
    max_words: int,
    overlap: int,
    progress: bool = True,
) -> int:
    """Chunk a FlashRAG JSONL corpus into a JSONL file of chunks (atomic write); return the chunk count."""
    _check_window(max_words, overlap)
    n_chunks = 0
    with atomic_file(out_path) as tmp, tmp.open("w", encoding="utf-8") as out:
        for passage in tqdm(iter_corpus(in_path), desc="chunk", unit="doc", disable=not progress):
            for chunk in chunk_passage(passage, max_words, overlap):
                out.write(json.dumps(chunk, ensure_ascii=False) + "\n")
                n_chunks += 1
    return n_chunks
