"""`optim.seed` fixes a recipe's run and `warmup.sft.seed` its warm-up: the adapter initialisation
does not depend on the RNG state the process had before ``build`` or ``warm_up``."""

import pytest
import torch

from advrag.recipes.grpo import GrpoConfig, GrpoRecipe


def initial_adapter(model_dir, seed: int, disturb: int) -> dict[str, torch.Tensor]:
    """LoRA weights right after ``build`` with ``optim.seed``, the global RNG first set to ``disturb``."""
    torch.manual_seed(disturb)
    config = GrpoConfig(model=str(model_dir), lora={"r": 4, "alpha": 8}, cpu_bf16=False,
                             rollout_backend="hf", warmup=None, evaluate=None,
                             group_size=2, optim={"seed": seed, "max_seq_len": 256})
    recipe = GrpoRecipe(config)
    recipe.build(str(model_dir))
    model = recipe.trainers["reasoner"].policy.model
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_A" in n}


@pytest.fixture(scope="module")
def seed_zero(tiny_policy_dir):
    return initial_adapter(tiny_policy_dir, seed=0, disturb=11)


def test_the_same_seed_gives_the_same_adapter_whatever_came_before(tiny_policy_dir, seed_zero):
    again = initial_adapter(tiny_policy_dir, seed=0, disturb=12)
    assert seed_zero and again.keys() == seed_zero.keys()
    assert all(torch.equal(again[n], w) for n, w in seed_zero.items())


def test_another_seed_gives_another_adapter(tiny_policy_dir, seed_zero):
    other = initial_adapter(tiny_policy_dir, seed=1, disturb=11)
    assert all(not torch.equal(other[n], w) for n, w in seed_zero.items())


def warmed_up(model_dir, out_dir, disturb: int) -> dict[str, torch.Tensor]:
    """The merged weights of a one-step SFT warm-up (LoRA r=4, 4 demonstrations of a BM25
    world) into ``out_dir``, the global RNG first set to ``disturb``."""
    from safetensors.torch import load_file
    from small_worlds import bm25_world

    world, retriever = bm25_world(seed=2, n_train=8)
    torch.manual_seed(disturb)
    config = GrpoConfig(model=str(model_dir), lora={"r": 4, "alpha": 8}, cpu_bf16=False,
                             rollout_backend="hf", evaluate=None, checkpoint_dir=str(out_dir),
                             topk=2, max_turns=2, warmup={"demonstrations": 4,
                                             "sft": {"epochs": 1, "batch_size": 4}},
                             group_size=2, optim={"max_seq_len": 256})
    model_dir, _ = GrpoRecipe(config).warm_up(retriever, world.splits["train"])
    return load_file(model_dir / "model.safetensors")


def test_the_warm_up_does_not_depend_on_what_came_before(tiny_policy_dir, tmp_path):
    """The adapter the warm-up trains starts from ``warmup.sft.seed``: two warm-ups after
    different RNG histories merge into the same weights."""
    first = warmed_up(tiny_policy_dir, tmp_path / "a", disturb=11)
    second = warmed_up(tiny_policy_dir, tmp_path / "b", disturb=12)
    assert first.keys() == second.keys()
    assert all(torch.equal(second[name], weight) for name, weight in first.items())
