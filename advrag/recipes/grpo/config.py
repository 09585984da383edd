"""The ``grpo`` recipe's settings: the single search agent's (``recipes.search_agent``), with
its checkpoint directory and experiment."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from advrag.recipes.search_agent.config import SearchAgentConfig


class GrpoConfig(SearchAgentConfig):
    """`advrag rl` with ``recipe: grpo`` (or `advrag train`): GRPO (or REINFORCE++/Dr.GRPO
    through ``optim.advantage``) on a Search-R1-style agent over the offline world."""

    RECIPE: ClassVar[str] = "grpo"
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "checkpoint_dir": Path(".cache/advrag/checkpoints/train"), "experiment": "advrag-train"}
