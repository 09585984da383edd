"""Records I/O and the local benchmark loaders (FlashRAG jsonl, Search-R1 parquet)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from advrag.datasets.loaders import (
    STANDARD_DATASETS,
    dataset_file,
    load_corpus,
    load_qa,
    resolve_dataset,
)
from advrag.datasets.records import DataFormatError, QARecord, read_jsonl, write_jsonl

FLASHRAG_ROWS = [
    {"id": "test_0", "question": "who wrote the iliad?", "golden_answers": ["Homer"],
     "metadata": {"source": "demo"}},
    {"id": "test_1", "question": "capital of peru?", "golden_answers": ["Lima", "Lima, Peru"]},
]


def _search_r1_frame() -> pd.DataFrame:
    """Rows shaped like Search-R1's nq_search.py output (FlashRAG columns + verl columns)."""
    prefix = "Answer the given question. ... Question: {}\n"
    rows = []
    for i, row in enumerate(FLASHRAG_ROWS):
        rows.append({
            "id": row["id"], "question": row["question"],
            "golden_answers": row["golden_answers"], "data_source": "nq",
            "prompt": [{"role": "user", "content": prefix.format(row["question"])}],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": row["golden_answers"]}},
            "extra_info": {"split": "test", "index": i},
        })
    return pd.DataFrame(rows)


def test_record_json_round_trip():
    record = QARecord("q1", "Who?", ["A", "B"], {"type": "single"})
    assert record.to_json() == {"id": "q1", "question": "Who?", "golden_answers": ["A", "B"],
                                "metadata": {"type": "single"}}
    assert QARecord.from_json(record.to_json()) == record


def test_record_from_json_names_the_bad_field():
    with pytest.raises(DataFormatError, match="golden_answers"):
        QARecord.from_json({"id": "q", "question": "Q?", "golden_answers": "A"})
    with pytest.raises(DataFormatError, match=r"lacks field\(s\) \['question'\]"):
        QARecord.from_json({"id": "q", "golden_answers": ["A"]})


def test_write_then_read_jsonl(tmp_path):
    path = write_jsonl(tmp_path / "sub" / "qa.jsonl", [QARecord("a", "Q?", ["é"]), {"x": 1}])
    assert path.read_text(encoding="utf-8").splitlines()[0].endswith('"golden_answers": ["é"], '
                                                                     '"metadata": {}}')
    assert read_jsonl(path) == [QARecord("a", "Q?", ["é"]).to_json(), {"x": 1}]
    assert read_jsonl(path, limit=1) == [QARecord("a", "Q?", ["é"]).to_json()]


def test_failed_write_keeps_old_file_and_leaves_no_temp(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", [{"id": "old"}])

    def rows():
        yield {"id": "new"}
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        write_jsonl(path, rows())
    assert read_jsonl(path) == [{"id": "old"}]
    assert [p.name for p in tmp_path.iterdir()] == ["qa.jsonl"]


def test_written_file_permissions_follow_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_jsonl(tmp_path / "a.jsonl", [{"id": "1"}])
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # 0o666 & ~0o022


def test_malformed_line_error_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a"}\n\n{"id": "b",\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.jsonl:3: not valid JSON"):
        read_jsonl(path)
    path.write_text('{"id": "a"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.jsonl:2: expected a JSON object, got list"):
        load_qa(path)


def test_load_flashrag_jsonl(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", FLASHRAG_ROWS)
    records = load_qa(path)
    assert [r.id for r in records] == ["test_0", "test_1"]
    assert records[1].golden_answers == ["Lima", "Lima, Peru"]
    assert records[0].metadata == {"source": "demo"}
    assert records[1].metadata == {}
    assert load_qa(path, limit=1) == records[:1]


def test_load_json_array(tmp_path):
    path = tmp_path / "test.json"
    path.write_text(json.dumps(FLASHRAG_ROWS), encoding="utf-8")
    assert [r.question for r in load_qa(path)] == [r["question"] for r in FLASHRAG_ROWS]


def test_load_search_r1_parquet(tmp_path):
    path = tmp_path / "test.parquet"
    _search_r1_frame().to_parquet(path)
    records = load_qa(path)
    assert [r.golden_answers for r in records] == [["Homer"], ["Lima", "Lima, Peru"]]
    assert records[0].metadata["data_source"] == "nq"
    assert records[0].metadata["extra_info"] == {"split": "test", "index": 0}


def test_search_r1_parquet_without_flashrag_columns(tmp_path):
    path = tmp_path / "train.parquet"
    _search_r1_frame().drop(columns=["id", "question", "golden_answers"]).to_parquet(path)
    records = load_qa(path)
    # id from data_source + extra_info; question after "Question:"; answers from target
    assert records[1].id == "nq_test_1"
    assert records[1].question == "capital of peru?"
    assert records[1].golden_answers == ["Lima", "Lima, Peru"]


def test_row_without_answers_is_named(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"id": "a", "question": "Q?"}])
    with pytest.raises(DataFormatError, match=r"x\.jsonl:1: no gold answers"):
        load_qa(path)


def test_unsupported_suffix_and_missing_file(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("id,question\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"unsupported suffix '\.csv'"):
        load_qa(path)
    with pytest.raises(FileNotFoundError, match="no data file at"):
        load_qa(tmp_path / "nope.jsonl")


def test_load_corpus_both_shapes(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [
        {"id": "1", "contents": "Homer\nHomer was a poet."},
        {"id": 2, "title": "Lima", "text": "Lima is a city."},
    ])
    assert load_corpus(path) == [
        {"id": "1", "contents": "Homer\nHomer was a poet."},
        {"id": "2", "contents": "Lima\nLima is a city."},
    ]
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "1", "body": "?"}])
    with pytest.raises(DataFormatError, match=r"bad\.jsonl:1: a passage needs 'id' and 'contents'"):
        load_corpus(bad)


def test_standard_datasets_table():
    assert sorted(STANDARD_DATASETS) == sorted(
        ["nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle"])
    assert STANDARD_DATASETS["bamboogle"].splits == ("test",)
    assert STANDARD_DATASETS["hotpotqa"].multi_hop


def test_resolve_dataset_finds_flashrag_layout(tmp_path):
    path = write_jsonl(tmp_path / "nq" / "test.jsonl", FLASHRAG_ROWS)
    assert resolve_dataset("nq", "test", tmp_path) == path


def test_resolve_dataset_errors_say_what_and_where(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        resolve_dataset("musique", "dev", tmp_path)
    message = str(err.value)
    assert str(tmp_path / "musique" / "dev.jsonl") in message
    assert "RUC-NLPIR/FlashRAG_datasets" in message
    assert "PeterJinGo/nq_hotpotqa_train" in message
    with pytest.raises(ValueError, match=r"unknown dataset 'squad': .* or a path to a "
                       r"\.json/\.jsonl/\.parquet file"):
        resolve_dataset("squad", "dev", tmp_path)
    with pytest.raises(ValueError, match=r"popqa has no 'train' split; it has \['test'\]"):
        resolve_dataset("popqa", "train", tmp_path)


def test_dataset_file_of_each_kind_of_source(tmp_path):
    nq = write_jsonl(tmp_path / "bench" / "nq" / "test.jsonl", FLASHRAG_ROWS)
    where = {"split": "test", "root": tmp_path / "bench", "world_dir": tmp_path / "world"}
    assert dataset_file("world", **where) == tmp_path / "world" / "test.jsonl"
    assert dataset_file("nq", **where) == nq
    assert dataset_file("/data/my qa/test.jsonl", **where) == Path("/data/my qa/test.jsonl")
    assert dataset_file("../rel/Dev.JSONL", **where) == Path("../rel/Dev.JSONL")
    assert dataset_file("rel/no_suffix", **where) == Path("rel/no_suffix")  # load_qa names it
    assert dataset_file("~/qa.parquet", **where) == Path.home() / "qa.parquet"
    with pytest.raises(ValueError, match="unknown dataset 'hotpot'"):
        dataset_file("hotpot", **where)
