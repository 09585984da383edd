"""GAR's slice labels on your own data: questions with golden answers, no world, no fact chain.

The grounded judge reads ``answer_lexicon`` (the golden answers) instead of the world's; a
corruption puts another question's answer where the demonstration wrote the gold one.
"""

from __future__ import annotations

import json
from random import Random

from advrag.common.types import Passage
from advrag.curation.demonstrations import question_demonstration
from advrag.curation.gar_data import (
    build_slice_set,
    corrupted_copy,
    read_lexicon,
    record_facts,
    substitutes,
)
from advrag.curation.gar_labels import (
    answer_lexicon,
    grounded_judge,
    label_slice,
    slice_queries,
)
from advrag.datasets.records import QARecord
from advrag.datasets.world import WorldConfig, generate_world, write_world

RECORDS = [
    QARecord("q0", "How many litres does tank T-1 hold?", ["4000 litres"]),
    QARecord("q1", "What is the rated pressure of valve V-12?", ["60 bar"]),
    QARecord("q2", "When is the strainer S-2 cleaned?", ["every Friday", "Fridays"]),
    QARecord("q3", "Is the control room staffed?", ["yes"]),
    QARecord("q4", "Which valve is closed before maintenance?", ["V-12"]),
]
TANK = Passage("m-tank", "Tank T-1 holds 4000 litres of cooling water and is refilled every Monday.")
LEXICON = answer_lexicon(RECORDS)


def words(text: str) -> int:
    return len(text.split())


def test_the_lexicon_is_the_golden_answers_less_ordinary_words():
    assert LEXICON.entries == {a: (a, "answer") for a in
                               ("4000 litres", "60 bar", "every Friday", "Fridays", "V-12")}
    assert LEXICON.terms("Valve V-12 holds 60 bar.") == ["V-12", "12", "60", "60 bar"]


def test_a_slice_is_judged_by_the_answers_it_names():
    tank = RECORDS[0]

    def judged(text: str):
        return label_slice(text, tank, [TANK.contents], LEXICON)

    right = judged("The passages say the answer is 4000 litres.")
    assert right.sound and right.analysis == "The slice names 4000, 4000 litres."
    wrong = judged("The passages say the answer is 60 bar.")  # another question's answer
    assert not wrong.sound
    assert wrong.rationale == "It gives 60 as the answer, but the answer is 4000."
    unread = judged("Tank T-1 is refilled every Friday.")  # no passage or fact says so
    assert not unread.sound
    assert unread.rationale.startswith("every Friday appears in neither the question")
    on_topic = judged("I need the volume the tank can hold.")  # names no answer
    assert on_topic.sound and on_topic.rationale == "It works on the question (hold)."
    drift = judged("The control room is staffed by operators.")
    assert not drift.sound and drift.rationale == "It does not address the question."


def test_a_corruption_puts_another_answer_of_the_same_kind_in_the_policy_text():
    tank = RECORDS[0]
    demo = question_demonstration(tank, "PROMPT", [TANK], max_turns=2)
    assert record_facts(tank, demo.policy_text()) == [
        {"subject": tank.question, "relation": "answer", "object": "4000 litres"}]
    pool = substitutes(LEXICON, RECORDS)
    assert pool["number:answer"] == ["4000 litres", "60 bar"]  # answers with a number
    copy = corrupted_copy(demo, tank, LEXICON, pool, Random(0))
    assert "60 bar" in copy.policy_text() and "4000 litres" not in copy.policy_text()
    assert [s.text for s in copy.segments if s.source != "policy"] == \
        [s.text for s in demo.segments if s.source != "policy"]  # the passages stay as read
    (label,) = grounded_judge(LEXICON)(slice_queries(copy, tank, words))
    assert not label.sound


def test_an_answer_outside_the_lexicon_is_not_corrupted():
    room = RECORDS[3]
    demo = question_demonstration(room, "PROMPT",
                                  [Passage("m-room", "Is it staffed? yes, by two.")], max_turns=2)
    assert corrupted_copy(demo, room, LEXICON, substitutes(LEXICON, RECORDS), Random(0)) is None


def test_the_slice_set_of_your_questions_has_both_labels_in_both_splits():
    passages = {  # each question's search finds a passage holding its answer
        "q0": TANK,
        "q1": Passage("m-valve", "Valve V-12 has a rated pressure of 60 bar."),
        "q2": Passage("m-filter", "The strainer S-2 is cleaned every Friday."),
        "q4": Passage("m-shut", "V-12 is closed before maintenance."),
    }
    records = [r for r in RECORDS if r.id in passages]
    demos = [question_demonstration(r, f"Question: {r.question}\n", [passages[r.id]],
                                    max_turns=2) for r in records]
    rows = build_slice_set(records, demos, answer_lexicon(records), words, max_tokens=64,
                           seed=0, heldout_fraction=0.5)
    for split in ("train", "heldout"):
        labels = [r["sound"] for r in rows if r["split"] == split]
        assert labels.count(True) == labels.count(False) > 0, (split, rows)
    unsound = [r for r in rows if not r["sound"]]
    assert all(r["source"] == "corrupted" for r in unsound)


def test_the_lexicon_is_the_worlds_where_there_is_one(tmp_path):
    assert read_lexicon(tmp_path, RECORDS).entries == LEXICON.entries
    world = generate_world(WorldConfig(seed=3, n_countries=3, n_cities=8, n_people=16,
                                       n_organisations=6, n_rivers=3, n_mountains=3,
                                       n_train=4, n_dev=2, n_test=2))
    write_world(world, tmp_path)
    entries = read_lexicon(tmp_path, RECORDS).entries
    assert "4000 litres" not in entries
    assert json.loads((tmp_path / "world.json").read_text())["entities"][0]["name"] in entries

