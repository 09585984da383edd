"""Settings the local engine reads (torch-free): optimiser, LoRA shape, SFT warm-up.

Flow configs embed these models as typed sections (``optim:``, ``lora:``,
``warmup.sft:``), so a typo or a bad value fails when the YAML is loaded, before
any model is; the engine reads the very same objects.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from advrag.config.base import Strict

AMX_ATTENTION = (
    "bf16 updates on a CPU with AVX512-BF16 run attention's forward and backward on the "
    "project's block kernels, on AMX tiles where the CPU has them, else on AVX512-BF16 dot "
    "products (the name predates the second; heads of 64; built on first use with the system's "
    "C++ compiler, 40-55 s once), each micro-batch's rows packed into one without their padding; "
    "false = SDPA's everywhere, rows padded. Elsewhere it changes nothing.")
"""The description of the ``amx_attention`` setting every config that trains carries."""


class TrainConfig(Strict):
    """Optimisation settings of the local engine; defaults follow Search-R1's GRPO recipe."""

    lr: float = Field(1e-6, gt=0, description="Peak AdamW learning rate.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW decoupled weight decay.")
    warmup_steps: int = Field(0, ge=0, description="Updates of linear warm-up to the peak lr.")
    total_steps: int = Field(1000, ge=1, description="Updates the decay schedule spans.")
    decay: Literal["cosine", "linear", "constant"] = Field(
        "constant", description="Learning-rate shape after warm-up."
    )
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient L2 norm.")
    micro_batch_size: int = Field(4, ge=1, description="Sequences per forward/backward pass.")
    max_seq_len: int = Field(3072, ge=2, description="Tokens one trajectory may hold; a config "
                             "whose episodes could exceed it is refused (agents.budgets).")
    ppo_epochs: int = Field(1, ge=1, description="Optimizer steps per batch of rollouts.")
    clip_low: float = Field(0.2, ge=0, lt=1, description="PPO ratio clip below: 1 − clip_low.")
    clip_high: float = Field(
        0.2, ge=0, description="PPO ratio clip above: 1 + clip_high (DAPO: 0.28)."
    )
    dual_clip: float | None = Field(
        3.0, gt=1, description="Dual-clip cap for A < 0; None disables."
    )
    kl_coef: float = Field(
        0.001, ge=0, description="Weight of the KL(π‖π_ref) loss; 0 skips the reference."
    )
    kl_kind: Literal["k1", "k2", "k3"] = Field(
        "k3", description="KL estimator (k3 = low-variance)."
    )
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = Field(
        "token-mean", description="How per-token losses are reduced."
    )
    policy_loss: Literal["ppo_clip"] = Field(
        "ppo_clip", description="Policy loss (``core.losses.POLICY_LOSSES``): PPO clip surrogate."
    )
    advantage: Literal["grpo", "drgrpo", "reinforce_pp"] = Field(
        "grpo",
        description="Outcome advantage (``core.advantages.ADVANTAGE_ESTIMATORS``): GRPO "
        "z-score, Dr.GRPO mean-centring, or REINFORCE++ group baseline.",
    )
    seed: int = Field(0, ge=0, lt=2**32,
                      description="Seed of python, numpy and torch (adapter initialisation, "
                      "trainer construction) and of a vLLM rollout sampler.")

    @model_validator(mode="before")
    @classmethod
    def _group_size_is_the_recipes(cls, data: Any) -> Any:
        """``group_size`` is a recipe setting (every agent shares it), not an optimiser's."""
        if isinstance(data, dict) and "group_size" in data:
            raise ValueError("group_size: rollouts per question is set once, at the top level "
                             "of the recipe's config (`group_size: 4`), not in an optimiser")
        return data


class LoraSettings(Strict):
    """LoRA adapter shape (peft ``LoraConfig``)."""

    r: int = Field(16, ge=1, description="Rank of the low-rank update.")
    alpha: int = Field(32, ge=1, description="Scaling numerator: the update is scaled by alpha/r.")
    dropout: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Dropout on the adapter input; 0 keeps train- and eval-mode log-probs equal.",
    )
    target_modules: str | list[str] = Field(
        "all-linear", description="Module names to adapt; 'all-linear' = every linear but the head."
    )


class SFTConfig(Strict):
    """Settings of the supervised warm-up."""

    lr: float = Field(2e-4, gt=0, description="AdamW learning rate (constant).")
    epochs: int = Field(1, ge=1, description="Passes over the demonstrations.")
    batch_size: int = Field(8, ge=1, description="Demonstrations per optimizer step.")
    micro_batch_size: int = Field(4, ge=1, description="Sequences per forward/backward pass.")
    max_seq_len: int = Field(3072, ge=2, description="Tokens one demonstration may hold; a "
                             "longer one is refused before training, never cut.")
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient L2 norm.")
    seed: int = Field(0, ge=0, lt=2**32,
                      description="Order of the demonstrations; in a recipe's warm-up also "
                                  "the adapter's initialisation.")
