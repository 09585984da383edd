"""One UR² update by hand: the stage-1 pool and prompt, task mixing's prompts in stage 2, the
correctness rule and the reward each rollout gets (scripted policy, no model)."""

from __future__ import annotations

import pytest
from fakes import CORPUS, KeywordRetriever
from ur2_fakes import QuestionScript, dry_step, ur2_recipe

from advrag.agents.prompts import direct_reasoning_prompt, ur2_search_prompt
from advrag.datasets.records import QARecord
from advrag.recipes.ur2 import UR2Config

TALLER = "Mount Krairto rises to 3,797 metres and Mount Kanou to 7,798 metres. Which is taller?"
HAMLET = "Who wrote Hamlet?"
REASONING = QARecord("r1", TALLER, ["Mount Kanou"], {"needs_retrieval": False, "level": None})
QA = QARecord("q1", HAMLET, ["William Shakespeare"], {"level": None})
SCRIPT = {TALLER: ("Mount Kanou height", "Mount Kanou"), HAMLET: ("Hamlet author",
                                                                 "William Shakespeare")}


def config(**changes) -> UR2Config:
    return UR2Config(curate=None, group_size=2, questions_per_step=2, max_turns=2,
                     max_new_tokens=16, **changes)


def test_stage_one_trains_the_filtered_reasoning_items_with_the_retrieval_prompt(tmp_path):
    policy = QuestionScript(SCRIPT)
    recipe = ur2_recipe(config(stage1_steps=1), policy, tmp_path=tmp_path)
    recipe.use_curation(curated=[], stage1=[QA, REASONING])
    batch = recipe.batch([QA], step=0)
    assert batch == [REASONING]  # App. C.5: the discarded math problems, not the QA item
    done = dry_step(recipe, KeywordRetriever(CORPUS), batch)
    assert set(policy.users) == {ur2_search_prompt(TALLER, max_queries=2)}
    # stage 1: +1 format (no violation) + 3 for one valid query, the answer unread
    assert done.rewards == [4.0, 4.0]
    assert done.metrics["ur2/stage"] == 1.0 and done.metrics["ur2/retrieval_prompts"] == 1.0
    assert done.metrics["uncurated_pool"] == 0.0


def test_stage_one_falls_back_to_every_question_when_no_reasoning_item_was_filtered(tmp_path):
    recipe = ur2_recipe(config(stage1_steps=1), QuestionScript(SCRIPT), tmp_path=tmp_path)
    recipe.use_curation(curated=[REASONING], stage1=[QA])
    assert sorted(r.id for r in recipe.batch([QA, REASONING], step=0)) == ["q1", "r1"]
    done = dry_step(recipe, KeywordRetriever(CORPUS), [QA])
    assert done.metrics["uncurated_pool"] == 1.0


@pytest.mark.parametrize(("level", "prompt", "reward"), [
    # stage 2 = 2·correct + 1 clean: the hard item searches (one valid query, no violation);
    # the easy one answers directly, and not searching is no violation where none was asked
    ("hard", "search", 3.0), ("easy", "direct", 3.0), ("medium", "direct", 3.0)])
def test_stage_two_prompts_by_task_mixing(tmp_path, level, prompt, reward):
    policy = QuestionScript(SCRIPT)
    recipe = ur2_recipe(config(stage1_steps=0), policy, tmp_path=tmp_path)
    item = QARecord("r1", TALLER, ["Mount Kanou"], {"needs_retrieval": False, "level": level})
    done = dry_step(recipe, KeywordRetriever(CORPUS), [item])
    want = (ur2_search_prompt(TALLER, max_queries=2) if prompt == "search"
            else direct_reasoning_prompt(TALLER))
    assert set(policy.users) == {want}
    assert done.rewards == [reward, reward]


@pytest.mark.parametrize(("answer", "metric", "correct"), [
    ("William Shakespeare", "f1", True),      # F1 1
    ("Shakespeare", "f1", True),              # P 1, R 1/2: F1 2/3 ≥ 0.5
    ("the poet Shakespeare", "f1", True),     # "the" dropped: [poet, shakespeare] vs 2 gold
                                              # tokens, 1 shared: P 1/2, R 1/2, F1 0.5 (the edge)
    ("a great poet Shakespeare", "f1", False),  # [great, poet, shakespeare]: P 1/3, R 1/2, F1 0.4
    ("Shakespeare", "em", False),             # no exact match
    ("william shakespeare.", "em", True),     # SQuAD normalisation: an exact match
])
def test_correct_means_at_least_half_marks_under_the_reward_metric(tmp_path, answer, metric,
                                                                   correct):
    script = {HAMLET: ("Hamlet author", answer)}
    recipe = ur2_recipe(config(stage1_steps=0, reward_metric=metric), QuestionScript(script),
                        tmp_path=tmp_path)
    done = dry_step(recipe, KeywordRetriever(CORPUS), [QA])
    # stage 2: +2 if correct, +1 for a clean format (one valid query, answer closed)
    want = 3.0 if correct else 1.0
    assert done.rewards == [want, want]
    assert done.metrics["ur2/correct"] == float(correct)


def test_no_answer_is_never_correct(tmp_path):
    recipe = ur2_recipe(config(stage1_steps=0), QuestionScript(SCRIPT), tmp_path=tmp_path)
    trajectory = dry_step(recipe, KeywordRetriever(CORPUS), [QA]).trajectories[0]
    assert recipe.correct(trajectory, QA)
    trajectory.answer = None
    assert not recipe.correct(trajectory, QA)


def test_the_warm_up_shows_the_prompt_the_rollouts_show(tmp_path):
    from advrag.recipes.ur2 import UR2Recipe

    chain = [{"subject": "Hamlet", "relation": "written_by", "object": "William Shakespeare"}]
    record = QARecord("q9", HAMLET, ["William Shakespeare"], {"chain": chain})
    recipe = UR2Recipe(config(warmup={"demonstrations": 4}))
    chat = QuestionScript(SCRIPT).chat_prompt
    (demo,) = recipe.demonstrations([record], KeywordRetriever(CORPUS), chat)
    assert demo.segments[0].text == chat(ur2_search_prompt(HAMLET, max_queries=2))
    # a warm-up cached under another prompt (Search-R1's) is refused, not reused
    assert recipe.warmup_settings()["prompt"] == ur2_search_prompt("{question}", max_queries=2)
