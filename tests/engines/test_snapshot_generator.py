"""The transformers back-end samples a bf16 copy of an fp32 policy that computes in bf16,
refreshed only by ``push_weights`` (after every update, and after a resume)."""

from __future__ import annotations

import copy
from contextlib import nullcontext

import torch
from peft import LoraConfig, get_peft_model

from advrag.engines.generators import make_generator
from advrag.engines.local.dual import AgentTrainers
from advrag.engines.local.generation import HFGenerator, SnapshotGenerator
from advrag.engines.local.policy import TrainablePolicy
from advrag.engines.local.trainer import LocalTrainer, TrainConfig
from advrag.models.loading import load_policy
from advrag.recipes.grpo import GrpoConfig, GrpoRecipe

Q_PROJ = "model.layers.0.self_attn.q_proj"
PROMPTS = ["Zorvath is a city", "The river"]


def bf16_autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def lora_policy(model_dir):
    """The tiny Llama with a LoRA (r=4, alpha=8) whose B is non-zero, so the adapter matters."""
    loaded = load_policy(str(model_dir))
    model = get_peft_model(loaded.model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0.0, 0.5)
    return model, loaded.tokenizer


def merged_q_proj(model) -> torch.Tensor:
    """W + (alpha / r) · B · A of the first q_proj, worked out from the adapter's parts."""
    layer = model.get_submodule("base_model.model." + Q_PROJ)
    delta = layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    return layer.base_layer.weight + 2.0 * delta


def greedy(generator) -> list[str]:
    return generator.generate(PROMPTS, max_new_tokens=12)


def test_bf16_autocast_gets_a_merged_bf16_copy_and_the_policy_is_untouched(tiny_policy_dir):
    model, tokenizer = lora_policy(tiny_policy_dir)
    generator = make_generator("hf", model, tokenizer, tiny_policy_dir, autocast=bf16_autocast,
                               batch_size=4)
    assert isinstance(generator, SnapshotGenerator) and generator.batch_size == 4
    copy_params = dict(generator.model.named_parameters())
    assert {p.dtype for p in copy_params.values()} == {torch.bfloat16}
    assert not any("lora" in name for name in copy_params)
    assert not generator.model.training
    torch.testing.assert_close(copy_params[Q_PROJ + ".weight"],
                               merged_q_proj(model).detach().to(torch.bfloat16))
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert any("lora_B" in name for name, _ in model.named_parameters())


def test_without_autocast_a_plain_policy_itself_generates(tiny_policy_dir):
    loaded = load_policy(str(tiny_policy_dir))
    for autocast in (None, nullcontext):
        options = {} if autocast is None else {"autocast": autocast}
        generator = make_generator("hf", loaded.model, loaded.tokenizer, tiny_policy_dir, **options)
        assert type(generator) is HFGenerator and generator.model is loaded.model


def test_without_autocast_a_lora_policy_samples_from_a_merged_fp32_copy(tiny_policy_dir):
    model, tokenizer = lora_policy(tiny_policy_dir)
    generator = make_generator("hf", model, tokenizer, tiny_policy_dir, autocast=nullcontext)
    assert isinstance(generator, SnapshotGenerator)
    copy_params = dict(generator.model.named_parameters())
    assert {p.dtype for p in copy_params.values()} == {torch.float32}
    assert not any("lora" in name for name in copy_params)
    torch.testing.assert_close(copy_params[Q_PROJ + ".weight"], merged_q_proj(model).detach())
    assert greedy(generator) == greedy(HFGenerator(model, tokenizer))  # the live adapter's text


def test_the_copy_changes_only_through_push_weights(tiny_policy_dir):
    model, tokenizer = lora_policy(tiny_policy_dir)
    generator = make_generator("hf", model, tokenizer, tiny_policy_dir, autocast=bf16_autocast)
    before_text, before_weight = greedy(generator), generator.model.get_submodule(Q_PROJ).weight.clone()
    with torch.no_grad():  # an "update" of the adapter
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.mul_(-3.0)
    assert greedy(generator) == before_text
    assert torch.equal(generator.model.get_submodule(Q_PROJ).weight, before_weight)
    sampled_copy = generator.model
    generator.push_weights(model)
    assert generator.model is sampled_copy  # written in place, not built again
    pushed = generator.model.get_submodule(Q_PROJ).weight
    torch.testing.assert_close(pushed, merged_q_proj(model).detach().to(torch.bfloat16))
    assert not torch.equal(pushed, before_weight)
    fresh = HFGenerator(copy.deepcopy(model).merge_and_unload().to(torch.bfloat16).eval(), tokenizer)
    assert greedy(generator) == greedy(fresh)


def test_a_full_policy_with_a_tied_head_is_pushed_in_place(tiny_policy_dir):
    loaded = load_policy(str(tiny_policy_dir))
    model = loaded.model
    assert model.lm_head.weight is model.model.embed_tokens.weight
    generator = make_generator("hf", model, loaded.tokenizer, tiny_policy_dir,
                               autocast=bf16_autocast)
    sampled_copy = generator.model
    with torch.no_grad():  # an "update" of every weight, the tied one included
        for weight in model.parameters():
            weight.mul_(-1.5)
    generator.push_weights(model)
    assert generator.model is sampled_copy
    pushed = dict(sampled_copy.named_parameters())
    assert pushed.keys() == dict(model.named_parameters()).keys()
    for name, weight in model.named_parameters():
        assert torch.equal(pushed[name], weight.detach().to(torch.bfloat16)), name
    assert sampled_copy.lm_head.weight is sampled_copy.model.embed_tokens.weight


class RecordingGenerator:
    """Stands in for a generator with its own weights: records what it is pushed."""

    def __init__(self):
        self.pushed = []

    def push_weights(self, model) -> None:
        self.pushed.append({n: p.detach().clone() for n, p in model.named_parameters()})


def test_resume_pushes_the_resumed_weights_to_the_generator(tiny_policy_dir, tmp_path):
    loaded = load_policy(str(tiny_policy_dir))
    trainer = LocalTrainer(TrainablePolicy(loaded.model), loaded.tokenizer,
                           TrainConfig(lr=1e-3, max_seq_len=64))
    generator = RecordingGenerator()
    recipe = GrpoRecipe(GrpoConfig(checkpoint_dir=tmp_path, lora=None))
    recipe.trainers = AgentTrainers({"reasoner": trainer})
    recipe.generators = {"reasoner": generator}
    assert recipe.resume() == 0 and generator.pushed == []
    saved = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
    recipe.save(3)
    with torch.no_grad():
        for weight in trainer.policy.model.parameters():
            weight.add_(1.0)
    assert recipe.resume() == 3
    (pushed,) = generator.pushed
    assert pushed.keys() == saved.keys()
    assert all(torch.equal(pushed[n], saved[n]) for n in saved)
