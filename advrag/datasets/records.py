"""QA records and JSON-lines files in the FlashRAG formats.

A QA record is ``{"id", "question", "golden_answers", "metadata"}``; a corpus
passage is ``{"id", "contents"}`` with ``contents = "title\\ntext"``. Files are
JSON lines, one object per line; blank lines are skipped. Writes are atomic: a
temporary file in the target directory is renamed over the target, so a crash
never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advrag.common.fileio import atomic_write_text


class DataFormatError(ValueError):
    """A data file or record does not have the shape this project expects."""


@dataclass
class QARecord:
    """One question with its accepted answers (FlashRAG QA format)."""

    id: str
    question: str
    golden_answers: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the record as a JSON-ready dict in FlashRAG key order."""
        return {
            "id": self.id,
            "question": self.question,
            "golden_answers": list(self.golden_answers),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> QARecord:
        """Build a record from a parsed JSON object, checking field types.

        Raises ``DataFormatError`` naming the missing or mistyped field. Extra
        keys are ignored; a missing ``metadata`` becomes ``{}``.
        """
        if not isinstance(obj, Mapping):
            raise DataFormatError(f"a QA record must be a JSON object, got {type(obj).__name__}")
        missing = [k for k in ("id", "question", "golden_answers") if k not in obj]
        if missing:
            raise DataFormatError(
                f"QA record {obj.get('id', '?')!r} lacks field(s) {missing}; "
                "every record needs 'id', 'question' and 'golden_answers'"
            )
        answers = obj["golden_answers"]
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise DataFormatError(
                f"QA record {obj['id']!r}: 'golden_answers' must be a list of strings, "
                f"got {answers!r}"
            )
        if not isinstance(obj["question"], str):
            raise DataFormatError(f"QA record {obj['id']!r}: 'question' must be a string")
        metadata = obj.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise DataFormatError(f"QA record {obj['id']!r}: 'metadata' must be an object")
        return cls(str(obj["id"]), obj["question"], list(answers), dict(metadata))


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any] | QARecord]) -> Path:
    """Write rows (dicts or ``QARecord``) as JSON lines, atomically; return the path.

    The parent directory is created if needed. Non-ASCII text is kept as is.
    """
    target = Path(path)
    lines = (json.dumps(_as_dict(row), ensure_ascii=False) + "\n" for row in rows)
    atomic_write_text(target, lines)
    return target


def read_jsonl(path: str | os.PathLike[str], limit: int | None = None) -> list[dict[str, Any]]:
    """Read a JSON-lines file into a list of dicts (at most ``limit`` rows).

    Raises ``DataFormatError`` naming the file and 1-based line number of the
    first line that is not valid JSON or not a JSON object.
    """
    source = Path(path)
    rows: list[dict[str, Any]] = []
    with source.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if limit is not None and len(rows) >= limit:
                break
            if line.strip():
                rows.append(parse_json_line(line, source, line_no))
    return rows


def parse_json_line(line: str, source: Path, line_no: int) -> dict[str, Any]:
    """Parse one JSON-lines line into a dict, or raise ``DataFormatError`` naming it."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataFormatError(
            f"{source}:{line_no}: not valid JSON ({err.msg} at column {err.colno}); "
            "fix or delete that line (each line must be one complete JSON object)"
        ) from err
    if not isinstance(obj, dict):
        raise DataFormatError(
            f"{source}:{line_no}: expected a JSON object, got {type(obj).__name__}; "
            "each line must be one object such as {\"id\": ..., ...}"
        )
    return obj


def _as_dict(row: Mapping[str, Any] | QARecord) -> Mapping[str, Any]:
    return row.to_json() if isinstance(row, QARecord) else row


HOP_NAMES = {2: "two-hop", 3: "three-hop"}


def question_kind(record: QARecord) -> str:
    """The world's question kinds: single, two-hop, three-hop (chained) or comparison; a
    user's record keeps its ``metadata["type"]`` (``untyped`` without one)."""
    kind, hops = record.metadata.get("type", "untyped"), record.metadata.get("hops")
    if kind == "compositional" and hops in HOP_NAMES:
        return HOP_NAMES[hops]
    return str(kind)
