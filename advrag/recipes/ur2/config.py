"""The ``ur2`` recipe's settings: the single search agent's (``recipes.search_agent``), plus curation (``CurateSection``), the two
stages, summaries and task mixing (UR² §3)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from advrag.config.base import Strict
from advrag.config.engine import TrainConfig
from advrag.config.flows import SummaryConfig
from advrag.recipes.search_agent.config import SearchAgentConfig


class CurateSection(Strict):
    """UR²'s difficulty estimation and 7:2:1 sampling (§3.1.2); the paper's values are named."""

    k: int = Field(4, ge=1, description="Rollouts per question (paper 20; each costs a whole "
                   "agent rollout on this CPU).")
    metric: Literal["em", "f1"] = Field("f1", description="Answer score averaged into s.")
    thresholds: dict[Literal["easy", "medium", "hard"], Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: {"easy": 0.8, "medium": 0.5, "hard": 0.2},
        description="Lowest score of each level; below hard's a question is filtered (paper's).",
    )
    ratio: dict[Literal["easy", "medium", "hard"], Annotated[float, Field(ge=0)]] = Field(
        default_factory=lambda: {"hard": 7.0, "medium": 2.0, "easy": 1.0},
        description="Hard:medium:easy of the sample (paper 7:2:1).",
    )
    questions: int | None = Field(None, ge=1, description="Score only the first N training "
                                  "questions; null = all.")
    sample_size: int | None = Field(None, ge=1, description="Questions in the curated sample; "
                                    "null = as many as the ratio allows.")
    batch_questions: int = Field(8, ge=1, description="Questions rolled out together (k each).")
    ratio_tolerance: float = Field(0.05, ge=0, le=1, description="The gate's tolerance on each "
                                   "level's share of the sample.")
    out_dir: Path = Field(Path("processed/curated"), description="scores/curated/stage1 jsonl "
                          "and summary.json go here.")
    cache_dir: Path = Field(Path(".cache/advrag/curation"), description="Finished questions per "
                            "(policy, k, rollout settings): a killed curation resumes from it.")
    experiment: str = Field("advrag-curate", min_length=1, description="MLflow experiment name.")

    @model_validator(mode="after")
    def _levels_ordered(self) -> CurateSection:
        """Thresholds fall from easy to hard and name all three levels."""
        t = self.thresholds
        if set(t) != {"easy", "medium", "hard"} or not t["easy"] > t["medium"] > t["hard"]:
            raise ValueError(f"thresholds: give easy > medium > hard, got {dict(t)}")
        return self


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
