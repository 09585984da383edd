"""The recipe contract's verl runs (``Recipe.verl_runs``, ``engines.verl.runs``), verl-free: what
each recipe asks of verl, read off its shipped config by hand, and the refusals that name why."""

from __future__ import annotations

from pathlib import Path

import pytest

from advrag.engines.verl.runs import RexTrainerSettings
from advrag.recipes import recipe_for

ROOT = Path(__file__).resolve().parents[2]


def recipe(name: str, world: Path, **overrides):
    return recipe_for(ROOT / "configs" / name, {"world_dir": str(world), **overrides})


def test_grpo_is_one_run_on_the_world_with_the_search_r1_reward(small_world_dir):
    [run] = recipe("train.yaml", small_world_dir).verl_runs()  # steps 8, f1, penalty 0.2
    assert (run.experiment, run.steps, run.part, run.tracked_as) == ("grpo", 8, None, "verl")
    assert run.reward == ("search_r1_score", {"metric": "f1", "format_penalty": 0.2})
    assert run.records is None and run.search_loop is None and run.trainer is None


def test_ur2_is_a_run_a_stage_on_its_pool_with_the_stages_reward(small_world_dir):
    """configs/ur2.yaml: 24 updates, the first 10 stage 1; before curation each stage trains
    on every training question, prompted by task mixing."""
    ur2 = recipe("ur2.yaml", small_world_dir)
    first, second = ur2.verl_runs()
    assert [(r.part, r.steps, r.experiment) for r in (first, second)] == [
        ("stage-1", 10, "ur2-stage-1"), ("stage-2", 14, "ur2-stage-2")]
    assert second.tracked_as == "verl/stage-2"
    assert second.reward == ("ur2_score", {"stage": 2, "metric": "f1", "fallback_penalty": 0.5})
    questions = ur2.training_questions()
    assert [r.id for r in second.records] == [r.id for r in questions]
    assert second.retrieval == [ur2.retrieval_prompt(r, 2) for r in questions]
    assert second.search_prompt("Q?") == ur2.search_prompt()("Q?")
    curated = questions[:3]
    ur2.use_curation(curated, [])
    assert [r.id for r in ur2.verl_runs()[1].records] == [r.id for r in curated]


def test_stage_one_is_left_out_when_it_has_no_updates(small_world_dir):
    [only] = recipe("ur2.yaml", small_world_dir, stage1_steps=0).verl_runs()
    assert (only.part, only.steps) == ("stage-2", 24)


def test_exploration_brings_rex_rags_loop_and_its_typed_trainer_section(small_world_dir):
    """configs/rex-rag.yaml (em, seed from optim): the probing loop scores with the run's own
    reward; the trainer's section is the exploration settings, field by field."""
    rex = recipe("rex-rag.yaml", small_world_dir)
    [run] = rex.verl_runs()
    assert run.search_loop.name == "advrag_rex_rag"
    assert dict(run.search_loop.settings) == {
        "probe_prob": 0.2, "pool_size": 30, "reward": "search_r1_score",
        "reward_kwargs": {"metric": "em", "format_penalty": 0.2}, "seed": rex.config.optim.seed}
    assert (run.trainer.mode, run.trainer.section) == ("advrag_rex_rag", "advrag_rex")
    assert run.trainer.settings == RexTrainerSettings(
        pool_size=30, keep_ratio=0.12, keep_ratio_weight=0.1, trajectory_filter=True,
        correction="fine")
    ur2 = recipe("ur2.yaml", small_world_dir, exploration={"kind": "rex"})
    assert ur2.verl_runs()[1].search_loop.settings["reward"] == "ur2_score"


def test_the_trainer_reads_its_section_whole_or_not_at_all():
    section = {"pool_size": 5, "keep_ratio": 0.25, "keep_ratio_weight": 0.5,
               "trajectory_filter": False, "correction": "coarse"}
    assert RexTrainerSettings.read(section) == RexTrainerSettings(5, 0.25, 0.5, False, "coarse")
    with pytest.raises(ValueError, match=r"has \['keep_ratio'\]; it needs exactly"):
        RexTrainerSettings.read({"keep_ratio": 0.12})


@pytest.mark.parametrize("name, why", [
    ("arr.yaml", "'arr': each step trains a reasoner and a verifier"),
    ("gar.yaml", "'gar': each step trains a reasoner and a discriminator")])
def test_a_recipe_without_verl_runs_says_why(small_world_dir, name, why):
    two_policies = recipe(name, small_world_dir)
    with pytest.raises(ValueError, match=f"runs recipes grpo and ur2 for now; {why}"):
        two_policies.refuse_verl()
    with pytest.raises(ValueError, match=why):
        two_policies.verl_runs()
    recipe("train.yaml", small_world_dir).refuse_verl()  # grpo has runs: no refusal
