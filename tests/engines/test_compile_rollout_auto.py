"""`compile_rollout: auto` as the rollout engines resolve it: vLLM engines run their compiled
graph for a run that samples at least ``AUTO_COMPILE_MIN_ROLLOUTS`` rollouts, eager otherwise;
the choice is printed where vLLM may sample, and transformers back-ends never see it."""

import pytest
import torch

from advrag.engines.generators import AUTO_COMPILE_MIN_ROLLOUTS, compile_rollout_for_run
from advrag.recipes.grpo import GrpoConfig, GrpoRecipe


@pytest.mark.parametrize(("setting", "rollouts", "compiled"), [
    ("auto", AUTO_COMPILE_MIN_ROLLOUTS, True), ("auto", AUTO_COMPILE_MIN_ROLLOUTS - 1, False),
    (True, 1, True), (False, 10 * AUTO_COMPILE_MIN_ROLLOUTS, False)])
def test_auto_compiles_from_the_threshold_and_explicit_settings_stand(setting, rollouts, compiled):
    assert compile_rollout_for_run(setting, rollouts) is compiled


class RecordingEngine:
    """Stands in for ``VLLMGenerator``: records the engine settings it was built with."""

    built: list[dict] = []

    def __init__(self, model_dir, tokenizer, **options):
        self.built.append(options)

    def push_weights(self, model) -> None:
        """The real engine loads the model's weights here; nothing to load."""


def test_make_generator_says_what_auto_chose_only_where_vllm_samples(capsys, monkeypatch):
    """The vLLM engine is a recorder, so no engine has to start: ``compile_rollout`` and the
    run's ``rollouts`` become its ``enforce_eager``; transformers never see them."""
    import advrag.engines.vllm.generation as vllm_generation
    from advrag.engines.generators import make_generator

    monkeypatch.setattr(vllm_generation, "VLLMGenerator", RecordingEngine)
    model, built = torch.nn.Linear(2, 2), RecordingEngine.built
    built.clear()
    for setting, rollouts in (("auto", AUTO_COMPILE_MIN_ROLLOUTS), ("auto", 64), (True, 1)):
        make_generator("vllm", model, None, "", compile_rollout=setting, rollouts=rollouts)
    assert [options["enforce_eager"] for options in built] == [False, True, False]
    printed = capsys.readouterr().out
    assert (f"a vLLM rollout engine runs compiled ({AUTO_COMPILE_MIN_ROLLOUTS} rollouts to "
            f"sample; auto compiles from {AUTO_COMPILE_MIN_ROLLOUTS})") in printed
    assert "runs eager (64 rollouts" in printed
    assert printed.count("compile_rollout auto") == 2  # an explicit True says nothing
    # transformers get neither setting (HFGenerator would refuse an unknown keyword)
    make_generator("hf", model, None, "", compile_rollout="auto", rollouts=1)
    assert "compile_rollout" not in capsys.readouterr().out and len(built) == 3


def test_a_transformers_recipe_builds_with_the_setting_dropped(tiny_policy_dir):
    """The engine option reaches ``make_generator``, which drops it for transformers."""
    recipe = GrpoRecipe(GrpoConfig(
        model=str(tiny_policy_dir), steps=1, compile_rollout=True, rollout_backend="hf",
        lora={"r": 4, "alpha": 8}, cpu_bf16=False, warmup=None, evaluate=None,
        compile_update=False, group_size=2, optim={"max_seq_len": 128}))
    recipe.build(str(tiny_policy_dir))
    assert not hasattr(recipe.generators["reasoner"], "llm")
