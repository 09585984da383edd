"""Load standard QA benchmarks and corpora from local files (nothing downloads).

Two layouts are understood:

- FlashRAG (hub dataset ``RUC-NLPIR/FlashRAG_datasets``): one JSON object per
  line with ``id``, ``question``, ``golden_answers`` and often ``metadata``;
  laid out as ``<root>/<name>/<split>.jsonl``. Corpora are JSON lines
  ``{"id", "contents"}`` with ``contents = "title\\ntext"``.
- Search-R1 parquet (hub dataset ``PeterJinGo/nq_hotpotqa_train``, made by
  Search-R1's ``scripts/data_process`` from the FlashRAG files): the FlashRAG
  columns plus ``data_source``, ``prompt`` (chat messages), ``ability``,
  ``reward_model`` (``{"style", "ground_truth": {"target": [...]}}``) and
  ``extra_info`` (``{"split", "index"}``). Either source of answers is
  accepted, and a missing ``question`` is recovered from the text after the
  last ``Question:`` in the user prompt.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advrag.datasets.records import DataFormatError, QARecord, read_jsonl

FLASHRAG_HUB = "RUC-NLPIR/FlashRAG_datasets"
SEARCH_R1_HUB = "PeterJinGo/nq_hotpotqa_train"


@dataclass(frozen=True)
class StandardDataset:
    """A benchmark in the FlashRAG layout: its splits and whether it is multi-hop."""

    name: str
    splits: tuple[str, ...]
    multi_hop: bool

    def path(self, root: str | os.PathLike[str], split: str) -> Path:
        """Where the FlashRAG layout keeps ``split``: ``<root>/<name>/<split>.jsonl``."""
        return Path(root) / self.name / f"{split}.jsonl"


STANDARD_DATASETS: dict[str, StandardDataset] = {
    d.name: d
    for d in (
        StandardDataset("nq", ("train", "dev", "test"), multi_hop=False),
        StandardDataset("triviaqa", ("train", "dev", "test"), multi_hop=False),
        StandardDataset("popqa", ("test",), multi_hop=False),
        StandardDataset("hotpotqa", ("train", "dev"), multi_hop=True),
        StandardDataset("2wikimultihopqa", ("train", "dev"), multi_hop=True),
        StandardDataset("musique", ("train", "dev"), multi_hop=True),
        StandardDataset("bamboogle", ("test",), multi_hop=True),
    )
}


def _read_json_array(path: Path, limit: int | None) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataFormatError(
            f"{path}:{err.lineno}: not valid JSON ({err.msg}); a .json file must hold one "
            "array of records (use .jsonl for one record per line)"
        ) from err
    if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
        raise DataFormatError(f"{path}: expected a JSON array of objects; "
                              "rename JSON-lines files to .jsonl")
    return data[:limit]


def _read_parquet(path: Path, limit: int | None) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq  # deferred: pyarrow is slow to import

    table = pq.read_table(path)
    if limit is not None:
        table = table.slice(0, limit)
    return table.to_pylist()


_ROW_READERS: dict[str, Callable[[Path, int | None], list[dict[str, Any]]]] = {
    ".jsonl": read_jsonl,
    ".json": _read_json_array,
    ".parquet": _read_parquet,
}
QA_SUFFIXES = tuple(_ROW_READERS)
"""The QA file formats ``load_qa`` reads."""


def read_rows(path: str | os.PathLike[str], limit: int | None = None) -> list[dict[str, Any]]:
    """The raw rows of a QA file, by its suffix (``QA_SUFFIXES``); clear errors for a missing
    file, an odd suffix or a file its format cannot read (``DataFormatError``)."""
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"no data file at {source}; check the path (see docs/datasets.md)")
    reader = _ROW_READERS.get(source.suffix.lower())
    if reader is None:
        raise DataFormatError(f"{source}: unsupported suffix {source.suffix!r}; "
                              f"use one of {sorted(_ROW_READERS)}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    return reader(source, limit)


def _answers(row: Mapping[str, Any]) -> Any:
    """Gold answers: FlashRAG ``golden_answers`` or Search-R1 ``reward_model`` target."""
    if row.get("golden_answers") is not None:
        return row["golden_answers"]
    truth = (row.get("reward_model") or {}).get("ground_truth")
    return truth.get("target") if isinstance(truth, Mapping) else truth


def _question(row: Mapping[str, Any]) -> Any:
    """The question, or the text after the last ``Question:`` in the user prompt."""
    if row.get("question") is not None:
        return row["question"]
    users = [m.get("content", "") for m in row.get("prompt") or [] if m.get("role") == "user"]
    if users and "Question:" in users[-1]:
        return users[-1].rsplit("Question:", 1)[1].strip()
    return None


def _row_id(row: Mapping[str, Any], fallback: str) -> str:
    if row.get("id") is not None:
        return str(row["id"])
    extra = row.get("extra_info") or {}
    if row.get("data_source") is not None and extra.get("index") is not None:
        return f"{row['data_source']}_{extra.get('split', '')}_{extra['index']}"
    return fallback


def _metadata(row: Mapping[str, Any]) -> dict[str, Any]:
    """FlashRAG ``metadata`` plus the Search-R1 bookkeeping columns when present."""
    raw = row.get("metadata")
    meta = dict(raw) if isinstance(raw, Mapping) else ({} if raw is None else {"metadata": raw})
    for key in ("data_source", "ability", "extra_info"):
        if row.get(key) is not None:
            meta[key] = row[key]
    return meta


def record_from_row(row: Mapping[str, Any], where: str) -> QARecord:
    """Turn one FlashRAG or Search-R1 row into a ``QARecord``.

    ``where`` (``"file:row"``) names the row in errors and is the fallback id.
    """
    question, answers = _question(row), _answers(row)
    if not isinstance(question, str) or not question.strip():
        raise DataFormatError(f"{where}: no question (expected a 'question' column, or a user "
                              "prompt containing 'Question: ...')")
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, (list, tuple)) or not answers:
        raise DataFormatError(f"{where}: no gold answers (expected a non-empty 'golden_answers' "
                              "list or reward_model.ground_truth.target)")
    return QARecord(_row_id(row, where), question, [str(a) for a in answers], _metadata(row))


def load_qa(path: str | os.PathLike[str], limit: int | None = None) -> list[QARecord]:
    """Load QA records from a local .jsonl, .json (array) or .parquet file.

    Reads the first ``limit`` rows (all when None). Raises ``FileNotFoundError``
    for a missing file and ``DataFormatError`` naming the row for a bad one.
    """
    rows = read_rows(path, limit)
    return [record_from_row(row, f"{path}:{i + 1}") for i, row in enumerate(rows)]


def load_corpus(path: str | os.PathLike[str], limit: int | None = None) -> list[dict[str, str]]:
    """Load corpus passages as ``{"id", "contents"}`` dicts (FlashRAG corpus format).

    Rows given as ``{"id", "title", "text"}`` are joined into ``"title\\ntext"``.
    Raises ``DataFormatError`` naming the row when neither shape fits.
    """
    return [_passage(row, f"{path}:{i + 1}") for i, row in enumerate(read_rows(path, limit))]


def _passage(row: Mapping[str, Any], where: str) -> dict[str, str]:
    """``{"id", "contents"}`` from a FlashRAG row or a ``{"id", "title", "text"}`` row."""
    contents = row.get("contents")
    if contents is None and isinstance(row.get("text"), str):
        contents = f"{row.get('title') or ''}\n{row['text']}"
    if row.get("id") is None or not isinstance(contents, str):
        raise DataFormatError(f"{where}: a passage needs 'id' and 'contents' (or 'title' and "
                              f"'text'); got keys {sorted(row)}")
    return {"id": str(row["id"]), "contents": contents}


def is_qa_path(source: str) -> bool:
    """Whether a ``datasets`` entry is a file path (a QA file suffix, or a ``/``), not a name."""
    return Path(source).suffix.lower() in _ROW_READERS or "/" in source


def dataset_file(source: str, split: str, root: str | os.PathLike[str],
                 world_dir: str | os.PathLike[str]) -> Path:
    """The QA file a benchmark ``datasets`` source names.

    'world' is ``<world_dir>/<split>.jsonl``; a source with a QA suffix or a
    ``/`` is a file path (``~`` expanded, relative to the cwd); anything else
    is a standard benchmark, resolved (and checked) by ``resolve_dataset``.
    """
    if source == "world":
        return Path(world_dir) / f"{split}.jsonl"
    if is_qa_path(source):
        return Path(source).expanduser()
    return resolve_dataset(source, split, root)


def resolve_dataset(name: str, split: str, root: str | os.PathLike[str]) -> Path:
    """Path of ``<root>/<name>/<split>.jsonl`` for a standard benchmark, checked to exist.

    Raises ``ValueError`` for an unknown name or split and ``FileNotFoundError``
    saying what was looked for and where to get it.
    """
    spec = STANDARD_DATASETS.get(name)
    if spec is None:
        raise ValueError(f"unknown dataset {name!r}: give 'world', a standard name "
                         f"({', '.join(sorted(STANDARD_DATASETS))}) or a path to a "
                         f"{'/'.join(sorted(_ROW_READERS))} file")
    if split not in spec.splits:
        raise ValueError(f"{name} has no {split!r} split; it has {list(spec.splits)}")
    path = spec.path(root, split)
    if not path.is_file():
        raise FileNotFoundError(
            f"{name}/{split}: looked for {path} and found nothing. Download the FlashRAG "
            f"files from the Hugging Face hub dataset {FLASHRAG_HUB} (folder '{name}/') into "
            f"{Path(root)}, e.g. `huggingface-cli download {FLASHRAG_HUB} --repo-type dataset "
            f"--include '{name}/*' --local-dir {Path(root)}`. Search-R1's training mix "
            f"({SEARCH_R1_HUB}, parquet) loads directly with load_qa(<file>.parquet). "
            "See docs/datasets.md."
        )
    return path
