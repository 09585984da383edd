"""Each GAR ablation config (Table 4) changes exactly the part its row removes: its settings
differ from configs/gar.yaml's there only, and one update on the same scripted rollouts and
judgments differs from gar.yaml's only in the rewards and advantages that part touches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gar_fakes import one_update

from advrag.config import load_config
from advrag.recipes.gar import GarConfig, GarRecipe

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RUN_NAMES = {"checkpoint_dir", "registered_reasoner", "registered_discriminator"}

ABLATIONS = {  # config → the settings its Table 4 row changes
    "gar-no-disc.yaml": {"discriminator": "none"},
    "gar-untuned-critic.yaml": {"discriminator": "fixed", "discriminator_sft": False},
    "gar-fixed-disc.yaml": {"discriminator": "fixed"},
    "gar-ra-only.yaml": {"lam3": 0.0},
    "gar-rd-only.yaml": {"lam4": 0.0},
}


def load(name: str) -> GarConfig:
    return load_config(CONFIGS / name, GarConfig)


@pytest.mark.parametrize("name", ABLATIONS)
def test_each_ablation_changes_only_its_rows_settings(name):
    main, ablation = load("gar.yaml").model_dump(), load(name).model_dump()
    changed = {k: v for k, v in ablation.items() if main[k] != v and k not in RUN_NAMES}
    assert changed == ABLATIONS[name]


def test_the_main_config_is_the_papers_gar():
    c = load("gar.yaml")
    assert (c.discriminator, c.discriminator_sft, c.slice_score, c.reward_metric) == (
        "trainable", True, "verdict", "em")
    assert (c.lam1, c.lam2, c.lam3, c.lam4, c.max_slice_tokens, c.max_judge_tokens) == (
        1.0, 1.0, 1.0, 0.5, 320, 128)
    assert c.optim.kl_coef == 0.001 and c.discriminator_optim == {"kl_coef": 0.0}


@pytest.fixture(scope="module")
def main():
    return one_update(load("gar.yaml"))


def test_the_main_update_pays_the_papers_rewards(main):
    # R_m (EM): [1, 0, 0, 1] for q1's group, [0, 0, 1, 0] for q2's; r_s: Paris → 1, Lyon → 0,
    # playwright → 1 (each rollout one slice), none for the fourth
    rewards, _ = main["reasoner"]
    assert rewards.tolist() == [2.0, 0.0, 1.0, 1.0, 1.0, 0.0, 2.0, 0.0]
    assert main["judged"] == 6 * 2 and main["upstream"] == ("discriminator_sft",)
    # 6 generated slices, then 6 reference ones drawn from the pool of 2
    disc_rewards, _ = main["discriminator"]
    assert disc_rewards.shape == (12,)


def test_the_run_reports_the_four_reward_terms_of_each_update(main):
    from advrag.flows.rl import reward_curves

    # R_m: the EM column above, 3 of 8; R_s: reward − R_m per rollout, [1,0,1,0,1,0,1,0]
    curves = reward_curves(GarRecipe(load("gar.yaml")), [main["metrics"]])
    assert list(curves) == ["R_m", "R_s", "R_d", "R_a"]
    assert curves["R_m"] == [0.375] and curves["R_s"] == [0.5]
    assert curves["R_d"] == [main["metrics"]["discriminator/R_d"]] and len(curves["R_a"]) == 1


def test_no_discriminator_leaves_r_m_alone_and_judges_nothing(main):
    ablation = one_update(load("gar-no-disc.yaml"))
    rewards, _ = ablation["reasoner"]
    # only λ1·R_m: the main rewards less their R_s (1 where a yes was written)
    assert rewards.tolist() == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert not torch.equal(ablation["reasoner"][1], main["reasoner"][1])
    assert ablation["discriminator"] is None and ablation["judged"] == 0
    assert ablation["upstream"] == ()


@pytest.mark.parametrize("name", ["gar-fixed-disc.yaml", "gar-untuned-critic.yaml"])
def test_a_fixed_critic_scores_the_same_way_but_never_learns(main, name):
    ablation = one_update(load(name))
    assert torch.equal(ablation["reasoner"][0], main["reasoner"][0])
    assert torch.equal(ablation["reasoner"][1], main["reasoner"][1])
    assert ablation["judged"] == main["judged"] and ablation["discriminator"] is None
    # the untuned critic needs no SFT upstream (which critic judges: the test below)
    assert ablation["upstream"] == (() if "untuned" in name else ("discriminator_sft",))


def split(update) -> tuple[torch.Tensor, torch.Tensor]:
    """A discriminator update's rewards on generated slices (the first 6) and reference ones."""
    rewards, _ = update
    return rewards[:6], rewards[6:]


@pytest.mark.parametrize(("name", "dropped"), [("gar-rd-only.yaml", "R_a"),
                                               ("gar-ra-only.yaml", "R_d")])
def test_one_discriminator_term_off_changes_only_that_terms_rewards(main, name, dropped):
    ablation = one_update(load(name))
    assert torch.equal(ablation["reasoner"][0], main["reasoner"][0])
    assert torch.equal(ablation["reasoner"][1], main["reasoner"][1])
    (gen, ref), (main_gen, main_ref) = split(ablation["discriminator"]), split(main["discriminator"])
    # generated slices, in rollout order: Paris (yes, right), Lyon (no, wrong), playwright (yes,
    # wrong answer for q1's group), then the same three for q2 (right only for playwright)
    # R_a share: λ4·(1 − |r − 1[correct]|) = 0.5·[1, 1, 0, 0, 1, 1]
    r_a = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.5, 0.5])
    if dropped == "R_a":
        assert torch.allclose(main_gen - gen, r_a) and torch.equal(ref, main_ref)
    else:  # only the R_a share is left; reference judgments earn 0 less their penalty
        assert torch.allclose(gen, r_a)
        assert not torch.equal(ref, main_ref)
    assert not torch.equal(ablation["discriminator"][1], main["discriminator"][1])


def test_the_untuned_critic_is_the_base_model(tiny_policy_dir):
    config = load_config(CONFIGS / "gar-untuned-critic.yaml", GarConfig, overrides={
        "model": str(tiny_policy_dir), "lora": {"r": 4, "alpha": 8}, "cpu_bf16": False})
    recipe = GarRecipe(config)
    recipe.build(str(tiny_policy_dir))  # `fixed` without an SFT adapter: no refusal
    assert recipe.agents == ("reasoner",) and recipe.scorer is not None
    critic = recipe.scorer.args[0]
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    critic.activate()
    with torch.no_grad():
        judged = critic.model(input_ids=ids).logits
        with critic.model.disable_adapter():
            base = critic.model(input_ids=ids).logits
    assert torch.equal(judged, base)  # LoRA starts at zero: the never-tuned adapter is the base


def test_an_untuned_critic_takes_no_sft_adapter():
    with pytest.raises(ValueError, match="discriminator_sft: false"):
        GarConfig(discriminator="fixed", discriminator_sft=False, discriminator_adapter="sft/a")
