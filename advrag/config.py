"""Typed run configuration (pydantic), read from ``configs/*.yaml``.

One model per flow; each field says what it does. Defaults are the CPU demo
recipe: a few dozen held-out questions of the offline world with SmolLM2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

Method = Literal["cot", "naive_rag", "search_r1", "arr"]


class Strict(BaseModel):
    """Base: unknown keys are errors, so a typo in a YAML file is caught."""

    model_config = ConfigDict(extra="forbid")


class WorldSection(Strict):
    """Size and seed of the generated offline world."""

    out_dir: Path = Field(Path("data/world"), description="Where the world's jsonl files go.")
    seed: int = Field(13, description="Generator seed; the same seed gives the same world.")
    n_train: int = Field(500, description="Training questions.")
    n_dev: int = Field(100, description="Development questions.")
    n_test: int = Field(100, description="Held-out test questions.")


class DataConfig(Strict):
    """The data plane: build the world, gate it, version it, index it."""

    raw_dir: Path = Field(Path("data"), description="Raw inputs tracked by data.dvc.")
    world: WorldSection = Field(default_factory=WorldSection)
    extra_files: list[Path] = Field(
        default_factory=list, description="More QA jsonl/parquet files to gate with the world."
    )
    dvc_repro: bool = Field(True, description="Run `dvc repro` (chunk → embed → index).")


class BenchmarkConfig(Strict):
    """Which methods to evaluate, on what, with which model and retriever."""

    model: str = Field("smollm2", description="Policy: 'smollm2', a directory, a .gguf, a hub id or models:/name@alias.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="'auto' = bfloat16 where the CPU/GPU supports it, else float32."
    )
    methods: list[Method] = Field(
        default_factory=lambda: ["cot", "naive_rag", "search_r1", "arr"],
        description="Methods to evaluate, in order.",
    )
    datasets: list[str] = Field(
        default_factory=lambda: ["world"],
        description="'world' (the offline world), a standard name (nq, hotpotqa, …) or a file path.",
    )
    split: str = Field("test", description="Split to evaluate.")
    limit: int | None = Field(32, description="Evaluate only the first N questions per dataset.")
    world_dir: Path = Field(Path("data/world"), description="The offline world's files.")
    index_dir: Path = Field(Path("processed/index"), description="Dense index built by `dvc repro`.")
    retriever: Literal["dense", "bm25"] = Field("dense", description="Retriever kind.")
    retriever_url: str | None = Field(None, description="Use a running retrieval server instead.")
    topk: int = Field(3, description="Passages per search.")
    max_turns: int = Field(2, description="Maximum search/dialogue turns per question.")
    max_new_tokens: int = Field(80, description="Token budget per generation call.")
    batch_size: int = Field(32, description="Questions that advance together.")
    datasets_root: Path = Field(Path("data/benchmarks"), description="Where standard QA files live.")
    experiment: str = Field("advrag-benchmark", description="MLflow experiment name.")
    seed: int = Field(0, description="Seed for sampling and bootstrap intervals.")


class DemoConfig(Strict):
    """`make demo`: prepare the data, then benchmark."""

    data: DataConfig = Field(default_factory=DataConfig)
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)


def load_config(path: Path | str, model: type[Strict]) -> Strict:
    """Read a YAML file into ``model``; errors name the file and the bad field."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Config file {path} does not exist (see configs/ for examples).")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}.")
    try:
        return model.model_validate(raw)
    except Exception as err:
        raise ValueError(f"{path}: invalid {model.__name__}:\n{err}") from err


class WarmupSection(Strict):
    """SFT warm-up on grounded protocol demonstrations before RL (the cold start)."""

    demonstrations: int = Field(64, ge=1, description="Training questions turned into demonstrations.")
    sft: dict = Field(
        default_factory=lambda: {"lr": 2e-4, "batch_size": 8},
        description="Local-engine SFTConfig fields (lr, epochs, batch_size, micro_batch_size, …).",
    )


class TrainFlowConfig(Strict):
    """`advrag train`: GRPO on a Search-R1-style agent over the offline world."""

    model: str = Field("smollm2", description="Policy to start from (same specs as benchmark).")
    lora: dict | None = Field(
        default_factory=lambda: {"r": 16, "alpha": 32},
        description="LoRA settings (r, alpha, dropout, target_modules); null = full fine-tune.",
    )
    optim: dict = Field(
        default_factory=lambda: {"lr": 1e-5, "group_size": 4, "micro_batch_size": 4,
                                 "max_seq_len": 1024},
        description="Local-engine TrainConfig fields (lr, kl_coef, advantage, group_size, …).",
    )
    cpu_bf16: bool = Field(True, description="bf16 autocast on CPUs that run bf16 natively.")
    warmup: WarmupSection | None = Field(
        default_factory=WarmupSection,
        description="SFT warm-up before GRPO (its LoRA is merged into the base); null skips it.",
    )
    steps: int = Field(8, ge=1, description="GRPO updates to run (in total, across resumes).")
    questions_per_step: int = Field(2, ge=1, description="Distinct questions per update.")
    reward_metric: Literal["em", "f1"] = Field("f1", description="Answer score of the reward.")
    format_penalty: float = Field(0.2, ge=0, description="Subtracted once for a broken tag grammar.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of rollouts.")
    max_turns: int = Field(2, ge=1, description="Search turns per rollout.")
    topk: int = Field(3, ge=1, description="Passages per search.")
    max_new_tokens: int = Field(64, ge=1, description="Tokens per generation call.")
    checkpoint_every: int = Field(4, ge=1, description="Save a checkpoint every N updates.")
    checkpoint_dir: Path = Field(Path(".cache/advrag/checkpoints/train"),
                                 description="Checkpoints; a rerun resumes from the latest.")
    world_dir: Path = Field(Path("data/world"), description="The offline world's files.")
    index_dir: Path = Field(Path("processed/index"), description="Dense index from `dvc repro`.")
    experiment: str = Field("advrag-train", description="MLflow experiment name.")
    registered_model: str = Field("advrag-reasoner", description="Registry name of the result.")
    evaluate: BenchmarkConfig | None = Field(
        default_factory=lambda: BenchmarkConfig(methods=["search_r1"], limit=32),
        description="Benchmark of base and trained model on held-out data; null skips it.",
    )
