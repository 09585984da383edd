"""The ``ur2`` recipe's settings: the single search agent's (``recipes.search_agent``), plus
curation (``recipes.curated.CurateSection``, on by default), the two stages, summaries and task
mixing (UR² §3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from advrag.config.engine import TrainConfig
from advrag.config.flows import SummaryConfig
from advrag.recipes.curated import CurateSection
from advrag.recipes.search_agent.config import SearchAgentConfig


class UR2Config(SearchAgentConfig):
    """`advrag rl` with ``recipe: ur2``: curation → stage 1 → stage 2 (UR² §3).

    Stage 1 trains on the reasoning-only questions the policy never solves (App. C.5),
    all with the retrieval prompt, with the format + retrieval reward; stage 2 on the
    7:2:1 curated sample, prompts by task mixing, with the answer + format reward; both
    subtract ``fallback_penalty`` per fallback fault.
    UR² trains with the REINFORCE++ baseline (App. C.1): ``optim.advantage`` defaults to it.
    """

    RECIPE: ClassVar[str] = "ur2"
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "optim": TrainConfig(lr=1e-5, micro_batch_size=4, max_seq_len=3072,
                             advantage="reinforce_pp"),
        "checkpoint_dir": Path(".cache/advrag/checkpoints/ur2"), "experiment": "advrag-ur2"}

    curate: CurateSection | None = Field(
        default_factory=CurateSection,
        description="Difficulty curation before RL; null = train on the uncurated questions.",
    )
    stage1_steps: int = Field(10, ge=0, description="Updates with the stage-1 reward before "
                              "stage 2 (paper 10); 0 = 'w/o stage 1'.")
    fallback_penalty: float = Field(0.5, ge=0, description="Per fallback fault (paper 0.5); 0 = "
                                    "'w/o P_fallback'.")
    summary: SummaryConfig = Field(
        default_factory=SummaryConfig,
        description="LLM-summarised retrieval with the fallback message (§3.1.1); summarise: "
        "false = raw documents ('w/o summary').",
    )
    reasoning_share: float = Field(0.2, ge=0, le=1, description="Share of reasoning-only world "
                                   "items (reasoning_train.jsonl) among the training questions "
                                   "(the paper's math; stage 1 trains on those curation filters).")
    task_mixing: bool = Field(True, description="Stage 2 gives reasoning-only items below hard "
                              "a direct prompt (§3.1.2); false = every item retrieves "
                              "('w/o task mixing', Table 4).")
