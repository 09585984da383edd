"""The ``gar`` recipe's settings: the shared RL fields, plus the discriminator, GAR's λ, L and K
(GAR §3)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from advrag.config.base import OverridesOf
from advrag.config.engine import TrainConfig
from advrag.config.rl import RLRunConfig


class GarConfig(RLRunConfig):
    """`advrag rl` with ``recipe: gar``: a reasoner and a slice discriminator trained jointly (GAR §3).

    Two LoRA adapters on one base. Each update slices the reasoner's rollouts,
    mixes in as many reference slices from grounded demonstrations, lets the
    discriminator judge every slice, and updates the reasoner with
    λ1·R_m + λ2·R_s and (``discriminator: trainable``) the discriminator with
    λ3·R_d + λ4·R_a, both by GRPO. The paper's λ are the defaults.
    """

    RECIPE: ClassVar[str] = "gar"
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "optim": TrainConfig(lr=5e-5, micro_batch_size=4, max_seq_len=1024, kl_coef=0.0),
        "checkpoint_dir": Path(".cache/advrag/checkpoints/gar"), "experiment": "advrag-gar"}
    RUN_CONTROL: ClassVar[frozenset[str]] = RLRunConfig.RUN_CONTROL | {
        "registered_reasoner", "registered_discriminator"}

    discriminator_optim: Annotated[dict[str, Any], OverridesOf(TrainConfig)] = Field(
        default_factory=dict, description="Optimiser settings (as in optim) that differ for the "
        "discriminator; checked against optim's fields when the config is loaded.",
    )
    discriminator: Literal["none", "fixed", "trainable"] = Field(
        "trainable", description="Table 4's rows: 'none' = R_m only, no discriminator; 'fixed' = "
        "the SFT discriminator scores but never learns; 'trainable' = joint adversarial RL.",
    )
    discriminator_adapter: Path | None = Field(
        None, description="The SFT discriminator's adapter (`advrag discriminator-sft`); null = a "
        "fresh adapter (an untrained judge).",
    )
    lam1: float = Field(1.0, ge=0, description="λ1: weight of the answer reward R_m.")
    lam2: float = Field(1.0, ge=0, description="λ2: weight of the slice reward R_s.")
    lam3: float = Field(1.0, ge=0, description="λ3: weight of the GAN term R_d (0 = 'R_a only').")
    lam4: float = Field(0.5, ge=0, description="λ4: weight of the alignment term R_a (0 = 'R_d only').")
    max_slice_tokens: int = Field(320, ge=8, description="GAR's L: most tokens per slice.")
    max_judge_tokens: int = Field(128, ge=8, description="GAR's K: most tokens per judgment.")
    malformed_penalty: float = Field(1.0, ge=0, description="Subtracted from a judgment with no "
                                     "readable verdict (its slice then scores 0.5).")
    reward_metric: Literal["em", "f1"] = Field("em", description="R_m: EM (paper) or F1 of the answer.")
    registered_reasoner: str = Field("advrag-gar-reasoner", min_length=1,
                                     description="Registry name (reasoner).")
    registered_discriminator: str = Field("advrag-gar-discriminator", min_length=1,
                                          description="Registry name (trained discriminator).")
    @model_validator(mode="after")
    def _adapters_need_lora(self) -> GarConfig:
        """Both agents are LoRA adapters on one base."""
        if self.lora is None:
            raise ValueError("lora: GAR keeps the reasoner and the discriminator as two LoRA "
                             "adapters on one base — give lora settings")
        return self
