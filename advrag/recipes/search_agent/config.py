"""The settings of one Search-R1-style agent trained alone (the ``grpo`` and ``ur2`` recipes'
shared fields): its reward, its registry name and REX-RAG's exploration."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from advrag.config.rl import RLRunConfig
from advrag.recipes.rex_rag.config import RexExploration


class SearchAgentConfig(RLRunConfig):
    """The shared RL fields plus the single agent's reward, registry name and exploration;
    a recipe's config extends it with its ``RECIPE`` and ``DEFAULTS``."""

    RUN_CONTROL: ClassVar[frozenset[str]] = RLRunConfig.RUN_CONTROL | {"registered_model"}

    reward_metric: Literal["em", "f1"] = Field("f1", description="Answer score of the reward.")
    format_penalty: float = Field(0.2, ge=0, description="Subtracted once for a broken tag grammar.")
    registered_model: str = Field("advrag-reasoner", min_length=1,
                                  description="Registry name of the result.")
    exploration: RexExploration | None = Field(
        None, description="REX-RAG's probes, trajectory filter and policy correction "
        "({kind: rex, ...}); none = plain rollouts.")
