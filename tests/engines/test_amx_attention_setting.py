"""``amx_attention`` (config) reaches every policy a recipe or the discriminator SFT builds,
and a policy with it off keeps SDPA attention while it trains (on any CPU)."""

import os
import subprocess
import sys

import pytest

from advrag.recipes.arr import ArrConfig, ArrRecipe
from advrag.recipes.gar import DiscriminatorSFTConfig, GarConfig, GarRecipe
from advrag.recipes.grpo import GrpoConfig, GrpoRecipe

SMALL = dict(lora={"r": 4, "alpha": 8}, cpu_bf16=False, rollout_backend="hf", warmup=None,
             evaluate=None, compile_update=False)


@pytest.mark.parametrize("amx", [True, False])
@pytest.mark.parametrize("recipe_class, config_class", [
    (GrpoRecipe, GrpoConfig), (GarRecipe, GarConfig), (ArrRecipe, ArrConfig)])
def test_each_recipe_gives_its_policies_the_setting(tiny_policy_dir, recipe_class, config_class,
                                                    amx):
    recipe = recipe_class(config_class(model=str(tiny_policy_dir), amx_attention=amx, **SMALL))
    recipe.build(str(tiny_policy_dir))
    assert [t.policy.amx_attention for t in recipe.trainers.values()] == [amx] * len(
        recipe.agents)


def test_the_discriminator_sft_gives_its_policy_the_setting(tiny_policy_dir):
    from advrag.tasks.discriminator import load_discriminator

    config = DiscriminatorSFTConfig(model=str(tiny_policy_dir), amx_attention=False)
    policy, _ = load_discriminator.fn(config, str(tiny_policy_dir))  # the task's function
    assert policy.amx_attention is False
    assert DiscriminatorSFTConfig().amx_attention is True


def test_a_policy_with_it_off_trains_on_sdpa():
    from transformers import LlamaConfig, LlamaForCausalLM

    from advrag.engines.local.policy import TrainablePolicy

    model = LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=128, intermediate_size=256,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         attn_implementation="sdpa"))
    policy = TrainablePolicy(model, keep_reference=False, cpu_bf16=True, amx_attention=False)
    with policy.training():
        assert model.config._attn_implementation == "sdpa"


def test_torchs_avx2_capability_holds_the_kernels_back_too():
    """``ATEN_CPU_CAPABILITY=avx2`` (an AVX2-only CPU's kernels, on any CPU): no AVX-512 ones
    of ours either, so attention is SDPA's, as on such a CPU."""
    probe = ("import torch; from advrag.engines.local.attention import kernel_cpu; "
             "print(torch.backends.cpu.get_cpu_capability(), kernel_cpu())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env=os.environ | {"ATEN_CPU_CAPABILITY": "avx2"}).stdout.split()
    assert out[-2:] in (["AVX2", "False"], ["DEFAULT", "False"])
