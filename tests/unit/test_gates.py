"""The Great Expectations data gate: good files pass, each bad pattern is named by row."""

from __future__ import annotations

import json

import pytest

from advrag.curation.gates import (
    DataGateError,
    GateReport,
    require_unleaked,
    require_valid,
    validate_corpus_file,
    validate_qa_file,
    validate_train_file,
)
from advrag.datasets.world import WorldConfig, generate_world, write_world

GOOD_QA = [
    {"id": "q1", "question": "Who wrote the Iliad?", "golden_answers": ["Homer"]},
    {"id": "q2", "question": "Capital of Peru?", "golden_answers": ["Lima", "Lima, Peru"],
     "metadata": {"type": "single"}},
    {"id": "q3", "question": "Year?", "golden_answers": ["1984"]},
]
GOOD_CORPUS = [
    {"id": "1", "contents": "Homer\nHomer was an ancient poet."},
    {"id": "2", "contents": "Lima is the capital of Peru."},  # no title line: all body
]


def _write(path, rows) -> str:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _by_rule(report: GateReport) -> dict[str, tuple[list[int], list[str]]]:
    return {f.rule: (f.lines, f.ids) for f in report.failures}


@pytest.fixture
def good_files(tmp_path):
    return _write(tmp_path / "qa.jsonl", GOOD_QA), _write(tmp_path / "corpus.jsonl", GOOD_CORPUS)


def test_good_files_pass(good_files):
    qa, corpus = good_files
    qa_report, corpus_report = require_valid([qa], [corpus])
    assert qa_report.ok and qa_report.n_rows == 3 and qa_report.failures == []
    assert corpus_report.ok and corpus_report.n_rows == 2
    assert qa_report.render().startswith("[OK]")


@pytest.mark.parametrize(
    ("bad_row", "rule", "ids"),
    [
        ({"id": "q1", "question": "Again?", "golden_answers": ["x"]}, "duplicate_id", ["q1", "q1"]),
        ({"id": "q9", "golden_answers": ["x"]}, "missing_field:question", ["q9"]),
        ({"id": "q9", "question": "Q?"}, "missing_field:golden_answers", ["q9"]),
        ({"question": "Q?", "golden_answers": ["x"]}, "missing_field:id", ["<missing>"]),
        ({"id": "q9", "question": "   ", "golden_answers": ["x"]}, "empty_question", ["q9"]),
        ({"id": "q9", "question": "Q?", "golden_answers": []}, "empty_golden_answers", ["q9"]),
        ({"id": "q9", "question": "Q?", "golden_answers": "x"}, "empty_golden_answers", ["q9"]),
        ({"id": "q9", "question": "Q?", "golden_answers": ["x", 7]}, "bad_golden_answer", ["q9"]),
        ({"id": "q9", "question": "Q?", "golden_answers": [""]}, "bad_golden_answer", ["q9"]),
    ],
)
def test_each_bad_qa_pattern_is_caught(tmp_path, bad_row, rule, ids):
    path = _write(tmp_path / "qa.jsonl", GOOD_QA + [bad_row])
    report = validate_qa_file(path)
    assert not report.ok
    # the bad row is line 4 (three good rows first); a duplicate also flags line 1
    lines = [1, 4] if rule == "duplicate_id" else [4]
    assert _by_rule(report) == {rule: (lines, ids)}


def test_malformed_lines_are_listed_with_line_numbers(tmp_path):
    path = _write(tmp_path / "qa.jsonl", [GOOD_QA[0], '{"id": "q2", "question": "Q?"', "",
                                          '["not", "an", "object"]', GOOD_QA[2]])
    report = validate_qa_file(path)
    # line 3 is blank (skipped); lines 2 and 4 are not JSON objects
    assert _by_rule(report) == {"malformed_json": ([2, 4], [])}
    assert report.n_rows == 4


def test_corpus_rules(tmp_path):
    rows = GOOD_CORPUS + [
        {"id": "3", "contents": "Only A Title\n  "},
        {"id": "4", "contents": ""},
        {"id": "1", "contents": "Dup\nSame id as the first passage."},
        {"id": "6"},
    ]
    report = validate_corpus_file(_write(tmp_path / "corpus.jsonl", rows))
    assert _by_rule(report) == {
        "empty_passage": ([3, 4], ["3", "4"]),
        "duplicate_id": ([1, 5], ["1", "1"]),
        "missing_field:contents": ([6], ["6"]),
    }


def test_missing_and_empty_files(tmp_path):
    assert _by_rule(validate_qa_file(tmp_path / "absent.jsonl")) == {"missing_file": ([], [])}
    empty = _write(tmp_path / "empty.jsonl", [])
    assert _by_rule(validate_corpus_file(empty)) == {"empty_file": ([], [])}


def test_render_names_rows_rule_samples_and_fix(tmp_path):
    path = _write(tmp_path / "qa.jsonl", GOOD_QA + [
        {"id": "q4", "question": "Q?", "golden_answers": []},
        {"id": "q5", "question": "Q?", "golden_answers": [None]},
    ])
    text = validate_qa_file(path).render()
    assert text.startswith(f"[FAIL] {path} (QA records, 5 rows): 2 rule(s) failed")
    assert "  - empty_golden_answers: 1 row(s)\n      lines: 4\n      ids:   q4\n" in text
    assert "      e.g.   [null]\n" in text  # the sample value of line 5
    assert "fix:   every answer must be a non-blank string" in text


def test_require_valid_raises_with_every_report(tmp_path, good_files):
    qa, corpus = good_files
    bad = _write(tmp_path / "bad.jsonl", [{"id": "x", "question": "", "golden_answers": ["a"]}])
    with pytest.raises(DataGateError) as err:
        require_valid([qa, bad], corpus_paths=corpus)
    message = str(err.value)
    assert message.startswith("1 of 3 data file(s) failed the data gate")
    assert f"[OK]   {qa}" in message and f"[OK]   {corpus}" in message
    assert f"[FAIL] {bad}" in message and "empty_question" in message


def test_a_training_split_holding_a_dev_or_test_question_is_refused(tmp_path):
    held = [{"id": "q2", "question": "Capital of Peru?", "golden_answers": ["Lima"]},
            {"id": "d1", "question": "Who painted 'Guernica'?", "golden_answers": ["Picasso"]}]
    train = GOOD_QA + [{"id": "t9", "question": "who painted  Guernica", "golden_answers": ["P"]}]
    report = validate_train_file(_write(tmp_path / "train.jsonl", train), held)
    # q2 by id; t9 by its text once normalised (case, punctuation, spaces)
    assert _by_rule(report) == {"leaked_id": ([2], ["q2"]),
                                "leaked_question": ([2, 4], ["q2", "t9"])}
    assert validate_train_file(_write(tmp_path / "clean.jsonl", GOOD_QA[:1]), held).ok
    dev = _write(tmp_path / "dev.jsonl", held)
    with pytest.raises(DataGateError, match="holds dev/test questions(.|\n)*leaked_id"):
        require_unleaked(tmp_path / "train.jsonl", [dev])
    assert require_unleaked(tmp_path / "clean.jsonl", [dev]).ok


def test_require_valid_needs_files():
    with pytest.raises(ValueError, match="no files"):
        require_valid()


def test_long_listings_are_cut(tmp_path):
    rows = [{"id": f"q{i}", "question": "", "golden_answers": ["a"]} for i in range(12)]
    text = validate_qa_file(_write(tmp_path / "qa.jsonl", rows)).render()
    # 12 failing rows, 8 shown -> "... and 4 more"
    assert "lines: 1, 2, 3, 4, 5, 6, 7, 8, ... and 4 more" in text


def test_generated_world_passes_the_gate(tmp_path):
    cfg = WorldConfig(n_countries=3, n_cities=9, n_people=30, n_organisations=8, n_rivers=3,
                      n_mountains=3, n_train=20, n_dev=5, n_test=5)
    paths = write_world(generate_world(cfg), tmp_path)
    reports = require_valid([paths["train"], paths["dev"], paths["test"]], [paths["corpus"]])
    assert [r.n_rows for r in reports] == [20, 5, 5, len(generate_world(cfg).passages)]


def test_json_array_and_parquet_qa_files_are_gated_by_row(tmp_path):
    """Your QA files may be a JSON array or parquet (what the loaders read): the same rules,
    rows numbered from 1; a file its format cannot read is one failure naming the fix."""
    import pandas as pd

    bad = GOOD_QA + [{"id": "q1", "question": "Again?", "golden_answers": []}]
    (tmp_path / "qa.json").write_text(json.dumps(bad))
    pd.DataFrame(bad).to_parquet(tmp_path / "qa.parquet")
    for name in ("qa.json", "qa.parquet"):
        report = validate_qa_file(tmp_path / name)
        assert report.n_rows == 4
        assert _by_rule(report) == {"duplicate_id": ([1, 4], ["q1", "q1"]),
                                    "empty_golden_answers": ([4], ["q1"])}
    pd.DataFrame(GOOD_QA).to_parquet(tmp_path / "good.parquet")
    assert validate_qa_file(tmp_path / "good.parquet").ok
    (tmp_path / "lines.json").write_text("\n".join(json.dumps(r) for r in GOOD_QA))
    [failure] = validate_qa_file(tmp_path / "lines.json").failures
    assert failure.rule == "unreadable_file" and "one JSON array" in failure.fix
