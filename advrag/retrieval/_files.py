"""File helpers of the retrieval stages: corpus reading and linking (atomic
writes live in ``advrag.common.fileio``)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

PASSAGES_FILE = "passages.jsonl"


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link ``src`` to ``dst`` (no extra disk), copying when linking is impossible."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def iter_corpus(path: str | os.PathLike) -> Iterator[dict[str, str]]:
    """Yield ``{"id", "contents"}`` rows of a FlashRAG JSONL corpus, checking each line."""
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(
            f"Corpus file {source} does not exist; run the ingest/chunk stage "
            "(`dvc repro`) or pass the path of a FlashRAG JSONL corpus."
        )
    with source.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{source}:{line_no}: not valid JSON ({exc}).") from exc
            if not isinstance(row, dict) or "id" not in row or "contents" not in row:
                raise ValueError(
                    f"{source}:{line_no}: expected a JSON object with 'id' and 'contents' "
                    "(FlashRAG corpus format, contents = 'title\\ntext')."
                )
            yield {"id": str(row["id"]), "contents": str(row["contents"])}
