"""GAR slice set: corruption, balance, the split by question, sources, determinism; its GX gate."""

from __future__ import annotations

import json
from random import Random

import pytest

from advrag.agents.prompts import search_r1_prompt
from advrag.agents.types import Trajectory
from advrag.common.types import Passage
from advrag.curation.demonstrations import demonstration
from advrag.curation.gar_data import (
    build_slice_set,
    corrupted_copy,
    dev_and_measured,
    heldout_questions,
    judgment_trajectory,
    read_world_lexicon,
    record_of,
    replacement,
    row_label,
    row_prompt,
    substitutes,
)
from advrag.curation.gar_labels import WorldLexicon, grounded_judge, sft_target, world_lexicon
from advrag.curation.gates import validate_slice_file
from advrag.datasets.records import QARecord
from advrag.datasets.world import WorldConfig, generate_world, write_world

LEXICON = WorldLexicon({
    **{n: (n, "person") for n in ("Ada Vell", "Bo Rask", "Cy Moor", "Di Lund")},
    **{n: (n, "city") for n in ("Tarn", "Ost")},
    **{p: (p, "profession") for p in ("diplomat", "poet", "judge")},
})
FACTS = {  # (subject, relation) → (object, the passage stating it)
    ("Ada Vell", "spouse"): ("Bo Rask", "Ada Vell was married to Bo Rask."),
    ("Bo Rask", "profession"): ("diplomat", "Bo Rask worked as a diplomat."),
    ("Cy Moor", "profession"): ("poet", "Cy Moor worked as a poet."),
    ("Bo Rask", "born_in"): ("Tarn", "Bo Rask was born in Tarn."),
    ("Di Lund", "born_in"): ("Ost", "Di Lund was born in Ost."),
}
QUESTIONS = [  # (question, chain as (subject, relation) pairs)
    ("What was the profession of the spouse of Ada Vell?",
     [("Ada Vell", "spouse"), ("Bo Rask", "profession")]),
    ("What was the profession of Cy Moor?", [("Cy Moor", "profession")]),
    ("In which city was Bo Rask born?", [("Bo Rask", "born_in")]),
    ("In which city was Di Lund born?", [("Di Lund", "born_in")]),
]


def record(i: int) -> QARecord:
    question, hops = QUESTIONS[i]
    chain = [{"subject": s, "relation": r, "object": FACTS[s, r][0], "passage_id": f"p{i}"}
             for s, r in hops]
    return QARecord(f"q{i}", question, [chain[-1]["object"]], {"chain": chain})


RECORDS = [record(i) for i in range(len(QUESTIONS))]


def demo(rec: QARecord) -> Trajectory:
    passages = [[Passage(f"{h['subject']}-{h['relation']}", f"{h['subject']}\n"
                         f"{FACTS[h['subject'], h['relation']][1]}")] for h in rec.metadata["chain"]]
    return demonstration(rec, search_r1_prompt(rec.question), passages, max_turns=3)


DEMOS = [demo(r) for r in RECORDS]


def words(text: str) -> int:
    return len(text.split())


def build(**options) -> list[dict]:
    settings = {"max_tokens": 320, "seed": 0, "heldout_fraction": 0.25} | options
    return build_slice_set(RECORDS, DEMOS, LEXICON, words, **settings)


def test_every_split_is_balanced_one_to_one():
    rows = build()
    for split in ("train", "heldout"):
        labels = [r["sound"] for r in rows if r["split"] == split]
        assert labels and labels.count(True) == labels.count(False), split


def test_the_split_is_by_question():
    rows = build()
    train = {r["question_id"] for r in rows if r["split"] == "train"}
    held = {r["question_id"] for r in rows if r["split"] == "heldout"}
    assert len(held) == 1 and not train & held  # round(0.25 · 4 questions) = 1 held out
    assert heldout_questions(["q0", "q1", "q2", "q3"], 0.25, seed=0) == held


def test_sound_rows_come_from_demonstrations_and_unsound_from_corrupted_copies():
    rows = build()
    assert {r["source"] for r in rows if r["sound"]} == {"demonstration"}
    assert {r["source"] for r in rows if not r["sound"]} == {"corrupted"}
    assert all(r["rationale"].startswith("It gives ") for r in rows if not r["sound"])
    assert build(corrupt=False) == []  # demonstrations alone are all sound: nothing to balance


def test_rows_carry_the_judge_label_and_unique_ids():
    rows = build()
    assert [list(r) for r in rows[:1]] == [["id", "question_id", "question", "slice", "evidence",
                                            "sound", "analysis", "rationale", "source", "split"]]
    assert len({r["id"] for r in rows}) == len(rows)
    first = rows[0]
    assert first["id"] == f"{first['question_id']}/{first['source']}/0"
    assert row_label(first).slice == first["slice"]


def test_the_set_is_deterministic_and_the_seed_matters():
    assert build() == build()
    draws = {json.dumps(build(seed=s)) for s in range(6)}
    assert len(draws) > 1


def test_rollouts_add_judged_slices():
    rollout = Trajectory()
    rollout.add(search_r1_prompt(RECORDS[1].question), "prompt")
    rollout.add("<think> Cy Moor was a judge. </think>\n<answer> judge </answer>", "policy")
    rows = build(rollouts=[rollout])
    (row,) = [r for r in rows if r["source"] == "rollout"]
    assert (row["question_id"], row["slice"], row["sound"]) == ("q1", "Cy Moor was a judge.", False)
    assert row["rationale"] == "It gives judge for Cy Moor, but the profession of Cy Moor is poet."


def test_a_corrupted_copy_changes_one_gold_object_in_the_policy_text_only():
    pool = substitutes(LEXICON, RECORDS)
    copy = corrupted_copy(DEMOS[1], RECORDS[1], LEXICON, pool, Random(0))
    changed = [(a.text, b.text) for a, b in zip(DEMOS[1].segments, copy.segments) if a != b]
    assert all(s.source == "policy" for a, s in zip(DEMOS[1].segments, copy.segments)
               if a.text != s.text)
    assert "poet" not in copy.policy_text() and changed
    wrong = {w for _, new in changed for w in ("diplomat", "judge") if w in new}
    assert len(wrong) == 1  # another profession, never one on the chain


def test_a_number_is_replaced_by_another_value_of_its_relation():
    years = [QARecord(f"y{i}", f"When was {p} born?", [y], {"chain": [
        {"subject": p, "relation": "birth_year", "object": y, "passage_id": "x"}]})
        for i, (p, y) in enumerate([("Ada Vell", "1901"), ("Bo Rask", "1950")])]
    founded = QARecord("f", "When was Tarn founded?", ["1649"], {"chain": [
        {"subject": "Tarn", "relation": "founding_year", "object": "1649", "passage_id": "x"}]})
    pool = substitutes(LEXICON, [*years, founded])
    assert pool["number:birth_year"] == ["1901", "1950"] and pool["number"] == ["1649", "1901", "1950"]
    hop = years[0].metadata["chain"][0]
    assert replacement(LEXICON, years[0].metadata["chain"], hop, pool, Random(0)) == "1950"
    lone = founded.metadata["chain"][0]  # no other founding year: any other number
    facts = founded.metadata["chain"]
    assert replacement(LEXICON, facts, lone, pool, Random(0)) in {"1901", "1950"}
    assert replacement(LEXICON, facts, lone, {"number": ["1649"]}, Random(0)) is None


def test_heldout_questions_takes_a_seeded_share_never_all():
    ids = [f"q{i}" for i in range(10)]
    assert len(heldout_questions(ids, 0.2, seed=1)) == 2
    assert heldout_questions(ids, 0.2, seed=1) == heldout_questions(reversed(ids), 0.2, seed=1)
    assert len(heldout_questions(ids[:4], 0.99, seed=0)) == 3
    assert len(heldout_questions(ids[:4], 0.01, seed=0)) == 1
    assert heldout_questions(ids[:1], 0.5, seed=0) == set()


def test_dev_and_measured_part_the_held_out_slices_by_question():
    """Three held-out questions, two slices each, and a training one: a third of the held-out
    questions (one) is dev, the other two are measured; training rows are in neither."""
    rows = [{"id": f"{q}/{n}", "question_id": q, "split": "heldout"} for q in ("a", "b", "c")
            for n in range(2)] + [{"id": "t/0", "question_id": "t", "split": "train"}]
    dev, measured = dev_and_measured(rows, 1 / 3, seed=0)
    assert len({r["question_id"] for r in dev}) == 1 and len(dev) == 2 and len(measured) == 4
    assert {r["question_id"] for r in dev} == heldout_questions("abc", 1 / 3, seed=0)
    assert not {r["question_id"] for r in dev} & {r["question_id"] for r in measured}
    assert dev_and_measured(rows[::-1], 1 / 3, seed=0)[0] == dev[::-1]  # by question, not order
    with pytest.raises(ValueError, match="1 held-out question.*raise questions or heldout"):
        dev_and_measured(rows[:2] + rows[-1:], 1 / 3, seed=0)


def test_trajectories_are_matched_to_records_by_their_question():
    by_question = {r.question: r for r in RECORDS}
    assert record_of(DEMOS[2], by_question) is RECORDS[2]
    with pytest.raises(ValueError, match="0 records match"):
        record_of(DEMOS[2], {RECORDS[0].question: RECORDS[0]})


def test_a_judgment_trajectory_is_prompt_then_target():
    row = build()[0]
    prompt = row_prompt(row, words, 768).text
    traj = judgment_trajectory(prompt, lambda user: f"<user>{user}</user>",
                               sft_target(row_label(row)))
    assert [s.source for s in traj.segments] == ["prompt", "policy"]
    assert traj.segments[0].text == f"<user>{prompt}</user>"
    assert prompt.endswith(f"Slice: {row['slice']}\n")
    assert traj.segments[1].text.startswith("Analysis: ")


def test_a_row_carries_the_passages_read_before_its_slice_and_its_prompt_shows_them():
    rows = [r for r in build() if r["question_id"] == "q0" and r["source"] == "demonstration"]
    plan, *later = rows  # q0's demonstration: the plan, then a slice after each search
    assert plan["evidence"] == []
    assert "Doc 1(Title: Ada Vell) Ada Vell was married to Bo Rask." in later[-1]["evidence"]
    shown = row_prompt(later[-1], words, 768)
    assert shown.left_out == 0
    assert all(p in shown.text for p in later[-1]["evidence"])
    capped = row_prompt(later[-1], words, 0)
    assert capped.left_out == len(later[-1]["evidence"])
    assert "before the slice:\n(none)\nSlice:" in capped.text


def test_the_lexicon_is_read_back_from_the_written_world(tmp_path):
    world = generate_world(WorldConfig(seed=3, n_countries=3, n_cities=8, n_people=16,
                                       n_organisations=6, n_rivers=3, n_mountains=3,
                                       n_train=4, n_dev=2, n_test=2))
    write_world(world, tmp_path)
    assert read_world_lexicon(tmp_path).entries == world_lexicon(world).entries


# ---------------------------------------------------------------- the GX gate

HELD = [{"id": "world-dev-0", "question": "Who founded Tarn?"}]


def write_rows(tmp_path, rows: list[dict]):
    path = tmp_path / "slices.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def failed(tmp_path, rows: list[dict]) -> set[str]:
    return {f.rule for f in validate_slice_file(write_rows(tmp_path, rows), HELD).failures}


@pytest.fixture(scope="module")
def good() -> list[dict]:
    return build()


def test_a_built_slice_set_passes_the_gate(tmp_path, good):
    report = validate_slice_file(write_rows(tmp_path, good), HELD)
    assert report.ok, report.render()


def _drop(key):
    return lambda r: {k: v for k, v in r.items() if k != key}


@pytest.mark.parametrize(("change", "rule"), [
    (_drop("slice"), "missing_field:slice"),
    (_drop("sound"), "missing_field:sound"),
    (_drop("evidence"), "missing_field:evidence"),
    (lambda r: {**r, "evidence": "Doc 1(Title: A) a."}, "bad_evidence"),
    (lambda r: {**r, "evidence": [1]}, "bad_evidence"),
    (lambda r: {**r, "sound": "yes"}, "bad_sound"),
    (lambda r: {**r, "sound": 1}, "bad_sound"),
    (lambda r: {**r, "slice": "  "}, "empty_slice"),
    (lambda r: {**r, "analysis": ""}, "empty_analysis"),
    (lambda r: {**r, "rationale": " "}, "empty_rationale"),
    (lambda r: {**r, "source": "oracle"}, "bad_source"),
    (lambda r: {**r, "split": "dev"}, "bad_split"),
    (lambda r: {**r, "question_id": "world-dev-0"}, "leaked_id"),
    (lambda r: {**r, "question": "who founded TARN"}, "leaked_question"),
])
def test_each_broken_row_names_its_rule(tmp_path, good, change, rule):
    rows = [change(good[0]), *good[1:]]
    assert rule in failed(tmp_path, rows)


def test_a_repeated_id_and_an_unbalanced_set_are_caught(tmp_path, good):
    assert "duplicate_id" in failed(tmp_path, [*good, good[0]])
    sound = [r for r in good if r["sound"]]
    assert failed(tmp_path, sound + [r for r in good if not r["sound"]][:1]) == {"balance"}


def test_a_plugged_in_judge_labels_in_one_call_and_its_unlabelled_slices_are_left_out(tmp_path):
    """A judge that gives no label to some slices (an LLM judge's malformed replies): those
    slices are absent, the rest keep the grounded labels, and balance and gate still hold."""
    grounded, asked = grounded_judge(LEXICON), []

    def judge(queries):
        asked.append(list(queries))
        return [None if len(q.slice) % 3 == 0 else label  # by content: every copy is dropped
                for q, label in zip(queries, grounded(queries))]

    rows = build(judge=judge)
    assert len(asked) == 1 and asked[0]  # every slice of every source in one call
    dropped = {(q.record.id, q.slice) for q in asked[0] if len(q.slice) % 3 == 0}
    kept = {(r["question_id"], r["slice"]) for r in rows}
    assert dropped and rows and not kept & dropped
    full = {(r["question_id"], r["slice"]): r["sound"] for r in build()}
    assert all(full.get((r["question_id"], r["slice"]), r["sound"]) == r["sound"] for r in rows)
    for split in ("train", "heldout"):
        labels = [r["sound"] for r in rows if r["split"] == split]
        assert labels.count(True) == labels.count(False), split
    assert validate_slice_file(write_rows(tmp_path, rows), HELD).ok
