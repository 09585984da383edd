"""Typed configuration of GAR's discriminator SFT (`advrag discriminator-sft`).

Defaults are the CPU demo recipe (SmolLM2, LoRA, a few dozen training
questions); the paper's values are named where they differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from advrag.config.base import Strict
from advrag.config.engine import AMX_ATTENTION, LoraSettings, SFTConfig


class JudgeSection(Strict):
    """Who labels the slices sound or unsound (GAR §4.1: an API model, GPT-o4-mini)."""

    kind: Literal["grounded", "llm"] = Field("grounded", description="'grounded': the offline "
                                             "world's rule-based judge (gold facts, retrieved "
                                             "passages); 'llm': a model behind endpoint.")
    endpoint: str | None = Field(None, pattern=r"^https?://", description="With kind 'llm': the "
                                 "OpenAI-compatible server (http://host:port, e.g. vLLM).")
    model: str | None = Field(None, min_length=1, description="The served model's name; null = "
                              "the first the server lists.")
    timeout_s: float = Field(60.0, gt=0, description="Per-request limit; a request that runs "
                             "past it is counted (malformed/timeout) and its slice dropped.")
    max_tokens: int = Field(128, ge=1, description="Most tokens of one judgment (GAR's K).")
    concurrency: int = Field(4, ge=1, description="Requests in flight at once.")
    max_context_chars: int = Field(4000, ge=0, description="The retrieved passages shown with a "
                                   "slice are cut at this many characters (the model's context).")
    cache_dir: Path = Field(Path(".cache/advrag/gar_judge"), description="Replies are cached "
                            "here by (endpoint, model, prompt).")

    @model_validator(mode="after")
    def _llm_needs_an_endpoint(self) -> JudgeSection:
        if self.kind == "llm" and self.endpoint is None:
            raise ValueError("judge.kind 'llm' needs judge.endpoint: the URL of an "
                             "OpenAI-compatible server, e.g. http://127.0.0.1:8000 for "
                             "`vllm serve <model>`")
        return self


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
                          "held-out AUROC of P(yes); the best epoch's adapter is kept.")
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
    checkpoint_dir: Path = Field(Path(".cache/advrag/checkpoints/discriminator"),
                                 description="The adapter (adapter/) and merged model (model/).")
    experiment: str = Field("advrag-discriminator", min_length=1,
                            description="MLflow experiment name (a parent run's, when nested).")
    registered_model: str = Field("advrag-discriminator", min_length=1,
                                  description="Registry name of the merged discriminator.")
    seed: int = Field(0, ge=0, lt=2**32, description="Corruptions, the split, balancing and the "
                      "adapter's initialisation.")
