"""The ``gar`` recipe's settings: the shared RL fields, plus the discriminator, GAR's λ, L and K
(GAR §3); and the discriminator's SFT before it (``DiscriminatorSFTConfig``, `advrag
discriminator-sft`: defaults are the CPU demo recipe — SmolLM2, LoRA, a few dozen training
questions — the paper's values named where they differ)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from advrag.config.base import OverridesOf, Strict
from advrag.config.engine import AMX_ATTENTION, LoraSettings, SFTConfig, TrainConfig
from advrag.config.gar import JudgeSection
from advrag.config.rl import RLRunConfig
from advrag.curation.slicing import MIN_SLICE_TOKENS
from advrag.recipes.curated import CurateSection
from advrag.recipes.rex_rag.config import RexExploration


def evidence_tokens_field():
    """A judge prompt's evidence cap, one setting in the discriminator's SFT and in GAR's RL:
    768 holds every passage of three searches of three 60-word passages (about 85 SmolLM2
    tokens each)."""
    return Field(768, ge=0, description="Most tokens of the passages retrieved before a slice "
                 "that a judge prompt carries (the latest kept; the earlier ones left out are "
                 "counted). Keep it equal in the discriminator's SFT and in GAR's RL.")


class DiscriminatorSFTConfig(Strict):
    """GAR §3/§4.1: SFT of the discriminator on judge-labelled slices, balanced 1:1 yes/no."""

    model: str = Field("smollm2", min_length=1, description="Base model the discriminator's "
                       "adapter trains on (same specs as benchmark); the flow's `base` overrides it.")
    lora: LoraSettings = Field(default_factory=lambda: LoraSettings(r=16, alpha=32),
                               description="The discriminator adapter's shape.")
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(lr=1e-4, epochs=4, batch_size=8, micro_batch_size=4,
                                          max_seq_len=3072),
        description="SFT settings; epochs is the most that run (early stopping may end sooner). "
        "Paper: lr 1e-4, 500 steps of batch 128.",
    )
    patience: int = Field(1, ge=1, description="Stop after this many epochs without a higher "
                          "AUROC of P(yes) on the dev slices (dev_fraction); the best epoch's "
                          "adapter is kept.")
    cpu_bf16: bool = Field(True, description="bf16 autocast on CPUs that run bf16 natively.")
    amx_attention: bool = Field(True, description=AMX_ATTENTION)
    judge: JudgeSection = Field(default_factory=JudgeSection, description="The slice labeller; "
                                "slices it cannot label are counted and dropped.")
    max_slice_tokens: int = Field(320, ge=1, description="GAR's L: most tokens per slice.")
    max_new_tokens: int = Field(128, ge=1, description="GAR's K: most tokens of one judgment "
                                "(SFT targets are cut there; evaluation generates at most K).")
    evidence_tokens: int = evidence_tokens_field()
    questions: int | None = Field(64, ge=1, description="Build slices from the first N training "
                                  "questions (paper: 10 % of the training set); null = all.")
    heldout_fraction: float = Field(0.25, gt=0, lt=1, description="Share of those questions "
                                    "whose slices are held out (early stopping, evaluation).")
    dev_fraction: float = Field(1 / 3, gt=0, lt=1, description="Share of the held-out "
                                "questions whose slices early stopping reads to choose the "
                                "epoch (the dev slices); the others are the held-out measure, "
                                "so the epoch is never chosen on the slices it is scored on.")
    topk: int = Field(3, ge=1, description="Passages per search in the demonstrations.")
    max_turns: int = Field(4, ge=1, description="Demonstrations of chains longer than this are "
                           "skipped (searches per rollout).")
    rollouts: int = Field(0, ge=0, description="Rollouts of each question sampled from the base "
                          "(the start policy, temperature 1) whose slices the judge labels and "
                          "adds, so the discriminator also learns from and is measured on the "
                          "reasoner's own reasoning; 0 = demonstrations and corrupted copies only.")
    rollout_max_new_tokens: int = Field(128, ge=1, description="Tokens per turn of those "
                                        "rollouts (the RL config's max_new_tokens).")
    world_dir: Path = Field(Path("data/world"), description="The offline world's files.")
    index_dir: Path = Field(Path("processed/index"), description="Dense index from `dvc repro`.")
    out_dir: Path = Field(Path("processed/gar_slices"), description="The slice set "
                          "(slices.jsonl) is written here, behind its GX gate.")
    slices: Path | None = Field(None, description="Train on this labelled slice set (a "
                                "slices.jsonl written before, e.g. by `advrag gar-slices`), "
                                "gated again, instead of building one; null = build it.")
    checkpoint_dir: Path = Field(Path(".cache/advrag/checkpoints/discriminator"),
                                 description="The adapter (adapter/) and merged model (model/).")
    experiment: str = Field("advrag-discriminator", min_length=1,
                            description="MLflow experiment name (a parent run's, when nested).")
    registered_model: str = Field("advrag-discriminator", min_length=1,
                                  description="Registry name of the merged discriminator.")
    seed: int = Field(0, ge=0, lt=2**32, description="Corruptions, the split, balancing and the "
                      "adapter's initialisation.")


class GarConfig(RLRunConfig):
    """`advrag rl` with ``recipe: gar``: a reasoner and a slice discriminator trained jointly (GAR §3).

    Two LoRA adapters on one base. Each update slices the reasoner's rollouts,
    mixes in as many reference slices from grounded demonstrations, lets the
    discriminator judge every slice, and updates the reasoner with
    λ1·R_m + λ2·R_s and (``discriminator: trainable``) the discriminator with
    λ3·R_d + λ4·R_a, both by GRPO. The paper's λ, L, K, R_m (exact match) and
    r_s (the 0/1 verdict) are the defaults. ``configs/gar.yaml`` also turns the
    reasoner's KL term on (App. H pairs R_d with KL regularisation) and keeps
    the discriminator's off (its reference would be the base without its SFT
    adapter).
    """

    RECIPE: ClassVar[str] = "gar"
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "optim": TrainConfig(lr=5e-5, micro_batch_size=4, max_seq_len=3072, kl_coef=0.0),
        "checkpoint_dir": Path(".cache/advrag/checkpoints/gar"), "experiment": "advrag-gar"}
    RUN_CONTROL: ClassVar[frozenset[str]] = RLRunConfig.RUN_CONTROL | {
        "registered_reasoner", "registered_discriminator"}

    discriminator_optim: Annotated[dict[str, Any], OverridesOf(TrainConfig)] = Field(
        default_factory=dict, description="Optimiser settings (as in optim) that differ for the "
        "discriminator; checked against optim's fields when the config is loaded.",
    )
    discriminator: Literal["none", "fixed", "trainable"] = Field(
        "trainable", description="Table 4's rows: 'none' = R_m only, no discriminator; 'fixed' = "
        "the discriminator scores but never learns; 'trainable' = joint adversarial RL.",
    )
    discriminator_sft: bool = Field(
        True, description="Start the discriminator from its SFT (`advrag discriminator-sft`, a "
        "pipeline stage); false = the base model judges, never tuned (Table 4 row 3 with "
        "discriminator: fixed).",
    )
    discriminator_adapter: Path | None = Field(
        None, description="The SFT discriminator's adapter (the pipeline sets it); null with "
        "discriminator: trainable = a fresh adapter (an untrained judge).",
    )
    lam1: float = Field(1.0, ge=0, description="λ1: weight of the answer reward R_m.")
    lam2: float = Field(1.0, ge=0, description="λ2: weight of the slice reward R_s.")
    lam3: float = Field(1.0, ge=0, description="λ3: weight of the GAN term R_d (0 = 'R_a only').")
    lam4: float = Field(0.5, ge=0, description="λ4: weight of the alignment term R_a (0 = 'R_d only').")
    max_slice_tokens: int = Field(320, ge=8, description="GAR's L: most tokens per slice.")
    min_slice_tokens: int = Field(
        MIN_SLICE_TOKENS, ge=0, description="Fewest tokens per slice (App. F.1's range; the floor "
        "is ours, as the discriminator data's): shorter pieces merge with a neighbour.")
    max_judge_tokens: int = Field(128, ge=8, description="GAR's K: most tokens per judgment.")
    evidence_tokens: int = evidence_tokens_field()
    slice_score: Literal["verdict", "p_yes"] = Field(
        "verdict", description="r_s of a judgment: its written verdict, 1 = yes, 0 = no (the "
        "paper's), or P(yes) at its verdict (ours); without a verdict its slice earns 0.")
    malformed_penalty: float = Field(1.0, ge=0, description="Subtracted from a judgment with no "
                                     "verdict (its slice then scores 0).")
    reward_metric: Literal["em", "f1"] = Field("em", description="R_m: EM (paper) or F1 of the answer.")
    curate: CurateSection | None = Field(
        None, description="UR²'s curation in front (beyond both papers): k attempts per training "
        "question by the start policy, levels, and the 7:2:1 sample the updates draw from; "
        "null = the training questions as they are.")
    exploration: RexExploration | None = Field(
        None, description="REX-RAG's probes in the reasoner's rollouts ({kind: rex, ...}; beyond "
        "both papers): probes are judged and rewarded like any rollout, and the reasoner's "
        "update keeps the filter's probes with the policy correction; none = GAR's rollouts.")
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

    @model_validator(mode="after")
    def _untuned_means_no_adapter(self) -> GarConfig:
        """An untuned discriminator loads no SFT adapter."""
        if not self.discriminator_sft and self.discriminator_adapter is not None:
            raise ValueError("discriminator_sft: false judges with the base model — drop "
                             "discriminator_adapter, or set discriminator_sft: true")
        return self
