"""`compile_update: auto` as recipes resolve it: the update runs compiled for a run that trains
at least ``AUTO_COMPILE_MIN_SEQUENCES`` sequences (steps × questions × group) with no vLLM in
the process, eager otherwise, and the choice is printed."""

import sys
import types

import pytest

from advrag.config import GARConfig, TrainFlowConfig
from advrag.engines.local.policy import AUTO_COMPILE_MIN_SEQUENCES
from advrag.models.loading import load_policy
from advrag.recipes.base import update_compiled
from advrag.recipes.gar import GarRecipe
from advrag.recipes.grpo import GrpoRecipe

SMALL = dict(lora={"r": 4, "alpha": 8}, cpu_bf16=False, rollout_backend="hf", warmup=None,
             evaluate=None, questions_per_step=2, optim={"group_size": 4, "max_seq_len": 256})
STEPS_ENOUGH = AUTO_COMPILE_MIN_SEQUENCES // 8  # 2 questions × a group of 4 a step


@pytest.fixture
def no_vllm_loaded(monkeypatch):
    """This process as if vLLM had never been imported (other tests may have imported it)."""
    monkeypatch.delitem(sys.modules, "vllm", raising=False)


@pytest.mark.parametrize(("steps", "compiled"), [(STEPS_ENOUGH, True), (STEPS_ENOUGH - 1, False)])
def test_grpo_compiles_the_update_of_a_long_enough_run(tiny_policy_dir, cxx_compiler, capsys,
                                                       no_vllm_loaded, steps, compiled):
    recipe = GrpoRecipe(TrainFlowConfig(model=str(tiny_policy_dir), steps=steps, **SMALL))
    assert recipe.trained_sequences() == steps * 8
    recipe.build(str(tiny_policy_dir))
    assert recipe.trainers["reasoner"].policy.compile_update is compiled
    word = "compiled" if compiled else "eager"
    assert f"compile_update auto: the update runs {word} ({steps * 8} sequences" in capsys.readouterr().out


def test_gar_gives_both_agents_the_choice_and_an_explicit_false_stays_quiet(
        tiny_policy_dir, cxx_compiler, capsys, no_vllm_loaded):
    recipe = GarRecipe(GARConfig(model=str(tiny_policy_dir), steps=STEPS_ENOUGH, **SMALL))
    recipe.build(str(tiny_policy_dir))
    assert all(recipe.trainers[a].policy.compile_update for a in ("reasoner", "discriminator"))
    assert "runs compiled" in capsys.readouterr().out
    eager = GarRecipe(GARConfig(model=str(tiny_policy_dir), steps=STEPS_ENOUGH,
                                compile_update=False, **SMALL))
    eager.build(str(tiny_policy_dir))
    assert not any(eager.trainers[a].policy.compile_update for a in ("reasoner", "discriminator"))
    assert "compile_update" not in capsys.readouterr().out


def test_auto_stays_eager_beside_vllm(tiny_policy_dir, cxx_compiler, capsys, no_vllm_loaded,
                                      monkeypatch):
    """vLLM rollouts, or vLLM already loaded (an engine may have run here), keep it eager;
    a warm-up (no rollouts) of a run whose rollouts will use vLLM still compiles."""
    model = load_policy(str(tiny_policy_dir)).model
    sequences = AUTO_COMPILE_MIN_SEQUENCES
    on_vllm = TrainFlowConfig(model=str(tiny_policy_dir), rollout_backend="vllm")
    assert not update_compiled(on_vllm, [model], sequences, rollouts=True)
    assert "vLLM in this process" in capsys.readouterr().out
    assert update_compiled(on_vllm, [model], sequences, rollouts=False)
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    assert not update_compiled(on_vllm, [model], sequences, rollouts=False)
    assert not update_compiled(on_vllm.model_copy(update={"compile_update": False}), [model],
                               sequences, rollouts=False)
    assert update_compiled(on_vllm.model_copy(update={"compile_update": True}), [model],
                           sequences, rollouts=True)
