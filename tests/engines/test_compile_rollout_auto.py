"""`compile_rollout: auto` as recipes and curation resolve it: vLLM engines run their compiled
graph for a run that samples at least ``AUTO_COMPILE_MIN_ROLLOUTS`` rollouts, eager otherwise;
the choice is printed where vLLM may sample, and transformers back-ends never see it."""

import pytest
import torch

from advrag.config import TrainFlowConfig
from advrag.engines.generators import AUTO_COMPILE_MIN_ROLLOUTS, compile_rollout_for_run
from advrag.recipes.base import rollout_engine
from advrag.recipes.grpo import GrpoRecipe


@pytest.mark.parametrize(("setting", "rollouts", "compiled"), [
    ("auto", AUTO_COMPILE_MIN_ROLLOUTS, True), ("auto", AUTO_COMPILE_MIN_ROLLOUTS - 1, False),
    (True, 1, True), (False, 10 * AUTO_COMPILE_MIN_ROLLOUTS, False)])
def test_auto_compiles_from_the_threshold_and_explicit_settings_stand(setting, rollouts, compiled):
    assert compile_rollout_for_run(setting, rollouts) is compiled


def test_rollout_engine_says_what_auto_chose_only_where_vllm_samples(capsys, monkeypatch):
    """vLLM is made the back-end ``resolve_backend`` picks, so no engine has to start."""
    import advrag.engines.generators as generators

    model = torch.nn.Linear(2, 2)
    monkeypatch.setattr(generators, "vllm_runs", lambda model, on_cpu: True)
    auto = TrainFlowConfig()
    assert rollout_engine(auto, AUTO_COMPILE_MIN_ROLLOUTS, model) == {"enforce_eager": False}
    assert rollout_engine(auto, 64, model) == {"enforce_eager": True}
    printed = capsys.readouterr().out
    assert (f"a vLLM rollout engine runs compiled ({AUTO_COMPILE_MIN_ROLLOUTS} rollouts to "
            f"sample; auto compiles from {AUTO_COMPILE_MIN_ROLLOUTS})") in printed
    assert "runs eager (64 rollouts" in printed
    assert rollout_engine(auto.model_copy(update={"compile_rollout": True}), 1, model) == {
        "enforce_eager": False}
    on_hf = TrainFlowConfig(rollout_backend="hf")
    assert rollout_engine(on_hf, AUTO_COMPILE_MIN_ROLLOUTS, model) == {"enforce_eager": False}
    assert "compile_rollout" not in capsys.readouterr().out


def test_a_transformers_recipe_builds_with_the_setting_dropped(tiny_policy_dir):
    """The engine option reaches ``make_generator``, which drops it for transformers."""
    recipe = GrpoRecipe(TrainFlowConfig(
        model=str(tiny_policy_dir), steps=1, compile_rollout=True, rollout_backend="hf",
        lora={"r": 4, "alpha": 8}, cpu_bf16=False, warmup=None, evaluate=None,
        compile_update=False, optim={"group_size": 2, "max_seq_len": 128}))
    recipe.build(str(tiny_policy_dir))
    assert not hasattr(recipe.generators["reasoner"], "llm")
