"""The settings every RL recipe shares, declared once (``RLRunConfig``).

A recipe's config (``advrag.recipes.<name>.config``) extends ``RLRunConfig`` with the
fields that are its own, and gives the shared fields its own defaults in ``DEFAULTS``
(a shallow mapping applied to the keys a file leaves out, exactly as a field's default
would be): one declaration, one description and one read path per setting.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from advrag.config.base import Strict
from advrag.config.engine import AMX_ATTENTION, LoraSettings, SFTConfig, TrainConfig
from advrag.config.flows import BenchmarkConfig


class WarmupSection(Strict):
    """SFT warm-up on grounded protocol demonstrations before RL (the cold start)."""

    demonstrations: int = Field(64, ge=1, description="Training questions turned into demonstrations.")
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(lr=2e-4, batch_size=8, epochs=3, max_seq_len=3072),
        description="The SFT settings (lr, epochs, batch_size, micro_batch_size, max_seq_len, …).",
    )


class RLRunConfig(Strict):
    """Settings every RL recipe shares (the local engine on the offline world).

    ``RECIPE`` is the recipe's name (the ``recipe:`` a file must carry, filled in when it
    is absent); ``DEFAULTS`` the recipe's defaults of shared fields. ``RUN_CONTROL`` names
    the fields a resumed run may change (how long and where it runs, on which rollout
    engine, whether its update runs compiled or with the bf16 attention kernels, what it is
    logged and registered as); every other field must match the checkpoint's
    (``config_hash`` without them). A recipe adds its registered names to it.
    """

    RECIPE: ClassVar[str] = ""
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    RUN_CONTROL: ClassVar[frozenset[str]] = frozenset({
        "steps", "max_train_minutes", "checkpoint_every", "checkpoint_dir", "experiment",
        "evaluate", "world_dir", "index_dir", "rollout_backend", "benchmark_base",
        "compile_update", "amx_attention", "compile_rollout"})

    recipe: str = Field(description="Training recipe (the table in advrag.recipes): grpo, "
                        "arr, ur2 or gar; picks the config's fields.")
    model: str = Field("smollm2", min_length=1, description="Policy to start from: 'smollm2', "
                       "a directory, a .gguf, a hub id or models:/name@alias.")
    lora: LoraSettings | None = Field(
        default_factory=lambda: LoraSettings(r=16, alpha=32),
        description="LoRA settings (r, alpha, dropout, target_modules); null = full fine-tune.",
    )
    optim: TrainConfig = Field(
        default_factory=lambda: TrainConfig(lr=1e-5, micro_batch_size=4, max_seq_len=3072),
        description="Optimiser and policy-loss settings (lr, kl_coef, advantage, …).",
    )
    warmup: WarmupSection | None = Field(
        default_factory=WarmupSection,
        description="SFT warm-up on grounded demonstrations before RL (its LoRA is merged into "
        "the base RL starts from); null skips it.",
    )
    steps: int = Field(8, ge=1, description="Updates to run (in total, across resumes).")
    questions_per_step: int = Field(2, ge=1, description="Distinct questions per update.")
    group_size: int = Field(4, ge=1, description="Rollouts per question: one GRPO group "
                            "(every agent of the recipe shares it).")
    max_turns: int = Field(4, ge=1, description="Turns per rollout: Search-R1 searches (then a "
                           "forced answer); ARR: reasoner messages per dialogue, the answer "
                           "included (paper 5), so T − 1 searches at most.")
    topk: int = Field(3, ge=1, description="Passages per search.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of rollouts.")
    max_new_tokens: int = Field(128, ge=1, description="Tokens per generation call.")
    cpu_bf16: bool = Field(True, description="bf16 autocast on CPUs that run bf16 natively.")
    amx_attention: bool = Field(True, description=AMX_ATTENTION)
    compile_update: bool | Literal["auto"] = Field(
        "auto", description="Run the update's decoder layers through torch.compile (needs a C++ "
        "compiler on a CPU): a one-off compile of about half a minute (seconds once inductor's "
        "cache holds it), then faster updates. 'auto' = on a CPU with a C++ compiler, for runs "
        "that train at least 160 sequences (updates × sequences per update; the warm-up counts "
        "its own), else off.",
    )
    compile_rollout: bool | Literal["auto"] = Field(
        "auto", description="Run vLLM rollout engines on their torch.compile'd graph instead of "
        "eager: rollouts 1.15x faster on a 2-core AVX512-BF16 CPU (docs, Performance), for "
        "about a minute more at the engine's start (45 s once vLLM's and inductor's caches hold "
        "the graph). 'auto' = for runs that sample at least 3,000 rollouts (steps × questions "
        "× group; curation: questions × k), else eager. Rollouts on transformers ignore it.",
    )
    rollout_backend: Literal["auto", "hf", "hf-fp16", "vllm"] = Field(
        "auto", description="Rollouts: 'hf' = transformers generate (a bf16 copy under cpu_bf16); "
        "'hf-fp16' = transformers on a copy with fp16 weights (fp32 activations; fbgemm on a CPU); "
        "'vllm' = a vLLM engine per agent that receives the new weights after every update "
        "(`make vllm`); 'auto' = vLLM where it is installed and runs the model, else 'hf-fp16' "
        "for an fp32 policy on an x86 CPU, else 'hf'.",
    )
    max_train_minutes: float | None = Field(
        None, gt=0, description="Wall-clock budget of this run's updates: stop (and checkpoint) "
        "after the update that spends it; null = run all steps. The LR schedule still spans steps.",
    )
    checkpoint_every: int = Field(4, ge=1, description="Save every agent every N updates.")
    checkpoint_dir: Path = Field(description="Checkpoints (one subdirectory per agent of a "
                                 "two-agent recipe); a rerun resumes from the latest.")
    experiment: str = Field(min_length=1, description="MLflow experiment name.")
    world_dir: Path = Field(Path("data/world"), description="The offline world's files.")
    index_dir: Path = Field(Path("processed/index"), description="Dense index from `dvc repro`.")
    evaluate: BenchmarkConfig | None = Field(
        default_factory=lambda: BenchmarkConfig(methods=["search_r1"], limit=32),
        description="Benchmark of the base, warmed-up and trained models on held-out data; "
        "null skips it.",
    )
    benchmark_base: bool = Field(
        True, description="Benchmark the untrained base model as well (with evaluate): the "
        "reference row; false spares its minutes where only warm-up → trained matters.",
    )

    @model_validator(mode="before")
    @classmethod
    def _recipe_defaults(cls, data: Any) -> Any:
        """The recipe's name and its defaults, for the keys the file leaves out."""
        if not isinstance(data, dict):
            return data
        return {"recipe": cls.RECIPE, **copy.deepcopy(cls.DEFAULTS), **data}

    @field_validator("recipe")
    @classmethod
    def _this_recipe(cls, name: str) -> str:
        """A file for another recipe is not this recipe's config."""
        if cls.RECIPE and name != cls.RECIPE:
            raise ValueError(f"this is the {cls.RECIPE!r} recipe's config, the file names "
                             f"{name!r}: load it as that recipe's (its `recipe:` picks it)")
        return name
