"""`compile_update: auto` as recipes resolve it: the update runs compiled for a run that trains
at least ``AUTO_COMPILE_MIN_SEQUENCES`` sequences (steps × questions × group), eager
otherwise, whatever the rollout back-end, and the choice is printed."""

import pytest

from advrag.engines.local.policy import AUTO_COMPILE_MIN_SEQUENCES
from advrag.models.loading import load_policy
from advrag.recipes.base import update_compiled
from advrag.recipes.gar import GarConfig, GarRecipe
from advrag.recipes.grpo import GrpoConfig, GrpoRecipe

SMALL = dict(lora={"r": 4, "alpha": 8}, cpu_bf16=False, rollout_backend="hf", warmup=None,
             evaluate=None, questions_per_step=2, group_size=4, optim={"max_seq_len": 256})
STEPS_ENOUGH = AUTO_COMPILE_MIN_SEQUENCES // 8  # 2 questions × a group of 4 a step


@pytest.mark.parametrize(("steps", "compiled"), [(STEPS_ENOUGH, True), (STEPS_ENOUGH - 1, False)])
def test_grpo_compiles_the_update_of_a_long_enough_run(tiny_policy_dir, cxx_compiler, capsys,
                                                       steps, compiled):
    recipe = GrpoRecipe(GrpoConfig(model=str(tiny_policy_dir), steps=steps, **SMALL))
    assert recipe.trained_sequences() == steps * 8
    recipe.build(str(tiny_policy_dir))
    assert recipe.trainers["reasoner"].policy.compile_update is compiled
    word = "compiled" if compiled else "eager"
    assert f"compile_update auto: the update runs {word} ({steps * 8} sequences" in capsys.readouterr().out


def test_gar_gives_both_agents_the_choice_and_an_explicit_false_stays_quiet(
        tiny_policy_dir, cxx_compiler, capsys):
    recipe = GarRecipe(GarConfig(model=str(tiny_policy_dir), steps=STEPS_ENOUGH, **SMALL))
    recipe.build(str(tiny_policy_dir))
    assert all(recipe.trainers[a].policy.compile_update for a in ("reasoner", "discriminator"))
    assert "runs compiled" in capsys.readouterr().out
    eager = GarRecipe(GarConfig(model=str(tiny_policy_dir), steps=STEPS_ENOUGH,
                                compile_update=False, **SMALL))
    eager.build(str(tiny_policy_dir))
    assert not any(eager.trainers[a].policy.compile_update for a in ("reasoner", "discriminator"))
    assert "compile_update" not in capsys.readouterr().out


def test_auto_compiles_a_run_that_samples_on_vllm_too(tiny_policy_dir, cxx_compiler, capsys):
    """Beside an in-process vLLM engine the compiled update measured faster than eager
    (docs/experiments.md), so the rollout back-end does not change the choice."""
    model = load_policy(str(tiny_policy_dir)).model
    on_vllm = GrpoConfig(model=str(tiny_policy_dir), rollout_backend="vllm")
    assert update_compiled(on_vllm, [model], AUTO_COMPILE_MIN_SEQUENCES)
    assert not update_compiled(on_vllm, [model], AUTO_COMPILE_MIN_SEQUENCES - 1)
    assert not update_compiled(on_vllm.model_copy(update={"compile_update": False}), [model],
                               AUTO_COMPILE_MIN_SEQUENCES)
    printed = capsys.readouterr().out
    assert printed.count("compile_update auto: the update runs") == 2
