"""UR²'s task mixing and stage-1 pool: the prompt per item and stage, which filtered items
stage 1 trains on, and a seeded draw with a share of reasoning items."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from advrag.agents.prompts import direct_reasoning_prompt
from advrag.agents.protocol import last_content
from advrag.curation.mixing import (
    gets_retrieval_prompt,
    mix_tasks,
    needs_search,
    prompt_mode,
    stage1_pool,
)
from advrag.datasets.records import QARecord
from advrag.datasets.world import WorldConfig, generate_world


def _qa(n: int, level: str | None = "hard") -> list[QARecord]:
    return [QARecord(f"qa-{i}", f"Q{i}?", ["a"], {"level": level}) for i in range(n)]


def _reasoning(n: int, level: str | None = "easy") -> list[QARecord]:
    return [QARecord(f"rs-{i}", f"R{i}?", ["1"], {"needs_retrieval": False, "level": level})
            for i in range(n)]


@pytest.mark.parametrize(("level", "needs_retrieval", "mode"), [
    ("hard", True, "retrieval"), ("medium", True, "retrieval"), ("easy", True, "retrieval"),
    (None, True, "retrieval"),
    ("hard", False, "retrieval"), ("medium", False, "reasoning"), ("easy", False, "reasoning"),
    (None, False, "reasoning")])
def test_prompt_mode_follows_section_3_1_2(level, needs_retrieval, mode):
    # QA always retrieves; reasoning-only items retrieve only when hard
    assert prompt_mode(level, needs_retrieval) == mode


def test_prompt_mode_rejects_unknown_levels():
    with pytest.raises(ValueError, match="one of"):
        prompt_mode("trivial", False)


def test_share_hand_worked():
    # 10 at 0.3: exact 7.0 qa, 3.0 reasoning
    picked = mix_tasks(_qa(10), _reasoning(10), 0.3, 10, seed=0)
    assert Counter(r.id[:2] for r in picked) == {"qa": 7, "rs": 3}
    # 5 at 0.5: exact 2.5 / 2.5, the tied remainder goes to qa (listed first)
    picked = mix_tasks(_qa(10), _reasoning(10), 0.5, 5, seed=0)
    assert Counter(r.id[:2] for r in picked) == {"qa": 3, "rs": 2}


def test_a_short_pool_is_filled_from_the_other():
    # 10 at 0.5 wants 5 reasoning items; only 2 exist, so qa gives 8
    picked = mix_tasks(_qa(20), _reasoning(2), 0.5, 10, seed=1)
    assert Counter(r.id[:2] for r in picked) == {"qa": 8, "rs": 2}
    assert len(mix_tasks(_qa(3), _reasoning(2), 0.5, 10, seed=1)) == 5  # all there is


def test_extreme_shares_draw_one_pool_only():
    assert {r.id[:2] for r in mix_tasks(_qa(5), _reasoning(5), 0.0, 8, seed=2)} == {"qa"}
    assert {r.id[:2] for r in mix_tasks(_qa(5), _reasoning(5), 1.0, 8, seed=2)} == {"rs"}


def test_draw_is_deterministic_distinct_and_leaves_inputs_alone():
    qa, rs = _qa(30), _reasoning(30)
    before = copy.deepcopy((qa, rs))
    picked = mix_tasks(qa, rs, 0.25, 20, seed=3)
    assert [r.id for r in picked] == [r.id for r in mix_tasks(qa, rs, 0.25, 20, seed=3)]
    assert [r.id for r in picked] != [r.id for r in mix_tasks(qa, rs, 0.25, 20, seed=4)]
    assert len({r.id for r in picked}) == 20
    assert (qa, rs) == before


def test_world_questions_mix_with_their_reasoning_items():
    world = generate_world(WorldConfig(n_countries=3, n_cities=8, n_people=16, n_organisations=6,
                                       n_rivers=3, n_mountains=3, n_train=12, n_dev=6, n_test=8))
    picked = mix_tasks(world.splits["train"], world.reasoning["train"], 0.25, 8, seed=0)
    # 8 at 0.25: 6 regular (retrieval), 2 reasoning-only (unscored: direct reasoning in stage 2)
    kinds = Counter((r.metadata["type"] == "reasoning", needs_search(r)) for r in picked)
    assert kinds == {(False, True): 6, (True, False): 2}


def test_the_draw_returns_the_records_as_they_are():
    # which prompt an item gets depends on its stage too: the draw does not stamp one on it
    qa, rs = _qa(2), _reasoning(2)
    picked = mix_tasks(qa, rs, 0.5, 4, seed=0)
    assert sorted(picked, key=lambda r: r.id) == [*qa, *rs]


QA_EASY = QARecord("q", "Where?", ["x"], {"level": "easy"})
REASONING = {level: QARecord(f"r-{level}", "How many?", ["1"],
                             {"needs_retrieval": False, "level": level})
             for level in ("easy", "medium", "hard", None)}


@pytest.mark.parametrize("level", ["easy", "medium", "hard", None])
def test_stage_one_asks_every_item_to_search(level):
    # §3.2.2: stage 1 trains on problems "requiring retrieval calls in the specified format"
    assert gets_retrieval_prompt(REASONING[level], 1)
    assert gets_retrieval_prompt(QA_EASY, 1)


@pytest.mark.parametrize(("level", "mixed", "unmixed"), [
    ("easy", False, True), ("medium", False, True), ("hard", True, True), (None, False, True)])
def test_stage_two_mixes_tasks_unless_mixing_is_off(level, mixed, unmixed):
    # with mixing only hard reasoning-only items search; "w/o task mixing": all of them do
    assert gets_retrieval_prompt(REASONING[level], 2) is mixed
    assert gets_retrieval_prompt(REASONING[level], 2, task_mixing=False) is unmixed
    assert gets_retrieval_prompt(QA_EASY, 2) and gets_retrieval_prompt(QA_EASY, 2,
                                                                       task_mixing=False)


def test_there_is_no_third_stage():
    with pytest.raises(ValueError, match="stages 1 and 2"):
        gets_retrieval_prompt(QA_EASY, 3)


def test_the_stage1_pool_is_the_filtered_reasoning_only_items():
    filtered_qa = QARecord("q1", "Where?", ["x"], {"level": None})
    filtered_reasoning = QARecord("r1", "How many?", ["1"],
                                  {"needs_retrieval": False, "level": None})
    explicit_qa = QARecord("q2", "Who?", ["y"], {"needs_retrieval": True})
    # App. C.5: "the discarded math training samples" — no QA item
    assert stage1_pool([filtered_qa, filtered_reasoning, explicit_qa]) == [filtered_reasoning]
    assert stage1_pool([filtered_qa]) == []


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan")])
def test_bad_share_is_refused(share):
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        mix_tasks(_qa(2), _reasoning(2), share, 2, seed=0)


def test_bad_n_and_repeated_ids_are_refused():
    with pytest.raises(ValueError, match="n must be >= 0"):
        mix_tasks(_qa(2), _reasoning(2), 0.5, -1, seed=0)
    with pytest.raises(ValueError, match=r"repeated: \['qa-0'\]"):
        mix_tasks(_qa(2), _qa(1), 0.5, 2, seed=0)


def test_direct_reasoning_prompt_uses_the_answer_grammar_without_search():
    prompt = direct_reasoning_prompt("Zorvath was founded in 1834 and Kelmar in 1901. How many "
                                     "years apart were they founded?")
    assert prompt.endswith("How many years apart were they founded?\n")
    assert "<think>" in prompt and "<answer>" in prompt and "<search>" not in prompt
    assert last_content("<think> 1901 - 1834 </think><answer> 67 </answer>", "answer") == "67"


def test_needs_search_reads_level_and_needs_retrieval_from_metadata():
    qa = QARecord("q", "Where?", ["x"])
    easy_reasoning = QARecord("r", "How many?", ["1"], {"needs_retrieval": False, "level": "easy"})
    hard_reasoning = QARecord("h", "How many?", ["1"], {"needs_retrieval": False, "level": "hard"})
    assert needs_search(qa) and needs_search(hard_reasoning) and not needs_search(easy_reasoning)
