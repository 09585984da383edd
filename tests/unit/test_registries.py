"""Registries in core (advantage estimators and terms, policy losses) and the recipe table."""

from __future__ import annotations

import typing

import pytest
import torch

from advrag.config import TrainConfig
from advrag.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    ADVANTAGE_TERMS,
    grpo_advantages,
    register_advantage,
    reinforce_pp_baseline_advantages,
)
from advrag.core.losses import POLICY_LOSSES, policy_loss
from advrag.recipes import RECIPES


def test_every_advantage_the_config_accepts_is_registered_and_nothing_else():
    accepted = typing.get_args(TrainConfig.model_fields["advantage"].annotation)
    assert set(accepted) == set(ADVANTAGE_ESTIMATORS) == {"grpo", "drgrpo", "reinforce_pp"}
    assert set(typing.get_args(TrainConfig.model_fields["policy_loss"].annotation)) == set(
        POLICY_LOSSES)
    assert POLICY_LOSSES["ppo_clip"] is policy_loss


def test_registered_estimators_by_hand():
    scores = torch.tensor([1.0, 0.0, 2.0, 2.0])
    groups = ["a", "a", "b", "b"]
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 0]], dtype=torch.bool)
    # group a: mean 0.5, unbiased std 0.7071 → ±0.7071; group b: equal scores → 0
    grpo = ADVANTAGE_ESTIMATORS["grpo"](scores, groups, mask)
    z = 0.5 / (2 ** -0.5 + 1e-6)
    assert torch.allclose(grpo, torch.tensor([[z, z, 0], [-z, 0, 0], [0, 0, 0], [0, 0, 0]]))
    # Dr.GRPO: the mean is subtracted, nothing divided
    assert torch.allclose(ADVANTAGE_ESTIMATORS["drgrpo"](scores, groups, mask),
                          torch.tensor([[0.5, 0.5, 0], [-0.5, 0, 0], [0, 0, 0], [0, 0, 0]]))
    assert torch.equal(grpo[:, 0], torch.where(mask[:, 0], grpo_advantages(scores, groups), 0.0))
    assert ADVANTAGE_ESTIMATORS["reinforce_pp"] is reinforce_pp_baseline_advantages


def test_a_name_registers_once():
    with pytest.raises(ValueError, match="already registered"):
        register_advantage("grpo")(lambda scores, group_ids, mask: mask)
    import advrag.core.arr_process  # noqa: F401  (registers its term)

    assert "arr_process" in ADVANTAGE_TERMS


def test_each_recipe_names_its_config_and_primary_agent():
    for name, recipe_class in RECIPES.items():
        assert recipe_class.name == name
        assert recipe_class.config_model().recipe == name  # a config file's `recipe:` picks this entry
        assert recipe_class.agents[0] == "reasoner"  # the benchmarked and promoted agent
        assert not getattr(recipe_class, "__abstractmethods__", set())
