"""The ``grpo`` recipe's settings: the shared RL fields, plus its reward and registry name."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from advrag.config.rl import RLRunConfig
from advrag.recipes.rex_rag.config import RexExploration


class GrpoConfig(RLRunConfig):
    """`advrag rl` with ``recipe: grpo`` (or `advrag train`): GRPO (or REINFORCE++/Dr.GRPO
    through ``optim.advantage``) on a Search-R1-style agent over the offline world."""

    RECIPE: ClassVar[str] = "grpo"
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "checkpoint_dir": Path(".cache/advrag/checkpoints/train"), "experiment": "advrag-train"}
    RUN_CONTROL: ClassVar[frozenset[str]] = RLRunConfig.RUN_CONTROL | {"registered_model"}

    reward_metric: Literal["em", "f1"] = Field("f1", description="Answer score of the reward.")
    format_penalty: float = Field(0.2, ge=0, description="Subtracted once for a broken tag grammar.")
    registered_model: str = Field("advrag-reasoner", min_length=1,
                                  description="Registry name of the result.")
    exploration: RexExploration | None = Field(
        None, description="REX-RAG's probes, trajectory filter and policy correction "
        "({kind: rex, ...}); none = plain rollouts.")
