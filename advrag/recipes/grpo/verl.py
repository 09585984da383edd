"""GRPO on verl: one run of verl's trainer on the world's training questions, scored by the
Search-R1 reward (``engines.verl.rewards.search_r1_score``)."""

from __future__ import annotations

from typing import Any

from advrag.recipes.grpo.config import GrpoConfig


def search_r1_reward(config: GrpoConfig) -> tuple[str, dict[str, Any]]:
    """verl's reward function for a GRPO config, and its settings."""
    return "search_r1_score", {"metric": config.reward_metric,
                               "format_penalty": config.format_penalty}
