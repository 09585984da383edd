"""The ``arr`` recipe's settings: the shared RL fields, plus the two agents' layout, eq. 5's λ
and n, eq. 8's δ and patterns, and the ablation switches (ARR §4.2)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from advrag.config.base import OverridesOf
from advrag.config.engine import SFTConfig, TrainConfig
from advrag.config.flows import BenchmarkConfig
from advrag.config.rl import RLRunConfig, WarmupSection
from advrag.core.patterns import PATTERN_SCORES, PATTERNS
from advrag.recipes.curated import CurateSection
from advrag.recipes.rex_rag.config import RexExploration

ReasonerAction = Literal["think", "search", "verify", "answer"]
VerifierAction = Literal["verify", "selected_doc", "response", "final_answer"]


class ArrConfig(RLRunConfig):
    """`advrag adversarial-rl`: ARR, joint GRPO of a Reasoner and a Verifier (ARR §4.2).

    Defaults are the CPU recipe (SmolLM2, LoRA); the paper's values are named
    where they differ. The paper gives no λ, n or δ: the defaults are ours.
    """

    RECIPE: ClassVar[str] = "arr"
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "optim": TrainConfig(lr=5e-5, micro_batch_size=2, max_seq_len=3072, kl_coef=0.001),
        "warmup": WarmupSection(demonstrations=32, sft=SFTConfig(
            lr=2e-4, batch_size=8, micro_batch_size=2, max_seq_len=3072)),
        "evaluate": BenchmarkConfig(methods=["arr", "search_r1"], limit=32),
        "checkpoint_dir": Path(".cache/advrag/checkpoints/arr"), "experiment": "advrag-arr"}
    RUN_CONTROL: ClassVar[frozenset[str]] = RLRunConfig.RUN_CONTROL | {
        "registered_reasoner", "registered_verifier"}

    policies: Literal["shared_lora", "separate"] = Field(
        "shared_lora",
        description="'shared_lora': one base, a LoRA adapter per agent (needs lora); "
        "'separate': a model per agent (LoRA or full).",
    )
    verifier_model: str | None = Field(
        None, min_length=1,
        description="'separate' only: the verifier's starting model; null = `model`.",
    )
    verifier_optim: Annotated[dict[str, Any], OverridesOf(TrainConfig)] = Field(
        default_factory=dict, description="Optimiser settings (as in optim) that differ for the "
        "verifier; checked against optim's fields when the config is loaded.",
    )
    lam: float = Field(0.5, ge=0, description="λ of eq. 5: weight of the beat-the-other bonus.")
    n_bins: int = Field(10, ge=1, description="n of eq. 5: F1 buckets of bin(·).")
    delta: float = Field(0.1, ge=0, description="δ: entropy change treated as flat (eq. 8).")
    pattern_scores: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: dict(PATTERN_SCORES),
        description="Impact score of each entropy pattern (the paper's table).",
    )
    critique_actions: list[VerifierAction] = Field(
        default_factory=lambda: ["verify", "response"], min_length=1,
        description="Verifier actions that get the process advantage (A_sub^v).",
    )
    monitored_actions: list[ReasonerAction] = Field(
        default_factory=lambda: ["think"], min_length=1,
        description="Reasoner actions whose entropy trend gives the impact (A_sub^r).",
    )
    warmup_plan: bool = Field(False, description="The warm-up's reasoner states the question's "
                              "facts before its first search, as the single agent's "
                              "demonstrations do (curation.arr_demonstrations); false = the "
                              "dialogues the adversarial protocol declared.")
    adversarial_reward: bool = Field(True, description="Eq. 5's bonus; false = 'w/o adv-out'.")
    process_advantage: bool = Field(True, description="Eqs. 6–9; false = 'w/o proc-adv'.")
    format_penalty: float = Field(0.2, ge=0, description="Subtracted once from an agent's "
                                  "reward when it broke the tag grammar.")
    registered_reasoner: str = Field("advrag-arr-reasoner", min_length=1,
                                     description="Registry name (reasoner).")
    registered_verifier: str = Field("advrag-arr-verifier", min_length=1,
                                     description="Registry name (verifier).")
    exploration: RexExploration | None = Field(
        None, description="REX-RAG's probes in the reasoner's turns ({kind: rex, ...}; beyond "
        "both papers): a dialogue whose reasoner answered below full marks (F1 < 1) in a free "
        "turn is reopened, scored like any dialogue, and the reasoner's update keeps the "
        "filter's probes with the policy correction; none = ARR's dialogues.")
    curate: CurateSection | None = Field(
        None, description="UR²'s curation in front (beyond both papers): k dialogues per training "
        "question by the start policy in both roles, scored by the Final Predictor's answer, "
        "levels, and the 7:2:1 sample the updates draw from; null = the training questions.")

    @field_validator("pattern_scores")
    @classmethod
    def _every_pattern_scored(cls, scores: dict[str, float]) -> dict[str, float]:
        """One score per pattern of the paper's table, no other key."""
        missing, unknown = set(PATTERNS) - set(scores), set(scores) - set(PATTERNS)
        if missing or unknown:
            raise ValueError(f"give exactly the patterns {', '.join(PATTERNS)} a score (missing: "
                             f"{', '.join(sorted(missing)) or 'none'}; unknown: "
                             f"{', '.join(sorted(unknown)) or 'none'})")
        return scores

    @model_validator(mode="after")
    def _probes_fit(self) -> ArrConfig:
        """A dialogue's probes get the turns their origin left; refuse asking for more."""
        if self.exploration is not None and self.exploration.probe_turns is not None:
            raise ValueError("exploration.probe_turns is for the Search-R1 loop; ARR's dialogue "
                             "probes get the turns their origin left — remove probe_turns")
        return self

    @model_validator(mode="after")
    def _policies_fit(self) -> ArrConfig:
        """Reject policy layouts the flow cannot run, naming the fix."""
        if self.policies == "shared_lora" and self.lora is None:
            raise ValueError("policies: 'shared_lora' needs lora settings — give lora, or use "
                             "policies: separate for full fine-tuning")
        if self.verifier_model is not None and self.policies != "separate":
            raise ValueError("verifier_model: needs policies: separate (a shared base has one "
                             "model) — set policies: separate, or remove verifier_model")
        if self.verifier_model is not None and self.warmup is not None:
            raise ValueError("verifier_model: the warm-up makes one start model for both agents "
                             "— set warmup: null to start the verifier from verifier_model")
        return self
