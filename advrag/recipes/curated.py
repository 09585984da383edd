"""UR²'s curation in front of a recipe (UR² §3.1.2): its settings (``CurateSection``, a
config's ``curate:``) and what a curated recipe does with the sample (``Curated``). UR²
curates by default; GAR takes it as a composition beyond the papers. Curation scores each
training question by k attempts of the recipe's own agent (``Recipe.curation_agent``) with
the start policy, and the 7:2:1 sample it draws is where the recipe's updates take their
questions from."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from advrag.config.base import Strict
from advrag.datasets.records import QARecord


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


class Curated:
    """Mixin for a recipe whose config has a ``curate`` section (null = no curation): it
    needs the curation upstream and draws its updates' questions from the curated sample."""

    curated: list[QARecord] | None = None

    def curation_upstream(self) -> tuple[str, ...]:
        """``("curation",)`` when the config curates."""
        return () if self.config.curate is None else ("curation",)

    def use_curation(self, curated: Sequence[QARecord], stage1: Sequence[QARecord]) -> None:
        """Train on the curated sample (a recipe without UR²'s stage 1 has no use for its pool)."""
        self.curated = list(curated)

    def batch(self, records: Sequence[QARecord], step: int) -> list[QARecord]:
        """The step's questions (the recipe's own draw), from the curated sample when there is
        one; from ``records`` while there is none (no curation, or an empty sample)."""
        return super().batch(self.curated or records, step)

    def curation_metrics(self) -> dict[str, float]:
        """``uncurated_pool`` = 1 when the config curates but the sample was empty."""
        return {} if self.config.curate is None else {"uncurated_pool": float(not self.curated)}
