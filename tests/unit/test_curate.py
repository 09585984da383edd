"""UR²'s curation: scores from k rollouts, the resumable cache, the tables, the gate, the counts."""

from __future__ import annotations

import json

import pytest

from advrag.agents.types import Trajectory
from advrag.agents.ur2_scoring import ur2_counts
from advrag.curation.curate import (
    ScoreCache,
    cache_path,
    curate,
    estimate_scores,
    level_histogram,
    policy_fingerprint,
    question_key,
    write_curated,
)
from advrag.curation.gates import DataGateError, validate_curated_file
from advrag.datasets.records import QARecord

RECORDS = [QARecord(f"q{i}", f"Question number {i}?", [f"a{i}"]) for i in range(6)]


def answering(right: dict[str, int]):
    """A rollout that answers question qi correctly in its first right[qi] of every k copies."""
    calls: list[list[str]] = []

    def rollout(batch):
        calls.append([r.id for r in batch])
        seen: dict[str, int] = {}
        out = []
        for record in batch:
            n = seen[record.id] = seen.get(record.id, 0) + 1
            t = Trajectory(answer=record.golden_answers[0] if n <= right[record.id] else "no")
            t.n_searches = 1
            out.append(t)
        return out

    rollout.calls = calls
    return rollout


RIGHT = {"q0": 4, "q1": 3, "q2": 2, "q3": 1, "q4": 0, "q5": 4}


def test_scores_are_the_mean_answer_metric_over_k_rollouts(tmp_path):
    rollout = answering(RIGHT)
    scores = estimate_scores(RECORDS, rollout, ScoreCache(tmp_path / "c.jsonl"), k=4,
                             metric="em", batch_questions=4)
    # q0: 4/4 = 1.0, q1: 3/4, q2: 2/4, q3: 1/4, q4: 0, q5: 1.0
    assert [s.score for s in scores] == [1.0, 0.75, 0.5, 0.25, 0.0, 1.0]
    assert [len(c) for c in rollout.calls] == [16, 8]  # 4 questions × k=4, then 2 × 4


def test_a_killed_curation_resumes_without_redoing_finished_questions(tmp_path):
    path = tmp_path / "c.jsonl"
    rollout = answering(RIGHT)

    def dies_on_second_batch(batch):
        if rollout.calls:
            raise KeyboardInterrupt
        return rollout(batch)

    with pytest.raises(KeyboardInterrupt):
        estimate_scores(RECORDS, dies_on_second_batch, ScoreCache(path), k=2, batch_questions=2)
    with path.open("a") as f:
        f.write('{"key": "q2:torn')  # the line being written when the process died
    resumed = answering(RIGHT)
    scores = estimate_scores(RECORDS, resumed, ScoreCache(path), k=2, metric="em",
                             batch_questions=2)
    assert [sorted(set(c)) for c in resumed.calls] == [["q2", "q3"], ["q4", "q5"]]
    # k=2: q0 2/2, q1 2/2, q2 2/2, q3 1/2, q4 0, q5 2/2
    assert [s.score for s in scores] == [1.0, 1.0, 1.0, 0.5, 0.0, 1.0]
    assert len(ScoreCache(path).scores) == 6


def test_an_edited_question_is_scored_again():
    edited = QARecord("q0", "Question number 0, reworded?", ["a0"])
    assert question_key(edited) != question_key(RECORDS[0])
    assert question_key(QARecord("q0", "question number 0", ["x"])) == question_key(RECORDS[0])


def test_the_cache_file_names_policy_k_and_settings(tmp_path):
    a = cache_path(tmp_path, "f" * 64, 4, {"temperature": 1.0})
    assert a.name.startswith("f" * 16 + "-k4-")
    assert a != cache_path(tmp_path, "f" * 64, 4, {"temperature": 0.7})
    assert a != cache_path(tmp_path, "e" * 64, 4, {"temperature": 1.0})


def test_curate_levels_sample_and_stage1_pool(tmp_path):
    scores = estimate_scores(RECORDS, answering(RIGHT), ScoreCache(tmp_path / "c.jsonl"), k=4,
                             metric="em")
    tables = curate(RECORDS, scores, n=None, policy="abc", k=4)
    levels = [row["level"] for row in tables["scores"]]
    # 1.0 easy, 0.75 medium, 0.5 medium, 0.25 hard, 0.0 filtered, 1.0 easy
    assert levels == ["easy", "medium", "medium", "hard", None, "easy"]
    assert [r["id"] for r in tables["stage1"]] == ["q4"]
    assert tables["scores"][1]["rewards"] == [1.0, 1.0, 1.0, 0.0]  # q1: right in 3 of its 4
    assert {r["k"] for r in tables["scores"]} == {4} and {r["policy"] for r in tables["scores"]} == {"abc"}
    # 5 unfiltered: 7:2:1 of 5 → hard 3.5→ only 1 exists; its deficit goes to medium/easy 2:1
    assert sorted(r["id"] for r in tables["curated"]) == ["q0", "q1", "q2", "q3", "q5"]
    assert level_histogram(tables["scores"]) == {"easy": 2, "medium": 2, "hard": 1, "filtered": 1}


def rows(*specs):
    return [{"id": i, "question": q, "golden_answers": ["x"], "level": lv, "score": s}
            for i, q, lv, s in specs]


def write(path, table):
    path.write_text("".join(json.dumps(r) + "\n" for r in table))
    return path


def test_the_curated_gate_passes_a_good_sample_and_names_each_problem(tmp_path):
    held = [{"id": "dev-1", "question": "Where is Kelmar?"}]
    shares = {"hard": 0.5, "medium": 0.5, "easy": 0.0}
    good = write(tmp_path / "good.jsonl", rows(("a", "Who?", "hard", 0.25), ("b", "What?", "medium", 0.5)))
    assert validate_curated_file(good, heldout=held, expected_shares=shares).ok
    bad = write(tmp_path / "bad.jsonl", rows(
        ("dev-1", "Who?", "hard", 0.25),            # leaked by id
        ("b", "where is  KELMAR", "medium", 0.5),  # leaked by normalised text
        ("c", "What?", "impossible", 1.5),          # bad level, bad score
        ("d", "Why?", "hard", None)))               # missing score
    report = validate_curated_file(bad, heldout=held, expected_shares=shares)
    failed = {f.rule: f.ids for f in report.failures}
    assert failed["leaked_id"] == ["dev-1"] and failed["leaked_question"] == ["b"]
    assert failed["bad_level"] == ["c"] and failed["bad_score"] == ["c"]
    assert failed["missing_field:score"] == ["d"]
    # shares: hard 2/4 = 0.5 ok, medium 1/4 = 0.25 (expected 0.5 ± 0.05) fails
    assert "ratio:medium" in failed and "ratio:hard" not in failed


def test_write_curated_keeps_the_old_files_when_the_gate_refuses(tmp_path):
    out = tmp_path / "curated"
    write_curated(out, {"curated": rows(("a", "Who?", "hard", 0.3))}, {"n": 1})
    before = (out / "curated.jsonl").read_text()

    def refuse(path):
        raise DataGateError(f"refused {path.name}")

    with pytest.raises(DataGateError, match="curated.jsonl"):
        write_curated(out, {"curated": rows(("b", "What?", "hard", 0.3))}, {"n": 2}, check=refuse)
    assert (out / "curated.jsonl").read_text() == before
    assert json.loads((out / "summary.json").read_text()) == {"n": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["curated"]  # no temp dir left


def test_policy_fingerprint_changes_with_the_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 10)
    first = policy_fingerprint(tmp_path)
    assert first == policy_fingerprint(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 9 + b"\x01")
    assert policy_fingerprint(tmp_path) != first
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="checkpoint directory"):
        policy_fingerprint(tmp_path / "empty")


def trajectory(queries, format_errors=0, fallbacks=0):
    t = Trajectory(queries=list(queries), format_errors=format_errors, fallbacks=fallbacks)
    t.n_searches = len(queries)
    return t


def test_ur2_counts_follow_their_definitions():
    long_query = " ".join(["word"] * 21)
    c = ur2_counts(trajectory(["born where", long_query], format_errors=1))
    # violations: 1 turn error + 1 overlength query; valid: 1
    assert (c.format_violations, c.valid_queries, c.fallback_faults) == (2, 1, 0)
    c = ur2_counts(trajectory(["a", "b", "c"], fallbacks=1))
    assert (c.format_violations, c.valid_queries, c.fallback_faults) == (0, 2, 1)
    assert ur2_counts(trajectory([])).format_violations == 1  # retrieval asked, none made
    assert ur2_counts(trajectory([]), retrieval_expected=False).format_violations == 0
